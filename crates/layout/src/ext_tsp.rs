//! Ext-TSP basic-block ordering (Newell & Pupyrev, "Improved Basic Block Reordering", IEEE TC
//! 2020), the algorithm behind BOLT's `-reorder-blocks=ext-tsp` and LLVM's `CodeLayout.cpp`.
//!
//! **Model.** Blocks have sizes in bytes; a jump `(s, t, w)` taken `w` times scores, for a given
//! order, by the distance `d` from the end of `s` to the start of `t`: `w * 1.0` when `t`
//! directly follows `s` (a fall-through), `w * 0.1 * (1 - d/1024)` for a forward jump with
//! `d <= 1024`, `w * 0.1 * (1 - d/640)` for a backward jump with `d <= 640`, else nothing. These
//! are LLVM's `ForwardWeight`/`BackwardWeight` 0.1, `ForwardDistance` 1024 and
//! `BackwardDistance` 640. A fall-through out of a block with a single successor weighs 1.05
//! instead of 1.0 (LLVM's `FallthroughWeightUncond`): it saves an unconditional jump, where a
//! fall-through of a conditional branch only turns a taken branch into a not-taken one. Without
//! that tie-break a loop `body -> cond -> body` scores the same rotated (`cond` first, falling
//! into `body`, which then needs a `jmp` back), and the rotation executes an extra jump per
//! iteration. A jump is conditional when its source has more than one successor among the
//! edges given (zero counts included, so callers should list every CFG edge; a zero-count
//! self-edge marks a block whose other way out is not in the graph, such as a conditional tail
//! call). Self-loops score the same in every order and are ignored by the search. Nothing
//! falls out of a block that ends in an indirect jump (a jump table, a computed goto; the
//! caller marks them, `ext_tsp_order_with_indirect`): a successor placed right after it
//! scores as a forward jump of distance 0, 0.1 rather than 1.0, and splitting a chain there
//! breaks no fall-through.
//!
//! **Algorithm.** Greedy chain merging: every block starts as a chain; the pair of chains with
//! the best score gain is merged, trying the paper's concatenations `X·Y`, `Y·X` and, when `X`
//! has at most [`CHAIN_SPLIT_THRESHOLD`] blocks, the split variants `X1·Y·X2`, `Y·X2·X1`,
//! `X2·X1·Y` at every point but inside a fall-through that has a count; chains of any length
//! are also split next to the ends of the jumps between `X` and `Y`, where a new fall-through
//! may appear (LLVM's splitting "along jumps"). The entry block 0 always stays first in its
//! chain. Merging stops when no merge gains. Chains of cold blocks that were
//! adjacent in the input order are then joined, so code without a profile keeps its order, and
//! the chains are concatenated: the entry chain first, the others by decreasing density
//! (count per byte), ties by their first block.
//!
//! **Complexity.** Pending merges live in a max-heap with lazy invalidation (a chain's version
//! changes when it merges), so each merge costs the gain evaluations of the merged chain's
//! neighbours: `O(J)` for plain concatenations (`J` = jumps between the two chains) and
//! `O(S * (J + I))` for split variants (`S` <= 128 split points, `I` jumps inside the split
//! chain); the inner part is cached per chain, split point and push distance, so a chain with
//! many neighbours pays it once. Rebuilding block positions after a merge is linear in the
//! merged chain. Typical CFGs are near linear; the worst case is a dispatch block jumping to
//! every other block and back, where each merge re-evaluates all of the dispatch chain's
//! neighbours: quadratic (`examples/ext_tsp_timing.rs` measures both shapes).

