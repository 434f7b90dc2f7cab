//! Profile inference: consistent block and edge counts from noisy, partial block counts.
//!
//! Without branch stacks (most VMs and clouds) the only profile is IP samples: Rivet sums
//! the samples that fall in each basic block and gets a count per block, noisy (sampling,
//! skid) and silent about edges. Layout wants edge counts, and it wants them *consistent*:
//! at every block the incoming flow equals the block count equals the outgoing flow, except
//! where flow enters from or leaves to outside the function. `infer` finds such a flow whose
//! block counts stay as close as possible to the measured ones. This is the minimum-cost
//! flow formulation of He et al., "Profile Inference Revisited" (POPL 2022), the one behind
//! LLVM's and BOLT's "profi"; the code here is written from the formulation, not from theirs.
//!
//! # The flow
//!
//! The function is a graph of `blocks` and `edges` (parallel edges and self loops allowed).
//! *Outside* is one more vertex: an edge from outside into every `entries` block (the function
//! entry, landing pads, ...) and an edge from every exit to outside, where the exits are the
//! blocks with no successor (returns, calls that never return when the CFG ends the block
//! there) plus the explicit `exits` (blocks that may leave although they have successors:
//! tail calls, calls that may not return). A flow assigns a count to every edge, every
//! entry edge (`InferredFlow::entry_counts`) and every exit edge
//! (`InferredFlow::exit_counts`) such that for every block
//!
//! ```text
//! sum(incoming edges) + entry_counts[b] == block_counts[b] == sum(outgoing edges) + exit_counts[b]
//! ```
//!
//! exactly (a self loop counts on both sides). Flow goes around through outside: a unit that
//! leaves by a return comes back as the next call. Blocks no entry reaches get count 0 (and
//! so do their edges), even if they sit on a cycle that could carry flow on its own. Blocks
//! that reach no exit may still carry flow around a cycle (a server's endless loop).
//!
//! # Cost model
//!
//! `infer` minimises, over all flows, the sum over blocks of a convex, piecewise-linear
//! penalty on the block's count `c`, given its measured weight `w` (see `objective`):
//!
//! | weight       | penalty per unit                                                    |
//! |--------------|---------------------------------------------------------------------|
//! | `Some(w > 0)`| `COST_INCREASE * S` above `w`, `COST_DECREASE * S` below `w`        |
//! | `Some(0)`    | `COST_INCREASE_ZERO * S`                                            |
//! | `None`       | `COST_UNKNOWN` (1)                                                  |
//!
//! where `S` is one more than the number of reachable unknown blocks. Edges and flow from
//! and to outside cost nothing. Why these numbers:
//!
//! - Raising a count is cheaper than lowering one, as in profi (whose published defaults are
//!   10 to raise and 20 to lower): a block's samples are lost more easily than invented (a
//!   short block the timer rarely hits, samples attributed to a neighbour), so a count below
//!   the true one is the likelier error, and a loop body measured hot keeps its heat rather
//!   than being cut down to what its entry says. The ratio here is 1.7, below 2, so that one
//!   deviating block is corrected in preference to moving two agreeing neighbours (a diamond
//!   whose arms sum to more than its ends shrinks an arm), and not a small-integer ratio, so
//!   that such choices rarely tie.
//! - A block measured at zero costs a little more to raise than a sampled block (11 against
//!   10), so flow that must be invented goes through sampled blocks rather than through
//!   blocks that were seen cold.
//! - Unknown blocks take whatever flow the measured ones need: their unit cost is below a
//!   single unit of deviation even summed along any path (that is what `S` is for), so the
//!   measured blocks are fitted first, lexicographically. The small cost still keeps flow
//!   off unknown blocks when a measured path can carry it, and keeps it from wandering
//!   through more unknown blocks than needed. In particular, when the measured weights are
//!   consistent with some flow, the result reproduces them exactly.
//! - A function with no positive weight gets no flow at all: any flow would only cost.
//! - Entry blocks cost the same as any other (profi gives the entry block its own costs,
//!   steeper to raise and cheaper to lower): with IP samples the entry block's count is one
//!   more sampled count, with no separate measurement of calls behind it.
//!
//! Ties (two equally cheap ways) are broken deterministically, usually toward the edge
//! listed first, so a caller that lists a block's fall-through edge first favours it. Flow
//! is not spread evenly among equally likely alternatives (profi's "even distribution" is
//! not done): two unknown arms of a diamond get all and nothing, not half each.
//!
//! # Algorithm and complexity
//!
//! The penalty is modelled by splitting each block `b` into `b.in -> b.out`. A measured
//! block's first `w` units are pre-paid: `b.out` starts with `w` units of excess and `b.in`
//! with `w` units of deficit, an arc `b.out -> b.in` (capacity `w`, cost `DECREASE`) gives
//! units back, an arc `b.in -> b.out` (unbounded, cost `INCREASE`) adds units. Every arc
//! then has a non-negative cost, and the problem is to route all excesses to the deficits at
//! minimum cost. That is solved by the primal-dual method, keeping the optimality condition
//! "no arc with residual capacity has a negative reduced cost" (Johnson potentials)
//! throughout. Each phase runs one Dijkstra from all excesses at once, stopped when every
//! deficit is settled, lifts the potentials so that the shortest paths have zero reduced
//! cost, then pushes a Dinic max-flow from all excesses to all deficits over the zero arcs.
//! Pushing along zero arcs never breaks the optimality condition, whichever excess goes to
//! whichever deficit, so a phase routes everything that is currently cheapest at once;
//! when no excess is left the flow is optimal.
//!
//! Capacities only enter the max-flow, so counts of 1e9 cost no more than counts of 1. A
//! phase is `O(E log V)` for Dijkstra (arcs that carry flow have zero reduced cost and
//! skip the heap) plus a Dinic max-flow over the zero arcs; both are iterative, with no
//! recursion however long the paths. Consistent weights take one phase; noisy ones take
//! one per distinct cost the remaining corrections need, tens in practice. Measured in a
//! release build on this project's 2-core machine while other builds ran (load about 3.4):
//! a 20,000-block, 30,000-edge structured function (loops, switches, diamonds, cold paths)
//! takes 9-19 ms with exact weights and 0.22-0.37 s with every block moved by up to 20%
//! and 5% of them unknown (69 phases); see the `large_function_reports_time` test.
//!
//! All arithmetic is integer. Weights are exact while their sum over reachable blocks stays
//! below 2^60; above that they are divided by a common factor and the result multiplied
//! back (saturating), which keeps the flow consistent but rounds. Graphs above
//! `MAX_BLOCKS` blocks or `MAX_EDGES` edges are refused, which keeps every path cost and
//! potential far inside `i64` and every arc index inside `u32`.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Per unit above the measured weight of a sampled block (times the scale `S`).
pub const COST_INCREASE: u64 = 10;
/// Per unit of a block measured at zero (times the scale `S`).
pub const COST_INCREASE_ZERO: u64 = 11;
/// Per unit below the measured weight of a sampled block (times the scale `S`).
pub const COST_DECREASE: u64 = 17;
/// Per unit of a block whose weight is unknown.
pub const COST_UNKNOWN: u64 = 1;

/// Largest graph `infer` accepts (blocks), far beyond any real function: it keeps every path
/// cost and potential far inside `i64`.
pub const MAX_BLOCKS: usize = 1 << 20;
/// Largest graph `infer` accepts (edges, entries and exits together).
pub const MAX_EDGES: usize = 1 << 24;

