//! Re-emitting instructions at new addresses, for the rewriter.
//!
//! Most instructions are position-independent and are copied byte for byte. The ones that are
//! not come in two shapes, handled here: block-ending branches, which the emitter re-creates
//! (it may invert a conditional jump, drop a jump to the next block, or choose the short or
//! near form), and instructions with one PC-relative field (a direct call, a near jump, a
//! RIP-relative memory operand), which are copied and get that field recomputed. Neither ever
//! changes the length of a copied instruction, so an instruction's size is known before its
//! address is.
//!
//! Branch encoding goes through iced's encoder, so prefixes the compiler put on a branch
//! (`bnd`, branch hints) survive and an out-of-range short form is an error, not a wrap.

use iced_x86::{Code, Decoder, DecoderOptions, Encoder, Instruction};
use rivet_elf::Vaddr;

use crate::branch::{Branch, BranchForm, EncodeError};
use crate::x86_64::inst::X86Inst;
use crate::{Flow, Inst};

impl X86Inst {
    /// True for a `jcc` whose condition can be inverted and which has short and near forms
    /// (not `loop`, `jrcxz` or `xbegin`).
    pub fn is_invertible_cond_jump(&self) -> bool {
        self.raw.is_jcc_short_or_near()
    }

    /// The condition of a conditional jump, as a comparable code.
    pub fn condition(&self) -> Option<u8> {
        let cc = self.raw.condition_code();
        (cc != iced_x86::ConditionCode::None).then_some(cc as u8)
    }

    /// The inverse of `condition()`.
    pub fn inverted_condition(&self) -> Option<u8> {
        let mut raw = self.raw;
        raw.negate_condition_code();
        let cc = raw.condition_code();
        (cc != iced_x86::ConditionCode::None && self.condition().is_some()).then_some(cc as u8)
    }

    /// True when the instruction has a PC-relative field that must be recomputed when the
    /// instruction moves (direct branch or call, RIP-relative memory operand).
    pub fn is_pc_relative(&self) -> bool {
        self.raw.is_ip_rel_memory_operand()
            || matches!(
                self.flow(),
                crate::Flow::Call { .. } | crate::Flow::Jump { .. } | crate::Flow::CondJump { .. }
            )
    }

    /// The target of a direct branch or call, or of a RIP-relative memory operand.
    pub fn pc_relative_target(&self) -> Option<Vaddr> {
        match self.flow() {
            crate::Flow::Call { target }
            | crate::Flow::Jump { target }
            | crate::Flow::CondJump { target } => Some(target),
            _ => self.rip_relative_target(),
        }
    }
}

/// Encodes x86-64 branches; holds iced's encoder so its buffer is reused.
pub(crate) struct X86BranchEncoder {
    encoder: Encoder,
}

impl std::fmt::Debug for X86BranchEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BranchEncoder")
    }
}

impl Default for X86BranchEncoder {
    fn default() -> Self {
        X86BranchEncoder {
            encoder: Encoder::new(64),
        }
    }
}

impl X86BranchEncoder {
    fn instruction(branch: Branch, form: BranchForm, target: Vaddr) -> Instruction {
        match branch {
            Branch::Jump => {
                let code = match form {
                    BranchForm::Short => Code::Jmp_rel8_64,
                    BranchForm::Near => Code::Jmp_rel32_64,
                };
                // `with_branch` only fails for codes that are not branches.
                Instruction::with_branch(code, target.get()).expect("jmp is a branch")
            }
            Branch::Cond { inst, inverted } => {
                let mut raw = inst.x86().raw;
                if inverted {
                    raw.negate_condition_code();
                }
                match form {
                    BranchForm::Short => raw.as_short_branch(),
                    BranchForm::Near => raw.as_near_branch(),
                }
                raw.set_near_branch64(target.get());
                raw
            }
        }
    }

    /// Size in bytes of `branch` in `form` (independent of addresses).
    pub fn size(&mut self, branch: Branch, form: BranchForm) -> Result<u8, EncodeError> {
        let mut out = Vec::new();
        self.encode(branch, form, Vaddr(0x1000), Vaddr(0x1000), &mut out)?;
        Ok(out.len() as u8)
    }

