//! `rivet aggregate`: turn `perf record` data of a binary into a profile of it.
//!
//! perf.data is read through `perf script` (streamed: branch-stack recordings run to
//! gigabytes of text), or a `perf script` text file is read directly (`--perf-script`, e.g.
//! produced elsewhere). Samples are mapped to the binary through the recorded mmap events, so
//! PIE executables and shared libraries work; recordings of another build of the binary are
//! refused (by build-id) unless forced.
//!
//! The source of the samples (branch stacks of LBR or BRBE, a decoded CoreSight ETM or Intel
//! PT trace, Arm SPE, plain samples) is told from the text (`rivet_profile::perf::classify`);
//! `--perf-source` names it when a text holds several. Hardware traces (ETM, SPE) are in
//! perf.data as AUX data that `perf script` decodes only when told what to make of it, so
//! `--itrace` is passed on to it, as perf2bolt does.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use rivet_discover::{CfiRows, DiscoverError, DiscoverOptions, discover};
use rivet_elf::ElfFile;
use rivet_emit::code::AddressMap;
use rivet_passes::output_map::{MapReport, OutputMap};
use rivet_profile::perf::{Aggregator, PerfSource, Segment};
use rivet_profile::{fdata, native};

use crate::error::{UserError, elf_error};
use crate::files::{PendingOutput, map_input};
use crate::profile_use::{FormatArg, hex, recorded_architecture};

/// Which source of samples to read (`--perf-source`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PerfSourceArg {
    /// Tell from the text; a text holding two sources of branches is refused.
    Auto,
    /// Branch stacks (`brstack`): x86 LBR, Arm BRBE, a trace's `--itrace=...l` stacks.
    BranchStacks,
    /// Branch samples of a decoded trace (`--itrace=...b`: CoreSight ETM, Intel PT).
    Trace,
    /// Arm SPE samples (`arm_spe` events).
    Spe,
    /// Plain IP samples, whatever branch information the text holds.
    Samples,
}

impl PerfSourceArg {
    fn source(self) -> Option<PerfSource> {
        match self {
            PerfSourceArg::Auto => None,
            PerfSourceArg::BranchStacks => Some(PerfSource::BranchStacks),
            PerfSourceArg::Trace => Some(PerfSource::Trace),
            PerfSourceArg::Spe => Some(PerfSource::Spe),
            PerfSourceArg::Samples => Some(PerfSource::Samples),
        }
    }
}

/// The `perf script` fields read from a trace decoded with `--itrace` (the branch stack when
/// perf has one: `l` synthesizes it), in the order perf prints them.
const TRACE_FIELDS: &str = "pid,tid,event,flags,ip,addr,brstack";
const TRACE_FIELDS_WITHOUT_STACKS: &str = "pid,tid,event,flags,ip,addr";

