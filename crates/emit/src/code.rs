//! Code emission: the bytes of each fragment, in two passes.
//!
//! Pass one (`plan_fragment`) lays out one fragment on its own: it lists what goes in it
//! (copied instructions, re-created branches, dropped jumps to the next block, the
//! input's alignment padding left out) and relaxes
//! branches between blocks of the same fragment to their short form where they reach. Branches
//! that leave the fragment use the near form, so a fragment's size does not depend on where it
//! lands (docs/architecture.md: fragment-local relaxation); the one exception is a fragment whose place
//! is known before any is placed (`KnownPlace`: in place), whose branches to code that does
//! not move may be short too; and, on AArch64, conditional branches to a block of another
//! fragment when the rewrite bounded the whole new text within their reach
//! (`FragmentExits::Direct`): short wherever the fragments land. Once every fragment has an address,
//! the `AddressMap` knows the new address of every instruction of every rewritten function,
//! and pass two (`encode_fragment`) writes the final bytes, recomputing every PC-relative
//! field and every absolute code address the relocations point out.

use std::collections::HashMap;

use rivet_arch::{
    Branch, BranchEncoder, BranchForm, EncodeError, Flow, FragmentExits, Inst, ProbeShape,
};
use rivet_elf::{ElfFile, Vaddr};
use rivet_ir::layout::{AlignedBlock, FragmentRef};
use rivet_ir::probes::{EdgeTarget, FunctionProbes, ProbeAt};
use rivet_ir::{BlockExit, BlockId, Function, Program, WrittenEnd};

use crate::cache_sets::BlockExtent;

/// Where a re-created branch goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// A block of the same function.
    Block(BlockId),
    /// Any other address, translated through the address map.
    Address(Vaddr),
    /// An edge probe's block at the end of the same fragment (instrumentation).
    Trampoline(u32),
}

/// Calls and tail calls into PLT stubs that rewritten code makes through the stub's GOT slot
/// instead (`rivet optimize --plt`), by stub address.
///
/// A stub only loads its slot and jumps there, so `call *slot(%rip)` reaches the same function
/// with one indirect jump fewer, and the stub's cache line stays cold. Lazy binding still
/// works: until the first call resolves it, the slot points back into the stub's own resolver
/// path, which finds the same stack as after `call stub`.
#[derive(Clone, Debug, Default)]
pub struct ViaSlots {
    slot_of_stub: HashMap<Vaddr, Vaddr>,
}

impl ViaSlots {
    /// Every PLT stub of `program` whose slot is known.
    pub fn of_program(program: &Program) -> ViaSlots {
        ViaSlots {
            slot_of_stub: program.plt.iter().map(|e| (e.addr, e.slot)).collect(),
        }
    }

    /// The slot `inst`, a direct call or jump, should go through instead; `None` otherwise.
    pub fn slot_for(&self, inst: &Inst) -> Option<Vaddr> {
        match inst.flow() {
            Flow::Call { target } | Flow::Jump { target } => {
                self.slot_of_stub.get(&target).copied()
            }
            _ => None,
        }
    }
}

/// Where a label of a fragment is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum LabelId {
    Block(BlockId),
    Trampoline(u32),
}

#[derive(Clone, Copy, Debug)]
enum Item {
    /// Start of a block (no bytes).
    Label(BlockId),
    /// Start of an edge probe's block (no bytes).
    TrampolineLabel(u32),
    /// Records the target of the indirect call or jump `inst`, which follows (instrumentation).
    IndirectProbe { inst: u32, table: u32, size: u8 },
    /// A counter increment (instrumentation).
    Probe {
        counter: u32,
        shape: ProbeShape,
        /// The original address whose unwind state holds here.
        state_at: Vaddr,
    },
    /// An original instruction, copied (PC-relative field recomputed).
    Copy { inst: u32 },
    /// An instruction of another block, copied again at the end of a block that jumped
    /// there (`--tail-duplication`): encoded like `Copy`, in its own unwind state (the pass
    /// checked that the copy starts in the state its original does), but not where the
    /// instruction's new address is: that stays the original's.
    Duplicate { inst: u32 },
    /// An indirect call promoted (`--indirect-call-promotion`): compares against its
    /// hottest callees, a direct call to each, and the call itself as the fallback, all in
    /// the call's unwind state; the instruction after the call follows (the join). The
    /// callees are the plan's `promoted` entry for `inst`.
    Promoted {
        inst: u32,
        shape: rivet_arch::PromotionShape,
    },
    /// The `ret` of another block (`inst`), copied in place of a jump to that block
    /// (`BlockExit::Return`); it runs in the unwind state of the jump it replaces, at
    /// `state_at`, which the peephole checked is the `ret`'s own. Its original address stays
    /// that of its own block's copy.
    CopiedReturn { inst: u32, state_at: Vaddr },
    /// An original direct call or jump into a PLT stub, written as the same transfer through
    /// the stub's GOT slot (see `ViaSlots`).
    ViaSlot { inst: u32, slot: Vaddr },
    /// Alignment padding of the input, left out (no bytes; see `Function::is_dropped_padding`).
    Dropped { inst: u32 },
    /// Where a block-ending branch was (no bytes): it was dropped or is re-created by the
    /// `Branch` items that follow.
    Replaced { inst: u32 },
    /// Padding (multi-byte `nop`s) that puts the label of block `aligns`, which follows,
    /// at the next multiple of `align`, unless that takes more than `max_padding` bytes.
    /// It sits right before that label, or at an earlier point no code falls through (after
    /// a jump or a return), where it never runs. Its size, `pad`, is set by relaxation.
    Align {
        align: u16,
        max_padding: u8,
        aligns: BlockId,
        pad: u8,
        /// Placed where no code falls through.
        never_runs: bool,
        /// The start of the block placed after the padding, whose unwind state holds in it.
        state_at: Vaddr,
    },
    /// A branch created at the end of a block.
    Branch {
        branch: NewBranch,
        target: Target,
        form: BranchForm,
        short_size: u8,
        near_size: u8,
        /// The original address whose unwind state holds when the branch executes.
        state_at: Vaddr,
    },
}

/// Bytes of padding that put offset `at` on a multiple of `align`; 0 when that takes more
/// than `max_padding`.
fn padding(at: u64, align: u16, max_padding: u8) -> u8 {
    let align = u64::from(align.max(1));
    let pad = (align - at % align) % align;
    if pad > u64::from(max_padding) {
        0
    } else {
        pad as u8
    }
}

impl Item {
    /// Size of the item (for `Align`, the padding relaxation chose).
    fn size(&self, f: &Function) -> u64 {
        match *self {
            Item::Label(_)
            | Item::TrampolineLabel(_)
            | Item::Replaced { .. }
            | Item::Dropped { .. } => 0,
            Item::Align { pad, .. } => u64::from(pad),
            Item::Probe { shape, .. } => u64::from(shape.size()),
            Item::Promoted { shape, .. } => shape.size(),
            Item::IndirectProbe { size, .. } => u64::from(size),
            Item::Copy { inst } | Item::CopiedReturn { inst, .. } | Item::Duplicate { inst } => {
                u64::from(f.insts[inst as usize].len())
            }
            Item::ViaSlot { inst, .. } => {
                let inst = &f.insts[inst as usize];
                u64::from(inst.isa().via_slot_size())
            }
            Item::Branch {
                form,
                short_size,
                near_size,
                ..
            } => u64::from(match form {
                BranchForm::Short => short_size,
                BranchForm::Near => near_size,
            }),
        }
    }
}

/// A re-created branch, small (an instruction index rather than the instruction): plans hold
/// one per block of the program.
#[derive(Clone, Copy, Debug)]
enum NewBranch {
    Jump,
    Cond { inst: u32, inverted: bool },
}

