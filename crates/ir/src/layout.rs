//! Layout: where each block of each rewritten function goes, kept apart from block contents.
//!
//! A rewritten function is split into fragments (the first holds the entry block first; later
//! ones are cold parts placed far away), each an ordered list of blocks. The new text holds
//! the first fragments of moved functions in `hot_order`; `cold_order` lists every other
//! fragment. In place mode (inputs without relocations) a function's first fragment is written
//! back over its original bytes instead, so function order cannot change.
//!
//! The simple strategies live here too: the identity and reversed orders, and seeded random
//! layouts, used to prove the rewriter correct and to randomize layout in benchmarks.

use crate::block_end::BlockExit;
use rivet_elf::Vaddr;

use crate::program::{BlockId, EdgeKind, FuncId, Function, Program};

/// One fragment of one function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FragmentRef {
    pub function: FuncId,
    pub fragment: u32,
}

/// Which calls into PLT stubs rewritten code makes through the stubs' GOT slots instead
/// (`rivet optimize --plt`, BOLT's `-plt`). Functions rewritten in place keep theirs: the
/// longer calls might not fit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PltCalls {
    /// Every call stays as it was.
    #[default]
    Keep,
    /// Calls and tail calls in first (hot) fragments.
    Hot,
    /// Calls and tail calls in every rewritten fragment.
    All,
}

impl PltCalls {
    /// Whether fragment number `fragment` of a moved function goes through the slots.
    pub fn applies_to(self, fragment: u32) -> bool {
        match self {
            PltCalls::Keep => false,
            PltCalls::Hot => fragment == 0,
            PltCalls::All => true,
        }
    }
}

/// A block that starts at an alignment boundary (`TextAlignment::blocks` in the emitter),
/// unless that takes more than `max_padding` bytes of padding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AlignedBlock {
    pub block: BlockId,
    pub max_padding: u8,
}

/// Which peephole changed a block's exit (`rivet_passes::peephole`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ExitChange {
    /// A branch to a block that only jumps on goes straight to where that jump leads.
    DoubleJump,
    /// A conditional jump whose two sides arrive at the same block became a jump there (or
    /// nothing, when that block is placed next).
    UselessBranch,
    /// A jump to a block that only returns became a copy of that return.
    JumpToReturn,
    /// A conditional jump to a block that only tail-calls a function became a conditional
    /// jump to that function (BOLT's SCTC).
    ConditionalTailCall,
    /// A jump to a small block that ends the path (a return, a tail call, a jump) became a
    /// copy of that block (`rivet_passes::taildup`): the block's instructions but its last,
    /// then its exit, which the changed exit holds. The original stays for other ways in.
    TailDuplicate { tail: BlockId },
}

/// A block whose exit rewritten code writes otherwise than the input's branch says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangedExit {
    pub block: BlockId,
    /// The exit written instead of `Function::block_exit`'s.
    pub exit: BlockExit,
    pub change: ExitChange,
    /// Blocks the block's runs no longer pass through, each with the kind of the block's own
    /// edge that used to lead there (the first of a chain is that edge's target; the others
    /// follow it): their profile counts drop by that edge's count (dyno stats).
    pub bypassed: Vec<(EdgeKind, BlockId)>,
}

/// A callee of a promoted indirect call site, with the calls the profile saw go there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PromotedTarget {
    pub function: FuncId,
    /// The callee's entry in the input.
    pub entry: Vaddr,
    pub count: u64,
}

/// An indirect call that rewritten code makes through compares against its hottest profiled
/// callees, a direct call to each, and the original call as the fallback
/// (`rivet_passes::icp`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PromotedCall {
    /// Index of the indirect call in `Function::insts`.
    pub inst: u32,
    /// Compared in this order: the hottest first.
    pub targets: Vec<PromotedTarget>,
    /// Calls the profile saw the site make, to every target.
    pub site_count: u64,
    /// The call never returns (it ends its block): the direct calls need no way back.
    pub noreturn: bool,
}

/// The block order of one rewritten function.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FunctionLayout {
    /// `fragments[0]` starts with the entry block; every block appears exactly once.
    pub fragments: Vec<Vec<BlockId>>,
    /// Blocks of the first fragment to align (hot loop heads), in no particular order.
    pub aligned: Vec<AlignedBlock>,
    /// Blocks whose exits the peephole passes changed, sorted by block; empty without them.
    pub changed_exits: Vec<ChangedExit>,
    /// Indirect calls promoted to direct calls, sorted by instruction; empty without
    /// `--indirect-call-promotion`.
    pub promoted_calls: Vec<PromotedCall>,
}

impl FunctionLayout {
    /// The promotion of the indirect call at instruction `inst`, if it is promoted.
    pub fn promoted(&self, inst: u32) -> Option<&PromotedCall> {
        promoted_call(&self.promoted_calls, inst)
    }

