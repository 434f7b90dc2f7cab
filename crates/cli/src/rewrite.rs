//! `rivet rewrite`: write a copy of a binary with its code laid out anew (identity, reversed,
//! or randomized), to prove the rewriter and to randomize layout in benchmarks.
//!
//! The output is written to a temporary file next to the destination and renamed into place
//! only when complete, so a failed run leaves nothing behind and the input is never opened
//! for writing.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rivet_discover::{DiscoverError, DiscoverOptions, discover};
use rivet_elf::{ElfFile, MappedFile};
use rivet_emit::debug::DebugWriter;
use rivet_emit::rewrite::{RewriteError, RewriteOptions, Summary, rewrite};
use rivet_ir::layout::LayoutStrategy;

use crate::UserError;
use crate::inspect::elf_error;

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

/// A temporary output file that disappears unless committed.
pub(crate) struct PendingOutput {
    temp: PathBuf,
    dest: PathBuf,
    committed: bool,
}

impl PendingOutput {
    pub(crate) fn create(dest: &Path) -> Result<(PendingOutput, File), UserError> {
        // Found now rather than at the final rename, after all the work.
        if dest.is_dir() {
            return Err(
                UserError::new(format!("the output {} is a directory", dest.display()))
                    .hint("give a file path for the output, e.g. DIR/NAME"),
            );
        }
        let dir = match dest.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = dest
            .file_name()
            .ok_or_else(|| UserError::new(format!("{} is not a file path", dest.display())))?;
        let temp = dir.join(format!(
            ".{}.rivet-{}.tmp",
            name.to_string_lossy(),
            std::process::id()
        ));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)
            .map_err(|e| {
                UserError::new(format!("cannot write to {}: {e}", dir.display()))
                    .hint("choose an output path in a directory you can write to")
            })?;
        Ok((
            PendingOutput {
                temp,
                dest: dest.to_path_buf(),
                committed: false,
            },
            file,
        ))
    }

    /// Writes `bytes` to the temporary file (`file`, from `create`), syncs it, gives it `mode`
    /// and renames it into place.
    pub(crate) fn finish(self, mut file: File, bytes: &[u8], mode: u32) -> Result<(), UserError> {
        file.write_all(bytes)
            .and_then(|_| file.sync_all())
            .map_err(|e| {
                UserError::new(format!("cannot write {}: {e}", self.dest.display()))
                    .hint("check the free space of its file system")
            })?;
        drop(file);
        self.commit(mode)
    }

    fn commit(mut self, mode: u32) -> Result<(), UserError> {
        let fail = |e: std::io::Error| {
            UserError::new(format!("cannot write {}: {e}", self.dest.display()))
                .hint("check that the output path can be replaced (not a directory, not busy)")
        };
        std::fs::set_permissions(&self.temp, std::fs::Permissions::from_mode(mode))
            .map_err(fail)?;
        std::fs::rename(&self.temp, &self.dest).map_err(fail)?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for PendingOutput {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

/// The permission bits an output made from `input` gets: the input's (an executable stays
/// executable), 0755 when they cannot be read.
pub(crate) fn mode_of(input: &Path) -> u32 {
    std::fs::metadata(input)
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or(0o755)
}

pub(crate) fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

fn strategy(args: &RewriteArgs) -> LayoutStrategy {
    match args.layout {
        LayoutArg::Identity => LayoutStrategy::Identity,
        LayoutArg::Reverse => LayoutStrategy::Reverse,
        LayoutArg::Shuffle => LayoutStrategy::Shuffle { seed: args.seed },
        LayoutArg::ShuffleBlocks => LayoutStrategy::ShuffleBlocks { seed: args.seed },
    }
}

pub(crate) fn rewrite_error(path: &Path, e: RewriteError) -> UserError {
    let p = path.display();
    match e {
        RewriteError::AlreadyRewritten => UserError::new(format!("{p}: {e}"))
            .hint("rewrite the original binary instead of Rivet's output"),
        RewriteError::NeedsRelocations { .. } => UserError::new(format!("{p}: {e}")).hint(
            "relink with -Wl,--emit-relocs, or use --layout identity or shuffle-blocks, which keep function order",
        ),
        RewriteError::Elf(e) => elf_error(path, &e),
        other => UserError::new(format!("{p}: {other}"))
            .hint("please report this with the binary; `rivet inspect` shows what Rivet understood"),
    }
}

pub fn run(args: &RewriteArgs) -> Result<(), UserError> {
    if same_file(&args.binary, &args.output) {
        return Err(
            UserError::new(format!("the output {} is the input", args.output.display()))
                .hint("Rivet never modifies its input; give another -o path"),
        );
    }
    let mapped = MappedFile::open(&args.binary).map_err(|e| {
        UserError::new(format!("cannot read {}: {e}", args.binary.display()))
            .hint("check the path and its permissions")
    })?;
    let elf = ElfFile::parse(mapped.bytes()).map_err(|e| elf_error(&args.binary, &e))?;
    // Fail on an unwritable destination before the work, and own the temp file from here.
    let (pending, file) = PendingOutput::create(&args.output)?;
    let program = discover(&elf, &DiscoverOptions { with_cfi: true }).map_err(|e| match e {
        DiscoverError::Elf(e) => elf_error(&args.binary, &e),
    })?;
    let options = RewriteOptions {
        debug_writer: match args.debug_writer {
            DebugWriterArg::Stream => DebugWriter::Stream,
            DebugWriterArg::Convert => DebugWriter::Convert,
        },
        ..RewriteOptions::strategy(strategy(args))
    };
    let output =
        rewrite(&elf, &program, &options, None).map_err(|e| rewrite_error(&args.binary, e))?;
    if args.verify {
        rivet::verify_check::verify_output(&elf, &program, &output).map_err(|e| {
            UserError::new(format!(
                "verification of {} failed: {e}",
                args.output.display()
            ))
            .hint("the output was not written; please report this with the binary")
        })?;
    }
    pending.finish(file, &output.image, mode_of(&args.binary))?;
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
