//! Indirect call promotion on x86-64: the code that replaces `call *OP` with compares of its
//! target against the hottest profiled callees, a direct call to each, and the original call
//! as the fallback.
//!
//! The sequence, for targets T1 (hottest) .. Tn:
//!
//! ```text
//!     [mov OP, %r11]              non-PIE memory operand not using r11: loaded once
//!     cmp  <T1>, <OP>             one compare per target (forms below)
//!     je   L1
//!     ...
//!     cmp  <Tn>, <OP>
//!     je   Ln
//!     call *OP                    the original instruction, unchanged (the fallback)
//!     jmp  join                   (left out when the call never returns)
//! Ln: call Tn
//!     jmp  join
//!     ...
//! L1: call T1                     the hottest falls into the join: one taken branch
//! join:
//! ```
//!
//! Compare forms: without PIC, `cmp $T, %R` (T fits a sign-extended imm32), or for a memory
//! operand `cmp $T, %r11` after the one load, or `cmpq $T, M` when M's address uses r11. With
//! PIC, `lea T(%rip), %r11; cmp %r11, OP`: one scratch register only, so a memory operand is
//! read by each compare (and by the fallback); an operand that is or uses r11 cannot be
//! promoted. r11 is free at a call in the SysV ABI: caller-saved, not an argument, and the
//! flags are dead across a call. Nothing here moves the stack pointer, so every byte of the
//! sequence runs in the unwind state of the original call.
//!
//! The sequence's size does not depend on where it lands or on the targets' addresses (every
//! displacement is fixed before encoding), so the emitter can plan it like any instruction.

use iced_x86::{Code, Encoder, Instruction, MemoryOperand, OpKind, Register};
use rivet_elf::Vaddr;

use crate::Inst;

/// Why a call cannot be promoted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PromotionError {
    pub at: Vaddr,
    pub reason: &'static str,
}

/// The operand of the indirect call, as the compares read it.
enum Operand {
    Register(Register),
    Memory(MemoryOperand),
}

fn operand(call: &Inst) -> Result<(Operand, bool), PromotionError> {
    let raw = &call.x86().raw;
    let fail = |reason| PromotionError {
        at: call.addr(),
        reason,
    };
    if raw.code() != Code::Call_rm64 {
        return Err(fail("not a 64-bit indirect call"));
    }
    match raw.op0_kind() {
        OpKind::Register => {
            let reg = raw.op0_register();
            if reg.size() != 8 || reg == Register::RSP {
                return Err(fail("an unusual register operand"));
            }
            Ok((Operand::Register(reg), reg == Register::R11))
        }
        OpKind::Memory => {
            let base = raw.memory_base();
            let index = raw.memory_index();
            if raw.memory_size().size() != 8 || raw.segment_prefix() != Register::None {
                return Err(fail("an unusual memory operand"));
            }
            let displ_size = if base == Register::RIP || base == Register::None {
                8
            } else if raw.memory_displacement64() == 0 {
                0
            } else {
                1
            };
            let mem = MemoryOperand::new(
                base,
                index,
                raw.memory_index_scale(),
                raw.memory_displacement64() as i64,
                displ_size,
                false,
                Register::None,
            );
            let uses_r11 = base == Register::R11 || index == Register::R11;
            Ok((Operand::Memory(mem), uses_r11))
        }
        _ => Err(fail("not an indirect call")),
    }
}

/// How the compares of one site are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Form {
    /// `cmp $T, %R`.
    ImmRegister,
    /// `mov M, %r11` once, then `cmp $T, %r11`.
    LoadOnce,
    /// `cmpq $T, M`.
    ImmMemory,
    /// `lea T(%rip), %r11; cmp %r11, OP`.
    Pic,
}

/// The shape of one promoted site's code: what the emitter plans with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PromotionShape {
    form: Form,
    targets: u8,
    noreturn: bool,
    /// Whether the `je`s reach their calls in their short form.
    short_je: bool,
    /// Bytes of the optional load, of one compare, of the fallback call.
    load: u8,
    compare: u8,
    fallback: u8,
}

const JE_SHORT: u64 = 2;
const JE_NEAR: u64 = 6;
const CALL: u64 = 5;
const JMP_SHORT: u64 = 2;

