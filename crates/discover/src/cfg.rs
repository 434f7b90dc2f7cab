//! Per-function disassembly and control-flow graph construction.
//!
//! Phase A (`decode`) decodes a function linearly (gcc and clang put no data in x86-64 text,
//! and any byte that fails to decode makes the function skipped), parses its LSDA, and reports
//! what the function says about others: branches into them, landing pads in sibling fragments,
//! code addresses its instructions compute. Phase B (`build`) runs once those facts are merged
//! program-wide and cuts the instructions into blocks with resolved successors. Phase B can be
//! re-run when the set of noreturn functions grows.

use rivet_arch::{Flow, IndirectJump, Inst, Isa};
use rivet_elf::eh_frame::{Cfa, CfiRow, EhFrameTable};
use rivet_elf::relocs::StaticReloc;
use rivet_elf::{ElfFile, ElfKind, Vaddr, VaddrRange};
use rivet_ir::*;

use crate::refs::CodeRef;

/// Program-wide facts every function's CFG construction reads.
#[derive(Debug)]
pub struct Context<'a> {
    pub elf: &'a ElfFile<'a>,
    /// The input's instruction set.
    pub isa: Isa,
    pub reloc_mode: bool,
    /// Function starts and secondary entries, sorted.
    pub entries: Vec<(Vaddr, FuncId)>,
    /// Function ranges by id.
    pub ranges: Vec<VaddrRange>,
    /// Function ids sorted by start (for containment lookups).
    pub by_start: Vec<(Vaddr, FuncId)>,
    pub parents: Vec<Option<Parent>>,
    pub plt: Vec<PltEntry>,
    /// Entries (function starts or PLT stubs) known not to return, sorted.
    pub noreturn: Vec<Vaddr>,
    /// Stored references to code, sorted by target.
    pub code_refs: Vec<CodeRef>,
    /// The same as (site, target), sorted by site.
    pub code_ref_sites: Vec<(Vaddr, Vaddr)>,
    /// PC-relative data references to code (see `refs::DataRefs::relative`) as
    /// (`S + A`, site), sorted.
    pub relative_refs: Vec<(Vaddr, Vaddr)>,
    /// The spans of the relative jump tables that functions built so far read with a proven
    /// size, with their owners, sorted by start: a PC-relative reference stored in one of them
    /// points into its owner (or the owner's fragments), whatever its `S + A` says.
    pub known_relative_tables: Vec<(VaddrRange, FuncId)>,
    /// Static relocations sorted by site.
    pub static_relocs: &'a [StaticReloc],
    /// The unwind tables, when the file has them: they tell whether a frame is still on the
    /// stack at an indirect jump.
    pub eh: Option<&'a EhFrameTable<'a>>,
}

impl Context<'_> {
    pub fn entry_at(&self, addr: Vaddr) -> Option<FuncId> {
        self.entries
            .binary_search_by_key(&addr, |e| e.0)
            .ok()
            .map(|i| self.entries[i].1)
    }

    pub fn function_containing(&self, addr: Vaddr) -> Option<FuncId> {
        let pos = self.by_start.partition_point(|e| e.0 <= addr);
        self.by_start[..pos]
            .iter()
            .rev()
            .take(4)
            .find(|e| self.ranges[e.1.0 as usize].contains(addr))
            .map(|e| e.1)
    }

    pub fn plt_at(&self, addr: Vaddr) -> Option<&PltEntry> {
        self.plt
            .binary_search_by_key(&addr, |p| p.addr)
            .ok()
            .map(|i| &self.plt[i])
    }

    pub fn is_noreturn(&self, addr: Vaddr) -> bool {
        self.noreturn.binary_search(&addr).is_ok()
    }

    /// The unwind rows of the FDE covering `addr` (none without one).
    fn unwind_rows(&self, addr: Vaddr) -> Vec<CfiRow> {
        self.eh
            .and_then(|eh| eh.rows(eh.fde_for(addr)?).ok())
            .unwrap_or_default()
    }

    /// Whether `site` lies in a relative jump table another function (not one of `f`'s
    /// fragments) was shown to read, so that the reference stored there does not point into
    /// `f`. Overlapping spans are not searched beyond the nearest one, which errs towards
    /// "no".
    pub fn in_foreign_table(&self, f: FuncId, site: Vaddr) -> bool {
        let i = self
            .known_relative_tables
            .partition_point(|(span, _)| span.start <= site);
        i > 0 && {
            let (span, owner) = self.known_relative_tables[i - 1];
            span.contains(site) && owner != f && !self.are_fragments(owner, f)
        }
    }

    /// True when `a` and `b` are parts of one function split by the compiler (`foo`,
    /// `foo.cold`, `foo.cold.1`).
    pub fn are_fragments(&self, a: FuncId, b: FuncId) -> bool {
        let root = |f: FuncId| match self.parents[f.0 as usize] {
            Some(Parent {
                function,
                kind: PartKind::ColdFragment,
            }) => function,
            _ => f,
        };
        a != b && root(a) == root(b)
    }

    fn relocs_in(&self, range: VaddrRange) -> &[StaticReloc] {
        let lo = self.static_relocs.partition_point(|r| r.site < range.start);
        let hi = self.static_relocs.partition_point(|r| r.site < range.end);
        &self.static_relocs[lo..hi]
    }

    fn refs_into(&self, range: VaddrRange) -> &[CodeRef] {
        let lo = self.code_refs.partition_point(|r| r.target < range.start);
        let hi = self.code_refs.partition_point(|r| r.target < range.end);
        &self.code_refs[lo..hi]
    }

    /// The code address stored at `site`, if a stored reference is known there.
    pub fn stored_code_at(&self, site: Vaddr) -> Option<Vaddr> {
        let i = self
            .code_ref_sites
            .binary_search_by_key(&site, |r| r.0)
            .ok()?;
        Some(self.code_ref_sites[i].1)
    }

    pub fn call_target(&self, addr: Vaddr) -> CallTarget {
        if let Some(function) = self.entry_at(addr) {
            CallTarget::Function { function, addr }
        } else if let Some(p) = self.plt_at(addr) {
            CallTarget::Plt {
                name: p.name.clone(),
                addr,
            }
        } else {
            CallTarget::Unknown { addr }
        }
    }
}

/// What phase A learned about one function.
#[derive(Debug, Default)]
pub struct Decoded {
    pub skip: Option<SkipReason>,
    /// Direct jump and call targets outside the function: (target, is_call).
    pub outgoing: Vec<(Vaddr, bool)>,
    /// Landing pads of this function's call sites: (call-site range, landing pad).
    pub call_sites: Vec<(VaddrRange, Option<Vaddr>)>,
    /// Code addresses computed by PC-relative operands or (non-PIE) absolute constants.
    pub code_refs: Vec<CodeRef>,
    /// Direct calls whose fall-through leaves the function: the callee must be noreturn.
    pub trailing_call_targets: Vec<Vaddr>,
}

pub fn decode(elf: &ElfFile, f: &mut Function, reloc_mode: bool) -> Decoded {
    let mut out = Decoded::default();
    let Some(bytes) = elf.bytes_at(f.range.start, f.range.len()) else {
        out.skip = Some(SkipReason::NoCode { at: f.range.start });
        return out;
    };
    f.insts = Isa::of(elf).decode_all(bytes, f.range.start);
    if let Some(bad) = f.insts.iter().find(|i| i.is_invalid()) {
        out.skip = Some(SkipReason::InvalidInstruction { at: bad.addr() });
    }
    let pie_like = elf.kind != ElfKind::Executable;
    for inst in &f.insts {
        match inst.flow() {
            Flow::Jump { target } | Flow::CondJump { target } if !f.range.contains(target) => {
                out.outgoing.push((target, false))
            }
            Flow::Call { target } if !f.range.contains(target) || target == f.range.start => {
                out.outgoing.push((target, true))
            }
            Flow::Jump { .. } | Flow::CondJump { .. } | Flow::Call { .. } => {}
            _ => {
                if let Some(target) = inst.pc_relative_memory_target()
                    && elf.is_code_address(target)
                {
                    out.code_refs.push(CodeRef {
                        target,
                        site: inst.addr(),
                        exact: true,
                    });
                }
                if !pie_like && !reloc_mode {
                    for c in inst.absolute_constants() {
                        if c != 0 && elf.is_code_address(Vaddr(c)) {
                            out.code_refs.push(CodeRef {
                                target: Vaddr(c),
                                site: inst.addr(),
                                exact: false,
                            });
                        }
                    }
                }
            }
        }
    }
    if let Some(last) = f.insts.last()
        && let Flow::Call { target } = last.flow()
    {
        out.trailing_call_targets.push(target);
    }
    out
}

