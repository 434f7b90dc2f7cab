//! Function ordering from a weighted call graph: C3/hfsort, cdsort and exec-count.
//!
//! Inputs are dense: `sizes[f]` bytes and `counts[f]` samples or executions of function `f`, and
//! call edges `(caller, callee, count)` (parallel edges add up, recursive calls are ignored).
//! Every function returns a permutation of `0..sizes.len()`; functions of equal rank keep
//! their input order, so the result is deterministic.
//!
//! - [`exec_count_order`]: hottest first (BOLT's `-reorder-functions=exec-count`).
//! - [`c3_order`]: call-chain clustering (Ottoni & Maher, "Optimizing Function Placement for
//!   Large-Scale Data-Center Applications", CGO 2017; BOLT's `hfsort`). Functions with samples
//!   are visited densest first (samples per byte); each one's cluster is appended to the
//!   cluster of its heaviest caller unless the result would exceed [`C3_MAX_CLUSTER_SIZE`]
//!   bytes (a page) or dilute the callee's density more than [`C3_MAX_DENSITY_DEGRADATION`]
//!   times. Clusters are then sorted by density. `O(E log E + n log n)`, plus moving the
//!   members of merged clusters (a cluster never exceeds a page).
//! - [`cdsort_order`]: cache-directed sort (LLVM's `CDSortImpl`, BOLT's `cdsort`, the default of
//!   lld). Greedy merging of chains of hot functions, as in ext-TSP, with only the concatenations
//!   `X·Y` and `Y·X`; the gain of a merge is a distance term, `count * distance^-0.25` summed
//!   over the calls between the two chains (minus the same with the distance of the whole hot
//!   code), plus 0.25 times a frequency term, the drop in expected misses of an LRU cache of 16
//!   lines of 2048 bytes where a chain of density `d` misses with probability
//!   `(1 - d * 2048 / total)^16`; a non-negative gain is divided by the smaller chain's size so
//!   short chains merge first; no chain grows beyond [`CDSORT_MAX_CHAIN_SIZE`] functions.
//!   Simplification: we have no call-site offsets, so every call is
//!   taken to leave from the middle of its caller. Leftover chains are sorted by density.
//!   Merges come from a lazily invalidated max-heap: `O(E log E)` gain evaluations overall
//!   for sparse call graphs, each linear in the calls between two chains.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

/// C3 stops growing a cluster at this many bytes: one 4 KiB page, as in the paper.
pub const C3_MAX_CLUSTER_SIZE: u64 = 4096;
/// C3 does not merge when the merged density would fall below the callee cluster's density
/// divided by this (BOLT's `hfsort` uses 8).
pub const C3_MAX_DENSITY_DEGRADATION: f64 = 8.0;
/// cdsort: number of lines of the modelled instruction cache (`CDSortConfig::CacheEntries`).
pub const CDSORT_CACHE_ENTRIES: u32 = 16;
/// cdsort: size in bytes of a line of the modelled cache (`CDSortConfig::CacheSize`).
pub const CDSORT_CACHE_SIZE: u64 = 2048;
/// cdsort: no merge creates a chain of more functions than this (`CDSortConfig::MaxChainSize`).
pub const CDSORT_MAX_CHAIN_SIZE: usize = 128;
/// cdsort: exponent of the distance term (`CDSortConfig::DistancePower`).
pub const CDSORT_DISTANCE_POWER: f64 = 0.25;
/// cdsort: weight of the frequency term (`CDSortConfig::FrequencyScale`).
pub const CDSORT_FREQUENCY_SCALE: f64 = 0.25;

const EPSILON: f64 = 1e-8;

fn check_input(sizes: &[u64], counts: &[u64], calls: &[(u32, u32, u64)]) {
    assert_eq!(sizes.len(), counts.len(), "one count per function");
    let n = sizes.len();
    for &(caller, callee, _) in calls {
        assert!(
            (caller as usize) < n && (callee as usize) < n,
            "call {caller}->{callee} names a function out of range (have {n})"
        );
    }
}

/// Hottest functions first; equal counts keep their input order.
pub fn exec_count_order(counts: &[u64]) -> Vec<u32> {
    let mut order: Vec<u32> = (0..counts.len() as u32).collect();
    order.sort_by(|&a, &b| counts[b as usize].cmp(&counts[a as usize]));
    order
}

