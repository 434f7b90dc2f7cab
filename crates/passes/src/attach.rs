//! Attaching a profile to the program: counts on blocks and edges, entry counts, and a call
//! graph, plus a report of how much of the profile matched.
//!
//! A branch profile (instrumentation, or perf branch stacks after aggregation) names edges by
//! function and offset: an edge inside a function must leave from the last instruction of a
//! block and land on a block start along a CFG edge; a branch to offset 0 of a function is a
//! call or tail call; a branch from `[unknown]` to offset 0 is an entry from code the profile
//! does not see. Records that fit nothing are *stale* (the profile describes another build, or
//! another disassembly); records naming functions the binary does not have are *unknown*.
//! A profile of the stripped copy of a build names functions by address (`__rivet_fde_ADDR`,
//! discovery's names where there are no symbols): in the unstripped build those resolve to
//! the function starting there.
//!
//! A sample profile (no branch stacks) gives samples per address; the samples of a block,
//! divided by the time one execution of it takes (its instructions' latency classes summed),
//! estimate how often it ran (a sample lands on an instruction in proportion to the time spent
//! there), and flow inference (`rivet_profile::inference`) turns these estimates into counts
//! that are consistent along the CFG.

use std::collections::HashMap;

use rivet_elf::Vaddr;
use rivet_ir::{BlockId, FuncId, Function, Program, Terminator};
use rivet_profile::{LocKind, Mode, Profile};

/// The counts of one function.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FunctionCounts {
    /// Per block.
    pub blocks: Vec<u64>,
    /// Per block, aligned with `Block::succs`.
    pub edges: Vec<Vec<u64>>,
    /// Times the function was entered at its start.
    pub entries: u64,
}

impl FunctionCounts {
    /// Instructions executed in the function: block counts times block lengths.
    pub fn executed_instructions(&self, f: &Function) -> u64 {
        f.blocks
            .iter()
            .zip(&self.blocks)
            .map(|(b, c)| c.saturating_mul(u64::from(b.insts.end - b.insts.start)))
            .fold(0u64, u64::saturating_add)
    }
}

/// How well a profile matched the binary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MatchReport {
    /// Records (branches or sample addresses) and their total count.
    pub records: u64,
    pub records_count: u64,
    pub matched: u64,
    pub matched_count: u64,
    /// Names of the profile absent from the binary, with the count they carry.
    pub unknown_functions: Vec<(String, u64)>,
    /// Functions with records that fit no instruction, block or edge, with the count lost.
    pub stale_functions: Vec<(String, u64)>,
    /// Functions with a nonzero count.
    pub profiled_functions: usize,
}

impl MatchReport {
    /// Share of the profile's counts that matched (1.0 for an empty profile).
    pub fn matched_share(&self) -> f64 {
        if self.records_count == 0 {
            1.0
        } else {
            self.matched_count as f64 / self.records_count as f64
        }
    }
}

/// A profile attached to a program.
#[derive(Clone, Debug, Default)]
pub struct AttachedProfile {
    /// Per `FuncId`; `None` for functions without any count (or not simple).
    pub functions: Vec<Option<FunctionCounts>>,
    /// Call graph: (caller, callee) -> calls (tail calls included).
    pub calls: HashMap<(FuncId, FuncId), u64>,
    pub report: MatchReport,
    /// The counts were inferred from samples.
    pub inferred: bool,
    /// A branch profile's entries (calls and jumps from elsewhere) into functions whose code
    /// Rivet does not model (not simple, so `functions` has nothing for them), by `FuncId`:
    /// the profiled functions no layout can touch, which a summary should name. A sampled
    /// profile counts them in `samples`.
    pub unmodelled: HashMap<FuncId, u64>,
    /// A sampled profile's samples in each function, modelled or not, by `FuncId` (empty for a
    /// branch profile): the one unit in which all of them compare.
    pub samples: Vec<u64>,
}

/// Functions by the names profiles use: profile names, then plain and qualified names, then
/// the names discovery gives functions of a stripped binary (`__rivet_fde_ADDR`), by address.
pub(crate) struct NameIndex<'a> {
    by_name: HashMap<&'a str, FuncId>,
    program: &'a Program,
}

impl<'a> NameIndex<'a> {
    pub(crate) fn new(program: &'a Program, names: &'a [String]) -> Self {
        let mut by_name = HashMap::new();
        for f in &program.functions {
            for n in &f.names {
                by_name.entry(n.as_str()).or_insert(f.id);
            }
        }
        // Profile names win over plain names.
        for (i, n) in names.iter().enumerate() {
            by_name.insert(n.as_str(), FuncId(i as u32));
        }
        NameIndex { by_name, program }
    }

