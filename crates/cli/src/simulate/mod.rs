//! `rivet simulate BINARY -- ARGS...`: deterministic front-end counts of one run, for any
//! x86-64 or AArch64 program, on this host, without the program's hardware.
//!
//! The program runs under qemu-user with `-d in_asm,exec,nochain,page`: qemu lists each
//! block of guest code it translates (address and bytes of every instruction) and logs each
//! execution of a block. The log goes through a named pipe into [`qemu_log`], which reads it
//! as it comes (it is gigabytes for a run of seconds, and never stored), and [`replay`] plays
//! every executed block through the model: executed instructions, taken branches, an L1
//! instruction cache (true LRU; Neoverse N1's geometry for AArch64 by default, cachegrind's
//! for x86-64, any geometry with `--icache`), a fully associative cache of the same size,
//! and a fully associative LRU iTLB. The set-associative counts are taken at several
//! placements of the program's code against the libraries' (`--placements`): one layout's
//! miss count near a cache's capacity is a draw of where its lines fall in the sets
//! (docs/icache-offsets.md), so layouts are compared over placements, or fully associative.
//!
//! What this says nothing about: branch prediction, decode, the micro-op cache, prefetching,
//! the L2 and the unified TLB, data accesses, timing (docs/simulate.md). The counts of
//! instructions and I1 misses agree with cachegrind's on the same x86-64 run
//! (`tests/simulate_cli.rs` checks it).

mod cache;
mod qemu_log;
mod replay;

use std::collections::HashMap;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read as _, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use rivet_arch::{CacheGeometry, FetchModel, Isa, TlbGeometry};
use rivet_elf::ElfFile;

use crate::error::{UserError, elf_error};
use crate::files::map_input;

use qemu_log::{Block, Event, LogReader};
use replay::{Counts, Geometry, Replay};

