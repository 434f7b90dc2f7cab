//! From perf samples of a binary to a profile of it (what `perf2bolt` does).
//!
//! With branch stacks, every recorded branch becomes a branch record, and every run between two
//! branches (a trace) is walked through the CFG: each block boundary it crosses is a
//! fall-through edge, recorded from the block's last instruction to the next block, the same
//! shape instrumentation gives, so the optimizer sees one kind of branch profile. A trace that
//! the CFG cannot explain (it would cross a return or an unconditional jump, or leave its
//! function) is dropped and counted. Returns are not recorded: they say nothing about layout.
//!
//! Without branch stacks, the profile keeps the sample counts per address (fdata's `no_lbr`);
//! turning them into edge counts needs the CFG and is done when the profile is attached
//! (`attach`), as BOLT does.
//!
//! A decoded trace (CoreSight ETM, Intel PT) gives the same branches and traces, every one of
//! them rather than a sample, and the profile says so (origin `trace`). SPE's sampled branches
//! become branch records too, a branch seen not taken the fall-through edge after it, and the
//! run from the previous branch's target (when perf printed it) a trace; an SPE recording
//! without branch samples is a sample profile like a timer's. The source is decided before
//! (`Aggregated::source`); this module only follows it.

use rivet_arch::Flow;
use rivet_ir::{Function, Program, Terminator};
use rivet_profile::perf::{Aggregated, PerfSource};
use rivet_profile::{Location, Mode, Profile, model::Origin};

/// What aggregation kept and dropped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AggregateReport {
    pub total_samples: u64,
    pub samples_in_binary: u64,
    /// Samples (or branch ends) at addresses in no function of the binary.
    pub outside_functions: u64,
    pub branches: u64,
    pub returns_skipped: u64,
    pub traces: u64,
    pub traces_dropped: u64,
    pub fall_throughs: u64,
    /// Fall-through edges from branches seen not taken (SPE).
    pub not_taken: u64,
    /// Not-taken branches that are no conditional branch ending a block of a simple function.
    pub not_taken_dropped: u64,
}

/// Where an address is, by profile name.
fn locate(program: &Program, names: &[String], addr: u64) -> Option<Location> {
    if let Some(f) = program.function_containing(rivet_elf::Vaddr(addr)) {
        return Some(Location::symbol(
            names[f.id.0 as usize].clone(),
            addr - f.range.start.get(),
        ));
    }
    program
        .plt
        .iter()
        .find(|p| addr >= p.addr.get() && addr < p.addr.get() + p.size)
        .map(|p| Location::symbol(format!("{}@PLT", p.name), addr - p.addr.get()))
}

/// The index of the block of `f` holding `addr`.
fn block_holding(f: &Function, addr: u64) -> Option<usize> {
    let pos = f.blocks.partition_point(|b| b.start.get() <= addr);
    let i = pos.checked_sub(1)?;
    let b = &f.blocks[i];
    let insts = f.block_insts(b);
    (addr < insts.last()?.end().get()).then_some(i)
}

/// Fall-through edges (last instruction, next block) of a straight run from `start` to `end`
/// inside `f`, or `None` when the CFG cannot have run that way.
fn trace_edges(f: &Function, start: u64, end: u64) -> Option<Vec<(u64, u64)>> {
    let mut b = block_holding(f, start)?;
    let last = block_holding(f, end)?;
    let mut edges = Vec::new();
    while b != last {
        let block = &f.blocks[b];
        let tail = f.block_insts(block).last()?;
        if !matches!(
            block.terminator,
            Terminator::FallThrough | Terminator::CondJump | Terminator::CondTailCall { .. }
        ) {
            return None;
        }
        let next = f.block_at(tail.end())?;
        edges.push((tail.addr().get(), tail.end().get()));
        b = next.0 as usize;
        if b > last {
            return None;
        }
    }
    Some(edges)
}

fn is_return(program: &Program, addr: u64) -> bool {
    program
        .function_containing(rivet_elf::Vaddr(addr))
        .and_then(|f| {
            let i = f.insts.partition_point(|i| i.addr().get() < addr);
            f.insts.get(i).filter(|i| i.addr().get() == addr)
        })
        .is_some_and(|i| i.flow() == Flow::Return)
}

