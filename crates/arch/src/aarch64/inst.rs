//! An AArch64 instruction as the program model holds it: its address, its word and what
//! the decoder's tables said about it, in 16 bytes. Everything else (branch targets,
//! PC-relative operands, PAC/BTI marks) is read again from the word's bits when asked for
//! (`decode::assemble`), which costs a few shifts; the x86-64 instruction beside it in
//! [`crate::Inst`] is 40 bytes, so AArch64 programs never make the model bigger.
//!
//! The answers follow the ISA-neutral questions of [`crate::Inst`]: how control flows, what
//! is padding, where a PC-relative operand points. AArch64 specifics the neutral interface
//! does not ask about (exclusive-monitor sequences, landing pads) are reached through
//! [`A64Inst::decoded`].

use rivet_elf::Vaddr;

use super::decode::{self, Class, Control, Inst, PcRelative};
use super::encode::{EncodeError, FILL, NOP, invert};
use crate::Flow;

/// One AArch64 instruction (or a word that is not one) at its address.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct A64Inst {
    addr: u64,
    word: u32,
    /// `Err(bytes)`: not an instruction, `bytes` long (4, or fewer for the partial word at
    /// the end of a truncated range).
    class: Result<Class, u8>,
}

/// Decodes `bytes` from `addr`, one instruction per word; a trailing partial word (only a
/// corrupt function's bounds leave one) comes back as an invalid instruction.
pub(crate) fn decode_all(bytes: &[u8], addr: Vaddr) -> Vec<A64Inst> {
    decode::words(bytes, addr.get())
        .map(|(addr, word, len)| A64Inst {
            addr,
            word,
            class: if len == 4 {
                decode::classify(word).ok_or(4)
            } else {
                Err(len)
            },
        })
        .collect()
}

impl A64Inst {
    /// The full decoding, `None` for a word that is not an instruction.
    pub(crate) fn decoded(&self) -> Option<Inst> {
        self.class
            .ok()
            .map(|class| decode::assemble(self.word, self.addr, class))
    }
    /// Its part in an exclusive-monitor sequence, if any.
    pub(crate) fn exclusive(&self) -> Option<super::Exclusive> {
        self.class.ok()?.exclusive
    }
    pub(crate) fn addr(&self) -> Vaddr {
        Vaddr(self.addr)
    }
    pub(crate) fn end(&self) -> Vaddr {
        Vaddr(self.addr + self.len() as u64)
    }
    /// Four bytes, except the partial word at the end of a truncated range.
    pub(crate) fn len(&self) -> u8 {
        match self.class {
            Ok(_) => 4,
            Err(bytes) => bytes,
        }
    }
    /// Not an instruction. Branches of extensions Rivet does not model (FEAT_CMPBR) count as
    /// invalid too: a function holding one is skipped with the address named, as for data.
    pub(crate) fn is_invalid(&self) -> bool {
        self.decoded()
            .is_none_or(|i| i.control == Control::Unmodelled)
    }

    pub(crate) fn flow(&self) -> Flow {
        let Some(inst) = self.decoded() else {
            return Flow::Trap;
        };
        match inst.control {
            Control::Next => Flow::Next,
            Control::Jump { target } => Flow::Jump {
                target: Vaddr(target),
            },
            Control::Call { target } => Flow::Call {
                target: Vaddr(target),
            },
            Control::Conditional { target, .. } => Flow::CondJump {
                target: Vaddr(target),
            },
            Control::IndirectJump { .. } => Flow::IndirectJump,
            Control::IndirectCall { .. } => Flow::IndirectCall,
            Control::Return => Flow::Return,
            Control::ExceptionReturn | Control::Trap | Control::Unmodelled => Flow::Trap,
        }
    }

    /// `nop` (`hint #0`), the only padding compilers and assemblers emit on AArch64.
    pub(crate) fn is_nop(&self) -> bool {
        self.word == NOP
    }

    /// `udf #0` (the zero word): what linkers leave between input sections.
    pub(crate) fn is_fill_trap(&self) -> bool {
        self.word == FILL
    }

    /// The address an ADR or a literal load refers to. An ADRP names only a page: the
    /// address is completed by a later instruction, and is not an operand of this one.
    pub(crate) fn pc_relative_memory_target(&self) -> Option<Vaddr> {
        match self.decoded()?.pc_relative? {
            PcRelative::Adr { target, .. } | PcRelative::Literal { target, .. } => {
                Some(Vaddr(target))
            }
            PcRelative::Adrp { .. } => None,
        }
    }

    /// True for instructions with a PC-relative field: branches with an immediate offset,
    /// ADR, ADRP, literal loads.
    pub(crate) fn is_pc_relative(&self) -> bool {
        self.has_pc_relative_field()
    }

    /// The field sits in the instruction's own word, where AArch64 relocations sit too.
    pub(crate) fn pc_relative_field(&self) -> Option<Vaddr> {
        self.is_pc_relative().then(|| self.addr())
    }

    /// The word, for re-encoding.
    pub(crate) fn word(&self) -> u32 {
        self.word
    }

    /// True for `adr`.
    pub(crate) fn is_adr(&self) -> bool {
        matches!(
            self.decoded().and_then(|i| i.pc_relative),
            Some(PcRelative::Adr { .. })
        )
    }