#[derive(clap::Args, Debug)]
pub struct AggregateArgs {
    /// perf.data recorded while the binary ran (`perf record -e cycles:u -j any,u`, or plain
    /// `-e cpu-clock:u` samples).
    pub perf_data: PathBuf,
    /// The binary (executable or shared library) the profile is for.
    pub binary: PathBuf,
    /// Where to write the profile.
    #[arg(short = 'o', long = "output")]
    pub output: PathBuf,
    /// Output format (default: fdata for a .fdata output, else Rivet's).
    #[arg(long, value_enum)]
    pub format: Option<FormatArg>,
    /// The input is `perf script` text (with --show-mmap-events, fields pid,event,ip and
    /// optionally brstack; with --show-task-events too if the program forks), not perf.data.
    /// For traces and SPE: fields pid,tid,event,flags,ip,addr[,brstack] (see the guide).
    #[arg(long)]
    pub perf_script: bool,
    /// The source of the samples, when the text holds several (default: told from the text).
    #[arg(long, value_enum, default_value = "auto")]
    pub perf_source: PerfSourceArg,
    /// Decode the hardware trace in perf.data (CoreSight ETM, Arm SPE, Intel PT) with these
    /// `perf script --itrace` options, e.g. `b` (every branch) or `i1il64` (branch stacks).
    #[arg(long, value_name = "OPTIONS", conflicts_with = "perf_script")]
    pub itrace: Option<String>,
    /// BINARY is Rivet's output and this is the binary it was made from: the samples of the
    /// output are mapped back through its block address translation (`.rivet.bat`) and the
    /// profile is written for ORIGINAL (its build-id), so `rivet optimize ORIGINAL` takes it.
    #[arg(long, value_name = "ORIGINAL")]
    pub original: Option<PathBuf>,
    /// Accept a recording of another build of the binary (build-ids differ).
    #[arg(long)]
    pub force: bool,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Paths under which the recording names the binary: the build-ids perf stored, else the path.
fn recorded_paths(args: &AggregateArgs, build_id: &str) -> Result<Vec<String>, UserError> {
    let mut paths = vec![];
    for p in [
        std::fs::canonicalize(&args.binary).ok(),
        std::path::absolute(&args.binary).ok(),
    ]
    .into_iter()
    .flatten()
    {
        paths.push(p.to_string_lossy().into_owned());
    }
    if args.perf_script {
        return Ok(paths);
    }
    let out = Command::new("perf")
        .args(["buildid-list", "-i"])
        .arg(&args.perf_data)
        .stderr(Stdio::null())
        .output()
        .map_err(|e| {
            UserError::new(format!("cannot run perf: {e}"))
                .hint("install perf (Debian: apt-get install linux-perf)")
        })?;
    let mut other_build = None;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some((id, path)) = line.split_once(' ') else {
            continue;
        };
        let path = path.trim().to_string();
        if id == build_id {
            if !paths.contains(&path) {
                paths.push(path);
            }
        } else if paths.contains(&path) {
            other_build = Some((path, id.to_string()));
        }
    }
    if let Some((path, id)) = other_build
        && !args.force
        && !build_id.is_empty()
    {
        return Err(UserError::new(format!(
            "{} was recorded with another build of {path} (build-id {id}, this one is {build_id})",
            args.perf_data.display()
        ))
        .hint("record the binary you optimize, or pass --force to use the samples anyway"));
    }
    Ok(paths)
}

fn feed_perf_script(path: &Path, aggregator: &mut Aggregator) -> Result<(), UserError> {
    let file = std::fs::File::open(path).map_err(|e| {
        UserError::new(format!("cannot read {}: {e}", path.display()))
            .hint("check the path and its permissions")
    })?;
    for line in BufReader::new(file).lines() {
        let line = line.map_err(|e| UserError::new(format!("reading {}: {e}", path.display())))?;
        aggregator.feed(&line);
    }
    Ok(())
}

/// Runs `perf script` on `perf_data` with `fields`; false when perf says the fields are not
/// recorded (no branch stacks).
fn feed_perf_data(
    perf_data: &Path,
    fields: &str,
    itrace: Option<&str>,
    aggregator: &mut Aggregator,
) -> Result<bool, UserError> {
    // `--force` skips perf's check that the file belongs to the user reading it: a server
    // recorded as its own user (PostgreSQL runs as `postgres`) leaves a perf.data that root's
    // `perf script` otherwise refuses, and the user named this file to be read.
    let mut command = Command::new("perf");
    command.args([
        "script",
        "--force",
        "--show-mmap-events",
        "--show-task-events",
        "-F",
        fields,
    ]);
    if let Some(options) = itrace {
        command.arg(format!("--itrace={options}"));
    }
    let mut child = command
        .arg("-i")
        .arg(perf_data)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            UserError::new(format!("cannot run perf: {e}"))
                .hint("install perf (Debian: apt-get install linux-perf)")
        })?;
    let stdout = child.stdout.take().expect("piped");
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        aggregator.feed(&line);
    }
    let out = child
        .wait_with_output()
        .map_err(|e| UserError::new(format!("perf script: {e}")))?;
    if out.status.success() {
        return Ok(true);
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("BRANCH_STACK") || stderr.contains("brstack") {
        return Ok(false);
    }
    Err(UserError::new(format!(
        "perf script failed on {}: {}",
        perf_data.display(),
        stderr
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .trim()
    ))
    .hint("check that the file is a perf.data recording (perf record -o FILE ...)"))
}

