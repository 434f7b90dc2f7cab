//! Discovery: from an ELF file to an `ir::Program`.
//!
//! The steps, in order: read symbols, relocations, `.eh_frame` and PLT stubs; find function
//! boundaries (`boundaries`); decode every function and collect what it says about the others
//! (`cfg::decode`, in parallel); merge those facts (secondary entry points, branches between
//! fragments, stored code addresses); then build every CFG (`cfg::build`, in parallel) and
//! repeat for the functions affected whenever a function turns out never to return. The result
//! does not depend on the number of threads.

pub mod boundaries;
pub mod cfg;
mod indirect;
pub mod noreturn;
pub mod plt;
pub mod refs;

use rayon::prelude::*;
use rivet_arch::Isa;
use rivet_elf::eh_frame::CfiRow;
use rivet_elf::{ElfError, ElfFile, Vaddr, VaddrRange};
use rivet_ir::*;

use crate::cfg::{Context, Decoded, Incoming};

#[derive(Debug, thiserror::Error)]
pub enum DiscoverError {
    #[error(transparent)]
    Elf(#[from] ElfError),
}

/// Knobs of discovery.
#[derive(Clone, Debug, Default)]
pub struct DiscoverOptions {
    /// What to do with the unwind rows of every function.
    pub cfi: CfiRows,
    /// Whether the model keeps every function's instructions.
    pub instructions: Instructions,
}

impl DiscoverOptions {
    /// The defaults, with unwind rows treated as `cfi` says.
    pub fn with_cfi(cfi: CfiRows) -> DiscoverOptions {
        DiscoverOptions {
            cfi,
            ..Default::default()
        }
    }
}

/// Which instructions the model that discovery returns holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Instructions {
    /// Every function's.
    #[default]
    Keep,
    /// None: each function's are decoded to read what it says of the others and set aside
    /// (`Function::insts_set_aside`), decoded again to build its CFG (in every round that
    /// builds it) and set aside again. Blocks, calls and jump tables stay; the caller restores
    /// the instructions of the functions it rewrites (`Program::restore_instructions`). For
    /// profile-guided optimize, which moves a tenth of a large program's functions: the
    /// instructions were 0.57 of the 1.54 GB heap peak of bench/scale's 50 MB program, at the
    /// end of discovery. Costs one more decoding of every function. The model is otherwise the
    /// same as with `Keep`.
    SetAside,
}

/// How discovery treats the unwind rows (`.eh_frame`) of each function.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CfiRows {
    /// Not read (`unwind_rows` reads one function's on demand): for commands that do not
    /// move code.
    #[default]
    Ignore,
    /// Read, so that a function whose rows cannot be read is skipped (`MalformedCfi`), but
    /// not kept: `Function::cfi` stays empty and the emitter reads the rows of the functions
    /// it moves again from the input. Costs one parse of each FDE and no memory, where
    /// `Keep` holds the rows of every function, moved or not, to the end (profile-guided
    /// optimize moves a tenth of a large program's functions).
    Check,
    /// Read into `Function::cfi` (what identical code folding and dumps compare).
    Keep,
}