use std::cell::RefCell;
use std::cmp::Ordering;
use std::collections::{BTreeSet, BinaryHeap, HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// Weight of a fall-through (the target starts where the source ends) of a conditional branch.
pub const FALLTHROUGH_WEIGHT: f64 = 1.0;
/// Weight of a fall-through from a block with a single successor (no jump needed at all).
pub const FALLTHROUGH_WEIGHT_UNCONDITIONAL: f64 = 1.05;
/// Weight of a forward jump of distance 0.
pub const FORWARD_WEIGHT: f64 = 0.1;
/// Weight of a backward jump of distance 0.
pub const BACKWARD_WEIGHT: f64 = 0.1;
/// Longest forward jump, in bytes, that still scores.
pub const FORWARD_DISTANCE: u64 = 1024;
/// Longest backward jump, in bytes, that still scores.
pub const BACKWARD_DISTANCE: u64 = 640;
/// Chains with at most this many blocks are tried split at every position; longer ones only
/// at the ends of jumps into the other chain (LLVM's `ChainSplitThreshold`).
pub const CHAIN_SPLIT_THRESHOLD: usize = 128;
/// No merge creates a chain of more blocks than this (LLVM's `MaxChainSize`).
pub const MAX_CHAIN_SIZE: usize = 4096;

/// A multiply-rotate hash (as in rustc's FxHash): the maps here are keyed by small integers
/// and probed in the inner loop, where SipHash showed up as a fifth of the time.
#[derive(Clone, Copy, Debug, Default)]
struct FastHasher(u64);

impl FastHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.add(u64::from(b));
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }
    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;
type FastSet<K> = HashSet<K, BuildHasherDefault<FastHasher>>;

/// Merges whose gain does not exceed this are not worth making.
const EPSILON: f64 = 1e-9;

/// Score of one jump taken `count` times from a block ending at `src_end` to a block starting
/// at `dst_start`; `conditional` when the source block has other successors.
pub fn jump_score(src_end: u64, dst_start: u64, count: u64, conditional: bool) -> f64 {
    let count = count as f64;
    if src_end == dst_start {
        let weight = if conditional {
            FALLTHROUGH_WEIGHT
        } else {
            FALLTHROUGH_WEIGHT_UNCONDITIONAL
        };
        return weight * count;
    }
    if src_end < dst_start {
        let distance = dst_start - src_end;
        if distance <= FORWARD_DISTANCE {
            return FORWARD_WEIGHT * (1.0 - distance as f64 / FORWARD_DISTANCE as f64) * count;
        }
    } else {
        let distance = src_end - dst_start;
        if distance <= BACKWARD_DISTANCE {
            return BACKWARD_WEIGHT * (1.0 - distance as f64 / BACKWARD_DISTANCE as f64) * count;
        }
    }
    0.0
}

/// How a block's jumps leave it, which decides what a fall-through out of it is worth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Exit {
    /// One successor: falling into it saves the whole jump.
    Unconditional,
    /// Several successors: falling into one turns a taken branch into a not-taken one.
    Conditional,
    /// An indirect jump (a jump table, a computed goto): it runs and is taken whatever
    /// follows, so a successor placed right after it is a jump of distance 0, no fall-through.
    Indirect,
}

/// Score of a jump out of a block of kind `exit` (see `jump_score`).
fn exit_score(src_end: u64, dst_start: u64, count: u64, exit: Exit) -> f64 {
    match exit {
        Exit::Indirect if src_end == dst_start => FORWARD_WEIGHT * count as f64,
        Exit::Indirect | Exit::Conditional => jump_score(src_end, dst_start, count, true),
        Exit::Unconditional => jump_score(src_end, dst_start, count, false),
    }
}

/// Per block: how it leaves. Conditional when it has more than one distinct successor among
/// `edges`; indirect when `indirect` says so (missing entries: not indirect).
fn exits(n: usize, edges: &[(u32, u32, u64)], indirect: &[bool]) -> Vec<Exit> {
    let mut first: Vec<Option<u32>> = vec![None; n];
    let mut exits = vec![Exit::Unconditional; n];
    for &(s, t, _) in edges {
        match first[s as usize] {
            None => first[s as usize] = Some(t),
            Some(other) if other != t => exits[s as usize] = Exit::Conditional,
            Some(_) => {}
        }
    }
    for (b, exit) in exits.iter_mut().enumerate() {
        if indirect.get(b).copied().unwrap_or(false) {
            *exit = Exit::Indirect;
        }
    }
    exits
}

/// Ext-TSP score of `order` (block ids, each at most once) for blocks of `sizes` bytes and jumps
/// `(source, target, count)`. Jumps touching a block missing from `order` score nothing.
///
/// # Panics
/// When a block id in `order` or `edges` is out of range of `sizes`.
pub fn ext_tsp_score(order: &[u32], sizes: &[u64], edges: &[(u32, u32, u64)]) -> f64 {
    ext_tsp_score_with_indirect(order, sizes, edges, &[])
}

