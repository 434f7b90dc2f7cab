//! Dyno stats: what the profiled run executed, counted on the original code and on a new
//! layout, so `rivet optimize --dyno-stats` can show what a layout changes (BOLT's
//! `-dyno-stats`). Block and edge counts say how often each block and branch ran; the layout
//! decides which branches survive: the emitter (`plan_fragment` in `rivet-emit`) drops a `jmp`
//! to the block placed right after it, inverts a conditional branch whose taken target comes
//! next, and adds a `jmp` where a fall-through successor was placed elsewhere. The new-layout
//! numbers follow those rules exactly, so they predict the rewritten binary rather than an
//! idealised one.
//!
//! The original numbers describe the input as it is: every `jmp` of the input runs, no branch
//! is inverted, a block falls into the next address. The identity layout gives the same
//! numbers except for a `jmp` to the very next block, which the emitter drops.
//!
//! What each row counts:
//! - executed instructions: block counts times block lengths, plus jumps the layout adds,
//!   minus jumps it drops and, in rewritten code, minus the alignment `nop`s the emitter
//!   leaves out, plus the bodies of duplicated tails (`--tail-duplication`);
//! - function entries: entries at a function's start;
//! - function calls: `call` instructions executed (direct, indirect, PLT; noreturn calls
//!   included, tail calls not); indirect calls and PLT calls are the subsets through a
//!   register or memory, and to a PLT stub (a PLT call made through the stub's GOT slot, as
//!   `--plt` writes it, is an indirect call: `move_plt_calls_via_got`; a promoted indirect
//!   call that a compare takes is a direct one, and its compares, `je`s and jumps to the join
//!   are counted like any others: `count_promoted_calls`);
//! - tail calls: jumps to other functions (unconditional, and taken conditional ones);
//! - returns;
//! - taken / non-taken conditional branches (a taken conditional tail call is both a taken
//!   conditional branch and a tail call), and their sum, all conditional branches;
//! - unconditional branches: direct `jmp` inside a function or to its split parts, including
//!   the ones the layout adds;
//! - jump table branches and computed goto branches: indirect jumps with known targets;
//! - taken branches: taken conditional + unconditional + jump table + computed goto, the
//!   transfers inside functions that redirect instruction fetch (calls, tail calls and returns
//!   are left out: no block layout changes them);
//! - total branches: all conditional + unconditional + jump table + computed goto.
//!
//! On AArch64 a conditional branch to another fragment or function goes to an island, a `b`
//! after the fragment's code: taken when the branch it stands for is, and going to the
//! target runs the island's `b` too (an unconditional branch, or the tail call itself for a
//! target in another function). Where the rewrite found the whole new text within a
//! conditional branch's reach (`Layout::exits`, `rivet_arch::FragmentExits::Direct`), one to
//! a block of another fragment goes straight there instead, like a branch inside the
//! fragment. One that cannot reach its island, or a block of its own
//! fragment, in its short form (beyond the 32 KiB a short form is trusted to reach:
//! `fragment_size::written_forms`) is the opposite test over a `b`: the test is taken when
//! the branch it stands for is not, and going to the target runs the `b`. These forms come
//! from the size estimate's single round, which can differ from the emitter's only for
//! fragments over 32 KiB.
//!
//! Not counted: the `nop`s of alignment padding that runs (before an aligned block that code
//! falls into, when no jump before it could take the padding); their number depends on the
//! addresses the emitter gives the fragment.
//!
//! BOLT also splits conditional branches into forward and backward ones; in a new layout the
//! direction across fragments depends on where the emitter puts each fragment, which this
//! module does not know, so those rows are left out rather than guessed.

use std::fmt::Write as _;
use std::iter::Sum;
use std::ops::{Add, AddAssign};

use rivet_arch::FragmentExits;
use rivet_elf::{ElfKind, Vaddr};
use rivet_ir::layout::{ChangedExit, FunctionLayout, Layout, PltCalls};
use rivet_ir::{
    BlockExit, BlockId, CallTarget, EdgeKind, FuncId, Function, PlacedNext, Program, Terminator,
    WrittenEnd,
};

use crate::attach::{AttachedProfile, FunctionCounts};
use crate::fragment_size::{WrittenForm, written_forms};