impl PromotionShape {
    /// How `call` (an indirect call) is promoted to `targets` direct calls (1..=8), in
    /// position-independent code or not; a call that `noreturn` needs no jumps to a join.
    pub fn new(
        call: &Inst,
        targets: usize,
        pic: bool,
        noreturn: bool,
    ) -> Result<PromotionShape, PromotionError> {
        let fail = |reason| PromotionError {
            at: call.addr(),
            reason,
        };
        if !(1..=8).contains(&targets) {
            return Err(fail("between 1 and 8 targets"));
        }
        let (op, uses_r11) = operand(call)?;
        let form = match (&op, pic, uses_r11) {
            (_, true, true) => return Err(fail("the operand uses r11, the only scratch register")),
            (_, true, false) => Form::Pic,
            (Operand::Register(_), false, _) => Form::ImmRegister,
            (Operand::Memory(_), false, false) => Form::LoadOnce,
            (Operand::Memory(_), false, true) => Form::ImmMemory,
        };
        let mut shape = PromotionShape {
            form,
            targets: targets as u8,
            noreturn,
            short_je: true,
            load: 0,
            compare: 0,
            fallback: call.len(),
        };
        // Sizes from encoding at a dummy place and target: no form here depends on either.
        let probe = Vaddr(0x1000);
        shape.load = shape.load_bytes(call, probe)?.len() as u8;
        shape.compare = shape.compare_bytes(call, probe, Vaddr(0x2000))?.len() as u8;
        // The farthest `je` is the first one, to the last direct call.
        let after_first_je =
            shape.head_size() - u64::from(shape.load) - u64::from(shape.compare) - JE_SHORT
                + shape.fallback_tail();
        let direct = shape.direct_block();
        let farthest = after_first_je + direct * (targets as u64 - 1);
        shape.short_je = farthest <= 127;
        Ok(shape)
    }

    fn je(&self) -> u64 {
        if self.short_je { JE_SHORT } else { JE_NEAR }
    }

    /// Bytes from the start to the fallback call.
    fn head_size(&self) -> u64 {
        u64::from(self.load) + u64::from(self.targets) * (u64::from(self.compare) + self.je())
    }

    /// The fallback call and its jump to the join.
    fn fallback_tail(&self) -> u64 {
        u64::from(self.fallback) + if self.noreturn { 0 } else { JMP_SHORT }
    }

    /// One direct call and its jump to the join (the last one has none).
    fn direct_block(&self) -> u64 {
        CALL + if self.noreturn { 0 } else { JMP_SHORT }
    }

    /// Total bytes of the sequence.
    pub fn size(&self) -> u64 {
        self.head_size() + self.fallback_tail() + self.direct_block() * u64::from(self.targets)
            - if self.noreturn { 0 } else { JMP_SHORT }
    }

    /// Offset of the fallback call from the start of the sequence.
    pub fn fallback_offset(&self) -> u64 {
        self.head_size()
    }

    /// Instructions that run once whichever way the sequence goes before its first compare
    /// (the load into r11), and instructions of each compare before its `je` (the `lea` and
    /// the `cmp` with PIC): what the dyno stats add for a promoted call.
    pub fn instructions(&self) -> (u64, u64) {
        match self.form {
            Form::LoadOnce => (1, 1),
            Form::Pic => (0, 2),
            Form::ImmRegister | Form::ImmMemory => (0, 1),
        }
    }

    fn load_bytes(&self, call: &Inst, at: Vaddr) -> Result<Vec<u8>, PromotionError> {
        if self.form != Form::LoadOnce {
            return Ok(Vec::new());
        }
        let Operand::Memory(mem) = operand(call)?.0 else {
            return Ok(Vec::new());
        };
        encode(
            call,
            Instruction::with2(Code::Mov_r64_rm64, Register::R11, mem),
            at,
        )
    }

