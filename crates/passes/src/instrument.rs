//! Instrumentation planning: which edges of a function get a counter, and where each
//! counter's increment goes.
//!
//! The function becomes a counting graph (`rivet_profile::counters` describes it): one vertex
//! per piece of block between calls, one vertex for the outside, and edges for the CFG, for
//! calls returning or not, and for every way in and out. Flow is conserved at every vertex,
//! so only the edges off a spanning tree need counters. The tree is grown (Kruskal) in this
//! order:
//!
//! 1. edges no probe can count: a call that did not return, and an entry from the outside into
//!    a block also entered from inside (such a block is split in two vertices first, so these
//!    edges all hang off distinct vertices and can never close a cycle);
//! 2. the other edges, the most frequent first as estimated from loop nesting, so the counters
//!    land on rarely executed edges; at equal estimate, edges whose probe would need a block of
//!    its own or a flag save go in first.
//!
//! A counted edge's increment goes at its target's start when the target has no other way
//! in, else at its source's end when the source has no other way out, else on a new block on
//! the edge (conditional branches only). Increments are x86-64 `lock inc`, which clobbers
//! all arithmetic flags but CF: flag liveness picks the flag-saving shape where needed
//! (`Isa::probe_shape`; AArch64 probes write no flags, their shape is the atomics chosen).
//!
//! No probe goes where an exclusive-monitor sequence (AArch64 `ldxr` .. `stxr`) is open: a
//! memory access between the load and its store may clear the monitor, so the store would
//! fail on every retry. Such an edge is left to the spanning tree like one no probe can
//! count; the probe of an edge leaving the sequence's last block goes after its store.

use std::collections::{BTreeSet, HashMap, HashSet};

use rivet_arch::{Atomics, Flags, Flow, Isa, ProbeShape};
use rivet_elf::Vaddr;
use rivet_ir::probes::{EdgeTarget, FunctionProbes, Probe, ProbeAt};
use rivet_ir::{BlockId, CallTarget, EdgeKind as CfgEdge, Function, Terminator};
use rivet_profile::counters::{EdgeKind, FunctionMap, INFERRED, MapCall, MapEdge, OUTSIDE};

/// A function's probes and the counting graph that gives their counters meaning.
#[derive(Clone, Debug)]
pub struct FunctionInstrumentation {
    pub probes: FunctionProbes,
    pub map: FunctionMap,
    /// Edges neither counted nor inferable (an unusual shape, e.g. a block that is both a
    /// landing pad and an entry): the function's counts are then approximate.
    pub unknown_edges: usize,
}

/// What a vertex of the counting graph is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    Outside,
    /// A piece of `block`: from its start, or from just after the call `after_call`.
    Piece {
        block: BlockId,
        after_call: Option<u32>,
    },
    /// The arrival half of a split block.
    Arrival,
}

struct Graph {
    places: Vec<Place>,
    addrs: Vec<u64>,
    edges: Vec<MapEdge>,
}

impl Graph {
    fn vertex(&mut self, place: Place, addr: Vaddr) -> u32 {
        self.places.push(place);
        self.addrs.push(addr.get());
        (self.places.len() - 1) as u32
    }
    fn edge(&mut self, from: u32, to: u32, kind: EdgeKind, from_addr: u64, to_addr: u64) {
        self.edges.push(MapEdge {
            from,
            to,
            kind,
            from_addr,
            to_addr,
            counter: INFERRED,
        });
    }
}

fn target_addr(target: &CallTarget) -> u64 {
    match target {
        CallTarget::Function { addr, .. }
        | CallTarget::Plt { addr, .. }
        | CallTarget::Unknown { addr } => addr.get(),
        CallTarget::Indirect => 0,
    }
}

/// Flag liveness at the start of each block and before each instruction.
struct Liveness {
    live_in: Vec<Flags>,
    live_out: Vec<Flags>,
}

fn liveness(f: &Function) -> Liveness {
    let n = f.blocks.len();
    let mut live_in = vec![Flags::NONE; n];
    let mut live_out = vec![Flags::NONE; n];
    let mut changed = true;
    while changed {
        changed = false;
        for b in (0..n).rev() {
            let block = &f.blocks[b];
            // Returns, tail calls and noreturn calls have no successors: nothing is live after
            // them (the ABI keeps no arithmetic flag across them).
            let mut out = Flags::NONE;
            for s in &block.succs {
                out = out.union(live_in[s.to.0 as usize]);
            }
            if !block.fragment_succs.is_empty() {
                // The sibling fragment is another function of the model: assume it reads them.
                out = Flags::ALL;
            }
            let mut live = out;
            for inst in f.block_insts(block).iter().rev() {
                live = inst.flags_live_before(live);
            }
            if live != live_in[b] || out != live_out[b] {
                live_in[b] = live;
                live_out[b] = out;
                changed = true;
            }
        }
    }
    Liveness { live_in, live_out }
}

