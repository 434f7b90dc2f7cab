//! Verification of a rewritten binary against its input (`rewrite --verify`, `rivet verify`).
//!
//! For every block of every rewritten function, the output must hold the same instructions
//! at the block's new address (PC-relative and absolute code operands translated through the
//! address map), and end with control flow equivalent to the input's: the same successors,
//! translated, whether the emitter kept, inverted, re-created or dropped the branch. Every
//! stored reference to moved code (data pointers, dynamic relocations, jump tables, fields in
//! code that stayed) must hold the translated target. Every branch, call and code address of
//! code that stays whose target moved must reach the new copy, or land on original bytes that
//! are still there (`Checker::check_code_that_stays`).
//!
//! The address map comes from the rewrite itself, or from the `.rivet.bat` table of an output
//! file; the checks decode the output's bytes independently of how the emitter produced them.

use std::collections::HashSet;

#[path = "verify_taildup.rs"]
mod taildup;

use rivet_arch::{Flow, Inst};
use rivet_discover::{DiscoverOptions, discover};
use rivet_elf::lines::{LineTable, SourcePosition};
use rivet_elf::{ElfFile, Vaddr};
use rivet_emit::code::{AddressMap, ViaSlots};
use rivet_emit::references::{RefField, collect};
use rivet_emit::rewrite::RewriteOutput;
use rivet_ir::{Function, Program, Terminator};

/// What was checked.
#[derive(Debug, Default)]
pub struct VerifyReport {
    pub functions: usize,
    pub blocks: usize,
    pub instructions: usize,
    pub references: usize,
    /// Instructions whose source line was compared.
    pub lines: usize,
    /// Folded pairs (`--icf`) checked identical.
    pub folds: usize,
    /// Block ends a peephole changed (`--peepholes`, `--simplify-conditional-tail-calls`),
    /// each checked to do what the input's branch did.
    pub peepholes: usize,
    /// Indirect calls written as compares and direct calls (`--indirect-call-promotion`),
    /// each checked to call what the input's call did.
    pub promoted_calls: usize,
    /// Jumps replaced by a copy of their target (`--tail-duplication`), each copy checked
    /// against the original block.
    pub tail_copies: usize,
}

struct Checker<'a> {
    program: &'a Program,
    out: &'a ElfFile<'a>,
    input: &'a ElfFile<'a>,
    map: &'a AddressMap,
    new_block_starts: HashSet<Vaddr>,
    /// The PLT stubs' slots, for calls `--plt` made through them.
    via_slots: ViaSlots,
    /// The output asks for BTI: every veneer must land on a pad.
    guarded: bool,
    /// Functions folded into another (`--icf`), by `FuncId`: their old bodies are dead code.
    folded: Vec<bool>,
    /// The new address of every function's entry (for promoted calls), built when needed.
    new_entries: std::sync::OnceLock<HashSet<Vaddr>>,
    /// Unwind tables, read when a tail copy is checked (`verify_taildup.rs`).
    taildup_frames: std::sync::OnceLock<taildup::Frames<'a>>,
}