/// `ext_tsp_score` where the blocks `indirect` marks end in an indirect jump (a jump table, a
/// computed goto): nothing falls out of them, so a successor placed right after one scores
/// as a jump of distance 0 (`ext_tsp_order_with_indirect`).
pub fn ext_tsp_score_with_indirect(
    order: &[u32],
    sizes: &[u64],
    edges: &[(u32, u32, u64)],
    indirect: &[bool],
) -> f64 {
    let mut start = vec![None; sizes.len()];
    let mut address = 0;
    for &block in order {
        start[block as usize] = Some(address);
        address += sizes[block as usize];
    }
    let exits = exits(sizes.len(), edges, indirect);
    edges
        .iter()
        .map(
            |&(s, t, count)| match (start[s as usize], start[t as usize]) {
                (Some(src), Some(dst)) => {
                    exit_score(src + sizes[s as usize], dst, count, exits[s as usize])
                }
                _ => 0.0,
            },
        )
        .sum()
}

/// Ext-TSP block order: a permutation of `0..sizes.len()` with block 0 first.
///
/// `sizes[b]` is block `b`'s size in bytes, `counts[b]` its execution count, `edges` the jumps
/// `(source, target, count)` (fall-throughs of the original layout included).
///
/// # Panics
/// When `counts` and `sizes` differ in length or an edge names a block out of range.
pub fn ext_tsp_order(sizes: &[u64], counts: &[u64], edges: &[(u32, u32, u64)]) -> Vec<u32> {
    ext_tsp_order_with_indirect(sizes, counts, edges, &[])
}

/// `ext_tsp_order` where `indirect[b]` says block `b` ends in an indirect jump (a jump table,
/// a computed goto; missing entries: it does not). Its successors are its table's targets,
/// but none of them is fallen into: the jump runs and is taken wherever they are, so placing
/// one right after it gains only what a short jump does, not a fall-through's weight.
///
/// # Panics
/// As `ext_tsp_order`.
pub fn ext_tsp_order_with_indirect(
    sizes: &[u64],
    counts: &[u64],
    edges: &[(u32, u32, u64)],
    indirect: &[bool],
) -> Vec<u32> {
    assert_eq!(sizes.len(), counts.len(), "one count per block");
    let n = sizes.len();
    for &(s, t, _) in edges {
        assert!(
            (s as usize) < n && (t as usize) < n,
            "jump {s}->{t} names a block out of range (have {n})"
        );
    }
    if n == 0 {
        return Vec::new();
    }
    let mut merger = Merger::new(sizes, counts, edges, indirect);
    merger.merge_hot_chains();
    merger.merge_cold_chains();
    merger.concatenate()
}

/// How two chains `X` (possibly split into `X1·X2` at an index) and `Y` are concatenated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MergeKind {
    XY,
    X1YX2,
    YX2X1,
    X2X1Y,
}

#[derive(Clone, Copy, Debug)]
struct Merge {
    gain: f64,
    /// The chain that may be split.
    x: u32,
    y: u32,
    /// Index in `x` where `X2` starts (`x`'s length for `XY`).
    split: usize,
    kind: MergeKind,
}

/// A candidate merge in the heap, valid while both chains keep the versions it was made with.
#[derive(Debug)]
struct Candidate {
    merge: Merge,
    versions: (u32, u32),
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Candidate {}
impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Candidate {
    /// Best gain first; among equal gains the pair with the smaller chain ids, for determinism.
    fn cmp(&self, other: &Self) -> Ordering {
        let key = |c: &Candidate| {
            let (a, b) = (c.merge.x.min(c.merge.y), c.merge.x.max(c.merge.y));
            (a, b)
        };
        self.merge
            .gain
            .total_cmp(&other.merge.gain)
            .then_with(|| key(other).cmp(&key(self)))
    }
}

#[derive(Debug, Default)]
struct Chain {
    blocks: Vec<u32>,
    size: u64,
    count: u64,
    /// Score of the jumps inside the chain.
    score: f64,
    /// Jumps (indices into `Merger::jumps`) with both ends in the chain.
    inner: Vec<u32>,
    /// Chains this one has jumps to or from.
    neighbours: BTreeSet<u32>,
    /// Score change of the inner jumps when the chain is split at an index and its second
    /// part pushed by a number of bytes (`u64::MAX` for the swaps `X2·X1`).
    split_gains: RefCell<FastMap<(usize, u64), f64>>,
    version: u32,
    alive: bool,
}

#[derive(Debug)]
struct Merger<'a> {
    sizes: &'a [u64],
    /// Jumps with a count, self-loops left out.
    jumps: Vec<(u32, u32, u64)>,
    /// Per block: how it leaves (what a fall-through out of it is worth).
    exits: Vec<Exit>,
    /// Pairs `(source, target)` of `jumps`: splitting between them would break a fall-through.
    successors: FastSet<(u32, u32)>,
    chains: Vec<Chain>,
    chain_of: Vec<u32>,
    index_in_chain: Vec<u32>,
    offset_in_chain: Vec<u64>,
    /// Jumps between two chains, keyed by (smaller id, larger id).
    between: FastMap<(u32, u32), Vec<u32>>,
    heap: BinaryHeap<Candidate>,
}

