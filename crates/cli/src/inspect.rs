//! `rivet inspect`: what Rivet understood of a binary.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;

use rivet_discover::{DiscoverError, DiscoverOptions, discover, unwind_rows};
use rivet_elf::ElfFile;
use rivet_emit::ways_in::WaysIn;
use rivet_ir::dump::{dump_function, dump_program};
use rivet_ir::{Program, RelocationMode, Status, Terminator};
use serde::Serialize;

use crate::error::{UserError, elf_error};
use crate::files::map_input;
use crate::profile_use;

#[derive(clap::Args, Debug)]
pub struct InspectArgs {
    /// The ELF executable or shared library to read.
    pub binary: PathBuf,
    /// Print the CFG of the named function(s) (a symbol name, or name/file for locals).
    #[arg(long, short = 'f')]
    pub function: Vec<String>,
    /// Print the stable text dump of every function (what golden tests compare).
    #[arg(long)]
    pub dump: bool,
    /// List every function with its status.
    #[arg(long)]
    pub list: bool,
    /// Machine-readable output (summary, or the selected functions).
    #[arg(long)]
    pub json: bool,
    /// How many skipped functions to name in the summary.
    #[arg(long, default_value_t = 20)]
    pub show_skipped: usize,
    /// Attach this profile (counter file, Rivet profile, fdata): report what matched and the
    /// hottest functions.
    #[arg(long)]
    pub profile: Option<PathBuf>,
    /// The instrumented binary whose runs wrote the counter file (it holds the file's map),
    /// when it is no longer where `rivet instrument -o` wrote it.
    #[arg(long, value_name = "PATH")]
    pub instrumented: Option<std::path::PathBuf>,
    /// With --profile: how many hot functions to list.
    #[arg(long, default_value_t = 20)]
    pub top: usize,
    /// With --profile: accept a profile of another build.
    #[arg(long)]
    pub force: bool,
}

#[derive(Serialize)]
struct SkippedJson {
    name: String,
    address: String,
    size: u64,
    reason: &'static str,
    detail: String,
}

#[derive(Serialize)]
struct SummaryJson {
    path: String,
    kind: &'static str,
    entry: String,
    build_id: Option<String>,
    relocation_mode: bool,
    relocation_mode_reason: Option<String>,
    static_relocations: usize,
    dynamic_relocations: usize,
    functions: usize,
    simple_functions: usize,
    skipped_functions: usize,
    skipped_by_reason: BTreeMap<&'static str, usize>,
    function_bytes: u64,
    simple_bytes: u64,
    text_bytes: u64,
    blocks: usize,
    instructions: usize,
    jump_tables: usize,
    computed_gotos: usize,
    landing_pads: usize,
    plt_entries: usize,
    cold_fragments: usize,
    secondary_entries: usize,
    /// What a partial move can break (`rivet_emit::ways_in`).
    ways_in: WaysInJson,
    noreturn_calls: usize,
    warnings: Vec<String>,
    skipped: Vec<SkippedJson>,
}

#[derive(Serialize)]
struct WaysInJson {
    interior_branches: usize,
    interior_branches_without_relocation: usize,
    interior_short_branches: usize,
    interior_code_addresses: usize,
    entered_under_forwarding_jump: usize,
}

impl From<WaysIn> for WaysInJson {
    fn from(w: WaysIn) -> Self {
        WaysInJson {
            interior_branches: w.interior_branches,
            interior_branches_without_relocation: w.interior_branches_without_relocation,
            interior_short_branches: w.interior_short_branches,
            interior_code_addresses: w.interior_code_addresses,
            entered_under_forwarding_jump: w.entered_under_forwarding_jump,
        }
    }
}