impl Checker<'_> {
    fn tr(&self, addr: Vaddr) -> Result<Vaddr, String> {
        self.map
            .translate(self.program, addr)
            .ok_or_else(|| format!("{addr} has no new address"))
    }

    fn decode_at(&self, at: Vaddr, max: u64) -> Result<Vec<Inst>, String> {
        // Read what exists, up to `max` bytes, from the section holding `at`.
        let section = self
            .out
            .section_containing(at)
            .ok_or_else(|| format!("{at} is not in any section of the output"))?;
        let avail = section.range().end - at;
        let bytes = self
            .out
            .bytes_at(at, max.min(avail))
            .ok_or_else(|| format!("cannot read the output at {at}"))?;
        Ok(self.program.info.isa.decode_all(bytes, at))
    }

    /// Whether execution at `at` arrives at `want`: `at` is `want`, or only `nop`s (alignment
    /// padding, at most 255 bytes) lie between them.
    fn reaches(&self, at: Vaddr, want: Vaddr) -> Result<bool, String> {
        if at == want {
            return Ok(true);
        }
        if want < at || want - at > 255 {
            return Ok(false);
        }
        let mut next = at;
        for inst in self.decode_at(at, want - at)? {
            if !inst.is_nop() {
                return Ok(false);
            }
            next = inst.end();
        }
        Ok(next == want)
    }

    /// Whether `new` is `old`, a direct call or jump into a PLT stub, made through the stub's
    /// GOT slot instead (`rivet optimize --plt`).
    fn goes_through_slot(&self, old: &Inst, new: &Inst) -> bool {
        matches!(
            (old.flow(), new.flow()),
            (Flow::Call { .. }, Flow::IndirectCall) | (Flow::Jump { .. }, Flow::IndirectJump)
        ) && self
            .via_slots
            .slot_for(old)
            .is_some_and(|slot| new.indirect_slot() == Some(slot))
    }

    /// `nop; adr` (lld's relaxed address pair) written as the two words that compute the
    /// same (translated) address from the new place: `first` and `second`.
    fn same_widened_address(
        &self,
        adr: &Inst,
        first: &Inst,
        second: Option<&Inst>,
    ) -> Result<(), String> {
        let target = adr
            .pc_relative_target()
            .ok_or_else(|| format!("{}: no address", adr.addr()))?;
        let want = self.tr(target)?;
        let expected = adr
            .isa()
            .widen_address(adr, first.addr(), want)
            .ok_or_else(|| format!("{}: `{}` cannot be widened", adr.addr(), adr.to_asm()))?;
        let expected = adr.isa().decode_all(&expected, first.addr());
        let got = [Some(first), second];
        let same = expected.len() == 2
            && expected
                .iter()
                .zip(got)
                .all(|(e, g)| g.is_some_and(|g| g.to_asm() == e.to_asm()));
        if same {
            Ok(())
        } else {
            Err(format!(
                "{}: `nop; {}` became `{}; {}` at {}, which does not build {want}",
                adr.addr(),
                adr.to_asm(),
                first.to_asm(),
                second.map_or("nothing".into(), Inst::to_asm),
                first.addr()
            ))
        }
    }

    /// Whether a conditional branch to `got` goes to `want`: directly, or through an island
    /// (AArch64: a `b` after the fragment's code, which may itself go through a veneer).
    fn branches_to(&self, got: Vaddr, want: Vaddr) -> Result<bool, String> {
        if got == want {
            return Ok(true);
        }
        if !self.program.info.isa.near_conditional_is_a_pair() {
            return Ok(false);
        }
        Ok(matches!(
            self.decode_at(got, 4)?.first().map(Inst::flow),
            Some(Flow::Jump { target }) if self.lands_at(target, want)
        ))
    }

    /// Whether a branch to `got` goes to `want`: directly, or through a veneer (AArch64).
    fn lands_at(&self, got: Vaddr, want: Vaddr) -> bool {
        got == want || self.veneer_reaches(got, want)
    }

    /// Whether `at` holds a veneer that leads to `want`: straight there, or through the
    /// landing pad it jumps to. Where BTI guards the output, the veneer's jump must land on a
    /// pad: `want` itself starts with one, or the landing pad does.
    fn veneer_reaches(&self, at: Vaddr, want: Vaddr) -> bool {
        let isa = self.program.info.isa;
        let (Some(size), Some(pad_size)) = (isa.veneer_size(), isa.landing_pad_size()) else {
            return false;
        };
        let Some(destination) = self
            .out
            .bytes_at(at, size)
            .and_then(|bytes| isa.veneer_target(bytes, at))
        else {
            return false;
        };
        let through_pad = self
            .out
            .bytes_at(destination, pad_size)
            .and_then(|bytes| isa.landing_pad_target(bytes, destination));
        if through_pad == Some(want) {
            return true;
        }
        destination == want
            && (!self.guarded
                || self
                    .out
                    .bytes_at(destination, 4)
                    .is_some_and(|bytes| isa.lands_veneer(bytes)))
    }

    fn same_instruction(&self, old: &Inst, new: &Inst) -> Result<(), String> {
        if self.goes_through_slot(old, new) {
            return Ok(());
        }
        let fail = |why: &str| {
            Err(format!(
                "{}: `{}` became `{}` at {} ({why})",
                old.addr(),
                old.to_asm(),
                new.to_asm(),
                new.addr()
            ))
        };
        if old.len() != new.len() || old.mnemonic_name() != new.mnemonic_name() {
            return fail("different instruction");
        }
        if let Some(target) = old.pc_relative_target() {
            let want = self.tr(target)?;
            let got = new.pc_relative_target();
            // A call or jump that cannot reach goes through a veneer that must lead there.
            let through_veneer = got.is_some_and(|veneer| self.veneer_reaches(veneer, want));
            // A call or jump of a linker veneer may go straight to where the veneer leads.
            let past_veneer = matches!(old.flow(), Flow::Call { .. } | Flow::Jump { .. })
                && self
                    .program
                    .forwarded_destination(target)
                    .and_then(|d| self.map.translate(self.program, d))
                    .is_some_and(|d| got == Some(d));
            if got != Some(want) && !through_veneer && !past_veneer {
                return fail("PC-relative target not translated");
            }
            return Ok(());
        }
        let old_bytes = self.input.bytes_at(old.addr(), u64::from(old.len()));
        let new_bytes = self.out.bytes_at(new.addr(), u64::from(new.len()));
        if old_bytes == new_bytes {
            return Ok(());
        }
        // Absolute code addresses are the only other thing that may change.
        let expected: Vec<u64> = old
            .absolute_constants()
            .map(|c| self.tr(Vaddr(c)).map(Vaddr::get).unwrap_or(c))
            .collect();
        if expected == new.absolute_constants().collect::<Vec<_>>() {
            Ok(())
        } else {
            fail("bytes differ")
        }
    }

    /// Checks that `code` (the output where the input's indirect `call` of `f` was written) is
    /// that call promoted: each compared address is the new entry of a function of the input
    /// and is what its `je` calls directly, the fallback is the input's call unchanged, every
    /// path goes on right after the sequence. Returns the instructions the sequence takes.
    fn promoted_call(
        &self,
        f: &Function,
        call: &Inst,
        code: &[Inst],
        noreturn: bool,
    ) -> Result<usize, String> {
        let read = self
            .program
            .info
            .isa
            .read_promotion(call, code, noreturn)
            .map_err(|why| {
                format!(
                    "{}: `{}` of {} became `{}` ({why})",
                    call.addr(),
                    call.to_asm(),
                    f.name(),
                    code.first().map_or("nothing".into(), Inst::to_asm)
                )
            })?;
        self.same_instruction(call, &code[read.fallback])?;
        let entries = self.new_entries.get_or_init(|| {
            self.program
                .functions
                .iter()
                .filter_map(|g| self.map.translate(self.program, g.range.start))
                .collect()
        });
        for t in &read.targets {
            if !entries.contains(t) {
                return Err(format!(
                    "{}: the promoted call of {} compares with and calls {t}, which is no function's new entry",
                    call.addr(),
                    f.name()
                ));
            }
        }
        Ok(read.insts)
    }

    fn check_block(
        &self,
        f: &Function,
        b: &rivet_ir::Block,
        report: &mut VerifyReport,
    ) -> Result<(), String> {
        let new_start = self
            .map
            .in_function(f.id, b.start)
            .ok_or_else(|| format!("block {} of {} has no new address", b.start, f.name()))?;
        let insts = f.block_insts(b);
        let recreated = f.block_exit(b).is_some_and(|exit| exit.recreates_last());
        // The input's alignment padding is left out of rewritten code; a re-created terminator
        // (a branch, never padding) is checked apart.
        let mut body: Vec<&Inst> = f.kept_insts(b).collect();
        if recreated {
            body.pop();
        }
        // Enough bytes for every instruction to be one longer (a call through a GOT slot), and
        // for indirect calls to be promoted (compares and direct calls).
        let body_len: u64 = body
            .iter()
            .map(|i| {
                u64::from(i.len())
                    + if i.flow() == Flow::IndirectCall {
                        256
                    } else {
                        1
                    }
            })
            .sum();
        let decoded = self.decode_at(new_start, body_len + 16)?;
        let mut widened = false;
        // Output instructions beyond one per input instruction (promoted calls).
        let mut extra = 0usize;
        for (k, old) in body.iter().enumerate() {
            let new = decoded
                .get(k + extra)
                .ok_or_else(|| format!("block {} of {} is truncated", b.start, f.name()))?;
            if widened {
                // The second word of a widened address, checked with the first.
                widened = false;
                report.instructions += 1;
                continue;
            }
            if let Some(next) = body.get(k + 1)
                && old.is_nop()
                && !new.is_nop()
                && next.may_widen_into_previous()
            {
                self.same_widened_address(next, new, decoded.get(k + 1))?;
                widened = true;
                report.instructions += 1;
                continue;
            }
            if old.flow() == Flow::IndirectCall && self.same_instruction(old, new).is_err() {
                let noreturn = b.terminator == Terminator::NoReturnCall
                    && insts.last().is_some_and(|l| l.addr() == old.addr());
                let taken = self.promoted_call(f, old, &decoded[k + extra..], noreturn)?;
                extra += taken - 1;
                report.promoted_calls += 1;
                report.instructions += 1;
                continue;
            }
            self.same_instruction(old, new)?;
            report.instructions += 1;
        }
        let end = body
            .len()
            .checked_sub(1)
            .map_or(new_start, |k| decoded[k + extra].end());
        if !recreated {
            return Ok(());
        }
        let last = insts.last().expect("recreated terminator");
        report.instructions += 1;
        let fall_old = last.end();
        // What the output does after the body: a jump, a conditional jump (and a jump), or
        // nothing when the successor is the next block of the layout.
        let first = decoded.get(body.len() + extra);
        let block_name = || format!("block {} of {}", b.start, f.name());
        match (&b.terminator, last.flow()) {
            (Terminator::Jump | Terminator::TailCall { .. }, Flow::Jump { target }) => {
                let want = self.tr(target)?;
                if self.reaches(end, want)? {
                    return Ok(());
                }
                match first {
                    Some(new) if matches!(new.flow(), Flow::Jump { target } if self.lands_at(target, want)) =>
                        {}
                    Some(new) if self.goes_through_slot(last, new) => {}
                    // `--peepholes`: straight to a later block of a chain of jumps, or the
                    // copy of the `ret` the chain ends with; judged on the input's code.
                    _ if b.terminator == Terminator::Jump
                        && self.peephole_jump(f, target, end, first)? =>
                    {
                        report.peepholes += 1;
                    }
                    // `--tail-duplication`: a copy of the block jumped to.
                    _ if b.terminator == Terminator::Jump && self.tail_copy(f, target, end)? => {
                        report.tail_copies += 1;
                    }
                    _ => return Err(format!("{}: does not jump to {want}", block_name())),
                }
            }
            (_, Flow::CondJump { target }) => {
                // `--peepholes=useless-branches`: both sides lead to the same block, and the
                // output goes there without a test.
                if b.terminator == Terminator::CondJump {
                    let sides = (
                        self.equivalent_targets(f, target, false)?,
                        self.equivalent_targets(f, fall_old, false)?,
                    );
                    for &x in sides.0.iter().filter(|x| sides.1.contains(x)) {
                        let jumps_there = first.is_some_and(|new| {
                            matches!(new.flow(), Flow::Jump { target } if self.lands_at(target, x))
                        });
                        let no_test =
                            !first.is_some_and(|new| matches!(new.flow(), Flow::CondJump { .. }));
                        if jumps_there || (no_test && self.reaches(end, x)?) {
                            report.peepholes += 1;
                            return Ok(());
                        }
                    }
                }
                let Some(jcc) = first else {
                    return Err(format!("{}: conditional jump missing", block_name()));
                };
                let Flow::CondJump { target: x } = jcc.flow() else {
                    return Err(format!("{}: expected a conditional jump", block_name()));
                };
                let after = jcc.end();
                let y = match decoded.get(body.len() + extra + 1).map(Inst::flow) {
                    Some(Flow::Jump { target }) if !self.new_block_starts.contains(&after) => {
                        target
                    }
                    _ => after,
                };
                let (t, fl) = (self.tr(target)?, self.tr(fall_old)?);
                // Without a jump after it, the conditional falls through, maybe over padding.
                // A jump after it may go through a veneer.
                let continues_to = |want: Vaddr| -> Result<bool, String> {
                    Ok(y == want
                        || (y != after && self.veneer_reaches(y, want))
                        || (y == after && self.reaches(after, want)?))
                };
                let same = jcc.condition() == last.condition()
                    && self.branches_to(x, t)?
                    && continues_to(fl)?;
                let inverted = jcc.condition() == last.inverted_condition()
                    && self.branches_to(x, fl)?
                    && continues_to(t)?;
                // `--peepholes=double-jumps` and `--simplify-conditional-tail-calls`: each
                // side may go to a later block of its chain of jumps, the taken side to the
                // function a tail-call-only block at its end calls.
                let changed = !same && !inverted && b.terminator == Terminator::CondJump && {
                    let ts = self.equivalent_targets(f, target, true)?;
                    let fs = self.equivalent_targets(f, fall_old, false)?;
                    let any = |a: &[Vaddr], c: &[Vaddr]| -> Result<bool, String> {
                        for &p in a {
                            if self.branches_to(x, p)? {
                                for &q in c {
                                    if continues_to(q)? {
                                        return Ok(true);
                                    }
                                }
                            }
                        }
                        Ok(false)
                    };
                    (jcc.condition() == last.condition() && any(&ts, &fs)?)
                        || (jcc.condition() == last.inverted_condition() && any(&fs, &ts)?)
                };
                if changed {
                    report.peepholes += 1;
                    return Ok(());
                }
                // A conditional jump over the jump right after it (AArch64's far form of a
                // conditional branch, `b.!cond 1f; b target; 1:`) is that jump taken on the
                // opposite condition, continuing where the skip lands.
                let skip = match decoded.get(body.len() + extra + 1) {
                    Some(jump) if x == jump.end() => match jump.flow() {
                        Flow::Jump { target: z } => {
                            let y2 = match decoded.get(body.len() + extra + 2).map(Inst::flow) {
                                Some(Flow::Jump { target })
                                    if !self.new_block_starts.contains(&x) =>
                                {
                                    target
                                }
                                _ => x,
                            };
                            let continues = |want: Vaddr| -> Result<bool, String> {
                                Ok(y2 == want
                                    || (y2 != x && self.veneer_reaches(y2, want))
                                    || (y2 == x && self.reaches(x, want)?))
                            };
                            let cond = jcc.inverted_condition();
                            (cond == last.condition() && self.lands_at(z, t) && continues(fl)?)
                                || (cond == last.inverted_condition()
                                    && self.lands_at(z, fl)
                                    && continues(t)?)
                        }
                        _ => false,
                    },
                    _ => false,
                };
                if !same && !inverted && !skip {
                    return Err(format!(
                        "{}: branches to {x}/{y}, expected {t}/{fl}",
                        block_name()
                    ));
                }
            }
            _ => return Err(format!("{}: unexpected terminator", block_name())),
        }
        Ok(())
    }

    /// The new addresses a branch of `f` to `to` may go to and do the same, judged on the
    /// input's code: `to`, then each block a chain of blocks holding only a `jmp` (or only
    /// padding) leads to; with `tail_calls`, also the function a block at the chain's end
    /// that holds only a direct tail call jumps to. Translated (those that have a new address).
    fn equivalent_targets(
        &self,
        f: &Function,
        to: Vaddr,
        tail_calls: bool,
    ) -> Result<Vec<Vaddr>, String> {
        let mut chain = vec![to];
        let mut at = to;
        while let Some(b) = f.block_at(at).map(|b| f.block(b)) {
            match f.passes_straight_to(b) {
                Some(next) if !chain.contains(&next) && f.block_at(next).is_some() => {
                    chain.push(next);
                    at = next;
                }
                _ => {
                    if tail_calls
                        && let Some(rivet_ir::BlockExit::Jump {
                            to: callee,
                            tail_call: true,
                        }) = f.block_exit(b)
                        && f.kept_insts(b).count() == 1
                    {
                        chain.push(callee);
                    }
                    break;
                }
            }
        }
        // An address without a new one (code that stays) is simply no alternative.
        Ok(chain
            .into_iter()
            .filter_map(|a| self.map.translate(self.program, a))
            .collect())
    }

    /// Whether the output's end of a block whose input jumped to `target` (at `end`, its
    /// first instruction `first`) does what the jump did, as `--peepholes` may write it: a
    /// jump to, or a fall into, a later block of the chain of jumps from `target`, or a copy
    /// of the `ret` of a block holding only that, at the chain's end.
    fn peephole_jump(
        &self,
        f: &Function,
        target: Vaddr,
        end: Vaddr,
        first: Option<&Inst>,
    ) -> Result<bool, String> {
        for want in self.equivalent_targets(f, target, false)? {
            if self.reaches(end, want)? {
                return Ok(true);
            }
            if first.is_some_and(
                |new| matches!(new.flow(), Flow::Jump { target } if self.lands_at(target, want)),
            ) {
                return Ok(true);
            }
        }
        let Some(new) = first.filter(|new| new.flow() == Flow::Return) else {
            return Ok(false);
        };
        // The chain's last block, in the input: it must hold only a return.
        let mut at = target;
        let mut steps = 0;
        while let Some(b) = f.block_at(at).map(|b| f.block(b)) {
            match f.passes_straight_to(b) {
                Some(next) if steps < 64 && f.block_at(next).is_some() => {
                    at = next;
                    steps += 1;
                }
                _ => {
                    let kept: Vec<&Inst> = f.kept_insts(b).collect();
                    return Ok(match kept[..] {
                        [ret]
                            if b.terminator == Terminator::Return && ret.flow() == Flow::Return =>
                        {
                            self.input.bytes_at(ret.addr(), u64::from(ret.len()))
                                == self.out.bytes_at(new.addr(), u64::from(new.len()))
                        }
                        _ => false,
                    });
                }
            }
        }
        Ok(false)
    }

    /// Blocks that fall through: the successor must follow or be jumped to.
    fn check_fall_through(&self, f: &Function, b: &rivet_ir::Block) -> Result<(), String> {
        if b.terminator != Terminator::FallThrough {
            return Ok(());
        }
        let last = f.block_insts(b).last().expect("non-empty block");
        let new_last = self
            .map
            .in_function(f.id, last.addr())
            .unwrap_or(last.addr());
        // Left-out padding at the end of the block takes no bytes; a call made through a GOT
        // slot one more than the original.
        let end = if f.is_dropped_padding(b.insts.end - 1) {
            new_last
        } else {
            match self.decode_at(new_last, 16)?.first() {
                Some(new) if self.goes_through_slot(last, new) => new.end(),
                // A promoted call (checked with the block) goes on at its join.
                Some(new)
                    if last.flow() == Flow::IndirectCall
                        && self.same_instruction(last, new).is_err() =>
                {
                    self.program
                        .info
                        .isa
                        .read_promotion(last, &self.decode_at(new_last, 256)?, false)
                        .map_err(|why| format!("{}: {why}", last.addr()))?
                        .join
                }
                _ => new_last + u64::from(last.len()),
            }
        };
        let want = self.tr(last.end())?;
        if self.reaches(end, want)? {
            return Ok(());
        }
        match self.decode_at(end, 16)?.first().map(Inst::flow) {
            Some(Flow::Jump { target }) if self.lands_at(target, want) => Ok(()),
            _ => Err(format!(
                "block {} of {}: does not continue at {want}",
                b.start,
                f.name()
            )),
        }
    }
}