fn pair(a: u32, b: u32) -> (u32, u32) {
    (a.min(b), a.max(b))
}

impl<'a> Merger<'a> {
    fn new(sizes: &'a [u64], counts: &[u64], edges: &[(u32, u32, u64)], indirect: &[bool]) -> Self {
        let n = sizes.len();
        let exits = exits(n, edges, indirect);
        let jumps: Vec<_> = edges
            .iter()
            .copied()
            .filter(|&(s, t, count)| s != t && count > 0)
            .collect();
        let mut chains: Vec<Chain> = (0..n)
            .map(|b| Chain {
                blocks: vec![b as u32],
                size: sizes[b],
                count: counts[b],
                alive: true,
                ..Chain::default()
            })
            .collect();
        let mut between: FastMap<(u32, u32), Vec<u32>> = FastMap::default();
        for (i, &(s, t, _)) in jumps.iter().enumerate() {
            between.entry(pair(s, t)).or_default().push(i as u32);
            chains[s as usize].neighbours.insert(t);
            chains[t as usize].neighbours.insert(s);
        }
        Merger {
            sizes,
            // Nothing falls out of an indirect jump: splitting after one breaks nothing.
            successors: jumps
                .iter()
                .filter(|&&(s, _, _)| exits[s as usize] != Exit::Indirect)
                .map(|&(s, t, _)| (s, t))
                .collect(),
            exits,
            jumps,
            chains,
            chain_of: (0..n as u32).collect(),
            index_in_chain: vec![0; n],
            offset_in_chain: vec![0; n],
            between,
            heap: BinaryHeap::new(),
        }
    }

    fn is_entry(&self, chain: u32) -> bool {
        self.chains[chain as usize].blocks[0] == 0
    }

    /// How far the blocks of `X1`, `X2` and `Y` move from their offsets in their chains when
    /// `merge` is made (wrapping: `X2` may move back).
    fn shifts(&self, merge: &Merge) -> [u64; 3] {
        let x = &self.chains[merge.x as usize];
        let y_size = self.chains[merge.y as usize].size;
        let x1_size = x
            .blocks
            .get(merge.split)
            .map_or(x.size, |&b| self.offset_in_chain[b as usize]);
        let x2_size = x.size - x1_size;
        match merge.kind {
            MergeKind::XY => [0, 0, x.size],
            MergeKind::X1YX2 => [0, y_size, x1_size],
            MergeKind::YX2X1 => [y_size + x2_size, y_size.wrapping_sub(x1_size), 0],
            MergeKind::X2X1Y => [x2_size, 0u64.wrapping_sub(x1_size), x.size],
        }
    }

    fn score_under(&self, jumps: &[u32], merge: &Merge) -> f64 {
        let shifts = self.shifts(merge);
        let address = |b: u32| {
            let b = b as usize;
            let part = if self.chain_of[b] == merge.y {
                2
            } else if (self.index_in_chain[b] as usize) < merge.split {
                0
            } else {
                1
            };
            self.offset_in_chain[b].wrapping_add(shifts[part])
        };
        jumps
            .iter()
            .map(|&j| {
                let (s, t, count) = self.jumps[j as usize];
                exit_score(
                    address(s) + self.sizes[s as usize],
                    address(t),
                    count,
                    self.exits[s as usize],
                )
            })
            .sum()
    }

