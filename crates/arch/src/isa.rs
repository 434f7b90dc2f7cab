//! [`Isa`]: the one interface through which the rest of Rivet reaches the instruction set.
//!
//! An `Isa` is a plain `Copy` value chosen once from the ELF header and carried in the
//! program (`ir::BinaryInfo::isa`). It answers two kinds of questions. Facts: how long an
//! instruction can be, what fills a gap, which DWARF column is the stack pointer, how many
//! bytes a branch takes and how far its short form reaches, how big a PLT entry is.
//! Operations: decode, analyse an indirect jump, encode a branch, re-place an instruction,
//! write padding and instrumentation probes. Each method matches on the ISA and forwards to
//! that ISA's module (`x86_64/`, `aarch64/`); the match is the only place an ISA is chosen.

use rivet_elf::relocs::{DynRelocKind, RelocKind, RelocTypes};
use rivet_elf::{ElfFile, Vaddr};

use crate::aarch64;
use crate::branch::{BranchEncoder, EncodeError};
use crate::indirect::{IndexBound, IndirectJump};
use crate::inst::Inst;
use crate::probe::{Atomics, IndirectProbeError, ProbeShape};
use crate::x86_64;
use crate::x86_64::jump_table::RegisterId;
use crate::x86_64::probe::Flags;

/// An instruction set Rivet reads and writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Isa {
    X86_64,
    Aarch64,
}

/// The two branches the emitter writes at the end of a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BranchKind {
    /// Unconditional.
    Jump,
    /// Conditional.
    Cond,
}

/// Bytes of a branch in its two forms: the short one, which reaches only nearby code, and
/// the near one, which the emitter uses between fragments and functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BranchSizes {
    pub short: u64,
    pub near: u64,
}

/// How the emitter writes a conditional branch that leaves its fragment for a block of
/// another fragment of the same function, where the near form of a conditional branch is a
/// pair (AArch64; [`Isa::near_conditional_is_a_pair`]). Decided once per rewrite
/// ([`Isa::fragment_exits`]) from a bound on the whole new text that holds before any
/// fragment is placed, so that a fragment's size still never depends on where the others
/// land (docs/architecture.md: fragment-local relaxation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FragmentExits {
    /// Through an island: the branch in its short form goes to a `b target` after its own
    /// fragment's code (one per target), which reaches anywhere (+-128 MiB, veneers beyond).
    /// Reaching the target costs a second taken branch, and every island a word of its
    /// fragment. Any program size; what the emitter does when nothing better is known.
    #[default]
    Islands,
    /// Straight to the target, in the short form, for every conditional branch that reaches
    /// at least `reach` bytes either way: the new text spans at most that, so every block of
    /// every moved fragment is within reach of such a branch wherever the fragments land.
    /// The others (`tbz`/`tbnz`, +-32 KiB, when `reach` is `b.cond`'s 1 MiB) keep islands.
    /// BOLT's AArch64 output does the same where its `.text.cold` lies within reach.
    Direct { reach: u64 },
}

impl FragmentExits {
    /// Whether the conditional branch `inst`, leaving its fragment for a block of another
    /// fragment of its function, goes there directly.
    pub fn goes_direct(self, inst: &Inst) -> bool {
        match self {
            FragmentExits::Islands => false,
            FragmentExits::Direct { reach } => inst.conditional_reach().is_some_and(|r| r >= reach),
        }
    }
}

/// The unwind state right at a function's entry, after the call: the CFA is the stack
/// pointer plus `cfa_offset`, and the return address is saved at `return_address_at` from
/// the CFA (`None`: it is in a register, as on machines with a link register).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryFrame {
    pub cfa_offset: i64,
    pub return_address_at: Option<i64>,
}

impl Isa {
    /// The ISA of an ELF `e_machine`, if Rivet handles it.
    pub fn from_elf_machine(machine: u16) -> Option<Isa> {
        match machine {
            x86_64::EM_X86_64 => Some(Isa::X86_64),
            aarch64::EM_AARCH64 => Some(Isa::Aarch64),
            _ => None,
        }
    }

    /// The ISA of a parsed input. `ElfFile::parse` accepts only machines Rivet handles, which
    /// are the ones [`Isa::from_elf_machine`] knows (a test checks the two agree).
    pub fn of(elf: &ElfFile<'_>) -> Isa {
        Isa::from_elf_machine(elf.machine).expect("ElfFile::parse accepts only known machines")
    }