/// Sum of weights above which they are scaled down (see the module doc).
const MAX_TOTAL_WEIGHT: u128 = 1 << 60;
/// Capacity of unbounded arcs: more than any flow can reach (total flow <= MAX_TOTAL_WEIGHT).
const UNBOUNDED: u64 = 1 << 62;
const NONE: u32 = u32::MAX;

/// A function's control-flow graph with measured block counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlowGraph {
    /// Number of blocks; blocks are `0..blocks`.
    pub blocks: usize,
    /// Control-flow edges `(from, to)`; parallel edges and self loops are allowed.
    pub edges: Vec<(u32, u32)>,
    /// Measured count of each block (`blocks` of them); `None` where nothing is known.
    pub weights: Vec<Option<u64>>,
    /// Blocks entered from outside the function (entry point, landing pads, ...).
    /// Duplicates are harmless.
    pub entries: Vec<u32>,
    /// Blocks that may leave the function although they have successors (tail calls, calls
    /// that may not return). Blocks without successors are exits anyway.
    pub exits: Vec<u32>,
}

/// A consistent flow: see the module doc for the conservation rule it satisfies.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InferredFlow {
    /// Count of each block.
    pub block_counts: Vec<u64>,
    /// Count of each edge, in the order of `FlowGraph::edges`.
    pub edge_counts: Vec<u64>,
    /// Flow entering each block from outside (zero for blocks that are not entries): for the
    /// function entry, the number of calls.
    pub entry_counts: Vec<u64>,
    /// Flow leaving each block to outside (zero for blocks that are not exits).
    pub exit_counts: Vec<u64>,
}

/// Why `infer` refused a graph.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InferenceError {
    #[error("flow graph has {blocks} blocks but {weights} weights")]
    WeightCount { blocks: usize, weights: usize },
    #[error(
        "flow graph edge {index} ({from} -> {to}) names a block past the last ({blocks} blocks)"
    )]
    EdgeOutOfRange {
        index: usize,
        from: u32,
        to: u32,
        blocks: usize,
    },
    #[error("flow graph entry {block} is not a block ({blocks} blocks)")]
    EntryOutOfRange { block: u32, blocks: usize },
    #[error("flow graph exit {block} is not a block ({blocks} blocks)")]
    ExitOutOfRange { block: u32, blocks: usize },
    #[error(
        "flow graph has {blocks} blocks and {edges} edges, more than inference handles \
         ({MAX_BLOCKS} blocks, {MAX_EDGES} edges)"
    )]
    TooLarge { blocks: usize, edges: usize },
}

/// The graph checked, with what both `infer` and `objective` derive from it.
struct Checked {
    reachable: Vec<bool>,
    /// One more than the number of reachable unknown blocks (`S` in the module doc).
    scale: u64,
}

fn check(graph: &FlowGraph) -> Result<Checked, InferenceError> {
    let n = graph.blocks;
    let edges = graph.edges.len() + graph.entries.len() + graph.exits.len();
    if n > MAX_BLOCKS || edges > MAX_EDGES {
        return Err(InferenceError::TooLarge { blocks: n, edges });
    }
    if graph.weights.len() != n {
        return Err(InferenceError::WeightCount {
            blocks: n,
            weights: graph.weights.len(),
        });
    }
    for (index, &(from, to)) in graph.edges.iter().enumerate() {
        if from as usize >= n || to as usize >= n {
            return Err(InferenceError::EdgeOutOfRange {
                index,
                from,
                to,
                blocks: n,
            });
        }
    }
    if let Some(&block) = graph.entries.iter().find(|&&b| b as usize >= n) {
        return Err(InferenceError::EntryOutOfRange { block, blocks: n });
    }
    if let Some(&block) = graph.exits.iter().find(|&&b| b as usize >= n) {
        return Err(InferenceError::ExitOutOfRange { block, blocks: n });
    }
    let (first, succ) = successors(graph);
    let mut reachable = vec![false; n];
    let mut stack: Vec<u32> = Vec::new();
    for &e in &graph.entries {
        if !reachable[e as usize] {
            reachable[e as usize] = true;
            stack.push(e);
        }
    }
    while let Some(b) = stack.pop() {
        for &s in &succ[first[b as usize] as usize..first[b as usize + 1] as usize] {
            if !reachable[s as usize] {
                reachable[s as usize] = true;
                stack.push(s);
            }
        }
    }
    let unknown = (0..n)
        .filter(|&b| reachable[b] && graph.weights[b].is_none())
        .count();
    Ok(Checked {
        reachable,
        scale: unknown as u64 + 1,
    })
}

/// Successor lists in compressed form: block `b`'s are `succ[first[b]..first[b + 1]]`.
fn successors(graph: &FlowGraph) -> (Vec<u32>, Vec<u32>) {
    let mut first = vec![0u32; graph.blocks + 1];
    for &(from, _) in &graph.edges {
        first[from as usize + 1] += 1;
    }
    for b in 0..graph.blocks {
        first[b + 1] += first[b];
    }
    let mut fill = first.clone();
    let mut succ = vec![0u32; graph.edges.len()];
    for &(from, to) in &graph.edges {
        succ[fill[from as usize] as usize] = to;
        fill[from as usize] += 1;
    }
    (first, succ)
}

/// The cost `infer` minimises (module doc, "Cost model") of giving `graph`'s blocks the
/// counts `block_counts` (one per block; missing ones count as zero). Exposed so callers can
/// report how far a profile had to move, and so tests can compare `infer` with other flows.
pub fn objective(graph: &FlowGraph, block_counts: &[u64]) -> Result<u128, InferenceError> {
    let checked = check(graph)?;
    let s = u128::from(checked.scale);
    Ok(graph
        .weights
        .iter()
        .enumerate()
        .map(|(b, w)| {
            let c = u128::from(block_counts.get(b).copied().unwrap_or(0));
            match *w {
                None => c * u128::from(COST_UNKNOWN),
                Some(0) => c * u128::from(COST_INCREASE_ZERO) * s,
                Some(w) => {
                    let w = u128::from(w);
                    if c >= w {
                        (c - w) * u128::from(COST_INCREASE) * s
                    } else {
                        (w - c) * u128::from(COST_DECREASE) * s
                    }
                }
            }
        })
        .sum())
}