impl NewBranch {
    fn resolve(self, f: &Function) -> Branch {
        match self {
            NewBranch::Jump => Branch::Jump,
            NewBranch::Cond { inst, inverted } => Branch::Cond {
                inst: f.insts[inst as usize],
                inverted,
            },
        }
    }
}

/// A fragment laid out on its own: its items with their offsets, and its size.
#[derive(Clone, Debug)]
pub struct FragmentPlan {
    pub fragment: FragmentRef,
    items: Vec<Item>,
    /// Offset of each item (same length as `items`). A u32: plans hold an entry per
    /// instruction of every rewritten function, and a fragment is far below 4 GiB.
    offsets: Vec<u32>,
    pub size: u64,
    /// New offset of every instruction of the function placed in this fragment, as
    /// (instruction index, offset). A dropped jump gets the offset where it would have been.
    pub inst_offsets: Vec<(u32, u32)>,
    /// Offset of each edge probe's block, by number.
    trampolines: HashMap<u32, u64>,
    /// The callees (original entries, in compare order) of each promoted call of the
    /// fragment, by instruction index; empty without promotion.
    promoted: Vec<(u32, Vec<Vaddr>)>,
    /// Targets (original addresses) that branches of this fragment reach through veneers,
    /// which follow its code, from `veneer_start` on (`far_targets`).
    pub veneers: Vec<Vaddr>,
    veneer_start: u64,
    /// Veneer destinations (original addresses) with no landing pad of their own, in code
    /// that BTI guards, whose landing pads this fragment holds after its veneers.
    pub landings: Vec<Vaddr>,
}

/// A run of bytes of a fragment and the original code it stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    pub offset: u64,
    pub size: u64,
    /// The original address whose unwind state applies.
    pub state_at: Vaddr,
    /// The original instruction copied here, if it is one (call sites come from these).
    pub inst: Option<u32>,
    /// The original branch this re-encoded branch stands for; `None` for copies and for
    /// jumps added where a fall-through no longer reaches its successor.
    pub replaces: Option<u32>,
}

impl FragmentPlan {
    /// The byte range of each block of the fragment, with its count in `counts` (indexed by
    /// block; 0 where missing). Padding before an aligned block counts as the end of the block
    /// before it.
    pub fn block_extents(&self, counts: &[u64]) -> Vec<BlockExtent> {
        let starts: Vec<(BlockId, u64)> = self
            .items
            .iter()
            .zip(&self.offsets)
            .filter_map(|(item, &offset)| match *item {
                Item::Label(b) => Some((b, u64::from(offset))),
                _ => None,
            })
            .collect();
        starts
            .iter()
            .enumerate()
            .map(|(i, &(b, start))| BlockExtent {
                start,
                end: starts.get(i + 1).map_or(self.size, |&(_, next)| next),
                count: counts.get(b.0 as usize).copied().unwrap_or(0),
            })
            .collect()
    }

    /// How many blocks the fragment aligns, and how many of them with padding placed where
    /// no code falls through.
    pub fn aligned_blocks(&self) -> (usize, usize) {
        self.items
            .iter()
            .fold((0, 0), |(all, never_run), item| match item {
                Item::Align { never_runs, .. } => (all + 1, never_run + usize::from(*never_runs)),
                _ => (all, never_run),
            })
    }

    /// The most bytes of block alignment padding the fragment may hold, whatever its other
    /// items' sizes: what a plan of the same blocks with smaller branches can hold more of.
    pub fn padding_slack(&self) -> u64 {
        self.items
            .iter()
            .map(|item| match item {
                Item::Align { max_padding, .. } => u64::from(*max_padding),
                _ => 0,
            })
            .sum()
    }

    /// The most bytes the fragment's short branches may grow by when more alignment padding
    /// (`padding_slack`) lies between them and their targets: none where the whole fragment,
    /// that padding included, is within a short branch's reach, or holds no padding; else
    /// each short branch taking its near form.
    pub fn growth_slack(&self, isa: rivet_arch::Isa) -> u64 {
        let slack = self.padding_slack();
        let span = (self.size + slack) as i64;
        if slack == 0
            || (isa.short_branch_reaches(0, 0, span) && isa.short_branch_reaches(span as u64, 0, 0))
        {
            return 0;
        }
        self.items
            .iter()
            .map(|item| match *item {
                Item::Branch {
                    form: BranchForm::Short,
                    short_size,
                    near_size,
                    ..
                } => u64::from(near_size.saturating_sub(short_size)),
                _ => 0,
            })
            .sum()
    }

    /// How many calls and tail calls the fragment makes through a PLT stub's GOT slot.
    pub fn calls_via_slot(&self) -> usize {
        self.items
            .iter()
            .filter(|item| matches!(item, Item::ViaSlot { .. }))
            .count()
    }

    /// The non-empty items of the fragment, in order.
    pub fn pieces(&self, f: &Function) -> Vec<Piece> {
        let mut replaced = None;
        self.items
            .iter()
            .zip(&self.offsets)
            .filter_map(|(item, &offset)| {
                let offset = u64::from(offset);
                let size = item.size(f);
                let (state_at, inst, replaces) = match *item {
                    // Padding runs (when fallen into) in the state of the block it precedes.
                    Item::Align { state_at, .. } => (state_at, None, None),
                    // A promoted call's compares and direct calls stand for the call: one call
                    // site (its landing pad and action), one unwind state.
                    Item::Copy { inst }
                    | Item::ViaSlot { inst, .. }
                    | Item::Promoted { inst, .. } => {
                        replaced = None;
                        (f.insts[inst as usize].addr(), Some(inst), None)
                    }
                    // A re-created terminator follows the `Replaced` item of its original
                    // and carries its address; an added jump carries its successor's.
                    Item::Branch { state_at, .. } | Item::CopiedReturn { state_at, .. } => (
                        state_at,
                        None,
                        replaced.filter(|&i: &u32| f.insts[i as usize].addr() == state_at),
                    ),
                    Item::Probe { state_at, .. } => (state_at, None, None),
                    // No call site: the pass copies no calls.
                    Item::Duplicate { inst } => {
                        replaced = None;
                        (f.insts[inst as usize].addr(), None, None)
                    }
                    Item::IndirectProbe { inst, .. } => (f.insts[inst as usize].addr(), None, None),
                    Item::Replaced { inst } => {
                        replaced = Some(inst);
                        return None;
                    }
                    Item::Label(_) | Item::TrampolineLabel(_) => {
                        replaced = None;
                        return None;
                    }
                    Item::Dropped { .. } => return None,
                };
                (size > 0).then_some(Piece {
                    offset,
                    size,
                    state_at,
                    inst,
                    replaces,
                })
            })
            .collect()
    }
}

/// Why a function cannot be emitted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EmitError {
    #[error(transparent)]
    Encode(#[from] EncodeError),
    #[error("{what} at {at} is not supported by the rewriter")]
    Unsupported { what: &'static str, at: Vaddr },
    #[error("{at} refers to {target}, inside a moved instruction")]
    UnmappableTarget { at: Vaddr, target: Vaddr },
    #[error("cannot read the bytes of the instruction at {at}")]
    Unreadable { at: Vaddr },
}

fn target_of(f: &Function, addr: Vaddr) -> Target {
    match f.block_at(addr) {
        Some(b) => Target::Block(b),
        None => Target::Address(addr),
    }
}

/// What a fragment holds besides its blocks' own code.
#[derive(Clone, Copy, Debug, Default)]
pub struct PlanOptions<'a> {
    /// The function's instrumentation probes.
    pub probes: Option<&'a FunctionProbes>,
    /// Blocks to start at a multiple of `block_alignment` (hot loop heads).
    pub aligned: &'a [AlignedBlock],
    pub block_alignment: u16,
    /// Calls into PLT stubs to write through the stubs' GOT slots.
    pub via_slots: Option<&'a ViaSlots>,
    /// Blocks whose exits the peepholes changed (`FunctionLayout::changed_exits`).
    pub changed_exits: &'a [rivet_ir::layout::ChangedExit],
    /// Indirect calls to promote (`FunctionLayout::promoted_calls`).
    pub promoted: &'a [rivet_ir::layout::PromotedCall],
    /// The code is position-independent: promoted calls compare against addresses computed
    /// from the instruction pointer, not immediates.
    pub pic: bool,
    /// Where the fragment will land, when that is known before any fragment is placed: the
    /// first fragment of a function rewritten in place starts where the function did.
    pub known_place: Option<KnownPlace<'a>>,
    /// How conditional branches to a block of another fragment of the function are written
    /// (AArch64: through islands, or straight there when the rewrite bounded the whole new
    /// text within their reach; `FragmentExits`).
    pub exits: FragmentExits,
}