    /// How `b` leaves in rewritten code: its changed exit, if a pass changed it, else
    /// `Function::block_exit`.
    pub fn block_exit(&self, f: &Function, b: BlockId) -> Option<BlockExit> {
        changed_exit(&self.changed_exits, b).or_else(|| f.block_exit(f.block(b)))
    }
}

/// The promotion of instruction `inst` in `calls` (sorted by instruction), if any.
pub fn promoted_call(calls: &[PromotedCall], inst: u32) -> Option<&PromotedCall> {
    calls
        .binary_search_by_key(&inst, |c| c.inst)
        .ok()
        .map(|i| &calls[i])
}

/// The block whose copy `changes` (sorted by block) puts at the end of `b`, if any
/// (`ExitChange::TailDuplicate`).
pub fn duplicated_tail(changes: &[ChangedExit], b: BlockId) -> Option<BlockId> {
    let i = changes.binary_search_by_key(&b, |c| c.block).ok()?;
    match changes[i].change {
        ExitChange::TailDuplicate { tail } => Some(tail),
        _ => None,
    }
}

/// The exit `changes` (sorted by block) gives `b`, if any.
pub fn changed_exit(changes: &[ChangedExit], b: BlockId) -> Option<BlockExit> {
    changes
        .binary_search_by_key(&b, |c| c.block)
        .ok()
        .map(|i| changes[i].exit)
}

/// Where rewritten code goes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    /// Indexed by `FuncId`; `None` for functions left untouched.
    pub functions: Vec<Option<FunctionLayout>>,
    /// First fragments in new-text order (empty in place mode).
    pub hot_order: Vec<FragmentRef>,
    /// All other fragments, in order.
    pub cold_order: Vec<FragmentRef>,
    /// First fragments are rewritten over the original code instead of moved.
    pub in_place: bool,
    /// Profile execution count of every block of every function, indexed by `FuncId` then
    /// `BlockId`; empty where unknown (no profile). The emitter uses it to spread the hottest
    /// cache lines over the instruction cache's sets.
    pub block_counts: Vec<Vec<u64>>,
    /// Identical code folding (`rivet optimize --icf`): `(folded, kept)` pairs, sorted. A
    /// folded function is not rewritten; every direct call or jump to its entry goes to the
    /// kept copy's new place instead, and its old entry forwards there. The kept copy is
    /// rewritten. Empty without folding.
    pub folded: Vec<(FuncId, FuncId)>,
    /// How conditional branches leaving a fragment for another fragment of their function
    /// are written (AArch64: through islands, or straight there when the whole new text is
    /// within their reach). The emitter decides it once the layout is final
    /// (`rivet_emit::rewrite`) and records it here, so that everything that predicts the
    /// code from the layout (sizes, dyno stats) predicts what was written.
    pub exits: rivet_arch::FragmentExits,
}

/// A layout that breaks the rules `Layout` documents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidLayout(pub String);

impl std::fmt::Display for InvalidLayout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid layout: {}", self.0)
    }
}

impl std::error::Error for InvalidLayout {}

impl Layout {
    pub fn function(&self, id: FuncId) -> Option<&FunctionLayout> {
        self.functions.get(id.0 as usize).and_then(Option::as_ref)
    }

    pub fn is_rewritten(&self, id: FuncId) -> bool {
        self.function(id).is_some()
    }

    /// The function `f` was folded into, if it was (`Layout::folded`).
    pub fn folded_into(&self, f: FuncId) -> Option<FuncId> {
        self.folded
            .binary_search_by_key(&f, |p| p.0)
            .ok()
            .map(|i| self.folded[i].1)
    }

    pub fn rewritten_count(&self) -> usize {
        self.functions.iter().flatten().count()
    }

    /// The blocks of one fragment.
    pub fn fragment(&self, f: FragmentRef) -> &[BlockId] {
        &self.functions[f.function.0 as usize]
            .as_ref()
            .expect("fragment of a rewritten function")
            .fragments[f.fragment as usize]
    }

