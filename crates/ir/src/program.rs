//! The program model: `Program` > `Function` > `Block` > `Inst`.

use std::ops::Range;

use rivet_arch::{Inst, Isa};
use rivet_elf::eh_frame::CfiRow;
use rivet_elf::{ElfFile, ElfKind, Vaddr, VaddrRange};

use crate::block_end::BlockExit;
use crate::skip::SkipReason;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FuncId(pub u32);

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BlockId(pub u32);

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JumpTableId(pub u32);

/// Whether relocation mode (moving functions anywhere) is possible, and why not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RelocationMode {
    Available,
    Unavailable { reason: String },
}

/// Facts about the input binary as a whole.
#[derive(Clone, Debug)]
pub struct BinaryInfo {
    /// The instruction set of the code: every ISA fact and operation goes through it.
    pub isa: Isa,
    pub kind: ElfKind,
    pub entry: Vaddr,
    pub build_id: Option<Vec<u8>>,
    pub relocation_mode: RelocationMode,
    /// Bytes of executable sections (excluding PLT stubs).
    pub code_bytes: u64,
    pub static_relocations: usize,
    pub dynamic_relocations: usize,
    pub has_eh_frame: bool,
}

/// A PLT stub and the symbol it jumps to.
#[derive(Clone, Debug)]
pub struct PltEntry {
    pub addr: Vaddr,
    pub size: u64,
    pub name: String,
    /// The GOT slot the stub jumps through.
    pub slot: Vaddr,
}

/// How a function was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A function symbol with a size.
    Symbol,
    /// A symbol without size; the extent came from its FDE.
    SymbolSizedByFde,
    /// A symbol without size and FDE; the extent runs to the next function, minus padding.
    SymbolSizedByNext,
    /// An FDE with no symbol at its start.
    Fde,
}

/// The relation of a compiler-split part to the function it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PartKind {
    /// `foo.cold`: code moved out of `foo` by hot/cold partitioning; reached by jumps, shares
    /// `foo`'s frame.
    ColdFragment,
    /// `foo.part.N`: an outlined piece of `foo`, a real function called by it.
    PartialInline,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parent {
    pub function: FuncId,
    pub kind: PartKind,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    Simple,
    Skipped(SkipReason),
}

/// What a call or tail call goes to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallTarget {
    /// The entry (or a secondary entry) of a function of this binary.
    Function { function: FuncId, addr: Vaddr },
    /// A PLT stub (an imported function, by name).
    Plt { name: String, addr: Vaddr },
    /// An address that is no known function entry.
    Unknown { addr: Vaddr },
    /// Through a register or memory.
    Indirect,
}

/// One call instruction inside a block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    pub at: Vaddr,
    pub target: CallTarget,
    /// True when the callee never returns (the call ends its block).
    pub noreturn: bool,
    /// The landing pad exceptions thrown by this call go to, if any.
    pub landing_pad: Option<Vaddr>,
}

/// How a block ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Terminator {
    /// No control-flow instruction; the next block starts here.
    FallThrough,
    Jump,
    CondJump,
    /// A conditional jump to another function (taken) with a fall-through successor.
    CondTailCall {
        target: CallTarget,
    },
    TailCall {
        target: CallTarget,
    },
    JumpTable {
        table: JumpTableId,
    },
    /// An indirect jump through a label-address table (computed goto); successors are the
    /// function's address-taken labels.
    ComputedGoto,
    Return,
    /// A call that never returns.
    NoReturnCall,
    /// `ud2`, `int3`, `hlt`.
    Trap,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EdgeKind {
    FallThrough,
    Taken,
    JumpTable,
    ComputedGoto,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Edge {
    pub to: BlockId,
    pub kind: EdgeKind,
}

/// An edge to a sibling fragment (`foo` <-> `foo.cold`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FragmentEdge {
    pub function: FuncId,
    pub addr: Vaddr,
    pub kind: EdgeKind,
}

