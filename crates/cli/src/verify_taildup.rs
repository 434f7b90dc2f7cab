//! `--verify` of tail duplication (`rivet optimize --tail-duplication`): a block whose input
//! ends in `jmp T` may end, in the output, with a copy of T instead. Checked on the output's
//! bytes, apart from the pass: T's instructions but its last, each the same instruction with
//! its PC-relative target translated (`Checker::same_instruction`), then T's own exit (the
//! same `ret`, or a jump, or a fall, to where T's jump went, translated); and the output's
//! unwind row at every copied instruction equal to the input's at its original (and so the
//! row at the copy's start, which the block's jump runs into, equal to T's).

use rivet_arch::{Flow, Inst};
use rivet_elf::Vaddr;
use rivet_elf::eh_frame::{CfiRow, EhFrameTable};
use rivet_ir::{Function, Terminator, cfi_at};

use super::Checker;

/// The parsed unwind tables of the input and the output, read once per check.
pub(super) type Frames<'a> = Option<(EhFrameTable<'a>, EhFrameTable<'a>)>;

/// Whether two rows say the same (their ranges aside).
fn same_row(a: &CfiRow, b: &CfiRow) -> bool {
    let sorted = |r: &CfiRow| {
        let mut s: Vec<_> = r.saved.iter().cloned().collect();
        s.sort_by_key(|(reg, _)| *reg);
        s
    };
    a.cfa == b.cfa && a.args_size == b.args_size && sorted(a) == sorted(b)
}

/// The row of `table` at `addr`, if any.
fn row_at(table: &EhFrameTable<'_>, addr: Vaddr) -> Result<Option<CfiRow>, String> {
    let Some(fde) = table.fde_for(addr) else {
        return Ok(None);
    };
    let rows = table.rows(fde).map_err(|e| e.to_string())?;
    Ok(cfi_at(&rows, addr).cloned())
}

impl Checker<'_> {
    fn frames(&self) -> &Frames<'_> {
        self.taildup_frames
            .get_or_init(|| match (self.input.eh_frame(), self.out.eh_frame()) {
                (Ok(Some(i)), Ok(Some(o))) => Some((i, o)),
                _ => None,
            })
    }

    /// Whether the output at `end` (where the block's body ends) holds a copy of the block at
    /// `target` that does what the jump there did. `Ok(false)` when it does not look like one
    /// at all; an error when it is a copy that differs.
    pub(super) fn tail_copy(
        &self,
        f: &Function,
        target: Vaddr,
        end: Vaddr,
    ) -> Result<bool, String> {
        let Some(t) = f.block_at(target).map(|b| f.block(b)) else {
            return Ok(false);
        };
        let kept: Vec<&Inst> = f.kept_insts(t).collect();
        let Some((last, body)) = kept.split_last() else {
            return Ok(false);
        };
        let returns = t.terminator == Terminator::Return && last.flow() == Flow::Return;
        let len: u64 = kept.iter().map(|i| u64::from(i.len())).sum();
        let decoded = self.decode_at(end, len + 16)?;
        // Not a copy unless its first instruction is the tail's first.
        let first_matches = match (body.first(), decoded.first()) {
            (Some(old), Some(new)) => self.same_instruction(old, new).is_ok(),
            (None, Some(new)) => returns && new.flow() == Flow::Return,
            _ => false,
        };
        if !first_matches {
            return Ok(false);
        }
        let name = || format!("copy of block {} of {} at {end}", t.start, f.name());
        let frames = self.frames();
        let same_state = |old: &Inst, new: &Inst| -> Result<(), String> {
            let Some((input, output)) = frames else {
                return Err(format!("{}: no unwind tables to compare", name()));
            };
            let (a, b) = (row_at(input, old.addr())?, row_at(output, new.addr())?);
            match (a, b) {
                (Some(a), Some(b)) if same_row(&a, &b) => Ok(()),
                (None, None) => Ok(()),
                _ => Err(format!(
                    "{}: the unwind row at {} differs from the original's at {}",
                    name(),
                    new.addr(),
                    old.addr()
                )),
            }
        };
        for (k, old) in body.iter().enumerate() {
            let new = decoded
                .get(k)
                .ok_or_else(|| format!("{}: truncated", name()))?;
            self.same_instruction(old, new)
                .map_err(|e| format!("{}: {e}", name()))?;
            // `same_instruction` lets bytes differ wherever an address could be; an
            // instruction naming none (an 8-bit immediate, say) must be its original exactly.
            if old.pc_relative_target().is_none()
                && old.absolute_constants().next().is_none()
                && self.input.bytes_at(old.addr(), u64::from(old.len()))
                    != self.out.bytes_at(new.addr(), u64::from(new.len()))
            {
                return Err(format!(
                    "{}: `{}` at {} differs from the original",
                    name(),
                    new.to_asm(),
                    new.addr()
                ));
            }
            same_state(old, new)?;
        }
        let after = body.len();
        if returns {
            let new = decoded
                .get(after)
                .filter(|new| {
                    new.flow() == Flow::Return
                        && self.input.bytes_at(last.addr(), u64::from(last.len()))
                            == self.out.bytes_at(new.addr(), u64::from(new.len()))
                })
                .ok_or_else(|| format!("{}: does not end with the tail's return", name()))?;
            same_state(last, new)?;
            return Ok(true);
        }
        let Flow::Jump { target: to } = last.flow() else {
            return Err(format!(
                "{}: the tail does not end in a jump or return",
                name()
            ));
        };
        let want = self.tr(to)?;
        let copy_end = match after.checked_sub(1) {
            Some(k) => decoded[k].end(),
            None => end,
        };
        if self.reaches(copy_end, want)? {
            return Ok(true);
        }
        match decoded.get(after) {
            Some(new) if matches!(new.flow(), Flow::Jump { target } if self.lands_at(target, want)) => {
                Ok(true)
            }
            Some(new) if self.goes_through_slot(last, new) => Ok(true),
            _ => Err(format!("{}: does not go on to {want}", name())),
        }
    }
}