/// Finds the consistent flow closest to `graph`'s weights (module doc). Deterministic: the
/// same graph always gets the same flow.
pub fn infer(graph: &FlowGraph) -> Result<InferredFlow, InferenceError> {
    let checked = check(graph)?;
    let n = graph.blocks;
    let reachable = &checked.reachable;

    let total: u128 = (0..n)
        .filter(|&b| reachable[b])
        .map(|b| u128::from(graph.weights[b].unwrap_or(0)))
        .sum();
    // Divides every weight so that no flow value can come near the capacities' range.
    let factor: u64 = if total > MAX_TOTAL_WEIGHT {
        u64::try_from(total.div_ceil(MAX_TOTAL_WEIGHT)).unwrap_or(u64::MAX)
    } else {
        1
    };

    let s = checked.scale as i64;
    let increase = COST_INCREASE as i64 * s;
    let increase_zero = COST_INCREASE_ZERO as i64 * s;
    let decrease = COST_DECREASE as i64 * s;

    // Vertices: outside, then `in` and `out` of every block.
    const OUTSIDE: u32 = 0;
    let block_in = |b: usize| 1 + 2 * b as u32;
    let block_out = |b: usize| 2 + 2 * b as u32;
    let mut net = NetworkBuilder::new(1 + 2 * n);

    let mut has_successor = vec![false; n];
    for &(from, _) in &graph.edges {
        has_successor[from as usize] = true;
    }
    let mut is_entry = vec![false; n];
    for &e in &graph.entries {
        is_entry[e as usize] = true;
    }
    let mut is_exit: Vec<bool> = has_successor.iter().map(|&h| !h).collect();
    for &e in &graph.exits {
        is_exit[e as usize] = true;
    }

    let mut entry_arc = vec![NONE; n];
    let mut exit_arc = vec![NONE; n];
    for b in 0..n {
        if !reachable[b] {
            continue;
        }
        let (bin, bout) = (block_in(b), block_out(b));
        match graph.weights[b] {
            None => {
                net.arc(bin, bout, UNBOUNDED, COST_UNKNOWN as i64);
            }
            Some(w) if w / factor == 0 => {
                net.arc(bin, bout, UNBOUNDED, increase_zero);
            }
            Some(w) => {
                let w = w / factor;
                net.arc(bin, bout, UNBOUNDED, increase);
                net.arc(bout, bin, w, decrease);
                net.excess[bout as usize] += w as i64;
                net.excess[bin as usize] -= w as i64;
            }
        }
        if is_entry[b] {
            entry_arc[b] = net.arc(OUTSIDE, bin, UNBOUNDED, 0);
        }
        if is_exit[b] {
            exit_arc[b] = net.arc(bout, OUTSIDE, UNBOUNDED, 0);
        }
    }
    let edge_arc: Vec<u32> = graph
        .edges
        .iter()
        .map(|&(from, to)| {
            if reachable[from as usize] {
                net.arc(
                    block_out(from as usize),
                    block_in(to as usize),
                    UNBOUNDED,
                    0,
                )
            } else {
                NONE
            }
        })
        .collect();

    let mut net = net.finish();
    if !net.min_cost_flow() {
        // Cannot happen: a block's excess can always go back to its own deficit through the
        // give-back arc. Should it anyway, an empty flow is still consistent.
        debug_assert!(false, "inference: excesses not all routed");
        return Ok(InferredFlow {
            block_counts: vec![0; n],
            edge_counts: vec![0; graph.edges.len()],
            entry_counts: vec![0; n],
            exit_counts: vec![0; n],
        });
    }

    let flow_of = |arc: u32| -> u64 {
        if arc == NONE {
            0
        } else {
            net.flow(arc).saturating_mul(factor)
        }
    };
    let edge_counts: Vec<u64> = edge_arc.iter().map(|&a| flow_of(a)).collect();
    let entry_counts: Vec<u64> = entry_arc.iter().map(|&a| flow_of(a)).collect();
    let exit_counts: Vec<u64> = exit_arc.iter().map(|&a| flow_of(a)).collect();
    let mut block_counts = entry_counts.clone();
    for (&(_, to), &c) in graph.edges.iter().zip(&edge_counts) {
        block_counts[to as usize] = block_counts[to as usize].saturating_add(c);
    }
    Ok(InferredFlow {
        block_counts,
        edge_counts,
        entry_counts,
        exit_counts,
    })
}

/// Arcs collected before they are grouped by tail. Arc `2k` is a real arc, `2k + 1` its
/// residual reverse.
struct NetworkBuilder {
    vertices: usize,
    tail: Vec<u32>,
    head: Vec<u32>,
    cap: Vec<u64>,
    cost: Vec<i64>,
    excess: Vec<i64>,
}

impl NetworkBuilder {
    fn new(vertices: usize) -> Self {
        NetworkBuilder {
            vertices,
            excess: vec![0; vertices],
            tail: Vec::new(),
            head: Vec::new(),
            cap: Vec::new(),
            cost: Vec::new(),
        }
    }

    fn arc(&mut self, from: u32, to: u32, cap: u64, cost: i64) -> u32 {
        let index = self.head.len() as u32;
        self.tail.extend([from, to]);
        self.head.extend([to, from]);
        self.cap.extend([cap, 0]);
        self.cost.extend([cost, -cost]);
        index
    }

    /// Lays the arcs out contiguously by tail, for locality in the searches.
    fn finish(self) -> Network {
        let v = self.vertices;
        let mut first = vec![0u32; v + 1];
        for &t in &self.tail {
            first[t as usize + 1] += 1;
        }
        for i in 0..v {
            first[i + 1] += first[i];
        }
        let mut fill = first.clone();
        let mut position = vec![0u32; self.tail.len()];
        for (arc, &t) in self.tail.iter().enumerate() {
            position[arc] = fill[t as usize];
            fill[t as usize] += 1;
        }
        let arcs = self.tail.len();
        let mut net = Network {
            tail: vec![0; arcs],
            head: vec![0; arcs],
            cap: vec![0; arcs],
            cost: vec![0; arcs],
            partner: vec![0; arcs],
            first,
            position,
            potential: vec![0; v],
            excess: self.excess,
        };
        for arc in 0..arcs {
            let p = net.position[arc] as usize;
            net.tail[p] = self.tail[arc];
            net.head[p] = self.head[arc];
            net.cap[p] = self.cap[arc];
            net.cost[p] = self.cost[arc];
            net.partner[p] = net.position[arc ^ 1];
        }
        net
    }
}

/// A residual network with the arcs leaving `v` at `first[v]..first[v + 1]`.
struct Network {
    tail: Vec<u32>,
    head: Vec<u32>,
    /// Residual capacity.
    cap: Vec<u64>,
    cost: Vec<i64>,
    /// The residual reverse of each arc.
    partner: Vec<u32>,
    first: Vec<u32>,
    /// Where the builder's arc `i` went.
    position: Vec<u32>,
    /// Johnson potentials: reduced costs `cost + potential[tail] - potential[head]` of arcs
    /// with residual capacity stay non-negative.
    potential: Vec<i64>,
    /// Flow a vertex still has to send (positive) or to receive (negative).
    excess: Vec<i64>,
}

impl Network {
    /// Flow on one of the builder's real arcs: what its reverse can give back.
    fn flow(&self, arc: u32) -> u64 {
        self.cap[self.partner[self.position[arc as usize] as usize] as usize]
    }

    fn reduced_cost(&self, arc: usize) -> i64 {
        self.cost[arc] + self.potential[self.tail[arc] as usize]
            - self.potential[self.head[arc] as usize]
    }