    fn compare_bytes(
        &self,
        call: &Inst,
        at: Vaddr,
        target: Vaddr,
    ) -> Result<Vec<u8>, PromotionError> {
        let fail = |reason| PromotionError {
            at: call.addr(),
            reason,
        };
        let imm = || {
            i32::try_from(target.get() as i64)
                .map_err(|_| fail("a target address that does not fit a 32-bit immediate"))
        };
        let (op, _) = operand(call)?;
        match (self.form, op) {
            (Form::ImmRegister, Operand::Register(r)) => encode(
                call,
                Instruction::with2(Code::Cmp_rm64_imm32, r, imm()?),
                at,
            ),
            (Form::LoadOnce, _) => encode(
                call,
                Instruction::with2(Code::Cmp_rm64_imm32, Register::R11, imm()?),
                at,
            ),
            (Form::ImmMemory, Operand::Memory(m)) => encode(
                call,
                Instruction::with2(Code::Cmp_rm64_imm32, m, imm()?),
                at,
            ),
            (Form::Pic, op) => {
                let lea_mem = MemoryOperand::new(
                    Register::RIP,
                    Register::None,
                    1,
                    target.get() as i64,
                    8,
                    false,
                    Register::None,
                );
                let mut out = encode(
                    call,
                    Instruction::with2(Code::Lea_r64_m, Register::R11, lea_mem),
                    at,
                )?;
                let cmp_at = at + out.len() as u64;
                let cmp = match op {
                    Operand::Register(r) => {
                        Instruction::with2(Code::Cmp_rm64_r64, r, Register::R11)
                    }
                    Operand::Memory(m) => Instruction::with2(Code::Cmp_rm64_r64, m, Register::R11),
                };
                out.extend(encode(call, cmp, cmp_at)?);
                Ok(out)
            }
            _ => Err(fail("an operand the form does not fit")),
        }
    }

    /// Appends the sequence placed at `at`: compares against `targets` (new addresses, in
    /// the order of the shape's targets, hottest first), the `fallback` (the original call's
    /// bytes as copied to its place in the sequence, `at + fallback_offset()`), the direct
    /// calls.
    pub fn encode(
        &self,
        call: &Inst,
        at: Vaddr,
        targets: &[Vaddr],
        fallback: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), PromotionError> {
        let fail = |reason| PromotionError {
            at: call.addr(),
            reason,
        };
        if targets.len() != usize::from(self.targets)
            || fallback.len() != usize::from(self.fallback)
        {
            return Err(fail("the plan and the sequence disagree"));
        }
        let start = out.len();
        let here = |out: &Vec<u8>| at + (out.len() - start) as u64;
        let size = self.size();
        let join = at + size;
        // Where each direct call lands: Ln first after the fallback, L1 last.
        let directs_at = at + self.head_size() + self.fallback_tail();
        let label = |k: usize| {
            // Target k (0 = hottest) is placed (n - 1 - k)th.
            directs_at + self.direct_block() * (targets.len() - 1 - k) as u64
        };
        let load = self.load_bytes(call, here(out))?;
        out.extend(load);
        for (k, &t) in targets.iter().enumerate() {
            let cmp = self.compare_bytes(call, here(out), t)?;
            if cmp.len() != usize::from(self.compare) {
                return Err(fail("a compare changed size"));
            }
            out.extend(cmp);
            let je_end = here(out) + self.je();
            let rel = label(k).get() as i64 - je_end.get() as i64;
            if self.short_je {
                let rel = i8::try_from(rel).map_err(|_| fail("a short je out of reach"))?;
                out.extend([0x74, rel as u8]);
            } else {
                let rel = i32::try_from(rel).map_err(|_| fail("a je out of reach"))?;
                out.extend([0x0f, 0x84]);
                out.extend(rel.to_le_bytes());
            }
        }
        out.extend_from_slice(fallback);
        let jmp_join = |out: &mut Vec<u8>, from: Vaddr| -> Result<(), PromotionError> {
            let rel = join.get() as i64 - (from.get() + JMP_SHORT) as i64;
            let rel = i8::try_from(rel).map_err(|_| fail("a jump to the join out of reach"))?;
            out.extend([0xeb, rel as u8]);
            Ok(())
        };
        if !self.noreturn {
            jmp_join(out, here(out))?;
        }
        for k in (0..targets.len()).rev() {
            debug_assert_eq!(here(out), label(k));
            let rel = targets[k].get() as i64 - (here(out).get() + CALL) as i64;
            let rel = i32::try_from(rel).map_err(|_| fail("a target out of reach of a call"))?;
            out.push(0xe8);
            out.extend(rel.to_le_bytes());
            if k > 0 && !self.noreturn {
                jmp_join(out, here(out))?;
            }
        }
        if (out.len() - start) as u64 != size {
            return Err(fail("the sequence's size differs from its plan"));
        }
        Ok(())
    }
}