    /// Checks every invariant against `program`: only simple functions, every block exactly
    /// once, entry first, every fragment listed once in the right order list.
    pub fn validate(&self, program: &Program) -> Result<(), InvalidLayout> {
        let bad = |s: String| Err(InvalidLayout(s));
        if self.functions.len() != program.functions.len() {
            return bad(format!(
                "{} function entries for {} functions",
                self.functions.len(),
                program.functions.len()
            ));
        }
        for (i, fl) in self.functions.iter().enumerate() {
            let Some(fl) = fl else { continue };
            let f = &program.functions[i];
            if !f.is_simple() {
                return bad(format!("{} is not simple", f.name()));
            }
            let mut seen = vec![false; f.blocks.len()];
            for frag in &fl.fragments {
                if frag.is_empty() {
                    return bad(format!("{} has an empty fragment", f.name()));
                }
                for b in frag {
                    match seen.get_mut(b.0 as usize) {
                        Some(s) if !*s => *s = true,
                        _ => return bad(format!("{}: block {} misplaced", f.name(), b.0)),
                    }
                }
            }
            if seen.iter().any(|s| !s) {
                return bad(format!("{}: a block is missing", f.name()));
            }
            for a in &fl.aligned {
                if self.in_place || !fl.fragments[0].contains(&a.block) {
                    return bad(format!(
                        "{}: aligned block {} is not in a moved first fragment",
                        f.name(),
                        a.block.0
                    ));
                }
            }
            if !fl.changed_exits.is_sorted_by(|a, b| a.block < b.block)
                || fl
                    .changed_exits
                    .iter()
                    .any(|c| c.block.0 as usize >= f.blocks.len())
            {
                return bad(format!(
                    "{}: changed exits unsorted or of no block",
                    f.name()
                ));
            }
            let first = fl.fragments.first().and_then(|fr| fr.first());
            if first.is_none_or(|b| !f.block(*b).is_entry || f.block(*b).start != f.range.start) {
                return bad(format!("{}: the entry block is not first", f.name()));
            }
        }
        let mut listed = std::collections::HashSet::new();
        for (list, hot) in [(&self.hot_order, true), (&self.cold_order, false)] {
            for r in list {
                let Some(fl) = self.function(r.function) else {
                    return bad(format!("fragment of untouched function {}", r.function.0));
                };
                if r.fragment as usize >= fl.fragments.len() || (r.fragment == 0) != hot {
                    return bad(format!(
                        "fragment {}/{} misplaced",
                        r.function.0, r.fragment
                    ));
                }
                if !listed.insert(*r) {
                    return bad(format!(
                        "fragment {}/{} listed twice",
                        r.function.0, r.fragment
                    ));
                }
            }
        }
        let expected: usize = self
            .functions
            .iter()
            .flatten()
            .map(|fl| fl.fragments.len())
            .sum::<usize>()
            - if self.in_place {
                self.rewritten_count()
            } else {
                0
            };
        if listed.len() != expected {
            return bad(format!(
                "{} fragments listed, {expected} expected",
                listed.len()
            ));
        }
        if self.in_place && !self.hot_order.is_empty() {
            return bad("in place mode moves no first fragment".into());
        }
        for &(folded, kept) in &self.folded {
            if self.is_rewritten(folded) || !self.is_rewritten(kept) || folded == kept {
                return bad(format!(
                    "function {} folded into {}: the folded one must stay, the kept one move",
                    folded.0, kept.0
                ));
            }
        }
        if !self.folded.is_sorted() {
            return bad("folded pairs are not sorted".into());
        }
        Ok(())
    }
}

/// Which layout to build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayoutStrategy {
    /// Original function and block order, nothing split.
    Identity,
    /// Functions and blocks (after the entry) in reverse order.
    Reverse,
    /// Random function order, block order and hot/cold splits.
    Shuffle { seed: u64 },
    /// Random block order and splits, original function order.
    ShuffleBlocks { seed: u64 },
}

impl LayoutStrategy {
    /// True when the strategy changes the order of functions (needs relocations).
    pub fn reorders_functions(self) -> bool {
        matches!(
            self,
            LayoutStrategy::Reverse | LayoutStrategy::Shuffle { .. }
        )
    }
}

/// SplitMix64: a tiny, well-studied generator. Hand-written rather than taken from `rand`
/// because a seed must give the same layout in every future version of Rivet, a stability
/// `rand` does not promise across releases.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0), by rejection so no value is favoured.
    pub fn below(&mut self, n: u64) -> u64 {
        let zone = u64::MAX - u64::MAX % n;
        loop {
            let v = self.next_u64();
            if v < zone {
                return v % n;
            }
        }
    }

    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }

    pub fn coin(&mut self) -> bool {
        self.next_u64() & 1 == 1
    }
}

