//! Tail duplication over a finished layout (BOLT's `-tail-duplication`).
//!
//! A hot `jmp T` from a block P to a small block T that the layout did not place after P is
//! replaced by a copy of T: T's instructions but its last, then T's own exit (a `ret`, a tail
//! call, or a jump on). The hot path then falls through P into the copy instead of taking a
//! branch to T; T stays where it is for its other ways in. The change is a [`ChangedExit`]
//! of P ([`ExitChange::TailDuplicate`]) whose exit is T's: the emitter writes T's body before
//! it, the dyno stats count it as P's exit, and T's counts drop by the edge's count (its
//! `bypassed` entry), so what is counted is what runs.
//!
//! It runs after block ordering and splitting, as BOLT's does: whether a jump is taken at
//! all, and how far it goes, is only known once the order is final; and the copy lives at the
//! end of P, in P's fragment, so the hot/cold decision made for P holds for it. Ext-TSP saw
//! the edge P->T with its count; duplication only removes that edge's taken jump, which
//! ext-TSP's objective already scores as what it would gain by placing T after P.
//!
//! What may be copied: ordinary code (never an entry, a landing pad, an address-taken label,
//! a jump-table target, a secondary entry, an exclusive sequence), of at most
//! `max_bytes` bytes, whose instructions before the last all simply continue (no call, so no
//! call site or landing pad to duplicate in the LSDA; no indirect branch; no trap), none of
//! them addressing T itself RIP-relatively (the copy would read the original's address), and
//! entered in the unwind state P's jump leaves: the copy's unwind rows are the original's, so
//! the row at T's start must equal the row at P's jump. Without unwind rows nothing is copied.
//!
//! Modes (BOLT's names):
//! - `moderate`: tails that return or tail-call, not within 64 bytes of P in the layout (a
//!   jump that near stays in the cache line P is in; BOLT's `-tail-duplication-minimum-offset`);
//! - `aggressive`: also tails that jump on inside the function, at any distance;
//! - `cache`: only where the hot path loses a taken branch: tails that return or tail-call,
//!   or jump on to the block placed after P (the copy then falls into it), at any distance.
//!
//! x86-64 only (the caller checks): a copied instruction is re-encoded with its PC-relative
//! field recomputed, which the x86-64 relocator does for every instruction.

use rivet_arch::Flow;
use rivet_elf::Vaddr;
use rivet_ir::layout::{ChangedExit, ExitChange, FunctionLayout, Layout};
use rivet_ir::{BlockExit, BlockId, EdgeKind, Function, Program, Terminator};

use crate::attach::FunctionCounts;
use crate::peephole::{observable, ordinary, same_unwind_state};

/// BOLT's modes of `-tail-duplication`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TailDupMode {
    #[default]
    None,
    Moderate,
    Aggressive,
    Cache,
}

/// What the pass copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TailDupOptions {
    pub mode: TailDupMode,
    /// Largest tail copied, in bytes of its instructions (BOLT's
    /// `-tail-duplication-maximum-duplication`, 24 by default).
    pub max_bytes: u64,
    /// A jump is replaced only when the profile saw it taken at least this often.
    pub min_count: u64,
}

impl Default for TailDupOptions {
    fn default() -> Self {
        TailDupOptions {
            mode: TailDupMode::None,
            max_bytes: 24,
            min_count: 1,
        }
    }
}

/// A jump shorter than this (in bytes of code between P's end and T) stays within the cache
/// line, and `moderate` leaves it (BOLT's `-tail-duplication-minimum-offset`).
const MODERATE_MIN_DISTANCE: u64 = 64;

/// What the pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TailDupCounts {
    /// Jumps replaced by a copy of their target.
    pub duplicated: usize,
    /// Bytes of the copies (their instructions as in the input; a re-created jump in its
    /// short or near form is not included).
    pub bytes: u64,
    /// Taken jumps the profile saw on the replaced edges.
    pub jumps_removed: u64,
}