    /// Appends `branch` placed at `at` and going to `target`.
    pub fn encode(
        &mut self,
        branch: Branch,
        form: BranchForm,
        at: Vaddr,
        target: Vaddr,
        out: &mut Vec<u8>,
    ) -> Result<(), EncodeError> {
        let instruction = Self::instruction(branch, form, target);
        match self.encoder.encode(&instruction, at.get()) {
            Ok(_) => {
                out.extend_from_slice(&self.encoder.take_buffer());
                Ok(())
            }
            Err(e) => {
                // Leave the encoder clean for the next call.
                let _ = self.encoder.take_buffer();
                if form == BranchForm::Short || at.get().abs_diff(target.get()) >= 1 << 31 {
                    Err(EncodeError::OutOfRange {
                        what: "branch",
                        at,
                        target,
                    })
                } else {
                    Err(EncodeError::Unsupported {
                        at,
                        reason: e.to_string(),
                    })
                }
            }
        }
    }
}

/// Bytes of a call or jump through a RIP-relative slot (`ff 15`/`ff 25` and a 32-bit
/// displacement), as written by [`encode_via_slot`].
pub const VIA_SLOT_SIZE: u8 = 6;

/// Appends the direct call or jump `inst` re-encoded, at `at`, as the same transfer through
/// the memory slot `slot`: `call *slot(%rip)` or `jmp *slot(%rip)`. A call into a PLT stub
/// becomes a call through the stub's GOT slot, which the stub would only have loaded and
/// jumped through: one instruction and one indirect jump fewer per call, for one byte more.
/// Prefixes of the original (`bnd`) are not carried over: they only concern the stub.
pub fn encode_via_slot(
    inst: &Inst,
    at: Vaddr,
    slot: Vaddr,
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    let opcode = match inst.flow() {
        Flow::Call { .. } => 0x15,
        Flow::Jump { .. } => 0x25,
        _ => {
            return Err(EncodeError::Unsupported {
                at: inst.addr(),
                reason: "only a direct call or jump can go through a slot".into(),
            });
        }
    };
    let end = at + u64::from(VIA_SLOT_SIZE);
    let disp = rel32(at, end, slot, "call through a GOT slot")?;
    out.extend_from_slice(&[0xff, opcode]);
    out.extend_from_slice(&disp);
    Ok(())
}

fn rel32(at: Vaddr, end: Vaddr, target: Vaddr, what: &'static str) -> Result<[u8; 4], EncodeError> {
    let disp = target.get().wrapping_sub(end.get()) as i64;
    i32::try_from(disp)
        .map(i32::to_le_bytes)
        .map_err(|_| EncodeError::OutOfRange { what, at, target })
}

