//! The slot an AArch64 indirect branch reads its target from, when two instructions before
//! it load that target from a fixed address: `adrp xA, page; ldr xB, [xA, #off]; ... br xB`.
//! That is the shape of every PLT entry GNU ld and lld write (through x16 and x17, with an
//! `add x16, x16, #off` between the load and the branch, and `bti c` in front when the
//! output is BTI-marked): docs/aarch64-notes.md, section 4.

use rivet_elf::Vaddr;

use super::decode::{Control, PcRelative};
use super::encode::BTI_C;
use crate::Inst;

/// `ldr xT, [xN, #imm12 * 8]` (64-bit load, unsigned offset): `(t, n, byte offset)`.
fn ldr_unsigned_offset(word: u32) -> Option<(u8, u8, u64)> {
    (word & 0xffc0_0000 == 0xf940_0000).then(|| {
        (
            (word & 0x1f) as u8,
            ((word >> 5) & 0x1f) as u8,
            u64::from((word >> 10) & 0xfff) * 8,
        )
    })
}

/// How many instructions before a `br` its load may be (the PLT's `add` sits between).
const WINDOW: usize = 4;

/// `(branch address, slot)` for each `br` in `insts` whose register was loaded from
/// `adrp` page + offset within the few instructions before it, with neither register
/// written in between.
pub(crate) fn indirect_jump_slots(insts: &[Inst]) -> Vec<(Vaddr, Vaddr)> {
    slot_jumps(insts)
        .into_iter()
        .map(|j| (j.jump, j.slot))
        .collect()
}

/// One indirect jump through a slot and where its sequence starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SlotJump {
    pub jump: Vaddr,
    pub slot: Vaddr,
    /// The `adrp`, or the `bti c` right before it: where a PLT entry starts. BTI-marked
    /// outputs have 24-byte entries after the 32-byte header (`bti c` and a trailing `nop`
    /// around the usual four), so an entry's place is read from its code, not from a fixed
    /// size.
    pub start: Vaddr,
}

pub(crate) fn slot_jumps(insts: &[Inst]) -> Vec<SlotJump> {
    let decoded: Vec<_> = insts.iter().map(|i| i.aarch64().decoded()).collect();
    let mut out = Vec::new();
    for (k, inst) in decoded.iter().enumerate() {
        let Some(Control::IndirectJump { reg }) = inst.map(|i| i.control) else {
            continue;
        };
        let from = k.saturating_sub(WINDOW);
        // The load of the branch register, nearest first.
        let Some((l, base, offset)) = (from..k).rev().find_map(|l| {
            let (t, n, off) = ldr_unsigned_offset(decoded[l]?.word)?;
            (t == reg).then_some((l, n, off))
        }) else {
            continue;
        };
        // Nothing between the load and the branch may write the branch register.
        if (l + 1..k).any(|m| decoded[m].is_none_or(|i| i.word & 0x1f == u32::from(reg))) {
            continue;
        }
        // The adrp of the base, right before the load (as linkers write PLT entries).
        let Some((a, page)) = (from..l).rev().find_map(|a| match decoded[a]?.pc_relative {
            Some(PcRelative::Adrp { reg, page }) if reg == base => Some((a, page)),
            _ => None,
        }) else {
            continue;
        };
        let start = match a.checked_sub(1).and_then(|p| decoded[p]) {
            Some(pad) if pad.word == BTI_C => insts[a - 1].addr(),
            _ => insts[a].addr(),
        };
        out.push(SlotJump {
            jump: insts[k].addr(),
            slot: Vaddr(page + offset),
            start,
        });
    }
    out
}