impl Checker<'_> {
    /// The rewritten function holding `addr`, if any.
    fn rewritten_at(&self, addr: Vaddr) -> Option<&Function> {
        self.program
            .function_containing(addr)
            .filter(|g| self.map.is_rewritten(g.id) || self.folded[g.id.0 as usize])
    }

    /// Every way from code that stays into a rewritten function: each direct branch or call
    /// of a function left in place (all its decoded instructions, skipped functions' too),
    /// and each RIP-relative code address of a modelled one, whose target lies in a
    /// rewritten function. The output must either send it to the translated target (the same
    /// instruction otherwise), or keep it and still hold, at the old target, what the input
    /// held there: the original code up to the end of its block, or at an old entry a jump to
    /// the new one. This is checked on the output's bytes, whatever the rewrite meant to do:
    /// a forwarding jump written over a second way into a function shows here.
    fn check_code_that_stays(&self, report: &mut VerifyReport) -> Result<(), String> {
        for f in self
            .program
            .functions
            .iter()
            .filter(|f| !self.map.is_rewritten(f.id) && !self.folded[f.id.0 as usize])
        {
            // RIP-relative operands of a skipped function's linear sweep may be data read as
            // instructions; only modelled code is taken at its word for those.
            // Instructions optimize released are decoded again, as discovery decoded them.
            let insts = f.instructions(self.input);
            let modelled: HashSet<Vaddr> = if f.is_simple() {
                f.reachable_insts(&insts).map(Inst::addr).collect()
            } else {
                HashSet::new()
            };
            for old in insts.iter() {
                let target = match old.flow() {
                    Flow::Jump { target } | Flow::CondJump { target } | Flow::Call { target } => {
                        target
                    }
                    _ => match old.pc_relative_memory_target() {
                        Some(t) if modelled.contains(&old.addr()) => t,
                        _ => continue,
                    },
                };
                let Some(g) = self.rewritten_at(target) else {
                    continue;
                };
                self.check_way_in(old, target, g)
                    .map_err(|why| format!("{} in {}: {why}", old.addr(), f.name()))?;
                report.references += 1;
            }
        }
        Ok(())
    }

    /// One way in from code that stays: `old`, an instruction of the input, reaches `target`
    /// in the rewritten function `g`.
    fn check_way_in(&self, old: &Inst, target: Vaddr, g: &Function) -> Result<(), String> {
        let new = self
            .decode_at(old.addr(), u64::from(old.len()))?
            .into_iter()
            .next()
            .ok_or_else(|| "the output holds no instruction there".to_string())?;
        let unchanged = self.input.bytes_at(old.addr(), u64::from(old.len()))
            == self.out.bytes_at(new.addr(), u64::from(new.len()));
        if !unchanged {
            return self.same_instruction(old, &new);
        }
        // Kept as it was: the old target must still do what it did.
        if self.map.translate(self.program, target) == Some(target) {
            return Ok(()); // rewritten in place, and that instruction did not move
        }
        // A forwarding jump at the old entry (behind a landing pad where BTI is enforced).
        if target == g.range.start
            && let Ok(new_entry) = self.tr(target)
        {
            let isa = self.program.info.isa;
            let padded = self
                .out
                .bytes_at(target, 4)
                .is_some_and(|bytes| isa.is_forwarding_pad(bytes));
            let jump_at = if padded { target + 4 } else { target };
            if matches!(
                self.decode_at(jump_at, 5)?.first().map(Inst::flow),
                Some(Flow::Jump { target: t }) if t == new_entry
            ) {
                return Ok(());
            }
        }
        // The original code from the target to the end of its block.
        let end = g
            .blocks
            .iter()
            .find(|b| b.start <= target && f_block_end(g, b) > target)
            .map_or(target + 1, |b| f_block_end(g, b));
        let len = end - target;
        if self.input.bytes_at(target, len) != self.out.bytes_at(target, len) {
            return Err(format!(
                "`{}` still goes to {target}, in {} which moved, and the bytes there changed \
                 (the old code from {target} to {end} must stay intact, or the branch must be \
                 sent to {})",
                old.to_asm(),
                g.name(),
                self.tr(target)
                    .map_or("the new code".to_string(), |t| t.to_string())
            ));
        }
        Ok(())
    }
}