/// Reads the call-site table of the function's LSDA.
pub fn read_call_sites(elf: &ElfFile, f: &Function, decoded: &mut Decoded) {
    let Some(lsda) = f.lsda else { return };
    match elf.lsda(lsda, f.range.start) {
        Ok(parsed) => {
            decoded.call_sites = parsed
                .call_sites
                .iter()
                .map(|cs| (VaddrRange::new(cs.start, cs.len), cs.landing_pad))
                .collect();
        }
        Err(_) => {
            decoded
                .skip
                .get_or_insert(SkipReason::MalformedLsda { lsda });
        }
    }
}

/// An incoming control transfer from another function, which must start a block here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Incoming {
    /// From a sibling fragment (jump or landing pad).
    Fragment(Vaddr),
    LandingPad(Vaddr),
}

fn inst_index(insts: &[Inst], addr: Vaddr) -> Option<usize> {
    insts.binary_search_by_key(&addr, |i| i.addr()).ok()
}

struct Builder<'c, 'a> {
    ctx: &'c Context<'a>,
    id: FuncId,
    range: VaddrRange,
    skip: Option<SkipReason>,
}

impl Builder<'_, '_> {
    fn fail(&mut self, reason: SkipReason) {
        self.skip.get_or_insert(reason);
    }
}

enum IndirectKind {
    Table(JumpTable),
    TailCall,
    ComputedGoto,
}

/// Phase B: cuts `f.insts` into blocks and resolves every control transfer.
///
/// The steps, in order: mark the ways in (entries, sibling fragments, landing pads); resolve
/// the indirect jumps (tables, tail calls); find the address-taken labels, which decide what
/// the jumps left unresolved are; mark every other block start; cut the blocks and give each
/// its terminator and successors. A construct the model does not cover makes the function
/// skipped, with the first reason found.
pub fn build(ctx: &Context, f: &mut Function, decoded: &Decoded, incoming: &[Incoming]) {
    f.blocks.clear();
    f.calls.clear();
    f.jump_tables.clear();
    if let Some(reason) = &decoded.skip {
        f.status = Status::Skipped(reason.clone());
        return;
    }
    let mut b = Builder {
        ctx,
        id: f.id,
        range: f.range,
        skip: None,
    };
    if f.insts.is_empty() {
        f.status = Status::Skipped(SkipReason::NoCode { at: f.range.start });
        return;
    }
    let mut marks = Marks::ways_in(&mut b, f, incoming);
    let mut frame = FrameCheck {
        ctx,
        rows: Vec::new(),
    };
    let mut jumps = IndirectJumps::resolve(&mut b, f, &mut frame);
    jumps.reject_paths_entered_otherwise(&mut b, f, incoming);
    let labels = Labels::find(&mut b, f, &mut marks, &jumps.table_spans());
    jumps.decide_unknown(&mut b, f, &labels, &mut frame);
    marks.block_starts(&mut b, f, &jumps.resolved);
    let call_landing_pads = marks.landing_pads(&mut b, f, decoded);
    let cut = BlockCutter::new(&b, f, &marks, &labels, call_landing_pads);
    let (blocks, calls, tables) = cut.blocks(&mut b, incoming, jumps.resolved);
    f.blocks = blocks;
    f.calls = calls;
    f.jump_tables = tables;
    f.status = match b.skip {
        Some(r) => Status::Skipped(r),
        None => Status::Simple,
    };
}

/// Per instruction: whether a block starts there, and what kind of block it starts.
struct Marks {
    leader: Vec<bool>,
    landing_pad: Vec<bool>,
    address_taken: Vec<bool>,
    entry: Vec<bool>,
}

impl Marks {
    /// The ways into `f` known before its code is read: its entry and secondary entries, the
    /// addresses sibling fragments jump to, and the landing pads they hold.
    fn ways_in(b: &mut Builder, f: &Function, incoming: &[Incoming]) -> Marks {
        let insts = &f.insts;
        let n = insts.len();
        let mut marks = Marks {
            leader: vec![false; n],
            landing_pad: vec![false; n],
            address_taken: vec![false; n],
            entry: vec![false; n],
        };
        marks.leader[0] = true;
        marks.entry[0] = true;
        for &e in &f.secondary_entries {
            match inst_index(insts, e) {
                Some(i) => {
                    marks.leader[i] = true;
                    marks.entry[i] = true;
                }
                None => b.fail(SkipReason::ReferenceIntoInstruction { target: e }),
            }
        }
        for inc in incoming {
            let (Incoming::Fragment(a) | Incoming::LandingPad(a)) = *inc;
            match inst_index(insts, a) {
                Some(i) => {
                    marks.leader[i] = true;
                    if matches!(inc, Incoming::LandingPad(_)) {
                        marks.landing_pad[i] = true;
                    }
                }
                None => b.fail(SkipReason::BranchIntoInstruction {
                    at: f.range.start,
                    target: a,
                }),
            }
        }
        marks
    }

    /// Block starts from direct branches, table entries and block ends.
    fn block_starts(&mut self, b: &mut Builder, f: &Function, indirect: &[(usize, IndirectKind)]) {
        let insts = &f.insts;
        let n = insts.len();
        for (i, inst) in insts.iter().enumerate() {
            let flow = inst.flow();
            match flow {
                Flow::Jump { target } | Flow::CondJump { target } if f.range.contains(target) => {
                    match inst_index(insts, target) {
                        Some(t) => self.leader[t] = true,
                        None => b.fail(SkipReason::BranchIntoInstruction {
                            at: inst.addr(),
                            target,
                        }),
                    }
                }
                _ => {}
            }
            let noreturn_call = matches!(flow, Flow::Call { target } if b.ctx.is_noreturn(target));
            if (flow.ends_block() || noreturn_call) && i + 1 < n {
                self.leader[i + 1] = true;
            }
        }
        for (_, kind) in indirect {
            if let IndirectKind::Table(t) = kind {
                for &e in &t.entries {
                    if let Some(idx) = inst_index(insts, e) {
                        self.leader[idx] = true;
                    }
                }
            }
        }
    }

    /// Marks the landing pads of `f`'s call sites; returns (call-site range, landing pad) for
    /// every call site that has one. A landing pad must be an instruction of `f` or lie in a
    /// sibling fragment.
    fn landing_pads(
        &mut self,
        b: &mut Builder,
        f: &Function,
        decoded: &Decoded,
    ) -> Vec<(VaddrRange, Vaddr)> {
        let ctx = b.ctx;
        let mut call_landing_pads: Vec<(VaddrRange, Vaddr)> = Vec::new();
        for &(range, lp) in &decoded.call_sites {
            let Some(lp) = lp else { continue };
            call_landing_pads.push((range, lp));
            if f.range.contains(lp) {
                match inst_index(&f.insts, lp) {
                    Some(i) => {
                        self.leader[i] = true;
                        self.landing_pad[i] = true;
                    }
                    None => b.fail(SkipReason::BadLandingPad {
                        lsda: f.lsda.unwrap_or_default(),
                        landing_pad: lp,
                    }),
                }
            } else if !ctx
                .function_containing(lp)
                .is_some_and(|g| ctx.are_fragments(f.id, g))
            {
                b.fail(SkipReason::BadLandingPad {
                    lsda: f.lsda.unwrap_or_default(),
                    landing_pad: lp,
                });
            }
        }
        call_landing_pads
    }
}

/// Whether the stack frame is still there at an indirect jump, which rules out a tail call.
/// The unwind rows of an FDE are read once, at the first jump in it that needs them.
struct FrameCheck<'c, 'a> {
    ctx: &'c Context<'a>,
    rows: Vec<CfiRow>,
}

impl FrameCheck<'_, '_> {
    fn live_at(&mut self, at: Vaddr) -> bool {
        if !self.rows.iter().any(|r| r.range.contains(at)) {
            self.rows = self.ctx.unwind_rows(at);
        }
        frame_live_at(self.ctx.isa, &self.rows, at)
    }
}

/// Facts about a function's code that the analyses of its indirect jumps share, each computed
/// when first needed.
struct CodeFacts {
    /// (target, source) indices of the direct branches.
    direct_preds: Vec<(usize, usize)>,
    /// Instructions where paths merge: branch targets and stored labels.
    merge_points: Option<Vec<bool>>,
    /// Registers every definition of which loads the same constant address.
    constants: Option<Vec<(rivet_arch::RegisterId, u64)>>,
    /// Direct branches plus the entries of the tables resolved so far, as (target, source);
    /// dropped whenever a round resolves more tables.
    branch_preds: Option<Vec<(usize, usize)>>,
}