/// The map from `output` back to `original`, after checking that the one was made from the
/// other: the build-id the output records, and the blocks its translation table names.
fn output_map<'p>(
    program: &'p rivet_ir::Program,
    original: &ElfFile<'_>,
    original_path: &Path,
    output: &ElfFile<'_>,
    output_path: &Path,
) -> Result<OutputMap<'p>, UserError> {
    let mismatch = |why: String| {
        UserError::new(format!(
            "{} was not made from {}: {why}",
            output_path.display(),
            original_path.display()
        ))
        .hint("give as --original the binary `rivet optimize` read to write this output")
    };
    if let (Some(recorded), Some(id)) = (
        crate::files::recorded_input_build_id(output),
        original.build_id(),
    ) && recorded != id
    {
        return Err(mismatch(format!(
            "it records the input's build-id {}, this one is {}",
            hex(recorded),
            hex(id)
        )));
    }
    let bat = output
        .section_by_name(rivet_emit::bat::SECTION)
        .ok_or_else(|| mismatch(format!("it has no {}", rivet_emit::bat::SECTION)))?;
    let pairs = rivet_emit::bat::decode(bat.data)
        .map_err(|e| UserError::new(format!("{}: {e}", output_path.display())))?;
    let map = AddressMap::from_blocks(program, &pairs, output).ok_or_else(|| {
        mismatch(format!(
            "its {} names blocks {} does not have",
            rivet_emit::bat::SECTION,
            original_path.display()
        ))
    })?;
    Ok(OutputMap::new(program, map.instruction_pairs()))
}

