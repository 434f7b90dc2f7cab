//! Per-function disassembly and control-flow graph construction.
//!
//! Phase A (`decode`) decodes a function linearly (gcc and clang put no data in x86-64 text,
//! and any byte that fails to decode makes the function skipped), parses its LSDA, and reports
//! what the function says about others: branches into them, landing pads in sibling fragments,
//! code addresses its instructions compute. Phase B (`build`) runs once those facts are merged
//! program-wide and cuts the instructions into blocks with resolved successors (what its
//! indirect jumps are is `indirect`'s job). Phase B can be re-run when the set of noreturn
//! functions grows.

use rivet_arch::{Flow, Inst, Isa};
use rivet_elf::eh_frame::{CfiRow, EhFrameTable};
use rivet_elf::relocs::StaticReloc;
use rivet_elf::{ElfFile, ElfKind, Vaddr, VaddrRange};
use rivet_ir::*;

use crate::indirect::{FrameCheck, IndirectJumps};
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
    pub(crate) fn unwind_rows(&self, addr: Vaddr) -> Vec<CfiRow> {
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

    pub(crate) fn relocs_in(&self, range: VaddrRange) -> &[StaticReloc] {
        let lo = self.static_relocs.partition_point(|r| r.site < range.start);
        let hi = self.static_relocs.partition_point(|r| r.site < range.end);
        &self.static_relocs[lo..hi]
    }

    pub(crate) fn refs_into(&self, range: VaddrRange) -> &[CodeRef] {
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
    // Addresses built in two instructions (AArch64's ADRP+ADD) take labels as well.
    for (site, target) in Isa::of(elf).address_pairs(&f.insts) {
        if elf.is_code_address(target) {
            out.code_refs.push(CodeRef {
                target,
                site,
                exact: true,
            });
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

pub(crate) fn inst_index(insts: &[Inst], addr: Vaddr) -> Option<usize> {
    insts.binary_search_by_key(&addr, |i| i.addr()).ok()
}

pub(crate) struct Builder<'c, 'a> {
    pub(crate) ctx: &'c Context<'a>,
    pub(crate) id: FuncId,
    pub(crate) range: VaddrRange,
    pub(crate) skip: Option<SkipReason>,
}

impl Builder<'_, '_> {
    pub(crate) fn fail(&mut self, reason: SkipReason) {
        self.skip.get_or_insert(reason);
    }
}

pub(crate) enum IndirectKind {
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
    let mut jumps = IndirectJumps::resolve(
        &mut b,
        f,
        &mut frame,
        entered_from_outside(f, decoded, incoming),
    );
    jumps.reject_paths_entered_otherwise(&mut b, f, incoming);
    let labels = Labels::find(
        &mut b,
        f,
        &mut marks,
        &jumps.table_spans(),
        &jumps.table_anchors(),
    );
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

/// The instructions of `f` (indices, sorted) that something other than its own branches and
/// jumps enters: secondary entries, what sibling fragments jump to, landing pads (of its own
/// call sites and of its fragments'). The entry itself is instruction 0.
fn entered_from_outside(f: &Function, decoded: &Decoded, incoming: &[Incoming]) -> Vec<usize> {
    let own_landing_pads = decoded.call_sites.iter().filter_map(|&(_, lp)| lp);
    let from_fragments = incoming.iter().map(|inc| {
        let (Incoming::Fragment(a) | Incoming::LandingPad(a)) = *inc;
        a
    });
    let mut at: Vec<usize> = f
        .secondary_entries
        .iter()
        .copied()
        .chain(own_landing_pads)
        .chain(from_fragments)
        .filter_map(|a| inst_index(&f.insts, a))
        .collect();
    at.sort_unstable();
    at.dedup();
    at
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

/// For each instruction, whether it lies inside an exclusive-monitor sequence: from an
/// exclusive load up to the store or `clrex` that ends it, in address order (compilers and
/// libgcc's outline atomics keep the loop `ldaxr; cmp; b.ne; stlxr; cbnz` contiguous). A
/// load whose sequence never ends in the function marks everything after it.
fn exclusive_sequences(insts: &[Inst]) -> Vec<bool> {
    let mut inside = vec![false; insts.len()];
    let mut open = false;
    for (i, inst) in insts.iter().enumerate() {
        if inst.is_exclusive_load() {
            open = true;
        }
        inside[i] = open;
        if inst.is_exclusive_end() {
            open = false;
        }
    }
    inside
}

/// The function's address-taken labels: stored references into its interior.
pub(crate) struct Labels {
    /// Instruction indices, sorted.
    pub(crate) at: Vec<usize>,
    /// Some reference was only approximate (no relocation says exactly where it points).
    pub(crate) inexact: bool,
    /// PC-relative references from data point into the function and no table explains them.
    pub(crate) relative_into_function: bool,
    /// Labels taken only as switch-table anchors (`Isa::is_table_anchor`): where a table's
    /// distances count from, never jumped to through a register.
    pub(crate) anchors: Vec<usize>,
    /// A table anchor that no recognized table counts from: this function has a switch whose
    /// table was not found, so its unknown jumps are that dispatch, not gotos or tail calls.
    pub(crate) unexplained_anchor: Option<Vaddr>,
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
        table_anchors: &[Vaddr],
    ) -> Labels {
        let ctx = b.ctx;
        // A reference stored in a recognized table, or the `adr` of a table's anchor in the
        // function itself, is the dispatch's own doing: no unknown way in.
        let explained = |site: Vaddr, target: Vaddr| {
            table_spans.iter().any(|s| s.contains(site))
                || (table_anchors.contains(&target) && f.range.contains(site))
        };
        let mut labels: Vec<usize> = Vec::new();
        let mut inexact_labels = false;
        // Labels with a reference other than a table anchor's `adr`.
        let mut taken_otherwise: Vec<usize> = Vec::new();
        let mut anchors: Vec<usize> = Vec::new();
        let mut unexplained_anchor = None;
        for r in ctx.refs_into(f.range) {
            let anchor_site = f.range.contains(r.site)
                && inst_index(&f.insts, r.site)
                    .is_some_and(|k| ctx.isa.is_table_anchor(&f.insts, k));
            if let Some(i) = inst_index(&f.insts, r.target) {
                if anchor_site {
                    anchors.push(i);
                    if !table_anchors.contains(&r.target) {
                        unexplained_anchor.get_or_insert(r.target);
                    }
                } else {
                    taken_otherwise.push(i);
                }
            }
            if r.target == f.range.start {
                continue;
            }
            match inst_index(&f.insts, r.target) {
                Some(i) => {
                    marks.leader[i] = true;
                    if !explained(r.site, r.target) {
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
                .any(|r| !explained(r.1, r.0) && !ctx.in_foreign_table(f.id, r.1))
        };
        taken_otherwise.sort_unstable();
        anchors.sort_unstable();
        anchors.dedup();
        anchors.retain(|i| taken_otherwise.binary_search(i).is_err());
        Labels {
            at: labels,
            inexact: inexact_labels,
            relative_into_function,
            anchors,
            unexplained_anchor,
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
        let exclusive = exclusive_sequences(insts);
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
                in_exclusive_sequence: exclusive[first..end].iter().any(|&x| x),
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

/// The callees that `f`, as built, shows to return (sorted, each once): a direct call to one
/// followed by code that only the call's return can reach. The next instruction is in
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
///
/// Computed whenever a function is built, while its instructions are at hand: discovery may
/// set them aside once it is (`Instructions::SetAside`).
pub fn callees_returned_to(f: &Function) -> Vec<Vaddr> {
    if f.blocks.is_empty() {
        return Vec::new();
    }
    let mut callees: Vec<Vaddr> = f
        .insts
        .windows(2)
        .filter_map(|pair| match pair[0].flow() {
            Flow::Call { target }
                if !pair[1].is_padding_nop()
                    && !pair[1].is_fill_trap()
                    && f.block_at(pair[1].addr()).is_none() =>
            {
                Some(target)
            }
            _ => None,
        })
        .collect();
    callees.sort_unstable();
    callees.dedup();
    callees
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