    /// Routes every excess to the deficits at minimum cost (primal-dual).
    ///
    /// The invariant is the optimality condition of min-cost flow: every arc with residual
    /// capacity has a non-negative reduced cost. It holds at the start (all costs are
    /// non-negative, potentials zero) and survives pushing flow along arcs of zero reduced
    /// cost, whichever excess the flow comes from and whichever deficit it reaches. So a
    /// phase computes distances from all excesses at once (Dijkstra, stopped when every
    /// deficit is settled), lifts the potentials by them so that shortest paths become
    /// zero-cost, and pushes a maximum flow over the zero-cost arcs from all excesses to all
    /// deficits. When no excess is left the flow is feasible and, by the invariant, optimal.
    /// Returns false if an excess could reach no deficit (impossible for `infer`'s networks).
    fn min_cost_flow(&mut self) -> bool {
        let v = self.first.len() - 1;
        let mut dist = vec![i64::MAX; v];
        let mut done = vec![false; v];
        let mut heap: BinaryHeap<Reverse<(i64, u32)>> = BinaryHeap::new();
        let mut same: Vec<u32> = Vec::new();
        let mut dinic = Dinic::new(v);
        loop {
            let deficits = self.excess.iter().filter(|&&e| e < 0).count();
            if deficits == 0 {
                debug_assert!(
                    (0..self.cap.len()).all(|a| self.cap[a] == 0 || self.reduced_cost(a) >= 0),
                    "inference: optimality invariant broken"
                );
                return true;
            }
            dist.fill(i64::MAX);
            done.fill(false);
            heap.clear();
            for (u, &e) in self.excess.iter().enumerate() {
                if e > 0 {
                    dist[u] = 0;
                    heap.push(Reverse((0, u as u32)));
                }
            }
            let mut left = deficits;
            let mut radius = 0;
            // Arcs that carry flow have zero reduced cost both ways, so most vertices are
            // reached at the distance of the vertex that reaches them: those go on a stack
            // and skip the heap.
            same.clear();
            'search: while let Some(Reverse((d, u))) = heap.pop() {
                same.push(u);
                while let Some(u) = same.pop() {
                    let u = u as usize;
                    if done[u] || dist[u] != d {
                        continue;
                    }
                    done[u] = true;
                    radius = d;
                    if self.excess[u] < 0 {
                        left -= 1;
                        if left == 0 {
                            break 'search;
                        }
                    }
                    let pu = self.potential[u];
                    for arc in self.first[u] as usize..self.first[u + 1] as usize {
                        if self.cap[arc] == 0 {
                            continue;
                        }
                        let h = self.head[arc] as usize;
                        let rc = self.cost[arc] + pu - self.potential[h];
                        let nd = d + rc;
                        if nd < dist[h] {
                            dist[h] = nd;
                            if rc == 0 {
                                same.push(h as u32);
                            } else {
                                heap.push(Reverse((nd, h as u32)));
                            }
                        }
                    }
                }
            }
            if left == deficits {
                return false;
            }
            // Vertices not settled are at least `radius` away: lifting them by `radius` keeps
            // every reduced cost non-negative, and makes the settled shortest paths zero.
            for (p, &d) in self.potential.iter_mut().zip(&dist) {
                *p = p.saturating_add(d.min(radius));
            }
            if dinic.max_flow(self) == 0 {
                debug_assert!(false, "inference: a shortest path carried no flow");
                return false;
            }
        }
    }
}

/// Dinic's max-flow from the excesses to the deficits over the arcs of zero reduced cost,
/// with its scratch space.
struct Dinic {
    level: Vec<u32>,
    next: Vec<u32>,
    queue: Vec<u32>,
    path: Vec<u32>,
}

impl Dinic {
    fn new(vertices: usize) -> Self {
        Dinic {
            level: vec![NONE; vertices],
            next: vec![0; vertices],
            queue: Vec::new(),
            path: Vec::new(),
        }
    }

    fn usable(net: &Network, arc: usize) -> bool {
        net.cap[arc] > 0 && net.reduced_cost(arc) == 0
    }

    /// Pushes a maximum flow; returns how much. Iterative, since augmenting paths can be as
    /// long as the function.
    fn max_flow(&mut self, net: &mut Network) -> u64 {
        let mut total = 0u64;
        loop {
            // Levels by breadth-first search from every excess: they make the usable arcs
            // acyclic, so zero-cost cycles cannot trap the search below. A path ends at the
            // first deficit, so deficits are not expanded.
            self.level.fill(NONE);
            self.queue.clear();
            for (u, &e) in net.excess.iter().enumerate() {
                if e > 0 {
                    self.level[u] = 0;
                    self.queue.push(u as u32);
                }
            }
            let mut reached = false;
            let mut i = 0;
            while i < self.queue.len() {
                let u = self.queue[i] as usize;
                i += 1;
                if net.excess[u] < 0 {
                    reached = true;
                    continue;
                }
                for arc in net.first[u] as usize..net.first[u + 1] as usize {
                    let h = net.head[arc] as usize;
                    if self.level[h] == NONE && Self::usable(net, arc) {
                        self.level[h] = self.level[u] + 1;
                        self.queue.push(h as u32);
                    }
                }
            }
            if !reached {
                return total;
            }
            let vertices = self.next.len();
            self.next.copy_from_slice(&net.first[..vertices]);
            for source in 0..vertices {
                if net.excess[source] <= 0 || self.level[source] != 0 {
                    continue;
                }
                total += self.push_from(net, source);
            }
        }
    }

