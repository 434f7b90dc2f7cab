//! Counter increments for instrumentation, and the flag liveness that decides their shape.
//!
//! A probe adds one to a 64-bit counter: `lock incq counter(%rip)`, atomic so that threads
//! never lose counts. `inc` writes OF, SF, ZF, AF and PF (it keeps CF), so where one of those
//! flags is live (a `cmp` in one block read by a `jcc` in the next, for instance) the probe
//! saves them around the increment with `pushfq`/`popfq`, after stepping over the 128-byte
//! red zone a leaf function may keep below its stack pointer. Both shapes are fixed byte
//! sequences with one RIP-relative displacement, written here by hand: they are two
//! instructions' worth of encoding and need no assembler.

use iced_x86::RflagsBits;
use rivet_elf::Vaddr;

use crate::x86_64::inst::{Flow, Inst};

/// A set of the six arithmetic flags, as iced's `RflagsBits`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Flags(pub u32);

impl Flags {
    pub const NONE: Flags = Flags(0);
    pub const ALL: Flags = Flags(
        RflagsBits::OF
            | RflagsBits::SF
            | RflagsBits::ZF
            | RflagsBits::AF
            | RflagsBits::CF
            | RflagsBits::PF,
    );
    /// The flags `inc` writes (all arithmetic flags but CF).
    pub const WRITTEN_BY_INC: Flags =
        Flags(RflagsBits::OF | RflagsBits::SF | RflagsBits::ZF | RflagsBits::AF | RflagsBits::PF);

    pub fn union(self, other: Flags) -> Flags {
        Flags(self.0 | other.0)
    }
    pub fn minus(self, other: Flags) -> Flags {
        Flags(self.0 & !other.0)
    }
    pub fn intersects(self, other: Flags) -> bool {
        self.0 & other.0 != 0
    }
}

impl Inst {
    /// Arithmetic flags the instruction reads.
    pub fn flags_read(&self) -> Flags {
        Flags(self.raw.rflags_read() & Flags::ALL.0)
    }

    /// Arithmetic flags the instruction overwrites (written, set, cleared or left undefined),
    /// so that their earlier values are dead. A call overwrites all of them: the SysV ABI keeps
    /// no arithmetic flag across calls.
    pub fn flags_killed(&self) -> Flags {
        if matches!(self.flow(), Flow::Call { .. } | Flow::IndirectCall) {
            return Flags::ALL;
        }
        let raw = &self.raw;
        Flags(
            (raw.rflags_written()
                | raw.rflags_cleared()
                | raw.rflags_set()
                | raw.rflags_undefined())
                & Flags::ALL.0,
        )
    }

    /// Flags live before this instruction, given those live after it.
    pub fn flags_live_before(&self, live_after: Flags) -> Flags {
        live_after
            .minus(self.flags_killed())
            .union(self.flags_read())
    }
}

/// The shape of a counter increment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProbeShape {
    /// `lock incq disp(%rip)`: flags other than CF are dead here.
    Plain,
    /// The increment wrapped in `lea -128(%rsp),%rsp; pushfq` ... `popfq; lea 128(%rsp),%rsp`.
    SavingFlags,
}

impl ProbeShape {
    /// The shape needed where `live` flags are live.
    pub fn for_live_flags(live: Flags) -> ProbeShape {
        if live.intersects(Flags::WRITTEN_BY_INC) {
            ProbeShape::SavingFlags
        } else {
            ProbeShape::Plain
        }
    }

    pub fn size(self) -> u8 {
        match self {
            ProbeShape::Plain => LOCK_INC_LEN,
            ProbeShape::SavingFlags => 5 + 1 + LOCK_INC_LEN + 1 + 8,
        }
    }
}

/// `lock incq disp32(%rip)`: F0 48 FF 05 disp32.
const LOCK_INC_LEN: u8 = 8;