pub fn run(args: &AggregateArgs) -> Result<(), UserError> {
    let mapped = map_input(&args.binary)?;
    let elf = ElfFile::parse(mapped.bytes()).map_err(|e| elf_error(&args.binary, &e))?;
    let is_output = crate::files::is_rivet_output(&elf);
    if is_output && args.original.is_none() {
        return Err(UserError::new(format!(
            "{} is Rivet's output: a profile of it is of no use to `rivet optimize`",
            args.binary.display()
        ))
        .hint(format!(
            "map the samples back to the binary it was made from: rivet aggregate --original ORIGINAL {} {} -o {}",
            args.perf_data.display(),
            args.binary.display(),
            args.output.display()
        )));
    }
    if !is_output && let Some(original) = &args.original {
        return Err(UserError::new(format!(
            "{} is not Rivet's output (no {} section), so --original {} has nothing to map",
            args.binary.display(),
            rivet_emit::bat::SECTION,
            original.display()
        ))
        .hint("give the binary `rivet optimize` wrote, whose samples these are"));
    }
    if !args.perf_script {
        let head = std::fs::read(&args.perf_data)
            .map(|b| b.get(..8).map(<[u8]>::to_vec).unwrap_or_default())
            .map_err(|e| {
                UserError::new(format!("cannot read {}: {e}", args.perf_data.display()))
                    .hint("give the perf.data file perf record wrote")
            })?;
        if !head.starts_with(b"PERFILE") {
            return Err(UserError::new(format!(
                "{} is not a perf.data file",
                args.perf_data.display()
            ))
            .hint("for `perf script` text pass --perf-script"));
        }
    }
    let format =
        args.format
            .unwrap_or_else(|| match args.output.extension().and_then(|e| e.to_str()) {
                Some("fdata") => FormatArg::Fdata,
                _ => FormatArg::Rivet,
            });
    if matches!(format, FormatArg::Yaml | FormatArg::Counters) {
        return Err(UserError::new("aggregate writes Rivet profiles or fdata")
            .hint("use --format rivet or fdata"));
    }
    let build_id = hex(elf.build_id().unwrap_or_default());
    let paths = recorded_paths(args, &build_id)?;
    let segments: Vec<Segment> = elf
        .segments()
        .iter()
        .filter(|s| s.is_load())
        .map(|s| Segment {
            vaddr: s.vaddr.get(),
            offset: s.offset.0,
            filesz: s.filesz,
        })
        .collect();
    let new_aggregator = || {
        let aggregator = Aggregator::new(segments.clone(), paths.clone());
        match args.perf_source.source() {
            Some(source) => aggregator.with_source(source),
            None => aggregator,
        }
    };
    let mut aggregator = new_aggregator();
    let itrace = args.itrace.as_deref();
    let (fields, fields_without_stacks) = match itrace {
        Some(_) => (TRACE_FIELDS, TRACE_FIELDS_WITHOUT_STACKS),
        None => ("pid,event,ip,brstack", "pid,event,ip"),
    };
    if args.perf_script {
        feed_perf_script(&args.perf_data, &mut aggregator)?;
    } else if !feed_perf_data(&args.perf_data, fields, itrace, &mut aggregator)? {
        aggregator = new_aggregator();
        feed_perf_data(
            &args.perf_data,
            fields_without_stacks,
            itrace,
            &mut aggregator,
        )?;
    }
    if aggregator.records == 0 {
        return Err(UserError::new(format!(
            "{} holds no perf samples or mmap events: it is not `perf script` output",
            args.perf_data.display()
        ))
        .hint("make it with `perf script --show-mmap-events --show-task-events -F pid,tid,event,flags,ip,addr,brstack` (add --itrace=... for an ETM or SPE recording), or give perf.data without --perf-script"));
    }
    let source = aggregator.result.source().map_err(|mixed| {
        let names: Vec<&str> = mixed.0.iter().map(|s| s.name()).collect();
        UserError::new(format!(
            "{} mixes samples of {}: Rivet makes a profile from one source",
            args.perf_data.display(),
            names.join(" and ")
        ))
        .hint(format!(
            "name the one to read with --perf-source {}",
            names[0]
        ))
    })?;
    if aggregator.mappings == 0 {
        return Err(UserError::new(format!(
            "{} holds no mapping of {} ({} samples of other programs)",
            args.perf_data.display(),
            args.binary.display(),
            aggregator.result.total_samples
        ))
        .hint(if aggregator.result.total_samples == 0 && args.itrace.is_none() && !args.perf_script {
            "record the binary you aggregate for; for an ETM or SPE recording pass --itrace (e.g. --itrace=b)"
        } else {
            "record the binary you aggregate for (same file, or same build-id)"
        }));
    }
    // The binary the profile is for: the input itself, or the original of an output.
    let original_mapped = args.original.as_deref().map(map_input).transpose()?;
    let original_elf = match (&args.original, &original_mapped) {
        (Some(path), Some(m)) => Some(ElfFile::parse(m.bytes()).map_err(|e| elf_error(path, &e))?),
        _ => None,
    };
    let profiled_path = args.original.as_deref().unwrap_or(&args.binary);
    let profiled_elf = original_elf.as_ref().unwrap_or(&elf);
    let program = discover(profiled_elf, &DiscoverOptions::with_cfi(CfiRows::Ignore)).map_err(
        |e| match e {
            DiscoverError::Elf(e) => elf_error(profiled_path, &e),
        },
    )?;
    let mut mapping: Option<MapReport> = None;
    let translated;
    let samples = if args.original.is_some() {
        let map = output_map(&program, profiled_elf, profiled_path, &elf, &args.binary)?;
        let (t, report) = map.translate_aggregated(&aggregator.result);
        translated = t;
        mapping = Some(report);
        &translated
    } else {
        &aggregator.result
    };
    let names = rivet_passes::names::profile_names(&program);
    let binary_name = profiled_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned());
    let profiled_build_id = hex(profiled_elf.build_id().unwrap_or_default());
    let (mut profile, report) = rivet_passes::aggregate::to_profile(
        &program,
        &names,
        samples,
        source,
        (!profiled_build_id.is_empty()).then_some(profiled_build_id),
        binary_name,
    );
    profile.architecture = recorded_architecture(profiled_elf);
    // So that the next build of the program can use the profile (fdata has no room for them).
    rivet_passes::stale::add_hashes(&program, &names, &mut profile);
    let text = match format {
        FormatArg::Fdata => fdata::write(&profile).map_err(|e| e.to_string()),
        _ => native::write(&profile).map_err(|e| e.to_string()),
    }
    .map_err(|e| UserError::new(format!("cannot write the profile: {e}")))?;
    let (pending, file) = PendingOutput::create(&args.output)?;
    pending.finish(file, text.as_bytes(), 0o644)?;
    let result = &aggregator.result;
    let branch_profile = rivet_passes::aggregate::is_branch_profile(result, source);
    let kind = match source {
        PerfSource::Trace => "trace branches, every one counted",
        PerfSource::Spe if branch_profile => "SPE branch samples",
        PerfSource::Spe => "SPE samples without branches",
        _ if branch_profile => "branch stacks",
        _ => "samples without branch stacks",
    };
    if args.json {
        let json = serde_json::json!({
            "output": args.output.display().to_string(),
            "branch_stacks": result.has_branch_stacks,
            "events": result.events,
            "total_samples": report.total_samples,
            "samples_in_binary": report.samples_in_binary,
            "outside_functions": report.outside_functions,
            "branches": report.branches,
            "returns_skipped": report.returns_skipped,
            "traces": report.traces,
            "traces_dropped": report.traces_dropped,
            "fall_throughs": report.fall_throughs,
            "source": source.name(),
            "not_taken": report.not_taken,
            "not_taken_dropped": report.not_taken_dropped,
            "spe_branches_without_outcome": result.spe_branches_without_outcome,
            "samples_of_other_sources": result.samples_of_other_sources,
            "mapped_back": mapping.as_ref().map(|m| serde_json::json!({
                "original": args.original.as_ref().map(|p| p.display().to_string()),
                "samples": m.samples,
                "samples_mapped": m.samples_mapped,
                "samples_share": m.samples_share(),
                "samples_in_forwarding_jumps": m.samples_in_forwarding_jumps,
                "branches": m.branches,
                "branches_mapped": m.branches_mapped,
                "forwarding_jumps": m.forwarding_jumps,
                "traces": m.traces,
                "traces_mapped": m.traces_mapped,
                "trace_cuts": m.trace_cuts,
            })),
        });
        println!("{json}");
    } else {
        println!(
            "aggregated {} ({kind}): {} of {} samples in {}",
            args.output.display(),
            report.samples_in_binary,
            report.total_samples,
            profiled_path.display()
        );
        if let Some(m) = &mapping {
            println!(
                "  mapped back from {}: {} of {} samples ({:.2}%), {} of {} branches; {} straight runs cut at {} edges",
                args.binary.display(),
                m.samples_mapped,
                m.samples,
                100.0 * m.samples_share(),
                m.branches_mapped,
                m.branches,
                m.traces_mapped,
                m.trace_cuts
            );
        }
        if branch_profile {
            println!(
                "  {} branches, {} fall-throughs from {} traces ({} traces the CFG cannot explain, dropped)",
                report.branches, report.fall_throughs, report.traces, report.traces_dropped
            );
        }
        if report.not_taken + report.not_taken_dropped > 0 {
            println!(
                "  {} fall-throughs from branches seen not taken ({} not at a conditional branch of a block, dropped)",
                report.not_taken, report.not_taken_dropped
            );
        }
        if result.spe_branches_without_outcome > 0 {
            println!(
                "  {} SPE branch samples do not say whether they were taken (no flags field or branch stack): read as taken",
                result.spe_branches_without_outcome
            );
        }
        if result.samples_of_other_sources > 0 {
            println!(
                "  {} samples of sources other than {} left out",
                result.samples_of_other_sources,
                source.name()
            );
        }
        if report.outside_functions > 0 {
            println!("  {} outside any function", report.outside_functions);
        }
    }
    Ok(())
}