/// Relocations delimit a run of table entries, not one table: when the compiler places two
/// jump tables back to back, a table bounded by relocations alone swallows its neighbour's
/// entries (read with the wrong base, for relative tables). Such tables end where the next
/// known table starts. The width of an index (`and $3`, a byte) only bounds what the code can
/// read: a compiler that knows the index smaller (a `switch` whose default cannot happen) may
/// make the table shorter, so a table sized by its index ends where the next table read
/// differently (another base, kind or entry size) starts; one read the same way is the same
/// table seen from another dispatch. So is a single entry read at a fixed index (width 0):
/// it ends no table. Tables bounded by a range check keep their length.
fn trim_adjacent_tables(functions: &mut [Function]) {
    // Where each table starts, how it is read, and whether it is a one-entry view.
    let mut starts: Vec<(Vaddr, (JumpTableKind, u8), bool)> = functions
        .iter()
        .flat_map(|f| f.jump_tables.iter())
        .map(|t| {
            (
                t.addr,
                t.reading(),
                t.bound == TableBound::IndexWidth { bits: 0 },
            )
        })
        .collect();
    starts.sort_unstable();
    starts.dedup();
    for t in functions.iter_mut().flat_map(|f| f.jump_tables.iter_mut()) {
        let reading = t.reading();
        let ends_it = |&&(_, other, view): &&(Vaddr, (JumpTableKind, u8), bool)| match t.bound {
            TableBound::Relocations | TableBound::Scanned => !(view && other == reading),
            TableBound::IndexWidth { .. } => other != reading,
            TableBound::RangeCheck { .. } | TableBound::RangeCheckAndRelocations { .. } => false,
        };
        let span = t.span();
        if let Some(&(next_start, _, _)) = starts
            .iter()
            .skip_while(|s| s.0 <= span.start)
            .take_while(|s| s.0 < span.end)
            .find(ends_it)
        {
            let room = (next_start - t.addr) / u64::from(t.entry_size);
            t.entries.truncate(room as usize);
        }
    }
}

/// What remains of two tables that claim one entry and read it differently, after
/// `trim_adjacent_tables`, is a contradiction the sizes cannot settle (two range checks, say):
/// both functions are left as they are, since rewriting would write the entry twice.
fn skip_conflicting_tables(functions: &mut [Function]) {
    let mut spans: Vec<(VaddrRange, (JumpTableKind, u8), usize)> = functions
        .iter()
        .enumerate()
        .filter(|(_, f)| f.skip_reason().is_none())
        .flat_map(|(fi, f)| {
            f.jump_tables
                .iter()
                .map(move |t| (t.span(), t.reading(), fi))
        })
        .collect();
    spans.sort_unstable_by_key(|&(span, _, fi)| (span.start, span.end, fi));
    let mut conflicts: Vec<(usize, Vaddr, Vaddr)> = Vec::new();
    // Each table against the later-starting tables it reaches into.
    for (i, (a, a_reading, fa)) in spans.iter().enumerate() {
        for (b, b_reading, fb) in spans[i + 1..].iter().take_while(|b| b.0.start < a.end) {
            if a_reading != b_reading {
                conflicts.push((*fa, a.start, b.start));
                conflicts.push((*fb, b.start, a.start));
            }
        }
    }
    for (fi, table, other) in conflicts {
        if functions[fi].skip_reason().is_none() {
            functions[fi].status =
                Status::Skipped(SkipReason::OverlappingJumpTables { table, other });
        }
    }
}

/// Whether functions can be moved: the binary kept its relocations against code and the
/// symbols they name; if not, why. Reads no code, so a command that needs relocations can
/// refuse before the work of discovery (seconds on a large library).
pub fn relocation_mode(elf: &ElfFile) -> Result<RelocationMode, DiscoverError> {
    Ok(relocation_mode_from(
        !elf.symbols()?.is_empty(),
        elf.has_code_relocations(),
    ))
}

fn relocation_mode_from(has_symtab: bool, has_code_relocs: bool) -> RelocationMode {
    let reason = if !has_symtab {
        "the binary has no .symtab (stripped); relocations cannot be interpreted"
    } else if !has_code_relocs {
        "no relocations against code (.rela.text missing): relink with -Wl,--emit-relocs"
    } else {
        return RelocationMode::Available;
    };
    RelocationMode::Unavailable {
        reason: reason.into(),
    }
}

/// Which functions the model that discovery returns describes in full.
#[derive(Clone, Copy, Default)]
pub enum Models<'a> {
    /// Every function.
    #[default]
    All,
    /// The families (a function and its compiler-split parts) of the functions this picks,
    /// given the program's functions before any is decoded (names, extents, parts). Every
    /// other function is released ([`Function::release`]) as soon as its CFG is built: the
    /// fixpoint keeps only a summary of it (`Summary`), and the result is otherwise the
    /// model `All` gives, released functions included. For profile-guided optimize, which
    /// only moves the families its profile names (a tenth of a large program's functions):
    /// the blocks and calls of every function were 0.46 of the 0.98 GB heap peak of
    /// bench/scale's 50 MB program, at the end of discovery.
    NamedFamilies(&'a (dyn Fn(&Program) -> Vec<FuncId> + Sync)),
}