/// Appends the probe placed at `at` that increments the counter at `counter`. Fails when the
/// counter is out of RIP-relative reach (more than 2 GiB away), which the caller's layout
/// rules out.
pub fn encode_probe(shape: ProbeShape, at: Vaddr, counter: Vaddr, out: &mut Vec<u8>) -> Option<()> {
    let inc_at = match shape {
        ProbeShape::Plain => at,
        ProbeShape::SavingFlags => {
            out.extend_from_slice(&[0x48, 0x8d, 0x64, 0x24, 0x80]); // lea -0x80(%rsp),%rsp
            out.push(0x9c); // pushfq
            at + 6
        }
    };
    let end = inc_at + u64::from(LOCK_INC_LEN);
    let disp = i32::try_from(counter.get() as i64 - end.get() as i64).ok()?;
    out.extend_from_slice(&[0xf0, 0x48, 0xff, 0x05]);
    out.extend_from_slice(&disp.to_le_bytes());
    if shape == ProbeShape::SavingFlags {
        out.push(0x9d); // popfq
        out.extend_from_slice(&[0x48, 0x8d, 0xa4, 0x24, 0x80, 0x00, 0x00, 0x00]); // lea 0x80(%rsp),%rsp
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::x86_64::inst::decode_all;

    fn disasm(bytes: &[u8], at: u64) -> Vec<String> {
        decode_all(bytes, Vaddr(at))
            .iter()
            .map(|i| i.to_att())
            .collect()
    }

    #[test]
    fn plain_probe_is_one_locked_increment() {
        let mut out = Vec::new();
        encode_probe(ProbeShape::Plain, Vaddr(0x1000), Vaddr(0x5008), &mut out).unwrap();
        assert_eq!(out.len(), usize::from(ProbeShape::Plain.size()));
        let text = disasm(&out, 0x1000);
        assert_eq!(text.len(), 1);
        assert!(
            text[0].contains("lock incq") && text[0].contains("0x5008"),
            "{text:?}"
        );
    }

    #[test]
    fn flag_saving_probe_steps_over_the_red_zone() {
        let mut out = Vec::new();
        encode_probe(
            ProbeShape::SavingFlags,
            Vaddr(0x1000),
            Vaddr(0x1000),
            &mut out,
        )
        .unwrap();
        assert_eq!(out.len(), usize::from(ProbeShape::SavingFlags.size()));
        let text = disasm(&out, 0x1000);
        assert_eq!(text.len(), 5, "{text:?}");
        assert!(text[0].contains("lea") && text[0].contains("-0x80(%rsp)"));
        assert!(text[1].contains("pushf"));
        assert!(text[2].contains("lock incq") && text[2].contains("0x1000"));
        assert!(text[3].contains("popf"));
        assert!(text[4].contains("lea") && text[4].contains("0x80(%rsp)"));
    }

    #[test]
    fn liveness_of_flags_through_compare_and_branch() {
        // cmp %esi,%edi ; jl ...: flags live between them, dead before the cmp.
        let insts = decode_all(&[0x39, 0xf7, 0x7c, 0x00], Vaddr(0));
        let live_after_jl = Flags::NONE;
        let before_jl = insts[1].flags_live_before(live_after_jl);
        assert_eq!(
            ProbeShape::for_live_flags(before_jl),
            ProbeShape::SavingFlags
        );
        let before_cmp = insts[0].flags_live_before(before_jl);
        assert_eq!(ProbeShape::for_live_flags(before_cmp), ProbeShape::Plain);
        // A carry-only consumer (adc) keeps the plain shape: inc preserves CF.
        let adc = decode_all(&[0x11, 0xc0], Vaddr(0)); // adc %eax,%eax
        assert_eq!(
            ProbeShape::for_live_flags(adc[0].flags_live_before(Flags::NONE)),
            ProbeShape::Plain
        );
    }

    #[test]
    fn out_of_reach_counter_is_refused() {
        let mut out = Vec::new();
        assert!(encode_probe(ProbeShape::Plain, Vaddr(0), Vaddr(1 << 40), &mut out).is_none());
    }
}