/// Flags live just before instruction `inst` of `block` (index into `Function::insts`).
fn live_before(f: &Function, lv: &Liveness, block: BlockId, inst: u32) -> Flags {
    let b = f.block(block);
    let mut live = lv.live_out[block.0 as usize];
    for i in (inst..b.insts.end).rev() {
        live = f.insts[i as usize].flags_live_before(live);
    }
    live
}

/// For each instruction of `f` (index into `Function::insts`, in address order), whether an
/// exclusive-monitor sequence is open just before it, and just after it: from an exclusive
/// load to the store or `clrex` that ends it, as discovery marks `Block::in_exclusive_sequence`.
fn exclusive_open(f: &Function) -> (Vec<bool>, Vec<bool>) {
    let n = f.insts.len();
    let (mut before, mut after) = (vec![false; n], vec![false; n]);
    let mut open = false;
    for (i, inst) in f.insts.iter().enumerate() {
        before[i] = open;
        if inst.is_exclusive_load() {
            open = true;
        }
        if inst.is_exclusive_end() {
            open = false;
        }
        after[i] = open;
    }
    (before, after)
}

fn find(parent: &mut [u32], mut v: u32) -> u32 {
    while parent[v as usize] != v {
        parent[v as usize] = parent[parent[v as usize] as usize];
        v = parent[v as usize];
    }
    v
}

/// Loop nesting depth of each vertex (natural loops of DFS back edges, outside vertex
/// excluded), the static estimate of how often it runs.
fn loop_depth(n: usize, edges: &[MapEdge], roots: &[u32]) -> Vec<u32> {
    let mut succs: Vec<Vec<u32>> = vec![Vec::new(); n];
    let mut preds: Vec<Vec<u32>> = vec![Vec::new(); n];
    for e in edges {
        if e.from != OUTSIDE && e.to != OUTSIDE {
            succs[e.from as usize].push(e.to);
            preds[e.to as usize].push(e.from);
        }
    }
    // Iterative DFS: 0 unvisited, 1 on stack, 2 done.
    let mut state = vec![0u8; n];
    let mut back: Vec<(u32, u32)> = Vec::new();
    for &root in roots {
        if state[root as usize] != 0 {
            continue;
        }
        let mut stack: Vec<(u32, usize)> = vec![(root, 0)];
        state[root as usize] = 1;
        while let Some((v, i)) = stack.last_mut() {
            let v = *v;
            if let Some(&w) = succs[v as usize].get(*i) {
                *i += 1;
                match state[w as usize] {
                    0 => {
                        state[w as usize] = 1;
                        stack.push((w, 0));
                    }
                    1 => back.push((v, w)),
                    _ => {}
                }
            } else {
                state[v as usize] = 2;
                stack.pop();
            }
        }
    }
    let mut bodies: HashMap<u32, HashSet<u32>> = HashMap::new();
    for (tail, header) in back {
        let body = bodies
            .entry(header)
            .or_insert_with(|| HashSet::from([header]));
        let mut work = vec![tail];
        while let Some(v) = work.pop() {
            if body.insert(v) {
                work.extend(preds[v as usize].iter().copied());
            }
        }
    }
    let mut depth = vec![0u32; n];
    for body in bodies.values() {
        for &v in body {
            depth[v as usize] += 1;
        }
    }
    depth
}

/// The atomics the probes of `program` use unless told otherwise (`Isa::default_atomics`),
/// judged on its code outside the functions that choose their atomics at run time.
pub fn default_atomics(program: &rivet_ir::Program) -> Atomics {
    let isa = program.info.isa;
    isa.default_atomics(
        program
            .functions
            .iter()
            .filter(|f| !f.names.iter().any(|n| isa.chooses_atomics_at_run_time(n)))
            .flat_map(|f| f.insts.iter()),
    )
}