/// Execution statistics of one run, over the whole program or one function.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DynoStats {
    pub instructions: u64,
    pub function_entries: u64,
    pub function_calls: u64,
    pub indirect_calls: u64,
    pub plt_calls: u64,
    pub tail_calls: u64,
    pub returns: u64,
    pub taken_conditional: u64,
    pub nontaken_conditional: u64,
    pub unconditional: u64,
    pub jump_table: u64,
    pub computed_goto: u64,
}

impl DynoStats {
    /// Number of rows `rows` returns.
    pub const ROWS: usize = 15;

    pub fn all_conditional(&self) -> u64 {
        self.taken_conditional
            .saturating_add(self.nontaken_conditional)
    }

    /// Taken conditional, unconditional, jump table and computed goto branches.
    pub fn taken_branches(&self) -> u64 {
        self.taken_conditional
            .saturating_add(self.unconditional)
            .saturating_add(self.jump_table)
            .saturating_add(self.computed_goto)
    }

    /// All conditional, unconditional, jump table and computed goto branches.
    pub fn total_branches(&self) -> u64 {
        self.all_conditional()
            .saturating_add(self.unconditional)
            .saturating_add(self.jump_table)
            .saturating_add(self.computed_goto)
    }

    /// (name, value) of every statistic, derived ones included, in a stable order (the order
    /// of printing; names are BOLT's where BOLT has the same statistic).
    pub fn rows(&self) -> [(&'static str, u64); Self::ROWS] {
        [
            ("executed instructions", self.instructions),
            ("function entries", self.function_entries),
            ("function calls", self.function_calls),
            ("indirect calls", self.indirect_calls),
            ("PLT calls", self.plt_calls),
            ("tail calls", self.tail_calls),
            ("returns", self.returns),
            ("taken conditional branches", self.taken_conditional),
            ("non-taken conditional branches", self.nontaken_conditional),
            ("all conditional branches", self.all_conditional()),
            ("unconditional branches", self.unconditional),
            ("jump table branches", self.jump_table),
            ("computed goto branches", self.computed_goto),
            ("taken branches", self.taken_branches()),
            ("total branches", self.total_branches()),
        ]
    }
}

impl Add for DynoStats {
    type Output = DynoStats;