#[derive(clap::Args, Debug)]
#[command(after_help = "\
Runs BINARY once under qemu-user and replays every instruction it executed (libraries and \
the dynamic loader included) through a model of the core's fetch: executed instructions, \
taken branches, L1 instruction cache misses (set-associative, LRU, at several placements of \
BINARY's code against the libraries; and fully associative), iTLB misses. Counts are \
deterministic for a deterministic program. Only one process is traced; it should be \
single-threaded (the threads' blocks would interleave in one trace).

Examples:
  rivet simulate ./lua.aarch64 -- bench.lua
  rivet simulate ./sqlite3 --stdin queries.sql --placements 8 --json
  rivet simulate ./app --icache 32768,8,64 --runner 'qemu-aarch64 -L /usr/aarch64-linux-gnu -E LD_LIBRARY_PATH=lib'")]
pub struct SimulateArgs {
    /// The program to run (an x86-64 or AArch64 ELF executable).
    pub binary: PathBuf,
    /// Its arguments, after `--`.
    #[arg(last = true, value_name = "ARGS")]
    pub args: Vec<OsString>,
    /// The qemu-user command that runs it, split into words as a shell splits them (quotes,
    /// backslashes; no expansions), as `rivet auto` and `rivet bench` take theirs; `-d`, `-D`
    /// and the program are added [default: qemu-aarch64 -L /usr/aarch64-linux-gnu, or
    /// qemu-x86_64].
    #[arg(long, value_name = "COMMAND")]
    pub runner: Option<String>,
    /// The program's standard input [default: empty].
    #[arg(long, value_name = "FILE")]
    pub stdin: Option<PathBuf>,
    /// Where the program's standard output goes [default: discarded].
    #[arg(long, value_name = "FILE")]
    pub stdout: Option<PathBuf>,
    /// L1 instruction cache geometry in bytes, as cachegrind's --I1 [default: the ISA's,
    /// 65536,4,64 (Neoverse N1) for AArch64, 32768,8,64 for x86-64].
    #[arg(long, value_name = "SIZE,WAYS,LINE")]
    pub icache: Option<String>,
    /// Instruction TLB: entries (fully associative, LRU) and page size in bytes [default:
    /// 48,4096 for AArch64 (Neoverse N1), 128,4096 for x86-64].
    #[arg(long, value_name = "ENTRIES,PAGE")]
    pub itlb: Option<String>,
    /// Placements of the program's code at which the set-associative counts are taken.
    #[arg(long, default_value_t = 16, value_name = "K")]
    pub placements: u64,
    /// Bytes between placements, a multiple of the line size [default: the cache's way size
    /// (size / ways) divided by K, so the placements cover every set once].
    #[arg(long, value_name = "BYTES")]
    pub placement_step: Option<u64>,
    /// The program's code that placements move, as START..END link-time addresses in hex
    /// (e.g. its hot text); repeatable [default: all its executable segments, unless
    /// --shift-section is given].
    #[arg(long, value_name = "START..END")]
    pub shift_range: Vec<String>,
    /// The program's sections whose code placements move, by name (e.g. `.text`, where both
    /// Rivet and BOLT put the code they move); repeatable, and adds to --shift-range.
    #[arg(long, value_name = "NAME")]
    pub shift_section: Vec<String>,
    /// Have qemu translate one instruction per block (its -singlestep): much slower, the
    /// same counts; a check of the block listings.
    #[arg(long)]
    pub one_insn_per_tb: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &SimulateArgs) -> Result<(), UserError> {
    let mapped = map_input(&args.binary)?;
    let elf = ElfFile::parse(mapped.bytes()).map_err(|e| elf_error(&args.binary, &e))?;
    let isa = Isa::of(&elf);
    let mut model = isa.default_fetch_model();
    if let Some(spec) = &args.icache {
        model.icache = parse_icache(spec)?;
    }
    if let Some(spec) = &args.itlb {
        model.itlb = parse_itlb(spec)?;
    }
    let geometry = geometry_of(&model)?;
    let shifts = shifts(args, &model)?;
    let ranges = shift_ranges(args, &elf)?;
    let code_start = elf
        .segments()
        .iter()
        .filter(|s| s.is_load() && s.is_exec())
        .map(|s| s.vaddr.0)
        .min()
        .ok_or_else(|| {
            UserError::new(format!(
                "{} has no executable segment",
                args.binary.display()
            ))
            .hint("give a linked executable")
        })?;
    drop(elf);
    drop(mapped);

    let runner: Vec<String> = match &args.runner {
        Some(r) => crate::run_prefix::split_words(r).map_err(|why| {
            UserError::new(format!("--runner {r:?}: {why}"))
                .hint("quote a word with spaces as in a shell, e.g. --runner \"qemu-aarch64 -L '/opt/my sysroot'\"")
        })?,
        None => isa
            .qemu_user_command()
            .iter()
            .map(|s| s.to_string())
            .collect(),
    };
    if runner.is_empty() {
        return Err(UserError::new("--runner is empty")
            .hint("give a qemu-user command, e.g. --runner qemu-aarch64"));
    }
    let trace = traced_run(args, &runner, |reader| {
        replay_log(reader, geometry, &shifts, &ranges, code_start)
    })?;
    let text = report(args, isa, &model, &trace);
    std::io::stdout().write_all(text.as_bytes()).map_err(|e| {
        UserError::new(format!("cannot write the report: {e}"))
            .hint("check where standard output goes")
    })
}

/// What a traced run gave.
#[derive(Debug)]
struct Trace {
    counts: Counts,
    /// Blocks that ran without a listing, and blocks the disassembler could not list whole.
    unlisted_runs: u64,
    short_listings: u64,
}

fn parse_numbers<const N: usize>(
    spec: &str,
    what: &str,
    form: &str,
) -> Result<[u64; N], UserError> {
    let bad = || {
        UserError::new(format!("bad {what} `{spec}`"))
            .hint(format!("write it as {form}, numbers in bytes"))
    };
    let numbers: Vec<u64> = spec
        .split(',')
        .map(|n| n.trim().parse::<u64>())
        .collect::<Result<_, _>>()
        .map_err(|_| bad())?;
    numbers.try_into().map_err(|_| bad())
}

fn parse_icache(spec: &str) -> Result<CacheGeometry, UserError> {
    let [size, ways, line] =
        parse_numbers::<3>(spec, "--icache", "SIZE,WAYS,LINE (e.g. 65536,4,64)")?;
    Ok(CacheGeometry { size, ways, line })
}

fn parse_itlb(spec: &str) -> Result<TlbGeometry, UserError> {
    let [entries, page] = parse_numbers::<2>(spec, "--itlb", "ENTRIES,PAGE (e.g. 48,4096)")?;
    Ok(TlbGeometry { entries, page })
}

/// The model's geometry in the replay's terms, or why it cannot be modelled.
fn geometry_of(model: &FetchModel) -> Result<Geometry, UserError> {
    let CacheGeometry { size, ways, line } = model.icache;
    let bad = |why: &str| {
        UserError::new(format!(
            "cannot model a cache of {size} bytes, {ways} ways, {line}-byte lines: {why}"
        ))
        .hint("use a power-of-two line size and number of sets, e.g. --icache 65536,4,64")
    };
    if !line.is_power_of_two() || line < 4 {
        return Err(bad("the line size must be a power of two of at least 4"));
    }
    if ways == 0 || size == 0 || !size.is_multiple_of(ways * line) {
        return Err(bad("the size must be a whole number of sets of WAYS lines"));
    }
    let sets = size / (ways * line);
    if !sets.is_power_of_two() {
        return Err(bad("the number of sets must be a power of two"));
    }
    if ways * sets > 1 << 24 {
        return Err(bad("more than 16 M lines"));
    }
    let TlbGeometry { entries, page } = model.itlb;
    if !page.is_power_of_two() || page < line || entries == 0 || entries > 1 << 16 {
        return Err(UserError::new(format!(
            "cannot model a TLB of {entries} entries of {page}-byte pages"
        ))
        .hint("use 1 to 65536 entries and a power-of-two page at least a line long, e.g. --itlb 48,4096"));
    }
    Ok(Geometry {
        line_bits: line.trailing_zeros(),
        sets,
        ways,
        page_bits: page.trailing_zeros(),
        tlb_entries: entries,
    })
}

/// The placements' shifts in bytes.
fn shifts(args: &SimulateArgs, model: &FetchModel) -> Result<Vec<u64>, UserError> {
    let k = args.placements;
    if !(1..=256).contains(&k) {
        return Err(UserError::new(format!("--placements {k}: give 1 to 256")));
    }
    let line = model.icache.line;
    let way_size = model.icache.size / model.icache.ways;
    let step = match args.placement_step {
        Some(step) => step,
        None => (way_size / k / line).max(1) * line,
    };
    if !step.is_multiple_of(line) {
        return Err(UserError::new(format!(
            "--placement-step {step} is not a multiple of the {line}-byte line"
        ))
        .hint(
            "a placement moves whole lines, so that each instruction keeps its place in its line",
        ));
    }
    Ok((0..k).map(|i| i * step).collect())
}

/// The link-time address ranges placements move.
fn shift_ranges(args: &SimulateArgs, elf: &ElfFile<'_>) -> Result<Vec<(u64, u64)>, UserError> {
    if args.shift_range.is_empty() && args.shift_section.is_empty() {
        return Ok(elf
            .segments()
            .iter()
            .filter(|s| s.is_load() && s.is_exec())
            .map(|s| (s.vaddr.0, s.vaddr.0 + s.memsz))
            .collect());
    }
    let mut ranges = Vec::new();
    for name in &args.shift_section {
        let section = elf.section_by_name(name).ok_or_else(|| {
            let names: Vec<String> = elf
                .sections()
                .iter()
                .filter(|s| s.is_exec())
                .map(|s| s.name.to_string())
                .collect();
            UserError::new(format!("{} has no section {name}", args.binary.display()))
                .hint(format!("its code sections: {}", names.join(", ")))
        })?;
        if section.size > 0 {
            ranges.push((section.addr.0, section.addr.0 + section.size));
        }
    }
    let given: Vec<(u64, u64)> = args
        .shift_range
        .iter()
        .map(|spec| {
            let parse = |s: &str| u64::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok();
            match spec.split_once("..").map(|(a, b)| (parse(a), parse(b))) {
                Some((Some(a), Some(b))) if a < b => Ok((a, b)),
                _ => Err(UserError::new(format!("bad --shift-range `{spec}`"))
                    .hint("write START..END in hex, e.g. 0x401000..0x40a000 (`readelf -S` shows the sections)")),
            }
        })
        .collect::<Result<_, _>>()?;
    ranges.extend(given);
    Ok(ranges)
}

/// Plays the log through the model.
fn replay_log(
    reader: impl std::io::BufRead,
    geometry: Geometry,
    shifts: &[u64],
    ranges: &[(u64, u64)],
    code_start: u64,
) -> Result<Trace, UserError> {
    let mut log = LogReader::new(reader);
    let mut blocks: HashMap<u64, (Block, bool)> = HashMap::new();
    let mut replay: Option<Replay> = None;
    let mut unlisted_runs = 0;
    let mut short_listings = 0;
    let read_error = |e: std::io::Error| {
        UserError::new(format!("reading qemu's log: {e}"))
            .hint("check that the runner is qemu-user")
    };
    while let Some(event) = log.next_event().map_err(read_error)? {
        match event {
            Event::StartCode(start) => {
                // Only the first: the main program's, printed before it runs.
                if replay.is_none() {
                    let bias = start.wrapping_sub(code_start);
                    let moved = ranges
                        .iter()
                        .map(|&(a, b)| (a.wrapping_add(bias), b.wrapping_add(bias)))
                        .collect();
                    replay = Some(Replay::new(geometry, shifts, moved));
                }
            }
            Event::Translated(block) => {
                blocks.insert(block.start, (block, false));
            }
            Event::Unlisted => short_listings += 1,
            Event::Executed(pc) => {
                let Some(replay) = replay.as_mut() else {
                    return Err(UserError::new(
                        "qemu's log shows code running before the program's layout (`start_code`)",
                    )
                    .hint(
                        "the runner must be qemu-user 7.2 or later, which prints it with -d page",
                    ));
                };
                match blocks.get_mut(&pc) {
                    Some((block, ran)) => {
                        replay.execute(block, !*ran);
                        *ran = true;
                    }
                    None => unlisted_runs += 1,
                }
            }
        }
    }
    let Some(replay) = replay else {
        return Err(UserError::new("qemu's log has no trace of the run").hint(
            "the runner must be qemu-user (it is given -d in_asm,exec,nochain,page -D FILE)",
        ));
    };
    let counts = replay.counts();
    if counts.instructions == 0 {
        return Err(UserError::new("qemu's log lists no executed instruction")
            .hint("qemu may have been built without a disassembler (capstone): check `-d in_asm` by hand"));
    }
    Ok(Trace {
        counts,
        unlisted_runs,
        short_listings,
    })
}

/// A private scratch directory, removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs the program under `runner` with its log in a named pipe, which `consume` reads
/// while it runs.
fn traced_run(
    args: &SimulateArgs,
    runner: &[String],
    consume: impl FnOnce(BufReader<File>) -> Result<Trace, UserError>,
) -> Result<Trace, UserError> {
    let base = std::env::temp_dir();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let dir = base.join(format!("rivet-simulate-{}-{nanos}", std::process::id()));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| {
            UserError::new(format!(
                "cannot create a directory in {}: {e}",
                base.display()
            ))
            .hint("set TMPDIR to a writable directory")
        })?;
    let scratch = Scratch(dir);
    let fifo = scratch.0.join("qemu.log");
    nix::unistd::mkfifo(&fifo, Mode::S_IRUSR | Mode::S_IWUSR).map_err(|e| {
        UserError::new(format!(
            "cannot make a named pipe in {}: {e}",
            scratch.0.display()
        ))
        .hint("set TMPDIR to a local directory")
    })?;
    let stderr_path = scratch.0.join("stderr");
    let stderr = File::create(&stderr_path)
        .map_err(|e| UserError::new(format!("cannot write {}: {e}", stderr_path.display())))?;
    let stdin = match &args.stdin {
        Some(path) => Stdio::from(File::open(path).map_err(|e| {
            UserError::new(format!("cannot read {}: {e}", path.display()))
                .hint("give --stdin an existing file")
        })?),
        None => Stdio::null(),
    };
    let stdout = match &args.stdout {
        Some(path) => Stdio::from(File::create(path).map_err(|e| {
            UserError::new(format!("cannot write {}: {e}", path.display()))
                .hint("give --stdout a path in a writable directory")
        })?),
        None => Stdio::null(),
    };
    let mut command = Command::new(&runner[0]);
    command.args(&runner[1..]);
    if args.one_insn_per_tb {
        // qemu 7.2's spelling (later versions call it -one-insn-per-tb).
        command.arg("-singlestep");
    }
    command
        .args(["-d", "in_asm,exec,nochain,page", "-D"])
        .arg(&fifo)
        .arg(&args.binary)
        .args(&args.args)
        .stdin(stdin)
        .stdout(stdout)
        .stderr(stderr);
    let mut child = command.spawn().map_err(|e| {
        UserError::new(format!("cannot run {}: {e}", runner[0]))
            .hint("install qemu-user (apt-get install qemu-user) or give --runner")
    })?;
    // qemu opens the pipe as it starts. Should it exit first (a bad option), opening the
    // pipe for reading would wait forever: once it has exited, this thread opens the pipe
    // for writing until the reader is past its own open, so the reader sees the end.
    let done = Arc::new(AtomicBool::new(false));
    let waiter = {
        let done = Arc::clone(&done);
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let status = child.wait();
            while !done.load(Ordering::Acquire) {
                let unblocked = OpenOptions::new()
                    .write(true)
                    .custom_flags(OFlag::O_NONBLOCK.bits())
                    .open(&fifo);
                if unblocked.is_ok() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            status
        })
    };
    let opened = File::open(&fifo);
    let result = opened
        .map_err(|e| UserError::new(format!("cannot read qemu's log pipe: {e}")))
        .and_then(|file| consume(BufReader::with_capacity(1 << 20, file)));
    done.store(true, Ordering::Release);
    let status = waiter
        .join()
        .map_err(|_| UserError::new("waiting for qemu failed"))?
        .map_err(|e| UserError::new(format!("waiting for qemu: {e}")))?;
    if !status.success() {
        return Err(UserError::new(format!(
            "{} exited with {status} under {}{}",
            args.binary.display(),
            runner[0],
            stderr_tail(&stderr_path)
        ))
        .hint(format!(
            "try it by hand: {} {} ...; a workload that fails measures nothing",
            runner.join(" "),
            args.binary.display()
        )));
    }
    result
}

