//! `rivet rewrite`: write a copy of a binary with its code laid out anew (identity, reversed,
//! or randomized), to prove the rewriter and to randomize layout in benchmarks.
//!
//! The output is written to a temporary file next to the destination and renamed into place
//! only when complete, so a failed run leaves nothing behind and the input is never opened
//! for writing.

use std::path::PathBuf;

use rivet_discover::{CfiRows, DiscoverError, DiscoverOptions, discover};
use rivet_elf::ElfFile;
use rivet_emit::debug::DebugWriter;
use rivet_emit::rewrite::{LayoutSource, RewriteOptions, Summary, rewrite_into};
use rivet_ir::layout::{LayoutStrategy, build_layout, split_every_block};

use crate::error::{UserError, elf_error, rewrite_error};
use crate::files::{PendingOutput, map_input, mode_of, same_file};

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayoutArg {
    /// Original order of functions and blocks (only branches are re-encoded).
    Identity,
    /// Functions and blocks in reverse order.
    Reverse,
    /// Random function order, block order and hot/cold splits (from --seed).
    Shuffle,
    /// Random block order and splits, original function order (works without relocations).
    ShuffleBlocks,
}

#[derive(clap::Args, Debug)]
pub struct RewriteArgs {
    /// The ELF executable or shared library to rewrite (never modified).
    pub binary: PathBuf,
    /// Where to write the rewritten binary.
    #[arg(short = 'o', long = "output")]
    pub output: PathBuf,
    /// The layout to produce.
    #[arg(long, value_enum, default_value_t = LayoutArg::Identity)]
    pub layout: LayoutArg,
    /// Seed of the random layouts.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// After the layout's orders are chosen, move every block but each function's entry to
    /// its cold part (BOLT's `-split-strategy=all`): a stress test of branch ranges, veneers
    /// and unwind info, not a fast layout.
    #[arg(long)]
    pub split_every_block: bool,
    /// Re-read the output and check every rewritten function against the input.
    #[arg(long)]
    pub verify: bool,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
    /// List every function: rewritten, or why not.
    #[arg(long)]
    pub list: bool,
    /// How debug info is carried over: `stream` copies DIEs as bytes and re-encodes only
    /// what names code (falling back to `convert` for DWARF it does not model); `convert`
    /// decodes and re-encodes everything through gimli (slower, heavier; a cross-check).
    #[arg(long, value_enum, default_value_t = DebugWriterArg::Stream)]
    pub debug_writer: DebugWriterArg,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DebugWriterArg {
    Stream,
    Convert,
}

fn strategy(args: &RewriteArgs) -> LayoutStrategy {
    match args.layout {
        LayoutArg::Identity => LayoutStrategy::Identity,
        LayoutArg::Reverse => LayoutStrategy::Reverse,
        LayoutArg::Shuffle => LayoutStrategy::Shuffle { seed: args.seed },
        LayoutArg::ShuffleBlocks => LayoutStrategy::ShuffleBlocks { seed: args.seed },
    }
}

pub fn run(args: &RewriteArgs) -> Result<(), UserError> {
    if same_file(&args.binary, &args.output) {
        return Err(
            UserError::new(format!("the output {} is the input", args.output.display()))
                .hint("Rivet never modifies its input; give another -o path"),
        );
    }
    let mapped = map_input(&args.binary)?;
    let elf = ElfFile::parse_mapped(&mapped).map_err(|e| elf_error(&args.binary, &e))?;
    crate::files::refuse_rivet_output(&elf, &args.binary)?;
    // Fail on an unwritable destination before the work, and own the temp file from here.
    let (pending, file) = PendingOutput::create(&args.output)?;
    // Unwind rows checked, not kept: the emitter reads each function's again as it writes
    // its tables, rather than every function's being held to the end.
    let program =
        discover(&elf, &DiscoverOptions::with_cfi(CfiRows::Check)).map_err(|e| match e {
            DiscoverError::Elf(e) => elf_error(&args.binary, &e),
        })?;
    let strategy = strategy(args);
    let split_every = |movable: &[bool], in_place: bool| {
        split_every_block(
            &program,
            build_layout(&program, movable, strategy, in_place),
        )
    };
    let mut options = RewriteOptions {
        debug_writer: match args.debug_writer {
            DebugWriterArg::Stream => DebugWriter::Stream,
            DebugWriterArg::Convert => DebugWriter::Convert,
        },
        ..RewriteOptions::strategy(strategy)
    };
    // The build-id of the output tells layouts apart by this name.
    let split_name = format!("{strategy:?} split-every-block");
    if args.split_every_block {
        options.layout = LayoutSource::Custom {
            build: &split_every,
            reorders_functions: strategy.reorders_functions(),
            name: &split_name,
        };
    }
    let output = pending.stream(&file, |sink| {
        rewrite_into(&elf, &program, &options, None, sink)
            .map_err(|e| rewrite_error(&args.binary, e))
    })?;
    if args.verify {
        pending.verify_written(|image| {
            rivet::verify_check::verify_output(&elf, &program, &output, image).map(|_| ())
        })?;
    }
    pending.finish_written(file, mode_of(&args.binary))?;
    print_summary(args, &output.summary);
    if args.list {
        let placement = if output.summary.relocation_mode {
            "moved"
        } else {
            "rewritten in place"
        };
        for (f, reason) in program.functions.iter().zip(&output.summary.reasons) {
            println!(
                "{:#x}  {}  {}",
                f.range.start.get(),
                f.qualified_name(),
                reason
                    .as_deref()
                    .map_or(placement.to_string(), |r| format!("not rewritten: {r}"))
            );
        }
    }
    Ok(())
}

fn print_summary(args: &RewriteArgs, s: &Summary) {
    if args.json {
        let json = serde_json::json!({
            "output": args.output.display().to_string(),
            "relocation_mode": s.relocation_mode,
            "functions": s.functions,
            "simple": s.simple,
            "moved": s.moved,
            "rewritten_in_place": s.in_place,
            "not_rewritten": s.not_rewritten,
            "fragments": s.fragments,
            "hot_bytes": s.hot_bytes,
            "cold_bytes": s.cold_bytes,
            "patched_references": s.patched_references,
            "old_entries_not_forwarded": s.old_entries_not_forwarded,
            "frames": s.frames,
            "lsdas": s.lsdas,
            "veneers": s.veneers,
            "landing_pads": s.landing_pads,
            "veneers_bypassed": s.veneers_bypassed,
            "debug_units": s.debug_units,
            "debug_moved_rows": s.debug_moved_rows,
            "debug_writer": s.debug_writer.map(|w| match w {
                DebugWriter::Stream => "stream",
                DebugWriter::Convert => "convert",
            }),
            "debug_fallback": s.debug_fallback,
            "warnings": s.warnings,
        });
        println!("{json}");
        return;
    }
    let mode = if s.relocation_mode {
        "relocation mode"
    } else {
        "in place mode (no relocations)"
    };
    println!(
        "rewrote {} ({mode}): {} of {} functions {}, {} fragments, {} hot + {} cold bytes",
        args.output.display(),
        s.moved + s.in_place,
        s.functions,
        if s.relocation_mode {
            "moved"
        } else {
            "rewritten in place"
        },
        s.fragments,
        s.hot_bytes,
        s.cold_bytes
    );
    println!(
        "  {} references patched, {} unwind frames, {} LSDAs",
        s.patched_references, s.frames, s.lsdas
    );
    crate::summary::print_branch_reach(s);
    if s.old_entries_not_forwarded > 0 {
        println!(
            "  {} old entries left as they were (another entry lies within their first {} bytes)",
            s.old_entries_not_forwarded, s.forwarding_jump_size
        );
    }
    if s.debug_units > 0 {
        println!(
            "  debug info updated: {} units, {} line rows for rewritten code",
            s.debug_units, s.debug_moved_rows
        );
    }
    if !s.not_rewritten.is_empty() {
        println!("  not rewritten:");
        for (reason, n) in &s.not_rewritten {
            println!("    {n:6}  {reason}");
        }
    }
    for w in &s.warnings {
        eprintln!("rivet: warning: {w}");
    }
}