/// The order in which a function's indirect jumps are analysed. Pass 0 takes every jump with
/// its straight-line window only; pass 1 retries those that need the paths into them (which
/// go through the first ones' table targets). A jump the paths did not resolve waits: the
/// ways into a table's targets are known only once its jump is, so the waiting jumps are
/// tried again after each round that resolved another.
struct Worklist {
    first_pass: Vec<(usize, bool)>,
    second_pass: Vec<(usize, bool)>,
    waiting: Vec<usize>,
    resolved_before_round: usize,
    pass: u8,
}

impl Worklist {
    /// The next jump to analyse (instruction index, whether to follow the paths into it),
    /// given how many jumps are resolved so far; `None` when done.
    fn next(&mut self, resolved: usize, facts: &mut CodeFacts) -> Option<(usize, bool)> {
        while self.pass < 2 {
            let next = if self.pass == 0 {
                self.first_pass.pop()
            } else {
                self.second_pass.pop()
            };
            if next.is_some() {
                return next;
            }
            if self.pass == 1 && !self.waiting.is_empty() && resolved > self.resolved_before_round {
                self.resolved_before_round = resolved;
                self.second_pass = self.waiting.drain(..).rev().map(|i| (i, true)).collect();
                facts.branch_preds = None;
                continue;
            }
            if self.pass == 0 {
                self.resolved_before_round = resolved;
            }
            self.pass += 1;
        }
        None
    }
}

/// What the analysis of one indirect jump found.
enum JumpAnalysis {
    /// Its straight-line window says nothing: retry with the paths into it.
    NeedsPaths,
    Found {
        form: IndirectJump,
        /// Blocks entered only by a table that the paths into this jump went through, when
        /// they were assumed to be this jump's targets (checked once its table is read).
        assumed_targets: Option<Vec<usize>>,
        /// Set when the form came from the branches into the jump's block: that block's
        /// start, whose other ways in must be checked once all jumps are resolved.
        via_paths: Option<Vaddr>,
    },
}

/// The indirect jumps of a function and what they were found to be.
struct IndirectJumps {
    /// (instruction index, kind), in instruction order once `decide_unknown` ran.
    resolved: Vec<(usize, IndirectKind)>,
    /// Jumps no analysis explained: tail calls or computed gotos, decided with the labels.
    unknown: Vec<usize>,
    /// Jumps resolved from the branches into their block, with the block's start.
    via_paths: Vec<(usize, Vaddr)>,
}

impl IndirectJumps {
    /// Analyses every indirect jump of `f` (see [`Worklist`] for the order).
    fn resolve(b: &mut Builder, f: &Function, frame: &mut FrameCheck) -> IndirectJumps {
        let insts = &f.insts;
        let mut jumps = IndirectJumps {
            resolved: Vec::new(),
            unknown: Vec::new(),
            via_paths: Vec::new(),
        };
        let mut worklist = Worklist {
            first_pass: (0..insts.len())
                .filter(|&i| insts[i].flow() == Flow::IndirectJump)
                .map(|i| (i, false))
                .collect(),
            second_pass: Vec::new(),
            waiting: Vec::new(),
            resolved_before_round: 0,
            pass: 0,
        };
        // Direct-branch predecessors, computed once if the function has indirect jumps.
        let mut facts = CodeFacts {
            direct_preds: if worklist.first_pass.is_empty() {
                Vec::new()
            } else {
                branch_predecessors(insts)
            },
            merge_points: None,
            constants: None,
            branch_preds: None,
        };
        while let Some((i, reach)) = worklist.next(jumps.resolved.len(), &mut facts) {
            match jumps.analyze(b.ctx, f, i, reach, &mut facts) {
                JumpAnalysis::NeedsPaths => worklist.second_pass.push((i, true)),
                JumpAnalysis::Found {
                    form,
                    assumed_targets,
                    via_paths,
                } => {
                    if let Some(head) = via_paths {
                        jumps.via_paths.push((i, head));
                    }
                    match Self::classify(b, f, frame, i, reach, form, &assumed_targets) {
                        Outcome::Resolved(kind) => jumps.resolved.push((i, kind)),
                        Outcome::Waiting => worklist.waiting.push(i),
                        Outcome::Unknown => jumps.unknown.push(i),
                        Outcome::Failed => {}
                    }
                }
            }
        }
        jumps.unknown.extend(worklist.waiting);
        jumps
    }
    /// Analyses the indirect jump at `i`: its straight-line window first (with the constants
    /// hoisted out of loops), then, when `reach` says so, the paths into its block.
    fn analyze(
        &self,
        ctx: &Context,
        f: &Function,
        i: usize,
        reach: bool,
        facts: &mut CodeFacts,
    ) -> JumpAnalysis {
        let insts = &f.insts;
        let mut assumed_targets: Option<Vec<usize>> = None;
        // The straight-line window ends the jump: back to where other paths merge in (a branch
        // target or a stored label), so every value it computes holds on all paths.
        let direct_preds = &facts.direct_preds;
        let merge = facts.merge_points.get_or_insert_with(|| {
            let mut m = vec![false; insts.len()];
            for &(t, _) in direct_preds {
                m[t] = true;
            }
            for r in ctx.refs_into(f.range) {
                if let Some(k) = inst_index(insts, r.target) {
                    m[k] = true;
                }
            }
            m
        });
        let mut j = i;
        while j > 0 && i - j < 48 && falls_into_next(ctx, &insts[j - 1]) && !merge[j] {
            j -= 1;
        }
        let mut form = ctx.isa.analyze_indirect_jump(&insts[j..=i], &[], &[]);
        if form == IndirectJump::Unknown {
            let constants = facts
                .constants
                .get_or_insert_with(|| ctx.isa.register_constants(insts));
            if !constants.is_empty() {
                form = ctx.isa.analyze_indirect_jump(&insts[j..=i], &[], constants);
            }
        }
        if form == IndirectJump::Unknown && !reach {
            return JumpAnalysis::NeedsPaths;
        }
        if form == IndirectJump::Unknown {
            // A table base hoisted out of a dispatch loop, in a register reused elsewhere:
            // follow every path back to the register's definition.
            let resolved = &self.resolved;
            let preds = facts.branch_preds.get_or_insert_with(|| {
                let mut p = direct_preds.clone();
                // Targets of the tables found so far are entered from their jumps.
                for (jump, kind) in resolved {
                    if let IndirectKind::Table(t) = kind {
                        for e in &t.entries {
                            if let Some(target) = inst_index(insts, *e) {
                                p.push((target, *jump));
                            }
                        }
                    }
                }
                p.sort_unstable();
                p.dedup();
                p
            });
            // From the start of the jump's basic block: paths merge there.
            let mut block_start = i;
            while block_start > j && preds.binary_search_by_key(&block_start, |p| p.0).is_err() {
                block_start -= 1;
            }
            let window = &insts[block_start..=i];
            // Blocks entered by no direct branch and no known table come from the jumps not
            // yet understood (labels cannot be jumped to from other functions).
            let unresolved: Vec<usize> = (0..insts.len())
                .filter(|&k| {
                    insts[k].flow() == Flow::IndirectJump && !resolved.iter().any(|(x, _)| *x == k)
                })
                .collect();
            let live_in = ctx.isa.window_live_in(window);
            let hints: Vec<_> = live_in
                .iter()
                .filter_map(|&r| {
                    reaching_constant(ctx, insts, preds, &unresolved, block_start, r, None)
                        .map(|c| (r, c))
                })
                .collect();
            if !hints.is_empty() {
                form = ctx.isa.analyze_indirect_jump(window, &[], &hints);
            } else if unresolved.len() > 1 {
                // Two loops, each with its table base in a register the other reuses, wait on
                // each other: the blocks only a table enters are taken for both jumps' targets,
                // and each walk runs into the other loop's values. Assumed instead to be this
                // jump's own targets, which its table, once read, must then show they are.
                let mut entered_by_table = Vec::new();
                let own: Vec<_> = live_in
                    .iter()
                    .filter_map(|&r| {
                        let found = Some(&mut entered_by_table);
                        reaching_constant(ctx, insts, preds, &[i], block_start, r, found)
                            .map(|c| (r, c))
                    })
                    .collect();
                if !own.is_empty() {
                    let assumed = ctx.isa.analyze_indirect_jump(window, &[], &own);
                    // A range check or a narrow index (`and $3`) bounds the table.
                    if matches!(
                        assumed,
                        IndirectJump::AbsoluteTable { bound, index_bits, .. }
                            | IndirectJump::RelativeTable { bound, index_bits, .. }
                            if bound.is_some() || index_bits <= MAX_INDEX_BITS
                    ) {
                        form = assumed;
                        entered_by_table.sort_unstable();
                        entered_by_table.dedup();
                        assumed_targets = Some(entered_by_table);
                    }
                }
            }
        }
        let mut via_paths = None;
        if matches!(
            form,
            IndirectJump::Unknown
                | IndirectJump::AbsoluteTable { bound: None, .. }
                | IndirectJump::RelativeTable { bound: None, .. }
        ) {
            // A window that starts where the code before falls in, at no merge point, was
            // cut by its length: the paths into it are not known.
            let cut_by_length = j > 0 && falls_into_next(ctx, &insts[j - 1]) && !merge[j];
            if let Some((bounded, head)) =
                dispatch_from_predecessors(ctx, insts, j, i, form, cut_by_length)
            {
                form = bounded;
                via_paths = Some(head);
            }
        }
        JumpAnalysis::Found {
            form,
            assumed_targets,
            via_paths,
        }
    }