    /// Pushes what `source`'s excess can along level-increasing usable arcs to deficits.
    fn push_from(&mut self, net: &mut Network, source: usize) -> u64 {
        let mut total = 0u64;
        self.path.clear();
        let mut u = source;
        while net.excess[source] > 0 {
            if net.excess[u] < 0 {
                let mut push = net.excess[source].min(-net.excess[u]) as u64;
                for &a in &self.path {
                    push = push.min(net.cap[a as usize]);
                }
                for &a in &self.path {
                    net.cap[a as usize] -= push;
                    net.cap[net.partner[a as usize] as usize] += push;
                }
                net.excess[source] -= push as i64;
                net.excess[u] += push as i64;
                total += push;
                // Resume from the tail of the first arc the push saturated, or go on from
                // here if the deficit was what ran out.
                if let Some(k) = self.path.iter().position(|&a| net.cap[a as usize] == 0) {
                    u = net.tail[self.path[k] as usize] as usize;
                    self.path.truncate(k);
                }
                continue;
            }
            let end = net.first[u + 1];
            let mut advanced = false;
            while self.next[u] < end {
                let arc = self.next[u] as usize;
                let h = net.head[arc] as usize;
                if self.level[h] == self.level[u].wrapping_add(1) && Self::usable(net, arc) {
                    self.path.push(arc as u32);
                    u = h;
                    advanced = true;
                    break;
                }
                self.next[u] += 1;
            }
            if !advanced {
                // Dead end: nothing more goes through `u` in this round.
                self.level[u] = NONE;
                let Some(arc) = self.path.pop() else { break };
                u = net.tail[arc as usize] as usize;
                self.next[u] += 1;
            }
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn graph(
        blocks: usize,
        edges: &[(u32, u32)],
        weights: &[Option<u64>],
        entries: &[u32],
        exits: &[u32],
    ) -> FlowGraph {
        FlowGraph {
            blocks,
            edges: edges.to_vec(),
            weights: weights.to_vec(),
            entries: entries.to_vec(),
            exits: exits.to_vec(),
        }
    }

    fn known(weights: &[u64]) -> Vec<Option<u64>> {
        weights.iter().map(|&w| Some(w)).collect()
    }

    /// Checks everything the module doc promises about any result, and returns it.
    fn consistent(g: &FlowGraph) -> InferredFlow {
        let f = infer(g).expect("valid graph");
        assert_eq!(f.block_counts.len(), g.blocks);
        assert_eq!(f.entry_counts.len(), g.blocks);
        assert_eq!(f.exit_counts.len(), g.blocks);
        assert_eq!(f.edge_counts.len(), g.edges.len());
        let mut inflow: Vec<u128> = f.entry_counts.iter().map(|&c| u128::from(c)).collect();
        let mut outflow: Vec<u128> = f.exit_counts.iter().map(|&c| u128::from(c)).collect();
        for (&(from, to), &c) in g.edges.iter().zip(&f.edge_counts) {
            outflow[from as usize] += u128::from(c);
            inflow[to as usize] += u128::from(c);
        }
        let reachable = check(g).unwrap().reachable;
        for b in 0..g.blocks {
            let count = u128::from(f.block_counts[b]);
            assert_eq!(inflow[b], count, "flow into block {b}");
            assert_eq!(outflow[b], count, "flow out of block {b}");
            if f.entry_counts[b] > 0 {
                assert!(g.entries.contains(&(b as u32)), "block {b} entered");
            }
            if f.exit_counts[b] > 0 {
                let sink = !g.edges.iter().any(|&(from, _)| from as usize == b);
                assert!(sink || g.exits.contains(&(b as u32)), "block {b} left");
            }
            if !reachable[b] {
                assert_eq!(f.block_counts[b], 0, "unreachable block {b}");
            }
        }
        f
    }

    #[test]
    fn diamond_consistent() {
        // 0 -> 1 -> 3, 0 -> 2 -> 3
        let g = graph(
            4,
            &[(0, 1), (0, 2), (1, 3), (2, 3)],
            &known(&[100, 70, 30, 100]),
            &[0],
            &[],
        );
        let f = consistent(&g);
        assert_eq!(f.block_counts, [100, 70, 30, 100]);
        assert_eq!(f.edge_counts, [70, 30, 70, 30]);
        assert_eq!(f.entry_counts, [100, 0, 0, 0]);
        assert_eq!(f.exit_counts, [0, 0, 0, 100]);
    }

    #[test]
    fn diamond_noisy_moves_the_odd_block() {
        // The arms sum to 103 where the ends say 100: one arm gives 3 back rather than
        // both ends growing.
        let g = graph(
            4,
            &[(0, 1), (0, 2), (1, 3), (2, 3)],
            &known(&[100, 48, 55, 100]),
            &[0],
            &[],
        );
        let f = consistent(&g);
        assert_eq!(f.block_counts[0], 100);
        assert_eq!(f.block_counts[3], 100);
        assert_eq!(f.block_counts[1] + f.block_counts[2], 100);
        // A block too low grows rather than its neighbours shrinking.
        let g = graph(3, &[(0, 1), (1, 2)], &known(&[100, 90, 100]), &[0], &[]);
        assert_eq!(consistent(&g).block_counts, [100, 100, 100]);
    }

    #[test]
    fn loop_keeps_its_trip_count() {
        // 0 -> 1 (header) -> 2 (body) -> 1, 1 -> 3 (exit).
        let g = graph(
            4,
            &[(0, 1), (1, 2), (2, 1), (1, 3)],
            &known(&[10, 1010, 1000, 10]),
            &[0],
            &[],
        );
        let f = consistent(&g);
        assert_eq!(f.block_counts, [10, 1010, 1000, 10]);
        assert_eq!(f.edge_counts, [10, 1000, 1000, 10]);
        // Noisy: the loop stays hot, the entry stays near 10.
        let g = graph(
            4,
            &[(0, 1), (1, 2), (2, 1), (1, 3)],
            &known(&[12, 990, 1003, 9]),
            &[0],
            &[],
        );
        let f = consistent(&g);
        assert!((1000..=1010).contains(&f.block_counts[2]), "{f:?}");
        assert!((9..=12).contains(&f.block_counts[0]), "{f:?}");
    }

    #[test]
    fn nested_loops() {
        // 0 -> 1 (outer header) -> 2 (inner header) -> 3 (inner body) -> 2,
        // 2 -> 4 (outer latch) -> 1, 1 -> 5 (exit).
        let edges = [(0, 1), (1, 2), (2, 3), (3, 2), (2, 4), (4, 1), (1, 5)];
        // Called 5 times, outer loop 10 iterations each, inner 20 each.
        let counts = [5, 55, 1050, 1000, 50, 5];
        let g = graph(6, &edges, &known(&counts), &[0], &[]);
        let f = consistent(&g);
        assert_eq!(f.block_counts, counts);
        assert_eq!(f.edge_counts, [5, 50, 1000, 1000, 50, 50, 5]);
        // Only the headers and the exit sampled: the rest is inferred from them.
        let mut weights = known(&counts);
        for b in [3, 4] {
            weights[b] = None;
        }
        let g = graph(6, &edges, &weights, &[0], &[]);
        assert_eq!(consistent(&g).block_counts, counts);
    }

    #[test]
    fn switch() {
        // 0 -> 1..=5 -> 6, two cases cold.
        let mut edges: Vec<(u32, u32)> = (1..=5).map(|c| (0, c)).collect();
        edges.extend((1..=5).map(|c| (c, 6)));
        let counts = [1000, 600, 0, 300, 100, 0, 1000];
        let g = graph(7, &edges, &known(&counts), &[0], &[]);
        let f = consistent(&g);
        assert_eq!(f.block_counts, counts);
        // The case counts undercount by 10%: the cases grow, not the switch and join.
        let g = graph(
            7,
            &edges,
            &known(&[1000, 540, 0, 270, 90, 0, 1000]),
            &[0],
            &[],
        );
        let f = consistent(&g);
        assert_eq!(f.block_counts[0], 1000);
        assert_eq!(
            f.block_counts[2] + f.block_counts[5],
            0,
            "cold cases stay cold"
        );
    }

    #[test]
    fn unreachable_blocks_get_nothing() {
        // Block 2 is on a cycle with itself, measured hot, but nothing enters it.
        let g = graph(
            4,
            &[(0, 1), (2, 2), (2, 3), (3, 2)],
            &known(&[7, 7, 500, 500]),
            &[0],
            &[],
        );
        let f = consistent(&g);
        assert_eq!(f.block_counts, [7, 7, 0, 0]);
        assert_eq!(f.edge_counts, [7, 0, 0, 0]);
    }

    #[test]
    fn self_loop() {
        // 0 -> 1, 1 -> 1 (99 times), 1 -> 2.
        let g = graph(
            3,
            &[(0, 1), (1, 1), (1, 2)],
            &known(&[1, 100, 1]),
            &[0],
            &[],
        );
        let f = consistent(&g);
        assert_eq!(f.block_counts, [1, 100, 1]);
        assert_eq!(f.edge_counts, [1, 99, 1]);
        // A block spinning on itself with no way out can still carry its samples.
        let g = graph(2, &[(0, 1), (1, 1)], &known(&[0, 50]), &[0], &[]);
        let f = consistent(&g);
        assert_eq!(f.block_counts, [0, 50]);
        assert_eq!(f.edge_counts, [0, 50]);
    }

    #[test]
    fn several_entries_and_exits() {
        // Entry 0 and landing pad 3 both reach 2; 0 -> 1 -> 2; 1 tail-calls out (exit with
        // a successor); 2 returns.
        let g = graph(
            4,
            &[(0, 1), (1, 2), (3, 2)],
            &known(&[100, 100, 60, 5]),
            &[0, 3, 0],
            &[1],
        );
        let f = consistent(&g);
        assert_eq!(f.block_counts, [100, 100, 60, 5]);
        assert_eq!(f.entry_counts, [100, 0, 0, 5]);
        assert_eq!(f.exit_counts, [0, 45, 60, 0]);
    }

    #[test]
    fn no_samples_no_flow() {
        let edges = [(0, 1), (0, 2), (1, 3), (2, 3), (3, 0)];
        for weights in [
            vec![Some(0); 4],
            vec![None; 4],
            vec![Some(0), None, None, Some(0)],
        ] {
            let g = graph(4, &edges, &weights, &[0], &[]);
            let f = consistent(&g);
            assert!(f.block_counts.iter().all(|&c| c == 0), "{weights:?}: {f:?}");
            assert!(f.edge_counts.iter().all(|&c| c == 0));
        }
        // No entries: nothing is reachable.
        let g = graph(2, &[(0, 1)], &known(&[5, 5]), &[], &[]);
        assert_eq!(consistent(&g).block_counts, [0, 0]);
        // No blocks at all.
        assert_eq!(consistent(&FlowGraph::default()), InferredFlow::default());
    }

    #[test]
    fn unknown_blocks_take_what_flow_needs() {
        // 0 -> {1, 2} -> 3 with 1 unknown, 2 measured at 60.
        let edges = [(0, 1), (0, 2), (1, 3), (2, 3)];
        let g = graph(
            4,
            &edges,
            &[Some(100), None, Some(60), Some(100)],
            &[0],
            &[],
        );
        assert_eq!(consistent(&g).block_counts, [100, 40, 60, 100]);
        // Both arms unknown: flow goes through one of them, and all of it.
        let g = graph(4, &edges, &[Some(100), None, None, Some(100)], &[0], &[]);
        let f = consistent(&g);
        assert_eq!(f.block_counts[0], 100);
        assert_eq!(f.block_counts[1] + f.block_counts[2], 100);
        // A long chain of unknown blocks does not make the measured ends give up.
        let n = 3000;
        let edges: Vec<(u32, u32)> = (0..n - 1).map(|b| (b, b + 1)).collect();
        let mut weights = vec![None; n as usize];
        weights[0] = Some(10);
        weights[n as usize - 1] = Some(10);
        let g = graph(n as usize, &edges, &weights, &[0], &[]);
        assert!(consistent(&g).block_counts.iter().all(|&c| c == 10));
    }

    #[test]
    fn sampled_path_preferred_over_unsampled() {
        // 0 -> {1, 2} -> 3; 1 was sampled (too little), 2 was seen cold: the missing flow
        // goes through 1.
        let edges = [(0, 1), (0, 2), (1, 3), (2, 3)];
        let g = graph(4, &edges, &known(&[100, 60, 0, 100]), &[0], &[]);
        assert_eq!(consistent(&g).block_counts, [100, 100, 0, 100]);
        // A direct edge beats a detour through an unknown block.
        let g = graph(
            3,
            &[(0, 1), (1, 2), (0, 2)],
            &[Some(50), None, Some(50)],
            &[0],
            &[],
        );
        let f = consistent(&g);
        assert_eq!(f.block_counts, [50, 0, 50]);
    }

    #[test]
    fn huge_counts() {
        let edges = [(0, 1), (0, 2), (1, 3), (2, 3)];
        let g = graph(
            4,
            &edges,
            &known(&[3_000_000_000, 1_000_000_007, 2_000_000_000, 3_000_000_000]),
            &[0],
            &[],
        );
        let f = consistent(&g);
        assert_eq!(f.block_counts[0], 3_000_000_000);
        assert_eq!(f.block_counts[3], 3_000_000_000);
        // Beyond 2^60 in total the weights are scaled: still consistent, still close.
        let big = u64::MAX / 3;
        let g = graph(
            4,
            &edges,
            &known(&[big, big / 2, big / 2 + 12345, big]),
            &[0],
            &[],
        );
        let f = consistent(&g);
        let off = f.block_counts[0].abs_diff(big);
        assert!(off < big / 1000, "{f:?}");
        // Sums past u64::MAX do not panic.
        let g = graph(2, &[(0, 1)], &known(&[u64::MAX, u64::MAX]), &[0], &[]);
        let f = infer(&g).unwrap();
        assert!(f.block_counts[0] > u64::MAX / 2);
    }

    #[test]
    fn bad_graphs_are_errors() {
        let g = graph(2, &[(0, 2)], &known(&[1, 1]), &[0], &[]);
        assert_eq!(
            infer(&g),
            Err(InferenceError::EdgeOutOfRange {
                index: 0,
                from: 0,
                to: 2,
                blocks: 2
            })
        );
        let g = graph(2, &[(0, 1)], &known(&[1]), &[0], &[]);
        assert!(matches!(infer(&g), Err(InferenceError::WeightCount { .. })));
        let g = graph(2, &[(0, 1)], &known(&[1, 1]), &[2], &[]);
        assert!(matches!(
            infer(&g),
            Err(InferenceError::EntryOutOfRange { block: 2, .. })
        ));
        let g = graph(2, &[(0, 1)], &known(&[1, 1]), &[0], &[u32::MAX]);
        assert!(matches!(
            infer(&g),
            Err(InferenceError::ExitOutOfRange { .. })
        ));
        let g = FlowGraph {
            blocks: MAX_BLOCKS + 1,
            ..FlowGraph::default()
        };
        assert!(matches!(infer(&g), Err(InferenceError::TooLarge { .. })));
        assert!(objective(&g, &[]).is_err());
    }

    #[test]
    fn deterministic() {
        let mut rng = Rng(7);
        let (g, _) = random_case(&mut rng, 200, 150, 40);
        let g = noisy(&mut rng, &g, 30, 10);
        assert_eq!(infer(&g), infer(&g));
    }

    /// xorshift64*: the tests' own generator, so cases are reproducible from a seed.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: u64) -> u64 {
            if n == 0 { 0 } else { self.next() % n }
        }
        fn chance(&mut self, percent: u64) -> bool {
            self.below(100) < percent
        }
    }