#[derive(Clone, Debug)]
pub struct Block {
    pub start: Vaddr,
    /// Indices into `Function::insts`.
    pub insts: Range<u32>,
    pub terminator: Terminator,
    pub succs: Vec<Edge>,
    /// Successors in another fragment of the same function.
    pub fragment_succs: Vec<FragmentEdge>,
    pub is_entry: bool,
    pub is_landing_pad: bool,
    /// Its address is taken (computed-goto label or other reference from data).
    pub is_address_taken: bool,
    /// It lies between an exclusive load and its store (AArch64 `ldxr` .. `stxr`): nothing
    /// may be inserted into it (a memory access there can clear the exclusive monitor, so
    /// the store fails forever), and it must stay where execution reaches it without
    /// another memory access on the way.
    pub in_exclusive_sequence: bool,
    /// Control can reach it from an entry, a landing pad, an address-taken label or a jump
    /// from a sibling fragment. Unreachable blocks are alignment padding after a `ret` or code
    /// a compiler left after a call that does not return; nothing runs them.
    pub is_reachable: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum JumpTableKind {
    /// Entries are absolute addresses.
    Absolute,
    /// Target = base + sign-extended entry.
    Relative { base: Vaddr },
    /// Target = `anchor` + (entry << `shift`), the entry sign-extended when `signed`: AArch64
    /// tables, whose entries count instructions from a label of the function (the anchor an
    /// `adr` computes). No relocation marks their entries.
    Scaled {
        anchor: Vaddr,
        signed: bool,
        shift: u8,
    },
}

impl JumpTableKind {
    /// The target an entry of a `Scaled` table sends its dispatch to: `anchor` plus the
    /// little-endian `entry` (1, 2 or 4 bytes, sign-extended when `signed`) shifted left by
    /// `shift`. `None` for other kinds and other widths.
    pub fn scaled_target(self, entry: &[u8]) -> Option<Vaddr> {
        let JumpTableKind::Scaled {
            anchor,
            signed,
            shift,
        } = self
        else {
            return None;
        };
        if !matches!(entry.len(), 1 | 2 | 4) {
            return None;
        }
        let mut raw = [0u8; 8];
        raw[..entry.len()].copy_from_slice(entry);
        let unsigned = u64::from_le_bytes(raw);
        let unused = 64 - entry.len() as u32 * 8;
        let value = if signed {
            ((unsigned << unused) as i64) >> unused
        } else {
            unsigned as i64
        };
        Some(anchor.offset(value << shift))
    }
}

/// How the number of entries of a jump table was established.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableBound {
    /// `cmp`/`ja` before the dispatch.
    RangeCheck { check: Vaddr },
    /// The run of relocations covering the table.
    Relocations,
    /// Both agree.
    RangeCheckAndRelocations { check: Vaddr },
    /// No range check, because the index has only `bits` low bits that may be non-zero (it was
    /// zero-extended from a byte, say) and the table covers every such value: `1 << bits`
    /// entries, each one code of the function.
    IndexWidth { bits: u8 },
    /// Neither exists (no relocations, and the compiler knew the index in range): the table
    /// was read until an entry stopped being an instruction of the function. Inferred, not
    /// proven.
    Scanned,
}

#[derive(Clone, Debug)]
pub struct JumpTable {
    pub addr: Vaddr,
    pub entry_size: u8,
    pub kind: JumpTableKind,
    /// The indirect jump that uses it.
    pub jump_at: Vaddr,
    /// Target of each entry, in table order.
    pub entries: Vec<Vaddr>,
    pub bound: TableBound,
    /// Out-of-range index destination, when a range check was found.
    pub default_target: Option<Vaddr>,
}

impl JumpTable {
    /// The bytes its entries occupy.
    pub fn span(&self) -> VaddrRange {
        VaddrRange::new(
            self.addr,
            self.entries.len() as u64 * u64::from(self.entry_size),
        )
    }

    /// How an entry is turned into a target: two tables that claim one entry read it the
    /// same way only if these agree.
    pub fn reading(&self) -> (JumpTableKind, u8) {
        (self.kind, self.entry_size)
    }
}