    /// What the jump at `i`, found to have `form`, is: a table (read now), a tail call, or a
    /// jump to decide later.
    fn classify(
        b: &mut Builder,
        f: &Function,
        frame: &mut FrameCheck,
        i: usize,
        reach: bool,
        form: IndirectJump,
        assumed_targets: &Option<Vec<usize>>,
    ) -> Outcome {
        let ctx = b.ctx;
        let insts = &f.insts;
        let at = insts[i].addr();
        let read_table = |b: &mut Builder,
                          table: Vaddr,
                          entry_size: u8,
                          kind: JumpTableKind,
                          index: TableIndex,
                          frame: &mut FrameCheck| {
            match resolve_table(b, insts, at, table, entry_size, kind, index) {
                TableResult::Table(t) if !enters_all(insts, &t, assumed_targets) => {
                    Outcome::Waiting
                }
                TableResult::Table(t) => Outcome::Resolved(IndirectKind::Table(t)),
                TableResult::FunctionPointers if frame.live_at(at) => Outcome::Unknown,
                TableResult::FunctionPointers => Outcome::Resolved(IndirectKind::TailCall),
                TableResult::Failed => Outcome::Failed,
            }
        };
        match form {
            IndirectJump::AbsoluteTable {
                table: t,
                entry_size,
                bound,
                index_bits,
            } => {
                let index = TableIndex { bound, index_bits };
                read_table(b, t, entry_size, JumpTableKind::Absolute, index, frame)
            }
            IndirectJump::RelativeTable {
                table: t,
                base,
                entry_size,
                bound,
                index_bits,
            } => {
                let kind = JumpTableKind::Relative { base };
                let index = TableIndex { bound, index_bits };
                read_table(b, t, entry_size, kind, index, frame)
            }
            // A pointer read from a fixed address is a tail call, unless what is stored there
            // is a label of this very function: then it is a computed goto whose table base
            // the compiler folded into the load. Neither is a tail call made with the frame
            // still on the stack.
            IndirectJump::MemorySlot { slot } => match ctx.stored_code_at(slot) {
                Some(t) if f.range.contains(t) && t != f.range.start => Outcome::Unknown,
                _ if frame.live_at(at) => Outcome::Unknown,
                _ => Outcome::Resolved(IndirectKind::TailCall),
            },
            IndirectJump::Unknown if reach => Outcome::Waiting,
            IndirectJump::Unknown => Outcome::Unknown,
        }
    }

    /// A block entered from a table, from a sibling fragment or as an entry has paths in that
    /// `dispatch_from_predecessors` did not follow: what it found does not hold on them.
    fn reject_paths_entered_otherwise(&self, b: &mut Builder, f: &Function, incoming: &[Incoming]) {
        for &(i, head) in &self.via_paths {
            let other_way_in = head == f.range.start
                || f.secondary_entries.contains(&head)
                || incoming.iter().any(|inc| {
                    let (Incoming::Fragment(a) | Incoming::LandingPad(a)) = *inc;
                    a == head
                })
                || self.resolved.iter().any(|(_, k)| match k {
                    IndirectKind::Table(t) => t.entries.contains(&head),
                    _ => false,
                });
            if other_way_in {
                b.fail(SkipReason::UnresolvedIndirectJump {
                    at: f.insts[i].addr(),
                });
            }
        }
    }

    /// The bytes of the tables the resolved jumps read.
    fn table_spans(&self) -> Vec<VaddrRange> {
        self.resolved
            .iter()
            .filter_map(|(_, k)| match k {
                IndirectKind::Table(t) => Some(t.span()),
                _ => None,
            })
            .collect()
    }

    /// Decides what the jumps no analysis explained are, from the labels stored anywhere:
    /// without labels, tail calls (unless the frame is still on the stack, or PC-relative
    /// data points into the function); with labels, computed gotos (in relocation mode, with
    /// every label exact). Leaves `resolved` in instruction order.
    fn decide_unknown(
        &mut self,
        b: &mut Builder,
        f: &Function,
        labels: &Labels,
        frame: &mut FrameCheck,
    ) {
        let ctx = b.ctx;
        for i in std::mem::take(&mut self.unknown) {
            let at = f.insts[i].addr();
            if labels.at.is_empty() {
                if labels.relative_into_function {
                    b.fail(SkipReason::UnresolvedIndirectJump { at });
                } else if frame.live_at(at) {
                    // A jump that leaves the frame on the stack is no tail call: the callee
                    // would return into it. It is a dispatch the analysis could not follow
                    // (a table of offsets from a base it did not find), and the table in data
                    // would still point at the old code.
                    b.fail(SkipReason::UnresolvedIndirectJump { at });
                } else {
                    // No label of this function is stored anywhere: the jump can only reach
                    // function entries, i.e. it is a tail call through a register.
                    self.resolved.push((i, IndirectKind::TailCall));
                }
            } else if ctx.reloc_mode && !labels.inexact {
                self.resolved.push((i, IndirectKind::ComputedGoto));
            } else {
                b.fail(SkipReason::ComputedGotoWithoutRelocations { at });
            }
        }
        self.resolved.sort_by_key(|(i, _)| *i);
    }
}

/// What one indirect jump turned out to be.
enum Outcome {
    Resolved(IndirectKind),
    /// Its table does not enter the blocks assumed for it, or the paths did not resolve it:
    /// tried again after a round that resolves another jump.
    Waiting,
    /// Decided once the labels are known.
    Unknown,
    /// Recorded as a skip reason.
    Failed,
}

/// The function's address-taken labels: stored references into its interior.
struct Labels {
    /// Instruction indices, sorted.
    at: Vec<usize>,
    /// Some reference was only approximate (no relocation says exactly where it points).
    inexact: bool,
    /// PC-relative references from data point into the function and no table explains them.
    relative_into_function: bool,
}

impl Labels {
    /// Stored references into the function's interior: address-taken labels. An indirect
    /// jump the analysis could not follow may reach any of them, including the entries of
    /// tables other jumps were recognized to use (gcc shares one label table between the
    /// dispatch sites of a threaded interpreter, loading the table base only once).
    fn find(
        b: &mut Builder,
        f: &Function,
        marks: &mut Marks,
        table_spans: &[VaddrRange],
    ) -> Labels {
        let ctx = b.ctx;
        let explained = |site: Vaddr| table_spans.iter().any(|s| s.contains(site));
        let mut labels: Vec<usize> = Vec::new();
        let mut inexact_labels = false;
        for r in ctx.refs_into(f.range) {
            if r.target == f.range.start {
                continue;
            }
            match inst_index(&f.insts, r.target) {
                Some(i) => {
                    marks.leader[i] = true;
                    if !explained(r.site) {
                        marks.address_taken[i] = true;
                    }
                    labels.push(i);
                    inexact_labels |= !r.exact;
                }
                None if r.exact => {
                    b.fail(SkipReason::ReferenceIntoInstruction { target: r.target })
                }
                None => {}
            }
        }
        labels.sort_unstable();
        labels.dedup();
        // PC-relative references from data into this function that none of its tables
        // explain. A reference's `S + A` is its target plus its distance from the table's
        // base, so the later entries of another function's table can land here (PostgreSQL's
        // expression_tree_walker and its neighbours): those in a table that function was
        // shown to read point into that function instead.
        let relative_into_function = {
            let lo = ctx.relative_refs.partition_point(|r| r.0 < f.range.start);
            let hi = ctx.relative_refs.partition_point(|r| r.0 < f.range.end);
            ctx.relative_refs[lo..hi]
                .iter()
                .any(|r| !explained(r.1) && !ctx.in_foreign_table(f.id, r.1))
        };
        Labels {
            at: labels,
            inexact: inexact_labels,
            relative_into_function,
        }
    }
}