    /// The `adrp`+`add` placed at `at` that builds `target` in this `adr`'s register (the
    /// pair lld relaxed it from).
    pub(crate) fn widened(&self, at: Vaddr, target: Vaddr) -> Option<[u32; 2]> {
        let Some(PcRelative::Adr { reg, .. }) = self.decoded()?.pc_relative else {
            return None;
        };
        let r = u32::from(reg);
        let adrp = super::encode::retarget(0x9000_0000 | r, at.get(), target.get()).ok()?;
        let add = super::encode::set_low12(0x9100_0000 | (r << 5) | r, target.get()).ok()?;
        Some([adrp, add])
    }

    /// True for an instruction with a PC-relative field, ADRP included.
    pub(crate) fn has_pc_relative_field(&self) -> bool {
        self.decoded().is_some_and(|i| {
            i.pc_relative.is_some()
                || matches!(
                    i.control,
                    Control::Jump { .. } | Control::Call { .. } | Control::Conditional { .. }
                )
        })
    }

    /// A branch's target, an ADR's or a literal load's address. An ADRP has none: it names
    /// a page, and the address it helps build is completed by another instruction (the
    /// rewrite follows the pair through its relocations).
    pub(crate) fn pc_relative_target(&self) -> Option<Vaddr> {
        let inst = self.decoded()?;
        match inst.control {
            Control::Jump { target }
            | Control::Call { target }
            | Control::Conditional { target, .. } => return Some(Vaddr(target)),
            _ => {}
        }
        match inst.pc_relative? {
            PcRelative::Adr { target, .. } | PcRelative::Literal { target, .. } => {
                Some(Vaddr(target))
            }
            PcRelative::Adrp { .. } => None,
        }
    }

    /// This instruction placed at `at`, its PC-relative field pointing at `new_target` (or
    /// at what it pointed at before; an ADRP at its old page).
    pub(crate) fn relocate(
        &self,
        at: Vaddr,
        new_target: Option<Vaddr>,
    ) -> Result<u32, EncodeError> {
        let Some(inst) = self.decoded() else {
            return Ok(self.word);
        };
        let target = match (inst.control, inst.pc_relative) {
            (
                Control::Jump { target }
                | Control::Call { target }
                | Control::Conditional { target, .. },
                _,
            ) => target,
            (_, Some(PcRelative::Adr { target, .. } | PcRelative::Literal { target, .. })) => {
                target
            }
            (_, Some(PcRelative::Adrp { page, .. })) => page,
            _ => return Ok(self.word),
        };
        let target = new_target.map_or(target, Vaddr::get);
        super::encode::retarget(self.word, at.get(), target)
    }

    pub(crate) fn to_asm(self) -> String {
        match self.decoded() {
            Some(inst) => decode::text(&inst),
            None => format!(".inst {:#010x}", self.word),
        }
    }

    pub(crate) fn mnemonic_name(&self) -> String {
        match self.decoded() {
            Some(_) => self
                .to_asm()
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_ascii_lowercase(),
            None => "(bad)".to_string(),
        }
    }

    pub(crate) fn cost(&self) -> u64 {
        self.class.map_or(1, |c| u64::from(c.cost))
    }

    /// Every conditional branch can be inverted (`b.cond` flips its condition, `cbz` becomes
    /// `cbnz`, `tbz` becomes `tbnz`), except `b.al`/`b.nv`, which always branch.
    pub(crate) fn is_invertible_cond_jump(&self) -> bool {
        self.condition().is_some() && invert(self.word).is_ok()
    }

    /// The test a conditional branch makes: its word without the offset field (condition,
    /// register, bit number and form all stay), so two branches compare equal exactly when
    /// they branch on the same thing.
    pub(crate) fn condition(&self) -> Option<u32> {
        match self.decoded()?.control {
            Control::Conditional { .. } => Some(without_offset(self.word)),
            _ => None,
        }
    }

    pub(crate) fn inverted_condition(&self) -> Option<u32> {
        self.condition()?;
        invert(self.word).ok().map(without_offset)
    }
}

/// A conditional branch's word with its offset field cleared.
fn without_offset(word: u32) -> u32 {
    if word & 0x7e00_0000 == 0x3600_0000 {
        word & !(0x3fff << 5) // tbz/tbnz: imm14
    } else {
        word & !(0x7_ffff << 5) // b.cond, cbz/cbnz: imm19
    }
}

impl std::fmt::Debug for A64Inst {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#x}: {}", self.addr, self.to_asm())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The model holds every instruction of a program: an AArch64 one must not make
    /// `crate::Inst` bigger than the x86-64 one (40 bytes) does.
    #[test]
    fn an_instruction_is_sixteen_bytes() {
        assert_eq!(std::mem::size_of::<A64Inst>(), 16);
    }

    #[test]
    fn a_partial_word_is_invalid_and_as_long_as_its_bytes() {
        let insts = decode_all(&[0x1f, 0x20, 0x03, 0xd5, 0xc0, 0x03], Vaddr(0x1000));
        assert_eq!(insts.len(), 2);
        assert!(insts[0].is_nop() && insts[0].len() == 4);
        assert!(insts[1].is_invalid());
        assert_eq!(insts[1].len(), 2);
        assert_eq!(insts[1].end(), Vaddr(0x1006));
    }
}