#[derive(Clone, Debug)]
pub struct Function {
    pub id: FuncId,
    /// The primary name first, then aliases (same address).
    pub names: Vec<String>,
    /// For local symbols: the source file named by the preceding STT_FILE symbol.
    pub file: Option<String>,
    pub is_local: bool,
    pub range: VaddrRange,
    pub origin: Origin,
    pub parent: Option<Parent>,
    /// Other entry points than `range.start` (symbols inside the function, call targets).
    pub secondary_entries: Vec<Vaddr>,
    /// Its entry's address is used otherwise than by direct calls and jumps: stored in data
    /// (function pointers, vtables, init arrays), computed by code (`lea func(%rip)`), exported
    /// as a dynamic symbol, or the program's entry point. Such a function's address may be
    /// compared, so identical code folding never folds it away.
    pub address_taken: bool,
    /// Bytes of padding (nop/int3/zero) after the function, before the next one.
    pub padding_after: u64,
    /// Every instruction of its range, decoded linearly (empty once released: `released`, and
    /// while set aside: `insts_set_aside`).
    pub insts: Vec<Inst>,
    pub blocks: Vec<Block>,
    pub calls: Vec<Call>,
    pub jump_tables: Vec<JumpTable>,
    pub lsda: Option<Vaddr>,
    /// Unwind rows of the function's FDE (empty without FDE, and unless discovery was asked to
    /// keep them: `rivet_discover::CfiRows`).
    pub cfi: Vec<CfiRow>,
    pub status: Status,
    /// Set when its instructions, blocks and calls were dropped to save memory, because
    /// nothing will rewrite it ([`Function::release`]): what is left of them. Its jump tables
    /// and everything above stay.
    pub released: Option<Box<Released>>,
    /// Set while its instructions are dropped but its blocks and calls kept: discovery asked
    /// to keep no instructions (`rivet_discover::Instructions::SetAside`) sets every
    /// function's aside once its CFG is built, and [`Program::restore_instructions`] decodes
    /// those of the functions that will move again. [`Function::instructions`] decodes them
    /// meanwhile.
    pub insts_set_aside: bool,
}

/// What a released function keeps of its instructions and blocks ([`Function::release`]):
/// what the emitter and `--verify` ask of code that stays. Its instructions can be decoded
/// again from the input ([`Function::instructions`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Released {
    /// A block started at its entry ([`Function::has_entry_block`]).
    pub entry_block: bool,
    /// A block other than an entry had its address taken
    /// ([`Function::has_address_taken_label`]).
    pub label_address_taken: bool,
    /// The instructions of its reachable blocks, as index ranges in address order, adjacent
    /// ones merged ([`Function::reachable_inst_ranges`]).
    pub reachable_insts: Vec<Range<u32>>,
}

/// Which block follows each block of one fragment in rewritten code, seeing through blocks
/// that take no bytes there ([`Function::placed_next`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlacedNext {
    /// By position in the fragment: the block that starts where that block's code ends.
    next: Vec<Option<BlockId>>,
    /// Blocks that take no bytes, each with the block that starts at the same address (few:
    /// the padding between a fall-through and its successor).
    same_place: Vec<(BlockId, BlockId)>,
}

impl PlacedNext {
    /// The block that follows position `pos` of the fragment.
    pub fn at(&self, pos: usize) -> Option<BlockId> {
        self.next.get(pos).copied().flatten()
    }

    /// The block a branch to `target` arrives at: `target`, or for a block that takes no
    /// bytes, the block that starts where it does.
    pub fn arrives_at(&self, target: BlockId) -> BlockId {
        self.same_place
            .iter()
            .find(|&&(b, _)| b == target)
            .map_or(target, |&(_, at)| at)
    }

    /// Whether a branch from the block at `pos` to `target` (a block of the function, `None`
    /// for anything else) arrives at the block placed after it, so that it needs no jump.
    pub fn is_next(&self, pos: usize, target: Option<BlockId>) -> bool {
        match (self.at(pos), target) {
            (Some(next), Some(target)) => self.arrives_at(target) == next,
            _ => false,
        }
    }
}

