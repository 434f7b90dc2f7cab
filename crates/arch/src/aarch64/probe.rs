//! AArch64 counter increments and indirect-branch target recorders.
//!
//! Linux AArch64 has no red zone: memory below the stack pointer may be overwritten at any
//! moment (a signal frame lands there), so a probe spills only below a stack pointer it has
//! already moved. The spill is one pre-indexed `stp` (the move and the store are a single
//! instruction, so a signal can never see the registers stored above the stack pointer) and
//! the restore one post-indexed `ldp`; the stack pointer stays 16-byte aligned throughout.
//!
//! No probe writes NZCV (the increment uses `stadd`, or `ldxr`/`add`/`stxr`/`cbnz`, none of
//! which sets flags), so unlike x86-64's `lock inc` a probe needs no flag save wherever it
//! goes; the recorder of indirect targets compares, and saves NZCV with `mrs`/`msr`.
//!
//! The increment is atomic, so threads never lose counts: `stadd` (LSE, Armv8.1 and every
//! Neoverse core) or, for Armv8.0, an LL/SC loop (`ldxr`..`stxr`, retried while the store
//! fails). Which one is chosen at instrumentation time ([`Atomics`]).

use rivet_elf::Vaddr;

use super::asm::{Asm, SP};
use crate::probe::{Atomics, IndirectProbeError};

/// Scratch registers of the probes: AAPCS64's intra-procedure-call registers, which a
/// veneer may clobber anyway, so code around a probe is least likely to keep values there
/// (the probe saves them all the same).
const IP0: u8 = 16;
const IP1: u8 = 17;
/// The LL/SC loop's status register (saved too).
const STATUS: u8 = 15;
/// The link register, which the recorder call overwrites.
const LR: u8 = 30;

/// Bytes of the increment with `atomics`.
pub(crate) fn probe_size(atomics: Atomics) -> u8 {
    match atomics {
        // stp; adrp; add; mov; stadd; ldp.
        Atomics::Lse => 24,
        // stp; str; adrp; add; ldxr; add; stxr; cbnz; ldr; ldp.
        Atomics::LlSc => 40,
    }
}

/// Emits an atomic `[addr] += 1`, using `value` and (LL/SC) `status` as scratch.
pub fn emit_increment(a: &mut Asm, atomics: Atomics, addr: u8, value: u8, status: u8) {
    match atomics {
        Atomics::Lse => {
            a.mov_imm(value, 1);
            a.stadd(value, addr);
        }
        Atomics::LlSc => {
            let retry = a.label();
            a.bind(retry);
            a.ldxr(value, addr);
            a.add_imm(value, value, 1);
            a.stxr(status, value, addr);
            a.cbnz_w(status, retry);
        }
    }
}

/// Emits an atomic `[addr] += value`, using `old` and (LL/SC) `status` as scratch.
pub fn emit_add(a: &mut Asm, atomics: Atomics, addr: u8, value: u8, old: u8, status: u8) {
    match atomics {
        Atomics::Lse => a.stadd(value, addr),
        Atomics::LlSc => {
            let retry = a.label();
            a.bind(retry);
            a.ldxr(old, addr);
            a.add(old, old, value, 0);
            a.stxr(status, old, addr);
            a.cbnz_w(status, retry);
        }
    }
}

/// Appends the probe placed at `at` that increments the 64-bit counter at `counter`; `None`
/// when the counter is out of `adrp` reach (+-4 GiB).
pub(crate) fn encode_probe(
    atomics: Atomics,
    at: Vaddr,
    counter: Vaddr,
    out: &mut Vec<u8>,
) -> Option<()> {
    let mut a = Asm::new(at.get());
    match atomics {
        Atomics::Lse => a.stp_pre(IP0, IP1, SP, -16),
        Atomics::LlSc => {
            a.stp_pre(IP0, IP1, SP, -32);
            a.str(STATUS, SP, 16);
        }
    }
    a.adr_address(IP0, counter.get());
    emit_increment(&mut a, atomics, IP0, IP1, STATUS);
    match atomics {
        Atomics::Lse => a.ldp_post(IP0, IP1, SP, 16),
        Atomics::LlSc => {
            a.ldr(STATUS, SP, 16);
            a.ldp_post(IP0, IP1, SP, 32);
        }
    }
    let code = a.finish().ok()?;
    debug_assert_eq!(code.len(), usize::from(probe_size(atomics)));
    out.extend_from_slice(&code);
    Some(())
}