    /// Gain of `merge` given the jumps between its two chains.
    fn gain(&self, merge: &mut Merge, cross: &[u32]) -> f64 {
        let mut gain = self.score_under(cross, merge);
        if merge.kind != MergeKind::XY {
            // Inside `x` only the split point matters and, for `X1·Y·X2`, how far `Y` pushes
            // `X2`; a chain with many neighbours is asked the same question again and again.
            let x = &self.chains[merge.x as usize];
            let pushed_by = match merge.kind {
                MergeKind::X1YX2 => self.chains[merge.y as usize].size,
                _ => u64::MAX,
            };
            let key = (merge.split, pushed_by);
            let cached = x.split_gains.borrow().get(&key).copied();
            gain += cached.unwrap_or_else(|| {
                let inner_gain = self.score_under(&x.inner, merge) - x.score;
                x.split_gains.borrow_mut().insert(key, inner_gain);
                inner_gain
            });
        }
        merge.gain = gain;
        gain
    }

    /// Best way to merge chains `a` and `b`, if any merge is allowed.
    fn best_merge(&self, a: u32, b: u32) -> Option<Merge> {
        let (ca, cb) = (&self.chains[a as usize], &self.chains[b as usize]);
        if ca.blocks.len() + cb.blocks.len() > MAX_CHAIN_SIZE {
            return None;
        }
        let cross = self.between.get(&pair(a, b)).map_or(&[][..], Vec::as_slice);
        let mut best: Option<Merge> = None;
        let mut consider = |merge: &mut Merge| {
            let gain = self.gain(merge, cross);
            if best.is_none_or(|b| gain > b.gain) {
                best = Some(*merge);
            }
        };
        for (x, y) in [(a, b), (b, a)] {
            let x_chain = &self.chains[x as usize];
            let len = x_chain.blocks.len();
            if !self.is_entry(y) {
                consider(&mut Merge {
                    gain: 0.0,
                    x,
                    y,
                    split: len,
                    kind: MergeKind::XY,
                });
            }
            let kinds: &[MergeKind] = if self.is_entry(x) {
                &[MergeKind::X1YX2]
            } else if self.is_entry(y) {
                &[MergeKind::YX2X1]
            } else {
                &[MergeKind::X1YX2, MergeKind::YX2X1, MergeKind::X2X1Y]
            };
            // Along the jumps into `y`, where a new fall-through may appear, even if that
            // breaks one inside `x`.
            let mut splits = Vec::new();
            for &j in cross {
                let (s, t, _) = self.jumps[j as usize];
                if self.chain_of[s as usize] == x {
                    splits.push(self.index_in_chain[s as usize] as usize + 1);
                }
                if self.chain_of[t as usize] == x {
                    splits.push(self.index_in_chain[t as usize] as usize);
                }
            }
            // Short chains anywhere, except through a fall-through with a count.
            if len <= CHAIN_SPLIT_THRESHOLD {
                splits.extend((1..len).filter(|&i| {
                    !self
                        .successors
                        .contains(&(x_chain.blocks[i - 1], x_chain.blocks[i]))
                }));
            }
            splits.sort_unstable();
            splits.dedup();
            splits.retain(|&i| i > 0 && i < len);
            for split in splits {
                for &kind in kinds {
                    consider(&mut Merge {
                        gain: 0.0,
                        x,
                        y,
                        split,
                        kind,
                    });
                }
            }
        }
        best
    }

    fn push_best(&mut self, a: u32, b: u32) {
        if let Some(merge) = self.best_merge(a, b)
            && merge.gain > EPSILON
        {
            let versions = (
                self.chains[merge.x as usize].version,
                self.chains[merge.y as usize].version,
            );
            self.heap.push(Candidate { merge, versions });
        }
    }

    fn merge_hot_chains(&mut self) {
        let mut pairs: Vec<(u32, u32)> = self.between.keys().copied().collect();
        pairs.sort_unstable();
        for (a, b) in pairs {
            self.push_best(a, b);
        }
        while let Some(Candidate { merge, versions }) = self.heap.pop() {
            let (x, y) = (
                &self.chains[merge.x as usize],
                &self.chains[merge.y as usize],
            );
            if !x.alive || !y.alive || (x.version, y.version) != versions {
                continue;
            }
            self.apply(&merge);
            let neighbours: Vec<u32> = self.chains[merge.x as usize]
                .neighbours
                .iter()
                .copied()
                .collect();
            for z in neighbours {
                self.push_best(merge.x, z);
            }
            // Stale candidates pile up around chains with many neighbours; at most one per
            // pair of chains is current, and pairs are at most the jumps.
            if self.heap.len() > 2 * self.jumps.len() + 1024 {
                let chains = &self.chains;
                self.heap.retain(|c| {
                    let (x, y) = (&chains[c.merge.x as usize], &chains[c.merge.y as usize]);
                    x.alive && y.alive && (x.version, y.version) == c.versions
                });
            }
        }
    }

