//! Peepholes over a finished layout (BOLT's `-peepholes` and `-simplify-conditional-tail-calls`).
//!
//! Each rewrite changes only how a block leaves, recorded as a [`ChangedExit`] in its
//! function's layout; the blocks themselves, and the blocks it stops going through, stay
//! where the layout put them (other code may still reach them). The passes run once the block
//! order is final, because whether a branch pays depends on which block is placed next.
//!
//! - double jumps: a branch to a block that only jumps on goes straight to the end of that
//!   chain (both sides of a conditional jump), when the profile saw it taken, unless the
//!   block it went to is placed right after it (it then falls into it, and a new `jmp` would
//!   only add bytes);
//! - useless branches: a conditional jump whose two sides arrive at the same block becomes a
//!   jump there, which the emitter drops when that block is placed next;
//! - jumps to returns: a jump that ran, to a block that only returns (not placed next),
//!   becomes a copy of that `ret`;
//! - conditional tail calls: a conditional jump to a block that only tail-calls a function
//!   (`jcc T; ... T: jmp func`) becomes `jcc func`, when the profile saw that edge run and
//!   the layout did not place T right after the branch. Then the path to `func` took the
//!   `jcc` and the `jmp`, two taken branches, and now takes one. With T placed next (the hot
//!   side, the `jcc` inverted to fall into it), the path took a not-taken `jcc` and the
//!   `jmp`; a `jcc func` would save the `jmp` but turn a branch that mostly falls through
//!   into one mostly taken, which BOLT's heuristic avoids too.
//!
//! Blocks looked through or copied must be ordinary code: never an entry, a landing pad, an
//! address-taken label, a jump-table target, a secondary entry, or part of an exclusive
//! sequence. A copied `ret` and a conditional tail call run in the unwind state of the block
//! that branched, so that state must equal the copied instruction's; without unwind rows to
//! compare, neither is done. x86-64 only (the caller checks): the emitter writes a `jcc rel32`
//! to another function there, and a `ret` is one instruction with no operand to relocate.

use std::collections::HashSet;

use rivet_elf::Vaddr;
use rivet_elf::eh_frame::CfiRow;
use rivet_ir::layout::{ChangedExit, ExitChange, FunctionLayout, Layout};
use rivet_ir::{BlockExit, BlockId, EdgeKind, Function, PlacedNext, Program, Terminator, cfi_at};

use crate::attach::FunctionCounts;

/// Which rewrites run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeepholeOptions {
    pub double_jumps: bool,
    pub useless_branches: bool,
    pub jumps_to_returns: bool,
    pub conditional_tail_calls: bool,
}

impl PeepholeOptions {
    pub fn any(self) -> bool {
        self.double_jumps
            || self.useless_branches
            || self.jumps_to_returns
            || self.conditional_tail_calls
    }
}

/// How many exits each rewrite changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeepholeCounts {
    pub double_jumps: usize,
    pub useless_branches: usize,
    pub jumps_to_returns: usize,
    pub conditional_tail_calls: usize,
}

impl PeepholeCounts {
    /// The changes recorded in `layout`.
    pub fn of_layout(layout: &Layout) -> PeepholeCounts {
        let mut c = PeepholeCounts::default();
        for change in layout
            .functions
            .iter()
            .flatten()
            .flat_map(|fl| &fl.changed_exits)
        {
            match change.change {
                ExitChange::DoubleJump => c.double_jumps += 1,
                ExitChange::UselessBranch => c.useless_branches += 1,
                ExitChange::JumpToReturn => c.jumps_to_returns += 1,
                ExitChange::ConditionalTailCall => c.conditional_tail_calls += 1,
                // Counted by `taildup::TailDupCounts`.
                ExitChange::TailDuplicate { .. } => {}
            }
        }
        c
    }
}

/// Runs the rewrites `options` asks for over every function `layout` rewrites, with the
/// profile's counts (indexed by function) deciding the conditional tail calls.
pub fn apply(
    program: &Program,
    counts: &[Option<FunctionCounts>],
    layout: &mut Layout,
    options: PeepholeOptions,
) {
    if !options.any() {
        return;
    }
    for (i, fl) in layout.functions.iter_mut().enumerate() {
        let Some(fl) = fl else { continue };
        let f = &program.functions[i];
        let c = counts.get(i).and_then(Option::as_ref);
        fl.changed_exits = function_changes(f, c, fl, options);
    }
}

/// Where each block sits: the fragment's `PlacedNext` and the block's position in it.
struct Places {
    placed: Vec<PlacedNext>,
    at: Vec<Option<(usize, usize)>>,
}

impl Places {
    fn new(f: &Function, fl: &FunctionLayout) -> Places {
        let mut at = vec![None; f.blocks.len()];
        for (k, fragment) in fl.fragments.iter().enumerate() {
            for (pos, b) in fragment.iter().enumerate() {
                if let Some(slot) = at.get_mut(b.0 as usize) {
                    *slot = Some((k, pos));
                }
            }
        }
        Places {
            placed: fl
                .fragments
                .iter()
                .map(|fr| f.placed_next(fr, true))
                .collect(),
            at,
        }
    }