    /// A random graph (fall-throughs plus random edges: back edges, self loops, parallel
    /// edges, several entries and exits) and a true flow on it, the sum of random walks
    /// from an entry to an exit, each taken a random number of times.
    fn random_case(
        rng: &mut Rng,
        blocks: usize,
        extra_edges: usize,
        walks: usize,
    ) -> (FlowGraph, InferredFlow) {
        let n = blocks.max(1);
        let mut edges = Vec::new();
        for b in 0..n as u32 - 1 {
            if rng.chance(80) {
                edges.push((b, b + 1));
            }
        }
        for _ in 0..extra_edges {
            edges.push((rng.below(n as u64) as u32, rng.below(n as u64) as u32));
        }
        let mut entries = vec![0];
        if rng.chance(30) {
            entries.push(rng.below(n as u64) as u32);
        }
        let mut exits = Vec::new();
        if rng.chance(30) {
            exits.push(rng.below(n as u64) as u32);
        }
        let g = FlowGraph {
            blocks: n,
            edges,
            weights: vec![None; n],
            entries,
            exits,
        };
        let (first, _) = successors(&g);
        let mut out_edges = vec![0u32; g.edges.len()];
        let mut fill = first.clone();
        for (i, &(from, _)) in g.edges.iter().enumerate() {
            out_edges[fill[from as usize] as usize] = i as u32;
            fill[from as usize] += 1;
        }
        let mut truth = InferredFlow {
            block_counts: vec![0; n],
            edge_counts: vec![0; g.edges.len()],
            entry_counts: vec![0; n],
            exit_counts: vec![0; n],
        };
        let mut path = Vec::new();
        for _ in 0..walks {
            let start = g.entries[rng.below(g.entries.len() as u64) as usize];
            let most = if rng.chance(20) { 1000 } else { 5 };
            let times = 1 + rng.below(most);
            path.clear();
            let mut b = start as usize;
            let mut end = None;
            for _ in 0..4 * n {
                let succ = &out_edges[first[b] as usize..first[b + 1] as usize];
                if succ.is_empty() || (g.exits.contains(&(b as u32)) && rng.chance(30)) {
                    end = Some(b);
                    break;
                }
                let e = succ[rng.below(succ.len() as u64) as usize];
                path.push(e);
                b = g.edges[e as usize].1 as usize;
            }
            // A walk that found no exit in time is dropped: it would not be a flow.
            let Some(end) = end else { continue };
            truth.entry_counts[start as usize] += times;
            truth.block_counts[start as usize] += times;
            truth.exit_counts[end] += times;
            for &e in &path {
                truth.edge_counts[e as usize] += times;
                truth.block_counts[g.edges[e as usize].1 as usize] += times;
            }
        }
        let g = FlowGraph {
            weights: truth.block_counts.iter().map(|&c| Some(c)).collect(),
            ..g
        };
        (g, truth)
    }