    fn add(self, o: DynoStats) -> DynoStats {
        DynoStats {
            instructions: self.instructions.saturating_add(o.instructions),
            function_entries: self.function_entries.saturating_add(o.function_entries),
            function_calls: self.function_calls.saturating_add(o.function_calls),
            indirect_calls: self.indirect_calls.saturating_add(o.indirect_calls),
            plt_calls: self.plt_calls.saturating_add(o.plt_calls),
            tail_calls: self.tail_calls.saturating_add(o.tail_calls),
            returns: self.returns.saturating_add(o.returns),
            taken_conditional: self.taken_conditional.saturating_add(o.taken_conditional),
            nontaken_conditional: self
                .nontaken_conditional
                .saturating_add(o.nontaken_conditional),
            unconditional: self.unconditional.saturating_add(o.unconditional),
            jump_table: self.jump_table.saturating_add(o.jump_table),
            computed_goto: self.computed_goto.saturating_add(o.computed_goto),
        }
    }
}

impl AddAssign for DynoStats {
    fn add_assign(&mut self, o: DynoStats) {
        *self = *self + o;
    }
}

impl Sum for DynoStats {
    fn sum<I: Iterator<Item = DynoStats>>(iter: I) -> DynoStats {
        iter.fold(DynoStats::default(), Add::add)
    }
}

/// The statistics of the whole program: of the original code with `layout` None, else of the
/// code `layout` produces (functions it leaves untouched keep their original code). Functions
/// without counts contribute nothing.
pub fn dyno_stats(
    program: &Program,
    profile: &AttachedProfile,
    layout: Option<&Layout>,
) -> DynoStats {
    program
        .functions
        .iter()
        .filter_map(|f| {
            let counts = profile.functions.get(f.id.0 as usize)?.as_ref()?;
            let fl = layout.and_then(|l| Some((l.function(f.id)?, l.exits)));
            Some(function_dyno_stats(f, counts, fl))
        })
        .sum()
}

/// Counts as indirect calls, in `stats` (of `layout`), the PLT calls that the code of
/// `layout` makes through the stubs' GOT slots (`plt_calls`): they still run as often, but no
/// longer go through a stub. Tail calls into stubs stay tail calls.
pub fn move_plt_calls_via_got(
    stats: &mut DynoStats,
    program: &Program,
    profile: &AttachedProfile,
    layout: &Layout,
    plt_calls: PltCalls,
) {
    if layout.in_place || plt_calls == PltCalls::Keep {
        return;
    }
    for f in &program.functions {
        let (Some(Some(counts)), Some(fl)) = (
            profile.functions.get(f.id.0 as usize),
            layout.function(f.id),
        ) else {
            continue;
        };
        let mut fragment_of = vec![None; f.blocks.len()];
        for (k, fragment) in fl.fragments.iter().enumerate() {
            for b in fragment {
                if let Some(slot) = fragment_of.get_mut(b.0 as usize) {
                    *slot = Some(k as u32);
                }
            }
        }
        for call in &f.calls {
            let CallTarget::Plt { .. } = call.target else {
                continue;
            };
            let Some(b) = block_holding(f, call.at) else {
                continue;
            };
            if fragment_of[b.0 as usize].is_some_and(|k| plt_calls.applies_to(k)) {
                let n = block_count(counts, b);
                stats.plt_calls = stats.plt_calls.saturating_sub(n);
                stats.indirect_calls = stats.indirect_calls.saturating_add(n);
            }
        }
    }
}

/// Counts, in `stats` (of `layout`), the code of the indirect calls `layout` promotes
/// (`FunctionLayout::promoted_calls`): a run that a compare takes makes a direct call, so it
/// leaves the indirect calls; every compare and `je` it passes runs (a conditional branch,
/// taken by its callee's runs), as do the load or `lea`s of the compare's form and the `jmp`s
/// to the join (after the fallback and after each direct call but the hottest, which falls
/// into it). Each callee's runs are its count in the site table, the profile's, capped by the
/// runs that reach its compare. Calls in all stay as many: each path makes one. Only the
/// functions `rewritten` says the output rewrote hold the promoted code.
pub fn count_promoted_calls(
    stats: &mut DynoStats,
    program: &Program,
    profile: &AttachedProfile,
    layout: &Layout,
    rewritten: impl Fn(FuncId) -> bool,
) {
    let pic = program.info.kind != ElfKind::Executable;
    for f in &program.functions {
        if !rewritten(f.id) {
            continue;
        }
        let (Some(Some(counts)), Some(fl)) = (
            profile.functions.get(f.id.0 as usize),
            layout.function(f.id),
        ) else {
            continue;
        };
        for p in &fl.promoted_calls {
            let Some(call) = f.insts.get(p.inst as usize) else {
                continue;
            };
            let Some(b) = block_holding(f, call.addr()) else {
                continue;
            };
            let Ok(shape) = call
                .isa()
                .promotion_shape(call, p.targets.len(), pic, p.noreturn)
            else {
                continue;
            };
            let (once, per_compare) = shape.instructions();
            let n = block_count(counts, b);
            let mut remaining = n;
            let mut added = once * n;
            let mut jumps = 0u64;
            for (k, t) in p.targets.iter().enumerate() {
                let taken = t.count.min(remaining);
                added += (per_compare + 1) * remaining;
                stats.taken_conditional = stats.taken_conditional.saturating_add(taken);
                stats.nontaken_conditional =
                    stats.nontaken_conditional.saturating_add(remaining - taken);
                if k > 0 && !p.noreturn {
                    jumps += taken;
                }
                remaining -= taken;
            }
            if !p.noreturn {
                jumps += remaining;
            }
            stats.instructions = stats.instructions.saturating_add(added + jumps);
            stats.unconditional = stats.unconditional.saturating_add(jumps);
            stats.indirect_calls = stats.indirect_calls.saturating_sub(n - remaining);
        }
    }
}

/// Where a block sits, which decides which of its branches the code holds.
#[derive(Clone, Copy)]
enum Placement<'a> {
    /// The input's own code: branches as they are.
    Original,
    /// Emitted by the rewriter at position `pos` of a fragment whose blocks follow each other
    /// as `placed` says; `cond_form` is the form of its conditional branch, if it has one
    /// (`fragment_size::written_forms`).
    Rewritten {
        placed: &'a PlacedNext,
        pos: usize,
        cond_form: WrittenForm,
    },
}

