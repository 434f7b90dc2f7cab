//! Indirect jumps: what each one of a function jumps through. A jump table (read here, sized
//! by its range check, its relocations or its index width), a tail call, or a jump left to
//! decide once the function's labels are known (`IndirectJumps::decide_unknown`).
//!
//! The ISA's analysis (`Isa::analyze_indirect_jump`) reads a straight-line window ending at
//! the jump; this module chooses the windows: the one the jump ends, then the paths into the
//! jump's block when that says nothing (a table base hoisted out of a loop, a dispatch shared
//! by several blocks), with the values the definitions reaching the block agree on
//! ([`ReachingWalk`]: every path must bring the same constant; AArch64's `adrp`+`add` is one
//! definition through `RegisterDefinition::Offset`). The jumps of one function depend on each
//! other (a table's targets are ways into other blocks), so they are analysed in rounds,
//! [`Worklist`]'s order, and what the reaching definitions gave is checked again once every
//! table is known.

use rivet_arch::{Flow, IndirectJump, Inst, Isa, RegisterDefinition};
use rivet_elf::eh_frame::{Cfa, CfiRow};
use rivet_elf::{Vaddr, VaddrRange};
use rivet_ir::*;

use crate::cfg::{Builder, Context, Incoming, IndirectKind, Labels, inst_index};

/// Whether the stack frame is still there at an indirect jump, which rules out a tail call.
/// The unwind rows of an FDE are read once, at the first jump in it that needs them.
pub(crate) struct FrameCheck<'c, 'a> {
    pub(crate) ctx: &'c Context<'a>,
    pub(crate) rows: Vec<CfiRow>,
}

impl FrameCheck<'_, '_> {
    pub(crate) fn live_at(&mut self, at: Vaddr) -> bool {
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
    /// Instructions entered from outside the function's own branches and jumps, sorted.
    entered_from_outside: Vec<usize>,
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
        /// Set when the form came from the definitions reaching the jump's block: the block
        /// and the values found, checked again once all jumps are resolved.
        via_reaching: Option<ReachingValues>,
    },
}

/// Values found to reach the start of a dispatch block (an instruction index) on the paths
/// known when its jump was analysed.
struct ReachingValues {
    block_start: usize,
    values: Vec<(rivet_arch::RegisterId, u64)>,
}

/// The indirect jumps of a function and what they were found to be.
pub(crate) struct IndirectJumps {
    /// (instruction index, kind), in instruction order once `decide_unknown` ran.
    pub(crate) resolved: Vec<(usize, IndirectKind)>,
    /// Jumps no analysis explained: tail calls or computed gotos, decided with the labels.
    unknown: Vec<usize>,
    /// Jumps resolved from the branches into their block, with the block's start.
    via_paths: Vec<(usize, Vaddr)>,
}