/// Cuts a function's instructions into blocks at the marked starts.
struct BlockCutter<'f, 'c, 'a> {
    ctx: &'c Context<'a>,
    f: &'f Function,
    /// Block start indices, then the instruction count.
    starts: Vec<usize>,
    block_of_inst: Vec<u32>,
    marks: &'f Marks,
    labels: &'f Labels,
    call_landing_pads: Vec<(VaddrRange, Vaddr)>,
    /// The last instruction is a call at the end of an extent the compiler gave.
    last_call_ends_path: bool,
}

/// What cutting made of one block besides its instructions.
struct BlockEnd {
    terminator: Terminator,
    succs: Vec<Edge>,
    fragment_succs: Vec<FragmentEdge>,
    falls_through: bool,
}

impl<'f, 'c, 'a> BlockCutter<'f, 'c, 'a> {
    fn new(
        b: &Builder<'c, 'a>,
        f: &'f Function,
        marks: &'f Marks,
        labels: &'f Labels,
        call_landing_pads: Vec<(VaddrRange, Vaddr)>,
    ) -> Self {
        let insts = &f.insts;
        let n = insts.len();
        let mut starts: Vec<usize> = (0..n).filter(|&i| marks.leader[i]).collect();
        starts.push(n);
        let block_of_inst = {
            let mut v = vec![0u32; n];
            for (bi, w) in starts.windows(2).enumerate() {
                for slot in &mut v[w[0]..w[1]] {
                    *slot = bi as u32;
                }
            }
            v
        };
        // A call that is the last instruction of an extent the compiler gave (symbol size,
        // FDE) does not come back there, whatever its callee does elsewhere: the compiler
        // emitted nothing after it because it knew control cannot continue, either from a
        // noreturn attribute or from `__builtin_unreachable()` after an ordinary call.
        // PostgreSQL's `ereport(ERROR, ...)` ends in `errfinish()`, which returns for lesser
        // levels: 3,280 of its cold parts end that way, and each held its parent back. The
        // callee is not made noreturn for other callers (`callees_returned_to` is about that).
        // An extent guessed up to the next symbol says nothing about where the code ends, and
        // neither does one followed by code no function claims (a symbol size cut short would
        // look like that).
        let last_call_ends_path = insts
            .last()
            .is_some_and(|l| matches!(l.flow(), Flow::Call { .. } | Flow::IndirectCall))
            && f.origin != Origin::SymbolSizedByNext
            && nothing_continues_after(b.ctx, f);
        BlockCutter {
            ctx: b.ctx,
            f,
            starts,
            block_of_inst,
            marks,
            labels,
            call_landing_pads,
            last_call_ends_path,
        }
    }

    fn block_at(&self, addr: Vaddr) -> Option<BlockId> {
        inst_index(&self.f.insts, addr).map(|i| BlockId(self.block_of_inst[i]))
    }

    /// Whether the call at instruction `i` ends the compiler's extent (see `new`).
    fn ends_at_compiler_extent(&self, i: usize) -> bool {
        i + 1 == self.f.insts.len() && self.last_call_ends_path
    }

    /// The blocks, the calls and the jump tables of the function, with `indirect` (sorted)
    /// saying what each indirect jump is. Problems of blocks that may be unreachable (code
    /// after a noreturn call that the compiler left in, alignment padding at the end) only
    /// fail the function if the block is reachable.
    fn blocks(
        self,
        b: &mut Builder,
        incoming: &[Incoming],
        indirect: Vec<(usize, IndirectKind)>,
    ) -> (Vec<Block>, Vec<Call>, Vec<JumpTable>) {
        let insts = &self.f.insts;
        let mut blocks = Vec::with_capacity(self.starts.len() - 1);
        let mut calls = Vec::new();
        let mut tables = Vec::new();
        let mut indirect = indirect.into_iter().peekable();
        let mut deferred: Vec<(usize, SkipReason)> = Vec::new();
        for (bi, w) in self.starts.windows(2).enumerate() {
            let (first, end) = (w[0], w[1]);
            self.calls_in(first, end, &mut calls);
            let last = end - 1;
            let indirect_here = indirect.next_if(|(i, _)| *i == last).map(|(_, k)| k);
            let mut block_end =
                self.block_end(b, bi, last, indirect_here, &mut tables, &mut deferred);
            if block_end.falls_through {
                let next_block = (end < insts.len()).then(|| BlockId(bi as u32 + 1));
                match next_block {
                    Some(nb) => block_end.succs.push(Edge {
                        to: nb,
                        kind: EdgeKind::FallThrough,
                    }),
                    None => {
                        deferred.push((
                            bi,
                            SkipReason::FallsOffEnd {
                                at: insts[last].addr(),
                            },
                        ));
                    }
                }
            }
            blocks.push(Block {
                start: insts[first].addr(),
                insts: first as u32..end as u32,
                terminator: block_end.terminator,
                succs: block_end.succs,
                fragment_succs: block_end.fragment_succs,
                is_entry: self.marks.entry[first],
                is_landing_pad: self.marks.landing_pad[first],
                is_address_taken: self.marks.address_taken[first],
                is_reachable: true,
            });
        }
        let reachable = reachable_blocks(&blocks, incoming);
        for (block, reachable) in blocks.iter_mut().zip(&reachable) {
            block.is_reachable = *reachable;
        }
        for (bi, reason) in deferred {
            if reachable[bi] {
                b.fail(reason);
            }
        }
        (blocks, calls, tables)
    }

    /// The calls among instructions `first..end`.
    fn calls_in(&self, first: usize, end: usize, calls: &mut Vec<Call>) {
        let landing_pad = |at: Vaddr| landing_pad_of(&self.call_landing_pads, at);
        for (i, inst) in self.f.insts.iter().enumerate().take(end).skip(first) {
            match inst.flow() {
                Flow::Call { target } => {
                    let target_kind = self.ctx.call_target(target);
                    calls.push(Call {
                        at: inst.addr(),
                        noreturn: self.ctx.is_noreturn(target) || self.ends_at_compiler_extent(i),
                        target: target_kind,
                        landing_pad: landing_pad(inst.addr()),
                    });
                }
                Flow::IndirectCall => calls.push(Call {
                    at: inst.addr(),
                    target: CallTarget::Indirect,
                    noreturn: self.ends_at_compiler_extent(i),
                    landing_pad: landing_pad(inst.addr()),
                }),
                _ => {}
            }
        }
    }