impl TailDupCounts {
    /// The duplications recorded in `layout`.
    pub fn of_layout(program: &Program, layout: &Layout) -> TailDupCounts {
        let mut c = TailDupCounts::default();
        for (i, fl) in layout.functions.iter().enumerate() {
            let Some(fl) = fl else { continue };
            let f = &program.functions[i];
            for change in &fl.changed_exits {
                if let ExitChange::TailDuplicate { tail } = change.change {
                    c.duplicated += 1;
                    c.bytes += body_bytes(f, tail);
                }
            }
        }
        c
    }
}

/// Bytes of `b`'s kept instructions but its last (what a copy of it holds before its exit),
/// plus the last when it is copied as it is (a `ret`).
fn body_bytes(f: &Function, b: BlockId) -> u64 {
    let block = f.block(b);
    let kept: Vec<_> = f.kept_insts(block).collect();
    let copied_last = block.terminator == Terminator::Return;
    let n = if copied_last {
        kept.len()
    } else {
        kept.len().saturating_sub(1)
    };
    kept[..n].iter().map(|i| u64::from(i.len())).sum()
}

/// Runs the pass over every function `layout` rewrites (not in place: a copy makes the
/// function larger, and in place it must fit its old bytes). Counts are indexed by function;
/// the layout's block counts lose what moved to the copies. Returns what was done.
pub fn apply(
    program: &Program,
    counts: &[Option<FunctionCounts>],
    layout: &mut Layout,
    options: TailDupOptions,
) -> TailDupCounts {
    let mut done = TailDupCounts::default();
    if options.mode == TailDupMode::None || layout.in_place {
        return done;
    }
    for (i, fl) in layout.functions.iter_mut().enumerate() {
        let Some(fl) = fl else { continue };
        let f = &program.functions[i];
        let Some(c) = counts.get(i).and_then(Option::as_ref) else {
            continue;
        };
        let new = function_duplications(f, c, fl, options);
        for change in &new {
            let ExitChange::TailDuplicate { tail } = change.change else {
                continue;
            };
            let moved = edge_count(f, c, change.block, EdgeKind::Taken);
            done.duplicated += 1;
            done.bytes += body_bytes(f, tail);
            done.jumps_removed += moved;
            if let Some(slot) = layout
                .block_counts
                .get_mut(i)
                .and_then(|bc| bc.get_mut(tail.0 as usize))
            {
                *slot = slot.saturating_sub(moved);
            }
        }
        fl.changed_exits.extend(new);
        fl.changed_exits.sort_by_key(|c| c.block);
    }
    done
}

fn edge_count(f: &Function, counts: &FunctionCounts, b: BlockId, kind: EdgeKind) -> u64 {
    let Some(k) = f.block(b).succs.iter().position(|e| e.kind == kind) else {
        return 0;
    };
    counts
        .edges
        .get(b.0 as usize)
        .and_then(|e| e.get(k))
        .copied()
        .unwrap_or(0)
}

/// Where a block sits: its fragment and position.
fn positions(f: &Function, fl: &FunctionLayout) -> Vec<Option<(usize, usize)>> {
    let mut at = vec![None; f.blocks.len()];
    for (k, fragment) in fl.fragments.iter().enumerate() {
        for (pos, b) in fragment.iter().enumerate() {
            if let Some(slot) = at.get_mut(b.0 as usize) {
                *slot = Some((k, pos));
            }
        }
    }
    at
}

/// Bytes of kept code between the end of `p` and the start of `t` in the layout (either
/// way); `None` when they are in different fragments.
fn distance(
    f: &Function,
    fl: &FunctionLayout,
    at: &[Option<(usize, usize)>],
    p: BlockId,
    t: BlockId,
) -> Option<u64> {
    let (kp, pp) = at.get(p.0 as usize).copied().flatten()?;
    let (kt, pt) = at.get(t.0 as usize).copied().flatten()?;
    if kp != kt {
        return None;
    }
    let between = if pt > pp {
        &fl.fragments[kp][pp + 1..pt]
    } else {
        &fl.fragments[kp][pt..=pp]
    };
    Some(
        between
            .iter()
            .flat_map(|&b| f.kept_insts(f.block(b)))
            .map(|i| u64::from(i.len()))
            .sum(),
    )
}