    /// The name users know it by.
    pub fn name(self) -> &'static str {
        match self {
            Isa::X86_64 => "x86-64",
            Isa::Aarch64 => "AArch64",
        }
    }

    // --- Decoding -------------------------------------------------------------------------

    /// Decodes `bytes` (which start at `addr`) linearly. Invalid encodings come back as
    /// instructions with `is_invalid()`, so the caller decides what they mean.
    pub fn decode_all(self, bytes: &[u8], addr: Vaddr) -> Vec<Inst> {
        match self {
            Isa::X86_64 => x86_64::inst::decode_all(bytes, addr),
            Isa::Aarch64 => aarch64::inst::decode_all(bytes, addr)
                .into_iter()
                .map(Inst::from_aarch64)
                .collect(),
        }
    }

    /// The longest instruction: how many bytes to read to decode the one at an address.
    pub fn max_inst_len(self) -> u64 {
        match self {
            Isa::X86_64 => x86_64::MAX_INST_LEN,
            Isa::Aarch64 => aarch64::INSN_SIZE,
        }
    }

    // --- Filling and padding --------------------------------------------------------------

    /// Appends `len` bytes of what fills code that must never run (gaps in new text, the
    /// tail of an old body): a trap, so a stray jump stops at once.
    pub fn fill(self, out: &mut Vec<u8>, len: usize) {
        match self {
            Isa::X86_64 => out.resize(out.len() + len, x86_64::FILL_BYTE),
            // `udf #0` is the zero word, so zeros fill whole and partial words alike.
            Isa::Aarch64 => out.resize(out.len() + len, 0),
        }
    }

    /// `len` bytes of fill.
    pub fn filled(self, len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len);
        self.fill(&mut out, len);
        out
    }

    /// True when `bytes` (at `addr`) hold only what linkers and compilers put between
    /// functions: zeros, fill traps, or padding instructions.
    pub fn is_filler(self, bytes: &[u8], addr: Vaddr) -> bool {
        match self {
            Isa::X86_64 => x86_64::is_filler(bytes, addr),
            Isa::Aarch64 => aarch64::is_filler(bytes),
        }
    }

    /// Appends `n` bytes of padding that execute as few instructions as possible (the
    /// preceding block may fall through into it).
    pub fn write_nops(self, out: &mut Vec<u8>, n: usize) {
        match self {
            Isa::X86_64 => x86_64::encode::write_nops(out, n),
            Isa::Aarch64 => aarch64::write_nops(out, n),
        }
    }

    // --- Unwinding ------------------------------------------------------------------------

    /// The DWARF register number of the stack pointer.
    pub fn dwarf_stack_pointer(self) -> u16 {
        match self {
            Isa::X86_64 => x86_64::DWARF_RSP,
            Isa::Aarch64 => aarch64::DWARF_SP,
        }
    }

    /// The unwind state at any function entry.
    pub fn entry_frame(self) -> EntryFrame {
        match self {
            Isa::X86_64 => EntryFrame {
                cfa_offset: 8,
                return_address_at: Some(-8),
            },
            // `bl` leaves the return address in x30 and the stack as it was.
            Isa::Aarch64 => EntryFrame {
                cfa_offset: 0,
                return_address_at: None,
            },
        }
    }

    /// The DWARF pseudo-register holding the return address's signing state, if the ISA has
    /// one (AArch64's RA_SIGN_STATE, 34: a constant rule of 1 while the return address in x30
    /// is signed; `DW_CFA_AARCH64_negate_ra_state` toggles it).
    pub fn ra_sign_state_register(self) -> Option<u16> {
        match self {
            Isa::X86_64 => None,
            Isa::Aarch64 => Some(aarch64::DWARF_RA_SIGN_STATE),
        }
    }

    /// The name of a DWARF register number, for dumps.
    pub fn dwarf_register_name(self, register: u16) -> &'static str {
        match self {
            Isa::X86_64 => x86_64::dwarf_register_name(register),
            Isa::Aarch64 => aarch64::dwarf_register_name(register),
        }
    }

    // --- Branches -------------------------------------------------------------------------

    /// Sizes of the branch the emitter writes for `kind`.
    pub fn branch_sizes(self, kind: BranchKind) -> BranchSizes {
        match (self, kind) {
            // `jmp rel8` / `jmp rel32`, `jcc rel8` / `jcc rel32`.
            (Isa::X86_64, BranchKind::Jump) => BranchSizes { short: 2, near: 5 },
            (Isa::X86_64, BranchKind::Cond) => BranchSizes { short: 2, near: 6 },
            // `b` reaches +-128 MiB in one word; a conditional branch that does not reach
            // becomes the inverted branch over a `b`.
            (Isa::Aarch64, BranchKind::Jump) => BranchSizes { short: 4, near: 4 },
            (Isa::Aarch64, BranchKind::Cond) => BranchSizes { short: 4, near: 8 },
        }
    }

    /// True when the near form of a conditional branch is two branches, the opposite test
    /// over an unconditional one (AArch64), rather than one instruction with a wider
    /// displacement (x86-64 `jcc rel32`). Such a pair runs otherwise than the branch it
    /// stands for: its test is taken when the branch is not, and going to the target costs
    /// one more instruction, the unconditional branch. Where it is, the emitter sends a
    /// conditional branch that leaves its fragment to an island instead (a `b` after the
    /// fragment's code), so that only the branch's taken side pays.
    pub fn near_conditional_is_a_pair(self) -> bool {
        match self {
            Isa::X86_64 => false,
            Isa::Aarch64 => true,
        }
    }

    /// How conditional branches that leave their fragment for a block of another fragment
    /// of the same function are written, given `new_text_bound`: an upper bound, in bytes,
    /// on the span of the whole new text (every moved fragment, hot and cold, with every
    /// padding, from the first byte of the hot text to the last of the cold text), known
    /// before any fragment has an address. See [`FragmentExits`].
    pub fn fragment_exits(self, new_text_bound: u64) -> FragmentExits {
        if !self.near_conditional_is_a_pair() {
            return FragmentExits::Islands;
        }
        // Two instructions of a span of `n` bytes are at most `n - 4` apart, and a short
        // conditional branch reaches `hi` forward and `-lo >= hi` back: a span of at most
        // `hi` is in reach of every branch of that form, wherever the fragments land in it.
        let reach = |r: aarch64::Reach| r.bounds().1 as u64;
        let bit_tests = reach(aarch64::Reach::Imm14);
        let others = reach(aarch64::Reach::Imm19);
        if new_text_bound <= bit_tests {
            FragmentExits::Direct { reach: bit_tests }
        } else if new_text_bound <= others {
            FragmentExits::Direct { reach: others }
        } else {
            FragmentExits::Islands
        }
    }

    /// True when a branch in its short form, `size` bytes placed at offset `at`, reaches
    /// offset `target` (offsets from one origin; a target may lie before it).
    pub fn short_branch_reaches(self, at: u64, size: u64, target: i64) -> bool {
        match self {
            // rel8, counted from the end of the branch.
            Isa::X86_64 => i8::try_from(target - (at + size) as i64).is_ok(),
            // Counted from the branch itself; the shortest conditional reach (`tbz`,
            // +-32 KiB) holds for every form.
            Isa::Aarch64 => {
                let (lo, hi) = aarch64::Reach::Imm14.bounds();
                (lo..=hi).contains(&(target - at as i64))
            }
        }
    }

    /// True when a direct branch or call placed at `at` reaches `target` (x86-64: rel32,
    /// +-2 GiB; AArch64: `b`/`bl`, +-128 MiB). Farther, the rewrite goes through a veneer.
    pub fn direct_branch_reaches(self, at: Vaddr, target: Vaddr) -> bool {
        let distance = target.get().wrapping_sub(at.get()) as i64;
        match self {
            Isa::X86_64 => i32::try_from(distance).is_ok(),
            Isa::Aarch64 => {
                let (lo, hi) = aarch64::Reach::Imm26.bounds();
                (lo..=hi).contains(&distance)
            }
        }
    }

    /// Bytes of a veneer: code the rewrite places near a branch that cannot reach its target,
    /// which jumps there from anywhere within +-4 GiB. `None` where branches reach as far
    /// (x86-64).
    pub fn veneer_size(self) -> Option<u64> {
        match self {
            Isa::X86_64 => None,
            // adrp x16; add x16, x16, #lo12; br x16 (x16 is AAPCS64's IP0: a call's path may
            // clobber it, and `br x16` lands on a `bti c` pad where BTI is enforced).
            Isa::Aarch64 => Some(12),
        }
    }

    /// The veneer placed at `at` that jumps to `target`.
    pub fn encode_veneer(self, at: Vaddr, target: Vaddr) -> Result<Vec<u8>, EncodeError> {
        match self {
            Isa::X86_64 => Err(EncodeError::Unsupported {
                at,
                reason: "x86-64 has no veneers".into(),
            }),
            Isa::Aarch64 => {
                let words = aarch64::veneer(at.get(), target.get())
                    .map_err(|e| crate::branch::from_aarch64(e, at))?;
                Ok(words.iter().flat_map(|w| w.to_le_bytes()).collect())
            }
        }
    }

    /// Where the veneer `bytes` (placed at `at`, as [`Isa::encode_veneer`] writes it) jumps;
    /// `None` for bytes that are not such a veneer.
    pub fn veneer_target(self, bytes: &[u8], at: Vaddr) -> Option<Vaddr> {
        match self {
            Isa::X86_64 => None,
            Isa::Aarch64 => {
                let words = [le_word(bytes, 0)?, le_word(bytes, 1)?, le_word(bytes, 2)?];
                aarch64::veneer_target(words, at.get()).map(Vaddr)
            }
        }
    }

    /// True when the file asks the CPU to check indirect branch targets (AArch64 BTI: the
    /// BTI bit of its GNU property note). Rivet keeps the note, so the output's code must
    /// then land every indirect branch it adds, its veneers' `br`, on a pad.
    pub fn branch_targets_guarded(self, elf: &ElfFile<'_>) -> bool {
        match self {
            Isa::X86_64 => false,
            Isa::Aarch64 => elf.gnu_properties().iter().any(|&(kind, data)| {
                kind == aarch64::PROPERTY_FEATURE_1_AND
                    && data.get(..4).is_some_and(|d| {
                        u32::from_le_bytes(d.try_into().expect("four bytes"))
                            & aarch64::FEATURE_1_BTI
                            != 0
                    })
            }),
        }
    }

    /// True when `bytes`, the code at a veneer's destination, starts with a landing pad that
    /// accepts the veneer's jump (where [`Isa::branch_targets_guarded`]).
    pub fn lands_veneer(self, bytes: &[u8]) -> bool {
        match self {
            Isa::X86_64 => true,
            Isa::Aarch64 => le_word(bytes, 0).is_some_and(aarch64::lands_veneer),
        }
    }

    /// Bytes of a landing pad: a pad and a direct jump, placed within the jump's reach of a
    /// veneer's destination that has no pad of its own. `None` where there are no veneers.
    pub fn landing_pad_size(self) -> Option<u64> {
        match self {
            Isa::X86_64 => None,
            Isa::Aarch64 => Some(8),
        }
    }

    /// The landing pad placed at `at` that jumps on to `target`.
    pub fn encode_landing_pad(self, at: Vaddr, target: Vaddr) -> Result<Vec<u8>, EncodeError> {
        match self {
            Isa::X86_64 => Err(EncodeError::Unsupported {
                at,
                reason: "x86-64 has no landing pads".into(),
            }),
            Isa::Aarch64 => {
                let words = aarch64::landing_pad(at.get(), target.get())
                    .map_err(|e| crate::branch::from_aarch64(e, at))?;
                Ok(words.iter().flat_map(|w| w.to_le_bytes()).collect())
            }
        }
    }

    /// Where the landing pad `bytes` (placed at `at`, as [`Isa::encode_landing_pad`] writes
    /// it) jumps; `None` for bytes that are not such a pad.
    pub fn landing_pad_target(self, bytes: &[u8], at: Vaddr) -> Option<Vaddr> {
        match self {
            Isa::X86_64 => None,
            Isa::Aarch64 => {
                let words = [le_word(bytes, 0)?, le_word(bytes, 1)?];
                aarch64::landing_pad_target(words, at.get()).map(Vaddr)
            }
        }
    }

    /// The forwarding jump to write over the old entry of a moved function that starts with
    /// `entry`, to `target`. Where BTI guards the code (`guarded`) and the entry is a landing
    /// pad, a pad stays in front of the jump, so that what still calls the old entry
    /// indirectly (a linker's veneer, a pointer Rivet could not see) lands: the entry's own
    /// `bti`, or `bti c` in place of a `paciasp`/`pacibsp` (the new entry signs again).
    /// Otherwise a near jump, [`Isa::forwarding_jump_size`] bytes.
    pub fn forwarding_jump(
        self,
        entry: &Inst,
        guarded: bool,
        target: Vaddr,
    ) -> Result<Vec<u8>, EncodeError> {
        let mut out = Vec::new();
        let mut at = entry.addr();
        if let Some(pad) = self.forwarding_pad(entry, guarded) {
            out.extend_from_slice(&pad.to_le_bytes());
            at = at + 4;
        }
        self.branch_encoder().encode(
            crate::branch::Branch::Jump,
            crate::branch::BranchForm::Near,
            at,
            target,
            &mut out,
        )?;
        Ok(out)
    }

    /// Bytes [`Isa::forwarding_jump`] writes for this entry.
    pub fn forwarding_jump_len(self, entry: &Inst, guarded: bool) -> u64 {
        let pad = if self.forwarding_pad(entry, guarded).is_some() {
            4
        } else {
            0
        };
        pad + self.forwarding_jump_size()
    }

    /// True when `bytes` start with the pad [`Isa::forwarding_jump`] may put in front of a
    /// forwarding jump (so that a checker looks for the jump after it).
    pub fn is_forwarding_pad(self, bytes: &[u8]) -> bool {
        match self {
            Isa::X86_64 => false,
            Isa::Aarch64 => matches!(
                le_word(bytes, 0),
                Some(aarch64::BTI_C | aarch64::BTI_J | aarch64::BTI_JC)
            ),
        }
    }

    fn forwarding_pad(self, entry: &Inst, guarded: bool) -> Option<u32> {
        match self {
            Isa::X86_64 => None,
            Isa::Aarch64 if !guarded || entry.is_invalid() => None,
            Isa::Aarch64 => match entry.aarch64().word() {
                w @ (aarch64::BTI_C | aarch64::BTI_J | aarch64::BTI_JC) => Some(w),
                aarch64::PACIASP | aarch64::PACIBSP => Some(aarch64::BTI_C),
                _ => None,
            },
        }
    }

    /// Where a function whose code is `insts` only jumps on to, when its code is exactly a
    /// veneer (the linker's `__*_veneer` on AArch64: `adrp x16; add x16, x16, #lo12; br
    /// x16`, the form [`Isa::encode_veneer`] writes too). A call of it is a call of that
    /// address.
    pub fn forwarding_destination(self, insts: &[Inst]) -> Option<Vaddr> {
        match self {
            Isa::X86_64 => None,
            Isa::Aarch64 => {
                let [adrp, add, br] = insts.get(..3)? else {
                    return None;
                };
                if [adrp, add, br].iter().any(|i| i.is_invalid()) {
                    return None;
                }
                let words = [adrp, add, br].map(|i| i.aarch64().word());
                aarch64::veneer_target(words, adrp.addr().get()).map(Vaddr)
            }
        }
    }

    /// Bytes of the jump left at a moved function's old entry (a near jump).
    pub fn forwarding_jump_size(self) -> u64 {
        self.branch_sizes(BranchKind::Jump).near
    }

    /// An encoder for the branches the emitter creates.
    pub fn branch_encoder(self) -> BranchEncoder {
        BranchEncoder::new(self)
    }

    /// Bytes of a call or jump through a memory slot, as [`Isa::encode_via_slot`] writes it.
    pub fn via_slot_size(self) -> u8 {
        match self {
            Isa::X86_64 => x86_64::encode::VIA_SLOT_SIZE,
            // `adrp x16; ldr x16, [x16, #lo]; br/blr x16`.
            Isa::Aarch64 => 12,
        }
    }

    /// Appends the direct call or jump `inst` re-encoded at `at` as the same transfer through
    /// the memory slot `slot` (a call into a PLT stub becomes a call through its GOT slot).
    pub fn encode_via_slot(
        self,
        inst: &Inst,
        at: Vaddr,
        slot: Vaddr,
        out: &mut Vec<u8>,
    ) -> Result<(), EncodeError> {
        match self {
            Isa::X86_64 => x86_64::encode::encode_via_slot(inst, at, slot, out),
            Isa::Aarch64 => Err(aarch64_unsupported(inst.addr())),
        }
    }

    /// Appends `inst` (whose original encoding is `bytes`) re-placed at `at`, with its
    /// PC-relative field, if any, now referring to `new_target` (`None`: the same address as
    /// before). The length never changes.
    pub fn relocate(
        self,
        inst: &Inst,
        bytes: &[u8],
        at: Vaddr,
        new_target: Option<Vaddr>,
        out: &mut Vec<u8>,
    ) -> Result<(), EncodeError> {
        match self {
            Isa::X86_64 => x86_64::encode::relocate(inst, bytes, at, new_target, out),
            // The word is in the instruction; `bytes` only matters where lengths vary.
            Isa::Aarch64 => {
                let _ = bytes;
                let word = inst
                    .aarch64()
                    .relocate(at, new_target)
                    .map_err(|e| crate::branch::from_aarch64(e, inst.addr()))?;
                out.extend_from_slice(&word.to_le_bytes());
                Ok(())
            }
        }
    }

    /// The 4 bytes of `inst` placed at `at`, changed to build `address` in its part of a
    /// two-instruction address (AArch64: an ADRP's page, or the low 12 bits an ADD, load or
    /// store adds to it; an ADR the whole address). x86-64 addresses are one field, which
    /// [`Isa::relocate`] handles.
    pub fn encode_address_part(
        self,
        inst: &Inst,
        at: Vaddr,
        address: Vaddr,
    ) -> Result<Vec<u8>, EncodeError> {
        match self {
            Isa::X86_64 => Err(EncodeError::Unsupported {
                at: inst.addr(),
                reason: "x86-64 has no address parts".into(),
            }),
            Isa::Aarch64 => {
                let a = inst.aarch64();
                let word = a.word();
                let err = |e| crate::branch::from_aarch64(e, inst.addr());
                let new = if a.has_pc_relative_field() {
                    aarch64::retarget(word, at.get(), address.get()).map_err(err)?
                } else {
                    aarch64::set_low12(word, address.get()).map_err(err)?
                };
                Ok(new.to_le_bytes().to_vec())
            }
        }
    }

    /// The two instructions, placed at `at`, that compute `target` into the register of
    /// `inst`, an address computation too short to reach it from its new place (AArch64:
    /// `adr` becomes `adrp`+`add`, taking the `nop` lld left before it). `None` for an
    /// instruction that cannot widen.
    pub fn widen_address(self, inst: &Inst, at: Vaddr, target: Vaddr) -> Option<Vec<u8>> {
        match self {
            Isa::X86_64 => None,
            Isa::Aarch64 => {
                let [adrp, add] = inst.aarch64().widened(at, target)?;
                let mut out = adrp.to_le_bytes().to_vec();
                out.extend_from_slice(&add.to_le_bytes());
                Some(out)
            }
        }
    }

    // --- PLT ------------------------------------------------------------------------------

    /// The size of one entry of the PLT section `name` when its header does not say, or
    /// `None` for a section that is not a PLT.
    pub fn plt_entry_size(self, name: &str) -> Option<u64> {
        match self {
            Isa::X86_64 => match name {
                ".plt" | ".plt.sec" | ".iplt" => Some(16),
                ".plt.got" => Some(8),
                _ => None,
            },
            // A 32-byte header, then 16-byte entries (GNU ld and lld alike).
            Isa::Aarch64 => match name {
                ".plt" | ".iplt" => Some(16),
                _ => None,
            },
        }
    }

    /// The entries of a PLT section at `section_addr` decoded as `insts`, as `(entry
    /// address, entry size, slot)`. x86-64 entries have the section's fixed size
    /// (`entry_size`: `endbr64` and `bnd` forms vary inside it); an AArch64 entry starts at
    /// its `adrp`, or the `bti c` before it, and ends where the next begins (16 bytes, or 24
    /// in BTI-marked outputs, GNU ld's with `bti c` first, lld's with two `nop`s last).
    pub fn plt_entries(
        self,
        section_addr: Vaddr,
        insts: &[Inst],
        entry_size: u64,
    ) -> Vec<(Vaddr, u64, Vaddr)> {
        match self {
            Isa::X86_64 => self
                .indirect_jump_slots(insts)
                .into_iter()
                .map(|(jump, slot)| {
                    let offset = (jump - section_addr) / entry_size * entry_size;
                    (section_addr + offset, entry_size, slot)
                })
                .collect(),
            Isa::Aarch64 => {
                let jumps = aarch64::plt::slot_jumps(insts);
                // An entry reaches the next one's start (lld pads BTI entries with two
                // `nop`s after the branch); the last is as long as the one before it.
                let strides: Vec<u64> = jumps.windows(2).map(|w| w[1].start - w[0].start).collect();
                jumps
                    .iter()
                    .enumerate()
                    .map(|(k, j)| {
                        let own = (j.jump + 4 - j.start).next_multiple_of(8);
                        let size = match (
                            strides.get(k),
                            k.checked_sub(1).and_then(|p| strides.get(p)),
                        ) {
                            (Some(&s), _) | (None, Some(&s)) if (own..=32).contains(&s) => s,
                            _ => own,
                        };
                        (j.start, size, j.slot)
                    })
                    .collect()
            }
        }
    }

    /// The memory slot each indirect jump in `insts` (a straight run, such as a PLT
    /// section) reads its target from, as `(jump address, slot)`: on x86-64 the jump's own
    /// memory operand, on AArch64 the `adrp`+`ldr` that loads the register it branches
    /// through.
    pub fn indirect_jump_slots(self, insts: &[Inst]) -> Vec<(Vaddr, Vaddr)> {
        match self {
            Isa::X86_64 => insts
                .iter()
                .filter(|i| i.flow() == crate::Flow::IndirectJump)
                .filter_map(|i| Some((i.addr(), i.indirect_slot()?)))
                .collect(),
            Isa::Aarch64 => aarch64::plt::indirect_jump_slots(insts),
        }
    }

    /// Code addresses `insts` (a function, in address order) build in two instructions, as
    /// `(the instruction completing the address, the address)`: AArch64's ADRP+ADD. x86-64
    /// builds an address in one instruction ([`Inst::pc_relative_memory_target`]).
    pub fn address_pairs(self, insts: &[Inst]) -> Vec<(Vaddr, Vaddr)> {
        match self {
            Isa::X86_64 => Vec::new(),
            Isa::Aarch64 => {
                let decoded: Vec<_> = insts.iter().map(|i| i.aarch64().decoded()).collect();
                aarch64::pairs::address_pairs(&decoded)
                    .into_iter()
                    .map(|(site, address)| (Vaddr(site), Vaddr(address)))
                    .collect()
            }
        }
    }

    /// True when instruction `k` of `insts` (a function) computes the anchor of a switch
    /// table, the label its entries count from, rather than a label to jump to (AArch64's
    /// `adr` before an `add ..., lsl #2`; x86-64 tables count from data, never from code).
    pub fn is_table_anchor(self, insts: &[Inst], k: usize) -> bool {
        match self {
            Isa::X86_64 => false,
            Isa::Aarch64 => {
                // The anchor's `adr` and the few instructions after it.
                let window: Vec<_> = insts[k.min(insts.len())..insts.len().min(k + 17)]
                    .iter()
                    .map(|i| i.aarch64().decoded())
                    .collect();
                aarch64::pairs::is_table_anchor(&window, 0)
            }
        }
    }

    // --- Indirect jumps -------------------------------------------------------------------

    /// Analyzes the indirect jump that ends `window`, a path that may cross taken branches
    /// (the conditional jumps at the addresses in `taken` are followed to their target, all
    /// others fall through), with registers known to hold constants at the window start.
    pub fn analyze_indirect_jump(
        self,
        window: &[Inst],
        taken: &[Vaddr],
        constants: &[(RegisterId, u64)],
    ) -> IndirectJump {
        match self {
            Isa::X86_64 => x86_64::jump_table::analyze_indirect_jump_with(window, taken, constants),
            Isa::Aarch64 => aarch64_indirect_jump(window, taken, constants),
        }
    }

    /// Whether discovery analyses the paths into a dispatch block with the values known at
    /// the block's start (the function's constants, the definitions reaching the block).
    /// AArch64 needs them: gcc keeps a switch's base in a callee-saved register and puts the
    /// range check in the dispatch block's only predecessor (Lua's `str_format`). x86-64 keeps
    /// the analysis its outputs were measured with: with those values some of its tables now
    /// bound by their relocations would gain a range check (clang's Lua, `loadFunction`), a
    /// different model and different output bytes, which is a change to make on its own.
    pub fn predecessor_paths_use_known_values(self) -> bool {
        match self {
            Isa::X86_64 => false,
            Isa::Aarch64 => true,
        }
    }

    /// Registers whose every definition in `insts` (a whole function) loads the same constant
    /// address, with that address (jump table bases hoisted out of a loop).
    pub fn register_constants(self, insts: &[Inst]) -> Vec<(RegisterId, u64)> {
        match self {
            Isa::X86_64 => x86_64::jump_table::register_constants(insts),
            // Registers and stack slots (a dispatch loop's table base kept across it).
            Isa::Aarch64 => insts
                .iter()
                .map(|i| i.aarch64().decoded())
                .collect::<Option<Vec<_>>>()
                .map(|d| {
                    aarch64::hoisted_constants(&d)
                        .into_iter()
                        .filter_map(|(h, v)| Some((aarch64_location_id(h)?, v)))
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    /// General-purpose registers whose value at the start of `window` the window reads (on
    /// AArch64, every register an operand field of it names before it writes it: more than it
    /// reads, never fewer).
    pub fn window_live_in(self, window: &[Inst]) -> Vec<RegisterId> {
        match self {
            Isa::X86_64 => x86_64::jump_table::window_live_in(window),
            // Registers only: a value kept in a stack slot is not followed along paths.
            Isa::Aarch64 => window
                .iter()
                .map(|i| i.aarch64().decoded())
                .collect::<Option<Vec<_>>>()
                .map(|d| {
                    aarch64::window_live_in(&d)
                        .into_iter()
                        .map(|r| RegisterId::from_raw(u16::from(r)))
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    // --- Instrumentation ------------------------------------------------------------------

    /// The counter increment needed where the arithmetic flags `live` are live, counting
    /// with `atomics` (AArch64's choice; x86-64 has one kind of atomic increment). AArch64
    /// probes write no flag, so liveness never changes their shape.
    pub fn probe_shape(self, live: Flags, atomics: Atomics) -> ProbeShape {
        match (self, atomics) {
            (Isa::X86_64, _) => ProbeShape::for_live_flags(live),
            (Isa::Aarch64, Atomics::Lse) => ProbeShape::Lse,
            (Isa::Aarch64, Atomics::LlSc) => ProbeShape::LlSc,
        }
    }

    /// Appends the probe placed at `at` that increments the counter at `counter`; `None`
    /// when the counter is out of reach or `shape` is another ISA's.
    pub fn encode_probe(
        self,
        shape: ProbeShape,
        at: Vaddr,
        counter: Vaddr,
        out: &mut Vec<u8>,
    ) -> Option<()> {
        match (self, shape) {
            (Isa::X86_64, _) => x86_64::probe::encode_probe(shape, at, counter, out),
            (Isa::Aarch64, ProbeShape::Lse) => {
                aarch64::probe::encode_probe(Atomics::Lse, at, counter, out)
            }
            (Isa::Aarch64, ProbeShape::LlSc) => {
                aarch64::probe::encode_probe(Atomics::LlSc, at, counter, out)
            }
            (Isa::Aarch64, ProbeShape::Plain | ProbeShape::SavingFlags) => None,
        }
    }

    /// How the indirect call `call` is promoted to compares against `targets` callees and a
    /// direct call to each (`--indirect-call-promotion`), or why it cannot be. x86-64 only.
    pub fn promotion_shape(
        self,
        call: &Inst,
        targets: usize,
        pic: bool,
        noreturn: bool,
    ) -> Result<crate::PromotionShape, crate::PromotionError> {
        match self {
            Isa::X86_64 => crate::PromotionShape::new(call, targets, pic, noreturn),
            Isa::Aarch64 => Err(crate::PromotionError {
                at: call.addr(),
                reason: "indirect call promotion is implemented for x86-64 only",
            }),
        }
    }

    /// Reads decoded output `code` as the promoted form of the indirect call `call`
    /// (`crate::x86_64::promote::read_promotion`); an error says why it is not one.
    pub fn read_promotion(
        self,
        call: &Inst,
        code: &[Inst],
        noreturn: bool,
    ) -> Result<crate::ReadPromotion, &'static str> {
        match self {
            Isa::X86_64 => crate::x86_64::promote::read_promotion(call, code, noreturn),
            Isa::Aarch64 => Err("indirect call promotion is implemented for x86-64 only"),
        }
    }

    /// Size of the sequence that records the target of the indirect `branch`, or why it
    /// cannot be recorded.
    pub fn indirect_probe_size(self, branch: &Inst) -> Result<u8, IndirectProbeError> {
        match self {
            Isa::X86_64 => x86_64::probe::indirect_probe_size(branch),
            Isa::Aarch64 => aarch64::probe::indirect_probe_size(branch),
        }
    }

    /// Appends, at `at`, the sequence recording the target of `branch` into the site table
    /// at `table` through the runtime's recorder at `recorder`.
    pub fn encode_indirect_probe(
        self,
        branch: &Inst,
        at: Vaddr,
        table: Vaddr,
        recorder: Vaddr,
        out: &mut Vec<u8>,
    ) -> Result<(), IndirectProbeError> {
        match self {
            Isa::X86_64 => x86_64::probe::encode_indirect_probe(branch, at, table, recorder, out),
            Isa::Aarch64 => aarch64::probe::encode_indirect_probe(branch, at, table, recorder, out),
        }
    }

    /// The atomics the probes of a binary made of `insts` use by default: x86-64 has one
    /// kind; on AArch64, LSE when the binary's own code uses LSE instructions (it was built
    /// for Armv8.1 or later, so the cores it runs on have them), else LL/SC, which every
    /// AArch64 core runs. The caller leaves out code that uses LSE only after checking for
    /// it at run time (libgcc's outline atomics).
    pub fn default_atomics<'a>(self, insts: impl IntoIterator<Item = &'a Inst>) -> Atomics {
        match self {
            Isa::X86_64 => Atomics::Lse,
            Isa::Aarch64 => {
                if insts
                    .into_iter()
                    .any(|i| aarch64::probe::uses_lse(i.aarch64().word()))
                {
                    Atomics::Lse
                } else {
                    Atomics::LlSc
                }
            }
        }
    }

    /// True for a function, by name, whose code picks its atomics at run time, so that the
    /// LSE instructions in it say nothing of the cores the binary targets: libgcc's AArch64
    /// outline atomics (`__aarch64_ldadd4_acq_rel` and the like, which gcc calls by default
    /// since gcc 10) test `__aarch64_have_lse_atomics` and hold both forms.
    pub fn chooses_atomics_at_run_time(self, name: &str) -> bool {
        match self {
            Isa::X86_64 => false,
            Isa::Aarch64 => name.starts_with("__aarch64_"),
        }
    }

    /// True when `inst`, first in a block, is a landing pad that must stay first: where BTI is
    /// enforced, an indirect branch may only land on one (AArch64 `bti`, and `paciasp` /
    /// `pacibsp`, which act as `bti c`), so probes at the block's start go after it. x86-64's
    /// `endbr64` is not asked about: Linux does not enforce IBT in user space, and x86-64
    /// outputs stay as they were.
    pub fn keeps_first(self, inst: &Inst) -> bool {
        match self {
            Isa::X86_64 => false,
            Isa::Aarch64 => inst.aarch64().decoded().is_some_and(|d| {
                matches!(d.guard, Some(aarch64::Guard::Bti { .. }))
                    || d.word == aarch64::PACIASP
                    || d.word == aarch64::PACIBSP
            }),
        }
    }
}

fn aarch64_unsupported(at: Vaddr) -> EncodeError {
    EncodeError::Unsupported {
        at,
        reason: "rewriting AArch64 code is not implemented yet".into(),
    }
}

/// An AArch64 location of `aarch64::hoisted_constants` as the opaque id the ISA-neutral
/// callers carry: registers as their number, stack slots (8-byte aligned, below 32 KiB as
/// an `ldr`'s unsigned offset reaches) as 0x8000 + offset / 8.
fn aarch64_location_id(h: aarch64::Hoisted) -> Option<RegisterId> {
    match h {
        aarch64::Hoisted::Register(r) => Some(RegisterId::from_raw(u16::from(r))),
        aarch64::Hoisted::StackSlot(o) if o % 8 == 0 && o < 0x8000 => {
            Some(RegisterId::from_raw(0x8000 | (o / 8) as u16))
        }
        aarch64::Hoisted::StackSlot(_) => None,
    }
}

/// [`Isa::analyze_indirect_jump`] for AArch64, through `aarch64::jump_table`.
fn aarch64_indirect_jump(
    window: &[Inst],
    taken: &[Vaddr],
    constants: &[(RegisterId, u64)],
) -> IndirectJump {
    let Some(path) = window
        .iter()
        .map(|i| i.aarch64().decoded())
        .collect::<Option<Vec<_>>>()
    else {
        return IndirectJump::Unknown;
    };
    let taken: Vec<u64> = taken.iter().map(|t| t.get()).collect();
    let hoisted: Vec<(aarch64::Hoisted, u64)> = constants
        .iter()
        .map(|&(id, v)| {
            let raw = id.raw();
            let h = if raw & 0x8000 != 0 {
                aarch64::Hoisted::StackSlot(u64::from(raw & 0x7fff) * 8)
            } else {
                aarch64::Hoisted::Register(raw as u8)
            };
            (h, v)
        })
        .collect();
    match aarch64::analyze_indirect_branch_with(&path, &taken, &hoisted) {
        aarch64::IndirectBranch::Table {
            table,
            anchor,
            entry_size,
            signed,
            shift,
            bound,
        } => IndirectJump::ScaledTable {
            table: Vaddr(table),
            anchor: Vaddr(anchor),
            entry_size,
            signed,
            shift,
            bound: bound.map(|b| IndexBound {
                entries: b.entries,
                check: Vaddr(b.check),
                default_target: Vaddr(b.default_target),
            }),
        },
        aarch64::IndirectBranch::MemorySlot { slot } => {
            IndirectJump::MemorySlot { slot: Vaddr(slot) }
        }
        aarch64::IndirectBranch::Unknown => IndirectJump::Unknown,
    }
}

/// Relocation type numbers, per ISA: `ElfFile::static_relocations` and
/// `ElfFile::dynamic_relocations` take the program's `Isa` to name what each relocation is.
impl RelocTypes for Isa {
    fn static_kind(&self, r_type: u32) -> RelocKind {
        match self {
            Isa::X86_64 => x86_64::relocs::static_kind(r_type),
            Isa::Aarch64 => aarch64::relocs::static_kind(r_type),
        }
    }
    fn dynamic_kind(&self, r_type: u32) -> DynRelocKind {
        match self {
            Isa::X86_64 => x86_64::relocs::dynamic_kind(r_type),
            Isa::Aarch64 => aarch64::relocs::dynamic_kind(r_type),
        }
    }
}

/// The `k`-th little-endian 32-bit word of `bytes`, if it holds one.
fn le_word(bytes: &[u8], k: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        bytes.get(4 * k..4 * k + 4)?.try_into().ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 64-byte ELF64 header of an executable for `machine`, with no program headers and no
    /// sections.
    fn header(machine: u16) -> Vec<u8> {
        let mut h = vec![0u8; 64];
        h[..4].copy_from_slice(b"\x7fELF");
        h[4] = 2; // ELFCLASS64
        h[5] = 1; // ELFDATA2LSB
        h[6] = 1; // EV_CURRENT
        h[16..18].copy_from_slice(&2u16.to_le_bytes()); // ET_EXEC
        h[18..20].copy_from_slice(&machine.to_le_bytes());
        h[20..24].copy_from_slice(&1u32.to_le_bytes());
        h[52..54].copy_from_slice(&64u16.to_le_bytes()); // e_ehsize
        h[54..56].copy_from_slice(&56u16.to_le_bytes()); // e_phentsize
        h[58..60].copy_from_slice(&64u16.to_le_bytes()); // e_shentsize
        h
    }

    /// `Isa::of` relies on it: every machine the ELF reader accepts has an `Isa`.
    #[test]
    fn every_machine_the_reader_accepts_has_an_isa() {
        let mut accepted = 0;
        for machine in 0..=u16::from(u8::MAX) {
            let bytes = header(machine);
            if let Ok(elf) = ElfFile::parse(&bytes) {
                accepted += 1;
                assert_eq!(Isa::from_elf_machine(machine), Some(Isa::of(&elf)));
            }
        }
        assert!(accepted > 0, "the test header is refused for every machine");
    }

    /// The new-text bound decides the regime: up to `tbz`'s reach every conditional branch
    /// goes straight to other fragments, up to `b.cond`'s all but `tbz`/`tbnz`, beyond it
    /// none; x86-64 never (its near form is one instruction).
    #[test]
    fn exits_go_direct_only_below_the_reach_of_the_branch() {
        let words: Vec<u8> = [
            0x5400_0040u32, // b.eq +8
            0x3400_0040,    // cbz w0, +8
            0xb500_0040,    // cbnz x0, +8
            0x3600_0040,    // tbz w0, #0, +8
            0x3708_0040,    // tbnz w0, #1, +8
            0x1400_0002,    // b +8
        ]
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect();
        let insts = Isa::Aarch64.decode_all(&words, Vaddr(0x1000));
        assert_eq!(insts.len(), 6);
        let reaches: Vec<Option<u64>> = insts.iter().map(Inst::conditional_reach).collect();
        let (imm19, imm14) = ((1 << 20) - 4, (1 << 15) - 4);
        assert_eq!(
            reaches,
            [
                Some(imm19),
                Some(imm19),
                Some(imm19),
                Some(imm14),
                Some(imm14),
                None
            ]
        );
        let direct = |exits: FragmentExits| -> Vec<bool> {
            insts.iter().map(|i| exits.goes_direct(i)).collect()
        };
        // Small: everything conditional goes direct.
        let small = Isa::Aarch64.fragment_exits(32 * 1024 - 4);
        assert_eq!(small, FragmentExits::Direct { reach: imm14 });
        assert_eq!(direct(small), [true, true, true, true, true, false]);
        // Up to 1 MiB: bit tests keep their islands.
        for bound in [32 * 1024, 1024 * 1024 - 4] {
            let middle = Isa::Aarch64.fragment_exits(bound);
            assert_eq!(middle, FragmentExits::Direct { reach: imm19 });
            assert_eq!(direct(middle), [true, true, true, false, false, false]);
        }
        // Beyond: islands for all.
        let large = Isa::Aarch64.fragment_exits(1024 * 1024);
        assert_eq!(large, FragmentExits::Islands);
        assert_eq!(direct(large), [false; 6]);
        assert_eq!(Isa::X86_64.fragment_exits(0), FragmentExits::Islands);
    }
}
