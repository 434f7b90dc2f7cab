//! `rivet instrument`: write a copy of a binary that counts how it runs.
//!
//! Every simple function gets counters on the edges off a spanning tree of its counting graph
//! (`rivet_passes::instrument`); the runtime maps them onto the profile file at start-up, so
//! counts reach the file while the program runs (`rivet_runtime`). The output is written like
//! `rivet rewrite`'s: to a temporary file renamed into place, never over the input.

use std::path::{Path, PathBuf};

use rivet_discover::{CfiRows, DiscoverError, DiscoverOptions, discover};
use rivet_elf::ElfFile;
use rivet_emit::rewrite::{
    Instrumentation, RewriteError, RewriteOptions, check_input, rewrite_into,
};
use rivet_ir::layout::LayoutStrategy;
use rivet_ir::probes::{FunctionProbes, ProbeAt};
use rivet_passes::instrument_program;
use rivet_profile::counters;

use crate::error::{UserError, elf_error, rewrite_error};
use crate::files::{PendingOutput, map_input, mode_of, same_file};

#[derive(clap::Args, Debug)]
pub struct InstrumentArgs {
    /// The ELF executable or shared library to instrument (never modified).
    pub binary: PathBuf,
    /// Where to write the instrumented binary.
    #[arg(short = 'o', long = "output")]
    pub output: PathBuf,
    /// The file the instrumented binary counts into (default: the output's path + ".counts").
    /// RIVET_PROFILE in the environment of the instrumented program overrides it.
    #[arg(long)]
    pub profile: Option<PathBuf>,
    /// One file per process: the process id is appended to the path (PATH.PID). Forked
    /// children that do not exec keep counting into their parent's file.
    #[arg(long)]
    pub per_process: bool,
    /// Functions to leave uninstrumented (comma-separated names; `name/N` profile names and
    /// `name/file` for locals work too).
    #[arg(long, value_delimiter = ',')]
    pub skip_funcs: Vec<String>,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
    /// AArch64: how counters are incremented atomically, `lse` (Armv8.1 `stadd`, every
    /// Neoverse core) or `llsc` (exclusive load/store loops, any Armv8.0 core). Default: `lse`
    /// when the binary's own code uses LSE instructions, else `llsc`. x86-64 has one way.
    #[arg(long, value_enum)]
    pub atomics: Option<AtomicsArg>,
}

/// `--atomics`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AtomicsArg {
    Lse,
    Llsc,
}

/// The default counter file: next to the output, absolute so that it does not depend on the
/// directory the program runs in.
fn default_profile(output: &Path) -> PathBuf {
    let abs = std::path::absolute(output).unwrap_or_else(|_| output.to_path_buf());
    let mut name = abs.file_name().unwrap_or_default().to_os_string();
    name.push(".counts");
    abs.with_file_name(name)
}

/// Where counter files say the instrumented binary is (its map is there): the output, with
/// its directory canonical (the output itself does not exist yet), so that the path holds
/// from any directory and through the symbolic links the directory was reached by.
fn instrumented_identity(output: &Path) -> Result<PathBuf, UserError> {
    let abs = std::path::absolute(output).unwrap_or_else(|_| output.to_path_buf());
    let dir = abs.parent().unwrap_or(Path::new("/"));
    let name = abs.file_name().unwrap_or_default();
    let dir = std::fs::canonicalize(dir).map_err(|e| {
        UserError::new(format!("cannot resolve {}: {e}", dir.display()))
            .hint("write the output to an existing directory")
    })?;
    let path = dir.join(name);
    if path.as_os_str().len() > rivet_profile::counters::MAX_IDENTITY_PATH {
        return Err(
            UserError::new(format!("the output path {} is too long", path.display()))
                .hint("use a path of at most 4096 bytes"),
        );
    }
    Ok(path)
}

pub fn run(args: &InstrumentArgs) -> Result<(), UserError> {
    run_with(args, true).map(|_| ())
}