fn density(samples: u64, size: u64) -> f64 {
    samples as f64 / size.max(1) as f64
}

/// Clusters (lists of functions) by decreasing density, ties by their first function.
fn by_density(mut clusters: Vec<(Vec<u32>, u64, u64)>) -> Vec<u32> {
    clusters.sort_by(|a, b| {
        density(b.2, b.1)
            .total_cmp(&density(a.2, a.1))
            .then_with(|| a.0[0].cmp(&b.0[0]))
    });
    clusters.into_iter().flat_map(|c| c.0).collect()
}

/// C3 (call-chain clustering, hfsort) function order.
///
/// # Panics
/// When `counts` and `sizes` differ in length or a call names a function out of range.
pub fn c3_order(sizes: &[u64], counts: &[u64], calls: &[(u32, u32, u64)]) -> Vec<u32> {
    check_input(sizes, counts, calls);
    let n = sizes.len();
    // Heaviest caller of each function (parallel calls summed; smaller id on ties).
    let mut weights: BTreeMap<(u32, u32), u64> = BTreeMap::new();
    for &(caller, callee, count) in calls {
        if caller != callee && count > 0 {
            *weights.entry((callee, caller)).or_default() += count;
        }
    }
    let mut heaviest_caller: Vec<Option<(u32, u64)>> = vec![None; n];
    for (&(callee, caller), &w) in &weights {
        let best = &mut heaviest_caller[callee as usize];
        if best.is_none_or(|(_, bw)| w > bw) {
            *best = Some((caller, w));
        }
    }
    // Cluster k starts as {k}; a dead cluster has no functions.
    let mut members: Vec<Vec<u32>> = (0..n as u32).map(|f| vec![f]).collect();
    let mut size: Vec<u64> = sizes.to_vec();
    let mut samples: Vec<u64> = counts.to_vec();
    let mut cluster_of: Vec<u32> = (0..n as u32).collect();
    let mut hottest: Vec<u32> = (0..n as u32).filter(|&f| counts[f as usize] > 0).collect();
    hottest.sort_by(|&a, &b| {
        density(counts[b as usize], sizes[b as usize])
            .total_cmp(&density(counts[a as usize], sizes[a as usize]))
            .then_with(|| a.cmp(&b))
    });
    for f in hottest {
        let Some((caller, _)) = heaviest_caller[f as usize] else {
            continue;
        };
        let (into, from) = (cluster_of[caller as usize], cluster_of[f as usize]);
        if into == from {
            continue;
        }
        let (iu, fu) = (into as usize, from as usize);
        let merged_size = size[iu] + size[fu];
        if merged_size > C3_MAX_CLUSTER_SIZE {
            continue;
        }
        let merged_density = density(samples[iu] + samples[fu], merged_size);
        if merged_density * C3_MAX_DENSITY_DEGRADATION < density(samples[fu], size[fu]) {
            continue;
        }
        let moved = std::mem::take(&mut members[fu]);
        for &g in &moved {
            cluster_of[g as usize] = into;
        }
        members[iu].extend(moved);
        size[iu] = merged_size;
        samples[iu] += samples[fu];
    }
    let clusters = members
        .into_iter()
        .enumerate()
        .filter(|(_, m)| !m.is_empty())
        .map(|(k, m)| (m, size[k], samples[k]))
        .collect();
    by_density(clusters)
}

/// Cache-directed sort (cdsort) function order.
///
/// # Panics
/// When `counts` and `sizes` differ in length or a call names a function out of range.
pub fn cdsort_order(sizes: &[u64], counts: &[u64], calls: &[(u32, u32, u64)]) -> Vec<u32> {
    check_input(sizes, counts, calls);
    CdSort::new(sizes, counts, calls).run()
}

#[derive(Debug, Default)]
struct FnChain {
    funcs: Vec<u32>,
    size: u64,
    count: u64,
    neighbours: BTreeSet<u32>,
    version: u32,
    alive: bool,
}

/// A pending merge of chains `first` then `second`.
#[derive(Debug)]
struct FnCandidate {
    gain: f64,
    first: u32,
    second: u32,
    versions: (u32, u32),
}

