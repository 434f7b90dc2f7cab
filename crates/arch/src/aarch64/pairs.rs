//! Addresses that code builds in two instructions: `adrp xN, page` and, further down the
//! same straight run, `add xM, xN, #lo12`. When the address is code (a function pointer, a
//! computed-goto label, a wrapper's entry that `_start` hands to `__libc_start_main`), the
//! label it names is taken, exactly as an x86-64 `lea label(%rip)` takes it; without this,
//! code reached only through such an address would look unreachable. Relocations
//! (ADR_PREL_PG_HI21 + ADD_ABS_LO12_NC) say the same where they are kept; this reading also
//! serves binaries without them.

use super::decode::{Control, Inst, PcRelative};
use super::jump_table::{also_writes, writes_rd};

/// How far after an ADRP its ADD may be (compilers schedule other work between them).
const WINDOW: usize = 16;

/// `add xd, xn, #imm` (64-bit, unshifted immediate): `(d, n, imm)`.
fn add_immediate(word: u32) -> Option<(u8, u8, u64)> {
    (word & 0xffc0_0000 == 0x9100_0000).then(|| {
        (
            (word & 0x1f) as u8,
            ((word >> 5) & 0x1f) as u8,
            u64::from((word >> 10) & 0xfff),
        )
    })
}

/// `(address of the ADD, address built)` for every ADRP+ADD pair in `insts` (decoded words
/// in address order; `None` for words that are not instructions), following each ADRP's
/// register until it is written again, the run ends (a branch, a return, a trap) or
/// `WINDOW` instructions have passed.
pub(crate) fn address_pairs(insts: &[Option<Inst>]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for (i, inst) in insts.iter().enumerate() {
        let Some(Inst {
            pc_relative: Some(PcRelative::Adrp { reg, page }),
            ..
        }) = inst
        else {
            continue;
        };
        for next in insts.iter().skip(i + 1).take(WINDOW) {
            let Some(next) = next else { break };
            if let Some((_, n, imm)) = add_immediate(next.word)
                && n == *reg
            {
                out.push((next.addr, page + imm));
            }
            let ends_run = !matches!(
                next.control,
                Control::Next | Control::Call { .. } | Control::IndirectCall { .. }
            );
            let rd = (next.word & 0x1f) as u8;
            if ends_run || (writes_rd(next) && rd == *reg) || also_writes(next, *reg) {
                break;
            }
        }
    }
    out
}

/// True when the `adr` at `insts[k]` computes the anchor of a switch table: the label its
/// register holds is added to a table entry shifted by 2 (`add xd, xA, wE, sxtb #2` from gcc,
/// `add xd, xA, xE, lsl #2` from clang) before anything else writes it. Such a label is no
/// computed-goto target: it is only where the table's distances count from.
pub(crate) fn is_table_anchor(insts: &[Option<Inst>], k: usize) -> bool {
    let Some(Some(Inst {
        pc_relative: Some(PcRelative::Adr { reg, .. }),
        ..
    })) = insts.get(k)
    else {
        return false;
    };
    for next in insts.iter().skip(k + 1).take(WINDOW) {
        let Some(next) = next else { return false };
        let w = next.word;
        let rn = ((w >> 5) & 0x1f) as u8;
        // ADD (extended register), 64-bit: shift amount in imm3 (bits 12-10).
        let extended = w & 0xffe0_0000 == 0x8b20_0000 && (w >> 10) & 7 == 2;
        // ADD (shifted register), 64-bit, LSL (shift 00) #2.
        let shifted = w & 0xffe0_0000 == 0x8b00_0000 && (w >> 10) & 0x3f == 2;
        if (extended || shifted) && rn == *reg {
            return true;
        }
        let ends_run = !matches!(next.control, Control::Next);
        let rd = (w & 0x1f) as u8;
        if ends_run || (writes_rd(next) && rd == *reg) || also_writes(next, *reg) {
            return false;
        }
    }
    false
}
