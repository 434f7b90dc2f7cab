//! The `rivet` command.
//!
//! Owns everything user-facing: argument parsing, reading the input, progress and output, and
//! turning errors into one `rivet: error: ...` line with a hint. Library crates never print
//! and never exit; this crate is the only place that does.
//!
//! Its modules come in two layers. A command module (one per subcommand, the ones `main`
//! dispatches to) holds that command's arguments and its `run`. The shared modules hold what
//! several commands need: [`allocator`] (glibc settings for the peak memory), [`error`] (one
//! error line with a hint), [`files`] (reading the input, writing outputs atomically),
//! [`profile_use`] (reading, checking and attaching profiles) and [`run_prefix`] (running the
//! input under an emulator, `--runner`).
//! A command module imports shared modules, never another command module, and a shared
//! module imports no command module, so that commands can change apart and the crate has no
//! import cycles. The one exception is a command that runs other commands as its steps:
//! `auto` runs `instrument`, `optimize` and `bench`, and builds their arguments.
//! `tests/architecture.rs` checks the rule.

// Shared modules.
mod allocator;
mod error;
mod files;
mod profile_use;
mod run_prefix;
mod summary;

// Command modules.
mod aggregate;
mod auto;
mod bench;
mod inspect;
mod instrument;
mod merge;
mod optimize;
mod report;
mod reset_counts;
mod rewrite;
mod simulate;
mod verify;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "rivet",
    version,
    about = "Profile-guided post-link optimizer for ELF binaries"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Show how Rivet models a binary: functions, CFGs, jump tables, what it skips and why.
    ///
    /// Example: rivet inspect ./app --function main
    Inspect(inspect::InspectArgs),
    /// Write a copy of a binary with its code laid out anew: identity, reversed or random.
    ///
    /// Example: rivet rewrite ./app -o app.shuffled --layout shuffle --seed 7 --verify
    Rewrite(rewrite::RewriteArgs),
    /// Write a copy of a binary that counts how it runs, into a profile file, as it runs.
    ///
    /// Example: rivet instrument ./app -o app.inst && ./app.inst <workload>   (counts in app.inst.counts)
    Instrument(instrument::InstrumentArgs),
    /// Sum profiles of one binary (counter files, Rivet profiles, BOLT fdata or YAML).
    ///
    /// Example: rivet merge run1.counts run2.counts -o app.fdata
    Merge(merge::MergeArgs),
    /// Turn perf samples of a binary (with or without branch stacks) into a profile.
    ///
    /// Example: perf record -e cpu-clock:u -o perf.data -- ./app ; rivet aggregate perf.data ./app -o app.prof
    Aggregate(aggregate::AggregateArgs),
    /// Make a binary faster with its profile: hot paths fall through, hot code packed
    /// together, cold code out of the way. llvm-bolt's option spellings work too.
    ///
    /// Example: rivet optimize ./app --profile app.inst.counts -o app.fast --dyno-stats
    Optimize(optimize::OptimizeArgs),
    /// Write a self-contained HTML report: profile coverage, hottest functions, dyno stats and
    /// heatmaps of the executed code before and after optimization.
    ///
    /// Example: rivet report ./app --profile app.prof --optimized app.fast -o report.html
    Report(report::ReportArgs),
    /// Check a rewritten binary against the binary it was made from.
    ///
    /// Example: rivet verify ./app app.shuffled
    Verify(verify::VerifyArgs),
    /// Is B faster than A? Interleaved runs, medians, per-round ratios B/A with a confidence
    /// interval; optionally over shuffled layouts of each (--randomize-layout) and cachegrind
    /// counts. Exit 0: B faster or no significant difference, 3: B significantly slower.
    ///
    /// Example: rivet bench ./app ./app.fast --randomize-layout 5 -- input.txt   ({} in the command stands for the binary)
    Bench(bench::BenchArgs),
    /// All of it in one command: check the binary, instrument it, run the training commands
    /// (or a server and its load) with it, merge the profiles, optimize, verify, summarize.
    ///
    /// Example: rivet auto ./app -o app.fast --train '{} input1' --train '{} input2 | wc -l' --bench
    Auto(auto::AutoArgs),
    /// Zero the counts of a counter file in place, while instrumented programs count into it
    /// (never truncate or delete a live one); -o saves the counts taken as a phase profile.
    ///
    /// Example: rivet reset-counts app.inst.counts -o warmup.counts
    ResetCounts(reset_counts::ResetCountsArgs),
    /// Count what one run fetches, deterministically: executed instructions, taken branches,
    /// L1 instruction cache misses over several placements and fully associative, iTLB
    /// misses; the program runs under qemu-user (any x86-64 or AArch64 program).
    ///
    /// Example: rivet simulate ./lua.aarch64 -- bench.lua
    Simulate(simulate::SimulateArgs),
}

fn main() -> ExitCode {
    allocator::tune();
    // `rivet optimize` also takes llvm-bolt's single-dash spellings.
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let mut warnings = Vec::new();
    if args.get(1).is_some_and(|a| a == "optimize") {
        let rest = args.split_off(2);
        let (translated, w) = optimize::translate_bolt_args(rest);
        args.extend(translated);
        warnings = w;
    }
    let cli = Cli::parse_from(args);
    let result = match cli.command {
        Command::Inspect(args) => inspect::run(&args),
        Command::Rewrite(args) => rewrite::run(&args),
        Command::Instrument(args) => instrument::run(&args),
        Command::Merge(args) => merge::run(&args),
        Command::Aggregate(args) => aggregate::run(&args),
        Command::Optimize(args) => optimize::run(&args, warnings),
        Command::Report(args) => report::run(&args),
        Command::Verify(args) => verify::run(&args),
        Command::Auto(args) => auto::run(&args),
        Command::ResetCounts(args) => reset_counts::run(&args),
        Command::Simulate(args) => simulate::run(&args),
        Command::Bench(args) => match bench::run(&args) {
            Ok(code) => return code,
            Err(e) => Err(e),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}", e.line());
            ExitCode::FAILURE
        }
    }
}