impl IndirectJumps {
    /// Analyses every indirect jump of `f` (see [`Worklist`] for the order).
    /// `entered_from_outside` lists (sorted) the instructions entered otherwise than by a
    /// branch or jump of `f`: secondary entries, landing pads, targets of sibling fragments.
    pub(crate) fn resolve(
        b: &mut Builder,
        f: &Function,
        frame: &mut FrameCheck,
        entered_from_outside: Vec<usize>,
    ) -> IndirectJumps {
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
            entered_from_outside,
        };
        let mut reaching_checks: Vec<(usize, ReachingValues)> = Vec::new();
        while let Some((i, reach)) = worklist.next(jumps.resolved.len(), &mut facts) {
            match jumps.analyze(b.ctx, f, i, reach, &mut facts) {
                JumpAnalysis::NeedsPaths => worklist.second_pass.push((i, true)),
                JumpAnalysis::Found {
                    form,
                    assumed_targets,
                    via_paths,
                    via_reaching,
                } => {
                    if let Some(head) = via_paths {
                        jumps.via_paths.push((i, head));
                    }
                    match Self::classify(b, f, frame, i, reach, form, &assumed_targets) {
                        Outcome::Resolved(kind) => {
                            jumps.resolved.push((i, kind));
                            reaching_checks.extend(via_reaching.map(|v| (i, v)));
                        }
                        Outcome::Waiting => worklist.waiting.push(i),
                        Outcome::Unknown => jumps.unknown.push(i),
                        Outcome::Failed => {}
                    }
                }
            }
        }
        jumps.unknown.extend(worklist.waiting);
        jumps.check_reaching_values(b, f, &facts, &reaching_checks);
        jumps
    }

    /// The walks that found a dispatch's values knew only the tables resolved by then, and
    /// took a block no known branch enters for one that only the unresolved jumps enter.
    /// With every table known, each value must still be what reaches its block: over the
    /// branches and every table's entries, with what is left unresolved (tail calls and
    /// computed gotos) taken to enter the blocks no branch enters and every stored label.
    fn check_reaching_values(
        &self,
        b: &mut Builder,
        f: &Function,
        facts: &CodeFacts,
        checks: &[(usize, ReachingValues)],
    ) {
        if checks.is_empty() {
            return;
        }
        let insts = &f.insts;
        let mut preds = facts.direct_preds.clone();
        for (jump, kind) in &self.resolved {
            if let IndirectKind::Table(t) = kind {
                preds.extend(
                    t.entries
                        .iter()
                        .filter_map(|e| inst_index(insts, *e))
                        .map(|target| (target, *jump)),
                );
            }
        }
        preds.sort_unstable();
        preds.dedup();
        let anchors = self.table_anchors();
        let mut labels: Vec<usize> = b
            .ctx
            .refs_into(f.range)
            .iter()
            .filter(|r| !anchors.contains(&r.target))
            .filter_map(|r| inst_index(insts, r.target))
            .collect();
        labels.sort_unstable();
        labels.dedup();
        let walk = ReachingWalk {
            ctx: b.ctx,
            insts,
            preds: &preds,
            unresolved_jumps: &self.unknown,
            entered_from_outside: &facts.entered_from_outside,
            labels: &labels,
        };
        for (jump, found) in checks {
            let holds = found
                .values
                .iter()
                .all(|&(r, c)| walk.constant(found.block_start, r, None, 0) == Some(c));
            if !holds {
                b.fail(SkipReason::UnresolvedIndirectJump {
                    at: insts[*jump].addr(),
                });
            }
        }
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
                // `adr x8, .` (clang's -O0 AArch64 switch: the anchor of the table is the
                // instruction itself) names its own address for the jump the window ends
                // with; a table found that way must not lead back to it (`classify`).
                if r.site == r.target {
                    continue;
                }
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
        // What is known to hold at the dispatch block's start, for the paths into it below
        // (a range check in a predecessor, a base the dispatch reads from before the loop).
        let mut known: Vec<(rivet_arch::RegisterId, u64)> = Vec::new();
        let mut via_reaching = None;
        if form == IndirectJump::Unknown {
            let constants = facts
                .constants
                .get_or_insert_with(|| ctx.isa.register_constants(insts));
            if !constants.is_empty() {
                form = ctx.isa.analyze_indirect_jump(&insts[j..=i], &[], constants);
                known.clone_from(constants);
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
            let mut walk = ReachingWalk {
                ctx,
                insts,
                preds,
                unresolved_jumps: &unresolved,
                entered_from_outside: &facts.entered_from_outside,
                labels: &[],
            };
            let hints: Vec<_> = live_in
                .iter()
                .filter_map(|&r| walk.constant(block_start, r, None, 0).map(|c| (r, c)))
                .collect();
            if !hints.is_empty() {
                form = ctx.isa.analyze_indirect_jump(window, &[], &hints);
                // First: what the paths show at this block wins over the function-wide view
                // (both hold; the ISA's analysis takes the first it finds).
                known.splice(0..0, hints.iter().copied());
                via_reaching = Some(ReachingValues {
                    block_start,
                    values: hints,
                });
            } else if unresolved.len() > 1 {
                // Two loops, each with its table base in a register the other reuses, wait on
                // each other: the blocks only a table enters are taken for both jumps' targets,
                // and each walk runs into the other loop's values. Assumed instead to be this
                // jump's own targets, which its table, once read, must then show they are.
                let mut entered_by_table = Vec::new();
                let only_this_jump = [i];
                walk.unresolved_jumps = &only_this_jump;
                let own: Vec<_> = live_in
                    .iter()
                    .filter_map(|&r| {
                        let found = Some(&mut entered_by_table);
                        walk.constant(block_start, r, found, 0).map(|c| (r, c))
                    })
                    .collect();
                if !own.is_empty() {
                    let assumed = ctx.isa.analyze_indirect_jump(window, &[], &own);
                    // A range check or a narrow index (`and $3`) bounds the table.
                    let bounded = match assumed {
                        IndirectJump::AbsoluteTable {
                            bound, index_bits, ..
                        }
                        | IndirectJump::RelativeTable {
                            bound, index_bits, ..
                        } => bound.is_some() || index_bits <= MAX_INDEX_BITS,
                        IndirectJump::ScaledTable { bound, .. } => bound.is_some(),
                        _ => false,
                    };
                    if bounded {
                        form = assumed;
                        via_reaching = Some(ReachingValues {
                            block_start,
                            values: own,
                        });
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
                | IndirectJump::ScaledTable { bound: None, .. }
        ) {
            let paths = DispatchPaths {
                cut_by_length: j > 0 && falls_into_next(ctx, &insts[j - 1]) && !merge[j],
                merge,
                known: if ctx.isa.predecessor_paths_use_known_values() {
                    &known
                } else {
                    &[]
                },
            };
            if let Some((bounded, head)) = dispatch_from_predecessors(ctx, insts, j, i, form, paths)
            {
                form = bounded;
                via_paths = Some(head);
            }
        }
        JumpAnalysis::Found {
            form,
            assumed_targets,
            via_paths,
            via_reaching,
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
            IndirectJump::ScaledTable {
                table: t,
                anchor,
                entry_size,
                signed,
                shift,
                bound,
            } => {
                let kind = JumpTableKind::Scaled {
                    anchor,
                    signed,
                    shift,
                };
                let index = TableIndex {
                    bound,
                    index_bits: 64,
                };
                match read_table(b, t, entry_size, kind, index, frame) {
                    // The window ran through labels that take their own address (`adr x8, .`,
                    // see `analyze`): only sound if no entry leads back into them.
                    Outcome::Resolved(IndirectKind::Table(table))
                        if ctx
                            .refs_into(f.range)
                            .iter()
                            .any(|r| r.site == r.target && table.entries.contains(&r.target)) =>
                    {
                        Outcome::Unknown
                    }
                    other => other,
                }
            }
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
    pub(crate) fn reject_paths_entered_otherwise(
        &self,
        b: &mut Builder,
        f: &Function,
        incoming: &[Incoming],
    ) {
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
    /// The code labels that scaled tables count from (AArch64's `adr` anchors): the
    /// instruction computing one takes its address only for the dispatch.
    pub(crate) fn table_anchors(&self) -> Vec<Vaddr> {
        self.resolved
            .iter()
            .filter_map(|(_, k)| match k {
                IndirectKind::Table(JumpTable {
                    kind: JumpTableKind::Scaled { anchor, .. },
                    ..
                }) => Some(*anchor),
                _ => None,
            })
            .collect()
    }

    pub(crate) fn table_spans(&self) -> Vec<VaddrRange> {
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
    pub(crate) fn decide_unknown(
        &mut self,
        b: &mut Builder,
        f: &Function,
        labels: &Labels,
        frame: &mut FrameCheck,
    ) {
        let ctx = b.ctx;
        // Labels that something may jump to: table anchors are not.
        let goto_labels = labels
            .at
            .iter()
            .filter(|k| labels.anchors.binary_search(k).is_err())
            .count();
        for i in std::mem::take(&mut self.unknown) {
            let at = f.insts[i].addr();
            if labels.unexplained_anchor.is_some() {
                // A switch whose table was not found: this jump may be its dispatch, whose
                // targets only the table knows. Neither a goto nor a tail call.
                b.fail(SkipReason::UnresolvedIndirectJump { at });
            } else if goto_labels == 0 {
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

/// How many definitions of the form "another register plus a constant" (AArch64's `add` after
/// an `adrp`, a copy) one value may go through: an address takes one or two; a longer chain
/// is a computation, and a chain that loops (`add x0, x0, #8` in a loop) is cut here.
const MAX_OFFSET_CHAIN: u8 = 4;

/// A function and the ways between its instructions, walked backwards for the definitions
/// that reach an instruction ([`ReachingWalk::constant`]).
struct ReachingWalk<'w, 'a> {
    ctx: &'w Context<'a>,
    insts: &'w [Inst],
    /// (target, source) instruction indices of the branches and known table entries, sorted.
    preds: &'w [(usize, usize)],
    /// Where the blocks entered by no known way come from: the jumps not yet understood.
    unresolved_jumps: &'w [usize],
    /// Instructions entered from outside (see [`IndirectJumps::resolve`]), sorted: what a
    /// register holds there is not known here (the unwinder restores a landing pad's
    /// registers as they were at the call that threw).
    entered_from_outside: &'w [usize],
    /// Stored labels (sorted), which the unresolved jumps may enter besides the ways the
    /// branches show.
    labels: &'w [usize],
}

impl ReachingWalk<'_, '_> {
    fn branch_sources(&self, pos: usize) -> impl Iterator<Item = usize> + '_ {
        let lo = self.preds.partition_point(|p| p.0 < pos);
        let hi = self.preds.partition_point(|p| p.0 <= pos);
        self.preds[lo..hi].iter().map(|p| p.1)
    }

    /// The constant register `r` holds on entry to instruction `start` when every path into
    /// it (through fall-throughs, direct branches and the entries of the tables found so far)
    /// last defines `r` with that same constant. `None` when some path reaches the function
    /// entry or another way in from outside, a non-constant definition, or, for a block no
    /// known branch enters, an unresolved jump that brings another value (such blocks are
    /// taken to be entered by those jumps, and noted in `entered_by_table`). `chain` counts
    /// the offset definitions this question is part of (see [`MAX_OFFSET_CHAIN`]).
    fn constant(
        &self,
        start: usize,
        r: rivet_arch::RegisterId,
        mut entered_by_table: Option<&mut Vec<usize>>,
        chain: u8,
    ) -> Option<u64> {
        let (ctx, insts) = (self.ctx, self.insts);
        let mut result = None;
        let mut visited = std::collections::HashSet::new();
        let mut work = vec![start];
        while let Some(pos) = work.pop() {
            if !visited.insert(pos) {
                continue;
            }
            if visited.len() > 4096
                || pos == 0
                || self.entered_from_outside.binary_search(&pos).is_ok()
            {
                return None;
            }
            let mut sources: Vec<usize> = self.branch_sources(pos).collect();
            if falls_into_next(ctx, &insts[pos - 1]) {
                sources.push(pos - 1);
            }
            if sources.is_empty() && (insts[pos].is_nop() || insts[pos].is_fill_trap()) {
                // Alignment padding after a jump or a return: nothing runs it. The code after
                // it falls out of it only in appearance, so no value comes in this way.
                // (Compilers put a label after the padding, never before it.)
                continue;
            }
            if sources.is_empty() {
                // Entered by no direct branch: a target of this function's indirect jumps
                // (labels cannot be jumped to from other functions), so the value is theirs.
                if let Some(found) = entered_by_table.as_deref_mut() {
                    found.push(pos);
                }
                sources = self.unresolved_jumps.to_vec();
                if sources.is_empty() {
                    return None;
                }
            } else if self.labels.binary_search(&pos).is_ok() {
                sources.extend_from_slice(self.unresolved_jumps);
            }
            for p in sources {
                let mut k = p;
                loop {
                    let value = match insts[k].register_definition(r) {
                        RegisterDefinition::Unchanged => None,
                        RegisterDefinition::Constant(c) => Some(c),
                        // What reaches the source register at this instruction, on every
                        // path into it: an `adrp` on one path and something else on another
                        // is no address.
                        RegisterDefinition::Offset { from, add } if chain < MAX_OFFSET_CHAIN => {
                            let found = entered_by_table.as_deref_mut();
                            Some(self.constant(k, from, found, chain + 1)?.wrapping_add(add))
                        }
                        RegisterDefinition::Offset { .. } | RegisterDefinition::Other => {
                            return None;
                        }
                    };
                    if let Some(c) = value {
                        if result.is_some_and(|x| x != c) {
                            return None;
                        }
                        result = Some(c);
                        break;
                    }
                    if k == 0 {
                        return None;
                    }
                    if self.branch_sources(k).next().is_some()
                        || !falls_into_next(ctx, &insts[k - 1])
                        || self.entered_from_outside.binary_search(&k).is_ok()
                        || self.labels.binary_search(&k).is_ok()
                    {
                        work.push(k);
                        break;
                    }
                    k -= 1;
                }
            }
        }
        result
    }
}

/// What [`dispatch_from_predecessors`] is told about the paths into a dispatch block.
struct DispatchPaths<'p> {
    /// The dispatch's own window starts where the code before falls in, at no merge point:
    /// it was cut by its length, and the paths into it are not known.
    cut_by_length: bool,
    /// Per instruction, whether other paths merge in there (a branch target, a stored
    /// label): a predecessor's window stops there.
    merge: &'p [bool],
    /// Values that hold at the dispatch block's start on every path into it.
    known: &'p [(rivet_arch::RegisterId, u64)],
}

/// When the dispatch block (the window `start..=jump`) is entered by branches, and perhaps by
/// the instruction before falling in, looks at every path into it: each predecessor's
/// straight-line window followed by the dispatch window must read the same table. With a range check on every path the result is the largest bound (an index valid
/// on some path). Without one on every path, the widest index width over the paths, if that
/// is narrower than what the dispatch block alone shows. `unbounded` is what the dispatch
/// block alone shows: a table without a bound, or nothing known (python3.11's interpreter
/// loads the opcode's handler in each of its cases and jumps to one shared `jmp *%rax`).
/// A block whose address is stored in data (a computed goto's label) has paths in that no
/// branch shows: none is assumed. `known` holds at the dispatch block's start on every path
/// into it (function-wide constants, reaching definitions), so it holds on each path's
/// start for what the path itself does not define. Returns the dispatch and the block's
/// start, for the caller to check once it knows every table and every way in from sibling
/// fragments.
fn dispatch_from_predecessors(
    ctx: &Context,
    insts: &[Inst],
    start: usize,
    jump: usize,
    unbounded: IndirectJump,
    paths: DispatchPaths,
) -> Option<(IndirectJump, Vaddr)> {
    let DispatchPaths {
        cut_by_length,
        merge,
        known,
    } = paths;
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
        IndirectJump::ScaledTable {
            table,
            anchor,
            bound,
            ..
        } => Some(((table, Some(anchor)), bound.map(|b| b.entries), 64)),
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
        // Back to where other paths merge in, as for the dispatch's own window: a value
        // from before a loop head may be another on the loop's back edge.
        let mut k = p;
        while k > 0 && p - k < 48 && falls_into_next(ctx, &insts[k - 1]) && !merge[k] {
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
        let found = ctx.isa.analyze_indirect_jump(&path, taken, known);
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
pub(crate) const MAX_INDEX_BITS: u8 = 16;

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
            (JumpTableKind::Scaled { .. }, _) => kind.scaled_target(ctx.elf.bytes_at(at, es)?),
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
                // Differences the assembler resolved: never relocated.
                JumpTableKind::Scaled { .. } => false,
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
pub(crate) fn frame_live_at(isa: Isa, rows: &[CfiRow], at: Vaddr) -> bool {
    let at_entry = Cfa::RegisterOffset {
        register: isa.dwarf_stack_pointer(),
        offset: isa.entry_frame().cfa_offset,
    };
    rows.iter()
        .find(|r| r.range.contains(at))
        .is_some_and(|r| r.cfa != at_entry)
}