/// The fall-through edge (branch, next block) of the conditional branch at `addr`, as
/// offsets in its function, when it ends a block of a simple function.
fn not_taken_edge(program: &Program, addr: u64) -> Option<(&Function, u64, u64)> {
    let f = program
        .function_containing(rivet_elf::Vaddr(addr))
        .filter(|f| f.is_simple())?;
    let b = block_holding(f, addr)?;
    let tail = f.block_insts(&f.blocks[b]).last()?;
    if tail.addr().get() != addr || !matches!(tail.flow(), Flow::CondJump { .. }) {
        return None;
    }
    f.block_at(tail.end())?;
    let base = f.range.start.get();
    Some((f, addr - base, tail.end().get() - base))
}

/// True when the profile of `source` holds branches rather than samples.
pub fn is_branch_profile(agg: &Aggregated, source: PerfSource) -> bool {
    match source {
        PerfSource::BranchStacks => agg.has_branch_stacks,
        PerfSource::Trace => true,
        PerfSource::Spe => agg.spe_branches > 0,
        PerfSource::Samples => false,
    }
}

/// The profile of `program` from `agg` read as `source`, with `names` the profile names of
/// its functions.
pub fn to_profile(
    program: &Program,
    names: &[String],
    agg: &Aggregated,
    source: PerfSource,
    build_id: Option<String>,
    binary_name: Option<String>,
) -> (Profile, AggregateReport) {
    let mut report = AggregateReport {
        total_samples: agg.total_samples,
        samples_in_binary: agg.samples.values().sum(),
        ..AggregateReport::default()
    };
    let branch_profile = is_branch_profile(agg, source);
    let mut profile = if branch_profile {
        Profile::new(Mode::Branches)
    } else {
        Profile::new(Mode::Samples {
            events: agg.events.clone(),
        })
    };
    profile.origin = match source {
        PerfSource::BranchStacks if branch_profile => Origin::Lbr,
        PerfSource::Trace => Origin::Trace,
        PerfSource::Spe => Origin::Spe,
        PerfSource::BranchStacks | PerfSource::Samples => Origin::Samples,
    };
    profile.build_id = build_id;
    profile.binary_name = binary_name;
    if !branch_profile {
        for (&addr, &count) in &agg.samples {
            match locate(program, names, addr) {
                Some(at) => profile.add_sample(at, count),
                None => report.outside_functions += count,
            }
        }
        return (profile, report);
    }
    for (&(from, to), &(count, mispreds)) in &agg.branches {
        if is_return(program, from) {
            report.returns_skipped += count;
            continue;
        }
        match (locate(program, names, from), locate(program, names, to)) {
            (Some(a), Some(b)) => {
                report.branches += count;
                profile.add_branch(a, b, count, mispreds);
            }
            _ => report.outside_functions += count,
        }
    }
    for (&to, &count) in &agg.entries {
        if let Some(f) = program.function_containing(rivet_elf::Vaddr(to))
            && f.range.start.get() == to
        {
            profile.add_branch(
                Location::unknown(),
                Location::symbol(names[f.id.0 as usize].clone(), 0),
                count,
                0,
            );
        }
    }
    for (&addr, &count) in &agg.not_taken {
        let Some((f, from, to)) = not_taken_edge(program, addr) else {
            report.not_taken_dropped += count;
            continue;
        };
        report.not_taken += count;
        let name = &names[f.id.0 as usize];
        profile.add_branch(
            Location::symbol(name.clone(), from),
            Location::symbol(name.clone(), to),
            count,
            0,
        );
    }
    for (&(start, end), &count) in &agg.traces {
        report.traces += count;
        let edges = program
            .function_containing(rivet_elf::Vaddr(start))
            .filter(|f| f.is_simple() && f.range.contains(rivet_elf::Vaddr(end)))
            .and_then(|f| Some((f, trace_edges(f, start, end)?)));
        let Some((f, edges)) = edges else {
            report.traces_dropped += count;
            continue;
        };
        let name = &names[f.id.0 as usize];
        let base = f.range.start.get();
        for (from, to) in edges {
            report.fall_throughs += count;
            profile.add_branch(
                Location::symbol(name.clone(), from - base),
                Location::symbol(name.clone(), to - base),
                count,
                0,
            );
        }
    }
    (profile, report)
}