/// The statistics of one function: of its original code with `layout` None, else of the code
/// the emitter writes for `layout`, its conditional exits to other fragments written as the
/// `FragmentExits` (`Layout::exits`) says.
pub fn function_dyno_stats(
    f: &Function,
    counts: &FunctionCounts,
    layout: Option<(&FunctionLayout, FragmentExits)>,
) -> DynoStats {
    let mut s = DynoStats {
        function_entries: counts.entries,
        ..DynoStats::default()
    };
    // Calls do not depend on the layout: each runs as often as the block holding it.
    for call in &f.calls {
        let Some(b) = block_holding(f, call.at) else {
            continue;
        };
        let n = block_count(counts, b);
        s.function_calls = s.function_calls.saturating_add(n);
        match call.target {
            CallTarget::Indirect => s.indirect_calls = s.indirect_calls.saturating_add(n),
            CallTarget::Plt { .. } => s.plt_calls = s.plt_calls.saturating_add(n),
            CallTarget::Function { .. } | CallTarget::Unknown { .. } => {}
        }
    }
    match layout {
        None => {
            for b in 0..f.blocks.len() {
                let exit = f.block_exit(&f.blocks[b]);
                block_stats(
                    f,
                    counts,
                    BlockId(b as u32),
                    Placement::Original,
                    exit,
                    &mut s,
                );
            }
        }
        Some((fl, exits)) => {
            let bypassed = bypassed_counts(f, counts, &fl.changed_exits);
            let counts = bypassed.as_ref().unwrap_or(counts);
            let isa = f.insts.first().map(|i| i.isa());
            for fragment in &fl.fragments {
                let placed = f.placed_next(fragment, true);
                // Only where the forms change what runs: on x86-64 every form of a branch
                // runs alike.
                let forms = match isa {
                    Some(isa) if isa.near_conditional_is_a_pair() => {
                        written_forms(isa, f, fragment, exits)
                    }
                    _ => Vec::new(),
                };
                for (pos, &b) in fragment.iter().enumerate() {
                    if (b.0 as usize) >= f.blocks.len() {
                        continue;
                    }
                    // The first branch a block ends with is its conditional one, if any.
                    let cond_form = forms
                        .get(pos)
                        .and_then(|branches| branches.first())
                        .copied()
                        .unwrap_or(WrittenForm::Short);
                    let placement = Placement::Rewritten {
                        placed: &placed,
                        pos,
                        cond_form,
                    };
                    block_stats(f, counts, b, placement, fl.block_exit(f, b), &mut s);
                    tail_copy_stats(f, counts, fl, b, &mut s);
                }
            }
        }
    }
    s
}

/// The instructions of the tail `--tail-duplication` copied to the end of `b`, if it did: they
/// run each time `b` does. (The copy's exit stands where `b`'s jump was, which `block_stats`
/// counts; the original tail lost these runs in `bypassed_counts`.)
fn tail_copy_stats(
    f: &Function,
    counts: &FunctionCounts,
    fl: &FunctionLayout,
    b: BlockId,
    s: &mut DynoStats,
) {
    let Some(tail) = rivet_ir::layout::duplicated_tail(&fl.changed_exits, b) else {
        return;
    };
    let body = f.kept_insts(f.block(tail)).count().saturating_sub(1) as u64;
    s.instructions = s
        .instructions
        .saturating_add(block_count(counts, b).saturating_mul(body));
}

/// `counts` less the runs that changed exits (`ChangedExit::bypassed`) no longer make
/// through the blocks they go past; `None` when nothing changed.
fn bypassed_counts(
    f: &Function,
    counts: &FunctionCounts,
    changes: &[ChangedExit],
) -> Option<FunctionCounts> {
    if changes.is_empty() {
        return None;
    }
    let mut adjusted = counts.clone();
    for change in changes {
        for &(kind, x) in &change.bypassed {
            let c = edge_count(f, counts, change.block, kind).unwrap_or(0);
            if let Some(n) = adjusted.blocks.get_mut(x.0 as usize) {
                *n = n.saturating_sub(c);
            }
            // The block only goes on to one place: its edge loses the same runs.
            for e in adjusted.edges.get_mut(x.0 as usize).into_iter().flatten() {
                *e = e.saturating_sub(c);
            }
        }
    }
    Some(adjusted)
}