impl PartialEq for FnCandidate {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for FnCandidate {}
impl PartialOrd for FnCandidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for FnCandidate {
    fn cmp(&self, other: &Self) -> Ordering {
        self.gain
            .total_cmp(&other.gain)
            .then_with(|| (other.first, other.second).cmp(&(self.first, self.second)))
    }
}

#[derive(Debug)]
struct CdSort {
    sizes: Vec<u64>,
    calls: Vec<(u32, u32, u64)>,
    chains: Vec<FnChain>,
    chain_of: Vec<u32>,
    offset_in_chain: Vec<u64>,
    between: BTreeMap<(u32, u32), Vec<u32>>,
    total_samples: f64,
    /// Locality of a call between chains not yet merged: as far apart as all hot code.
    apart_locality: f64,
    heap: BinaryHeap<FnCandidate>,
}

impl CdSort {
    fn new(sizes: &[u64], counts: &[u64], calls: &[(u32, u32, u64)]) -> Self {
        let n = sizes.len();
        let sizes: Vec<u64> = sizes.iter().map(|&s| s.max(1)).collect();
        let calls: Vec<_> = calls
            .iter()
            .copied()
            .filter(|&(a, b, c)| a != b && c > 0)
            .collect();
        let (mut ins, mut outs) = (vec![0u64; n], vec![0u64; n]);
        for &(a, b, c) in &calls {
            outs[a as usize] += c;
            ins[b as usize] += c;
        }
        let total_samples = counts.iter().map(|&c| c as f64).sum();
        let total_size: u64 = (0..n).filter(|&f| counts[f] > 0).map(|f| sizes[f]).sum();
        let mut chains: Vec<FnChain> = (0..n)
            .map(|f| FnChain {
                funcs: vec![f as u32],
                size: sizes[f],
                count: counts[f].max(ins[f]).max(outs[f]),
                alive: true,
                ..FnChain::default()
            })
            .collect();
        let mut between: BTreeMap<(u32, u32), Vec<u32>> = BTreeMap::new();
        for (i, &(a, b, _)) in calls.iter().enumerate() {
            between
                .entry((a.min(b), a.max(b)))
                .or_default()
                .push(i as u32);
            chains[a as usize].neighbours.insert(b);
            chains[b as usize].neighbours.insert(a);
        }
        CdSort {
            sizes,
            calls,
            chains,
            chain_of: (0..n as u32).collect(),
            offset_in_chain: vec![0; n],
            between,
            total_samples,
            apart_locality: Self::locality(total_size),
            heap: BinaryHeap::new(),
        }
    }

    fn miss_probability(&self, density: f64) -> f64 {
        let page_samples = density * CDSORT_CACHE_SIZE as f64;
        if page_samples >= self.total_samples {
            return 0.0;
        }
        (1.0 - page_samples / self.total_samples).powi(CDSORT_CACHE_ENTRIES as i32)
    }

    /// `distance^-0.25` (a distance of 0 counts as 0.1), the locality of one call.
    fn locality(distance: u64) -> f64 {
        let d = if distance == 0 { 0.1 } else { distance as f64 };
        if CDSORT_DISTANCE_POWER == 0.25 {
            // Twice as fast as `powf`, and this is the inner loop.
            d.sqrt().sqrt().recip()
        } else {
            d.powf(-CDSORT_DISTANCE_POWER)
        }
    }

    /// Gain of placing chain `first` right before chain `second`.
    fn gain(&self, first: u32, second: u32) -> f64 {
        let (a, b) = (&self.chains[first as usize], &self.chains[second as usize]);
        let chain_misses =
            |c: &FnChain| c.count as f64 * self.miss_probability(density(c.count, c.size));
        let merged_count = a.count + b.count;
        let merged_misses =
            merged_count as f64 * self.miss_probability(density(merged_count, a.size + b.size));
        let frequency_gain = chain_misses(a) + chain_misses(b) - merged_misses;
        let address = |f: u32| {
            let base = if self.chain_of[f as usize] == first {
                0
            } else {
                a.size
            };
            base + self.offset_in_chain[f as usize]
        };
        let mut distance_gain = 0.0;
        for &i in self
            .between
            .get(&(first.min(second), first.max(second)))
            .map_or(&[][..], Vec::as_slice)
        {
            let (caller, callee, count) = self.calls[i as usize];
            let call_site = address(caller) + self.sizes[caller as usize] / 2;
            distance_gain += count as f64
                * (Self::locality(call_site.abs_diff(address(callee))) - self.apart_locality);
        }
        let gain = distance_gain + CDSORT_FREQUENCY_SCALE * frequency_gain;
        if gain >= 0.0 {
            gain / a.size.min(b.size) as f64
        } else {
            gain
        }
    }

