//! The rewrite pipeline, from a discovered program and a layout strategy to the output image.
//! `rewrite` runs the phases in order, one function each:
//!
//! 1. `choose_layout`: the functions to rewrite (simple ones in `.text`; in place mode only
//!    those no unknown reference can enter in the middle) and their layout.
//! 2. `plan_fragments`: every fragment planned (parallel); a function whose fragment cannot
//!    be planned, or does not fit in place, is left untouched and reported. On AArch64,
//!    `fragment_exits` then bounds the whole new text from those plans and, when it is within
//!    a conditional branch's reach, plans again with exits to other fragments written
//!    straight there instead of through islands.
//! 3. `place_fragments`: addresses in the new segment, then the address map and the
//!    instrumentation runtime.
//! 4. `encode_text` (parallel), then patches: references (relocated ones, and branches of
//!    code that stays into moved code that the assembler resolved), `forwarding_jumps` at old
//!    entries where no other entry lies under them, `init_fini_patches`, exported symbols.
//! 5. Unwind and exception tables, debug info (`output_sections`).
//! 6. The symbol table, the address translation table, the note, the superseded input
//!    sections; everything goes to the ELF writer.
//!
//! Nothing here touches the file system: the caller writes the image.

use std::collections::BTreeMap;

use rayon::prelude::*;
use rivet_arch::FragmentExits;
use rivet_elf::sink::ImageSink;
use rivet_elf::writer::{NewSection, Rewrite, new_segment, write_output};
use rivet_elf::{ElfFile, Vaddr};
use rivet_ir::layout::{FragmentRef, Layout, LayoutStrategy, PltCalls, build_layout};
use rivet_ir::{FuncId, Program, RelocationMode, TableBound};

use crate::cache_sets::{BlockExtent, SetBalancer};
use crate::code::{
    AddressMap, EmitError, FragmentPlan, KnownPlace, PlanOptions, ViaSlots, encode_fragment,
    plan_fragment,
};
use crate::debug;
use crate::frames::{self, FrameError};
use crate::output_sections::{
    NewSections, Superseded, add_debug_sections, add_symbol_table, add_unwind_sections,
    build_id_salt, rivet_note,
};
use crate::references;
use crate::symbols::{self, PlacedFragment};
use rivet_ir::probes::FunctionProbes;

/// Name of the note section that marks Rivet's output and records the input's build-id.
pub const RIVET_NOTE: &str = ".note.rivet";
/// Note type: the descriptor is the input's GNU build-id.
pub const NT_RIVET_INPUT_BUILD_ID: u32 = 1;
/// Prefix given to input sections whose contents the output replaces.
pub const ORIGINAL_PREFIX: &str = ".rivet.orig";

/// Builds a layout from the functions that may be rewritten (`movable`, by `FuncId`) and
/// whether first fragments stay in place (no relocations). It must leave every function
/// `movable` rejects untouched; it may leave others untouched too.
pub type LayoutFn<'a> = dyn Fn(&[bool], bool) -> Layout + Sync + 'a;

/// Where the layout comes from.
#[derive(Clone, Copy)]
pub enum LayoutSource<'a> {
    /// One of the fixed strategies (identity, reverse, random).
    Strategy(LayoutStrategy),
    /// A layout computed by the caller (the optimizer). `reorders_functions` says whether it
    /// changes function order, which needs relocations.
    Custom {
        build: &'a LayoutFn<'a>,
        reorders_functions: bool,
        /// Distinguishes outputs of different layouts in the new build-id.
        name: &'a str,
    },
}

impl std::fmt::Debug for LayoutSource<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LayoutSource::Strategy(s) => write!(f, "{s:?}"),
            LayoutSource::Custom { name, .. } => write!(f, "Custom({name})"),
        }
    }
}

/// Alignment of the new text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TextAlignment {
    /// Each hot (first) fragment starts at a multiple of this (a power of two, at least 1)...
    pub functions: u64,
    /// ...unless that takes more than this many bytes of padding; it then starts at a multiple
    /// of 16 at most (BOLT's `-align-functions-max-bytes`).
    pub functions_max_padding: u64,
    /// The hot text starts and ends at a multiple of this (1: no constraint; 2 MiB lets a
    /// runtime map it with huge pages).
    pub hot_text: u64,
    /// Bytes between that aligned start and the first hot function. Every hot line moves to
    /// other instruction-cache sets relative to code that stays put (shared libraries, PLT,
    /// functions left in place), which is how `bench/icache-offsets.sh` measures how much a
    /// layout's cache misses owe to where it happens to land.
    pub hot_text_offset: u64,
    /// Boundary for the blocks a layout asks to align (`FunctionLayout::aligned`); at most
    /// `functions`, so that offsets in a fragment keep their alignment once placed.
    pub blocks: u16,
    /// Up to this many bytes of padding before a hot fragment to spread the hottest cache
    /// lines over the instruction cache's sets (`cache_sets`); 0 turns that off.
    pub set_balance_padding: u64,
}

impl Default for TextAlignment {
    fn default() -> Self {
        TextAlignment {
            functions: 16,
            functions_max_padding: 15,
            hot_text: 64,
            hot_text_offset: 0,
            blocks: 16,
            set_balance_padding: 0,
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub struct RewriteOptions<'a> {
    pub layout: LayoutSource<'a>,
    pub alignment: TextAlignment,
    pub debug_writer: debug::DebugWriter,
    /// Which calls into PLT stubs go through the stubs' GOT slots (`code::ViaSlots`).
    pub plt_calls: PltCalls,
    /// Start-up code that maps the hot text on huge pages (`hugify`); needs `alignment.hot_text`
    /// to be `hugify::HUGE_PAGE`.
    pub hugify: bool,
    /// Keep AArch64's islands whatever the size of the new text (`FragmentExits::Islands`);
    /// `rivet optimize --aarch64-islands=always`, for comparisons and the tests of the large
    /// regime on small programs.
    pub always_islands: bool,
}

impl RewriteOptions<'_> {
    /// A fixed strategy with default alignment.
    pub fn strategy(strategy: LayoutStrategy) -> RewriteOptions<'static> {
        RewriteOptions {
            layout: LayoutSource::Strategy(strategy),
            alignment: TextAlignment::default(),
            debug_writer: debug::DebugWriter::default(),
            plt_calls: PltCalls::Keep,
            hugify: false,
            always_islands: false,
        }
    }
}

/// Names of the symbols that bracket the hot text (the names BOLT and its hugify runtime use).
pub const HOT_START: &str = "__hot_start";
pub const HOT_END: &str = "__hot_end";

/// Builds, for the functions a predicate accepts (the ones rewritten), given the (new, input)
/// entry address of every moved function: the counter file's first bytes, which the runtime
/// writes (padded to a page multiple), and the non-allocated sections (name, contents) that
/// describe the counters to readers (`rivet_profile::counters::MAP_SECTION` and its index;
/// emit does not depend on the profile crate, so the caller names them).
pub type FilePrefixFn<'a> =
    dyn Fn(&dyn Fn(FuncId) -> bool, &[(u64, u64)]) -> (Vec<u8>, CounterSections) + Sync + 'a;

/// Non-allocated sections (name, contents) an instrumented output carries for readers of its
/// counter files.
pub type CounterSections = Vec<(&'static str, Vec<u8>)>;

/// Instrumentation to write into the output: probes per function, and what the runtime needs.
#[allow(missing_debug_implementations)]
pub struct Instrumentation<'a> {
    /// Per `FuncId`: the probes of functions to instrument.
    pub probes: &'a [Option<&'a FunctionProbes>],
    pub counters: u32,
    /// The counter file's first bytes and the map section, for the functions the predicate
    /// accepts: the ones actually rewritten.
    pub file_prefix: &'a FilePrefixFn<'a>,
    /// Profile path used when `RIVET_PROFILE` is not set at run time.
    pub default_path: &'a str,
    /// One file per process (`.PID` appended to the path).
    pub per_process: bool,
    /// How the runtime counts atomically (the probes' choice, `rivet_arch::Atomics`).
    pub atomics: rivet_arch::Atomics,
}