/// Where block `b` of `f` ends in the input.
fn f_block_end(f: &Function, b: &rivet_ir::Block) -> Vaddr {
    f.block_insts(b).last().map_or(b.start, Inst::end)
}

/// Checks `out` (an output of `input`, discovered as `program`) given the address map and
/// the functions folded into others (`(folded, kept)`; the map already sends their entries to
/// the kept copies, `AddressMap::fold`).
pub fn check(
    input: &ElfFile<'_>,
    program: &Program,
    out: &ElfFile<'_>,
    map: &AddressMap,
    folds: &[(rivet_ir::FuncId, rivet_ir::FuncId)],
) -> Result<VerifyReport, String> {
    let mut folded = vec![false; program.functions.len()];
    for &(f, _) in folds {
        folded[f.0 as usize] = true;
    }
    let mut new_block_starts = HashSet::new();
    for f in program.functions.iter().filter(|f| map.is_rewritten(f.id)) {
        for b in &f.blocks {
            if let Some(n) = map.in_function(f.id, b.start) {
                new_block_starts.insert(n);
            }
        }
    }
    let checker = Checker {
        program,
        out,
        input,
        map,
        new_block_starts,
        via_slots: ViaSlots::of_program(program),
        guarded: program.info.isa.branch_targets_guarded(out),
        folded: folded.clone(),
        new_entries: std::sync::OnceLock::new(),
        taildup_frames: std::sync::OnceLock::new(),
    };
    let mut report = VerifyReport::default();
    for f in program.functions.iter().filter(|f| map.is_rewritten(f.id)) {
        report.functions += 1;
        for b in &f.blocks {
            checker.check_block(f, b, &mut report)?;
            checker.check_fall_through(f, b)?;
            report.blocks += 1;
        }
    }

    // Stored references.
    let symbols = input.symbols().map_err(|e| e.to_string())?;
    let statics = if program.info.relocation_mode == rivet_ir::RelocationMode::Available {
        input
            .static_relocations(&symbols, &program.info.isa)
            .map_err(|e| e.to_string())?
    } else {
        Vec::new()
    };
    let dynamics = input
        .dynamic_relocations(&program.info.isa)
        .map_err(|e| e.to_string())?;
    // As in the rewrite, a folded function's body counts as gone: references from it are not
    // followed, and those to it must go to its kept copy.
    let is_rewritten = |f: rivet_ir::FuncId| map.is_rewritten(f) || folded[f.0 as usize];
    let refs = collect(input, program, &is_rewritten, &statics, &dynamics);
    report.folds = crate::verify_icf::check_folds(input, program, folds, &refs.stored)?;
    for r in &refs.stored {
        // Only references to moved code are rewritten; others keep whatever the linker stored
        // (a PIE's data words may hold 0 until the loader applies their RELATIVE relocation).
        let Some(want) = map.translate(program, r.target).filter(|w| *w != r.target) else {
            continue;
        };
        let got = match r.field {
            RefField::Absolute { size: 8 } => out.read_u64(r.site),
            RefField::Absolute { .. } => out.read_u32(r.site).map(u64::from),
            RefField::Relative { size: 8, base } => {
                out.read_u64(r.site).map(|v| base.get().wrapping_add(v))
            }
            RefField::Relative { base, .. } => out
                .read_i32(r.site)
                .map(|v| base.offset(i64::from(v)).get()),
            RefField::RelaAddend { entry, .. } => out.read_u64(entry + 16),
            RefField::Scaled {
                size,
                anchor,
                signed,
                shift,
            } => {
                let kind = rivet_ir::JumpTableKind::Scaled {
                    anchor: map.translate(program, anchor).unwrap_or(anchor),
                    signed,
                    shift,
                };
                out.bytes_at(r.site, u64::from(size))
                    .and_then(|entry| kind.scaled_target(entry))
                    .map(Vaddr::get)
            }
            RefField::Instruction { inst } => out
                .bytes_at(r.site, u64::from(inst.len()))
                .and_then(|bytes| inst.isa().decode_all(bytes, r.site).first().copied())
                .and_then(|i| i.pc_relative_target())
                .map(Vaddr::get),
        };
        // A branch of code that stays, too far from the new code, keeps entering the old
        // body (still there, forwarding where it can).
        let kept_far = matches!(r.field, RefField::Instruction { .. })
            && got == Some(r.target.get())
            && !program.info.isa.direct_branch_reaches(r.site, want);
        if got != Some(want.get()) && !kept_far {
            return Err(format!(
                "reference at {} holds {}, expected {want} (for {})",
                r.site,
                got.map_or("nothing".into(), |g| format!("{:#x}", g)),
                r.target
            ));
        }
        report.references += 1;
    }
    checker.check_code_that_stays(&mut report)?;
    report.lines = check_lines(input, program, out, map)?;
    let want_entry = map.translate(program, input.entry).unwrap_or(input.entry);
    // With `--hugify` the program starts in its hook, which must lead to `want_entry`.
    let hooked =
        crate::verify_hugify::check(input, out, program.info.kind, program.info.isa, &|v| {
            map.translate(program, v).unwrap_or(v)
        })?;
    if !hooked && out.entry != want_entry {
        return Err(format!(
            "entry point is {}, expected {want_entry}",
            out.entry
        ));
    }
    Ok(report)
}