fn encode(
    call: &Inst,
    inst: Result<Instruction, iced_x86::IcedError>,
    at: Vaddr,
) -> Result<Vec<u8>, PromotionError> {
    let fail = |reason| PromotionError {
        at: call.addr(),
        reason,
    };
    let inst = inst.map_err(|_| fail("iced refused the operand"))?;
    let mut encoder = Encoder::new(64);
    encoder
        .encode(&inst, at.get())
        .map_err(|_| fail("the operand cannot be re-encoded"))?;
    Ok(encoder.take_buffer())
}

/// A promoted call site as read back from code (`read_promotion`), for verification.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadPromotion {
    /// Instructions the sequence takes, the fallback included.
    pub insts: usize,
    /// The compared addresses, in compare order; each `je` goes to a direct call of it.
    pub targets: Vec<Vaddr>,
    /// Position of the fallback (the original call) in the sequence.
    pub fallback: usize,
    /// Where every path through the sequence goes on: right after it.
    pub join: Vaddr,
}

/// The value of an operand, compared structurally (a RIP-relative operand by the address it
/// names, so copies at different places compare equal).
fn same_operand(a: &Instruction, a_op: u32, b: &Instruction, b_op: u32) -> bool {
    match (a.op_kind(a_op), b.op_kind(b_op)) {
        (OpKind::Register, OpKind::Register) => a.op_register(a_op) == b.op_register(b_op),
        (OpKind::Memory, OpKind::Memory) => {
            a.memory_base() == b.memory_base()
                && a.memory_index() == b.memory_index()
                && a.memory_index_scale() == b.memory_index_scale()
                && a.memory_displacement64() == b.memory_displacement64()
                && a.segment_prefix() == b.segment_prefix()
        }
        _ => false,
    }
}

fn uses_r11(i: &Instruction, op: u32) -> bool {
    match i.op_kind(op) {
        OpKind::Register => i.op_register(op) == Register::R11,
        OpKind::Memory => i.memory_base() == Register::R11 || i.memory_index() == Register::R11,
        _ => false,
    }
}