/// The last lines the run printed on standard error, quoted for an error message.
fn stderr_tail(path: &Path) -> String {
    let mut text = String::new();
    if File::open(path)
        .and_then(|mut f| f.read_to_string(&mut text))
        .is_err()
        || text.trim().is_empty()
    {
        return String::new();
    }
    let lines: Vec<&str> = text.trim_end().lines().collect();
    let tail = &lines[lines.len().saturating_sub(3)..];
    format!("; it printed: {}", tail.join(" / "))
}

/// Median (the mean of the middle two of an even count), minimum, maximum and mean.
fn summary(values: &[u64]) -> (u64, u64, u64, u64) {
    let mut v = values.to_vec();
    v.sort_unstable();
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2
    };
    let mean = v.iter().sum::<u64>() / n as u64;
    (median, v[0], v[n - 1], mean)
}

/// A count with thousands separators.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The report, as text or JSON.
fn report(args: &SimulateArgs, isa: Isa, model: &FetchModel, trace: &Trace) -> String {
    let c = &trace.counts;
    let icache: Vec<u64> = c.placements.iter().map(|p| p.icache_misses).collect();
    let itlb: Vec<u64> = c.placements.iter().map(|p| p.itlb_misses).collect();
    let (i_median, i_min, i_max, i_mean) = summary(&icache);
    let (t_median, t_min, t_max, t_mean) = summary(&itlb);
    let step = c.placements.get(1).map_or(0, |p| p.shift);
    let CacheGeometry { size, ways, line } = model.icache;
    if args.json {
        let placements: Vec<serde_json::Value> = c
            .placements
            .iter()
            .map(|p| {
                serde_json::json!({
                    "shift": p.shift,
                    "icache_misses": p.icache_misses,
                    "itlb_misses": p.itlb_misses,
                })
            })
            .collect();
        let json = serde_json::json!({
            "binary": args.binary.display().to_string(),
            "isa": isa.name(),
            "model": {
                "core": model.core,
                "icache": {"size": size, "ways": ways, "line": line},
                "itlb": {"entries": model.itlb.entries, "page": model.itlb.page},
            },
            "instructions": c.instructions,
            "blocks": c.blocks,
            "taken_branches": c.taken_branches,
            "icache_misses_fully_associative": c.fully_associative_misses,
            "icache_misses": {"median": i_median, "min": i_min, "max": i_max, "mean": i_mean},
            "itlb_misses": {"median": t_median, "min": t_min, "max": t_max, "mean": t_mean},
            "lines_touched": c.lines_touched,
            "pages_touched": c.pages_touched,
            "placements": placements,
            "unlisted_block_runs": trace.unlisted_runs,
            "short_listings": trace.short_listings,
        });
        return format!("{json:#}\n");
    }
    // Writing to a String cannot fail: the results of writeln! below are ignored.
    let mut out = String::new();
    let _ = writeln!(
        out,
        "rivet simulate: {} ({}), {} placements {} bytes apart",
        args.binary.display(),
        isa.name(),
        c.placements.len(),
        step
    );
    let _ = writeln!(
        out,
        "  model: {}: L1I {} KiB {ways}-way, {line}-byte lines, LRU; iTLB {} entries of {} KiB pages, LRU",
        model.core,
        size / 1024,
        model.itlb.entries,
        model.itlb.page / 1024
    );
    let _ = writeln!(
        out,
        "  instructions                  {:>15}",
        grouped(c.instructions)
    );
    let _ = writeln!(
        out,
        "  taken branches                {:>15}",
        grouped(c.taken_branches)
    );
    let _ = writeln!(
        out,
        "  I1 misses, fully associative  {:>15}",
        grouped(c.fully_associative_misses)
    );
    let _ = writeln!(
        out,
        "  I1 misses, {ways}-way            {:>15} median, {}..{} (mean {})",
        grouped(i_median),
        grouped(i_min),
        grouped(i_max),
        grouped(i_mean)
    );
    let _ = writeln!(
        out,
        "  iTLB misses                   {:>15} median, {}..{} (mean {})",
        grouped(t_median),
        grouped(t_min),
        grouped(t_max),
        grouped(t_mean)
    );
    let _ = writeln!(
        out,
        "  code run: {} lines ({} KiB), {} pages",
        grouped(c.lines_touched),
        c.lines_touched * line / 1024,
        grouped(c.pages_touched)
    );
    let _ = writeln!(
        out,
        "  per placement (shift in bytes: I1 misses, iTLB misses):"
    );
    for p in &c.placements {
        let _ = writeln!(
            out,
            "    {:>6}: {:>12} {:>10}",
            p.shift,
            grouped(p.icache_misses),
            grouped(p.itlb_misses)
        );
    }
    if trace.unlisted_runs > 0 || trace.short_listings > 0 {
        let _ = writeln!(
            out,
            "  warning: {} block runs had no listing and {} listings were cut short by qemu's disassembler: the counts miss those instructions",
            trace.unlisted_runs, trace.short_listings
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_of_placements() {
        assert_eq!(summary(&[5, 1, 3]), (3, 1, 5, 3));
        assert_eq!(summary(&[4, 1, 3, 10]), (3, 1, 10, 4));
        assert_eq!(grouped(1234567), "1,234,567");
        assert_eq!(grouped(12), "12");
    }

    #[test]
    fn geometries_are_checked() {
        let mut m = Isa::Aarch64.default_fetch_model();
        let g = geometry_of(&m).unwrap();
        assert_eq!((g.sets, g.ways, g.line_bits, g.page_bits), (256, 4, 6, 12));
        m.icache = parse_icache("49152,4,64").unwrap();
        assert!(geometry_of(&m).is_err(), "192 sets");
        assert!(parse_icache("65536,4").is_err());
        assert!(parse_itlb("48,4096,1").is_err());
    }
}