/// Why the rewrite as a whole failed (per-function problems are not errors: the function
/// stays where it is).
#[derive(Debug, thiserror::Error)]
pub enum RewriteError {
    #[error("the binary was already rewritten by Rivet (it has a {RIVET_NOTE} section)")]
    AlreadyRewritten,
    #[error("function reordering needs relocations: {reason}")]
    NeedsRelocations { reason: String },
    #[error(transparent)]
    Elf(#[from] rivet_elf::ElfError),
    #[error("encoding {function}: {source}")]
    Encode { function: String, source: EmitError },
    #[error("unwind tables: {0}")]
    Frames(#[from] FrameError),
    #[error("invalid layout: {0}")]
    Layout(#[from] rivet_ir::layout::InvalidLayout),
    #[error("instrumentation: {0}")]
    Instrument(String),
    #[error(
        "the switch table entry at {site} cannot send its dispatch to {target} from where the \
         layout put the table's anchor"
    )]
    TableEntry { site: Vaddr, target: Vaddr },
    #[error("--hugify: {0}")]
    Hugify(String),
}

/// What the rewrite did.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub functions: usize,
    pub simple: usize,
    /// How conditional exits to other fragments were written (`fragment_exits`), and the
    /// bound on the new text that decided it (`new_text_bound`, from the plans with islands).
    pub fragment_exits: FragmentExits,
    pub new_text_bound: u64,
    /// Veneers placed for calls and jumps that cannot reach their targets (AArch64).
    pub veneers: usize,
    /// Landing pads placed for veneers whose destinations have none, where BTI guards the
    /// code (AArch64).
    pub landing_pads: usize,
    /// Copied calls and jumps that go straight to a linker veneer's destination instead of
    /// through the veneer (AArch64).
    pub veneers_bypassed: usize,
    /// Functions moved to the new text (relocation mode).
    pub moved: usize,
    /// Functions rewritten over their original bytes (in place mode).
    pub in_place: usize,
    /// Functions folded into an identical one (`Layout::folded`) and not emitted.
    pub folded: usize,
    /// Functions not rewritten, by reason.
    pub not_rewritten: BTreeMap<String, usize>,
    /// Per function (by `FuncId`): `None` when rewritten, else why not.
    pub reasons: Vec<Option<String>>,
    pub relocation_mode: bool,
    pub hot_bytes: u64,
    pub cold_bytes: u64,
    /// Hot fragments started later to spread the hottest cache lines over the sets
    /// (`TextAlignment::set_balance_padding`), and the padding bytes that took.
    pub set_balanced: usize,
    pub set_balance_bytes: u64,
    /// Hot blocks aligned (`FunctionLayout::aligned`), and how many of them with their
    /// padding where no code falls through, so that it never runs.
    pub aligned_blocks: usize,
    pub aligned_blocks_padding_never_runs: usize,
    /// Calls and tail calls into PLT stubs written through the stubs' GOT slots
    /// (`RewriteOptions::plt_calls`).
    pub calls_via_got: usize,
    /// The range `--hugify`'s start-up code maps on huge pages, when it was added.
    pub hugify: Option<(Vaddr, Vaddr)>,
    pub fragments: usize,
    pub patched_references: usize,
    /// Moved functions whose old entry keeps its original bytes instead of a forwarding jump,
    /// because another way into the old body lands within the jump's bytes.
    pub old_entries_not_forwarded: usize,
    /// Bytes of the jump left at the old entry of a moved function (the ISA's near jump).
    pub forwarding_jump_size: u64,
    pub frames: usize,
    pub lsdas: usize,
    /// Compilation units whose debug info was carried over (0: none, or removed).
    pub debug_units: usize,
    /// Line-table rows written for rewritten code.
    pub debug_moved_rows: usize,
    /// The writer that carried debug info over, and why the streaming one gave way, if it did.
    pub debug_writer: Option<debug::DebugWriter>,
    pub debug_fallback: Option<String>,
    pub warnings: Vec<String>,
    /// Wall time of each phase, in order (for `--timings`).
    pub timings: Vec<(&'static str, std::time::Duration)>,
}

/// The output image and what went into it.
#[derive(Debug)]
pub struct RewriteOutput {
    /// The image, from `rewrite`; empty from `rewrite_into`, which streamed it into its sink.
    pub image: Vec<u8>,
    pub layout: Layout,
    pub map: AddressMap,
    pub summary: Summary,
}

fn in_text_section(elf: &ElfFile<'_>, addr: Vaddr) -> bool {
    elf.section_containing(addr)
        .is_some_and(|s| s.is_exec() && (s.name == ".text" || s.name.starts_with(".text.")))
}

/// Why `f` cannot be rewritten, if it cannot.
fn ineligible(elf: &ElfFile<'_>, f: &rivet_ir::Function, in_place: bool) -> Option<String> {
    if let Some(reason) = f.skip_reason() {
        return Some(format!("skipped: {}", reason.kind()));
    }
    if !f.has_entry_block() {
        return Some("no entry block".into());
    }
    if !in_text_section(elf, f.range.start) {
        return Some("outside .text".into());
    }
    if in_place {
        if !f.secondary_entries.is_empty() {
            return Some("in place: has secondary entries".into());
        }
        if f.has_address_taken_label() {
            return Some("in place: a label's address is taken".into());
        }
        if f.jump_tables
            .iter()
            .any(|t| matches!(t.bound, TableBound::Scanned))
        {
            return Some("in place: jump table bound inferred".into());
        }
    }
    None
}

/// Refuses an input Rivet cannot rewrite as asked, before any work: one it rewrote already,
/// or one without usable relocations (`relocation_mode`) when functions are to move or be
/// instrumented (`needs_relocations`).
pub fn check_input(
    elf: &ElfFile<'_>,
    relocation_mode: &RelocationMode,
    needs_relocations: bool,
) -> Result<(), RewriteError> {
    if elf.section_by_name(RIVET_NOTE).is_some() {
        return Err(RewriteError::AlreadyRewritten);
    }
    match relocation_mode {
        RelocationMode::Unavailable { reason } if needs_relocations => {
            Err(RewriteError::NeedsRelocations {
                reason: reason.clone(),
            })
        }
        _ => Ok(()),
    }
}

/// Runs the whole rewrite of `elf` (discovered as `program`): the phases listed at the top of
/// this module, one function each. The image comes back in memory (`RewriteOutput::image`).
pub fn rewrite(
    elf: &ElfFile<'_>,
    program: &Program,
    options: &RewriteOptions<'_>,
    instrumentation: Option<&Instrumentation<'_>>,
) -> Result<RewriteOutput, RewriteError> {
    let mut image = Vec::new();
    let mut output = rewrite_into(elf, program, options, instrumentation, &mut image)?;
    output.image = image;
    Ok(output)
}

/// `rewrite`, with the image streamed into `sink` (a file, so that the image of a large
/// program is never held in memory) rather than returned.
pub fn rewrite_into(
    elf: &ElfFile<'_>,
    program: &Program,
    options: &RewriteOptions<'_>,
    instrumentation: Option<&Instrumentation<'_>>,
    sink: &mut dyn ImageSink,
) -> Result<RewriteOutput, RewriteError> {
    let reorders_functions = match options.layout {
        LayoutSource::Strategy(s) => s.reorders_functions(),
        LayoutSource::Custom {
            reorders_functions, ..
        } => reorders_functions,
    };
    check_input(
        elf,
        &program.info.relocation_mode,
        reorders_functions || instrumentation.is_some(),
    )?;
    let relocation_mode = program.info.relocation_mode == RelocationMode::Available;
    let in_place = !relocation_mode;
    let isa = program.info.isa;
    let mut summary = Summary {
        forwarding_jump_size: isa.forwarding_jump_size(),
        functions: program.functions.len(),
        simple: program.functions.iter().filter(|f| f.is_simple()).count(),
        relocation_mode,
        reasons: vec![None; program.functions.len()],
        ..Summary::default()
    };
    let mut clock = PhaseClock::start();

    // 1. Eligibility and layout.
    let mut layout = choose_layout(elf, program, options, in_place, &mut summary)?;
    keep_scaled_tables_encodable(program, &mut layout, &mut summary);
    clock.lap(&mut summary, "layout");

    // 2. Plan fragments; drop functions that cannot be planned or do not fit.
    let mut plans = plan_fragments(
        program,
        &mut layout,
        options,
        instrumentation,
        in_place,
        &mut summary,
    )?;

    // 3. Addresses. Instrumentation counters get a segment of their own below the new one.
    let mut segment = new_segment(elf)?;
    let counters = instrumentation.map(|i| {
        let size = (u64::from(i.counters) * 8).max(1).div_ceil(4096) * 4096;
        // The runtime's private data page follows the counters (`rivet_runtime::DATA_SIZE`).
        (
            segment.reserve_counters(size + rivet_runtime::DATA_SIZE),
            size,
        )
    });
    // 2b. Conditional exits between fragments: planned again, shorter, when the new text is
    // bounded within their reach.
    let exits = if options.always_islands || instrumentation.is_some() || in_place {
        FragmentExits::Islands
    } else {
        fragment_exits(
            elf,
            program,
            &layout,
            &plans,
            &options.alignment,
            segment.content_start(),
        )
    };
    summary.new_text_bound = new_text_bound(program.info.isa, &layout, &plans, &options.alignment);
    if exits != FragmentExits::Islands {
        layout.exits = exits;
        plans = plan_fragments(
            program,
            &mut layout,
            options,
            instrumentation,
            in_place,
            &mut summary,
        )?;
    }
    summary.fragment_exits = layout.exits;
    clock.lap(&mut summary, "plan fragments");
    let (text, mut map) = loop {
        let (text, map) = place_with_veneers(
            elf,
            program,
            &layout,
            plans,
            &options.alignment,
            segment.content_start(),
            &mut summary,
        );
        let overflows = if in_place {
            in_place_overflows(program, &text)
        } else {
            BTreeMap::new()
        };
        if overflows.is_empty() {
            break (text, map);
        }
        // Place again without those functions, from plans without veneers (the others'
        // veneers may have been for them).
        plans = text
            .placed
            .into_iter()
            .map(|(mut plan, _)| {
                plan.clear_veneers();
                (plan.fragment, plan)
            })
            .collect();
        drop_functions(
            program,
            &mut layout,
            &mut plans,
            overflows,
            in_place,
            &mut summary,
        )?;
    };
    // A fold stands only while its kept copy moved (a function dropped above stays as it
    // was, and so must whatever was to share its new code).
    let mut folded = std::mem::take(&mut layout.folded);
    folded.retain(|&(f, kept)| layout.is_rewritten(kept) && !layout.is_rewritten(f));
    layout.folded = folded;
    map.fold(program, &layout.folded);
    summary.folded = layout.folded.len();
    // The instrumentation runtime, after the cold text.
    let runtime = match (instrumentation, counters) {
        (Some(i), Some((counters, counters_size))) => Some(build_runtime(
            elf,
            program,
            &map,
            &layout,
            i,
            align(text.bounds.cold_end, 64),
            counters,
            counters_size,
        )?),
        _ => None,
    };
    // The huge-page start-up code, at the same place (a binary is instrumented or optimized,
    // never both).
    let hugify = if options.hugify && runtime.is_none() {
        if options.alignment.hot_text != crate::hugify::HUGE_PAGE {
            return Err(RewriteError::Hugify(
                "the hot text must be aligned to 2 MiB".into(),
            ));
        }
        crate::hugify::build(
            elf,
            isa,
            program.info.kind,
            (text.bounds.hot_start, text.bounds.hot_end),
            align(text.bounds.cold_end, 64),
            &|v| map.translate(program, v).unwrap_or(v),
            &mut summary.warnings,
        )?
    } else {
        None
    };
    summary.hugify = hugify.as_ref().map(|h| h.range);
    let tables_start = match (&runtime, &hugify) {
        (Some((addr, code, _)), _) => align(*addr + code.bytes.len() as u64, 8),
        (None, Some(h)) => align(h.at + h.code.bytes.len() as u64, 8),
        (None, None) => align(text.bounds.cold_end, 8),
    };

    // 4. References and encoding.
    let symbols_list = elf.symbols()?;
    let statics = if relocation_mode {
        elf.static_relocations(&symbols_list, &isa)?
    } else {
        Vec::new()
    };
    let dynamics = elf.dynamic_relocations(&isa)?;
    // A folded function's body is dead code: references from it are not patched (its entry
    // forwards), and references to its entry are sent to the kept copy like those to moved
    // code.
    let is_rewritten = |f: FuncId| layout.is_rewritten(f) || layout.folded_into(f).is_some();
    let refs = references::collect(elf, program, &is_rewritten, &statics, &dynamics);
    // What the relocations say now lives in `refs`; a large program has millions of them,
    // which would otherwise stay until the image is written.
    drop(statics);
    drop(dynamics);
    let fixups = crate::code::Fixups {
        absolute_fields: &refs.in_moved_code,
        address_parts: &refs.parts_in_moved_code,
        counters: counters.map(|c| c.0),
        recorder: runtime.as_ref().map(|(_, code, _)| code.recorder),
    };
    let EncodedText {
        hot_text,
        cold_text,
        mut patches,
    } = encode_text(elf, program, &text, &map, &fixups, in_place)?;
    patches.extend(reference_patches(program, &refs, &map, &mut summary)?);
    if !in_place {
        patches.extend(forwarding_jumps(
            elf,
            program,
            &layout,
            &map,
            &refs,
            &mut summary,
        ));
    }
    // Every reference is a patch now: the tables of millions of them (a large program's) need
    // not stay through the unwind tables, the debug info and the image.
    drop(refs);
    // Nor need the input's code and relocations stay resident: read for the last time but
    // for the copy the image streams (`ElfFile::release_pages`).
    for s in elf.sections() {
        if s.is_exec() || (s.sh_type == object::elf::SHT_RELA.0 && !s.is_alloc()) {
            elf.release_pages(s.data);
        }
    }
    // Entry point, DT_INIT / DT_FINI, exported symbols. An instrumented binary starts in the
    // runtime.
    let runtime_entry = runtime
        .as_ref()
        .and_then(|(_, code, _)| code.entry_stub)
        .or_else(|| hugify.as_ref().and_then(|h| h.code.entry_stub));
    let runtime_init = runtime
        .as_ref()
        .and_then(|(_, code, _)| code.init_stub)
        .or_else(|| hugify.as_ref().and_then(|h| h.code.init_stub));
    let entry = runtime_entry.or_else(|| {
        map.translate(program, elf.entry)
            .filter(|e| *e != elf.entry)
    });
    patches.extend(init_fini_patches(elf, program, &map, runtime_init));

    let bounds = text.bounds;
    let mut sections = NewSections::after(elf);
    let text_sections = TextSections::add(&mut sections, bounds, hot_text, cold_text);
    let hot_index = text_sections.hot_index;
    let section_of = |addr: Vaddr| text_sections.section_of(elf, addr);
    patches.extend(symbols::dynamic_symbol_patches(
        elf,
        program,
        &map,
        &section_of,
    ));
    let mut counter_map_sections = Vec::new();
    if let Some((addr, code, map_sections)) = runtime {
        counter_map_sections = map_sections;
        sections.add(NewSection::new(
            ".rivet.runtime",
            object::elf::SHT_PROGBITS.0,
            object::elf::SHF_ALLOC.0 | object::elf::SHF_EXECINSTR.0,
            addr,
            code.bytes,
            64,
        ));
    }
    let load_align = hugify.as_ref().map_or(0, |_| crate::hugify::HUGE_PAGE);
    if let Some(h) = hugify {
        sections.add(NewSection::new(
            crate::hugify::SECTION,
            object::elf::SHT_PROGBITS.0,
            object::elf::SHF_ALLOC.0 | object::elf::SHF_EXECINSTR.0,
            h.at,
            h.code.bytes,
            64,
        ));
    }
    clock.lap(&mut summary, "encode and patch");

    // 5. Unwind and exception tables, then debug info. They are independent, but built one
    // after the other: side by side, their working sets add up to the peak memory of the
    // run (SQLite: 160 MB against 144 MB), for a few tens of milliseconds saved.
    let placed = text.placed;
    let tables = frames::build(elf, program, &layout, &placed, &map, tables_start);
    clock.lap(&mut summary, "unwind tables");
    // The plans are the largest structure of the run; the symbols need only where each
    // fragment went, and the code moves for the debug info free them as they go.
    let fragments: Vec<PlacedFragment> = placed
        .iter()
        .map(|(plan, addr)| PlacedFragment {
            function: plan.fragment.function,
            fragment: plan.fragment.fragment,
            addr: *addr,
            size: plan.size,
        })
        .collect();
    let moves = debug::CodeMoves::new(program, &map, placed);
    let debug_sections = debug::rewrite(elf, &moves, options.debug_writer);
    drop(moves);
    // The input's debug info was read for the last time, but for what the image copies as it
    // is (streamed from the input again): the largest part of a large program's file, which
    // would otherwise stay resident to the end.
    for s in elf.sections() {
        if s.name.starts_with(".debug") || s.name.starts_with(".rela.debug") {
            elf.release_pages(s.data);
        }
    }
    let tables = tables?;
    let has_tables = tables.is_some();
    let eh_frame_hdr = tables.map(|t| add_unwind_sections(t, &mut sections, &mut summary));
    clock.lap(&mut summary, "debug info");

    // 6. Symbols, debug info, the address translation table, the note, and the input
    // sections the output supersedes.
    // The hot text's bounds, for huge-page runtimes and for users to see it.
    let markers: Vec<(&str, Vaddr, u16)> = match hot_index {
        Some(index) if bounds.hot_end > bounds.hot_start => vec![
            (HOT_START, bounds.hot_start, index),
            (
                HOT_END,
                align(bounds.hot_end, options.alignment.hot_text.max(1)),
                index,
            ),
        ],
        _ => Vec::new(),
    };
    if let Some(table) = symbols::build(
        elf,
        program,
        &layout,
        &map,
        &fragments,
        &section_of,
        &markers,
    ) {
        add_symbol_table(table, &mut sections);
    }
    add_debug_sections(debug_sections, &mut sections, &mut summary);
    // The address translation table (not for instrumented code: probes sit inside blocks,
    // which the table's block-start granularity cannot describe).
    // Instrumented code gets its counter map instead: kept once here, out of the loaded image,
    // rather than in every counter file.
    for (name, contents) in counter_map_sections {
        sections.add(NewSection::new(
            name,
            object::elf::SHT_PROGBITS.0,
            0,
            Vaddr(0),
            contents,
            8,
        ));
    }
    if instrumentation.is_none() {
        sections.add(NewSection::new(
            crate::bat::SECTION,
            object::elf::SHT_PROGBITS.0,
            0,
            Vaddr(0),
            crate::bat::encode(&map.block_pairs(program)),
            8,
        ));
    }
    if !layout.folded.is_empty() {
        let pairs: Vec<(Vaddr, Vaddr)> = layout
            .folded
            .iter()
            .map(|&(f, kept)| {
                (
                    program.function(f).range.start,
                    program.function(kept).range.start,
                )
            })
            .collect();
        sections.add(NewSection::new(
            crate::bat::FOLDS_SECTION,
            object::elf::SHT_PROGBITS.0,
            0,
            Vaddr(0),
            crate::bat::encode(&pairs),
            8,
        ));
    }
    let input_id = elf.build_id().unwrap_or_default();
    sections.add(rivet_note(input_id));
    let superseded = Superseded::find(elf, &sections.list, has_tables, in_place, hot_index);

    let rewrite = Rewrite {
        patches,
        sections: sections.list,
        renames: superseded.renames,
        retype_as_data: superseded.retype,
        drop_contents: superseded.drop_contents,
        entry,
        eh_frame_hdr,
        rebuild_id_salt: Some(build_id_salt(input_id, options, &layout, instrumentation)),
        counters: counters.map(|(at, size)| (at, size + rivet_runtime::DATA_SIZE)),
        load_align,
    };
    clock.lap(&mut summary, "symbols");
    write_output(elf, &segment, rewrite, sink)?;
    clock.lap(&mut summary, "write image");
    Ok(RewriteOutput {
        image: Vec::new(),
        layout,
        map,
        summary,
    })
}

/// Records how long each phase of a rewrite took, into the summary.
struct PhaseClock {
    last: std::time::Instant,
}

impl PhaseClock {
    fn start() -> PhaseClock {
        PhaseClock {
            last: std::time::Instant::now(),
        }
    }