impl std::fmt::Debug for Models<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Models::All => "All",
            Models::NamedFamilies(_) => "NamedFamilies",
        })
    }
}

/// Runs discovery over the whole binary.
pub fn discover(elf: &ElfFile, options: &DiscoverOptions) -> Result<Program, DiscoverError> {
    discover_models(elf, options, Models::All)
}

/// What the noreturn fixpoint asks of a function whose model was released once built
/// (`Models::NamedFamilies`): what `cfg::never_returns`, the check of trailing calls and the
/// search for edges between fragments read of its blocks.
struct Summary {
    /// A block returns, or tail-calls what is no known function or stub.
    returns: bool,
    /// A block that neither returns nor tail-calls leaves for a sibling fragment.
    leaves_for_fragment: bool,
    /// Functions and stubs a block tail-calls: it returns if one of them does.
    tail_calls: Vec<Vaddr>,
    /// A reachable block returns.
    returns_visibly: bool,
    /// Every block's edges into sibling fragments, in block order.
    fragment_succs: Vec<FragmentEdge>,
    /// Where its blocks start, sorted.
    block_starts: Vec<Vaddr>,
}

impl Summary {
    fn of(f: &Function) -> Summary {
        let mut s = Summary {
            returns: false,
            leaves_for_fragment: false,
            tail_calls: Vec::new(),
            returns_visibly: false,
            fragment_succs: Vec::new(),
            block_starts: f.blocks.iter().map(|b| b.start).collect(),
        };
        for b in &f.blocks {
            match &b.terminator {
                Terminator::Return => {
                    s.returns = true;
                    s.returns_visibly |= b.is_reachable;
                }
                Terminator::TailCall { target } | Terminator::CondTailCall { target } => {
                    match target {
                        CallTarget::Function { addr, .. } | CallTarget::Plt { addr, .. } => {
                            s.tail_calls.push(*addr)
                        }
                        _ => s.returns = true,
                    }
                }
                _ => s.leaves_for_fragment |= !b.fragment_succs.is_empty(),
            }
            s.fragment_succs.extend(b.fragment_succs.iter().cloned());
        }
        s
    }

    /// `cfg::never_returns` of the function it summarizes.
    fn never_returns(&self, ctx: &Context, f: &Function) -> bool {
        f.is_simple()
            && !self.block_starts.is_empty()
            && !(self.returns
                || self.leaves_for_fragment
                || self.tail_calls.iter().any(|&t| !ctx.is_noreturn(t)))
    }
}

