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

use crate::probe::{IndirectProbeError, ProbeShape};
use crate::x86_64::inst::X86Inst;
use crate::{Flow, Inst};

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

impl X86Inst {
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

impl ProbeShape {
    /// The x86-64 shape needed where `live` flags are live.
    pub(crate) fn for_live_flags(live: Flags) -> ProbeShape {
        if live.intersects(Flags::WRITTEN_BY_INC) {
            ProbeShape::SavingFlags
        } else {
            ProbeShape::Plain
        }
    }
}

/// Bytes of an x86-64 probe of `shape`.
pub(crate) fn probe_size(shape: ProbeShape) -> u8 {
    match shape {
        ProbeShape::SavingFlags => 5 + 1 + LOCK_INC_LEN + 1 + 8,
        _ => LOCK_INC_LEN,
    }
}

/// `lock incq disp32(%rip)`: F0 48 FF 05 disp32.
const LOCK_INC_LEN: u8 = 8;

/// Appends the probe placed at `at` that increments the counter at `counter`. Fails when the
/// counter is out of RIP-relative reach (more than 2 GiB away), which the caller's layout
/// rules out. The AArch64 shapes are not x86-64 code: `None`.
pub fn encode_probe(shape: ProbeShape, at: Vaddr, counter: Vaddr, out: &mut Vec<u8>) -> Option<()> {
    let inc_at = match shape {
        ProbeShape::Plain => at,
        ProbeShape::Lse | ProbeShape::LlSc => return None,
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
            .map(|i| i.to_asm())
            .collect()
    }

    #[test]
    fn plain_probe_is_one_locked_increment() {
        let mut out = Vec::new();
        encode_probe(ProbeShape::Plain, Vaddr(0x1000), Vaddr(0x5008), &mut out).unwrap();
        assert_eq!(out.len(), usize::from(probe_size(ProbeShape::Plain)));
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
        assert_eq!(out.len(), usize::from(probe_size(ProbeShape::SavingFlags)));
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

/// `mov <the branch's operand>, %rax`, placed at `at`, for a stack pointer lowered by
/// `rsp_delta` bytes since the branch's operand was computed.
fn operand_to_rax(branch: &Inst, at: Vaddr, rsp_delta: i64) -> Result<Vec<u8>, IndirectProbeError> {
    use iced_x86::{Code, Encoder, Instruction, MemoryOperand, OpKind, Register};
    let raw = &branch.x86().raw;
    let fail = |reason| IndirectProbeError {
        at: branch.addr(),
        reason,
    };
    let mov = match raw.op0_kind() {
        OpKind::Register => {
            let reg = raw.op0_register();
            if reg.size() != 8 || reg == Register::RSP {
                return Err(fail("not a 64-bit register target"));
            }
            Instruction::with2(Code::Mov_r64_rm64, Register::RAX, reg)
        }
        OpKind::Memory => {
            let base = raw.memory_base();
            let index = raw.memory_index();
            if index == Register::RSP || raw.memory_size().size() != 8 {
                return Err(fail("an unusual memory operand"));
            }
            let mut displ = raw.memory_displacement64() as i64;
            if base == Register::RSP {
                displ += rsp_delta;
            }
            let mem = MemoryOperand::new(
                base,
                index,
                raw.memory_index_scale(),
                displ,
                if base == Register::RIP || base == Register::None {
                    8
                } else {
                    1
                },
                false,
                raw.segment_prefix(),
            );
            Instruction::with2(Code::Mov_r64_rm64, Register::RAX, mem)
        }
        _ => return Err(fail("not an indirect branch")),
    }
    .map_err(|_| fail("iced refused the operand"))?;
    let mut encoder = Encoder::new(64);
    encoder
        .encode(&mov, at.get())
        .map_err(|_| fail("the operand cannot be re-encoded"))?;
    Ok(encoder.take_buffer())
}

// The sequence before an indirect branch: step over the red zone, save rax and r11, load the
// target into rax and the site's table into r11, call the runtime's recorder, restore.
const IND_HEAD: [u8; 8] = [0x48, 0x8d, 0x64, 0x24, 0x80, 0x50, 0x41, 0x53];
const IND_TAIL: [u8; 11] = [
    0x41, 0x5b, 0x58, 0x48, 0x8d, 0xa4, 0x24, 0x80, 0x00, 0x00, 0x00,
];
/// rsp moved by the head: the red zone and two pushes.
const IND_RSP_DELTA: i64 = 128 + 16;

/// Size of the sequence that records the target of indirect `branch` (`call`/`jmp` through a
/// register or memory), or why it cannot be recorded.
pub fn indirect_probe_size(branch: &Inst) -> Result<u8, IndirectProbeError> {
    let mov = operand_to_rax(branch, branch.addr(), IND_RSP_DELTA)?;
    Ok((IND_HEAD.len() + mov.len() + 7 + 5 + IND_TAIL.len()) as u8)
}

/// Appends, at `at`, the sequence recording the target of `branch` into the site table at
/// `table` through the runtime's recorder at `recorder` (which keeps every register and flag).
pub fn encode_indirect_probe(
    branch: &Inst,
    at: Vaddr,
    table: Vaddr,
    recorder: Vaddr,
    out: &mut Vec<u8>,
) -> Result<(), IndirectProbeError> {
    let fail = |reason| IndirectProbeError {
        at: branch.addr(),
        reason,
    };
    let start = out.len();
    out.extend_from_slice(&IND_HEAD);
    let mov_at = at + IND_HEAD.len() as u64;
    let mov = operand_to_rax(branch, mov_at, IND_RSP_DELTA)?;
    out.extend_from_slice(&mov);
    // lea table(%rip),%r11
    let lea_end = mov_at + mov.len() as u64 + 7;
    let disp = i32::try_from(table.get() as i64 - lea_end.get() as i64)
        .map_err(|_| fail("site table out of reach"))?;
    out.extend_from_slice(&[0x4c, 0x8d, 0x1d]);
    out.extend_from_slice(&disp.to_le_bytes());
    // call recorder
    let call_end = lea_end + 5;
    let rel = i32::try_from(recorder.get() as i64 - call_end.get() as i64)
        .map_err(|_| fail("recorder out of reach"))?;
    out.push(0xe8);
    out.extend_from_slice(&rel.to_le_bytes());
    out.extend_from_slice(&IND_TAIL);
    debug_assert_eq!(
        out.len() - start,
        usize::from(indirect_probe_size(branch).unwrap_or(0))
    );
    Ok(())
}

#[cfg(test)]
mod indirect_tests {
    use super::*;
    use crate::x86_64::inst::decode_all;

    fn att(bytes: &[u8], at: u64) -> Vec<String> {
        decode_all(bytes, Vaddr(at))
            .iter()
            .map(|i| i.to_asm())
            .collect()
    }

    #[test]
    fn register_memory_stack_and_rip_relative_operands() {
        // call *%rdx ; call *0x10(%rax) ; call *0x8(%rsp) ; jmp *0x2000(%rip)
        let cases: [(&[u8], &str); 4] = [
            (&[0xff, 0xd2], "%rdx,%rax"),
            (&[0xff, 0x50, 0x10], "0x10(%rax),%rax"),
            (&[0xff, 0x54, 0x24, 0x08], "0x98(%rsp),%rax"),
            (&[0xff, 0x25, 0x00, 0x20, 0x00, 0x00], "# 0x3006"),
        ];
        for (bytes, operand) in cases {
            let branch = decode_all(bytes, Vaddr(0x1000))[0];
            let mut out = Vec::new();
            encode_indirect_probe(
                &branch,
                Vaddr(0x1000),
                Vaddr(0x9000),
                Vaddr(0x5000),
                &mut out,
            )
            .unwrap();
            assert_eq!(
                out.len(),
                usize::from(indirect_probe_size(&branch).unwrap())
            );
            let text = att(&out, 0x1000);
            assert_eq!(text.len(), 9, "{text:?}");
            assert!(
                text[3].starts_with("mov") && text[3].contains(operand),
                "{text:?}"
            );
            assert!(
                text[4].contains("lea") && text[4].contains("%r11"),
                "{text:?}"
            );
            assert!(
                text[5].contains("call") && text[5].contains("0x5000"),
                "{text:?}"
            );
        }
    }
}