    pub(crate) fn get(&self, name: &str) -> Option<FuncId> {
        self.by_name
            .get(name)
            .copied()
            .or_else(|| self.by_fde_name(name))
    }

    /// A profile taken on the stripped copy of a build (perf in production, say) names its
    /// functions by the address of their FDE; in the unstripped build, which the build-id check
    /// has shown to be the same code, that is the start of the function of the same bytes.
    fn by_fde_name(&self, name: &str) -> Option<FuncId> {
        let start = rivet_ir::unnamed_function_start(name)?;
        self.program
            .function_containing(start)
            .filter(|f| f.range.start == start)
            .map(|f| f.id)
    }
}

fn block_ending_at(f: &Function, addr: Vaddr) -> Option<BlockId> {
    let pos = f.blocks.partition_point(|b| b.start <= addr);
    let i = pos.checked_sub(1)?;
    let last = f.block_insts(&f.blocks[i]).last()?;
    (last.addr() == addr).then_some(BlockId(i as u32))
}

/// The block whose last instruction, at `addr`, leaves the function for good: a tail call, a
/// noreturn call, a jump into a compiler-split part.
fn exit_block(f: &Function, addr: Vaddr) -> Option<BlockId> {
    let b = block_ending_at(f, addr)?;
    let block = f.block(b);
    (matches!(
        block.terminator,
        Terminator::TailCall { .. } | Terminator::CondTailCall { .. } | Terminator::NoReturnCall
    ) || !block.fragment_succs.is_empty())
    .then_some(b)
}

pub(crate) fn block_holding(f: &Function, addr: Vaddr) -> Option<BlockId> {
    let pos = f.blocks.partition_point(|b| b.start <= addr);
    let i = pos.checked_sub(1)?;
    let last = f.block_insts(&f.blocks[i]).last()?;
    (addr < last.end()).then_some(BlockId(i as u32))
}

/// The functions `profile` names (`names`: the profile names of the program's functions),
/// found as `attach` finds them, sorted, each once: the only ones it can give counts to.
pub fn functions_named(program: &Program, names: &[String], profile: &Profile) -> Vec<FuncId> {
    let index = NameIndex::new(program, names);
    let locations = profile
        .branches
        .keys()
        .flat_map(|(from, to)| [from, to])
        .chain(profile.samples.keys());
    let mut named: Vec<FuncId> = locations
        .filter(|l| l.kind != LocKind::External)
        .filter_map(|l| index.get(&l.name))
        .collect();
    named.sort_unstable();
    named.dedup();
    named
}

/// Attaches `profile` to `program` (`names`: the profile names of its functions).
pub fn attach(program: &Program, names: &[String], profile: &Profile) -> AttachedProfile {
    match profile.mode {
        Mode::Branches => attach_branches(program, names, profile),
        Mode::Samples { .. } => attach_samples(program, names, profile),
    }
}

fn empty_counts(f: &Function) -> FunctionCounts {
    FunctionCounts {
        blocks: vec![0; f.blocks.len()],
        edges: f.blocks.iter().map(|b| vec![0; b.succs.len()]).collect(),
        entries: 0,
    }
}