/// Runs discovery over the whole binary, modelling in full the functions `models` says.
pub fn discover_models(
    elf: &ElfFile,
    options: &DiscoverOptions,
    models: Models<'_>,
) -> Result<Program, DiscoverError> {
    let mut warnings = Vec::new();
    let symtab = elf.symbols()?;
    let has_symtab = !symtab.is_empty();
    let symbols = if has_symtab {
        symtab
    } else {
        elf.dynamic_symbols()?
    };
    let relocation_mode = relocation_mode_from(has_symtab, elf.has_code_relocations());
    let reloc_mode = relocation_mode == RelocationMode::Available;
    let isa = Isa::of(elf);
    let set_aside = options.instructions == Instructions::SetAside;
    let static_relocs = if reloc_mode {
        elf.static_relocations(&symbols, &isa)?
    } else {
        Vec::new()
    };
    let dynamic_relocs = elf.dynamic_relocations(&isa).unwrap_or_else(|e| {
        warnings.push(format!("dynamic relocations ignored: {e}"));
        Vec::new()
    });
    let eh = elf.eh_frame().unwrap_or_else(|e| {
        warnings.push(format!("{e}; function extents come from symbols only"));
        None
    });
    let fdes = eh.as_ref().map_or(&[][..], |t| &t.fdes[..]);
    let plt = plt::find_plt_entries(elf, &dynamic_relocs);
    let data_in_code = boundaries::data_in_code(elf, &symbols);
    let candidates = boundaries::find_candidates(elf, &symbols, fdes);
    if candidates.is_empty() && elf.sections().iter().any(|s| s.is_exec() && s.size > 0) {
        warnings.push("no function symbols and no FDEs: nothing to model".to_string());
    }

    let mut functions: Vec<Function> = candidates
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let fde = eh.as_ref().and_then(|t| t.fde_for(c.range.start));
            Function {
                id: FuncId(i as u32),
                names: c.names.clone(),
                file: c.file.clone(),
                is_local: c.is_local,
                range: c.range,
                origin: c.origin,
                parent: c.parent.map(|(p, kind)| Parent {
                    function: FuncId(p as u32),
                    kind,
                }),
                secondary_entries: c.secondary_entries.clone(),
                address_taken: false,
                padding_after: c.padding_after,
                insts: Vec::new(),
                blocks: Vec::new(),
                calls: Vec::new(),
                jump_tables: Vec::new(),
                lsda: fde
                    .filter(|f| f.range.start == c.range.start)
                    .and_then(|f| f.lsda),
                cfi: Vec::new(),
                status: Status::Simple,
                released: None,
                insts_set_aside: false,
            }
        })
        .collect();

    let code_bytes = elf
        .sections()
        .iter()
        .filter(|s| {
            s.is_exec()
                && s.is_alloc()
                && !matches!(s.name.as_ref(), ".plt" | ".plt.sec" | ".plt.got" | ".iplt")
        })
        .map(|s| s.size)
        .sum();
    let info = BinaryInfo {
        isa: Isa::of(elf),
        kind: elf.kind,
        entry: elf.entry,
        build_id: elf.build_id().map(<[u8]>::to_vec),
        relocation_mode,
        code_bytes,
        static_relocations: static_relocs.len(),
        dynamic_relocations: dynamic_relocs.len(),
        has_eh_frame: eh.is_some(),
    };
    // The functions whose families keep their model (`None`: all).
    let named: Option<Vec<FuncId>> = match models {
        Models::All => None,
        Models::NamedFamilies(pick) => {
            let skeleton = Program {
                info: info.clone(),
                functions: std::mem::take(&mut functions),
                plt: plt.clone(),
                warnings: Vec::new(),
            };
            let picked = pick(&skeleton);
            functions = skeleton.functions;
            Some(picked)
        }
    };

    // Phase A: decode every function.
    let decoded: Vec<Decoded> = functions
        .par_iter_mut()
        .zip(candidates.par_iter())
        .map(|(f, c)| {
            let mut d = cfg::decode(elf, f, reloc_mode);
            if let Some(reason) = &c.skip {
                d.skip = Some(reason.clone());
            }
            // Data the toolchain marked inside the function may decode as instructions: the
            // model would be a guess.
            let first = data_in_code.partition_point(|d| d.end <= f.range.start);
            if let Some(data) = data_in_code.get(first)
                && data.start < f.range.end
            {
                d.skip = Some(SkipReason::DataInCode {
                    at: data.start.max(f.range.start),
                });
            }
            cfg::read_call_sites(elf, f, &mut d);
            if set_aside {
                f.set_instructions_aside(isa);
            }
            d
        })
        .collect();

    let data = refs::data_refs(elf, &static_relocs, &dynamic_relocs, reloc_mode);
    let mut code_refs = data.refs;
    code_refs.extend(decoded.iter().flat_map(|d| d.code_refs.iter().copied()));
    code_refs.sort_by_key(|r| (r.target, r.site));
    code_refs.dedup();
    mark_address_taken(elf, &mut functions, &code_refs, &data.relative);

    let mut by_start: Vec<(Vaddr, FuncId)> =
        functions.iter().map(|f| (f.range.start, f.id)).collect();
    by_start.sort();
    let mut code_ref_sites: Vec<(Vaddr, Vaddr)> =
        code_refs.iter().map(|r| (r.site, r.target)).collect();
    code_ref_sites.sort();
    code_ref_sites.dedup_by_key(|r| r.0);
    let mut ctx = Context {
        elf,
        isa: Isa::of(elf),
        reloc_mode,
        entries: Vec::new(),
        ranges: functions.iter().map(|f| f.range).collect(),
        by_start,
        parents: functions.iter().map(|f| f.parent).collect(),
        plt: plt.clone(),
        noreturn: Vec::new(),
        code_refs,
        code_ref_sites,
        relative_refs: data.relative,
        known_relative_tables: Vec::new(),
        static_relocs: &static_relocs,
        eh: eh.as_ref(),
    };
    let mut entries: Vec<(Vaddr, FuncId)> =
        functions.iter().map(|f| (f.range.start, f.id)).collect();
    entries.sort();
    ctx.entries = entries;

    // Without symbols for them (stripped binaries), compiler-split cold parts show up as
    // FDE-only functions. One that is jumped to (never called) by exactly one function is
    // that function's cold fragment.
    link_anonymous_fragments(&mut functions, &decoded, &ctx);
    ctx.parents = functions.iter().map(|f| f.parent).collect();

    // Branches into other functions: secondary entries, or edges between fragments.
    let n = functions.len();
    let mut incoming: Vec<Vec<Incoming>> = vec![Vec::new(); n];
    let mut new_entries: Vec<(FuncId, Vaddr)> = Vec::new();
    for (fi, d) in decoded.iter().enumerate() {
        let from = FuncId(fi as u32);
        for &(target, _) in &d.outgoing {
            if ctx.entry_at(target).is_some() || ctx.plt_at(target).is_some() {
                continue;
            }
            let Some(g) = ctx.function_containing(target) else {
                continue;
            };
            if ctx.are_fragments(from, g) {
                incoming[g.0 as usize].push(Incoming::Fragment(target));
            } else {
                new_entries.push((g, target));
            }
        }
        for &(_, lp) in &d.call_sites {
            let Some(lp) = lp else { continue };
            if functions[fi].range.contains(lp) {
                continue;
            }
            if let Some(g) = ctx.function_containing(lp)
                && ctx.are_fragments(from, g)
            {
                incoming[g.0 as usize].push(Incoming::LandingPad(lp));
            }
        }
    }
    for (g, target) in new_entries {
        let f = &mut functions[g.0 as usize];
        if !f.secondary_entries.contains(&target) {
            f.secondary_entries.push(target);
        }
    }
    for f in &mut functions {
        f.secondary_entries.sort();
        for &e in &f.secondary_entries {
            ctx.entries.push((e, f.id));
        }
    }
    ctx.entries.sort();
    ctx.entries.dedup_by_key(|e| e.0);
    for inc in &mut incoming {
        inc.sort();
        inc.dedup();
    }

    // Noreturn seeds: known library names, by symbol and by PLT stub.
    let mut noreturn: Vec<Vaddr> = functions
        .iter()
        .filter(|f| f.names.iter().any(|n| noreturn::is_known_noreturn(n)))
        .map(|f| f.range.start)
        .chain(
            plt.iter()
                .filter(|p| noreturn::is_known_noreturn(&p.name))
                .map(|p| p.addr),
        )
        .collect();
    noreturn.sort();
    noreturn.dedup();
    ctx.noreturn = noreturn;

    let mut called_anonymous = vec![false; n];
    for d in &decoded {
        for &(target, is_call) in &d.outgoing {
            if is_call && let Some(g) = ctx.function_containing(target) {
                called_anonymous[g.0 as usize] = true;
            }
        }
    }

    // Phase B, to a fixpoint of noreturn functions and fragment edges.
    let mut dirty = vec![true; n];
    // Each function's callees its code shows to return (`cfg::callees_returned_to`), from
    // its last build.
    let mut returned_to: Vec<Vec<Vaddr>> = vec![Vec::new(); n];
    // What is left of each function released once built (`Models::NamedFamilies`).
    let mut summaries: Vec<Option<Summary>> = (0..n).map(|_| None).collect();
    // Whether each function's family keeps its model, by the parents known so far.
    let families_kept = |parents: &[Option<Parent>]| {
        named
            .as_ref()
            .map(|named| families_holding(parents, named.iter().copied()))
    };
    // Callees a call site showed to return (sorted): no trailing call makes them noreturn, and
    // the code is not searched for them again in later rounds.
    let mut shown_to_return: Vec<Vaddr> = Vec::new();
    for round in 0.. {
        let kept = families_kept(&ctx.parents);
        functions
            .par_iter_mut()
            .zip(decoded.par_iter())
            .zip(incoming.par_iter())
            .zip(returned_to.par_iter_mut())
            .zip(summaries.par_iter_mut())
            .zip(dirty.par_iter())
            .enumerate()
            .filter(|(_, (_, d))| **d)
            .for_each(|(i, (((((f, d), inc), returned), summary), _))| {
                f.reopen(elf);
                cfg::build(&ctx, f, d, inc);
                *returned = cfg::callees_returned_to(f);
                *summary = None;
                if kept.as_ref().is_some_and(|k| !k[i]) && f.may_drop_model(isa) {
                    *summary = Some(Summary::of(f));
                    f.release();
                } else if set_aside {
                    f.set_instructions_aside(isa);
                }
            });

        let mut added: Vec<Vaddr> = functions
            .par_iter()
            .zip(summaries.par_iter())
            .filter(|(f, summary)| {
                !ctx.is_noreturn(f.range.start)
                    && match summary {
                        Some(s) => s.never_returns(&ctx, f),
                        None => cfg::never_returns(&ctx, f),
                    }
            })
            .map(|(f, _)| f.range.start)
            .collect();
        // A call as the very last instruction of a function: the callee does not return,
        // unless a call to it elsewhere is followed by code only its return reaches.
        let mut trailing: Vec<Vaddr> = Vec::new();
        for (f, d) in functions.iter().zip(&decoded) {
            // Extents from symbol sizes and FDEs are the compiler's; one guessed up to the
            // next symbol proves nothing about where the code ends.
            if f.origin == Origin::SymbolSizedByNext {
                continue;
            }
            for &t in &d.trailing_call_targets {
                // A callee whose own code reaches a `ret` plainly returns: the caller's call
                // ends its path at that site only (cfg::build), the callee stays returning.
                let returns_visibly = ctx.entry_at(t).is_some_and(|g| {
                    let g = g.0 as usize;
                    match &summaries[g] {
                        Some(s) => s.returns_visibly,
                        None => functions[g]
                            .blocks
                            .iter()
                            .any(|b| b.is_reachable && b.terminator == Terminator::Return),
                    }
                });
                if !ctx.is_noreturn(t)
                    && !returns_visibly
                    && shown_to_return.binary_search(&t).is_err()
                    && (ctx.entry_at(t).is_some() || ctx.plt_at(t).is_some())
                {
                    trailing.push(t);
                }
            }
        }
        trailing.sort();
        trailing.dedup();
        if !trailing.is_empty() {
            let returning: Vec<Vaddr> = returned_to
                .iter()
                .flatten()
                .filter(|t| trailing.binary_search(t).is_ok())
                .copied()
                .collect();
            shown_to_return.extend(returning);
            shown_to_return.sort();
            shown_to_return.dedup();
            added.extend(
                trailing
                    .into_iter()
                    .filter(|t| shown_to_return.binary_search(t).is_err()),
            );
        }
        added.sort();
        added.dedup();
        dirty.iter_mut().for_each(|d| *d = false);
        let mut changed = false;
        // Jump tables reaching into an anonymous cold part (found only now that tables are
        // read): that part is a fragment of the table's function.
        for fi in 0..n {
            let Some(SkipReason::BadJumpTableEntry { target, .. }) = functions[fi].skip_reason()
            else {
                continue;
            };
            let Some(g) = ctx.function_containing(*target) else {
                continue;
            };
            let gi = g.0 as usize;
            if functions[gi].origin == Origin::Fde
                && functions[gi].parent.is_none()
                && functions[fi].parent.is_none()
                && gi != fi
                && !called_anonymous[gi]
            {
                let parent = Parent {
                    function: FuncId(fi as u32),
                    kind: PartKind::ColdFragment,
                };
                functions[gi].parent = Some(parent);
                ctx.parents[gi] = Some(parent);
                dirty[fi] = true;
                dirty[gi] = true;
                changed = true;
            }
        }
        for (f, summary) in functions.iter().zip(&summaries) {
            let edges: Vec<&FragmentEdge> = match summary {
                Some(s) => s.fragment_succs.iter().collect(),
                None => f.blocks.iter().flat_map(|b| &b.fragment_succs).collect(),
            };
            for fe in edges {
                let g = fe.function.0 as usize;
                let inc = Incoming::Fragment(fe.addr);
                let has_block = match &summaries[g] {
                    Some(s) => s.block_starts.binary_search(&fe.addr).is_ok(),
                    None => functions[g].block_at(fe.addr).is_some(),
                };
                if !has_block && !incoming[g].contains(&inc) {
                    incoming[g].push(inc);
                    dirty[g] = true;
                    changed = true;
                }
            }
        }
        // Relative tables read with a proven size explain the references stored in them to
        // every other function: one skipped for references it could not explain may now be
        // built.
        let tables = known_relative_tables(&functions);
        if tables != ctx.known_relative_tables {
            ctx.known_relative_tables = tables;
            for (f, d) in functions.iter().zip(dirty.iter_mut()) {
                if matches!(
                    f.skip_reason(),
                    Some(SkipReason::UnresolvedIndirectJump { .. })
                ) {
                    *d = true;
                    changed = true;
                }
            }
        }
        if !added.is_empty() {
            changed = true;
            ctx.noreturn.extend(added.iter().copied());
            ctx.noreturn.sort();
            for (i, d) in decoded.iter().enumerate() {
                if d.outgoing
                    .iter()
                    .any(|(t, _)| added.binary_search(t).is_ok())
                {
                    dirty[i] = true;
                }
            }
        }
        if !changed {
            break;
        }
        if round == 16 {
            warnings.push("noreturn analysis did not converge in 16 rounds".to_string());
            break;
        }
    }

    // A function released as it was built whose family was found to keep its model later (a
    // cold part linked by its jump table to a named function): built again, by the final
    // context.
    if let Some(kept) = families_kept(&ctx.parents) {
        functions
            .par_iter_mut()
            .zip(decoded.par_iter())
            .zip(incoming.par_iter())
            .zip(summaries.par_iter())
            .enumerate()
            .filter(|(i, (_, summary))| kept[*i] && summary.is_some())
            .for_each(|(_, (((f, d), inc), _))| {
                f.reopen(elf);
                cfg::build(&ctx, f, d, inc);
                if set_aside {
                    f.set_instructions_aside(isa);
                }
            });
    }
    drop(summaries);

    trim_adjacent_tables(&mut functions);
    skip_conflicting_tables(&mut functions);

    if options.cfi != CfiRows::Ignore
        && let Some(eh) = &eh
    {
        let keep = options.cfi == CfiRows::Keep;
        let rows: Vec<Option<Vec<CfiRow>>> = functions
            .par_iter()
            .map(|f| match eh.fde_for(f.range.start) {
                Some(fde) => eh
                    .rows(fde)
                    .ok()
                    .map(|rows| if keep { rows } else { Vec::new() }),
                None => Some(Vec::new()),
            })
            .collect();
        for (f, r) in functions.iter_mut().zip(rows) {
            match r {
                Some(rows) => f.cfi = rows,
                // Rows that cannot be read cannot be written for moved code: an exception
                // or a debugger unwinding through it would be lost.
                None if f.is_simple() => {
                    f.status = Status::Skipped(SkipReason::MalformedCfi { at: f.range.start })
                }
                None => {}
            }
        }
    }

    Ok(Program {
        info,
        functions,
        plt,
        warnings,
    })
}