fn summarize(path: &std::path::Path, p: &Program, ways_in: WaysIn) -> SummaryJson {
    let mut skipped_by_reason = BTreeMap::new();
    let mut skipped = Vec::new();
    let (mut function_bytes, mut simple_bytes) = (0, 0);
    let (mut blocks, mut insts, mut tables, mut gotos, mut lps, mut noreturn_calls) =
        (0, 0, 0, 0, 0, 0);
    for f in &p.functions {
        function_bytes += f.range.len();
        match &f.status {
            Status::Simple => {
                simple_bytes += f.range.len();
                blocks += f.blocks.len();
                insts += f.insts.len();
                tables += f.jump_tables.len();
                gotos += f
                    .blocks
                    .iter()
                    .filter(|b| b.terminator == Terminator::ComputedGoto)
                    .count();
                lps += f.blocks.iter().filter(|b| b.is_landing_pad).count();
                noreturn_calls += f
                    .blocks
                    .iter()
                    .filter(|b| b.terminator == Terminator::NoReturnCall)
                    .count();
            }
            Status::Skipped(r) => {
                *skipped_by_reason.entry(r.kind()).or_insert(0) += 1;
                skipped.push(SkippedJson {
                    name: f.qualified_name(),
                    address: f.range.start.to_string(),
                    size: f.range.len(),
                    reason: r.kind(),
                    detail: r.to_string(),
                });
            }
        }
    }
    let simple = p.functions.iter().filter(|f| f.is_simple()).count();
    let (reloc, reason) = match &p.info.relocation_mode {
        RelocationMode::Available => (true, None),
        RelocationMode::Unavailable { reason } => (false, Some(reason.clone())),
    };
    SummaryJson {
        path: path.display().to_string(),
        kind: p.info.kind.describe(),
        entry: p.info.entry.to_string(),
        build_id: p
            .info
            .build_id
            .as_ref()
            .map(|b| b.iter().map(|x| format!("{x:02x}")).collect()),
        relocation_mode: reloc,
        relocation_mode_reason: reason,
        static_relocations: p.info.static_relocations,
        dynamic_relocations: p.info.dynamic_relocations,
        functions: p.functions.len(),
        simple_functions: simple,
        skipped_functions: p.functions.len() - simple,
        skipped_by_reason,
        function_bytes,
        simple_bytes,
        text_bytes: p.info.code_bytes,
        blocks,
        instructions: insts,
        jump_tables: tables,
        computed_gotos: gotos,
        landing_pads: lps,
        plt_entries: p.plt.len(),
        cold_fragments: p
            .functions
            .iter()
            .filter(|f| {
                f.parent
                    .is_some_and(|x| x.kind == rivet_ir::PartKind::ColdFragment)
            })
            .count(),
        secondary_entries: p.functions.iter().map(|f| f.secondary_entries.len()).sum(),
        ways_in: ways_in.into(),
        noreturn_calls,
        warnings: p.warnings.clone(),
        skipped,
    }
}

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        100.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

fn render_summary(s: &SummaryJson, show_skipped: usize) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{}: {}, entry {}", s.path, s.kind, s.entry);
    if let Some(id) = &s.build_id {
        let _ = writeln!(o, "  build-id           {id}");
    }
    match &s.relocation_mode_reason {
        None => {
            let _ = writeln!(
                o,
                "  relocation mode    available ({} static relocations kept by --emit-relocs)",
                s.static_relocations
            );
        }
        Some(r) => {
            let _ = writeln!(o, "  relocation mode    unavailable: {r}");
        }
    }
    let _ = writeln!(
        o,
        "  functions          {} ({} simple = {:.2}%, {} skipped)",
        s.functions,
        s.simple_functions,
        pct(s.simple_functions as u64, s.functions as u64),
        s.skipped_functions
    );
    let _ = writeln!(
        o,
        "  code bytes         {} in functions, {} simple = {:.2}% ({} bytes of text)",
        s.function_bytes,
        s.simple_bytes,
        pct(s.simple_bytes, s.function_bytes),
        s.text_bytes
    );
    let _ = writeln!(o, "  blocks             {}", s.blocks);
    let _ = writeln!(o, "  instructions       {}", s.instructions);
    let _ = writeln!(o, "  jump tables        {}", s.jump_tables);
    let _ = writeln!(o, "  computed gotos     {}", s.computed_gotos);
    let _ = writeln!(o, "  landing pads       {}", s.landing_pads);
    let _ = writeln!(o, "  noreturn calls     {}", s.noreturn_calls);
    let _ = writeln!(o, "  cold fragments     {}", s.cold_fragments);
    let _ = writeln!(o, "  secondary entries  {}", s.secondary_entries);
    let w = &s.ways_in;
    let _ = writeln!(
        o,
        "  interior branches  {} into other functions ({} without relocation, {} short), {} code addresses",
        w.interior_branches,
        w.interior_branches_without_relocation,
        w.interior_short_branches,
        w.interior_code_addresses
    );
    let _ = writeln!(
        o,
        "  entered near entry {} functions (within a forwarding jump's bytes)",
        w.entered_under_forwarding_jump
    );
    let _ = writeln!(o, "  PLT stubs          {}", s.plt_entries);
    if !s.skipped_by_reason.is_empty() {
        let _ = writeln!(o, "  skipped by reason:");
        let mut reasons: Vec<_> = s.skipped_by_reason.iter().collect();
        reasons.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        for (reason, count) in reasons {
            let _ = writeln!(o, "    {count:>8}  {reason}");
        }
        let _ = writeln!(
            o,
            "  skipped functions{}:",
            if s.skipped.len() > show_skipped {
                format!(" (first {show_skipped})")
            } else {
                String::new()
            }
        );
        for sk in s.skipped.iter().take(show_skipped) {
            let _ = writeln!(o, "    {} at {}: {}", sk.name, sk.address, sk.detail);
        }
    }
    for w in &s.warnings {
        let _ = writeln!(o, "  warning: {w}");
    }
    o
}