impl Function {
    pub fn name(&self) -> &str {
        self.names.first().map_or("<anonymous>", String::as_str)
    }

    /// The name with its file for local symbols (`helper/util.c`), unique in practice.
    pub fn qualified_name(&self) -> String {
        match (&self.file, self.is_local) {
            (Some(file), true) => format!("{}/{}", self.name(), file),
            _ => self.name().to_string(),
        }
    }

    pub fn is_simple(&self) -> bool {
        self.status == Status::Simple
    }

    pub fn skip_reason(&self) -> Option<&SkipReason> {
        match &self.status {
            Status::Skipped(r) => Some(r),
            Status::Simple => None,
        }
    }

    /// Whether rewritten code leaves instruction `i` out: alignment padding
    /// ([`Inst::is_padding_nop`]) anywhere but in the run of `nop`s a function may start with.
    /// Padding aligned the next label of the input's layout; in a new layout it would only
    /// execute (gcc pads loop heads that the code before falls into) and take cache space.
    /// Entry `nop`s stay: they can be a patchable-entry sled (`-fpatchable-function-entry`)
    /// that a tracer overwrites at run time. So does a `nop` that a linker left in place of
    /// the first half of an address pair ([`Inst::may_widen_into_previous`]): the address may
    /// need both words again. A dropped instruction takes no bytes: its new address is that
    /// of whatever follows it.
    pub fn is_dropped_padding(&self, i: u32) -> bool {
        debug_assert!(self.has_instructions(), "{}: released", self.name());
        let Some(inst) = self.insts.get(i as usize) else {
            return false;
        };
        inst.is_padding_nop()
            && !self.insts[..i as usize].iter().all(Inst::is_padding_nop)
            && !self
                .insts
                .get(i as usize + 1)
                .is_some_and(Inst::may_widen_into_previous)
    }