/// Sets `Function::address_taken`: an entry named by a stored or computed reference (exact
/// or merely looking like one: this errs on the side of "taken"), by a PC-relative
/// relocation in data, by an exported dynamic symbol, or the entry point. Direct calls and
/// jumps are not in `code_refs`, so they take no address.
fn mark_address_taken(
    elf: &ElfFile,
    functions: &mut [Function],
    code_refs: &[refs::CodeRef],
    relative: &[(Vaddr, Vaddr)],
) {
    let mut taken: Vec<Vaddr> = code_refs.iter().map(|r| r.target).collect();
    taken.extend(relative.iter().map(|r| r.0));
    taken.push(elf.entry);
    match elf.dynamic_symbols() {
        Ok(dynamic) => {
            taken.extend(dynamic.iter().filter(|s| !s.is_undefined).map(|s| s.value));
        }
        // A `.dynsym` that cannot be read may export anything: every function counts as taken.
        Err(_) => {
            for f in functions {
                f.address_taken = true;
            }
            return;
        }
    }
    taken.sort_unstable();
    taken.dedup();
    for f in functions {
        f.address_taken = taken.binary_search(&f.range.start).is_ok();
    }
}

fn link_anonymous_fragments(functions: &mut [Function], decoded: &[Decoded], ctx: &Context) {
    let mut jumpers: Vec<Option<Result<FuncId, ()>>> = vec![None; functions.len()];
    let mut called = vec![false; functions.len()];
    for (fi, d) in decoded.iter().enumerate() {
        for &(target, is_call) in &d.outgoing {
            let Some(g) = ctx.function_containing(target) else {
                continue;
            };
            let gi = g.0 as usize;
            if functions[gi].origin != Origin::Fde {
                continue;
            }
            if is_call {
                called[gi] = true;
                continue;
            }
            let from = FuncId(fi as u32);
            jumpers[gi] = match jumpers[gi] {
                None => Some(Ok(from)),
                Some(Ok(prev)) if prev == from => Some(Ok(from)),
                _ => Some(Err(())),
            };
        }
    }
    for (gi, j) in jumpers.into_iter().enumerate() {
        if let Some(Ok(parent)) = j
            && !called[gi]
            && functions[gi].parent.is_none()
            && functions[parent.0 as usize].parent.is_none()
            && parent.0 as usize != gi
        {
            functions[gi].parent = Some(Parent {
                function: parent,
                kind: PartKind::ColdFragment,
            });
        }
    }
}

/// Reads the unwind rows of one function (for display; discovery itself does not need them).
pub fn unwind_rows(elf: &ElfFile, f: &Function) -> Result<Vec<CfiRow>, ElfError> {
    let Some(eh) = elf.eh_frame()? else {
        return Ok(Vec::new());
    };
    match eh.fde_for(f.range.start) {
        Some(fde) => eh.rows(fde),
        None => Ok(Vec::new()),
    }
}

/// The spans of the relative jump tables that built functions read, with a size a range check
/// or relocations prove (a scanned size may run into the next table), sorted by start.
fn known_relative_tables(functions: &[Function]) -> Vec<(VaddrRange, FuncId)> {
    let mut spans: Vec<(VaddrRange, FuncId)> = functions
        .iter()
        .filter(|f| f.skip_reason().is_none())
        .flat_map(|f| {
            f.jump_tables
                .iter()
                .filter(|t| {
                    matches!(t.kind, JumpTableKind::Relative { .. })
                        && t.bound != TableBound::Scanned
                })
                .map(|t| (t.span(), f.id))
        })
        .collect();
    spans.sort_by_key(|(span, f)| (span.start, span.end, *f));
    spans
}