    fn lap(&mut self, summary: &mut Summary, phase: &'static str) {
        let now = std::time::Instant::now();
        summary.timings.push((phase, now - self.last));
        self.last = now;
    }
}

/// Phase 1: which functions may be rewritten (the reasons of the others go to the summary),
/// and the layout of those.
fn choose_layout(
    elf: &ElfFile<'_>,
    program: &Program,
    options: &RewriteOptions<'_>,
    in_place: bool,
    summary: &mut Summary,
) -> Result<Layout, RewriteError> {
    let mut movable = vec![false; program.functions.len()];
    for f in &program.functions {
        match ineligible(elf, f, in_place) {
            None => movable[f.id.0 as usize] = true,
            Some(reason) => summary.reasons[f.id.0 as usize] = Some(reason),
        }
    }
    // A function and its compiler-split cold parts jump into each other's interiors: they are
    // rewritten together or not at all.
    let mut family_ok = vec![true; program.functions.len()];
    for f in &program.functions {
        family_ok[program.family_root(f.id).0 as usize] &= movable[f.id.0 as usize];
    }
    for f in &program.functions {
        if movable[f.id.0 as usize] && !family_ok[program.family_root(f.id).0 as usize] {
            movable[f.id.0 as usize] = false;
            summary.reasons[f.id.0 as usize] = Some("part of a split function that stays".into());
        }
    }
    Ok(match options.layout {
        LayoutSource::Strategy(s) => build_layout(program, &movable, s, in_place),
        LayoutSource::Custom { build, .. } => {
            let layout = build(&movable, in_place);
            if let Some(f) = layout.functions.iter().enumerate().find_map(|(i, fl)| {
                (fl.is_some() && !movable.get(i).copied().unwrap_or(false)).then_some(i)
            }) {
                return Err(RewriteError::Layout(rivet_ir::layout::InvalidLayout(
                    format!(
                        "{} cannot be rewritten: {}",
                        program.function(FuncId(f as u32)).name(),
                        summary.reasons[f].as_deref().unwrap_or("not movable")
                    ),
                )));
            }
            layout
        }
    })
}

/// AArch64 switch tables store each target as a distance from a label of the function (the
/// anchor), in instructions, unsigned in clang's tables. Byte and halfword entries reach
/// only 1 KiB or 256 KiB (half that each way when signed), so a reordered or split function
/// could need a distance they cannot hold, and an unsigned entry cannot point before its
/// anchor. A function with such a table keeps its original block order, unsplit (what its
/// tables were written for; sizes stay within a few bytes of the original's), and the
/// summary says so; word entries reach anywhere and only need the order an unsigned table
/// requires. Whatever still does not fit is refused when the entries are written
/// (`RewriteError::TableEntry`). Widening such tables in new data, so hot switch functions
/// can be laid out freely, is left to the AArch64 optimization work.
fn keep_scaled_tables_encodable(program: &Program, layout: &mut Layout, summary: &mut Summary) {
    for f in &program.functions {
        let Some(fl) = layout.functions[f.id.0 as usize].as_ref() else {
            continue;
        };
        let scaled: Vec<_> = f
            .jump_tables
            .iter()
            .filter_map(|t| match t.kind {
                rivet_ir::JumpTableKind::Scaled { anchor, signed, .. } => {
                    Some((anchor, signed, t.entry_size, &t.entries))
                }
                _ => None,
            })
            .collect();
        if scaled.is_empty() {
            continue;
        }
        let original_order = fl.fragments.len() == 1
            && fl.fragments[0]
                .iter()
                .enumerate()
                .all(|(i, b)| b.0 as usize == i);
        let mut place = vec![None; f.blocks.len()];
        for (k, fragment) in fl.fragments.iter().enumerate() {
            for (i, b) in fragment.iter().enumerate() {
                place[b.0 as usize] = Some((k, i));
            }
        }
        let at = |addr: Vaddr| f.block_at(addr).and_then(|b| place[b.0 as usize]);
        let encodable = scaled.iter().all(|(anchor, signed, entry_size, entries)| {
            let Some((fragment, index)) = at(*anchor) else {
                return false;
            };
            (*entry_size >= 4 || original_order)
                && entries
                    .iter()
                    .all(|e| at(*e).is_some_and(|(k, i)| *signed || (k == fragment && i >= index)))
        });
        if encodable {
            continue;
        }
        let aligned = fl.aligned.clone();
        // Changed exits stay right in any order: they only name other blocks or functions.
        let changed_exits = fl.changed_exits.clone();
        let promoted_calls = fl.promoted_calls.clone();
        layout.functions[f.id.0 as usize] = Some(rivet_ir::layout::FunctionLayout {
            fragments: vec![(0..f.blocks.len() as u32).map(rivet_ir::BlockId).collect()],
            aligned,
            changed_exits,
            promoted_calls,
        });
        layout.cold_order.retain(|r| r.function != f.id);
        summary.warnings.push(format!(
            "{}: original block order kept, so its switch table can still reach its targets",
            f.name()
        ));
    }
}

/// True when every scaled switch table of `f` (AArch64) whose anchor `plan` places still
/// holds, in its entries' width, the distance from the anchor to each target as the plan
/// lays them out: instrumentation probes or a new order can stretch a byte table's reach
/// (255 instructions) past what it holds. A target outside the plan's fragment is found
/// by `keep_scaled_tables_encodable` first; here it does not fit either.
fn scaled_tables_fit(f: &rivet_ir::Function, plan: &FragmentPlan) -> bool {
    let tables: Vec<_> = f
        .jump_tables
        .iter()
        .filter_map(|t| match t.kind {
            rivet_ir::JumpTableKind::Scaled {
                anchor,
                signed,
                shift,
            } if t.entry_size < 4 => Some((anchor, signed, shift, t.entry_size, &t.entries)),
            _ => None,
        })
        .collect();
    if tables.is_empty() {
        return true;
    }
    let offsets: std::collections::HashMap<u32, u32> = plan.inst_offsets.iter().copied().collect();
    let offset_of = |addr: Vaddr| {
        let k = f.insts.binary_search_by_key(&addr, |i| i.addr()).ok()?;
        offsets.get(&(k as u32)).map(|&o| i64::from(o))
    };
    tables
        .iter()
        .all(|&(anchor, signed, shift, size, entries)| {
            let Some(anchor_at) = offset_of(anchor) else {
                // The anchor lies in another fragment: that fragment's plan decides.
                return true;
            };
            let bits = 8 * u32::from(size);
            let (lo, hi) = if signed {
                (-(1i64 << (bits - 1)), (1i64 << (bits - 1)) - 1)
            } else {
                (0, (1i64 << bits) - 1)
            };
            entries.iter().all(|&target| {
                offset_of(target).is_some_and(|t| {
                    let distance = t - anchor_at;
                    distance % (1 << shift) == 0 && (lo..=hi).contains(&(distance >> shift))
                })
            })
        })
}

/// Phase 2: plans every fragment of the layout (in parallel). A function whose fragment
/// cannot be planned, or does not fit in place, leaves the layout with its whole split
/// family, and its reason goes to the summary.
fn plan_fragments(
    program: &Program,
    layout: &mut Layout,
    options: &RewriteOptions<'_>,
    instrumentation: Option<&Instrumentation<'_>>,
    in_place: bool,
    summary: &mut Summary,
) -> Result<BTreeMap<FragmentRef, FragmentPlan>, RewriteError> {
    let alignment = options.alignment;
    if layout
        .functions
        .iter()
        .flatten()
        .any(|fl| !fl.aligned.is_empty())
        && (!alignment.blocks.is_power_of_two()
            || u64::from(alignment.blocks) > alignment.functions)
    {
        return Err(RewriteError::Layout(rivet_ir::layout::InvalidLayout(
            format!(
                "block alignment {} is not a power of two up to the function alignment {}",
                alignment.blocks, alignment.functions
            ),
        )));
    }
    let refs: Vec<FragmentRef> = layout
        .functions
        .iter()
        .enumerate()
        .filter_map(|(i, fl)| fl.as_ref().map(|fl| (i, fl.fragments.len())))
        .flat_map(|(i, n)| {
            (0..n as u32).map(move |k| FragmentRef {
                function: FuncId(i as u32),
                fragment: k,
            })
        })
        .collect();
    let via_slots = if in_place || options.plt_calls == PltCalls::Keep {
        ViaSlots::default()
    } else {
        ViaSlots::of_program(program)
    };
    let isa = program.info.isa;
    let layout_ref = &*layout;
    let planned: Vec<(FragmentRef, Result<FragmentPlan, EmitError>)> = refs
        .par_iter()
        .map_init(
            || isa.branch_encoder(),
            |encoder, r| {
                let f = program.function(r.function);
                let probes = instrumentation
                    .and_then(|i| i.probes.get(r.function.0 as usize).copied().flatten());
                (
                    *r,
                    plan_fragment(
                        f,
                        *r,
                        layout_ref.fragment(*r),
                        encoder,
                        PlanOptions {
                            probes,
                            aligned: if r.fragment == 0 {
                                layout_ref
                                    .function(r.function)
                                    .map_or(&[][..], |fl| &fl.aligned)
                            } else {
                                &[]
                            },
                            block_alignment: alignment.blocks,
                            via_slots: options
                                .plt_calls
                                .applies_to(r.fragment)
                                .then_some(&via_slots),
                            known_place: (in_place && r.fragment == 0).then_some(KnownPlace {
                                at: f.range.start,
                                program,
                            }),
                            exits: layout_ref.exits,
                            changed_exits: layout_ref
                                .function(r.function)
                                .map_or(&[][..], |fl| &fl.changed_exits),
                            promoted: layout_ref
                                .function(r.function)
                                .map_or(&[][..], |fl| &fl.promoted_calls),
                            pic: program.info.kind != rivet_elf::ElfKind::Executable,
                        },
                    ),
                )
            },
        )
        .collect();
    let mut dropped: BTreeMap<FuncId, String> = BTreeMap::new();
    let mut plans: BTreeMap<FragmentRef, FragmentPlan> = BTreeMap::new();
    for (r, plan) in planned {
        match plan {
            Ok(plan) => {
                let f = program.function(r.function);
                if in_place && r.fragment == 0 && plan.size > f.range.len() + f.padding_after {
                    dropped.insert(r.function, "in place: does not fit".into());
                }
                if !scaled_tables_fit(f, &plan) {
                    dropped.insert(
                        r.function,
                        "its switch table's byte or halfword entries cannot reach the moved targets"
                            .into(),
                    );
                }
                plans.insert(r, plan);
            }
            Err(e) => {
                let what = match e {
                    EmitError::Unsupported { what, .. } => what.to_string(),
                    other => other.to_string(),
                };
                dropped.insert(r.function, format!("cannot emit: {what}"));
            }
        }
    }
    drop_functions(program, layout, &mut plans, dropped, in_place, summary)?;
    Ok(plans)
}

/// An upper bound on the span of the new text (first byte of the hot text to last byte of
/// the cold text) once `plans` (made with islands) are placed, whatever the exits' form:
/// each plan's size, which writing its exits straight to another fragment only lowers (a
/// short branch instead of one to an island, or of the pair; no island), plus the block
/// alignment padding its aligned blocks may hold beyond what it holds now and what its short
/// branches may grow by over that padding (`FragmentPlan::growth_slack`), the function
/// alignment and set-balancing padding before each hot fragment, and the padding between
/// the hot and the cold text. Veneers are not in it: `fragment_exits` rules them out.
pub fn new_text_bound(
    isa: rivet_arch::Isa,
    layout: &Layout,
    plans: &BTreeMap<FragmentRef, FragmentPlan>,
    alignment: &TextAlignment,
) -> u64 {
    let hot: std::collections::HashSet<FragmentRef> = layout.hot_order.iter().copied().collect();
    let before_hot = alignment.functions.max(1) - 1 + alignment.set_balance_padding;
    plans
        .iter()
        .map(|(r, plan)| {
            plan.size
                + plan.padding_slack()
                + plan.growth_slack(isa)
                + if hot.contains(r) { before_hot } else { 0 }
        })
        .sum::<u64>()
        + alignment.hot_text.max(64)
}

/// How the rewrite writes conditional branches from one fragment to a block of another of
/// the same function (AArch64; `FragmentExits`). Islands cost each exit a second taken branch
/// and each fragment a word per target, in the hot text; the alternative, branching straight
/// there, needs the target within the branch's reach wherever the fragments land, which
/// fragment-local planning cannot know of one branch. It can of all of them: when the whole
/// new text spans less than the reach (`new_text_bound`, from the plans, before anything is
/// placed), every block of every moved fragment is within it. The bound leaves veneers out,
/// so it holds only where no veneer can be needed: everything a moved branch may go to (the
/// input's loaded image, the new text) lies within a `b`'s reach of the new text.
fn fragment_exits(
    elf: &ElfFile<'_>,
    program: &Program,
    layout: &Layout,
    plans: &BTreeMap<FragmentRef, FragmentPlan>,
    alignment: &TextAlignment,
    content_start: Vaddr,
) -> FragmentExits {
    let isa = program.info.isa;
    if !isa.near_conditional_is_a_pair() {
        return FragmentExits::Islands;
    }
    let bound = new_text_bound(isa, layout, plans, alignment);
    let lowest = elf
        .segments()
        .iter()
        .filter(|s| s.is_load())
        .map(|s| s.vaddr)
        .min()
        .unwrap_or(content_start);
    let text_end = content_start + alignment.hot_text.max(64) + alignment.hot_text_offset + bound;
    if !isa.direct_branch_reaches(lowest, text_end) || !isa.direct_branch_reaches(text_end, lowest)
    {
        return FragmentExits::Islands;
    }
    isa.fragment_exits(bound)
}

/// Takes the `dropped` functions (with their reasons) out of the layout and the plans: they
/// stay as they are in the output. Dropping one member of a split family drops the others.
/// The summary's counts of rewritten and not rewritten functions are made anew.
fn drop_functions(
    program: &Program,
    layout: &mut Layout,
    plans: &mut BTreeMap<FragmentRef, FragmentPlan>,
    mut dropped: BTreeMap<FuncId, String>,
    in_place: bool,
    summary: &mut Summary,
) -> Result<(), RewriteError> {
    let dropped_roots: Vec<FuncId> = dropped.keys().map(|f| program.family_root(*f)).collect();
    for f in &program.functions {
        if layout.is_rewritten(f.id)
            && !dropped.contains_key(&f.id)
            && dropped_roots.contains(&program.family_root(f.id))
        {
            dropped.insert(f.id, "part of a split function that stays".into());
        }
    }
    for (f, reason) in &dropped {
        summary.reasons[f.0 as usize] = Some(reason.clone());
        layout.functions[f.0 as usize] = None;
    }
    summary.not_rewritten.clear();
    for reason in summary.reasons.iter().flatten() {
        *summary.not_rewritten.entry(reason.clone()).or_default() += 1;
    }
    layout
        .hot_order
        .retain(|r| !dropped.contains_key(&r.function));
    layout
        .cold_order
        .retain(|r| !dropped.contains_key(&r.function));
    plans.retain(|r, _| !dropped.contains_key(&r.function));
    layout.validate(program)?;
    if in_place {
        summary.in_place = layout.rewritten_count();
    } else {
        summary.moved = layout.rewritten_count();
    }
    Ok(())
}

/// In place mode, the functions whose rewritten body no longer fits where the original was
/// once placement gave it veneers (its cold part landed beyond a branch's reach): they must
/// stay as they are, or their veneers would overwrite the code that follows them.
fn in_place_overflows(program: &Program, text: &PlacedText) -> BTreeMap<FuncId, String> {
    text.placed
        .iter()
        .filter(|(plan, addr)| {
            let f = program.function(plan.fragment.function);
            plan.fragment.fragment == 0
                && *addr == f.range.start
                && plan.size > f.range.len() + f.padding_after
        })
        .map(|(plan, _)| {
            (
                plan.fragment.function,
                "in place: no room for the veneers its cold part needs".to_string(),
            )
        })
        .collect()
}

/// Where the new text lies: the hot part from the start of the new segment, then the cold
/// part.
#[derive(Clone, Copy)]
struct TextBounds {
    hot_start: Vaddr,
    hot_end: Vaddr,
    cold_start: Vaddr,
    cold_end: Vaddr,
}

/// Every planned fragment with its address.
struct PlacedText {
    /// In-place fragments first, then the hot order, then the cold order.
    placed: Vec<(FragmentPlan, Vaddr)>,
    bounds: TextBounds,
}

/// Phase 3: gives every fragment its address: in place at its function's old entry, or in
/// the new text from `content_start`, hot fragments aligned (and spread over cache sets when
/// asked), cold ones after them. The plans move into the result (they are the largest
/// structure of the run).
/// How many times placement is redone for veneers before giving up (each round only adds
/// veneers, so it converges; in practice one or two rounds).
const VENEER_ROUNDS: usize = 8;

/// Places the fragments, then gives every direct call and jump that cannot reach its target
/// from where it landed a veneer at the end of its fragment, and places again, until every
/// branch reaches (sizes only grow, so a branch that reached may stop reaching: hence the
/// rounds). Only ISAs with short direct branches have veneers (AArch64's `b`/`bl`: +-128
/// MiB); on x86-64 this is one placement. Where BTI guards the code, a veneer's indirect
/// jump must land on a pad: a destination without one (a block only ever branched to
/// directly, a function compiled without a pad because nothing called it indirectly) gets a
/// landing pad that jumps on to it, in the fragment that holds it or, for code that stays,
/// in the placed fragment nearest to it (`needed_landings`).
fn place_with_veneers(
    elf: &ElfFile<'_>,
    program: &Program,
    layout: &Layout,
    mut plans: BTreeMap<FragmentRef, FragmentPlan>,
    alignment: &TextAlignment,
    content_start: Vaddr,
    summary: &mut Summary,
) -> (PlacedText, AddressMap) {
    // Placement adds its counts to the summary: each round starts from the same one.
    let before = summary.clone();
    // In place mode is the mode of a file without relocations (`rewrite`).
    let in_place = program.info.relocation_mode != RelocationMode::Available;
    let isa = program.info.isa;
    let veneer_size = isa.veneer_size();
    let guarded = isa.branch_targets_guarded(elf);
    for round in 0.. {
        *summary = before.clone();
        let text = place_fragments(
            program,
            layout,
            plans,
            alignment,
            in_place,
            content_start,
            summary,
        );
        let map = AddressMap::new(program, &text.placed);
        let far: Vec<Vec<Vaddr>> = match veneer_size {
            Some(_) if round < VENEER_ROUNDS => text
                .placed
                .iter()
                .map(|(plan, addr)| plan.far_targets(program, *addr, &map))
                .collect(),
            _ => Vec::new(),
        };
        let landings = match isa.landing_pad_size() {
            Some(_) if guarded && round < VENEER_ROUNDS => {
                needed_landings(elf, program, &text.placed, &far, &map)
            }
            _ => Vec::new(),
        };
        if far.iter().all(Vec::is_empty) && landings.is_empty() {
            summary.veneers = text.placed.iter().map(|(p, _)| p.veneers.len()).sum();
            summary.veneers_bypassed = text
                .placed
                .iter()
                .map(|(p, addr)| p.bypassed_veneers(program, *addr, &map))
                .sum();
            summary.landing_pads = text.placed.iter().map(|(p, _)| p.landings.len()).sum();
            return (text, map);
        }
        let size = veneer_size.expect("far targets only where there are veneers");
        let mut placed: Vec<FragmentPlan> = text
            .placed
            .into_iter()
            .zip(far)
            .map(|((mut plan, _), targets)| {
                for target in targets {
                    plan.add_veneer(target, size);
                }
                plan
            })
            .collect();
        if let Some(landing_size) = isa.landing_pad_size() {
            for (host, target) in landings {
                placed[host].add_landing(target, landing_size);
            }
        }
        plans = placed
            .into_iter()
            .map(|plan| (plan.fragment, plan))
            .collect();
    }
    unreachable!("the rounds end by returning")
}

/// The landing pads a round of placement still lacks: for every veneer destination (placed
/// or about to be, `far`) whose code does not start with a pad that accepts the veneer's
/// jump, (index of the placed fragment to hold the pad, destination). The pad goes in the
/// fragment that holds the destination, so that its jump reaches; a destination in code that
/// stays gets its pad in the placed fragment whose end is nearest to it (the pad's encoding
/// fails with the addresses if even that is out of reach).
fn needed_landings(
    elf: &ElfFile<'_>,
    program: &Program,
    placed: &[(FragmentPlan, Vaddr)],
    far: &[Vec<Vaddr>],
    map: &AddressMap,
) -> Vec<(usize, Vaddr)> {
    let isa = program.info.isa;
    let mut out: Vec<(usize, Vaddr)> = Vec::new();
    let destinations = placed
        .iter()
        .enumerate()
        .flat_map(|(k, (plan, _))| plan.veneers.iter().chain(far.get(k).into_iter().flatten()));
    for &old in destinations {
        if map.has_landing(old) || out.iter().any(|&(_, t)| t == old) {
            continue;
        }
        // A moved instruction keeps its bytes (a pad is copied as it is), so the input says
        // whether the destination has a pad.
        if elf
            .bytes_at(old, 4)
            .is_some_and(|bytes| isa.lands_veneer(bytes))
        {
            continue;
        }
        let Some(new) = map.translate(program, old) else {
            continue;
        };
        let holder = placed
            .iter()
            .position(|(plan, addr)| *addr <= new && new < *addr + plan.size);
        let nearest = || {
            placed
                .iter()
                .enumerate()
                .min_by_key(|(_, (plan, addr))| (*addr + plan.size).get().abs_diff(new.get()))
                .map(|(k, _)| k)
        };
        if let Some(host) = holder.or_else(nearest) {
            out.push((host, old));
        }
    }
    out
}

fn place_fragments(
    program: &Program,
    layout: &Layout,
    mut plans: BTreeMap<FragmentRef, FragmentPlan>,
    alignment: &TextAlignment,
    in_place: bool,
    content_start: Vaddr,
    summary: &mut Summary,
) -> PlacedText {
    let mut placed: Vec<(FragmentPlan, Vaddr)> = Vec::with_capacity(plans.len());
    let hot_start = align(content_start, alignment.hot_text.max(64)) + alignment.hot_text_offset;
    let mut cursor = hot_start;
    let hot_extents: Vec<Vec<BlockExtent>> = if alignment.set_balance_padding > 0 {
        let counts_of = |f: FuncId| {
            layout
                .block_counts
                .get(f.0 as usize)
                .map_or(&[][..], Vec::as_slice)
        };
        layout
            .hot_order
            .iter()
            .map(|r| plans[r].block_extents(counts_of(r.function)))
            .collect()
    } else {
        Vec::new()
    };
    let mut balancer = SetBalancer::new(
        &hot_extents,
        alignment.set_balance_padding,
        program.info.isa.default_fetch_model().icache,
    );
    let firsts: Vec<FragmentRef> = plans
        .keys()
        .filter(|r| in_place && r.fragment == 0)
        .copied()
        .collect();
    let mut take = |r: &FragmentRef| plans.remove(r).expect("every listed fragment is planned");
    for r in firsts {
        let plan = take(&r);
        placed.push((plan, program.function(r.function).range.start));
    }
    for (i, r) in layout.hot_order.iter().enumerate() {
        let aligned = align(cursor, alignment.functions.max(1));
        let granule = if aligned - cursor <= alignment.functions_max_padding {
            alignment.functions.max(1)
        } else {
            alignment.functions.clamp(1, 16)
        };
        cursor = align(cursor, granule);
        let plan = take(r);
        let (aligned_blocks, never_runs) = plan.aligned_blocks();
        summary.aligned_blocks += aligned_blocks;
        summary.aligned_blocks_padding_never_runs += never_runs;
        if let Some(balancer) = balancer.as_mut() {
            let start = balancer.place(&hot_extents[i], cursor.get(), granule);
            if start > cursor.get() {
                summary.set_balanced += 1;
                summary.set_balance_bytes += start - cursor.get();
            }
            cursor = Vaddr(start);
        }
        let size = plan.size;
        placed.push((plan, cursor));
        cursor = cursor + size;
    }
    let hot_end = cursor;
    // Padding up to an aligned hot text end belongs to no section; the cold text follows.
    let cold_start = align(cursor, alignment.hot_text.max(64));
    cursor = cold_start;
    for r in &layout.cold_order {
        let plan = take(r);
        let size = plan.size;
        placed.push((plan, cursor));
        cursor = cursor + size;
    }
    let cold_end = cursor;
    summary.hot_bytes = hot_end - hot_start;
    summary.cold_bytes = cold_end - cold_start;
    summary.fragments = placed.len();
    summary.calls_via_got = placed.iter().map(|(plan, _)| plan.calls_via_slot()).sum();
    PlacedText {
        placed,
        bounds: TextBounds {
            hot_start,
            hot_end,
            cold_start,
            cold_end,
        },
    }
}

/// The encoded new text, and the in-place fragments as patches over their old bytes.
struct EncodedText {
    hot_text: Vec<u8>,
    cold_text: Vec<u8>,
    patches: Vec<(Vaddr, Vec<u8>)>,
}

/// Phase 4a: encodes every placed fragment (in parallel). Gaps in the new text, and the rest
/// of an in-place function's old extent, hold the ISA's fill (a trap).
fn encode_text(
    elf: &ElfFile<'_>,
    program: &Program,
    text: &PlacedText,
    map: &AddressMap,
    fixups: &crate::code::Fixups<'_>,
    in_place: bool,
) -> Result<EncodedText, RewriteError> {
    let isa = program.info.isa;
    let TextBounds {
        hot_start,
        hot_end,
        cold_start,
        cold_end,
    } = text.bounds;
    let encoded: Vec<Result<Vec<u8>, RewriteError>> = text
        .placed
        .par_iter()
        .map_init(
            || isa.branch_encoder(),
            |encoder, (plan, addr)| {
                encode_fragment(elf, program, plan, *addr, map, fixups, encoder).map_err(|source| {
                    RewriteError::Encode {
                        function: program.function(plan.fragment.function).qualified_name(),
                        source,
                    }
                })
            },
        )
        .collect();
    let mut hot_text = isa.filled((hot_end - hot_start) as usize);
    let mut cold_text = isa.filled((cold_end - cold_start) as usize);
    let mut patches: Vec<(Vaddr, Vec<u8>)> = Vec::new();
    for ((plan, addr), bytes) in text.placed.iter().zip(encoded) {
        let bytes = bytes?;
        let f = program.function(plan.fragment.function);
        if in_place && plan.fragment.fragment == 0 {
            // Over the original bytes; the rest of the old extent becomes fill (a trap).
            let mut image = bytes;
            let extent = f.range.len().max(image.len() as u64);
            let tail = extent as usize - image.len();
            isa.fill(&mut image, tail);
            patches.push((*addr, image));
        } else if *addr >= cold_start {
            let off = (*addr - cold_start) as usize;
            cold_text[off..off + bytes.len()].copy_from_slice(&bytes);
        } else {
            let off = (*addr - hot_start) as usize;
            hot_text[off..off + bytes.len()].copy_from_slice(&bytes);
        }
    }
    Ok(EncodedText {
        hot_text,
        cold_text,
        patches,
    })
}

/// Phase 4b: the relocated references to moved code, patched; those that could not be
/// (pointing into code that is no instruction of the rewritten code, or out of their
/// field's reach) are reported.
fn reference_patches(
    program: &Program,
    refs: &references::References,
    map: &AddressMap,
    summary: &mut Summary,
) -> Result<Vec<(Vaddr, Vec<u8>)>, RewriteError> {
    let reference_patches = references::patches(program, refs, map);
    if let Some(r) = reference_patches.unencodable.first() {
        return Err(RewriteError::TableEntry {
            site: r.site,
            target: r.target,
        });
    }
    summary.patched_references = reference_patches.patches.len();
    for (r, why) in &reference_patches.unmapped {
        summary.warnings.push(format!(
            "reference at {} to {} not updated ({why}; it still leads into the old code)",
            r.site, r.target
        ));
    }
    Ok(reference_patches.patches)
}

/// Phase 4c: forwarding jumps at the old entries of moved functions, except where another way
/// into the old body lands under the jump's bytes (`references::old_entry_is_free`).
fn forwarding_jumps(
    elf: &ElfFile<'_>,
    program: &Program,
    layout: &Layout,
    map: &AddressMap,
    refs: &references::References,
    summary: &mut Summary,
) -> Vec<(Vaddr, Vec<u8>)> {
    let isa = program.info.isa;
    let mut patches = Vec::new();
    let guarded = isa.branch_targets_guarded(elf);
    let mut reference_targets: Vec<Vaddr> = refs.stored.iter().map(|r| r.target).collect();
    reference_targets.sort();
    reference_targets.dedup();
    for f in &program.functions {
        let Some(entry) = f.insts.first() else {
            continue;
        };
        let forwarding_jump_size = isa.forwarding_jump_len(entry, guarded);
        if !layout.is_rewritten(f.id) || f.range.len() < forwarding_jump_size {
            continue;
        }
        if !references::old_entry_is_free(f, forwarding_jump_size, &reference_targets) {
            summary.old_entries_not_forwarded += 1;
            continue;
        }
        let new = map.fragment_addrs(f.id)[0];
        if let Ok(bytes) = isa.forwarding_jump(entry, guarded, new) {
            patches.push((f.range.start, bytes));
        }
    }
    // Folded functions forward to their kept copies, for whatever call the rewrite missed.
    for &(folded, _) in &layout.folded {
        let f = program.function(folded);
        let Some(entry) = f.insts.first() else {
            continue;
        };
        let forwarding_jump_size = isa.forwarding_jump_len(entry, guarded);
        if f.range.len() < forwarding_jump_size
            || !references::old_entry_is_free(f, forwarding_jump_size, &reference_targets)
        {
            summary.old_entries_not_forwarded += 1;
            continue;
        }
        if let Some(new) = map.translate(program, f.range.start)
            && let Ok(bytes) = isa.forwarding_jump(entry, guarded, new)
        {
            patches.push((f.range.start, bytes));
        }
    }
    patches
}

/// The new text's sections (`.text` for the hot part, `.text.cold`), which an empty part
/// does not get, and their indices.
struct TextSections {
    bounds: TextBounds,
    hot_index: Option<u16>,
    cold_index: Option<u16>,
}

impl TextSections {
    fn add(
        sections: &mut NewSections,
        bounds: TextBounds,
        hot_text: Vec<u8>,
        cold_text: Vec<u8>,
    ) -> TextSections {
        let exec = object::elf::SHF_ALLOC.0 | object::elf::SHF_EXECINSTR.0;
        let hot_index = (!hot_text.is_empty()).then(|| {
            sections.add(NewSection::new(
                ".text",
                object::elf::SHT_PROGBITS.0,
                exec,
                bounds.hot_start,
                hot_text,
                64,
            ))
        });
        let cold_index = (!cold_text.is_empty()).then(|| {
            sections.add(NewSection::new(
                ".text.cold",
                object::elf::SHT_PROGBITS.0,
                exec,
                bounds.cold_start,
                cold_text,
                64,
            ))
        });
        TextSections {
            bounds,
            hot_index,
            cold_index,
        }
    }