fn attach_branches(program: &Program, names: &[String], profile: &Profile) -> AttachedProfile {
    let index = NameIndex::new(program, names);
    let mut counts: Vec<Option<FunctionCounts>> = vec![None; program.functions.len()];
    let mut calls: HashMap<(FuncId, FuncId), u64> = HashMap::new();
    let mut report = MatchReport::default();
    let mut unknown: HashMap<String, u64> = HashMap::new();
    let mut stale: HashMap<FuncId, u64> = HashMap::new();
    // Counts of the ways out of each block that are not CFG edges of the function (tail calls,
    // noreturn calls, jumps into a split part): they count the block too. Calls inside a block
    // return into it and do not.
    let mut leaving: HashMap<(FuncId, BlockId), u64> = HashMap::new();
    let mut unmodelled: HashMap<FuncId, u64> = HashMap::new();
    for ((from, to), c) in &profile.branches {
        report.records += 1;
        report.records_count += c.count;
        let lookup = |name: &str| index.get(name);
        // Calls to imported functions through the PLT: matched, nothing to count here.
        if to.kind != LocKind::External
            && to.offset == 0
            && let Some(import) = to.name.strip_suffix("@PLT")
            && program.plt.iter().any(|p| p.name == import)
        {
            if let Some(f) = lookup(&from.name) {
                let caller = program.function(f);
                if let Some(b) = exit_block(caller, caller.range.start + from.offset) {
                    *leaving.entry((f, b)).or_default() += c.count;
                }
            }
            report.matched += 1;
            report.matched_count += c.count;
            continue;
        }
        let target = if to.kind == LocKind::External {
            None
        } else {
            match lookup(&to.name) {
                Some(g) => Some(g),
                None => {
                    *unknown.entry(to.name.clone()).or_default() += c.count;
                    continue;
                }
            }
        };
        let source = if from.kind == LocKind::External {
            None
        } else {
            match lookup(&from.name) {
                Some(f) => Some(f),
                None => {
                    *unknown.entry(from.name.clone()).or_default() += c.count;
                    continue;
                }
            }
        };
        // An edge inside a function: from a block's last instruction along a CFG edge (a
        // branch back to the function's start included: it is not an entry).
        if let (Some(f), Some(g)) = (source, target)
            && f == g
        {
            let func = program.function(f);
            let edge = func.is_simple().then_some(()).and_then(|()| {
                let b = block_ending_at(func, func.range.start + from.offset)?;
                let t = func.block_at(func.range.start + to.offset)?;
                let k = func.block(b).succs.iter().position(|s| s.to == t)?;
                Some((b, k))
            });
            if let Some((b, k)) = edge {
                let fc = counts[f.0 as usize].get_or_insert_with(|| empty_counts(func));
                fc.edges[b.0 as usize][k] += c.count;
                report.matched += 1;
                report.matched_count += c.count;
                continue;
            }
        }
        let mut matched = false;
        // Entries, calls and tail calls.
        if let Some(g) = target
            && to.offset == 0
        {
            let callee = program.function(g);
            if callee.is_simple() {
                counts[g.0 as usize]
                    .get_or_insert_with(|| empty_counts(callee))
                    .entries += c.count;
            } else if source != Some(g) {
                *unmodelled.entry(g).or_default() += c.count;
            }
            if let Some(f) = source
                && f != g
            {
                *calls.entry((f, g)).or_default() += c.count;
            }
            matched = true;
        } else if let Some(g) = target {
            // A jump into another function's interior: a compiler-split part.
            let callee = program.function(g);
            matched = callee.block_at(callee.range.start + to.offset).is_some();
        } else if let Some(f) = source {
            // To code the profile does not see (an indirect call or jump): matched when it
            // leaves from an instruction of the function.
            let caller = program.function(f);
            matched = block_holding(caller, caller.range.start + from.offset).is_some();
        }
        if let Some(f) = source
            && source != target
        {
            let caller = program.function(f);
            if let Some(b) = exit_block(caller, caller.range.start + from.offset) {
                *leaving.entry((f, b)).or_default() += c.count;
            }
        }
        if !matched {
            if let Some(f) = source.or(target) {
                *stale.entry(f).or_default() += c.count;
            }
            continue;
        }
        if matched {
            report.matched += 1;
            report.matched_count += c.count;
        }
    }
    // Block counts: the larger of what flows in and what flows out.
    for (i, fc) in counts.iter_mut().enumerate() {
        let Some(fc) = fc else { continue };
        let f = &program.functions[i];
        let mut inflow = vec![0u64; f.blocks.len()];
        for (b, block) in f.blocks.iter().enumerate() {
            for (k, s) in block.succs.iter().enumerate() {
                inflow[s.to.0 as usize] += fc.edges[b][k];
            }
        }
        if let Some(entry) = f.block_at(f.range.start) {
            inflow[entry.0 as usize] += fc.entries;
        }
        for (b, block_count) in fc.blocks.iter_mut().enumerate() {
            let out: u64 = fc.edges[b].iter().sum::<u64>()
                + leaving
                    .get(&(f.id, BlockId(b as u32)))
                    .copied()
                    .unwrap_or(0);
            *block_count = inflow[b].max(out);
        }
    }
    let mut attached = finish(program, counts, calls, report, unknown, stale, false);
    attached.unmodelled = unmodelled;
    attached
}