/// Reads `code` (decoded output, starting where the indirect `call` of the input was
/// written) as a promoted call site: compares of the value `call` would call against
/// constants, each followed by a `je` to a direct call of that same constant; the fallback
/// (the instruction whose position this returns, for the caller to compare with `call`);
/// direct calls that reach the join, right after the sequence, by falling into it or by a
/// `jmp` there. `noreturn`: the input's call never returns, so nothing needs to come back.
/// Decoded independently of how the emitter wrote it; anything else is an error.
pub fn read_promotion(
    call: &Inst,
    code: &[Inst],
    noreturn: bool,
) -> Result<ReadPromotion, &'static str> {
    let c = &call.x86().raw;
    if c.code() != Code::Call_rm64 {
        return Err("not a 64-bit indirect call");
    }
    let raw = |k: usize| code.get(k).map(|i| &i.x86().raw);
    let mut k = 0;
    // `mov OP, %r11`: later compares may read r11 for OP.
    let mut loaded = false;
    if let Some(m) = raw(0)
        && m.code() == Code::Mov_r64_rm64
        && m.op0_register() == Register::R11
        && same_operand(m, 1, c, 0)
        && !uses_r11(c, 0)
    {
        loaded = true;
        k = 1;
    }
    let mut compares: Vec<(Vaddr, Vaddr)> = Vec::new();
    loop {
        let Some(i) = raw(k) else {
            return Err("the sequence is cut short");
        };
        let constant = match i.code() {
            Code::Cmp_rm64_imm32 => {
                let reads_op = same_operand(i, 0, c, 0)
                    || (loaded
                        && i.op0_kind() == OpKind::Register
                        && i.op0_register() == Register::R11);
                if !reads_op {
                    return Err("a compare of something else than the call's target");
                }
                k += 1;
                Vaddr(i.immediate32to64() as u64)
            }
            Code::Lea_r64_m
                if i.op0_register() == Register::R11
                    && i.memory_base() == Register::RIP
                    && i.memory_index() == Register::None =>
            {
                let Some(cmp) = raw(k + 1) else {
                    return Err("the sequence is cut short");
                };
                if cmp.code() != Code::Cmp_rm64_r64
                    || cmp.op1_register() != Register::R11
                    || !same_operand(cmp, 0, c, 0)
                    || uses_r11(c, 0)
                {
                    return Err("an address in r11 compared with something else");
                }
                k += 2;
                Vaddr(i.memory_displacement64())
            }
            _ => break,
        };
        let je = raw(k).ok_or("the sequence is cut short")?;
        if !matches!(je.code(), Code::Je_rel8_64 | Code::Je_rel32_64) {
            return Err("a compare not followed by je");
        }
        compares.push((constant, Vaddr(je.near_branch_target())));
        k += 1;
    }
    if compares.is_empty() {
        return Err("no compare");
    }
    let fallback = k;
    let fallback_end = code[fallback].end();
    k += 1;
    // The direct calls: the sequence ends with the last of them.
    let end = compares
        .iter()
        .map(|&(_, label)| label + CALL)
        .max()
        .unwrap_or(fallback_end);
    let mut calls_at: Vec<(Vaddr, Vaddr)> = Vec::new();
    let mut jumps: Vec<Vaddr> = Vec::new();
    let mut previous_returns_here = false;
    while code.get(k).is_some_and(|i| i.addr() < end) {
        let i = &code[k].x86().raw;
        match i.code() {
            Code::Call_rel32_64 => {
                if previous_returns_here {
                    return Err("a call returns into the next direct call");
                }
                calls_at.push((code[k].addr(), Vaddr(i.near_branch_target())));
                previous_returns_here = !noreturn;
            }
            Code::Jmp_rel8_64 | Code::Jmp_rel32_64 => {
                jumps.push(Vaddr(i.near_branch_target()));
                previous_returns_here = false;
            }
            _ => return Err("an unexpected instruction among the direct calls"),
        }
        k += 1;
    }
    if code.get(k - 1).is_none_or(|i| i.end() != end) {
        return Err("the direct calls do not end where the sequence does");
    }
    // The fallback must not run into a direct call.
    if !noreturn
        && code
            .get(fallback + 1)
            .is_none_or(|i| !matches!(i.x86().raw.code(), Code::Jmp_rel8_64 | Code::Jmp_rel32_64))
    {
        return Err("the fallback runs into a direct call");
    }
    if jumps.iter().any(|&j| j != end) {
        return Err("a jump that does not go to the join");
    }
    for &(constant, label) in &compares {
        if label < fallback_end {
            return Err("a je into the compares");
        }
        match calls_at.iter().find(|(at, _)| *at == label) {
            Some(&(_, target)) if target == constant => {}
            _ => return Err("a je that does not go to a direct call of the compared address"),
        }
    }
    Ok(ReadPromotion {
        insts: k,
        targets: compares.iter().map(|c| c.0).collect(),
        fallback,
        join: end,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::x86_64::inst::decode_all;

    fn text(bytes: &[u8], at: u64) -> Vec<String> {
        decode_all(bytes, Vaddr(at))
            .iter()
            .map(|i| i.to_asm())
            .collect()
    }

    fn promote(call_bytes: &[u8], targets: &[u64], pic: bool, noreturn: bool) -> Vec<String> {
        let call = decode_all(call_bytes, Vaddr(0x1000))[0];
        let shape = PromotionShape::new(&call, targets.len(), pic, noreturn).unwrap();
        let at = Vaddr(0x40_0000);
        // The fallback as copied: a register or base-relative operand has no displacement to fix.
        let fallback = call_bytes.to_vec();
        let targets: Vec<Vaddr> = targets.iter().map(|&t| Vaddr(t)).collect();
        let mut out = Vec::new();
        shape
            .encode(&call, at, &targets, &fallback, &mut out)
            .unwrap();
        assert_eq!(out.len() as u64, shape.size());
        text(&out, at.get())
    }

    #[test]
    fn register_operand_without_pic_compares_immediates() {
        // call *%rax, two targets
        let t = promote(&[0xff, 0xd0], &[0x40_1000, 0x40_2000], false, false);
        assert_eq!(t.len(), 9, "{t:?}");
        assert!(
            t[0].starts_with("cmp") && t[0].contains("0x401000") && t[0].contains("%rax"),
            "{t:?}"
        );
        assert!(t[1].starts_with("je"), "{t:?}");
        assert!(t[2].contains("0x402000"), "{t:?}");
        assert!(t[4].starts_with("call") && t[4].contains("*%rax"), "{t:?}");
        assert!(t[5].starts_with("jmp"), "{t:?}");
        assert!(
            t[6].starts_with("call") && t[6].contains("0x402000"),
            "{t:?}"
        );
        assert!(
            t[8].starts_with("call") && t[8].contains("0x401000"),
            "{t:?}"
        );
    }

    #[test]
    fn memory_operand_is_loaded_once_without_pic() {
        // call *0x8(%rax)
        let t = promote(&[0xff, 0x50, 0x08], &[0x40_1000, 0x40_2000], false, false);
        assert!(
            t[0].starts_with("mov") && t[0].contains("8(%rax),%r11"),
            "{t:?}"
        );
        assert!(t[1].starts_with("cmp") && t[1].contains("%r11"), "{t:?}");
        assert_eq!(
            t.iter().filter(|s| s.contains("(%rax)")).count(),
            2,
            "{t:?}"
        );
    }

    #[test]
    fn pic_uses_lea_into_r11_and_refuses_r11_operands() {
        let t = promote(&[0xff, 0xd2], &[0x40_1000], true, false); // call *%rdx
        assert!(t[0].starts_with("lea") && t[0].contains("%r11"), "{t:?}");
        assert!(
            t[1].starts_with("cmp") && t[1].contains("%r11,%rdx"),
            "{t:?}"
        );
        let r11 = decode_all(&[0x41, 0xff, 0xd3], Vaddr(0x1000))[0]; // call *%r11
        assert!(PromotionShape::new(&r11, 1, true, false).is_err());
        // Without PIC an r11 operand compares against immediates.
        let t = promote(&[0x41, 0xff, 0xd3], &[0x40_1000], false, false);
        assert!(t[0].contains("%r11") && t[0].contains("0x401000"), "{t:?}");
        // A memory operand based on r11 is compared in memory, not loaded into r11.
        let t = promote(&[0x41, 0xff, 0x53, 0x10], &[0x40_1000], false, false); // call *0x10(%r11)
        assert!(
            t[0].starts_with("cmp") && t[0].contains("0x10(%r11)"),
            "{t:?}"
        );
    }

    #[test]
    fn noreturn_calls_need_no_join() {
        let t = promote(&[0xff, 0xd0], &[0x40_1000, 0x40_2000], false, true);
        assert!(!t.iter().any(|s| s.starts_with("jmp")), "{t:?}");
    }

    #[test]
    fn immediates_that_do_not_fit_are_refused() {
        let call = decode_all(&[0xff, 0xd0], Vaddr(0x1000))[0];
        let shape = PromotionShape::new(&call, 1, false, false).unwrap();
        let mut out = Vec::new();
        assert!(
            shape
                .encode(
                    &call,
                    Vaddr(0x1000),
                    &[Vaddr(1 << 40)],
                    &[0xff, 0xd0],
                    &mut out
                )
                .is_err()
        );
    }

    #[test]
    fn written_sequences_read_back_and_corruptions_do_not() {
        let cases: [(&[u8], bool); 4] = [
            (&[0xff, 0xd0], false),
            (&[0xff, 0x50, 0x08], false),
            (&[0xff, 0x50, 0x08], true),
            (&[0x41, 0xff, 0x53, 0x10], false),
        ];
        for (bytes, pic) in cases {
            for noreturn in [false, true] {
                let call = decode_all(bytes, Vaddr(0x1000))[0];
                let shape = PromotionShape::new(&call, 2, pic, noreturn).unwrap();
                let at = Vaddr(0x40_0000);
                let targets = [Vaddr(0x40_1000), Vaddr(0x40_2000)];
                let mut out = Vec::new();
                shape.encode(&call, at, &targets, bytes, &mut out).unwrap();
                let code = decode_all(&out, at);
                let read = read_promotion(&call, &code, noreturn).unwrap();
                assert_eq!(read.targets, targets);
                assert_eq!(read.insts, code.len());
                assert_eq!(read.join, at + out.len() as u64);
                assert_eq!(code[read.fallback].len(), call.len());
                // A direct call to another function than the one compared.
                let last = out.len() - 4;
                out[last] ^= 0x10;
                let code = decode_all(&out, at);
                assert!(read_promotion(&call, &code, noreturn).is_err());
            }
        }
    }
}