/// A fragment's address known in advance, and the program to tell which branch targets
/// outside the function stay where they are.
///
/// In place, function entries do not move (every rewritten function's first fragment starts
/// with its entry block at its old start), nor does anything outside the functions (PLT
/// stubs). A jump there from a fragment of known address has a known displacement, so it may
/// take the short form like a branch inside the fragment. The compiler often wrote such tail
/// calls short (`jmp next_function` as `eb 00`, a `jcc` to a neighbour); re-created near, they
/// would make the function too big for its old place.
#[derive(Clone, Copy, Debug)]
pub struct KnownPlace<'a> {
    pub at: Vaddr,
    pub program: &'a Program,
}

impl KnownPlace<'_> {
    /// Whether `target` keeps its address in the output: outside every function, or a
    /// function's entry.
    fn keeps(&self, target: Vaddr) -> bool {
        self.program
            .function_containing(target)
            .is_none_or(|g| g.range.start == target)
    }
}

/// Pass one: lays out `blocks` (one fragment of `f`) and relaxes branches inside it.
pub fn plan_fragment(
    f: &Function,
    fragment: FragmentRef,
    blocks: &[BlockId],
    encoder: &mut BranchEncoder,
    options: PlanOptions<'_>,
) -> Result<FragmentPlan, EmitError> {
    let PlanOptions {
        probes,
        aligned,
        block_alignment,
        via_slots,
        known_place,
        exits,
        changed_exits,
        promoted,
        pic,
    } = options;
    let promotion = |inst: u32| {
        let call = rivet_ir::layout::promoted_call(promoted, inst)?;
        f.insts[inst as usize]
            .isa()
            .promotion_shape(
                &f.insts[inst as usize],
                call.targets.len(),
                pic,
                call.noreturn,
            )
            .ok()
    };
    let exit_of = |b: BlockId| {
        rivet_ir::layout::changed_exit(changed_exits, b).or_else(|| f.block_exit(f.block(b)))
    };
    let slot_for = |inst: u32| via_slots.and_then(|v| v.slot_for(&f.insts[inst as usize]));
    // Plans of every fragment live until the end of the rewrite: size them for this
    // fragment's blocks, not the whole function.
    let fragment_insts: usize = blocks.iter().map(|&b| f.block(b).insts.len()).sum();
    let mut items = Vec::with_capacity(fragment_insts + blocks.len() * 2);
    let branch = |items: &mut Vec<Item>,
                  encoder: &mut BranchEncoder,
                  branch: NewBranch,
                  target: Target,
                  state_at: Vaddr|
     -> Result<(), EmitError> {
        let short_size = encoder.size(branch.resolve(f), BranchForm::Short)?;
        let near_size = encoder.size(branch.resolve(f), BranchForm::Near)?;
        items.push(Item::Branch {
            branch,
            target,
            form: BranchForm::Near,
            short_size,
            near_size,
            state_at,
        });
        Ok(())
    };
    let probe_items = |items: &mut Vec<Item>, at: ProbeAt, state_at: Vaddr| {
        if let Some(probes) = probes {
            items.extend(probes.at(at).map(|p| Item::Probe {
                counter: p.counter,
                shape: p.shape,
                state_at,
            }));
        }
    };
    // Copies instructions `from..to`, with the probes that follow calls and the recorders
    // of indirect call targets that precede them. A call's probe goes after a landing pad
    // that follows the call (`bl setjmp; bti j`): `longjmp` comes back with an indirect
    // branch, which BTI lets land only on the pad.
    let copy = |items: &mut Vec<Item>, from: u32, to: u32| {
        let mut after_call: Option<u32> = None;
        for inst in from..to {
            // The call whose probe waits for this instruction, its pad.
            let pad_of = after_call.take();
            let after_pad = |items: &mut Vec<Item>| {
                if let Some(call) = pad_of {
                    probe_items(
                        items,
                        ProbeAt::AfterCall(call),
                        f.insts[call as usize].addr(),
                    );
                }
            };
            if f.is_dropped_padding(inst) {
                items.push(Item::Dropped { inst });
                after_pad(items);
                continue;
            }
            if let Some(table) = probes.and_then(|p| p.indirect_table(inst))
                && let branch = &f.insts[inst as usize]
                && let Ok(size) = branch.isa().indirect_probe_size(branch)
            {
                items.push(Item::IndirectProbe { inst, table, size });
            }
            match slot_for(inst)
                .filter(|_| matches!(f.insts[inst as usize].flow(), Flow::Call { .. }))
            {
                Some(slot) => items.push(Item::ViaSlot { inst, slot }),
                None => match promotion(inst) {
                    Some(shape) => items.push(Item::Promoted { inst, shape }),
                    None => items.push(Item::Copy { inst }),
                },
            }
            if probes.is_some()
                && matches!(
                    f.insts[inst as usize].flow(),
                    Flow::Call { .. } | Flow::IndirectCall
                )
            {
                match f.insts.get(inst as usize + 1) {
                    Some(next) if inst + 1 < to && next.isa().keeps_first(next) => {
                        after_call = Some(inst);
                    }
                    _ => probe_items(
                        items,
                        ProbeAt::AfterCall(inst),
                        f.insts[inst as usize].addr(),
                    ),
                }
            }
            after_pad(items);
        }
        if let Some(call) = after_call {
            probe_items(
                items,
                ProbeAt::AfterCall(call),
                f.insts[call as usize].addr(),
            );
        }
    };
    // Edge probes become blocks of their own at the end of the fragment.
    let mut trampolines: Vec<(u32, Target, Vaddr, ProbeShape, u32)> = Vec::new();
    let mut via_probe = |from: BlockId, to: Target, state_at: Vaddr| -> Target {
        let edge = match to {
            Target::Block(b) => EdgeTarget::Block(b),
            Target::Address(a) => EdgeTarget::Address(a),
            Target::Trampoline(_) => return to,
        };
        match probes.and_then(|p| p.on_edge(from, edge)) {
            Some(p) => {
                let k = trampolines.len() as u32;
                trampolines.push((k, to, state_at, p.shape, p.counter));
                Target::Trampoline(k)
            }
            None => to,
        }
    };
    // With probes, a padding block may hold a counter: only dead padding is seen through.
    let placed_next = f.placed_next(blocks, probes.is_none());
    // Where padding would never run: after the last block that does not fall into the one
    // placed after it, and no aligned block since (its padding would no longer align it).
    // With the start of the block placed there.
    let mut unreached: Option<(usize, Vaddr)> = None;
    // Whether the block just written ends without running into the next item: each block
    // end below says so, and one that copies its last instruction (a return, a jump through
    // a table or a slot, a call that does not return) leaves it set.
    let mut ends_unreached = false;
    for (pos, &b) in blocks.iter().enumerate() {
        let block = f.block(b);
        if pos > 0 && ends_unreached {
            unreached = Some((items.len(), block.start));
        }
        if pos > 0
            && let Some(a) = aligned.iter().find(|a| a.block == b)
        {
            // Padding right before the block runs every time the block before falls into
            // it; moved back to where nothing falls through, it never runs, and the code in
            // between moves by at most `max_padding` bytes.
            let (at, state_at) = unreached.unwrap_or((items.len(), block.start));
            items.insert(
                at,
                Item::Align {
                    align: block_alignment,
                    max_padding: a.max_padding,
                    aligns: b,
                    pad: 0,
                    never_runs: unreached.is_some(),
                    state_at,
                },
            );
            unreached = None;
        }
        ends_unreached = true;
        items.push(Item::Label(b));
        let mut first = block.insts.start;
        // A BTI landing pad stays first: an indirect branch may land only on it. (A block
        // that is only its pad falls through: a pad is never a branch.)
        if probes.is_some_and(|p| p.at(ProbeAt::BlockStart(b)).next().is_some())
            && (block.insts.len() > 1 || matches!(exit_of(b), Some(BlockExit::FallThrough { .. })))
            && f.insts[first as usize]
                .isa()
                .keeps_first(&f.insts[first as usize])
        {
            copy(&mut items, first, first + 1);
            first += 1;
        }
        probe_items(&mut items, ProbeAt::BlockStart(b), block.start);
        let insts = f.block_insts(block);
        let (Some(last), Some(exit)) = (insts.last(), exit_of(b)) else {
            return Err(EmitError::Unsupported {
                what: "empty block",
                at: block.start,
            });
        };
        let last_index = block.insts.end - 1;
        let end_probes = |items: &mut Vec<Item>| {
            probe_items(items, ProbeAt::BlockEnd(b), last.addr());
        };
        let copy_body = |items: &mut Vec<Item>| {
            copy(items, first, last_index);
            end_probes(items);
            items.push(Item::Replaced { inst: last_index });
        };
        // Whether a branch to `target` arrives at the block placed next (a trampoline or an
        // address outside the function never does).
        let target_is_next = |target: Target| matches!(target, Target::Block(b) if placed_next.is_next(pos, Some(b)));
        let is_next = |addr| target_is_next(target_of(f, addr));
        if let Some(tail) = rivet_ir::layout::duplicated_tail(changed_exits, b) {
            // `--tail-duplication`: the jump to `tail` becomes a copy of it, its body then its
            // own exit (`exit`, which is the tail's).
            copy_body(&mut items);
            let tail_block = f.block(tail);
            let tail_last = tail_block.insts.end - 1;
            for inst in tail_block.insts.start..tail_last {
                if !f.is_dropped_padding(inst) {
                    items.push(Item::Duplicate { inst });
                }
            }
            match exit {
                BlockExit::Return { ret } => items.push(Item::Duplicate { inst: ret }),
                BlockExit::Jump { .. } => {
                    let written = exit.written(is_next);
                    if let Some(WrittenEnd::Jump { to }) = written {
                        let state_at = f.insts[tail_last as usize].addr();
                        branch(
                            &mut items,
                            encoder,
                            NewBranch::Jump,
                            target_of(f, to),
                            state_at,
                        )?;
                    }
                    ends_unreached = !written.is_some_and(WrittenEnd::falls_into_next);
                }
                _ => {
                    return Err(EmitError::Unsupported {
                        what: "a duplicated tail that does not return or jump",
                        at: tail_block.start,
                    });
                }
            }
            continue;
        }
        match exit {
            BlockExit::FallThrough { .. } | BlockExit::Jump { .. } => {
                let tail_call_slot = match exit {
                    BlockExit::Jump {
                        tail_call: true, ..
                    } => slot_for(last_index),
                    _ => None,
                };
                if let Some(slot) = tail_call_slot {
                    // A tail call into a PLT stub: the jump itself goes through the slot.
                    copy(&mut items, first, last_index);
                    end_probes(&mut items);
                    items.push(Item::ViaSlot {
                        inst: last_index,
                        slot,
                    });
                    continue;
                }
                // A fall-through block is copied whole and a `jmp` added after it runs in the
                // unwind state of the block's end; a re-created jump keeps the state of the
                // one it replaces.
                let state_at = if let BlockExit::FallThrough { .. } = exit {
                    copy(&mut items, first, block.insts.end);
                    end_probes(&mut items);
                    last.end()
                } else {
                    copy_body(&mut items);
                    last.addr()
                };
                let written = exit.written(is_next);
                if let Some(WrittenEnd::Jump { to }) = written {
                    let to = target_of(f, to);
                    branch(&mut items, encoder, NewBranch::Jump, to, state_at)?;
                }
                ends_unreached = !written.is_some_and(WrittenEnd::falls_into_next);
            }
            BlockExit::Malformed { at } => {
                return Err(EmitError::Unsupported {
                    what: "conditional block end without a jump",
                    at,
                });
            }
            BlockExit::Cond {
                invertible: false, ..
            } => {
                return Err(EmitError::Unsupported {
                    what: "loop/jrcxz/xbegin",
                    at: last.addr(),
                });
            }
            BlockExit::Cond { taken, fall, .. } => {
                // An edge with a probe goes through a trampoline, which is never placed next.
                let taken_target = via_probe(b, target_of(f, taken), last.addr());
                let fall_target = via_probe(b, target_of(f, fall), last.addr());
                copy_body(&mut items);
                let cond = |inverted| NewBranch::Cond {
                    inst: last_index,
                    inverted,
                };
                let side_is_next = |addr| {
                    target_is_next(if addr == fall {
                        fall_target
                    } else {
                        taken_target
                    })
                };
                let written = exit.written(side_is_next);
                ends_unreached = !written.is_some_and(WrittenEnd::falls_into_next);
                match written {
                    Some(WrittenEnd::Cond { inverted: true, .. }) => {
                        branch(&mut items, encoder, cond(true), fall_target, last.addr())?;
                    }
                    Some(WrittenEnd::CondThenJump { .. }) => {
                        branch(&mut items, encoder, cond(false), taken_target, last.addr())?;
                        branch(
                            &mut items,
                            encoder,
                            NewBranch::Jump,
                            fall_target,
                            last.end(),
                        )?;
                    }
                    _ => branch(&mut items, encoder, cond(false), taken_target, last.addr())?,
                }
            }
            BlockExit::Copied => {
                copy(&mut items, first, last_index);
                end_probes(&mut items);
                copy(&mut items, last_index, block.insts.end);
            }
            BlockExit::Return { ret } => {
                copy_body(&mut items);
                items.push(Item::CopiedReturn {
                    inst: ret,
                    state_at: last.addr(),
                });
            }
        }
    }
    let mut next_label = trampolines.len() as u32;
    for (k, to, state_at, shape, counter) in trampolines {
        items.push(Item::TrampolineLabel(k));
        items.push(Item::Probe {
            counter,
            shape,
            state_at,
        });
        branch(&mut items, encoder, NewBranch::Jump, to, state_at)?;
    }

    // Which block each label is in, to know which branches may be short.
    let in_fragment: std::collections::HashSet<BlockId> = blocks.iter().copied().collect();
    let is_pair = encoder.isa().near_conditional_is_a_pair();
    // Islands (AArch64): a conditional branch that leaves the fragment goes, in its short
    // form, to a `b target` after the fragment's code, one island per target. Its pair form
    // (`b.!cond +8; b target`) would be taken every time the branch is not, which on the hot
    // path (the exit is cold) is nearly always; through an island the hot path falls through
    // and only the exit pays, one branch more. The islands are items of the fragment, so its
    // size still does not depend on where it lands. Keyed by target: (label, target).
    // Where the rewrite bounded the whole new text within the branch's reach
    // (`FragmentExits::Direct`), a branch to a block of another fragment goes straight
    // there in its short form instead: it reaches wherever that fragment lands, so the size
    // is still placement-independent, and the exit costs one taken branch, not two.
    let mut islands: Vec<(u32, Target, Vaddr)> = Vec::new();
    let mut island_of: HashMap<u32, Target> = HashMap::new();
    for item in &mut items {
        if let Item::Branch {
            branch,
            target,
            form,
            state_at,
            ..
        } = item
        {
            match target {
                Target::Block(b) if in_fragment.contains(b) => *form = BranchForm::Short,
                Target::Trampoline(_) => *form = BranchForm::Short,
                Target::Address(a) if known_place.is_some_and(|k| k.keeps(*a)) => {
                    *form = BranchForm::Short;
                }
                Target::Block(_)
                    if is_pair
                        && matches!(branch, NewBranch::Cond { inst, .. }
                            if exits.goes_direct(&f.insts[*inst as usize])) =>
                {
                    *form = BranchForm::Short;
                }
                _ if is_pair && matches!(branch, NewBranch::Cond { .. }) => {
                    let k = match islands.iter().find(|(_, t, _)| t == target) {
                        Some(&(k, _, _)) => k,
                        None => {
                            let k = next_label;
                            next_label += 1;
                            islands.push((k, *target, *state_at));
                            island_of.insert(k, *target);
                            k
                        }
                    };
                    *target = Target::Trampoline(k);
                    *form = BranchForm::Short;
                }
                _ => {}
            }
        }
    }
    for (k, to, state_at) in islands {
        // An island runs in the unwind state its target starts in: for a block of this
        // function, that block's; for code elsewhere (a conditional tail call), the state at
        // the first branch that goes there, which every branch to the same function shares.
        let state_at = match to {
            Target::Block(b) => f.block(b).start,
            _ => state_at,
        };
        items.push(Item::TrampolineLabel(k));
        branch(&mut items, encoder, NewBranch::Jump, to, state_at)?;
    }
    // Relaxation: grow short branches that do not reach until nothing changes. Branch sizes
    // only grow, so this terminates. Padding is sized in each pass from the branches' current
    // forms: between a padding and the label it aligns there is no other padding, so what
    // lies between has a size that does not depend on where it lands.
    let mut offsets = vec![0u64; items.len()];
    let mut label_offset: HashMap<LabelId, u64> = HashMap::with_capacity(blocks.len());
    loop {
        let mut at = 0u64;
        for i in 0..items.len() {
            offsets[i] = at;
            match items[i] {
                Item::Label(b) => {
                    label_offset.insert(LabelId::Block(b), at);
                }
                Item::TrampolineLabel(k) => {
                    label_offset.insert(LabelId::Trampoline(k), at);
                }
                Item::Align {
                    align,
                    max_padding,
                    aligns,
                    ..
                } => {
                    // The ranges between paddings and their labels do not overlap: one pass
                    // over them all reads each item at most once.
                    let lead: u64 = items[i + 1..]
                        .iter()
                        .take_while(|item| !matches!(item, Item::Label(b) if *b == aligns))
                        .map(|item| item.size(f))
                        .sum();
                    let new_pad = padding(at + lead, align, max_padding);
                    if let Item::Align { pad, .. } = &mut items[i] {
                        *pad = new_pad;
                    }
                }
                _ => {}
            }
            at += items[i].size(f);
        }
        let mut changed = false;
        for (i, item) in items.iter_mut().enumerate() {
            if let Item::Branch {
                target,
                form: form @ BranchForm::Short,
                short_size,
                ..
            } = item
            {
                // A conditional branch that cannot reach its island goes straight to the
                // island's target in the pair form (the island stays, unused by it).
                if let Target::Trampoline(k) = *target
                    && let Some(&to) = island_of.get(&k)
                    && !encoder.isa().short_branch_reaches(
                        offsets[i],
                        u64::from(*short_size),
                        label_offset[&LabelId::Trampoline(k)] as i64,
                    )
                {
                    *target = to;
                    *form = BranchForm::Near;
                    changed = true;
                    continue;
                }
                // The target's offset from the fragment's start.
                let to = match *target {
                    Target::Block(b) => match label_offset.get(&LabelId::Block(b)) {
                        Some(&at) => at as i64,
                        // In another fragment, written short only where the rewrite's bound
                        // on the new text guarantees the reach (`FragmentExits::Direct`).
                        None => continue,
                    },
                    Target::Trampoline(k) => label_offset[&LabelId::Trampoline(k)] as i64,
                    // Short only with a known place (above).
                    Target::Address(a) => match known_place {
                        Some(k) => a.get().wrapping_sub(k.at.get()) as i64,
                        None => continue,
                    },
                };
                if !encoder
                    .isa()
                    .short_branch_reaches(offsets[i], u64::from(*short_size), to)
                {
                    *form = BranchForm::Near;
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    let size = items
        .last()
        .map_or(0, |last| offsets[items.len() - 1] + last.size(f));

    // New offsets of the original instructions, dropped jumps and padding included. A block's
    // first instruction is where its label is, so that arriving at the block runs its start
    // probes.
    if size > u64::from(u32::MAX) {
        return Err(EmitError::Unsupported {
            what: "a fragment of 4 GiB or more",
            at: f.range.start,
        });
    }
    // Every offset is at most `size`, so each fits in a u32 from here on.
    let offsets: Vec<u32> = offsets.into_iter().map(|o| o as u32).collect();
    let mut inst_offsets: Vec<(u32, u32)> = Vec::with_capacity(fragment_insts + blocks.len());
    let mut label_at: Option<u32> = None;
    for (item, &off) in items.iter().zip(&offsets) {
        match *item {
            Item::Label(_) => label_at = Some(off),
            Item::Copy { inst }
            | Item::ViaSlot { inst, .. }
            | Item::Promoted { inst, .. }
            | Item::Replaced { inst }
            | Item::Dropped { inst } => {
                inst_offsets.push((inst, label_at.take().unwrap_or(off)));
            }
            _ => {}
        }
    }
    inst_offsets.sort_unstable_by_key(|x| x.0);
    let promoted = items
        .iter()
        .filter_map(|item| match *item {
            Item::Promoted { inst, .. } => rivet_ir::layout::promoted_call(promoted, inst)
                .map(|c| (inst, c.targets.iter().map(|t| t.entry).collect())),
            _ => None,
        })
        .collect();
    // Plans live until the debug info is written, one item per instruction of every rewritten
    // function (all of them, instrumented): no spare capacity. `offsets` especially, collected
    // in place from 8-byte offsets, keeps twice its length otherwise.
    items.shrink_to_fit();
    let mut offsets = offsets;
    offsets.shrink_to_fit();
    inst_offsets.shrink_to_fit();
    Ok(FragmentPlan {
        fragment,
        promoted,
        items,
        offsets,
        size,
        inst_offsets,
        trampolines: label_offset
            .iter()
            .filter_map(|(l, off)| match l {
                LabelId::Trampoline(k) => Some((*k, *off)),
                LabelId::Block(_) => None,
            })
            .collect(),
        veneers: Vec::new(),
        veneer_start: size,
        landings: Vec::new(),
    })
}

impl FragmentPlan {
    /// Adds a veneer to `target` (an original address) after the fragment's code.
    pub fn add_veneer(&mut self, target: Vaddr, veneer_size: u64) {
        if !self.veneers.contains(&target) {
            self.veneers.push(target);
            self.size += veneer_size;
        }
    }

    /// Where the veneer to `target` is, for the fragment placed at `addr`.
    fn veneer_at(&self, addr: Vaddr, target: Vaddr, veneer_size: u64) -> Option<Vaddr> {
        let k = self.veneers.iter().position(|t| *t == target)?;
        Some(addr + self.veneer_start + k as u64 * veneer_size)
    }

    /// Takes the veneers and landing pads away (for placing the fragment again from scratch).
    pub fn clear_veneers(&mut self) {
        self.veneers.clear();
        self.landings.clear();
        self.size = self.veneer_start;
    }

    /// Adds a landing pad for `target` (an original address) after the fragment's veneers.
    pub fn add_landing(&mut self, target: Vaddr, landing_size: u64) {
        if !self.landings.contains(&target) {
            self.landings.push(target);
            self.size += landing_size;
        }
    }

    /// Where the landing pads start, for the fragment placed at `addr` (they follow the
    /// veneers, all of one size per ISA).
    fn landings_start(&self, addr: Vaddr, veneer_size: u64) -> Vaddr {
        addr + self.veneer_start + self.veneers.len() as u64 * veneer_size
    }

    /// How many copied calls and jumps of this fragment, placed at `addr`, go straight to a
    /// linker veneer's destination instead of through the veneer (`copied_branch_target`).
    pub fn bypassed_veneers(&self, program: &Program, addr: Vaddr, map: &AddressMap) -> usize {
        let f = program.function(self.fragment.function);
        self.items
            .iter()
            .zip(&self.offsets)
            .filter(|(item, offset)| match **item {
                Item::Copy { inst } => {
                    let inst = &f.insts[inst as usize];
                    let at = addr + u64::from(**offset);
                    copied_branch_target(program, map, inst, at) != inst.pc_relative_target()
                }
                _ => false,
            })
            .count()
    }

    /// The original addresses of the targets that the direct calls and jumps of this
    /// fragment, placed at `addr`, cannot reach from there and have no veneer for yet.
    pub fn far_targets(&self, program: &Program, addr: Vaddr, map: &AddressMap) -> Vec<Vaddr> {
        let isa = program.info.isa;
        let fid = self.fragment.function;
        let f = program.function(fid);
        let mut far = Vec::new();
        for (i, item) in self.items.iter().enumerate() {
            let at = addr + u64::from(self.offsets[i]);
            let (old, branch_at) = match *item {
                Item::Copy { inst } => {
                    let inst = &f.insts[inst as usize];
                    match (inst.flow(), copied_branch_target(program, map, inst, at)) {
                        (Flow::Call { .. } | Flow::Jump { .. }, Some(target)) => (target, at),
                        _ => continue,
                    }
                }
                Item::Branch {
                    branch,
                    target,
                    form,
                    ..
                } => {
                    let old = match target {
                        Target::Block(b) => f.block(b).start,
                        Target::Address(t) => t,
                        Target::Trampoline(_) => continue,
                    };
                    // A conditional branch's far form ends with the unconditional jump.
                    let branch_at = match (branch, form) {
                        (NewBranch::Cond { .. }, BranchForm::Near) => at + 4,
                        (NewBranch::Cond { .. }, BranchForm::Short) => continue,
                        (NewBranch::Jump, _) => at,
                    };
                    (old, branch_at)
                }
                _ => continue,
            };
            let new = match *item {
                Item::Branch {
                    target: Target::Block(_),
                    ..
                } => map.in_function(fid, old),
                _ => map.translate(program, old),
            };
            if let Some(new) = new
                && !isa.direct_branch_reaches(branch_at, new)
                && !self.veneers.contains(&old)
                && !far.contains(&old)
            {
                far.push(old);
            }
        }
        far
    }
}

/// The original address a copied PC-relative instruction of rewritten code, placed at `at`,
/// is written to point at. Its own target, except for a direct call or jump to a linker
/// veneer (`Program::forwarded_destination`) whose destination the new place reaches: that
/// goes straight to the destination, one indirect jump and the veneer's cache line fewer.
/// Where the destination is out of reach, the branch keeps going through the veneer, as in
/// the input, so bypassing never asks for a veneer of Rivet's own (an in place function has
/// no room to spare for one).
fn copied_branch_target(
    program: &Program,
    map: &AddressMap,
    inst: &Inst,
    at: Vaddr,
) -> Option<Vaddr> {
    let target = inst.pc_relative_target()?;
    if !matches!(inst.flow(), Flow::Call { .. } | Flow::Jump { .. }) {
        return Some(target);
    }
    let bypass = program.forwarded_destination(target).filter(|&d| {
        map.translate(program, d)
            .is_some_and(|new| program.info.isa.direct_branch_reaches(at, new))
    });
    Some(bypass.unwrap_or(target))
}

/// The new address of every instruction of every rewritten function.
#[derive(Clone, Debug, Default)]
pub struct AddressMap {
    /// Per `FuncId`: (old instruction address, new address), sorted by old address.
    functions: Vec<Option<Vec<(Vaddr, Vaddr)>>>,
    /// Per `FuncId`: new start address of each fragment.
    fragment_addrs: Vec<Vec<Vaddr>>,
    /// Veneer destination (original address) -> its landing pad's new address, where BTI
    /// guards the code and the destination has no pad of its own.
    landings: HashMap<Vaddr, Vaddr>,
    /// Old entry of each folded function (`Layout::folded`) -> new entry of its kept copy.
    folded: HashMap<Vaddr, Vaddr>,
}

impl AddressMap {
    /// Sends the entries of folded functions (`Layout::folded`: `(folded, kept)`) to their
    /// kept copies' new entries. Safe folding only folds functions that nothing but direct
    /// calls and jumps enter, so every translation of such an entry is one of those. A pair
    /// whose kept copy has no new entry is left out.
    pub fn fold(&mut self, program: &Program, folded: &[(rivet_ir::FuncId, rivet_ir::FuncId)]) {
        for &(f, kept) in folded {
            if let Some(new) = self.in_function(kept, program.function(kept).range.start) {
                self.folded.insert(program.function(f).range.start, new);
            }
        }
    }

    /// Builds the map from the plans and the address chosen for each.
    pub fn new(program: &Program, plans: &[(FragmentPlan, Vaddr)]) -> AddressMap {
        let mut functions: Vec<Option<Vec<(Vaddr, Vaddr)>>> = vec![None; program.functions.len()];
        let mut fragment_addrs: Vec<Vec<Vaddr>> = vec![Vec::new(); program.functions.len()];
        let mut landings = HashMap::new();
        let pad_sizes = program
            .info
            .isa
            .veneer_size()
            .zip(program.info.isa.landing_pad_size());
        for (plan, addr) in plans {
            if let Some((veneer_size, landing_size)) = pad_sizes {
                let start = plan.landings_start(*addr, veneer_size);
                for (k, &target) in plan.landings.iter().enumerate() {
                    landings.insert(target, start + k as u64 * landing_size);
                }
            }
            let fid = plan.fragment.function.0 as usize;
            let f = &program.functions[fid];
            let entries = functions[fid].get_or_insert_with(Vec::new);
            entries.extend(
                plan.inst_offsets
                    .iter()
                    .map(|&(i, off)| (f.insts[i as usize].addr(), *addr + u64::from(off))),
            );
            let frags = &mut fragment_addrs[fid];
            let k = plan.fragment.fragment as usize;
            if frags.len() <= k {
                frags.resize(k + 1, Vaddr(0));
            }
            frags[k] = *addr;
        }
        for entries in functions.iter_mut().flatten() {
            entries.sort_unstable();
        }
        AddressMap {
            functions,
            fragment_addrs,
            landings,
            folded: HashMap::new(),
        }
    }

    /// Rebuilds the map from block starts alone (as recorded in an output's `.rivet.bat`):
    /// inside a block, instructions follow each other as in the input, less the padding
    /// rewritten code leaves out (a block's body is copied whole and its re-created branch
    /// sits where the body ends). A call into a PLT stub may have been written through the
    /// stub's GOT slot (`ViaSlots`), one byte longer: `output`, the rewritten file, says which.
    pub fn from_blocks(
        program: &Program,
        blocks: &[(Vaddr, Vaddr)],
        output: &ElfFile<'_>,
    ) -> Option<AddressMap> {
        let via_slots = ViaSlots::of_program(program);
        let mut functions: Vec<Option<Vec<(Vaddr, Vaddr)>>> = vec![None; program.functions.len()];
        for &(old, new) in blocks {
            let f = program.function_containing(old)?;
            let block = f.block(f.block_at(old)?);
            let entries = functions[f.id.0 as usize].get_or_insert_with(Vec::new);
            let mut at = new;
            for i in block.insts.clone() {
                let inst = &f.insts[i as usize];
                entries.push((inst.addr(), at));
                if f.is_dropped_padding(i) {
                    continue;
                }
                let isa = program.info.isa;
                let via_slot_size = isa.via_slot_size();
                let through_slot = via_slots.slot_for(inst).is_some_and(|slot| {
                    output
                        .bytes_at(at, u64::from(via_slot_size))
                        .and_then(|bytes| isa.decode_all(bytes, at).into_iter().next())
                        .is_some_and(|new| {
                            new.len() == via_slot_size && new.indirect_slot() == Some(slot)
                        })
                });
                // A promoted indirect call (`--indirect-call-promotion`) is a longer sequence
                // that goes on at its join.
                if inst.flow() == Flow::IndirectCall
                    && let Some(bytes) =
                        output.bytes_at(at, 256).or_else(|| output.bytes_at(at, 64))
                    && let decoded = isa.decode_all(bytes, at)
                    && decoded.first().is_some_and(|new| {
                        new.len() != inst.len() || new.mnemonic_name() != inst.mnemonic_name()
                    })
                    && let Ok(read) = isa
                        .read_promotion(inst, &decoded, false)
                        .or_else(|_| isa.read_promotion(inst, &decoded, true))
                {
                    at = read.join;
                    continue;
                }
                at = at
                    + if through_slot {
                        u64::from(via_slot_size)
                    } else {
                        u64::from(inst.len())
                    };
            }
        }
        for entries in functions.iter_mut().flatten() {
            entries.sort_unstable();
        }
        Some(AddressMap {
            functions,
            fragment_addrs: vec![Vec::new(); program.functions.len()],
            landings: HashMap::new(),
            folded: HashMap::new(),
        })
    }

    /// Per `FuncId` of a rewritten function: (old, new) address of each of its instructions,
    /// sorted by old address (what maps a recording of the output back to the input).
    pub fn instruction_pairs(&self) -> &[Option<Vec<(Vaddr, Vaddr)>>] {
        &self.functions
    }

    /// (old, new) start of every block of every rewritten function, sorted.
    pub fn block_pairs(&self, program: &Program) -> Vec<(Vaddr, Vaddr)> {
        let mut out = Vec::new();
        for (i, entries) in self.functions.iter().enumerate() {
            let Some(entries) = entries else { continue };
            for b in &program.functions[i].blocks {
                if let Ok(k) = entries.binary_search_by_key(&b.start, |e| e.0) {
                    out.push(entries[k]);
                }
            }
        }
        out.sort_unstable();
        out
    }

    /// Whether the function was rewritten.
    pub fn is_rewritten(&self, f: rivet_ir::FuncId) -> bool {
        self.functions
            .get(f.0 as usize)
            .is_some_and(Option::is_some)
    }

    /// New address of the instruction that was at `old` in rewritten function `f`.
    pub fn in_function(&self, f: rivet_ir::FuncId, old: Vaddr) -> Option<Vaddr> {
        let entries = self.functions.get(f.0 as usize)?.as_ref()?;
        entries
            .binary_search_by_key(&old, |e| e.0)
            .ok()
            .map(|k| entries[k].1)
    }

    /// New address of `old` anywhere: translated when it is an instruction of a rewritten
    /// function, unchanged when it is not in one, `None` when it points inside a rewritten
    /// function but not at an instruction.
    pub fn translate(&self, program: &Program, old: Vaddr) -> Option<Vaddr> {
        if !self.folded.is_empty()
            && let Some(&new) = self.folded.get(&old)
        {
            return Some(new);
        }
        match program.function_containing(old) {
            Some(f) if self.is_rewritten(f.id) => self.in_function(f.id, old),
            _ => Some(old),
        }
    }

    /// Where a veneer to `old` jumps: the landing pad placed for it, or its new address.
    pub fn veneer_destination(&self, program: &Program, old: Vaddr) -> Option<Vaddr> {
        match self.landings.get(&old) {
            Some(&pad) => Some(pad),
            None => self.translate(program, old),
        }
    }

    /// Whether `old`, a veneer destination, has a landing pad placed for it.
    pub fn has_landing(&self, old: Vaddr) -> bool {
        self.landings.contains_key(&old)
    }

    /// The new address of each fragment of `f`.
    pub fn fragment_addrs(&self, f: rivet_ir::FuncId) -> &[Vaddr] {
        self.fragment_addrs
            .get(f.0 as usize)
            .map_or(&[], Vec::as_slice)
    }
}

/// An absolute code address inside an instruction (from a relocation), to be translated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AbsoluteField {
    pub site: Vaddr,
    pub size: u8,
    /// The original value (a code address).
    pub value: Vaddr,
}

/// What pass two fills in besides branch targets.
#[derive(Clone, Copy, Debug)]
pub struct Fixups<'a> {
    /// Absolute code addresses inside copied instructions, sorted by site.
    pub absolute_fields: &'a [AbsoluteField],
    /// Instructions that build a code address in parts, with the address, sorted by site
    /// (`References::parts_in_moved_code`).
    pub address_parts: &'a [(Vaddr, Vaddr)],
    /// The counter segment, when the code carries instrumentation probes.
    pub counters: Option<Vaddr>,
    /// The runtime's recorder of indirect call targets.
    pub recorder: Option<Vaddr>,
}

/// Pass two: the final bytes of a fragment placed at `addr`.
pub fn encode_fragment(
    elf: &ElfFile<'_>,
    program: &Program,
    plan: &FragmentPlan,
    addr: Vaddr,
    map: &AddressMap,
    fixups: &Fixups<'_>,
    encoder: &mut BranchEncoder,
) -> Result<Vec<u8>, EmitError> {
    let absolute_fields = fixups.absolute_fields;
    let counters = fixups.counters;
    let fid = plan.fragment.function;
    let f = program.function(fid);
    let isa = program.info.isa;
    let veneer_size = isa.veneer_size();
    let mut out = Vec::with_capacity(plan.size as usize);
    let translate = |at: Vaddr, target: Vaddr| {
        map.translate(program, target)
            .ok_or(EmitError::UnmappableTarget { at, target })
    };
    for (i, item) in plan.items.iter().enumerate() {
        let offset = u64::from(plan.offsets[i]);
        let at = addr + offset;
        debug_assert_eq!(out.len() as u64, offset);
        match *item {
            Item::Label(_)
            | Item::TrampolineLabel(_)
            | Item::Replaced { .. }
            | Item::Dropped { .. } => {}
            Item::Align { pad, .. } => isa.write_nops(&mut out, usize::from(pad)),
            Item::Probe { counter, shape, .. } => {
                let counters = counters.ok_or(EmitError::Unsupported {
                    what: "probe without a counter segment",
                    at,
                })?;
                let counter = counters + u64::from(counter) * 8;
                isa.encode_probe(shape, at, counter, &mut out)
                    .ok_or(EmitError::Encode(EncodeError::OutOfRange {
                        what: "counter",
                        at,
                        target: counter,
                    }))?;
            }
            Item::IndirectProbe { inst, table, .. } => {
                let (Some(counters), Some(recorder)) = (fixups.counters, fixups.recorder) else {
                    return Err(EmitError::Unsupported {
                        what: "indirect call probe without a runtime",
                        at,
                    });
                };
                let branch = &f.insts[inst as usize];
                isa.encode_indirect_probe(
                    branch,
                    at,
                    counters + u64::from(table) * 8,
                    recorder,
                    &mut out,
                )
                .map_err(|e| {
                    EmitError::Encode(EncodeError::Unsupported {
                        at: e.at,
                        reason: e.reason.to_string(),
                    })
                })?;
            }
            Item::CopiedReturn { inst, .. } => {
                // A return has no operand that depends on where it is.
                let inst = &f.insts[inst as usize];
                let bytes = elf
                    .bytes_at(inst.addr(), u64::from(inst.len()))
                    .ok_or(EmitError::Unreadable { at: inst.addr() })?;
                out.extend_from_slice(bytes);
            }
            Item::Copy { inst } | Item::Duplicate { inst } => {
                let inst = &f.insts[inst as usize];
                let bytes = elf
                    .bytes_at(inst.addr(), u64::from(inst.len()))
                    .ok_or(EmitError::Unreadable { at: inst.addr() })?;
                let start = out.len();
                let old_target = copied_branch_target(program, map, inst, at);
                let new_target = match old_target {
                    Some(t) => Some(translate(inst.addr(), t)?),
                    None => None,
                };
                // A call or jump that cannot reach goes to its veneer.
                let new_target = match (new_target, old_target, veneer_size) {
                    (Some(t), Some(old), Some(size))
                        if matches!(inst.flow(), Flow::Call { .. } | Flow::Jump { .. })
                            && !isa.direct_branch_reaches(at, t) =>
                    {
                        Some(plan.veneer_at(addr, old, size).unwrap_or(t))
                    }
                    (t, _, _) => t,
                };
                match isa.relocate(inst, bytes, at, new_target, &mut out) {
                    // An address computation that no longer reaches, right after a kept
                    // `nop` (lld's relaxed `adrp`+`add`): both words again.
                    Err(EncodeError::OutOfRange { .. })
                        if inst.may_widen_into_previous()
                            && i > 0
                            && matches!(plan.items[i - 1], Item::Copy { inst: p } if f.insts[p as usize].is_nop())
                            && plan.offsets[i - 1] + 4 == plan.offsets[i] =>
                    {
                        let target = new_target
                            .or(inst.pc_relative_target())
                            .ok_or(EmitError::Unreadable { at: inst.addr() })?;
                        let pair = isa.widen_address(inst, Vaddr(at.get() - 4), target).ok_or(
                            EmitError::Encode(EncodeError::OutOfRange {
                                what: "address (adrp pair)",
                                at: inst.addr(),
                                target,
                            }),
                        )?;
                        out.truncate(start - 4);
                        out.extend_from_slice(&pair);
                    }
                    other => other?,
                }
                // One half of a two-instruction code address (AArch64 ADRP + ADD): built
                // for the address's new place. An `adr` (lld's relaxed pair, possibly widened
                // again above) already points there through its own target.
                if let Ok(k) = fixups
                    .address_parts
                    .binary_search_by_key(&inst.addr(), |p| p.0)
                    && !inst.is_nop()
                    && inst.pc_relative_target().is_none()
                {
                    let value = translate(inst.addr(), fixups.address_parts[k].1)?;
                    let part = isa.encode_address_part(inst, at, value)?;
                    out[start..start + part.len()].copy_from_slice(&part);
                }
                // Absolute code addresses inside the instruction (non-PIE `mov $func, %edi`).
                let first = absolute_fields.partition_point(|a| a.site < inst.addr());
                for field in absolute_fields[first..]
                    .iter()
                    .take_while(|a| a.site < inst.end())
                {
                    let value = translate(inst.addr(), field.value)?;
                    let offset = start + (field.site - inst.addr()) as usize;
                    write_absolute(&mut out[offset..], field.size, value).ok_or(
                        EmitError::Encode(EncodeError::OutOfRange {
                            what: "absolute address",
                            at: inst.addr(),
                            target: value,
                        }),
                    )?;
                }
            }
            Item::ViaSlot { inst, slot } => {
                isa.encode_via_slot(&f.insts[inst as usize], at, slot, &mut out)?;
            }
            Item::Promoted { inst, shape } => {
                let call = &f.insts[inst as usize];
                let unsupported = |reason: &str| {
                    EmitError::Encode(EncodeError::Unsupported {
                        at: call.addr(),
                        reason: reason.to_string(),
                    })
                };
                // The operand is copied several times; a code address inside it (none in
                // compiler output: the operand names data) would need each copy patched.
                if absolute_fields
                    .iter()
                    .any(|a| a.site >= call.addr() && a.site < call.end())
                {
                    return Err(unsupported("a code address inside a promoted call"));
                }
                let bytes = elf
                    .bytes_at(call.addr(), u64::from(call.len()))
                    .ok_or(EmitError::Unreadable { at: call.addr() })?;
                let fallback_at = at + shape.fallback_offset();
                let new_target = match call.pc_relative_target() {
                    Some(t) => Some(translate(call.addr(), t)?),
                    None => None,
                };
                let mut fallback = Vec::with_capacity(bytes.len());
                isa.relocate(call, bytes, fallback_at, new_target, &mut fallback)?;
                let entries = plan
                    .promoted
                    .iter()
                    .find(|(i, _)| *i == inst)
                    .map(|(_, t)| t.as_slice())
                    .ok_or_else(|| unsupported("a promoted call without targets"))?;
                let targets = entries
                    .iter()
                    .map(|&t| translate(call.addr(), t))
                    .collect::<Result<Vec<_>, _>>()?;
                shape
                    .encode(call, at, &targets, &fallback, &mut out)
                    .map_err(|e| unsupported(e.reason))?;
            }
            Item::Branch {
                branch,
                target,
                form,
                ..
            } => {
                let (old, to) = match target {
                    Target::Block(b) => (
                        Some(f.block(b).start),
                        map.in_function(fid, f.block(b).start).ok_or(
                            EmitError::UnmappableTarget {
                                at,
                                target: f.block(b).start,
                            },
                        )?,
                    ),
                    Target::Address(t) => (Some(t), translate(at, t)?),
                    Target::Trampoline(k) => (None, addr + plan.trampolines[&k]),
                };
                let start = out.len();
                match encoder.encode(branch.resolve(f), form, at, to, &mut out) {
                    Err(EncodeError::OutOfRange { .. })
                        if let (Some(old), Some(size)) = (old, veneer_size)
                            && let Some(veneer) = plan.veneer_at(addr, old, size) =>
                    {
                        out.truncate(start);
                        encoder.encode(branch.resolve(f), form, at, veneer, &mut out)?;
                    }
                    other => other?,
                }
            }
        }
    }
    // The veneers, after the code, then the landing pads this fragment holds.
    if let Some(size) = veneer_size {
        for &old in &plan.veneers {
            let at = addr + out.len() as u64;
            let to = match map.veneer_destination(program, old) {
                Some(t) => t,
                None => return Err(EmitError::UnmappableTarget { at, target: old }),
            };
            let bytes = isa.encode_veneer(at, to)?;
            debug_assert_eq!(bytes.len() as u64, size);
            out.extend_from_slice(&bytes);
        }
    }
    for &old in &plan.landings {
        let at = addr + out.len() as u64;
        let to = match map.translate(program, old) {
            Some(t) => t,
            None => return Err(EmitError::UnmappableTarget { at, target: old }),
        };
        out.extend_from_slice(&isa.encode_landing_pad(at, to)?);
    }
    Ok(out)
}

/// Writes `value` as a little-endian field of `size` bytes; `None` if it does not fit.
pub fn write_absolute(out: &mut [u8], size: u8, value: Vaddr) -> Option<()> {
    match size {
        8 => out
            .get_mut(..8)?
            .copy_from_slice(&value.get().to_le_bytes()),
        4 => {
            // A zero-extended and a sign-extended 32-bit field agree below 2 GiB.
            let v = u32::try_from(value.get()).ok().filter(|v| *v < 1 << 31)?;
            out.get_mut(..4)?.copy_from_slice(&v.to_le_bytes());
        }
        _ => return None,
    }
    Some(())
}