    fn push_best(&mut self, a: u32, b: u32) {
        // Equal gains keep the input order: the chain of smaller id goes first.
        let (lo, hi) = (a.min(b), a.max(b));
        let functions = self.chains[lo as usize].funcs.len() + self.chains[hi as usize].funcs.len();
        if functions > CDSORT_MAX_CHAIN_SIZE {
            return;
        }
        let (forward, backward) = (self.gain(lo, hi), self.gain(hi, lo));
        let (gain, first, second) = if backward > forward + EPSILON {
            (backward, hi, lo)
        } else {
            (forward, lo, hi)
        };
        if gain > EPSILON {
            let versions = (
                self.chains[first as usize].version,
                self.chains[second as usize].version,
            );
            self.heap.push(FnCandidate {
                gain,
                first,
                second,
                versions,
            });
        }
    }

    fn run(mut self) -> Vec<u32> {
        let pairs: Vec<(u32, u32)> = self.between.keys().copied().collect();
        for (a, b) in pairs {
            self.push_best(a, b);
        }
        while let Some(c) = self.heap.pop() {
            let (f, s) = (
                &self.chains[c.first as usize],
                &self.chains[c.second as usize],
            );
            if !f.alive || !s.alive || (f.version, s.version) != c.versions {
                continue;
            }
            let into = self.merge(c.first, c.second);
            let neighbours: Vec<u32> = self.chains[into as usize]
                .neighbours
                .iter()
                .copied()
                .collect();
            for z in neighbours {
                self.push_best(into, z);
            }
            // Stale candidates pile up around hub functions; at most one per pair is current.
            if self.heap.len() > 2 * self.calls.len() + 1024 {
                let chains = &self.chains;
                self.heap.retain(|c| {
                    let (f, s) = (&chains[c.first as usize], &chains[c.second as usize]);
                    f.alive && s.alive && (f.version, s.version) == c.versions
                });
            }
        }
        let clusters = self
            .chains
            .into_iter()
            .filter(|c| c.alive)
            .map(|c| (c.funcs, c.size, c.count))
            .collect();
        by_density(clusters)
    }

    /// Puts chain `first` before chain `second`; the result keeps the smaller id.
    fn merge(&mut self, first: u32, second: u32) -> u32 {
        let (into, from) = (first.min(second), first.max(second));
        let first_funcs = std::mem::take(&mut self.chains[first as usize].funcs);
        let second_funcs = std::mem::take(&mut self.chains[second as usize].funcs);
        let funcs = [first_funcs, second_funcs].concat();
        let mut offset = 0;
        for &f in &funcs {
            self.chain_of[f as usize] = into;
            self.offset_in_chain[f as usize] = offset;
            offset += self.sizes[f as usize];
        }
        self.between.remove(&(into, from));
        let gone = std::mem::take(&mut self.chains[from as usize]);
        for &z in &gone.neighbours {
            if z == into {
                continue;
            }
            let moved = self
                .between
                .remove(&(z.min(from), z.max(from)))
                .unwrap_or_default();
            self.between
                .entry((z.min(into), z.max(into)))
                .or_default()
                .extend(moved);
            let zc = &mut self.chains[z as usize];
            zc.neighbours.remove(&from);
            zc.neighbours.insert(into);
            self.chains[into as usize].neighbours.insert(z);
        }
        let c = &mut self.chains[into as usize];
        c.neighbours.remove(&from);
        c.funcs = funcs;
        c.size += gone.size;
        c.count = c.count.saturating_add(gone.count);
        c.version += 1;
        into
    }
}