    /// `g` with `unknown_percent` of its weights forgotten and the others moved by up to
    /// `noise_percent` (and at least one unit, so small counts are noisy too).
    fn noisy(rng: &mut Rng, g: &FlowGraph, noise_percent: u64, unknown_percent: u64) -> FlowGraph {
        let weights = g
            .weights
            .iter()
            .map(|&w| {
                let w = w?;
                if rng.chance(unknown_percent) {
                    return None;
                }
                let spread = if noise_percent == 0 {
                    0
                } else {
                    (w * noise_percent / 100).max(1)
                };
                let delta = rng.below(2 * spread + 1);
                Some((w + delta).saturating_sub(spread))
            })
            .collect();
        FlowGraph {
            weights,
            ..g.clone()
        }
    }

    fn forget(rng: &mut Rng, g: &FlowGraph, unknown_percent: u64) -> FlowGraph {
        noisy(rng, g, 0, unknown_percent)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        /// Weights that are the counts of a real flow come back exactly, wherever known.
        #[test]
        fn consistent_weights_are_reproduced(
            seed in 1u64..,
            blocks in 1usize..40,
            extra in 0usize..40,
            walks in 0usize..8,
            unknown in 0u64..60,
        ) {
            let mut rng = Rng(seed);
            let (g, _) = random_case(&mut rng, blocks, extra, walks);
            let g = forget(&mut rng, &g, unknown);
            let f = consistent(&g);
            for (b, w) in g.weights.iter().enumerate() {
                if let Some(w) = *w {
                    prop_assert_eq!(f.block_counts[b], w, "block {}", b);
                }
            }
        }

        /// With noise: always consistent, never worse than the truth by the objective, and so
        /// never further from the weights than the truth is, up to the cost ratio.
        #[test]
        fn noisy_weights_stay_close(
            seed in 1u64..,
            blocks in 1usize..40,
            extra in 0usize..40,
            walks in 0usize..8,
            noise in 0u64..50,
            unknown in 0u64..30,
        ) {
            let mut rng = Rng(seed);
            let (g, truth) = random_case(&mut rng, blocks, extra, walks);
            let g = noisy(&mut rng, &g, noise, unknown);
            let f = consistent(&g);
            let got = objective(&g, &f.block_counts).unwrap();
            let best_known = objective(&g, &truth.block_counts).unwrap();
            prop_assert!(got <= best_known, "{} > {}", got, best_known);
            let deviation = |counts: &[u64]| -> u128 {
                g.weights
                    .iter()
                    .zip(counts)
                    .filter_map(|(w, &c)| w.map(|w| u128::from(w.abs_diff(c))))
                    .sum()
            };
            let unknown_truth: u128 = g
                .weights
                .iter()
                .zip(&truth.block_counts)
                .filter(|(w, _)| w.is_none())
                .map(|(_, &c)| u128::from(c))
                .sum();
            let s = u128::from(check(&g).unwrap().scale);
            prop_assert!(
                10 * s * deviation(&f.block_counts)
                    <= 17 * s * deviation(&truth.block_counts) + unknown_truth
            );
        }

        /// On tiny graphs, no flow with small edge counts has a lower objective.
        #[test]
        fn optimal_against_brute_force(
            seed in 1u64..,
            blocks in 1usize..5,
            extra in 0usize..4,
            weights in proptest::collection::vec(proptest::option::weighted(0.8, 0u64..4), 4),
        ) {
            let mut rng = Rng(seed);
            let (g, _) = random_case(&mut rng, blocks, extra, 0);
            prop_assume!(g.edges.len() <= 5);
            let g = FlowGraph { weights: weights[..g.blocks].to_vec(), ..g };
            let f = consistent(&g);
            let got = objective(&g, &f.block_counts).unwrap();
            const LIMIT: u64 = 5;
            let best = brute_force(&g, LIMIT);
            prop_assert!(got <= best, "{} > {} (brute force)", got, best);
            if f.edge_counts.iter().all(|&c| c < LIMIT) {
                prop_assert_eq!(got, best);
            }
        }
    }

    /// Builds a structured function the way compilers lay them out: sequences, if/else
    /// diamonds, loops with a latch, switches, early returns and cold error paths, with the
    /// true count of every block and edge computed from branch probabilities and trip counts.
    struct Structured {
        rng: Rng,
        edges: Vec<(u32, u32)>,
        edge_counts: Vec<u64>,
        counts: Vec<u64>,
    }

    impl Structured {
        fn block(&mut self, count: u64) -> u32 {
            self.counts.push(count);
            self.counts.len() as u32 - 1
        }
        fn edge(&mut self, from: u32, to: u32, count: u64) {
            self.edges.push((from, to));
            self.edge_counts.push(count);
        }
        /// A single-entry, single-exit region run `count` times: (entry, exit) blocks.
        fn region(&mut self, count: u64, depth: u32) -> (u32, u32) {
            let kind = if depth == 0 { 0 } else { self.rng.below(7) };
            match kind {
                1 | 2 => {
                    let (e1, x1) = self.region(count, depth - 1);
                    let (e2, x2) = self.region(count, depth - 1);
                    self.edge(x1, e2, count);
                    (e1, x2)
                }
                3 => {
                    let cond = self.block(count);
                    let taken = count * self.rng.below(101) / 100;
                    let (e1, x1) = self.region(taken, depth - 1);
                    let join = if self.rng.chance(50) {
                        let (e2, x2) = self.region(count - taken, depth - 1);
                        let join = self.block(count);
                        self.edge(cond, e2, count - taken);
                        self.edge(x2, join, count - taken);
                        join
                    } else {
                        let join = self.block(count);
                        self.edge(cond, join, count - taken);
                        join
                    };
                    self.edge(cond, e1, taken);
                    self.edge(x1, join, taken);
                    (cond, join)
                }
                4 => {
                    // do { body } while (latch): body runs `trips` times per entry.
                    let trips = if count > 1_000_000 {
                        1
                    } else {
                        1 + self.rng.below(30)
                    };
                    let (e, x) = self.region(count * trips, depth - 1);
                    let latch = self.block(count * trips);
                    self.edge(x, latch, count * trips);
                    self.edge(latch, e, count * (trips - 1));
                    (e, latch)
                }
                5 => {
                    let switch = self.block(count);
                    let join_cases = 2 + self.rng.below(6);
                    let mut left = count;
                    let mut case_ends = Vec::new();
                    for i in 0..join_cases {
                        let c = if i + 1 == join_cases {
                            left
                        } else {
                            self.rng.below(left + 1)
                        };
                        left -= c;
                        let (e, x) = self.region(c, depth - 1);
                        self.edge(switch, e, c);
                        case_ends.push((x, c));
                    }
                    let join = self.block(count);
                    for (x, c) in case_ends {
                        self.edge(x, join, c);
                    }
                    (switch, join)
                }
                6 => {
                    // A check whose failure path is cold and rejoins.
                    let check = self.block(count);
                    let failed = if self.rng.chance(50) { 0 } else { count / 50 };
                    let error = self.block(failed);
                    let next = self.block(count);
                    self.edge(check, error, failed);
                    self.edge(error, next, failed);
                    self.edge(check, next, count - failed);
                    (check, next)
                }
                _ => {
                    let b = self.block(count);
                    (b, b)
                }
            }
        }
    }