/// Instruments as `args` say; prints the summary (text or JSON, per `args.json`) only when
/// `print`, and returns it as JSON either way (`rivet auto` reports it its own way).
pub fn run_with(args: &InstrumentArgs, print: bool) -> Result<serde_json::Value, UserError> {
    if same_file(&args.binary, &args.output) {
        return Err(
            UserError::new(format!("the output {} is the input", args.output.display()))
                .hint("Rivet never modifies its input; give another -o path"),
        );
    }
    let profile_path = args
        .profile
        .clone()
        .unwrap_or_else(|| default_profile(&args.output));
    let profile_path = profile_path.to_str().map(str::to_string).ok_or_else(|| {
        UserError::new(format!(
            "the profile path {} is not UTF-8",
            profile_path.display()
        ))
    })?;
    if profile_path.is_empty() || profile_path.len() > rivet_runtime::MAX_PATH - 24 {
        return Err(
            UserError::new("the profile path is empty or too long").hint(format!(
                "use a path of at most {} bytes",
                rivet_runtime::MAX_PATH - 24
            )),
        );
    }
    let mapped = map_input(&args.binary)?;
    let elf = ElfFile::parse_mapped(&mapped).map_err(|e| elf_error(&args.binary, &e))?;
    crate::files::refuse_rivet_output(&elf, &args.binary)?;
    let rewrite_failed = |e: RewriteError| match e {
        RewriteError::NeedsRelocations { reason } => UserError::new(format!(
            "{}: instrumentation needs relocations: {reason}",
            args.binary.display()
        ))
        .hint("or profile with perf and `rivet aggregate`, which needs no relocations"),
        other => rewrite_error(&args.binary, other),
    };
    // Refused before discovery, which takes seconds on a large library.
    let relocation_mode = rivet_discover::relocation_mode(&elf).map_err(|e| match e {
        DiscoverError::Elf(e) => elf_error(&args.binary, &e),
    })?;
    check_input(&elf, &relocation_mode, true).map_err(rewrite_failed)?;
    if args.atomics.is_some() && rivet_arch::Isa::of(&elf) != rivet_arch::Isa::Aarch64 {
        return Err(UserError::new(format!(
            "{}: --atomics applies to AArch64 binaries only",
            args.binary.display()
        ))
        .hint("x86-64 has one atomic increment (lock inc); leave --atomics out"));
    }
    let (pending, file) = PendingOutput::create(&args.output)?;
    // Unwind rows checked, not kept: the emitter reads each function's again as it writes
    // its tables, rather than every function's being held to the end.
    let program =
        discover(&elf, &DiscoverOptions::with_cfi(CfiRows::Check)).map_err(|e| match e {
            DiscoverError::Elf(e) => elf_error(&args.binary, &e),
        })?;
    let names = rivet_passes::names::profile_names(&program);
    let skipped = |f: rivet_ir::FuncId| {
        let func = program.function(f);
        args.skip_funcs.iter().any(|s| {
            func.names.iter().any(|n| n == s)
                || func.qualified_name() == *s
                || names[f.0 as usize] == *s
        })
    };
    let isa = program.info.isa;
    let (atomics, atomics_chosen_by) = match args.atomics {
        Some(AtomicsArg::Lse) => (rivet_arch::Atomics::Lse, "--atomics"),
        Some(AtomicsArg::Llsc) => (rivet_arch::Atomics::LlSc, "--atomics"),
        None => (
            rivet_passes::default_atomics(&program),
            "the binary's own atomics",
        ),
    };
    let mut plan = instrument_program(&program, atomics, &|f| !skipped(f));
    // Taken out of the plans for the counter map, made once, after the code is placed.
    let maps = std::sync::Mutex::new(Some(plan.take_maps()));
    let plan = plan;
    let probes: Vec<Option<&FunctionProbes>> = plan
        .functions
        .iter()
        .map(|f| f.as_ref().map(|f| &f.probes))
        .collect();
    let build_id = elf.build_id().unwrap_or_default().to_vec();
    let binary_name = args
        .binary
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let identity = instrumented_identity(&args.output)?;
    let file_prefix = |kept: &dyn Fn(rivet_ir::FuncId) -> bool, moved: &[(u64, u64)]| {
        let maps = maps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .expect("the emitter asks for the counter map once");
        let prefix = maps
            .counter_map(&program, kept, &build_id, &binary_name, moved)
            .file_prefix(&identity)
            .expect("the path's length is checked above");
        // The map, its per-function index (so readers decode only what ran), and where the
        // site tables start (so counter files sum without either).
        let mut sections = vec![
            (counters::MAP_SECTION, prefix.map_section),
            (counters::INDEX_SECTION, prefix.index_section),
        ];
        if !prefix.sites_section.is_empty() {
            sections.push((counters::SITES_SECTION, prefix.sites_section));
        }
        (prefix.bytes, sections)
    };
    let instrumentation = Instrumentation {
        probes: &probes,
        counters: plan.counters,
        file_prefix: &file_prefix,
        default_path: &profile_path,
        per_process: args.per_process,
        atomics,
    };
    let options = RewriteOptions::strategy(LayoutStrategy::Identity);
    let output = pending.stream(&file, |sink| {
        rewrite_into(&elf, &program, &options, Some(&instrumentation), sink).map_err(rewrite_failed)
    })?;
    pending.finish_written(file, mode_of(&args.binary))?;

    // Summary: what is counted, and where the counts go.
    let mut functions = 0;
    let (mut counters, mut saving, mut edge_blocks, mut approximate) = (0, 0, 0, 0);
    for (f, p) in plan.functions.iter().enumerate() {
        let Some(p) = p else { continue };
        if !output.layout.is_rewritten(rivet_ir::FuncId(f as u32)) {
            continue;
        }
        functions += 1;
        counters += p.probes.probes.len();
        saving += p
            .probes
            .probes
            .iter()
            .filter(|p| p.shape.saves_flags())
            .count();
        edge_blocks += p
            .probes
            .probes
            .iter()
            .filter(|p| matches!(p.at, ProbeAt::Edge { .. }))
            .count();
        approximate += usize::from(p.unknown_edges > 0);
    }
    let s = &output.summary;
    // Only AArch64 has a choice of atomics (x86-64 summaries stay as they were).
    let atomics_name = (isa == rivet_arch::Isa::Aarch64).then_some(match atomics {
        rivet_arch::Atomics::Lse => "lse",
        rivet_arch::Atomics::LlSc => "llsc",
    });
    let mut json = serde_json::json!({
        "output": args.output.display().to_string(),
        "profile": profile_path,
        "per_process": args.per_process,
        "functions": s.functions,
        "instrumented": functions,
        "counters": counters,
        "flag_saving_probes": saving,
        "edge_blocks": edge_blocks,
        "approximate_functions": approximate,
        "not_instrumented": s.not_rewritten,
        "warnings": s.warnings,
    });
    if let Some(name) = atomics_name {
        json["atomics"] = name.into();
    }
    if print && args.json {
        println!("{json}");
    } else if print {
        println!(
            "instrumented {}: {functions} of {} functions, {counters} counters ({saving} saving flags, {edge_blocks} on edge blocks)",
            args.output.display(),
            s.functions
        );
        println!(
            "  counts go to {profile_path}{} while it runs (RIVET_PROFILE overrides, except in set-user-ID and other privileged runs)",
            if args.per_process { ".PID" } else { "" }
        );
        if let Some(name) = atomics_name {
            println!("  atomic increments: {name} (from {atomics_chosen_by})");
        }
        if approximate > 0 {
            println!(
                "  {approximate} functions have edges that are neither counted nor inferable: their counts are approximate"
            );
        }
        if !s.not_rewritten.is_empty() {
            println!("  not instrumented:");
            for (reason, n) in &s.not_rewritten {
                println!("    {n:6}  {reason}");
            }
        }
        for w in &s.warnings {
            eprintln!("rivet: warning: {w}");
        }
    }
    Ok(json)
}