/// The register an indirect call or jump branches through, if its target can be recorded:
/// `blr`/`br` on a general register. The pointer-authenticating forms (`blraa`, `braa`, ...)
/// branch to a signed pointer, which names no address until authenticated.
fn target_register(branch: &crate::Inst) -> Result<u8, IndirectProbeError> {
    let fail = |reason| IndirectProbeError {
        at: branch.addr(),
        reason,
    };
    let decoded = branch
        .aarch64()
        .decoded()
        .ok_or(fail("not an instruction"))?;
    let reg = match decoded.control {
        super::Control::IndirectCall { reg } | super::Control::IndirectJump { reg } => reg,
        _ => return Err(fail("not an indirect branch")),
    };
    // `br xn` is 0xd61f0000 | n << 5, `blr xn` 0xd63f0000 | n << 5; the authenticating
    // forms set other bits.
    if decoded.word & 0xffdf_fc1f != 0xd61f_0000 {
        return Err(fail(
            "a pointer-authenticated branch (its target is signed)",
        ));
    }
    if reg == 31 {
        return Err(fail("a branch through the zero register"));
    }
    Ok(reg)
}

/// Bytes of the recorder call placed before `branch`.
pub(crate) fn indirect_probe_size(branch: &crate::Inst) -> Result<u8, IndirectProbeError> {
    target_register(branch).map(|_| 32)
}

/// Appends, at `at`, the sequence recording the target of `branch` into the site table at
/// `table` through the runtime's recorder at `recorder`: called with the target in x16 and
/// the table in x17, it keeps every register and NZCV.
pub(crate) fn encode_indirect_probe(
    branch: &crate::Inst,
    at: Vaddr,
    table: Vaddr,
    recorder: Vaddr,
    out: &mut Vec<u8>,
) -> Result<(), IndirectProbeError> {
    let fail = |reason| IndirectProbeError {
        at: branch.addr(),
        reason,
    };
    let reg = target_register(branch)?;
    let mut a = Asm::new(at.get());
    a.stp_pre(IP0, IP1, SP, -32);
    a.str(LR, SP, 16);
    // The target is read before x17 changes (it may be the branch's register).
    a.mov(IP0, reg);
    a.adr_address(IP1, table.get());
    let call_at = a.here();
    let bl = super::bl(call_at, recorder.get()).map_err(|_| fail("recorder out of reach"))?;
    a.word(bl);
    a.ldr(LR, SP, 16);
    a.ldp_post(IP0, IP1, SP, 32);
    let code = a.finish().map_err(|_| fail("site table out of reach"))?;
    debug_assert_eq!(code.len(), 32);
    out.extend_from_slice(&code);
    Ok(())
}