    /// A function of at least `blocks` blocks with its true flow (one entry, block 0).
    fn structured_case(seed: u64, blocks: usize, calls: u64) -> (FlowGraph, InferredFlow) {
        let mut s = Structured {
            rng: Rng(seed),
            edges: Vec::new(),
            edge_counts: Vec::new(),
            counts: Vec::new(),
        };
        let entry = s.block(calls);
        let mut last = entry;
        let mut live = calls;
        while s.counts.len() < blocks {
            let (e, x) = s.region(live, 5);
            s.edge(last, e, live);
            last = x;
            if s.rng.chance(10) {
                // An early return.
                let returned = live * s.rng.below(20) / 100;
                let ret = s.block(returned);
                s.edge(last, ret, returned);
                let next = s.block(live - returned);
                s.edge(last, next, live - returned);
                live -= returned;
                last = next;
            }
        }
        let ret = s.block(live);
        s.edge(last, ret, live);
        let n = s.counts.len();
        let mut entry_counts = vec![0; n];
        entry_counts[0] = calls;
        let mut exit_counts = vec![0; n];
        let mut outflow = vec![0u64; n];
        for (&(from, _), &c) in s.edges.iter().zip(&s.edge_counts) {
            outflow[from as usize] += c;
        }
        for b in 0..n {
            exit_counts[b] = s.counts[b] - outflow[b];
        }
        let g = FlowGraph {
            blocks: n,
            edges: s.edges,
            weights: s.counts.iter().map(|&c| Some(c)).collect(),
            entries: vec![0],
            exits: Vec::new(),
        };
        let truth = InferredFlow {
            block_counts: s.counts,
            edge_counts: s.edge_counts,
            entry_counts,
            exit_counts,
        };
        (g, truth)
    }

    #[test]
    fn structured_functions_reproduced() {
        for seed in 1..40 {
            let (g, truth) = structured_case(seed, 60, 1 + seed * 7);
            let f = consistent(&g);
            assert_eq!(f.block_counts, truth.block_counts, "seed {seed}");
            let g = forget(&mut Rng(seed), &g, 25);
            let f = consistent(&g);
            for (b, w) in g.weights.iter().enumerate() {
                if let Some(w) = *w {
                    assert_eq!(f.block_counts[b], w, "seed {seed} block {b}");
                }
            }
        }
    }

    /// The size of the largest functions Rivet meets (SQLite's sqlite3VdbeExec, Lua's
    /// luaV_execute): checks the result and reports the time, with no threshold (timings
    /// belong in benchmarks). `cargo test --release -p rivet-profile large_function --
    /// --nocapture` shows it.
    #[test]
    fn large_function_reports_time() {
        let (g, truth) = structured_case(42, 20_000, 1000);
        // Cold edges to the shared error exit bring the edge count to 1.5 per block, as in
        // real code.
        let mut g = g;
        let cold = g.blocks as u32;
        g.blocks += 1;
        g.weights.push(Some(0));
        let mut rng = Rng(9);
        while g.edges.len() < 3 * (g.blocks - 1) / 2 {
            g.edges.push((rng.below(u64::from(cold)) as u32, cold));
        }
        let g_exact = g.clone();
        let g_noisy = noisy(&mut rng, &g, 20, 5);
        for (name, g) in [
            ("consistent", &g_exact),
            ("20% noise, 5% unknown", &g_noisy),
        ] {
            let start = std::time::Instant::now();
            let f = infer(g).unwrap();
            let elapsed = start.elapsed();
            eprintln!(
                "inference of {} blocks, {} edges ({name}): {:.1} ms",
                g.blocks,
                g.edges.len(),
                elapsed.as_secs_f64() * 1e3
            );
            let f2 = consistent(g);
            assert_eq!(f, f2);
        }
        let f = infer(&g_exact).unwrap();
        assert_eq!(
            f.block_counts[..truth.block_counts.len()],
            truth.block_counts
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Larger structured functions with noise: consistent, and no worse than the truth.
        #[test]
        fn noisy_structured_functions(
            seed in 1u64..,
            blocks in 10usize..400,
            calls in 1u64..100_000,
            noise in 0u64..60,
            unknown in 0u64..20,
        ) {
            let (g, truth) = structured_case(seed, blocks, calls);
            let g = noisy(&mut Rng(seed), &g, noise, unknown);
            let f = consistent(&g);
            let got = objective(&g, &f.block_counts).unwrap();
            let truth_cost = objective(&g, &truth.block_counts).unwrap();
            prop_assert!(got <= truth_cost, "{} > {}", got, truth_cost);
        }
    }

    /// The least objective over flows whose edge counts are all below `limit`, found by
    /// trying them all. Entry and exit flows follow from the edges, except at blocks that are
    /// both, whose best count is chosen directly.
    fn brute_force(g: &FlowGraph, limit: u64) -> u128 {
        let reachable = check(g).unwrap().reachable;
        let n = g.blocks;
        let is_entry: Vec<bool> = (0..n).map(|b| g.entries.contains(&(b as u32))).collect();
        let is_exit: Vec<bool> = (0..n)
            .map(|b| {
                g.exits.contains(&(b as u32)) || !g.edges.iter().any(|&(f, _)| f as usize == b)
            })
            .collect();
        let mut flows = vec![0u64; g.edges.len()];
        let mut best = u128::MAX;
        loop {
            let mut inflow = vec![0u64; n];
            let mut outflow = vec![0u64; n];
            let mut ok = true;
            for (&(from, to), &c) in g.edges.iter().zip(&flows) {
                if c > 0 && !reachable[from as usize] {
                    ok = false;
                }
                outflow[from as usize] += c;
                inflow[to as usize] += c;
            }
            let mut counts = vec![0u64; n];
            for b in 0..n {
                let (i, o) = (inflow[b], outflow[b]);
                counts[b] = match (is_entry[b] && reachable[b], is_exit[b]) {
                    (false, false) if i == o => i,
                    (false, true) if i >= o => i,
                    (true, false) if o >= i => o,
                    (true, true) => match g.weights[b] {
                        Some(w) => w.max(i.max(o)),
                        None => i.max(o),
                    },
                    _ => {
                        ok = false;
                        0
                    }
                };
            }
            if ok {
                best = best.min(objective(g, &counts).unwrap());
            }
            // Next assignment, odometer style.
            let mut i = 0;
            loop {
                if i == flows.len() {
                    return best;
                }
                flows[i] += 1;
                if flows[i] < limit {
                    break;
                }
                flows[i] = 0;
                i += 1;
            }
        }
    }
}