/// Every instruction copied into rewritten code must have the source position it had in
/// the input (when the output keeps debug info; a rewrite that could not carry it over
/// removes it). Branches are skipped: a dropped jump has no bytes, a re-created one may sit
/// elsewhere in its block.
fn check_lines(
    input: &ElfFile<'_>,
    program: &Program,
    out: &ElfFile<'_>,
    map: &AddressMap,
) -> Result<usize, String> {
    let Some(old) = LineTable::read(input).map_err(|e| format!("input line table: {e}"))? else {
        return Ok(0);
    };
    let Some(new) = LineTable::read(out).map_err(|e| format!("output line table: {e}"))? else {
        return Ok(0);
    };
    let name = |t: &LineTable, p: SourcePosition| {
        format!("{}:{}:{}", t.file_name(p.file), p.line, p.column)
    };
    let mut checked = 0;
    for f in program.functions.iter().filter(|f| map.is_rewritten(f.id)) {
        for (i, inst) in f.insts.iter().enumerate() {
            if matches!(inst.flow(), Flow::Jump { .. } | Flow::CondJump { .. })
                || f.is_dropped_padding(i as u32)
            {
                continue;
            }
            let (Some(want), Some(at)) = (
                old.at(inst.addr().get()),
                map.in_function(f.id, inst.addr()),
            ) else {
                continue;
            };
            let want = name(&old, want);
            let got = new.at(at.get()).map(|p| name(&new, p));
            if got.as_deref() != Some(want.as_str()) {
                return Err(format!(
                    "{} (`{}`) was at {want} in the source; its copy at {at} is at {}",
                    inst.addr(),
                    inst.to_asm(),
                    got.as_deref().unwrap_or("no line")
                ));
            }
            checked += 1;
        }
    }
    Ok(checked)
}

/// `rewrite --verify`: checks `image`, what `output` describes, before it is committed.
pub fn verify_output(
    input: &ElfFile<'_>,
    program: &Program,
    output: &RewriteOutput,
    image: &[u8],
) -> Result<VerifyReport, String> {
    let out = ElfFile::parse(image).map_err(|e| format!("the output does not parse: {e}"))?;
    let report = check(input, program, &out, &output.map, &output.layout.folded)?;
    // The output must read back as a program Rivet understands as well as the input.
    discover(&out, &DiscoverOptions::default())
        .map_err(|e| format!("the output cannot be analysed: {e:?}"))?;
    Ok(report)
}