fn finish(
    program: &Program,
    mut counts: Vec<Option<FunctionCounts>>,
    calls: HashMap<(FuncId, FuncId), u64>,
    mut report: MatchReport,
    unknown: HashMap<String, u64>,
    stale: HashMap<FuncId, u64>,
    inferred: bool,
) -> AttachedProfile {
    for fc in &mut counts {
        if fc
            .as_ref()
            .is_some_and(|c| c.entries == 0 && c.blocks.iter().all(|&b| b == 0))
        {
            *fc = None;
        }
    }
    report.profiled_functions = counts.iter().flatten().count();
    report.unknown_functions = unknown.into_iter().collect();
    report
        .unknown_functions
        .sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    report.stale_functions = stale
        .into_iter()
        .map(|(f, c)| (program.function(f).qualified_name(), c))
        .collect();
    report
        .stale_functions
        .sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    AttachedProfile {
        functions: counts,
        calls,
        report,
        inferred,
        // Filled in by the caller, which knows the profile's kind.
        unmodelled: HashMap::new(),
        samples: Vec::new(),
    }
}

fn attach_samples(program: &Program, names: &[String], profile: &Profile) -> AttachedProfile {
    let index = NameIndex::new(program, names);
    let mut samples: Vec<Option<Vec<u64>>> = vec![None; program.functions.len()];
    let mut report = MatchReport::default();
    let mut unknown: HashMap<String, u64> = HashMap::new();
    let mut stale: HashMap<FuncId, u64> = HashMap::new();
    let mut per_function = vec![0u64; program.functions.len()];
    for (at, &count) in &profile.samples {
        report.records += 1;
        report.records_count += count;
        let Some(f) = index.get(&at.name) else {
            *unknown.entry(at.name.clone()).or_default() += count;
            continue;
        };
        let func = program.function(f);
        if !func.is_simple() {
            // Counted as matched: the function exists, Rivet just does not model its CFG.
            per_function[f.0 as usize] += count;
            report.matched += 1;
            report.matched_count += count;
            continue;
        }
        let addr = func.range.start + at.offset;
        match block_holding(func, addr) {
            Some(_) => {
                // The instruction holding the address (a sample is at an instruction start).
                let i = func.insts.partition_point(|i| i.addr() <= addr) - 1;
                samples[f.0 as usize].get_or_insert_with(|| vec![0; func.insts.len()])[i] += count;
                per_function[f.0 as usize] += count;
                report.matched += 1;
                report.matched_count += count;
            }
            None => *stale.entry(f).or_default() += count,
        }
    }
    let counts: Vec<Option<FunctionCounts>> = program
        .functions
        .iter()
        .zip(&samples)
        .map(|(f, s)| s.as_ref().map(|s| infer_function(f, s)))
        .collect();
    let mut calls: HashMap<(FuncId, FuncId), u64> = HashMap::new();
    for (f, fc) in program.functions.iter().zip(&counts) {
        let Some(fc) = fc else { continue };
        for call in &f.calls {
            if let rivet_ir::CallTarget::Function { function, .. } = call.target
                && let Some(b) = block_holding(f, call.at)
            {
                let c = fc.blocks[b.0 as usize];
                if c > 0 {
                    *calls.entry((f.id, function)).or_default() += c;
                }
            }
        }
    }
    let mut attached = finish(program, counts, calls, report, unknown, stale, true);
    attached.samples = per_function;
    attached
}

/// How often a block ran, in sample units: its samples divided by the cost of one execution
/// (`Inst::cost`, the latency class of each instruction on the ISA's current cores, summed over
/// its instructions; the mean samples per instruction when all cost 1). A timer sample lands
/// on an instruction in proportion to the time spent there, so a block of slow instructions
/// collects more samples per execution than a block of as many fast ones. On Lua this ranks functions like instrumentation better than the plain mean (`math_sqrt`
/// no longer outranks string matching). Robust variants, leaving out an instruction that
/// collects samples out of proportion (a cache miss, a mispredicted call), and a skid model
/// (a sample lands after the instruction that took the time: the cost of a block's last
/// instruction counted for the next block) matched instrumentation worse.
fn block_estimate(samples: &[u64], insts: &[rivet_arch::Inst]) -> u64 {
    // Samples are sparse: scale them up so that per-instruction division keeps resolution.
    const SCALE: u64 = 64;
    let total: u64 = samples.iter().sum();
    if total == 0 {
        return 0;
    }
    let cost: u64 = insts.iter().map(rivet_arch::Inst::cost).sum();
    total * SCALE / cost.max(1)
}