/// Builds the layout `strategy` asks for over the functions `movable` selects.
pub fn build_layout(
    program: &Program,
    movable: &[bool],
    strategy: LayoutStrategy,
    in_place: bool,
) -> Layout {
    let mut functions: Vec<Option<FunctionLayout>> = vec![None; program.functions.len()];
    let mut hot_order = Vec::new();
    let mut cold_order = Vec::new();
    let seed = match strategy {
        LayoutStrategy::Shuffle { seed } | LayoutStrategy::ShuffleBlocks { seed } => seed,
        _ => 0,
    };
    for f in &program.functions {
        if !movable[f.id.0 as usize] {
            continue;
        }
        let Some(entry) = f.block_at(f.range.start) else {
            continue;
        };
        // One generator per function, so a function's layout does not depend on which other
        // functions were movable.
        let mut rng = SplitMix64::new(seed ^ (u64::from(f.id.0) << 32) ^ f.range.start.get());
        let mut rest: Vec<BlockId> = (0..f.blocks.len() as u32)
            .map(BlockId)
            .filter(|b| *b != entry)
            .collect();
        let fragments = match strategy {
            LayoutStrategy::Identity => vec![std::iter::once(entry).chain(rest).collect()],
            LayoutStrategy::Reverse => {
                rest.reverse();
                vec![std::iter::once(entry).chain(rest).collect()]
            }
            LayoutStrategy::Shuffle { .. } | LayoutStrategy::ShuffleBlocks { .. } => {
                rng.shuffle(&mut rest);
                let mut hot = vec![entry];
                let mut cold = Vec::new();
                let split = !rest.is_empty() && rng.coin();
                for b in rest {
                    if split && rng.coin() {
                        cold.push(b);
                    } else {
                        hot.push(b);
                    }
                }
                if cold.is_empty() {
                    vec![hot]
                } else {
                    vec![hot, cold]
                }
            }
        };
        for i in 0..fragments.len() as u32 {
            let r = FragmentRef {
                function: f.id,
                fragment: i,
            };
            if i > 0 {
                cold_order.push(r);
            } else if !in_place {
                hot_order.push(r);
            }
        }
        functions[f.id.0 as usize] = Some(FunctionLayout {
            fragments,
            aligned: Vec::new(),
            changed_exits: Vec::new(),
            promoted_calls: Vec::new(),
        });
    }
    let mut rng = SplitMix64::new(seed);
    match strategy {
        LayoutStrategy::Identity | LayoutStrategy::ShuffleBlocks { .. } => {}
        LayoutStrategy::Reverse => {
            hot_order.reverse();
            cold_order.reverse();
        }
        LayoutStrategy::Shuffle { .. } => {
            rng.shuffle(&mut hot_order);
            rng.shuffle(&mut cold_order);
        }
    }
    Layout {
        functions,
        hot_order,
        cold_order,
        in_place,
        block_counts: Vec::new(),
        folded: Vec::new(),
        // Decided by the emitter once the layout is final.
        exits: rivet_arch::FragmentExits::Islands,
    }
}

/// Moves every block but the entry of each rewritten function into one cold fragment (BOLT's
/// `-split-strategy=all`), keeping the blocks in the order `layout` gave them. A stress layout
/// rather than a fast one: every branch out of an entry block, and every fall-through from it,
/// crosses to the cold text, so it exercises the longest distances a binary can ask of its
/// branches (relaxation, veneers) and the most fragments of unwind and debug info. The cold
/// fragments follow the order of the functions' first fragments (`hot_order`), or address
/// order in place mode, so reversed or shuffled function orders reverse or shuffle them too.
pub fn split_every_block(program: &Program, mut layout: Layout) -> Layout {
    for fl in layout.functions.iter_mut().flatten() {
        let mut blocks = fl.fragments.iter().flatten().copied();
        let Some(entry) = blocks.next() else {
            continue;
        };
        let rest: Vec<BlockId> = blocks.collect();
        fl.fragments = if rest.is_empty() {
            vec![vec![entry]]
        } else {
            vec![vec![entry], rest]
        };
        // Only first-fragment blocks may be aligned; the entry is the one left there.
        fl.aligned.retain(|a| a.block == entry);
    }
    let order: Vec<FuncId> = if layout.in_place {
        let mut ids: Vec<FuncId> = (0..layout.functions.len() as u32)
            .map(FuncId)
            .filter(|id| layout.is_rewritten(*id))
            .collect();
        ids.sort_by_key(|id| program.function(*id).range.start);
        ids
    } else {
        layout.hot_order.iter().map(|r| r.function).collect()
    };
    layout.cold_order = order
        .into_iter()
        .filter(|id| {
            layout.functions[id.0 as usize]
                .as_ref()
                .is_some_and(|fl| fl.fragments.len() > 1)
        })
        .map(|function| FragmentRef {
            function,
            fragment: 1,
        })
        .collect();
    layout
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_is_stable() {
        // Reference values of SplitMix64 seeded with 0: a seed must mean the same forever.
        let mut r = SplitMix64::new(0);
        assert_eq!(r.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(r.next_u64(), 0x6e78_9e6a_a1b9_65f4);
    }

    #[test]
    fn shuffle_is_a_permutation() {
        let mut r = SplitMix64::new(7);
        let mut v: Vec<u32> = (0..100).collect();
        r.shuffle(&mut v);
        assert_ne!(v, (0..100).collect::<Vec<_>>());
        v.sort();
        assert_eq!(v, (0..100).collect::<Vec<_>>());
    }
}