    /// The instructions of `block` that rewritten code holds, in order (padding left out).
    pub fn kept_insts<'a>(&'a self, block: &Block) -> impl Iterator<Item = &'a Inst> + 'a {
        (block.insts.start..block.insts.end)
            .filter(|&i| !self.is_dropped_padding(i))
            .map(|i| &self.insts[i as usize])
    }

    /// Bytes of `block`'s instructions in rewritten code, before its branch is re-encoded.
    pub fn kept_size(&self, block: &Block) -> u64 {
        self.kept_insts(block).map(|i| u64::from(i.len())).sum()
    }

    /// Whether `block` is dead padding: unreachable, and holding only padding the rewrite
    /// leaves out (the `nop`s after a `ret` that aligned the next jump target). Placed right
    /// before its fall-through successor it takes no bytes and still arrives where it did; the
    /// layout puts it there, and the block before it counts as followed by that successor
    /// ([`Function::placed_next`]).
    pub fn is_dead_padding(&self, block: &Block) -> bool {
        !block.is_reachable && self.kept_insts(block).next().is_none()
    }

    /// Where `block` goes on when it does nothing else: the address it falls through or jumps
    /// to, for a block that keeps no instruction but padding and a final `jmp` within the
    /// function (which the emitter re-creates, or drops when the target comes next).
    pub fn passes_straight_to(&self, block: &Block) -> Option<Vaddr> {
        let mut kept = self.kept_insts(block);
        match self.block_exit(block)? {
            BlockExit::FallThrough { to } => kept.next().is_none().then_some(to),
            BlockExit::Jump {
                to,
                tail_call: false,
            } => (kept.count() == 1).then_some(to),
            _ => None,
        }
    }

    /// How the blocks of one fragment (`blocks`, in order) follow each other in rewritten code.
    /// A block that does nothing but go on to another ([`Function::passes_straight_to`]),
    /// placed right before that one, takes no bytes: it starts where that block does, so the
    /// block before it counts as followed by that block, and a branch to it arrives there too.
    /// Anywhere else such a block ends with a jump and counts as placed.
    ///
    /// `reachable_too: false` sees through dead padding only (unreachable blocks,
    /// [`Function::is_dead_padding`]): for code with instrumentation probes, whose counters
    /// may sit on a reachable padding block and must not be jumped over.
    pub fn placed_next(&self, blocks: &[BlockId], reachable_too: bool) -> PlacedNext {
        let mut placed = PlacedNext {
            next: vec![None; blocks.len()],
            same_place: Vec::new(),
        };
        for i in (0..blocks.len().saturating_sub(1)).rev() {
            let j = i + 1;
            let b = blocks[j];
            // `b` takes no bytes when it only goes on to the block placed after it.
            let seen_through = placed.next[j].filter(|&succ| {
                self.blocks.get(b.0 as usize).is_some_and(|block| {
                    (reachable_too || !block.is_reachable)
                        && self
                            .passes_straight_to(block)
                            .and_then(|to| self.block_at(to))
                            == Some(succ)
                })
            });
            placed.next[i] = match seen_through {
                Some(succ) => {
                    placed.same_place.push((b, succ));
                    Some(succ)
                }
                None => Some(b),
            };
        }
        placed
    }

    pub fn block_insts(&self, block: &Block) -> &[Inst] {
        debug_assert!(self.has_instructions(), "{}: released", self.name());
        &self.insts[block.insts.start as usize..block.insts.end as usize]
    }

    /// Drops the instructions, blocks and calls of a function that stays where it is: a
    /// large program's model is mostly those (40 bytes per x86-64 instruction, 112 per
    /// block, 64 per call), and profile-guided optimization moves a tenth of the functions.
    /// What code that stays is still asked about is kept in `released`; the instructions can
    /// be decoded again ([`Function::instructions`]). Everything else of the function
    /// (names, range, entries, jump tables, status) stays.
    pub fn release(&mut self) {
        let mut reachable_insts: Vec<Range<u32>> = Vec::new();
        for b in self.blocks.iter().filter(|b| b.is_reachable) {
            match reachable_insts.last_mut() {
                Some(last) if last.end == b.insts.start => last.end = b.insts.end,
                _ => reachable_insts.push(b.insts.clone()),
            }
        }
        let released = Released {
            entry_block: self.has_entry_block(),
            label_address_taken: self.has_address_taken_label(),
            reachable_insts,
        };
        self.insts = Vec::new();
        self.insts_set_aside = false;
        self.blocks = Vec::new();
        self.calls = Vec::new();
        self.released = Some(Box::new(released));
    }

    /// Whether its decoded model may be dropped, to be decoded again when needed: it has
    /// instructions (code), and its entry does not forward elsewhere (an AArch64 veneer, whose
    /// instructions [`Program::forwarded_destination`] reads).
    pub fn may_drop_model(&self, isa: Isa) -> bool {
        !self.insts.is_empty() && isa.forwarding_destination(&self.insts).is_none()
    }

    /// Drops its instructions and keeps its blocks and calls (`insts_set_aside`), if it
    /// [`may_drop_model`](Function::may_drop_model).
    pub fn set_instructions_aside(&mut self, isa: Isa) {
        if self.may_drop_model(isa) {
            self.insts = Vec::new();
            self.insts_set_aside = true;
        }
    }

    /// Takes its instructions back from `elf` (the input it was discovered in), set aside or
    /// released. A released function loses its `released` record, and its blocks and calls
    /// stay empty until its CFG is built again (discovery, when a later round rebuilds it).
    pub fn reopen(&mut self, elf: &ElfFile<'_>) {
        if !self.has_instructions() {
            self.insts = self.instructions(elf).into_owned();
            self.insts_set_aside = false;
            self.released = None;
        }
    }

    /// Whether `insts` holds its instructions: neither released nor set aside.
    pub fn has_instructions(&self) -> bool {
        self.released.is_none() && !self.insts_set_aside
    }

    /// Whether [`Function::release`] dropped its instructions and blocks.
    pub fn is_released(&self) -> bool {
        self.released.is_some()
    }

    /// Whether it has blocks and one of them starts at its entry.
    pub fn has_entry_block(&self) -> bool {
        match &self.released {
            Some(r) => r.entry_block,
            None => !self.blocks.is_empty() && self.block_at(self.range.start).is_some(),
        }
    }

    /// Whether a block other than an entry has its address taken.
    pub fn has_address_taken_label(&self) -> bool {
        match &self.released {
            Some(r) => r.label_address_taken,
            None => self
                .blocks
                .iter()
                .any(|b| b.is_address_taken && !b.is_entry),
        }
    }

    /// The instructions of its reachable blocks, as index ranges into
    /// [`Function::instructions`], in address order.
    pub fn reachable_inst_ranges(&self) -> Vec<Range<u32>> {
        match &self.released {
            Some(r) => r.reachable_insts.clone(),
            None => self
                .blocks
                .iter()
                .filter(|b| b.is_reachable)
                .map(|b| b.insts.clone())
                .collect(),
        }
    }

    /// The instructions of its reachable blocks, in address order, out of `insts` (its
    /// [`Function::instructions`]).
    pub fn reachable_insts<'a>(&self, insts: &'a [Inst]) -> impl Iterator<Item = &'a Inst> {
        self.reachable_inst_ranges()
            .into_iter()
            .flat_map(move |range| {
                insts
                    .get(range.start as usize..range.end as usize)
                    .unwrap_or_default()
            })
    }

    /// Its instructions: the model's, or, once released or set aside, decoded again from `elf` (the
    /// input it was discovered in) exactly as discovery decoded them (linearly, from the
    /// start of its range). Empty when the input has no bytes for the range.
    pub fn instructions<'a>(&'a self, elf: &ElfFile<'_>) -> std::borrow::Cow<'a, [Inst]> {
        if self.has_instructions() {
            return std::borrow::Cow::Borrowed(&self.insts);
        }
        match elf.bytes_at(self.range.start, self.range.len()) {
            Some(bytes) => {
                std::borrow::Cow::Owned(Isa::of(elf).decode_all(bytes, self.range.start))
            }
            None => std::borrow::Cow::Borrowed(&[]),
        }
    }

    /// The block starting at `addr`.
    pub fn block_at(&self, addr: Vaddr) -> Option<BlockId> {
        self.blocks
            .binary_search_by_key(&addr, |b| b.start)
            .ok()
            .map(|i| BlockId(i as u32))
    }

    pub fn block(&self, id: BlockId) -> &Block {
        &self.blocks[id.0 as usize]
    }

    /// The unwind row in effect at `addr`.
    pub fn cfi_at(&self, addr: Vaddr) -> Option<&CfiRow> {
        cfi_at(&self.cfi, addr)
    }
}