    /// How block `bi`, whose last instruction is `last`, ends: its terminator and the edges it
    /// takes (a fall-through edge is left to the caller). `indirect` is what the block's
    /// indirect jump was found to be, if it ends with one; its table goes to `tables`.
    fn block_end(
        &self,
        b: &mut Builder,
        bi: usize,
        last: usize,
        indirect: Option<IndirectKind>,
        tables: &mut Vec<JumpTable>,
        deferred: &mut Vec<(usize, SkipReason)>,
    ) -> BlockEnd {
        let f = self.f;
        let ctx = self.ctx;
        let last_inst = f.insts[last];
        let mut succs = Vec::new();
        let mut fragment_succs = Vec::new();
        let mut falls_through = false;
        let terminator = match last_inst.flow() {
            flow @ (Flow::Jump { target } | Flow::CondJump { target }) => {
                let conditional = matches!(flow, Flow::CondJump { .. });
                falls_through = conditional;
                let plain = if conditional {
                    Terminator::CondJump
                } else {
                    Terminator::Jump
                };
                if let Some(t) = f
                    .range
                    .contains(target)
                    .then(|| self.block_at(target))
                    .flatten()
                {
                    succs.push(Edge {
                        to: t,
                        kind: EdgeKind::Taken,
                    });
                    plain
                } else {
                    match external(b, last_inst.addr(), target) {
                        External::Fragment(fe) => {
                            fragment_succs.push(FragmentEdge {
                                kind: EdgeKind::Taken,
                                ..fe
                            });
                            plain
                        }
                        External::Call(t) if conditional => Terminator::CondTailCall { target: t },
                        External::Call(t) => Terminator::TailCall { target: t },
                        External::Bad(reason) => {
                            deferred.push((bi, reason));
                            plain
                        }
                    }
                }
            }
            Flow::IndirectJump => match indirect {
                Some(IndirectKind::Table(t)) => {
                    let mut seen = Vec::new();
                    for &e in &t.entries {
                        if seen.contains(&e) {
                            continue;
                        }
                        seen.push(e);
                        if let Some(to) = f.range.contains(e).then(|| self.block_at(e)).flatten() {
                            succs.push(Edge {
                                to,
                                kind: EdgeKind::JumpTable,
                            });
                        } else if e != f.range.end
                            && let Some(g) = ctx.function_containing(e)
                        {
                            fragment_succs.push(FragmentEdge {
                                function: g,
                                addr: e,
                                kind: EdgeKind::JumpTable,
                            });
                        }
                    }
                    tables.push(t);
                    Terminator::JumpTable {
                        table: JumpTableId(tables.len() as u32 - 1),
                    }
                }
                Some(IndirectKind::TailCall) => Terminator::TailCall {
                    target: CallTarget::Indirect,
                },
                Some(IndirectKind::ComputedGoto) => {
                    for &l in &self.labels.at {
                        succs.push(Edge {
                            to: BlockId(self.block_of_inst[l]),
                            kind: EdgeKind::ComputedGoto,
                        });
                    }
                    Terminator::ComputedGoto
                }
                // Already recorded as a skip reason.
                None => Terminator::Trap,
            },
            Flow::Return => Terminator::Return,
            Flow::Trap => Terminator::Trap,
            Flow::Call { target } if ctx.is_noreturn(target) => Terminator::NoReturnCall,
            Flow::Call { .. } | Flow::IndirectCall if self.ends_at_compiler_extent(last) => {
                Terminator::NoReturnCall
            }
            Flow::Next | Flow::Call { .. } | Flow::IndirectCall => {
                falls_through = true;
                Terminator::FallThrough
            }
        };
        BlockEnd {
            terminator,
            succs,
            fragment_succs,
            falls_through,
        }
    }
}

/// Whether `table` has a proven size and enters every block of `assumed` (instruction indices),
/// the blocks a walk took for its targets; true when nothing was assumed.
fn enters_all(insts: &[Inst], table: &JumpTable, assumed: &Option<Vec<usize>>) -> bool {
    assumed.as_ref().is_none_or(|blocks| {
        // Only a proven size makes the check mean something: a relocation run or a scan may
        // reach into the other loop's table.
        matches!(
            table.bound,
            TableBound::RangeCheck { .. }
                | TableBound::RangeCheckAndRelocations { .. }
                | TableBound::IndexWidth { .. }
        ) && blocks.iter().all(|&k| {
            table
                .entries
                .iter()
                .any(|e| inst_index(insts, *e) == Some(k))
        })
    })
}

/// Whether control goes on from `inst` to the instruction after it. A call to a function
/// known not to return does not: the code after it is another block, entered some other
/// way (C++ places a `switch` case right after a `call __cxa_throw`), and the backward walks
/// below must not take that code's values for the ones on the paths they follow.
fn falls_into_next(ctx: &Context, inst: &Inst) -> bool {
    match inst.flow() {
        Flow::Call { target } => !ctx.is_noreturn(target),
        flow => flow.falls_through(),
    }
}

/// (target, source) instruction indices of the function's direct branches, sorted.
fn branch_predecessors(insts: &[Inst]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for (k, inst) in insts.iter().enumerate() {
        if let Flow::Jump { target } | Flow::CondJump { target } = inst.flow()
            && let Some(t) = inst_index(insts, target)
        {
            out.push((t, k));
        }
    }
    out.sort_unstable();
    out
}

/// The constant register `r` holds on entry to instruction `start` when every path into it
/// (through fall-throughs and direct branches) last defines `r` with that same constant.
/// `None` when some path reaches the function entry, an instruction entered only in ways not
/// seen here (table targets), or a non-constant definition.
fn reaching_constant(
    ctx: &Context,
    insts: &[Inst],
    preds: &[(usize, usize)],
    unresolved_jumps: &[usize],
    start: usize,
    r: rivet_arch::RegisterId,
    mut entered_by_table: Option<&mut Vec<usize>>,
) -> Option<u64> {
    let branch_sources = |pos: usize| {
        let lo = preds.partition_point(|p| p.0 < pos);
        let hi = preds.partition_point(|p| p.0 <= pos);
        preds[lo..hi].iter().map(|p| p.1)
    };
    let mut result = None;
    let mut visited = std::collections::HashSet::new();
    let mut work = vec![start];
    while let Some(pos) = work.pop() {
        if !visited.insert(pos) {
            continue;
        }
        if visited.len() > 4096 || pos == 0 {
            return None;
        }
        let mut sources: Vec<usize> = branch_sources(pos).collect();
        if falls_into_next(ctx, &insts[pos - 1]) {
            sources.push(pos - 1);
        }
        if sources.is_empty() && (insts[pos].is_nop() || insts[pos].is_fill_trap()) {
            // Alignment padding after a jump or a return: nothing runs it. The code after it
            // falls out of it only in appearance, so no value comes in this way. (Compilers
            // put a label after the padding, never before it.)
            continue;
        }
        if sources.is_empty() {
            // Entered by no direct branch: a target of this function's indirect jumps (labels
            // cannot be jumped to from other functions), so the value is theirs.
            if let Some(found) = entered_by_table.as_deref_mut() {
                found.push(pos);
            }
            sources = unresolved_jumps.to_vec();
            if sources.is_empty() {
                return None;
            }
        }
        for p in sources {
            let mut k = p;
            loop {
                match insts[k].register_definition(r) {
                    Some(Some(c)) if result.is_none_or(|x| x == c) => {
                        result = Some(c);
                        break;
                    }
                    Some(_) => return None,
                    None => {}
                }
                if k == 0 {
                    return None;
                }
                if branch_sources(k).next().is_some() || !falls_into_next(ctx, &insts[k - 1]) {
                    work.push(k);
                    break;
                }
                k -= 1;
            }
        }
    }
    result
}

/// When the dispatch block (the window `start..=jump`) is entered by branches, and perhaps by
/// the instruction before falling in, looks at every path into it: each predecessor's
/// straight-line window followed by the dispatch window must read the same table. With a range check on every path the result is the largest bound (an index valid
/// on some path). Without one on every path, the widest index width over the paths, if that
/// is narrower than what the dispatch block alone shows. `unbounded` is what the dispatch
/// block alone shows: a table without a bound, or nothing known (python3.11's interpreter
/// loads the opcode's handler in each of its cases and jumps to one shared `jmp *%rax`).
/// A block whose address is stored in data (a computed goto's label) has paths in that no
/// branch shows: none is assumed. Returns the dispatch and the block's start, for the caller
/// to check once it knows every table and every way in from sibling fragments.
fn dispatch_from_predecessors(
    ctx: &Context,
    insts: &[Inst],
    start: usize,
    jump: usize,
    unbounded: IndirectJump,
    cut_by_length: bool,
) -> Option<(IndirectJump, Vaddr)> {
    if cut_by_length {
        return None;
    }
    let window = start;
    // What falls into the window: the instruction before it, or before the alignment padding
    // in front of it (padding after a `jmp` is fallen into by nothing).
    let mut before = window;
    while before > 0 && insts[before - 1].is_nop() {
        before -= 1;
    }
    let fall_pred = (before > 0 && falls_into_next(ctx, &insts[before - 1])).then(|| before - 1);
    // Alignment padding before the block is part of the window but never a branch target.
    let mut start = start;
    while start < jump && insts[start].is_nop() {
        start += 1;
    }
    let head = insts[start].addr();
    let stored = VaddrRange {
        start: insts[window].addr(),
        end: head + 1,
    };
    if !ctx.refs_into(stored).is_empty() {
        return None;
    }
    let mut preds: Vec<usize> = insts
        .iter()
        .enumerate()
        .filter(|(_, x)| matches!(x.flow(), Flow::Jump { target } | Flow::CondJump { target } if target == head))
        .map(|(k, _)| k)
        .collect();
    if preds.is_empty() || preds.len() > 16 {
        return None;
    }
    preds.extend(fall_pred);
    // The table and the index width of a dispatch, and its range check's bound if any.
    let shape = |j: &IndirectJump| match *j {
        IndirectJump::AbsoluteTable {
            table,
            bound,
            index_bits,
            ..
        } => Some(((table, None), bound.map(|b| b.entries), index_bits)),
        IndirectJump::RelativeTable {
            table,
            base,
            bound,
            index_bits,
            ..
        } => Some(((table, Some(base)), bound.map(|b| b.entries), index_bits)),
        _ => None,
    };
    let (mut own_table, own_bits) = match shape(&unbounded) {
        Some((table, _, bits)) => (Some(table), bits),
        None => (None, 64),
    };
    let mut best: Option<IndirectJump> = None;
    let mut first: Option<IndirectJump> = None;
    let mut all_checked = true;
    let mut widest_bits = 0;
    for p in preds {
        let mut k = p;
        while k > 0 && p - k < 48 && falls_into_next(ctx, &insts[k - 1]) {
            k -= 1;
        }
        let mut path: Vec<Inst> = insts[k..=p].to_vec();
        path.extend_from_slice(&insts[start..=jump]);
        // The predecessor's last instruction is taken to reach the block, unless the block is
        // what it falls into.
        let taken: &[Vaddr] = if Some(p) == fall_pred {
            &[]
        } else {
            &[insts[p].addr()]
        };
        let found = ctx.isa.analyze_indirect_jump(&path, taken, &[]);
        let (table, entries, bits) = shape(&found)?;
        if *own_table.get_or_insert(table) != table {
            return None;
        }
        first.get_or_insert(found);
        widest_bits = widest_bits.max(bits);
        match entries {
            Some(n) => {
                let best_entries = best.as_ref().and_then(|b| shape(b)?.1);
                if best_entries.is_none_or(|m| n > m) {
                    best = Some(found);
                }
            }
            None => all_checked = false,
        }
    }
    if all_checked {
        return best.map(|j| (j, head));
    }
    // Some path has no range check, but every path may narrow the index (python3.11 loads
    // the opcode with `movzbl` before jumping to a shared dispatch): the widest of them is
    // what the table must cover.
    let unbounded = match unbounded {
        IndirectJump::Unknown => first?,
        known => known,
    };
    let mut narrowed = unbounded;
    if let IndirectJump::AbsoluteTable {
        bound, index_bits, ..
    }
    | IndirectJump::RelativeTable {
        bound, index_bits, ..
    } = &mut narrowed
    {
        *bound = None;
        *index_bits = widest_bits;
    }
    (widest_bits < own_bits).then_some((narrowed, head))
}