/// The block whose instructions cover `addr`.
fn block_holding(f: &Function, addr: Vaddr) -> Option<BlockId> {
    let pos = f.blocks.partition_point(|b| b.start <= addr);
    let i = pos.checked_sub(1)?;
    let last = f.block_insts(&f.blocks[i]).last()?;
    (addr < last.end()).then_some(BlockId(i as u32))
}

fn block_count(counts: &FunctionCounts, b: BlockId) -> u64 {
    counts.blocks.get(b.0 as usize).copied().unwrap_or(0)
}

/// The count of the first edge of `kind` leaving `b`; None when there is no such edge inside
/// the function or the profile has no edge counts for `b`.
fn edge_count(f: &Function, counts: &FunctionCounts, b: BlockId, kind: EdgeKind) -> Option<u64> {
    let k = f.block(b).succs.iter().position(|e| e.kind == kind)?;
    counts.edges.get(b.0 as usize)?.get(k).copied()
}

/// (taken, fall-through) counts of a conditional block. An edge that leaves the function (a
/// conditional tail call, a branch into a split part) has no count of its own: it gets what
/// the block count leaves over after the other edge. With neither edge known, all of the
/// block's count is taken to fall through, rather than inventing a split.
fn cond_counts(f: &Function, counts: &FunctionCounts, b: BlockId) -> (u64, u64) {
    let n = block_count(counts, b);
    match (
        edge_count(f, counts, b, EdgeKind::Taken),
        edge_count(f, counts, b, EdgeKind::FallThrough),
    ) {
        (Some(t), Some(ft)) => (t, ft),
        (Some(t), None) => (t, n.saturating_sub(t)),
        (None, Some(ft)) => (n.saturating_sub(ft), ft),
        (None, None) => (0, n),
    }
}