    /// Whether a branch from `from` to `to` arrives at the block placed after `from`.
    fn is_next(&self, from: BlockId, to: Option<BlockId>) -> bool {
        match self.at.get(from.0 as usize).copied().flatten() {
            Some((k, pos)) => self.placed[k].is_next(pos, to),
            None => false,
        }
    }
}

/// Blocks whose address something other than a branch of this function may use.
pub(crate) fn observable(f: &Function) -> HashSet<Vaddr> {
    let mut set: HashSet<Vaddr> = f
        .jump_tables
        .iter()
        .flat_map(|t| t.entries.iter().copied().chain(t.default_target))
        .collect();
    set.extend(f.secondary_entries.iter().copied());
    set
}

/// Whether `b` is ordinary code another block's branch may look through or copy from.
pub(crate) fn ordinary(f: &Function, observable: &HashSet<Vaddr>, b: BlockId) -> bool {
    let block = f.block(b);
    !block.is_entry
        && !block.is_landing_pad
        && !block.is_address_taken
        && !block.in_exclusive_sequence
        && block.is_reachable
        && !observable.contains(&block.start)
}

/// The unwind rows at `a` and `b` say the same (their ranges aside); false without rows.
pub fn same_unwind_state(rows: &[CfiRow], a: Vaddr, b: Vaddr) -> bool {
    let (Some(x), Some(y)) = (cfi_at(rows, a), cfi_at(rows, b)) else {
        return false;
    };
    let sorted = |r: &CfiRow| {
        let mut s: Vec<_> = r.saved.iter().cloned().collect();
        s.sort_by_key(|(reg, _)| *reg);
        s
    };
    x.cfa == y.cfa && x.args_size == y.args_size && sorted(x) == sorted(y)
}

/// The end of the chain of blocks that only go on to another, starting at `to`: the address
/// reached and the ordinary blocks passed through on the way.
fn chain_end(f: &Function, observable: &HashSet<Vaddr>, to: Vaddr) -> (Vaddr, Vec<BlockId>) {
    let mut at = to;
    let mut through = Vec::new();
    while through.len() < 16 {
        let Some(b) = f.block_at(at) else { break };
        if !ordinary(f, observable, b) || through.contains(&b) {
            break;
        }
        match f.passes_straight_to(f.block(b)) {
            Some(next) if next != at && f.block_at(next).is_some() => {
                through.push(b);
                at = next;
            }
            _ => break,
        }
    }
    (at, through)
}

/// The return instruction of `b` when it holds nothing else (padding aside).
fn only_return(f: &Function, b: BlockId) -> Option<u32> {
    let block = f.block(b);
    if block.terminator != Terminator::Return || f.block_exit(block) != Some(BlockExit::Copied) {
        return None;
    }
    let kept: Vec<u32> = (block.insts.start..block.insts.end)
        .filter(|&i| !f.is_dropped_padding(i))
        .collect();
    match kept[..] {
        [ret] => Some(ret),
        _ => None,
    }
}

/// The function `b` tail-calls when a direct `jmp` is all it holds (padding aside), and that
/// jump's address.
fn only_tail_call(f: &Function, b: BlockId) -> Option<(Vaddr, Vaddr)> {
    let block = f.block(b);
    let Some(BlockExit::Jump {
        to,
        tail_call: true,
    }) = f.block_exit(block)
    else {
        return None;
    };
    let mut kept = f.kept_insts(block);
    let jmp = kept.next()?;
    kept.next().is_none().then_some((to, jmp.addr()))
}

fn edge_count(f: &Function, counts: Option<&FunctionCounts>, b: BlockId, kind: EdgeKind) -> u64 {
    let Some(k) = f.block(b).succs.iter().position(|e| e.kind == kind) else {
        return 0;
    };
    counts
        .and_then(|c| c.edges.get(b.0 as usize))
        .and_then(|e| e.get(k))
        .copied()
        .unwrap_or(0)
}