    /// The output section holding `addr`: the new text's, or the input's.
    fn section_of(&self, elf: &ElfFile<'_>, addr: Vaddr) -> Option<u16> {
        let b = self.bounds;
        if addr >= b.hot_start && addr < b.hot_end {
            self.hot_index
        } else if addr >= b.cold_start && addr < b.cold_end {
            self.cold_index
        } else {
            elf.section_containing(addr).map(|s| s.index as u16)
        }
    }
}

/// Phase 4d: `DT_INIT` and `DT_FINI` pointed at the new code (`DT_INIT` at the runtime's
/// start-up, `runtime_init`, when instrumenting a shared library).
fn init_fini_patches(
    elf: &ElfFile<'_>,
    program: &Program,
    map: &AddressMap,
    runtime_init: Option<Vaddr>,
) -> Vec<(Vaddr, Vec<u8>)> {
    let mut patches = Vec::new();
    if let Some(dynamic) = elf.section_by_name(".dynamic") {
        for (i, entry) in dynamic.data.chunks_exact(16).enumerate() {
            let tag = i64::from_le_bytes(entry[..8].try_into().unwrap());
            let value = Vaddr(u64::from_le_bytes(entry[8..].try_into().unwrap()));
            if tag == 0 {
                break;
            }
            // DT_INIT = 12, DT_FINI = 13.
            let new = match (tag, runtime_init) {
                (12, Some(init)) => Some(init),
                _ => map.translate(program, value).filter(|n| *n != value),
            };
            if (tag == 12 || tag == 13)
                && let Some(new) = new
            {
                patches.push((
                    dynamic.addr + (i * 16 + 8) as u64,
                    new.get().to_le_bytes().to_vec(),
                ));
            }
        }
    }
    patches
}

/// Generates the runtime at `at`, hooked on the entry point (executables) or DT_INIT (shared
/// libraries).
#[allow(clippy::too_many_arguments)]
fn build_runtime(
    elf: &ElfFile<'_>,
    program: &Program,
    map: &AddressMap,
    layout: &Layout,
    i: &Instrumentation<'_>,
    at: Vaddr,
    counters: Vaddr,
    counters_size: u64,
) -> Result<(Vaddr, rivet_runtime::RuntimeCode, CounterSections), RewriteError> {
    let mut moved: Vec<(u64, u64)> = program
        .functions
        .iter()
        .filter(|f| layout.is_rewritten(f.id))
        .filter_map(|f| {
            let new = *map.fragment_addrs(f.id).first()?;
            (new != f.range.start).then_some((new.get(), f.range.start.get()))
        })
        .collect();
    moved.sort_unstable();
    let (prefix, map_sections) = (i.file_prefix)(&|f| layout.is_rewritten(f), &moved);
    let translate = |v: Vaddr| map.translate(program, v).unwrap_or(v);
    let (entry, init) = if program.info.kind == rivet_elf::ElfKind::SharedLibrary {
        let init = elf
            .section_by_name(".dynamic")
            .and_then(|d| {
                d.data.chunks_exact(16).find_map(|e| {
                    let tag = i64::from_le_bytes(e[..8].try_into().unwrap());
                    (tag == 12).then(|| Vaddr(u64::from_le_bytes(e[8..].try_into().unwrap())))
                })
            })
            .ok_or_else(|| {
                RewriteError::Instrument(
                    "the shared library has no DT_INIT to start the runtime from".into(),
                )
            })?;
        (None, Some(translate(init)))
    } else {
        (Some(translate(elf.entry)), None)
    };
    let code = rivet_runtime::generate(&rivet_runtime::RuntimeParams {
        isa: program.info.isa,
        atomics: i.atomics,
        at,
        counters,
        counters_size,
        file_prefix: &prefix,
        default_path: i.default_path,
        per_process: i.per_process,
        entry,
        init,
    })
    .map_err(|e| RewriteError::Instrument(e.to_string()))?;
    Ok((at, code, map_sections))
}

fn align(v: Vaddr, a: u64) -> Vaddr {
    Vaddr(v.get().div_ceil(a) * a)
}