/// The exit a copy of `t` ends with, when `t` may be copied at all.
fn copyable_tail(f: &Function, t: BlockId, max_bytes: u64) -> Option<BlockExit> {
    let block = f.block(t);
    let kept: Vec<_> = f.kept_insts(block).collect();
    let (last, body) = kept.split_last()?;
    // A block that only jumps on is the double-jump peephole's, and the layout sees through it.
    if body.is_empty() && block.terminator != Terminator::Return {
        return None;
    }
    let end = f.block_insts(block).last().map_or(block.start, |i| i.end());
    let own = |target: Vaddr| target >= block.start && target < end;
    for inst in body {
        if inst.flow() != Flow::Next || inst.pc_relative_target().is_some_and(own) {
            return None;
        }
    }
    let exit = match (&block.terminator, f.block_exit(block)?) {
        (Terminator::Return, BlockExit::Copied) if last.flow() == Flow::Return => {
            let ret = (block.insts.start..block.insts.end)
                .rev()
                .find(|&i| !f.is_dropped_padding(i))?;
            BlockExit::Return { ret }
        }
        (Terminator::Jump | Terminator::TailCall { .. }, e @ BlockExit::Jump { to, .. })
            if !own(to) =>
        {
            e
        }
        _ => return None,
    };
    (body_bytes(f, t) <= max_bytes).then_some(exit)
}

/// The duplications in one function laid out as `fl`, sorted by block; blocks whose exit a
/// peephole already changed are left alone.
pub fn function_duplications(
    f: &Function,
    counts: &FunctionCounts,
    fl: &FunctionLayout,
    options: TailDupOptions,
) -> Vec<ChangedExit> {
    let observable = observable(f);
    let at = positions(f, fl);
    let placed: Vec<_> = fl
        .fragments
        .iter()
        .map(|fr| f.placed_next(fr, true))
        .collect();
    let is_next = |from: BlockId, to: Option<BlockId>| match at.get(from.0 as usize).copied() {
        Some(Some((k, pos))) => placed[k].is_next(pos, to),
        _ => false,
    };
    let mut out = Vec::new();
    for (i, block) in f.blocks.iter().enumerate() {
        let p = BlockId(i as u32);
        if !block.is_reachable
            || block.in_exclusive_sequence
            || at[i].is_none()
            || fl.changed_exits.iter().any(|c| c.block == p)
            || f.passes_straight_to(block).is_some()
        {
            continue;
        }
        let Some(BlockExit::Jump {
            to,
            tail_call: false,
        }) = f.block_exit(block)
        else {
            continue;
        };
        let Some(t) = f.block_at(to) else { continue };
        let count = edge_count(f, counts, p, EdgeKind::Taken);
        if t == p
            || count < options.min_count.max(1)
            || is_next(p, Some(t))
            || at[t.0 as usize].is_none()
            || !ordinary(f, &observable, t)
        {
            continue;
        }
        let Some(exit) = copyable_tail(f, t, options.max_bytes) else {
            continue;
        };
        let leaves_function = matches!(
            exit,
            BlockExit::Return { .. }
                | BlockExit::Jump {
                    tail_call: true,
                    ..
                }
        );
        let wanted = match options.mode {
            TailDupMode::None => false,
            TailDupMode::Moderate => {
                leaves_function
                    && distance(f, fl, &at, p, t).is_none_or(|d| d > MODERATE_MIN_DISTANCE)
            }
            TailDupMode::Aggressive => true,
            TailDupMode::Cache => {
                leaves_function
                    || matches!(exit, BlockExit::Jump { to: x, .. } if is_next(p, f.block_at(x)))
            }
        };
        let Some(jump) = f.block_insts(block).last() else {
            continue;
        };
        if !wanted || !same_unwind_state(&f.cfi, jump.addr(), f.block(t).start) {
            continue;
        }
        out.push(ChangedExit {
            block: p,
            exit,
            change: ExitChange::TailDuplicate { tail: t },
            bypassed: vec![(EdgeKind::Taken, t)],
        });
    }
    out
}