/// Plans the instrumentation of simple function `f`, whose probes count with `atomics`. Its
/// counters are numbered from `first_counter`; `fragment_targets` holds every address jumped
/// to from a compiler-split sibling (`foo` <-> `foo.cold`) of any function.
pub fn instrument_function(
    isa: Isa,
    atomics: Atomics,
    f: &Function,
    name: String,
    first_counter: u32,
    fragment_targets: &HashSet<Vaddr>,
) -> FunctionInstrumentation {
    let mut g = Graph {
        places: Vec::new(),
        addrs: Vec::new(),
        edges: Vec::new(),
    };
    g.vertex(Place::Outside, Vaddr(0));
    let call_targets: HashMap<Vaddr, u64> = f
        .calls
        .iter()
        .map(|c| (c.at, target_addr(&c.target)))
        .collect();
    let nblocks = f.blocks.len();
    let mut first_of = vec![0u32; nblocks];
    let mut last_of = vec![0u32; nblocks];
    let mut calls = Vec::new();
    for (bi, block) in f.blocks.iter().enumerate() {
        let id = BlockId(bi as u32);
        let mut piece = g.vertex(
            Place::Piece {
                block: id,
                after_call: None,
            },
            block.start,
        );
        first_of[bi] = piece;
        let insts = f.block_insts(block);
        for (k, inst) in insts.iter().enumerate() {
            if !matches!(inst.flow(), Flow::Call { .. } | Flow::IndirectCall) {
                continue;
            }
            let target =
                call_targets
                    .get(&inst.addr())
                    .copied()
                    .unwrap_or_else(|| match inst.flow() {
                        Flow::Call { target } => target.get(),
                        _ => 0,
                    });
            calls.push(MapCall {
                vertex: piece,
                at: inst.addr().get(),
                target,
            });
            if k + 1 == insts.len() && block.terminator == Terminator::NoReturnCall {
                continue;
            }
            let index = block.insts.start + k as u32;
            let next = g.vertex(
                Place::Piece {
                    block: id,
                    after_call: Some(index),
                },
                inst.end(),
            );
            g.edge(
                piece,
                next,
                EdgeKind::CallReturn,
                inst.addr().get(),
                inst.end().get(),
            );
            g.edge(piece, OUTSIDE, EdgeKind::CallUnwound, inst.addr().get(), 0);
            piece = next;
        }
        last_of[bi] = piece;
    }

    // Ways out of each block, and indirect jumps' targets.
    let mut jumps: Vec<(u64, u64)> = Vec::new();
    let mut indirect_targets: BTreeSet<BlockId> = BTreeSet::new();
    for (bi, block) in f.blocks.iter().enumerate() {
        let last = f.block_insts(block).last().expect("blocks are not empty");
        let (from, at) = (last_of[bi], last.addr().get());
        match &block.terminator {
            Terminator::Return => g.edge(from, OUTSIDE, EdgeKind::Return, at, 0),
            Terminator::TailCall { target } | Terminator::CondTailCall { target } => {
                g.edge(from, OUTSIDE, EdgeKind::TailCall, at, target_addr(target))
            }
            Terminator::NoReturnCall | Terminator::Trap => {
                g.edge(from, OUTSIDE, EdgeKind::NoReturn, at, 0)
            }
            Terminator::JumpTable { .. } | Terminator::ComputedGoto => {
                g.edge(from, OUTSIDE, EdgeKind::IndirectJump, at, 0)
            }
            Terminator::FallThrough | Terminator::Jump | Terminator::CondJump => {}
        }
        let mut seen = HashSet::new();
        for s in &block.succs {
            let to = f.block(s.to);
            match s.kind {
                CfgEdge::JumpTable | CfgEdge::ComputedGoto => {
                    indirect_targets.insert(s.to);
                    jumps.push((at, to.start.get()));
                }
                CfgEdge::FallThrough | CfgEdge::Taken => {
                    if seen.insert(s.to) {
                        g.edge(
                            from,
                            first_of[s.to.0 as usize],
                            EdgeKind::Flow,
                            at,
                            to.start.get(),
                        );
                    }
                }
            }
        }
        let mut seen = HashSet::new();
        for s in &block.fragment_succs {
            if matches!(s.kind, CfgEdge::FallThrough | CfgEdge::Taken) && seen.insert(s.addr) {
                g.edge(from, OUTSIDE, EdgeKind::ToFragment, at, s.addr.get());
            }
        }
    }
    jumps.sort_unstable();
    jumps.dedup();

    // Ways in from the outside.
    let entry = f
        .block_at(f.range.start)
        .expect("simple functions have an entry block");
    let mut entered: HashSet<BlockId> = HashSet::new();
    let mut enter = |g: &mut Graph, b: BlockId, kind: EdgeKind| {
        if entered.insert(b) {
            let start = f.block(b).start.get();
            g.edge(OUTSIDE, first_of[b.0 as usize], kind, 0, start);
        }
    };
    // A compiler-split cold part (`foo.cold`) is not called: its first block is reached by a
    // jump from its parent or by the unwinder, which the loop below records.
    let is_cold_part = matches!(
        f.parent,
        Some(rivet_ir::Parent {
            kind: rivet_ir::PartKind::ColdFragment,
            ..
        })
    );
    let first_block = f.block(entry);
    if !(is_cold_part
        && (first_block.is_landing_pad || fragment_targets.contains(&first_block.start)))
    {
        enter(&mut g, entry, EdgeKind::Entry);
    }
    for &addr in &f.secondary_entries {
        if let Some(b) = f.block_at(addr) {
            enter(&mut g, b, EdgeKind::Entry);
        }
    }
    for t in &indirect_targets {
        enter(&mut g, *t, EdgeKind::IndirectTarget);
    }
    for (bi, block) in f.blocks.iter().enumerate() {
        let id = BlockId(bi as u32);
        if block.is_landing_pad {
            enter(&mut g, id, EdgeKind::LandingPad);
        } else if fragment_targets.contains(&block.start) {
            enter(&mut g, id, EdgeKind::FromFragment);
        } else if block.is_address_taken {
            enter(&mut g, id, EdgeKind::Entry);
        }
    }

    // Split blocks entered both from the outside and from inside.
    let mut in_degree = vec![0u32; g.places.len()];
    for e in &g.edges {
        in_degree[e.to as usize] += 1;
    }
    let from_outside: Vec<u32> = g
        .edges
        .iter()
        .filter(|e| e.from == OUTSIDE)
        .map(|e| e.to)
        .filter(|&v| in_degree[v as usize] > 1)
        .collect();
    for v in from_outside {
        let arrival = g.vertex(Place::Arrival, Vaddr(g.addrs[v as usize]));
        for e in &mut g.edges {
            if e.to == v {
                e.to = arrival;
            }
        }
        let addr = g.addrs[v as usize];
        g.edge(arrival, v, EdgeKind::Enter, addr, addr);
    }

    let n = g.places.len();
    let mut in_degree = vec![0u32; n];
    let mut out_degree = vec![0u32; n];
    for e in &g.edges {
        in_degree[e.to as usize] += 1;
        out_degree[e.from as usize] += 1;
    }
    let lv = liveness(f);
    let shape = |live: Flags| isa.probe_shape(live, atomics);
    let (open_before, open_after) = exclusive_open(f);
    // Whether a probe may go where `at` says: never inside an open exclusive sequence.
    let outside_exclusive = |at: ProbeAt| {
        let b = |block: BlockId| f.block(block);
        match at {
            ProbeAt::BlockStart(block) => !open_before[b(block).insts.start as usize],
            ProbeAt::AfterCall(call) => !open_after[call as usize],
            ProbeAt::BlockEnd(block) => {
                let block = b(block);
                if block.terminator == Terminator::FallThrough {
                    !open_after[block.insts.end as usize - 1]
                } else {
                    !open_before[block.insts.end as usize - 1]
                }
            }
            // After the branch, on the way to its target.
            ProbeAt::Edge { from, .. } => !open_after[b(from).insts.end as usize - 1],
        }
    };

    // A call that ends its block returns to the next block's first instruction; where that is
    // a landing pad (`bl setjmp` then `bti j`: `longjmp` returns with an indirect branch), a
    // probe after the call would sit before the pad, where BTI lets no indirect branch land.
    // (A pad inside the call's block is stepped over by the emitter.)
    let before_a_pad = |at: ProbeAt| match at {
        ProbeAt::AfterCall(call) => {
            let next = call as usize + 1;
            f.block_at(f.insts[call as usize].end())
                .is_some_and(|b| f.block(b).insts.start as usize == next)
                && f.insts.get(next).is_some_and(|i| isa.keeps_first(i))
        }
        _ => false,
    };

    // Where each edge's probe would go, and its shape.
    let placement = |e: &MapEdge| -> Option<(ProbeAt, ProbeShape)> {
        if e.kind == EdgeKind::CallUnwound {
            return None;
        }
        if e.to != OUTSIDE
            && in_degree[e.to as usize] == 1
            && let Place::Piece { block, after_call } = g.places[e.to as usize]
        {
            return Some(match after_call {
                None => (
                    ProbeAt::BlockStart(block),
                    shape(lv.live_in[block.0 as usize]),
                ),
                Some(call) => {
                    let b = f.block(block);
                    let live = if call + 1 < b.insts.end {
                        live_before(f, &lv, block, call + 1)
                    } else {
                        lv.live_out[block.0 as usize]
                    };
                    (ProbeAt::AfterCall(call), shape(live))
                }
            });
        }
        let Place::Piece { block, .. } = g.places[e.from as usize] else {
            return None;
        };
        if e.from != last_of[block.0 as usize] {
            return None;
        }
        let b = f.block(block);
        if out_degree[e.from as usize] == 1 {
            let live = if b.terminator == Terminator::FallThrough {
                lv.live_out[block.0 as usize]
            } else {
                live_before(f, &lv, block, b.insts.end - 1)
            };
            return Some((ProbeAt::BlockEnd(block), shape(live)));
        }
        if !matches!(
            b.terminator,
            Terminator::CondJump | Terminator::CondTailCall { .. }
        ) {
            return None;
        }
        match e.kind {
            EdgeKind::Flow => {
                let to = f.block_at(Vaddr(e.to_addr))?;
                Some((
                    ProbeAt::Edge {
                        from: block,
                        to: EdgeTarget::Block(to),
                    },
                    shape(lv.live_in[to.0 as usize]),
                ))
            }
            EdgeKind::TailCall | EdgeKind::ToFragment if e.to_addr != 0 => Some((
                ProbeAt::Edge {
                    from: block,
                    to: EdgeTarget::Address(Vaddr(e.to_addr)),
                },
                if e.kind == EdgeKind::TailCall {
                    shape(Flags::NONE)
                } else {
                    shape(Flags::ALL)
                },
            )),
            _ => None,
        }
    };
    let placements: Vec<Option<(ProbeAt, ProbeShape)>> = g
        .edges
        .iter()
        .map(|e| placement(e).filter(|(at, _)| outside_exclusive(*at) && !before_a_pad(*at)))
        .collect();

    // Spanning tree: uncountable edges first, then the most frequent.
    let roots: Vec<u32> = g
        .edges
        .iter()
        .filter(|e| e.from == OUTSIDE)
        .map(|e| e.to)
        .collect();
    let depth = loop_depth(n, &g.edges, &roots);
    let mut order: Vec<usize> = (0..g.edges.len()).collect();
    let estimate = |i: usize| {
        let e = &g.edges[i];
        let d = |v: u32| if v == OUTSIDE { 0 } else { depth[v as usize] };
        d(e.from).min(d(e.to))
    };
    let cost = |i: usize| match placements[i] {
        None => 0u8,
        Some((ProbeAt::Edge { .. }, _)) => 1,
        Some((_, s)) if s.saves_flags() => 2,
        Some(_) => 3,
    };
    order.sort_by_key(|&i| {
        (
            placements[i].is_some(),
            std::cmp::Reverse(estimate(i)),
            cost(i),
            i,
        )
    });
    let mut parent: Vec<u32> = (0..n as u32).collect();
    let mut counter = first_counter;
    let mut probes = Vec::new();
    let mut unknown_edges = 0;
    for i in order {
        let e = g.edges[i];
        let (a, b) = (find(&mut parent, e.from), find(&mut parent, e.to));
        if a != b {
            parent[a as usize] = b;
            continue;
        }
        match placements[i] {
            Some((at, shape)) => {
                g.edges[i].counter = counter;
                probes.push(Probe { at, counter, shape });
                counter += 1;
            }
            None => unknown_edges += 1,
        }
    }
    probes.sort_by_key(|p| (p.at, p.counter));
    // Indirect calls whose targets can be recorded (tables are numbered by the caller, after
    // every function's edge counters).
    let indirect: Vec<(u32, u32)> = f
        .insts
        .iter()
        .enumerate()
        .filter(|(k, i)| {
            let tail_call = i.flow() == Flow::IndirectJump
                && f.blocks.iter().any(|b| {
                    b.insts.end == *k as u32 + 1
                        && matches!(
                            b.terminator,
                            Terminator::TailCall {
                                target: CallTarget::Indirect
                            }
                        )
                });
            (i.flow() == Flow::IndirectCall || tail_call) && isa.indirect_probe_size(i).is_ok()
        })
        .map(|(k, _)| (k as u32, 0))
        .collect();
    FunctionInstrumentation {
        probes: FunctionProbes { probes, indirect },
        map: FunctionMap {
            name,
            start: f.range.start.get(),
            vertices: g.addrs,
            edges: g.edges,
            calls,
            jumps,
            indirect: Vec::new(),
        },
        unknown_edges,
    }
}