fn landing_pad_of(sites: &[(VaddrRange, Vaddr)], at: Vaddr) -> Option<Vaddr> {
    sites
        .iter()
        .find(|(r, _)| r.contains(at))
        .map(|(_, lp)| *lp)
}

/// Blocks reachable from the function's entries, landing pads, address-taken labels and
/// the targets of branches from sibling fragments.
fn reachable_blocks(blocks: &[Block], incoming: &[Incoming]) -> Vec<bool> {
    let mut seen = vec![false; blocks.len()];
    let mut stack: Vec<usize> = Vec::new();
    for (i, b) in blocks.iter().enumerate() {
        let from_fragment = incoming.iter().any(|inc| {
            let (Incoming::Fragment(a) | Incoming::LandingPad(a)) = *inc;
            a == b.start
        });
        if b.is_entry || b.is_landing_pad || b.is_address_taken || from_fragment {
            seen[i] = true;
            stack.push(i);
        }
    }
    while let Some(i) = stack.pop() {
        for e in &blocks[i].succs {
            let t = e.to.0 as usize;
            if !seen[t] {
                seen[t] = true;
                stack.push(t);
            }
        }
    }
    seen
}

enum External {
    Fragment(FragmentEdge),
    Call(CallTarget),
    Bad(SkipReason),
}

fn external(b: &Builder, at: Vaddr, target: Vaddr) -> External {
    let ctx = b.ctx;
    if let Some(g) = ctx.function_containing(target)
        && ctx.are_fragments(b.id, g)
    {
        return External::Fragment(FragmentEdge {
            function: g,
            addr: target,
            kind: EdgeKind::Taken,
        });
    }
    match ctx.call_target(target) {
        CallTarget::Unknown { addr } if is_unreachable_end(b, target) => {
            External::Call(CallTarget::Unknown { addr })
        }
        CallTarget::Unknown { .. } => External::Bad(SkipReason::BranchToUnknownCode { at, target }),
        t => External::Call(t),
    }
}

/// Whether `target` is the end of this function or of a sibling fragment, followed by
/// padding: the label a compiler puts where code it knows unreachable would be. gcc emits
/// such jumps from `.cold` parts when the source says a call does not return but the
/// compiler does not know it (PostgreSQL's `elog(ERROR)` followed by `pg_unreachable()` in
/// palloc and its relatives: the main part ends with the call, and the cold part jumps to the
/// address after it). Nothing runs there, so the jump is never taken; it is kept as a jump to
/// the same address, which reaches the same bytes as before whenever the function is moved
/// (its old code stays where it was).
fn is_unreachable_end(b: &Builder, target: Vaddr) -> bool {
    let ctx = b.ctx;
    let Some(before) = target.get().checked_sub(1).map(Vaddr) else {
        return false;
    };
    let Some(g) = ctx.function_containing(before) else {
        return false;
    };
    let range = ctx.ranges[g.0 as usize];
    if range.end != target || !(g == b.id || ctx.are_fragments(b.id, g)) {
        return false;
    }
    // The idiom: the function's last instruction is a call that the source knows does not
    // return. Hand-written code that jumps to where padding begins and means to run on is
    // not this, and is left alone.
    let ends_with_call = ctx
        .elf
        .bytes_at(range.start, range.len())
        .and_then(|code| ctx.isa.decode_all(code, range.start).last().cloned())
        .is_some_and(|last| matches!(last.flow(), Flow::Call { .. }) && last.end() == target);
    ends_with_call
        && (1..=ctx.isa.max_inst_len())
            .rev()
            .find_map(|len| ctx.elf.bytes_at(target, len))
            .and_then(|bytes| ctx.isa.decode_all(bytes, target).first().cloned())
            .is_some_and(|next| next.is_padding_nop() || next.is_fill_trap())
}

enum TableResult {
    Table(JumpTable),
    /// The "table" holds entries of other functions: an array of function pointers, and the
    /// jump a tail call through it.
    FunctionPointers,
    Failed,
}

/// What is known of a table dispatch's index.
struct TableIndex {
    /// A range check's bound.
    bound: Option<rivet_arch::IndexBound>,
    /// How many of its low bits may be non-zero (`IndirectJump::AbsoluteTable::index_bits`).
    index_bits: u8,
}

/// The widest index whose every value a table is checked to cover (`TableBound::IndexWidth`):
/// 65,536 entries at most, read only as far as the first that is no instruction of the
/// function.
const MAX_INDEX_BITS: u8 = 16;