/// Block and edge counts of `f` from the samples of its instructions. A block without samples
/// weighs 0, evidence of coldness, rather than "unknown": on Lua, unknown lowered the weighted
/// edge overlap with instrumentation from about 0.71 to 0.53.
///
/// Except when that evidence would erase the function. A function the timer hit once or twice
/// deep inside (a sample in one block, none on the way there from the entry nor on to a
/// return) costs inference less to set to zero than to lift the path to it: raising each
/// zero-weight block costs more than half of dropping the sampled one. Yet a sample is proof
/// that the function ran, and zero would leave it among the code that never runs, outside the
/// hot text. When inference gives such a function no flow, its blocks without samples become
/// unknown and the path is inferred through them. On Lua sampled at 40 kHz over 8 runs of its
/// training input (538k samples), 36 of the 218 functions with samples came out with no counts
/// before this.
fn infer_function(f: &Function, samples: &[u64]) -> FunctionCounts {
    let weights: Vec<Option<u64>> = f
        .blocks
        .iter()
        .map(|b| {
            Some(block_estimate(
                &samples[b.insts.start as usize..b.insts.end as usize],
                f.block_insts(b),
            ))
        })
        .collect();
    let counts = infer_counts(f, &weights);
    if counts.blocks.iter().any(|&c| c > 0) {
        return counts;
    }
    let sampled_only: Vec<Option<u64>> = weights.iter().map(|w| w.filter(|&w| w > 0)).collect();
    infer_counts(f, &sampled_only)
}

/// Block and edge counts of `f` consistent along its CFG and closest to `weights` (per block:
/// an estimate of how often it ran, or `None` for unknown).
pub(crate) fn infer_counts(f: &Function, weights: &[Option<u64>]) -> FunctionCounts {
    infer_counts_with_edges(f, weights, &[])
}

/// `infer_counts`, with some edges' counts known too (`edge_weights[b][k]` for the `k`th
/// successor of block `b`, where given). Inference weighs blocks only, so a known edge becomes
/// a block of its own on the way, weighing what the edge carried: flow then stays off edges
/// known to be cold instead of finding unknown blocks a cheap way round.
pub(crate) fn infer_counts_with_edges(
    f: &Function,
    weights: &[Option<u64>],
    edge_weights: &[Vec<Option<u64>>],
) -> FunctionCounts {
    let mut edges = Vec::new();
    let mut edge_index = Vec::new();
    let mut weights = weights.to_vec();
    // Fall-through edges first: inference breaks ties toward the edge listed first, and the
    // compiler made the likely successor the fall-through.
    for (b, block) in f.blocks.iter().enumerate() {
        let mut order: Vec<usize> = (0..block.succs.len()).collect();
        order.sort_by_key(|&k| block.succs[k].kind != rivet_ir::EdgeKind::FallThrough);
        for k in order {
            let known = edge_weights
                .get(b)
                .and_then(|w| w.get(k))
                .copied()
                .flatten();
            match known {
                Some(w) => {
                    let via = weights.len() as u32;
                    weights.push(Some(w));
                    edges.push((b as u32, via));
                    edges.push((via, block.succs[k].to.0));
                    edge_index.push((b, k));
                    edge_index.push((usize::MAX, 0));
                }
                None => {
                    edges.push((b as u32, block.succs[k].to.0));
                    edge_index.push((b, k));
                }
            }
        }
    }
    let entries: Vec<u32> = f
        .blocks
        .iter()
        .enumerate()
        .filter(|(_, b)| b.is_entry || b.is_landing_pad || b.is_address_taken)
        .map(|(i, _)| i as u32)
        .collect();
    let graph = rivet_profile::inference::FlowGraph {
        blocks: weights.len(),
        edges,
        weights,
        entries,
        exits: Vec::new(),
    };
    let mut counts = empty_counts(f);
    // The graph is built from the function's own CFG: its indices are always valid.
    if let Ok(mut inferred) = rivet_profile::inference::infer(&graph) {
        inferred.block_counts.truncate(f.blocks.len());
        counts.blocks = inferred.block_counts;
        for ((b, k), c) in edge_index.into_iter().zip(inferred.edge_counts) {
            if b != usize::MAX {
                counts.edges[b][k] = c;
            }
        }
    }
    if let Some(entry) = f.block_at(f.range.start) {
        let internal: u64 = f
            .blocks
            .iter()
            .enumerate()
            .flat_map(|(b, block)| {
                block
                    .succs
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| s.to == entry)
                    .map(move |(k, _)| (b, k))
            })
            .map(|(b, k)| counts.edges[b][k])
            .sum();
        counts.entries = counts.blocks[entry.0 as usize].saturating_sub(internal);
    }
    counts
}