    /// Makes `merge` (its gain computed for the current chains): `x` takes over `y`.
    fn apply(&mut self, merge: &Merge) {
        let (xi, yi) = (merge.x, merge.y);
        let x_blocks = std::mem::take(&mut self.chains[xi as usize].blocks);
        let y_blocks = std::mem::take(&mut self.chains[yi as usize].blocks);
        let (x1, x2) = x_blocks.split_at(merge.split);
        let blocks: Vec<u32> = match merge.kind {
            MergeKind::XY | MergeKind::X1YX2 => [x1, &y_blocks, x2].concat(),
            MergeKind::YX2X1 => [&y_blocks, x2, x1].concat(),
            MergeKind::X2X1Y => [x2, x1, &y_blocks].concat(),
        };
        let mut offset = 0;
        for (i, &b) in blocks.iter().enumerate() {
            self.chain_of[b as usize] = xi;
            self.index_in_chain[b as usize] = i as u32;
            self.offset_in_chain[b as usize] = offset;
            offset += self.sizes[b as usize];
        }
        let cross = self.between.remove(&pair(xi, yi)).unwrap_or_default();
        let y = std::mem::take(&mut self.chains[yi as usize]);
        for &z in &y.neighbours {
            if z == xi {
                continue;
            }
            let moved = self.between.remove(&pair(yi, z)).unwrap_or_default();
            self.between.entry(pair(xi, z)).or_default().extend(moved);
            let zc = &mut self.chains[z as usize];
            zc.neighbours.remove(&yi);
            zc.neighbours.insert(xi);
            self.chains[xi as usize].neighbours.insert(z);
        }
        let x = &mut self.chains[xi as usize];
        x.neighbours.remove(&yi);
        x.blocks = blocks;
        x.size += y.size;
        x.count = x.count.saturating_add(y.count);
        x.score += y.score + merge.gain;
        x.inner.extend(y.inner);
        x.inner.extend(cross);
        x.version += 1;
        x.split_gains.get_mut().clear();
        // `y` was taken: its `alive` is now false.
    }

    /// Joins cold chains that were adjacent in the input order, so that blocks without a
    /// profile keep their original order.
    fn merge_cold_chains(&mut self) {
        for block in 1..self.chain_of.len() {
            let (prev, next) = (block as u32 - 1, block as u32);
            let (xi, yi) = (self.chain_of[prev as usize], self.chain_of[next as usize]);
            let (x, y) = (&self.chains[xi as usize], &self.chains[yi as usize]);
            if xi == yi
                || x.count != 0
                || y.count != 0
                || x.blocks.last() != Some(&prev)
                || y.blocks[0] != next
                || self.is_entry(yi)
                || x.blocks.len() + y.blocks.len() > MAX_CHAIN_SIZE
            {
                continue;
            }
            let mut merge = Merge {
                gain: 0.0,
                x: xi,
                y: yi,
                split: x.blocks.len(),
                kind: MergeKind::XY,
            };
            let cross = self.between.get(&pair(xi, yi)).cloned().unwrap_or_default();
            self.gain(&mut merge, &cross);
            self.apply(&merge);
        }
    }

    fn concatenate(&self) -> Vec<u32> {
        let mut live: Vec<&Chain> = self.chains.iter().filter(|c| c.alive).collect();
        let density = |c: &Chain| c.count as f64 / c.size.max(1) as f64;
        live.sort_by(|a, b| {
            (b.blocks[0] == 0)
                .cmp(&(a.blocks[0] == 0))
                .then_with(|| density(b).total_cmp(&density(a)))
                .then_with(|| a.blocks[0].cmp(&b.blocks[0]))
        });
        live.iter().flat_map(|c| c.blocks.iter().copied()).collect()
    }
}