/// Adds what block `b` executes, placed as `placement` says, to `s`.
fn block_stats(
    f: &Function,
    counts: &FunctionCounts,
    b: BlockId,
    placement: Placement,
    exit: Option<BlockExit>,
    s: &mut DynoStats,
) {
    let block = f.block(b);
    let n = block_count(counts, b);
    // Rewritten code leaves the input's alignment padding out.
    let len = match placement {
        Placement::Original => u64::from(block.insts.end.saturating_sub(block.insts.start)),
        Placement::Rewritten { .. } => f.kept_insts(block).count() as u64,
    };
    s.instructions = s.instructions.saturating_add(n.saturating_mul(len));
    let Some(exit) = exit else {
        return;
    };
    // What the emitter writes at the end of the block; the original code keeps its branches.
    // The emitter compares targets as blocks of this function, so an address in another
    // function or fragment is never the block placed next.
    let (written, cond_form) = match placement {
        Placement::Original => (None, WrittenForm::Short),
        Placement::Rewritten {
            placed,
            pos,
            cond_form,
        } => (
            exit.written(|addr| placed.is_next(pos, f.block_at(addr))),
            cond_form,
        ),
    };
    match exit {
        // The original falls into the next address; rewritten code needs a `jmp` unless the
        // fall-through block comes next.
        BlockExit::FallThrough { .. } => {
            if let Some(WrittenEnd::Jump { .. }) = written {
                add_jumps(s, n);
            }
        }
        BlockExit::Jump { tail_call, .. } => {
            if written == Some(WrittenEnd::Nothing) {
                // The emitter drops a jump to the next block.
                s.instructions = s.instructions.saturating_sub(n);
            } else if tail_call {
                s.tail_calls = s.tail_calls.saturating_add(n);
            } else {
                s.unconditional = s.unconditional.saturating_add(n);
            }
        }
        BlockExit::Cond { tail_call, .. } => {
            let (taken, fall) = cond_counts(f, counts, b);
            if tail_call {
                s.tail_calls = s.tail_calls.saturating_add(taken);
            }
            // How often the written conditional branch goes to its target, how often not.
            let (to_target, past) = match written {
                // Inverted: the old fall-through becomes the taken side.
                Some(WrittenEnd::Cond { inverted: true, .. }) => (fall, taken),
                // Branch to the taken side, then a `jmp` to the fall-through.
                Some(WrittenEnd::CondThenJump { .. }) => {
                    add_jumps(s, fall);
                    (taken, fall)
                }
                // As it was: the original code, a fall-through placed next, or `loop`,
                // `jrcxz` and `xbegin`, which the emitter refuses (the function keeps its
                // original code).
                _ => (taken, fall),
            };
            let written_cond = matches!(
                written,
                Some(WrittenEnd::Cond { .. } | WrittenEnd::CondThenJump { .. })
            );
            // The `b` to the target of a pair or an island runs each time the target is
            // reached: an unconditional branch, or the tail call itself when the target is
            // another function.
            let far_jumps = |s: &mut DynoStats| {
                if tail_call {
                    s.instructions = s.instructions.saturating_add(to_target);
                } else {
                    add_jumps(s, to_target);
                }
            };
            if cond_form == WrittenForm::Near && written_cond {
                // The opposite test, taken past the `b`.
                s.taken_conditional = s.taken_conditional.saturating_add(past);
                s.nontaken_conditional = s.nontaken_conditional.saturating_add(to_target);
                far_jumps(s);
            } else if cond_form == WrittenForm::Island && written_cond {
                // Taken to the island, whose `b` goes on to the target; falls through past.
                s.taken_conditional = s.taken_conditional.saturating_add(to_target);
                s.nontaken_conditional = s.nontaken_conditional.saturating_add(past);
                far_jumps(s);
            } else {
                s.taken_conditional = s.taken_conditional.saturating_add(to_target);
                s.nontaken_conditional = s.nontaken_conditional.saturating_add(past);
            }
        }
        BlockExit::Copied => match block.terminator {
            Terminator::TailCall { .. } => s.tail_calls = s.tail_calls.saturating_add(n),
            Terminator::JumpTable { .. } => s.jump_table = s.jump_table.saturating_add(n),
            Terminator::ComputedGoto => s.computed_goto = s.computed_goto.saturating_add(n),
            Terminator::Return => s.returns = s.returns.saturating_add(n),
            // Noreturn calls are counted with the calls; traps execute no branch.
            _ => {}
        },
        // The emitter refuses these; they execute no branch the stats know of.
        BlockExit::Malformed { .. } => {}
        // A jump replaced by a copy of the `ret` it went to.
        BlockExit::Return { .. } => s.returns = s.returns.saturating_add(n),
    }
}

/// `n` executions of a `jmp` the layout adds.
fn add_jumps(s: &mut DynoStats, n: u64) {
    s.instructions = s.instructions.saturating_add(n);
    s.unconditional = s.unconditional.saturating_add(n);
}

/// A table of `before` and `after` side by side with the relative change, one row per
/// statistic, columns aligned:
///
/// ```text
///                               before       after    change
/// executed instructions             34          36    +5.88%
/// ```
///
/// The change reads `n/a` when `before` is 0 and `after` is not.
pub fn format_comparison(before: &DynoStats, after: &DynoStats) -> String {
    let rows: Vec<(&str, String, String, String)> = before
        .rows()
        .iter()
        .zip(after.rows())
        .map(|(&(name, b), (_, a))| (name, b.to_string(), a.to_string(), change(b, a)))
        .collect();
    let width = |col: fn(&(&str, String, String, String)) -> usize, header: &str| {
        rows.iter().map(col).max().unwrap_or(0).max(header.len())
    };
    let name_w = width(|r| r.0.len(), "");
    let before_w = width(|r| r.1.len(), "before");
    let after_w = width(|r| r.2.len(), "after");
    let change_w = width(|r| r.3.len(), "change");
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:name_w$}  {:>before_w$}  {:>after_w$}  {:>change_w$}",
        "", "before", "after", "change"
    );
    for (name, b, a, c) in &rows {
        let _ = writeln!(
            out,
            "{name:name_w$}  {b:>before_w$}  {a:>after_w$}  {c:>change_w$}"
        );
    }
    out
}

fn change(before: u64, after: u64) -> String {
    if before == after {
        return "0.00%".into();
    }
    if before == 0 {
        return "n/a".into();
    }
    let pct = (after as f64 - before as f64) / before as f64 * 100.0;
    format!("{pct:+.2}%")
}
