//! `rivet aggregate`: turn `perf record` data of a binary into a profile of it.
//!
//! perf.data is read through `perf script` (streamed: branch-stack recordings run to
//! gigabytes of text), or a `perf script` text file is read directly (`--perf-script`, e.g.
//! produced elsewhere). Samples are mapped to the binary through the recorded mmap events, so
//! PIE executables and shared libraries work; recordings of another build of the binary are
//! refused (by build-id) unless forced.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use rivet_discover::{DiscoverError, DiscoverOptions, discover};
use rivet_elf::ElfFile;
use rivet_profile::perf::{Aggregator, Segment};
use rivet_profile::{fdata, native};

use crate::error::{UserError, elf_error};
use crate::files::{PendingOutput, map_input};
use crate::profile_use::{FormatArg, hex};

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
    #[arg(long)]
    pub perf_script: bool,
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
    aggregator: &mut Aggregator,
) -> Result<bool, UserError> {
    // `--force` skips perf's check that the file belongs to the user reading it: a server
    // recorded as its own user (PostgreSQL runs as `postgres`) leaves a perf.data that root's
    // `perf script` otherwise refuses, and the user named this file to be read.
    let mut child = Command::new("perf")
        .args([
            "script",
            "--force",
            "--show-mmap-events",
            "--show-task-events",
            "-F",
            fields,
            "-i",
        ])
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

pub fn run(args: &AggregateArgs) -> Result<(), UserError> {
    let mapped = map_input(&args.binary)?;
    let elf = ElfFile::parse(mapped.bytes()).map_err(|e| elf_error(&args.binary, &e))?;
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
    if format == FormatArg::Yaml {
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
    let mut aggregator = Aggregator::new(segments.clone(), paths.clone());
    if args.perf_script {
        feed_perf_script(&args.perf_data, &mut aggregator)?;
    } else if !feed_perf_data(&args.perf_data, "pid,event,ip,brstack", &mut aggregator)? {
        aggregator = Aggregator::new(segments, paths);
        feed_perf_data(&args.perf_data, "pid,event,ip", &mut aggregator)?;
    }
    if aggregator.mappings == 0 {
        return Err(UserError::new(format!(
            "{} holds no mapping of {} ({} samples of other programs)",
            args.perf_data.display(),
            args.binary.display(),
            aggregator.result.total_samples
        ))
        .hint("record the binary you aggregate for (same file, or same build-id)"));
    }
    let program = discover(&elf, &DiscoverOptions { with_cfi: false }).map_err(|e| match e {
        DiscoverError::Elf(e) => elf_error(&args.binary, &e),
    })?;
    let names = rivet_passes::names::profile_names(&program);
    let binary_name = args
        .binary
        .file_name()
        .map(|n| n.to_string_lossy().into_owned());
    let (mut profile, report) = rivet_passes::aggregate::to_profile(
        &program,
        &names,
        &aggregator.result,
        (!build_id.is_empty()).then_some(build_id),
        binary_name,
    );
    // So that the next build of the program can use the profile (fdata has no room for them).
    rivet_passes::stale::add_hashes(&program, &names, &mut profile);
    let text = match format {
        FormatArg::Fdata => fdata::write(&profile).map_err(|e| e.to_string()),
        _ => native::write(&profile).map_err(|e| e.to_string()),
    }
    .map_err(|e| UserError::new(format!("cannot write the profile: {e}")))?;
    let (pending, file) = PendingOutput::create(&args.output)?;
    pending.finish(file, text.as_bytes(), 0o644)?;
    let kind = if aggregator.result.has_branch_stacks {
        "branch stacks"
    } else {
        "samples without branch stacks"
    };
    if args.json {
        let json = serde_json::json!({
            "output": args.output.display().to_string(),
            "branch_stacks": aggregator.result.has_branch_stacks,
            "events": aggregator.result.events,
            "total_samples": report.total_samples,
            "samples_in_binary": report.samples_in_binary,
            "outside_functions": report.outside_functions,
            "branches": report.branches,
            "returns_skipped": report.returns_skipped,
            "traces": report.traces,
            "traces_dropped": report.traces_dropped,
            "fall_throughs": report.fall_throughs,
        });
        println!("{json}");
    } else {
        println!(
            "aggregated {} ({kind}): {} of {} samples in {}",
            args.output.display(),
            report.samples_in_binary,
            report.total_samples,
            args.binary.display()
        );
        if aggregator.result.has_branch_stacks {
            println!(
                "  {} branches, {} fall-throughs from {} traces ({} traces the CFG cannot explain, dropped)",
                report.branches, report.fall_throughs, report.traces, report.traces_dropped
            );
        }
        if report.outside_functions > 0 {
            println!("  {} outside any function", report.outside_functions);
        }
    }
    Ok(())
}