/// Appends `inst` (whose original encoding is `bytes`) re-placed at `at`, with its PC-relative
/// field, if any, now referring to `new_target` (`None`: the same address as before). The
/// length never changes.
pub fn relocate(
    inst: &Inst,
    bytes: &[u8],
    at: Vaddr,
    new_target: Option<Vaddr>,
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    let len = inst.len() as usize;
    if bytes.len() != len {
        return Err(EncodeError::Unsupported {
            at: inst.addr(),
            reason: format!("{} bytes given for a {len}-byte instruction", bytes.len()),
        });
    }
    let start = out.len();
    out.extend_from_slice(bytes);
    let Some(old_target) = inst.pc_relative_target() else {
        return Ok(());
    };
    let target = new_target.unwrap_or(old_target);
    let end = at + len as u64;
    // Where the PC-relative field sits and how wide it is (a memory operand's displacement
    // may be followed by an immediate; a branch's displacement ends the instruction).
    let mut decoder = Decoder::with_ip(64, bytes, inst.addr().get(), DecoderOptions::NONE);
    let raw = decoder.decode();
    let offsets = decoder.get_constant_offsets(&raw);
    // iced reports a branch's relative field as its immediate.
    let (offset, size) = if inst.pc_relative_memory_target().is_some() && offsets.has_displacement()
    {
        (offsets.displacement_offset(), offsets.displacement_size())
    } else if inst.pc_relative_memory_target().is_none() && offsets.has_immediate() {
        (offsets.immediate_offset(), offsets.immediate_size())
    } else {
        return Err(EncodeError::Unsupported {
            at: inst.addr(),
            reason: "cannot locate the PC-relative field".into(),
        });
    };
    let field = start + offset;
    match size {
        4 => {
            let what = if inst.pc_relative_memory_target().is_some() {
                "RIP-relative operand"
            } else {
                "branch"
            };
            out[field..field + 4].copy_from_slice(&rel32(at, end, target, what)?);
        }
        1 => {
            let disp = target.get().wrapping_sub(end.get()) as i64;
            let disp = i8::try_from(disp).map_err(|_| EncodeError::OutOfRange {
                what: "short branch",
                at,
                target,
            })?;
            out[field] = disp as u8;
        }
        other => {
            return Err(EncodeError::Unsupported {
                at: inst.addr(),
                reason: format!("{other}-byte PC-relative field"),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::x86_64::inst::decode_all;

    fn one(bytes: &[u8], addr: u64) -> Inst {
        decode_all(bytes, Vaddr(addr))[0]
    }

    fn reencode(inst: &Inst, bytes: &[u8], at: u64, target: Option<u64>) -> Inst {
        let mut out = Vec::new();
        relocate(inst, bytes, Vaddr(at), target.map(Vaddr), &mut out).unwrap();
        assert_eq!(out.len(), bytes.len());
        one(&out, at)
    }

    #[test]
    fn relocates_calls_and_rip_relative_operands() {
        let call = [0xe8, 0xfb, 0xff, 0xff, 0xff]; // call 0x1000 at 0x1000
        let moved = reencode(&one(&call, 0x1000), &call, 0x9000, Some(0x2000));
        assert_eq!(moved.pc_relative_target(), Some(Vaddr(0x2000)));
        // Same target, new position.
        let moved = reencode(&one(&call, 0x1000), &call, 0x9000, None);
        assert_eq!(moved.pc_relative_target(), Some(Vaddr(0x1000)));

        // cmpl $0x5,0x10(%rip): the immediate follows the displacement.
        let cmp = [0x83, 0x3d, 0x10, 0x00, 0x00, 0x00, 0x05];
        let inst = one(&cmp, 0x1000);
        assert_eq!(inst.pc_relative_memory_target(), Some(Vaddr(0x1017)));
        let moved = reencode(&inst, &cmp, 0x5000, None);
        assert_eq!(moved.pc_relative_memory_target(), Some(Vaddr(0x1017)));
        assert_eq!(moved.to_asm(), "cmpl    $5,-0x3ff0(%rip)  # 0x1017");
    }

    #[test]
    fn out_of_range_is_an_error() {
        let call = [0xe8, 0, 0, 0, 0];
        let inst = one(&call, 0x1000);
        let err = relocate(&inst, &call, Vaddr(0x1_0000_0000), None, &mut Vec::new());
        assert!(matches!(err, Err(EncodeError::OutOfRange { .. })));
    }

    #[test]
    fn branches_invert_and_relax() {
        let mut enc = X86BranchEncoder::default();
        let jne = one(&[0x75, 0x10], 0x1000);
        let cond = Branch::Cond {
            inst: jne,
            inverted: true,
        };
        assert_eq!(enc.size(cond, BranchForm::Short).unwrap(), 2);
        assert_eq!(enc.size(cond, BranchForm::Near).unwrap(), 6);
        assert_eq!(enc.size(Branch::Jump, BranchForm::Near).unwrap(), 5);
        let mut out = Vec::new();
        enc.encode(
            cond,
            BranchForm::Near,
            Vaddr(0x2000),
            Vaddr(0x3000),
            &mut out,
        )
        .unwrap();
        let back = one(&out, 0x2000);
        assert_eq!(back.to_asm(), "je      0x3000");
        let err = enc.encode(
            cond,
            BranchForm::Short,
            Vaddr(0x2000),
            Vaddr(0x3000),
            &mut out,
        );
        assert!(matches!(err, Err(EncodeError::OutOfRange { .. })));
        assert!(jne.is_invertible_cond_jump());
        assert!(!one(&[0xe3, 0x00], 0).is_invertible_cond_jump()); // jrcxz
    }
}

/// Appends `n` bytes of padding that execute as few instructions as possible: the multi-byte
/// `nop` forms of Intel's optimization manual (1 to 9 bytes), longest first. Used before
/// aligned blocks, where the preceding block may fall through into the padding.
pub fn write_nops(out: &mut Vec<u8>, mut n: usize) {
    const NOPS: [&[u8]; 9] = [
        &[0x90],
        &[0x66, 0x90],
        &[0x0f, 0x1f, 0x00],
        &[0x0f, 0x1f, 0x40, 0x00],
        &[0x0f, 0x1f, 0x44, 0x00, 0x00],
        &[0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00],
        &[0x0f, 0x1f, 0x80, 0x00, 0x00, 0x00, 0x00],
        &[0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00],
        &[0x66, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00],
    ];
    while n > 0 {
        let k = n.min(NOPS.len());
        out.extend_from_slice(NOPS[k - 1]);
        n -= k;
    }
}

#[cfg(test)]
mod nop_tests {
    use super::write_nops;
    use crate::x86_64::inst::decode_all;

    #[test]
    fn padding_decodes_as_nops_of_the_exact_length() {
        for n in 0..=40 {
            let mut out = Vec::new();
            write_nops(&mut out, n);
            assert_eq!(out.len(), n);
            let insts = decode_all(&out, rivet_elf::Vaddr(0x1000));
            assert!(insts.iter().all(|i| i.is_nop()), "{n}: {out:02x?}");
            assert_eq!(insts.len(), n.div_ceil(9), "{n}");
            let total: usize = insts.iter().map(|i| usize::from(i.len())).sum();
            assert_eq!(total, n);
        }
    }
}

#[cfg(test)]
mod via_slot_tests {
    use super::{EncodeError, VIA_SLOT_SIZE, encode_via_slot};
    use crate::Flow;
    use crate::x86_64::inst::decode_all;
    use rivet_elf::Vaddr;

    fn one(bytes: &[u8], at: u64) -> crate::Inst {
        decode_all(bytes, Vaddr(at)).remove(0)
    }

    #[test]
    fn direct_calls_and_jumps_become_the_same_transfer_through_the_slot() {
        // call 0x2000 and jmp 0x2000, both at 0x1000 (a PLT stub at 0x2000).
        for (bytes, want_call) in [
            (vec![0xe8, 0xfb, 0x0f, 0, 0], true),
            (vec![0xe9, 0xfb, 0x0f, 0, 0], false),
        ] {
            let inst = one(&bytes, 0x1000);
            let mut out = vec![0x90];
            encode_via_slot(&inst, Vaddr(0x5001), Vaddr(0x3000), &mut out).unwrap();
            assert_eq!(out.len(), 1 + usize::from(VIA_SLOT_SIZE));
            let new = one(&out[1..], 0x5001);
            assert_eq!(new.len(), VIA_SLOT_SIZE);
            assert_eq!(new.indirect_slot(), Some(Vaddr(0x3000)));
            let want = if want_call {
                Flow::IndirectCall
            } else {
                Flow::IndirectJump
            };
            assert_eq!(new.flow(), want, "{}", new.to_asm());
        }
    }

    #[test]
    fn other_instructions_and_far_slots_are_refused() {
        let jcc = one(&[0x0f, 0x84, 0xfa, 0x0f, 0, 0], 0x1000);
        let err = encode_via_slot(&jcc, Vaddr(0x5000), Vaddr(0x3000), &mut Vec::new());
        assert!(matches!(err, Err(EncodeError::Unsupported { .. })));
        let call = one(&[0xe8, 0xfb, 0x0f, 0, 0], 0x1000);
        let mut out = Vec::new();
        let err = encode_via_slot(&call, Vaddr(0x1_0000_5000), Vaddr(0x3000), &mut out);
        assert!(matches!(err, Err(EncodeError::OutOfRange { .. })));
        assert!(out.is_empty(), "nothing written on error");
    }
}
