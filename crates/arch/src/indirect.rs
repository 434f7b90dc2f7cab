//! What an indirect jump was found to jump through, whatever the ISA: the answer of
//! `Isa::analyze_indirect_jump`, which each ISA's table analysis gives in its own terms
//! (`x86_64::jump_table`, `aarch64::jump_table`) and discovery turns into jump tables.

use rivet_elf::Vaddr;

use crate::RegisterId;

/// How one instruction sets a register, for the reaching-definitions walks discovery runs
/// over a function's paths (`Inst::register_definition`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegisterDefinition {
    /// The register keeps its value.
    Unchanged,
    /// Set to this constant address (x86-64: `lea` of a RIP-relative address, `mov` of an
    /// immediate; AArch64: `adr`, and `adrp`, whose page is exactly what it writes).
    Constant(u64),
    /// Set to register `from`, as it was before the instruction, plus `add` (AArch64: the
    /// `add xd, xn, #lo12` that completes an `adrp`, `mov xd, xn`): the walk asks what
    /// reaches `from` there, so an address built in two instructions is one definition.
    Offset { from: RegisterId, add: u64 },
    /// Set to anything else.
    Other,
}

/// The number of entries a table dispatch can index, proven by a range check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexBound {
    pub entries: u64,
    /// The conditional jump that enforces it.
    pub check: Vaddr,
    /// Where out-of-range indices go.
    pub default_target: Vaddr,
}

/// What an indirect jump was found to jump through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndirectJump {
    /// Entries are absolute code addresses of `entry_size` bytes at `table`.
    AbsoluteTable {
        table: Vaddr,
        entry_size: u8,
        bound: Option<IndexBound>,
        /// How many low bits of the index may be non-zero: 8 when it was zero-extended from a
        /// byte (`movzbl`), 32 after a 32-bit write, 64 when nothing is known. A table indexed
        /// by a byte without a range check has exactly 256 entries.
        index_bits: u8,
    },
    /// Target = `base` + sign-extended `entry_size`-byte entry at `table`.
    RelativeTable {
        table: Vaddr,
        base: Vaddr,
        entry_size: u8,
        bound: Option<IndexBound>,
        /// As for `AbsoluteTable`.
        index_bits: u8,
    },
    /// Target = `anchor` + (entry << `shift`), the entry `entry_size` bytes at `table` +
    /// index * `entry_size`, sign-extended when `signed` (AArch64's tables count instructions
    /// from a label of the function, `adr`'s anchor; no relocation marks them).
    ScaledTable {
        table: Vaddr,
        anchor: Vaddr,
        entry_size: u8,
        signed: bool,
        shift: u8,
        bound: Option<IndexBound>,
    },
    /// The target is a pointer read from the fixed address `slot` (GOT entry, function
    /// pointer variable): a tail call.
    MemorySlot { slot: Vaddr },
    /// The target register was computed outside what the analysis models.
    Unknown,
}