/// The row of `rows` (sorted by address, as `Function::cfi`) in effect at `addr`.
pub fn cfi_at(rows: &[CfiRow], addr: Vaddr) -> Option<&CfiRow> {
    let pos = rows.partition_point(|r| r.range.start <= addr);
    pos.checked_sub(1)
        .map(|i| &rows[i])
        .filter(|r| r.range.contains(addr))
}

/// The root of the family of function `f`, whose parent is `parent`
/// ([`Program::family_root`]).
pub fn family_root_by(f: FuncId, parent: Option<Parent>) -> FuncId {
    match parent {
        Some(Parent {
            function,
            kind: PartKind::ColdFragment,
        }) => function,
        _ => f,
    }
}

/// By function (`parents` holds each one's parent): whether its family (it, its root and the
/// root's other parts) holds one of `picked`.
pub fn families_holding(
    parents: &[Option<Parent>],
    picked: impl IntoIterator<Item = FuncId>,
) -> Vec<bool> {
    let root = |i: usize| family_root_by(FuncId(i as u32), parents[i]).0 as usize;
    let mut root_picked = vec![false; parents.len()];
    for f in picked {
        if (f.0 as usize) < parents.len() {
            root_picked[root(f.0 as usize)] = true;
        }
    }
    (0..parents.len()).map(|i| root_picked[root(i)]).collect()
}