/// True when `insts` use LSE atomics (`ldadd`, `stadd`, `cas`, `swp`, ...), outside libgcc's
/// outline-atomics helpers (`__aarch64_*`), which contain both forms and pick one at run
/// time: the caller leaves those functions out.
pub(crate) fn uses_lse(word: u32) -> bool {
    disarm64::decoder::decode(word).is_some_and(|i| {
        use disarm64::InsnOpcode;
        i.definition().feature_set == disarm64_defn::InsnFeatureSet::LSE
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(code: &[u8], base: u64) -> Vec<String> {
        code.chunks_exact(4)
            .enumerate()
            .map(|(k, w)| {
                let word = u32::from_le_bytes(w.try_into().unwrap());
                crate::aarch64::text(&crate::aarch64::decode(word, base + 4 * k as u64).unwrap())
            })
            .collect()
    }

    #[test]
    fn the_lse_probe_spills_below_a_moved_stack_pointer() {
        let mut out = Vec::new();
        encode_probe(Atomics::Lse, Vaddr(0x40_1000), Vaddr(0x60_2008), &mut out).unwrap();
        assert_eq!(out.len(), usize::from(probe_size(Atomics::Lse)));
        assert_eq!(
            texts(&out, 0x40_1000),
            [
                "stp x16, x17, [sp, #-16]!",
                "adrp x16, 0x602000",
                "add x16, x16, #0x8",
                "movz x17, #0x1, lsl #0x0",
                "ldadd x17, xzr, [x16]",
                "ldp x16, x17, [sp], #16",
            ]
        );
    }

    #[test]
    fn the_llsc_probe_retries_until_its_store_succeeds() {
        let mut out = Vec::new();
        encode_probe(Atomics::LlSc, Vaddr(0x1000), Vaddr(0x5008), &mut out).unwrap();
        assert_eq!(out.len(), usize::from(probe_size(Atomics::LlSc)));
        assert_eq!(
            texts(&out, 0x1000),
            [
                "stp x16, x17, [sp, #-32]!",
                "str x15, [sp, #0x10]",
                "adrp x16, 0x5000",
                "add x16, x16, #0x8",
                "ldxr x17, [x16]",
                "add x17, x17, #0x1",
                "stxr w15, x17, [x16]",
                "cbnz w15, 0x1010",
                "ldr x15, [sp, #0x10]",
                "ldp x16, x17, [sp], #32",
            ]
        );
        // The probe's own exclusive pair is the only one: nothing else accesses memory
        // between its ldxr and stxr.
        let decoded: Vec<_> = out
            .chunks_exact(4)
            .map(|w| crate::aarch64::decode(u32::from_le_bytes(w.try_into().unwrap()), 0).unwrap())
            .collect();
        assert_eq!(decoded.iter().filter(|i| i.exclusive.is_some()).count(), 2);
        assert!(
            !out.chunks_exact(4)
                .any(|w| uses_lse(u32::from_le_bytes(w.try_into().unwrap())))
        );
    }

    #[test]
    fn no_probe_writes_nzcv() {
        // Every flag-setting form Rivet's assembler has (cmp, cmn, the `s` forms) has S at
        // bit 29 of a data-processing word; none appears in a probe.
        for atomics in [Atomics::Lse, Atomics::LlSc] {
            let mut out = Vec::new();
            encode_probe(atomics, Vaddr(0x1000), Vaddr(0x9000), &mut out).unwrap();
            for t in texts(&out, 0x1000) {
                assert!(
                    !["adds", "subs", "ands", "msr"]
                        .iter()
                        .any(|m| t.starts_with(m)),
                    "{t}"
                );
            }
        }
    }

    #[test]
    fn indirect_calls_and_jumps_are_recorded_through_x16() {
        // blr x8 ; br x17 ; blr x30
        for (word, reg) in [
            (0xd63f_0100u32, "x8"),
            (0xd61f_0220, "x17"),
            (0xd63f_03c0, "x30"),
        ] {
            let branch = crate::Isa::Aarch64.decode_all(&word.to_le_bytes(), Vaddr(0x2000))[0];
            let mut out = Vec::new();
            encode_indirect_probe(
                &branch,
                Vaddr(0x2000),
                Vaddr(0x9010),
                Vaddr(0x3000),
                &mut out,
            )
            .unwrap();
            assert_eq!(
                out.len(),
                usize::from(indirect_probe_size(&branch).unwrap())
            );
            assert_eq!(
                texts(&out, 0x2000),
                [
                    "stp x16, x17, [sp, #-32]!".to_string(),
                    "str x30, [sp, #0x10]".to_string(),
                    format!("orr x16, xzr, {reg}"),
                    "adrp x17, 0x9000".to_string(),
                    "add x17, x17, #0x10".to_string(),
                    "bl 0x3000".to_string(),
                    "ldr x30, [sp, #0x10]".to_string(),
                    "ldp x16, x17, [sp], #32".to_string(),
                ]
            );
        }
        // blraa x8, x9: a signed target.
        let branch = crate::Isa::Aarch64.decode_all(&0xd73f_0909u32.to_le_bytes(), Vaddr(0))[0];
        assert!(indirect_probe_size(&branch).is_err());
    }

    #[test]
    fn lse_instructions_are_recognised() {
        // ldadd w1, w2, [x0]; casal x1, x2, [x0]; ldxr x1, [x0]; add x0, x0, #1
        assert!(uses_lse(0xb821_0002));
        assert!(uses_lse(0xc8e1_fc02));
        assert!(!uses_lse(0xc85f_7c01));
        assert!(!uses_lse(0x9100_0400));
    }
}