/// The changed exits of one function laid out as `fl`, sorted by block.
pub fn function_changes(
    f: &Function,
    counts: Option<&FunctionCounts>,
    fl: &FunctionLayout,
    options: PeepholeOptions,
) -> Vec<ChangedExit> {
    let observable = observable(f);
    let places = Places::new(f, fl);
    let mut changes = Vec::new();
    for (i, block) in f.blocks.iter().enumerate() {
        let b = BlockId(i as u32);
        // A block that itself only jumps on may be seen through by the layout (it takes no
        // bytes before its target): its exit stays as the layout assumed.
        if !block.is_reachable
            || block.in_exclusive_sequence
            || f.passes_straight_to(block).is_some()
        {
            continue;
        }
        let Some(last) = f.block_insts(block).last() else {
            continue;
        };
        let change = match f.block_exit(block) {
            Some(BlockExit::Jump {
                to,
                tail_call: false,
            }) => {
                // Only a jump that ran pays; elsewhere a new target only changes sizes.
                let falls_into_target = places.is_next(b, f.block_at(to))
                    || edge_count(f, counts, b, EdgeKind::Taken) == 0;
                let (end, through) = if options.double_jumps && !falls_into_target {
                    chain_end(f, &observable, to)
                } else {
                    (to, Vec::new())
                };
                let ret = f
                    .block_at(end)
                    .filter(|_| options.jumps_to_returns && !falls_into_target)
                    .filter(|&r| ordinary(f, &observable, r) && !places.is_next(b, Some(r)))
                    .and_then(|r| only_return(f, r).map(|ret| (r, ret)))
                    .filter(|&(_, ret)| {
                        same_unwind_state(&f.cfi, last.addr(), f.insts[ret as usize].addr())
                    });
                let bypassed = |extra: Option<BlockId>| {
                    through
                        .iter()
                        .copied()
                        .chain(extra)
                        .map(|x| (EdgeKind::Taken, x))
                        .collect::<Vec<_>>()
                };
                if let Some((r, ret)) = ret {
                    Some((
                        BlockExit::Return { ret },
                        ExitChange::JumpToReturn,
                        bypassed(Some(r)),
                    ))
                } else if !through.is_empty() {
                    Some((
                        BlockExit::Jump {
                            to: end,
                            tail_call: false,
                        },
                        ExitChange::DoubleJump,
                        bypassed(None),
                    ))
                } else {
                    None
                }
            }
            Some(BlockExit::Cond {
                taken,
                fall,
                tail_call: false,
                invertible: true,
            }) => cond_change(
                f,
                counts,
                &observable,
                &places,
                b,
                (taken, fall),
                last.addr(),
                options,
            ),
            _ => None,
        };
        if let Some((exit, change, bypassed)) = change {
            changes.push(ChangedExit {
                block: b,
                exit,
                change,
                bypassed,
            });
        }
    }
    changes
}

type Change = (BlockExit, ExitChange, Vec<(EdgeKind, BlockId)>);

#[allow(clippy::too_many_arguments)]
fn cond_change(
    f: &Function,
    counts: Option<&FunctionCounts>,
    observable: &HashSet<Vaddr>,
    places: &Places,
    b: BlockId,
    (taken, fall): (Vaddr, Vaddr),
    branch_at: Vaddr,
    options: PeepholeOptions,
) -> Option<Change> {
    // A side the block falls into already costs no branch: going past it would add one.
    // A side that never ran saves nothing either.
    let side = |to: Vaddr, kind: EdgeKind| {
        if options.double_jumps
            && !places.is_next(b, f.block_at(to))
            && edge_count(f, counts, b, kind) > 0
        {
            chain_end(f, observable, to)
        } else {
            (to, Vec::new())
        }
    };
    let (t_end, t_through) = side(taken, EdgeKind::Taken);
    let (f_end, f_through) = side(fall, EdgeKind::FallThrough);
    let mut bypassed: Vec<(EdgeKind, BlockId)> = t_through
        .iter()
        .map(|&x| (EdgeKind::Taken, x))
        .chain(f_through.iter().map(|&x| (EdgeKind::FallThrough, x)))
        .collect();
    // Both sides arrive at one block, however they are placed: the test decides nothing.
    if options.useless_branches {
        let (t_all, t_via) = chain_end(f, observable, taken);
        let (f_all, f_via) = chain_end(f, observable, fall);
        if f.block_at(t_all).is_some() && t_all == f_all {
            let via = t_via
                .iter()
                .map(|&x| (EdgeKind::Taken, x))
                .chain(f_via.iter().map(|&x| (EdgeKind::FallThrough, x)))
                .collect();
            return Some((
                BlockExit::Jump {
                    to: t_all,
                    tail_call: false,
                },
                ExitChange::UselessBranch,
                via,
            ));
        }
    }
    if options.conditional_tail_calls
        && let Some(t) = f.block_at(t_end)
        && ordinary(f, observable, t)
        && !places.is_next(b, Some(t))
        && let Some((callee, jmp_at)) = only_tail_call(f, t)
        && edge_count(f, counts, b, EdgeKind::Taken) > 0
        && same_unwind_state(&f.cfi, branch_at, jmp_at)
    {
        bypassed.push((EdgeKind::Taken, t));
        return Some((
            BlockExit::Cond {
                taken: callee,
                fall: f_end,
                tail_call: true,
                invertible: true,
            },
            ExitChange::ConditionalTailCall,
            bypassed,
        ));
    }
    (!bypassed.is_empty()).then_some((
        BlockExit::Cond {
            taken: t_end,
            fall: f_end,
            tail_call: false,
            invertible: true,
        },
        ExitChange::DoubleJump,
        bypassed,
    ))
}