/// The whole program as discovered.
#[derive(Clone, Debug)]
pub struct Program {
    pub info: BinaryInfo,
    /// Sorted by start address; `FuncId(i)` is `functions[i]`.
    pub functions: Vec<Function>,
    pub plt: Vec<PltEntry>,
    /// Problems that did not stop discovery (malformed .eh_frame, ...).
    pub warnings: Vec<String>,
}

/// The name discovery gives a function that has no symbol (stripped binaries), found by its
/// FDE: its start address, so that a profile of the stripped copy still says which function
/// of the unstripped build it means (`unnamed_function_start`).
pub fn unnamed_function_name(start: Vaddr) -> String {
    format!("{UNNAMED_PREFIX}{:x}", start.get())
}

/// The start address an `unnamed_function_name` encodes (a profile's `/N` suffix allowed).
pub fn unnamed_function_start(name: &str) -> Option<Vaddr> {
    let hex = name.strip_prefix(UNNAMED_PREFIX)?;
    let hex = hex.split_once('/').map_or(hex, |(h, _)| h);
    u64::from_str_radix(hex, 16).ok().map(Vaddr)
}

const UNNAMED_PREFIX: &str = "__rivet_fde_";

impl Program {
    pub fn function(&self, id: FuncId) -> &Function {
        &self.functions[id.0 as usize]
    }

    /// The function whose range contains `addr`.
    pub fn function_containing(&self, addr: Vaddr) -> Option<&Function> {
        let pos = self.functions.partition_point(|f| f.range.start <= addr);
        self.functions[..pos]
            .iter()
            .rev()
            .take(8)
            .find(|f| f.range.contains(addr))
    }

    /// Where a call or jump to `target` ends up when `target` is the entry of a function
    /// that only forwards it (a linker veneer: `Isa::forwarding_destination`), so rewritten
    /// code can go there directly. `None` for every other address.
    pub fn forwarded_destination(&self, target: Vaddr) -> Option<Vaddr> {
        let f = self
            .function_containing(target)
            .filter(|f| f.range.start == target)?;
        self.info.isa.forwarding_destination(&f.insts)
    }

    /// Releases the instructions and blocks ([`Function::release`]) of the functions
    /// `stays` picks, and returns how many. A function whose entry forwards elsewhere (an
    /// AArch64 veneer) keeps them: [`Program::forwarded_destination`] reads them when
    /// rewritten code calls it. So does one without instructions.
    pub fn release(&mut self, stays: impl Fn(&Function) -> bool) -> usize {
        let isa = self.info.isa;
        let mut released = 0;
        for f in &mut self.functions {
            if (f.insts_set_aside || f.may_drop_model(isa)) && !f.is_released() && stays(f) {
                f.release();
                released += 1;
            }
        }
        released
    }

    /// Decodes again the instructions that discovery set aside
    /// ([`Function::insts_set_aside`]) of the functions `moves` picks: the ones a rewrite
    /// reads through `insts`. Returns how many.
    pub fn restore_instructions(
        &mut self,
        elf: &ElfFile<'_>,
        moves: impl Fn(&Function) -> bool,
    ) -> usize {
        let mut restored = 0;
        for f in &mut self.functions {
            if f.insts_set_aside && moves(f) {
                f.reopen(elf);
                restored += 1;
            }
        }
        restored
    }

    /// The function a compiler-split cold part belongs to (`f` itself for ordinary
    /// functions): a family is rewritten whole or not at all.
    pub fn family_root(&self, f: FuncId) -> FuncId {
        family_root_by(f, self.function(f).parent)
    }

    /// By `FuncId`: whether the function's family holds one of `picked`
    /// ([`families_holding`]).
    pub fn families_holding(&self, picked: impl IntoIterator<Item = FuncId>) -> Vec<bool> {
        let parents: Vec<Option<Parent>> = self.functions.iter().map(|f| f.parent).collect();
        families_holding(&parents, picked)
    }

    /// Functions with `name` among their names (several for same-named locals).
    pub fn functions_named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Function> {
        self.functions
            .iter()
            .filter(move |f| f.names.iter().any(|n| n == name) || f.qualified_name() == name)
    }
}