fn emit(text: &str) -> Result<(), UserError> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Ok(()) => Ok(()),
        // A closed pipe (`| head`) is the reader's choice, not an error.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(UserError::new(format!("cannot write output: {e}"))),
    }
}

pub fn run(args: &InspectArgs) -> Result<(), UserError> {
    let mapped = map_input(&args.binary)?;
    let elf = ElfFile::parse(mapped.bytes()).map_err(|e| elf_error(&args.binary, &e))?;
    let program = discover(&elf, &DiscoverOptions::default()).map_err(|e| match e {
        DiscoverError::Elf(e) => elf_error(&args.binary, &e),
    })?;
    if let Some(path) = &args.profile {
        let loaded = profile_use::load_profile(
            path,
            &args.binary,
            &elf,
            args.force,
            args.instrumented.as_deref(),
        )?;
        let (attached, stale) = profile_use::attach_loaded(&program, &loaded)?;
        if let Some(report) = &stale {
            eprintln!(
                "rivet: note: {}",
                profile_use::stale_notice(&loaded, report, path, &args.binary)
            );
        }
        if args.json {
            let hot: Vec<serde_json::Value> = profile_use::hot_functions(&program, &attached)
                .into_iter()
                .take(args.top)
                .map(|(f, n)| {
                    serde_json::json!({
                        "name": program.function(f).qualified_name(),
                        "executed_instructions": n,
                    })
                })
                .collect();
            let r = &attached.report;
            let json = serde_json::json!({
                "records": r.records,
                "matched": r.matched,
                "matched_share": r.matched_share(),
                "profiled_functions": r.profiled_functions,
                "unknown_functions": r.unknown_functions,
                "stale_functions": r.stale_functions,
                "inferred": attached.inferred,
                "hot": hot,
                "stale": stale.as_ref().map(|r| profile_use::stale_json(r, args.top)),
            });
            println!("{json}");
        } else {
            print!("{}", profile_use::describe(&program, &attached, args.top));
            if let Some(report) = &stale {
                print!("{}", profile_use::describe_stale(report, args.top));
            }
        }
        return Ok(());
    }

    if !args.function.is_empty() {
        let mut text = String::new();
        let mut json = Vec::new();
        for name in &args.function {
            let matches: Vec<_> = program.functions_named(name).collect();
            if matches.is_empty() {
                return Err(UserError::new(format!(
                    "no function named {name} in {}",
                    args.binary.display()
                ))
                .hint("`rivet inspect --list` shows every function; locals are name/file"));
            }
            for f in matches {
                let mut f = f.clone();
                f.cfi = unwind_rows(&elf, &f).map_err(|e| elf_error(&args.binary, &e))?;
                let dump = dump_function(&program, &f);
                if args.json {
                    json.push(serde_json::json!({
                        "name": f.qualified_name(),
                        "address": f.range.start.to_string(),
                        "size": f.range.len(),
                        "status": f.skip_reason().map_or("simple".to_string(), |r| r.kind().to_string()),
                        "blocks": f.blocks.len(),
                        "jump_tables": f.jump_tables.len(),
                        "dump": dump,
                    }));
                } else {
                    text.push_str(&dump);
                    text.push('\n');
                }
            }
        }
        if args.json {
            text = serde_json::to_string_pretty(&json).expect("JSON of plain data") + "\n";
        }
        return emit(&text);
    }
    if args.dump {
        return emit(&dump_program(&program));
    }
    let statics = if program.info.relocation_mode == RelocationMode::Available {
        let symbols = elf.symbols().map_err(|e| elf_error(&args.binary, &e))?;
        elf.static_relocations(&symbols, &program.info.isa)
            .map_err(|e| elf_error(&args.binary, &e))?
    } else {
        Vec::new()
    };
    let ways_in = rivet_emit::ways_in::count(&elf, &program, &statics);
    let summary = summarize(&args.binary, &program, ways_in);
    if args.json {
        return emit(&(serde_json::to_string_pretty(&summary).expect("JSON of plain data") + "\n"));
    }
    let mut text = render_summary(&summary, args.show_skipped);
    if args.list {
        for f in &program.functions {
            let status = f
                .skip_reason()
                .map_or("simple".to_string(), |r| format!("skipped: {r}"));
            let _ = writeln!(
                text,
                "{} {:#x} {} {}",
                f.range.start,
                f.range.len(),
                f.qualified_name(),
                status
            );
        }
    }
    emit(&text)
}