/// Reads a jump table's entries, sized by the range check, the relocations covering it, or
/// the width of its index.
fn resolve_table(
    b: &mut Builder,
    insts: &[Inst],
    jump_at: Vaddr,
    table: Vaddr,
    entry_size: u8,
    kind: JumpTableKind,
    index: TableIndex,
) -> TableResult {
    let TableIndex { bound, index_bits } = index;
    let ctx = b.ctx;
    let es = u64::from(entry_size);
    let read_entry = |i: u64| {
        let at = table + i * es;
        match (kind, entry_size) {
            (JumpTableKind::Absolute, 8) => ctx.elf.read_u64(at).map(Vaddr),
            (JumpTableKind::Absolute, 4) => ctx.elf.read_u32(at).map(|v| Vaddr(u64::from(v))),
            (JumpTableKind::Relative { base }, 4) => {
                ctx.elf.read_i32(at).map(|v| base.offset(i64::from(v)))
            }
            _ => None,
        }
    };
    let is_other_entry =
        |t: Vaddr| !b.range.contains(t) && (ctx.entry_at(t).is_some() || ctx.plt_at(t).is_some());
    // An entry into a compiler-split part of this function (`foo.cold`).
    let is_fragment_entry = |t: Vaddr| {
        ctx.function_containing(t)
            .is_some_and(|g| ctx.are_fragments(b.id, g))
    };
    let is_instruction = |t: Vaddr| b.range.contains(t) && inst_index(insts, t).is_some();
    // An entry the rewriter can follow: an instruction of this function or of one of its parts.
    let is_own_entry = |t: Vaddr| is_instruction(t) || is_fragment_entry(t);
    // A table of other functions' entries is a table of function pointers: a tail call. In
    // PIE code its bytes are zero in the file and the dynamic relocations hold the values.
    if kind == JumpTableKind::Absolute
        && (read_entry(0).is_some_and(is_other_entry)
            || ctx.stored_code_at(table).is_some_and(is_other_entry))
    {
        return TableResult::FunctionPointers;
    }
    // The run of relocations at consecutive entries.
    let reloc_run = if ctx.reloc_mode {
        let relocs = ctx.relocs_in(VaddrRange {
            start: table,
            end: table + 4096 * es,
        });
        let mut count = 0u64;
        for r in relocs {
            if r.site != table + count * es {
                if r.site < table + count * es {
                    continue;
                }
                break;
            }
            let ok = match kind {
                JumpTableKind::Absolute => {
                    r.is_absolute() && u64::from(r.field_size().unwrap_or(0)) == es
                }
                JumpTableKind::Relative { .. } => r.is_pc_relative() && es == 4,
            };
            if !ok {
                break;
            }
            count += 1;
        }
        count
    } else {
        0
    };
    // No range check because the index cannot leave the table: a byte (python3.11's opcode
    // dispatch, `movzbl` then `jmp *T(,%rax,8)`) or a mask (`and $3`) indexes 2^bits entries,
    // each of which must then be code of this function. Proven, where scanning only guesses,
    // and exact where relocations run on into the next table.
    let width_proven = || {
        index_bits <= MAX_INDEX_BITS
            && (0..1u64 << index_bits).all(|i| read_entry(i).is_some_and(is_own_entry))
    };
    let (entries_count, table_bound, default_target) = match bound {
        Some(bd) => {
            let tb = if ctx.reloc_mode && reloc_run >= bd.entries {
                TableBound::RangeCheckAndRelocations { check: bd.check }
            } else {
                TableBound::RangeCheck { check: bd.check }
            };
            (bd.entries, tb, Some(bd.default_target))
        }
        None if reloc_run >= 1 << index_bits.min(MAX_INDEX_BITS + 1) && width_proven() => (
            1 << index_bits,
            TableBound::IndexWidth { bits: index_bits },
            None,
        ),
        None if reloc_run > 0 => (reloc_run, TableBound::Relocations, None),
        None if width_proven() => (
            1 << index_bits,
            TableBound::IndexWidth { bits: index_bits },
            None,
        ),
        // Without relocations and without a range check (a switch covering every value of an
        // enum), the table ends where entries stop being instructions of this function. The
        // bound is recorded as scanned, so later phases know it is inferred.
        None if !ctx.reloc_mode => (4096, TableBound::Scanned, None),
        None => {
            b.fail(SkipReason::UnboundedJumpTable { at: jump_at, table });
            return TableResult::Failed;
        }
    };
    if entries_count == 0 || entries_count > 1 << 20 {
        b.fail(SkipReason::UnboundedJumpTable { at: jump_at, table });
        return TableResult::Failed;
    }
    let mut entries = Vec::with_capacity(entries_count as usize);
    let open_ended = matches!(table_bound, TableBound::Relocations | TableBound::Scanned);
    for i in 0..entries_count {
        let Some(target) = read_entry(i) else {
            if open_ended && i > 0 {
                break;
            }
            b.fail(SkipReason::UnboundedJumpTable { at: jump_at, table });
            return TableResult::Failed;
        };
        let in_function = is_instruction(target);
        let in_fragment = !in_function && is_fragment_entry(target);
        // clang points the entries of impossible cases (`default: unreachable`) at the end of
        // the function. Kept, so the whole table is rewritten, but they are no CFG edge.
        let unreachable_case = table_bound == TableBound::Relocations && target == b.range.end;
        if !in_function && !in_fragment && !unreachable_case {
            // Sized by relocations alone, the run may continue into the next table (of
            // another function): it ends where entries stop pointing into this one.
            if open_ended && i > 0 {
                break;
            }
            b.fail(SkipReason::BadJumpTableEntry {
                at: jump_at,
                table,
                target,
            });
            return TableResult::Failed;
        }
        entries.push(target);
    }
    // A run that ends with such entries is more likely the start of the next table.
    while entries.last() == Some(&b.range.end) {
        entries.pop();
    }
    if entries.is_empty() {
        b.fail(SkipReason::UnboundedJumpTable { at: jump_at, table });
        return TableResult::Failed;
    }
    if table_bound == TableBound::Scanned && entries.len() < 2 {
        b.fail(SkipReason::UnboundedJumpTable { at: jump_at, table });
        return TableResult::Failed;
    }
    TableResult::Table(JumpTable {
        addr: table,
        entry_size,
        kind,
        jump_at,
        entries,
        bound: table_bound,
        default_target,
    })
}

/// Whether the stack frame is still there at `at`, which rules out a tail call: the unwind
/// row in `rows` covering `at` does not put the CFA where it is at a function entry (where the
/// stack pointer would point at the caller's return address). False without a row for `at`.
fn frame_live_at(isa: Isa, rows: &[CfiRow], at: Vaddr) -> bool {
    let at_entry = Cfa::RegisterOffset {
        register: isa.dwarf_stack_pointer(),
        offset: isa.entry_frame().cfa_offset,
    };
    rows.iter()
        .find(|r| r.range.contains(at))
        .is_some_and(|r| r.cfa != at_entry)
}

/// Whether what follows `f`'s extent is plainly not more of it: another function's entry,
/// alignment padding, or the end of the code (of the function's section, when the file has
/// section headers: the linker may leave a gap before the next one, such as `.fini`).
fn nothing_continues_after(ctx: &Context, f: &Function) -> bool {
    let end = f.range.end;
    if ctx.entry_at(end).is_some() || !ctx.elf.is_code_address(end) {
        return true;
    }
    if let Some(section) = ctx.elf.section_containing(f.range.start)
        && end.get() >= section.addr.get().saturating_add(section.size)
    {
        return true;
    }
    // One instruction's worth of bytes at most; fewer may be left before the section ends.
    let longest = ctx.isa.max_inst_len();
    let Some(bytes) = (1..=longest)
        .rev()
        .find_map(|len| ctx.elf.bytes_at(end, len))
    else {
        return true;
    };
    ctx.isa
        .decode_all(bytes, end)
        .first()
        .is_some_and(|next| next.is_padding_nop() || next.is_fill_trap())
}

/// The callees among `candidates` (sorted) that `f` shows to return: a direct call to one of
/// them followed by code that only the call's return can reach. The next instruction is in
/// the middle of a block (no jump, table or unwinder enters it there) and is not padding.
/// Compilers emit nothing after a call they know does not return, so such code is live only
/// if the callee returns. A call as a function's last instruction is weaker evidence the
/// other way: a compiler also ends a function with a call when what would follow is
/// unreachable for another reason (`__builtin_unreachable()` after an ordinary call, or code
/// it proved undefined), so that evidence yields to this. libLLVM ends a function with a
/// call to `llvm::Twine::str()` that way; taking that for noreturn broke every caller.
/// Errors here only cost coverage: a callee wrongly kept returning makes the calls to it
/// look as if they fall through, and functions ending with such a call are left alone. That
/// happens when a caller was compiled without knowing: glibc loops on its fatal-message
/// function (`for (;;) __libc_message (...)`), so 11 of libc.so.6's malloc functions that
/// end with a call to it are skipped.
pub fn callees_returned_to(f: &Function, candidates: &[Vaddr]) -> Vec<Vaddr> {
    if f.blocks.is_empty() {
        return Vec::new();
    }
    f.insts
        .windows(2)
        .filter_map(|pair| match pair[0].flow() {
            Flow::Call { target }
                if candidates.binary_search(&target).is_ok()
                    && !pair[1].is_padding_nop()
                    && !pair[1].is_fill_trap()
                    && f.block_at(pair[1].addr()).is_none() =>
            {
                Some(target)
            }
            _ => None,
        })
        .collect()
}

/// True when the function, as built, has no way to return to its caller.
pub fn never_returns(ctx: &Context, f: &Function) -> bool {
    if !f.is_simple() || f.blocks.is_empty() {
        return false;
    }
    let returning_call = |t: &CallTarget| match t {
        CallTarget::Function { addr, .. } | CallTarget::Plt { addr, .. } => !ctx.is_noreturn(*addr),
        _ => true,
    };
    !f.blocks.iter().any(|b| match &b.terminator {
        Terminator::Return => true,
        Terminator::TailCall { target } | Terminator::CondTailCall { target } => {
            returning_call(target)
        }
        _ => !b.fragment_succs.is_empty(),
    })
}
