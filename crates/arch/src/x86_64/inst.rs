//! Decoding x86-64 and what a decoded instruction means: its length, its control flow, the
//! padding forms, its PC-relative and absolute operands, its syntax (AT&T, as objdump prints
//! it) and its cost class.

use std::fmt;

use iced_x86::{
    Decoder, DecoderOptions, FlowControl, Formatter, GasFormatter, Instruction, Mnemonic, OpKind,
};
use rivet_elf::Vaddr;

use crate::{Flow, Inst};

/// One decoded x86-64 instruction: iced's 40-byte `Instruction`. The rest of Rivet holds it
/// inside the ISA-neutral [`crate::Inst`], which forwards to the methods here.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct X86Inst {
    pub(crate) raw: Instruction,
}

impl X86Inst {
    pub fn addr(&self) -> Vaddr {
        Vaddr(self.raw.ip())
    }
    pub fn len(&self) -> u8 {
        self.raw.len() as u8
    }
    pub fn is_empty(&self) -> bool {
        self.raw.len() == 0
    }
    pub fn end(&self) -> Vaddr {
        Vaddr(self.raw.next_ip())
    }
    pub fn is_invalid(&self) -> bool {
        self.raw.is_invalid()
    }

    pub fn flow(&self) -> Flow {
        let raw = &self.raw;
        match raw.flow_control() {
            FlowControl::Next => {
                if raw.mnemonic() == Mnemonic::Hlt {
                    Flow::Trap
                } else {
                    Flow::Next
                }
            }
            FlowControl::UnconditionalBranch => match raw.op0_kind() {
                OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64 => Flow::Jump {
                    target: Vaddr(raw.near_branch_target()),
                },
                // Far jumps do not occur in 64-bit user code; treat as opaque.
                _ => Flow::IndirectJump,
            },
            FlowControl::IndirectBranch => Flow::IndirectJump,
            FlowControl::ConditionalBranch => Flow::CondJump {
                target: Vaddr(raw.near_branch_target()),
            },
            FlowControl::Return => Flow::Return,
            FlowControl::Call => match raw.mnemonic() {
                Mnemonic::Call => match raw.op0_kind() {
                    OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64 => {
                        Flow::Call {
                            target: Vaddr(raw.near_branch_target()),
                        }
                    }
                    _ => Flow::IndirectCall,
                },
                // syscall, sysenter, vmcall...: the kernel returns to the next instruction.
                _ => Flow::Next,
            },
            FlowControl::IndirectCall => Flow::IndirectCall,
            FlowControl::Interrupt => match raw.mnemonic() {
                Mnemonic::Int3 | Mnemonic::Int1 => Flow::Trap,
                _ => Flow::Next,
            },
            FlowControl::XbeginXabortXend => {
                if raw.mnemonic() == Mnemonic::Xbegin {
                    Flow::CondJump {
                        target: Vaddr(raw.near_branch_target()),
                    }
                } else {
                    Flow::Next
                }
            }
            FlowControl::Exception => Flow::Trap,
        }
    }

    /// True for instructions compilers and linkers use as padding.
    pub fn is_nop(&self) -> bool {
        matches!(self.raw.mnemonic(), Mnemonic::Nop | Mnemonic::Fnop)
            || (self.raw.mnemonic() == Mnemonic::Xchg
                && self.raw.op_count() == 2
                && self.raw.op0_kind() == OpKind::Register
                && self.raw.op1_kind() == OpKind::Register
                && self.raw.op0_register() == self.raw.op1_register())
            || (self.raw.mnemonic() == Mnemonic::Lea
                && self.raw.memory_base() == self.raw.op0_register()
                && self.raw.memory_index() == iced_x86::Register::None
                && self.raw.memory_displacement64() == 0
                && self.raw.op0_register().size() == 8)
    }

    /// True for the `nop` forms that do nothing at all, which compilers put in front of
    /// aligned loop heads and labels: `nop` (any length) and `lea r64, [r64]`. Narrower than
    /// [`Inst::is_nop`]: `xchg` of a register with itself may zero the upper half of a 64-bit
    /// register (`87 c0`), and `fnop` may raise a pending x87 exception, so neither may be
    /// left out of rewritten code.
    pub fn is_padding_nop(&self) -> bool {
        self.raw.mnemonic() == Mnemonic::Nop
            || (self.raw.mnemonic() == Mnemonic::Lea
                && self.raw.memory_base() == self.raw.op0_register()
                && self.raw.memory_index() == iced_x86::Register::None
                && self.raw.memory_displacement64() == 0
                && self.raw.op0_register().size() == 8)
    }

    /// True for `int3`, which linkers use to fill gaps between functions.
    pub fn is_int3(&self) -> bool {
        self.raw.mnemonic() == Mnemonic::Int3
    }

    /// The address a RIP-relative memory operand refers to.
    pub fn rip_relative_target(&self) -> Option<Vaddr> {
        self.raw
            .is_ip_rel_memory_operand()
            .then(|| Vaddr(self.raw.ip_rel_memory_address()))
    }

    /// Where this instruction's 32-bit PC-relative field starts: the `rel32` of a direct
    /// branch or call, or the displacement of a RIP-relative operand (which only an immediate
    /// follows). `None` for an instruction without one, or with a short (8-bit) branch.
    ///
    /// A static relocation elsewhere in an instruction is stale: the linker rewrote the
    /// sequence it belonged to (TLS relaxation turns `call __tls_get_addr@PLT` into part of a
    /// `lea`, and keeps the relocation in `--emit-relocs` output).
    pub fn pc_relative_field(&self) -> Option<Vaddr> {
        let end = self.end();
        if matches!(
            self.flow(),
            crate::Flow::Call { .. } | crate::Flow::Jump { .. } | crate::Flow::CondJump { .. }
        ) {
            // rel32 forms are 5 bytes and more (`e8`, `e9`, `0f 8x`); short ones are 2.
            return (self.len() >= 5).then(|| Vaddr(end.get() - 4));
        }
        if !self.raw.is_ip_rel_memory_operand() {
            return None;
        }
        let immediate: u64 = (0..self.raw.op_count())
            .map(|op| match self.raw.op_kind(op) {
                OpKind::Immediate8 | OpKind::Immediate8to16 | OpKind::Immediate8to32 => 1,
                OpKind::Immediate8to64 | OpKind::Immediate8_2nd => 1,
                OpKind::Immediate16 => 2,
                OpKind::Immediate32 | OpKind::Immediate32to64 => 4,
                _ => 0,
            })
            .sum();
        Some(Vaddr(end.get() - 4 - immediate))
    }

    /// Absolute addresses this instruction mentions: immediates and absolute memory
    /// displacements of at least 32 bits (candidates for code pointers in non-PIE code).
    pub fn absolute_constants(&self) -> [Option<u64>; 2] {
        let raw = &self.raw;
        let mut out = [None, None];
        for op in 0..raw.op_count().min(4) {
            match raw.op_kind(op) {
                OpKind::Immediate32 | OpKind::Immediate64 | OpKind::Immediate32to64 => {
                    out[0] = Some(raw.immediate(op));
                }
                OpKind::Memory
                    if !raw.is_ip_rel_memory_operand()
                        && raw.memory_base() == iced_x86::Register::None
                        && raw.memory_displ_size() >= 4 =>
                {
                    out[1] = Some(raw.memory_displacement64());
                }
                _ => {}
            }
        }
        out
    }

    /// True for a call or jump whose target is read from memory at an absolute or RIP-relative
    /// address without index (GOT slots, function pointer variables): returns that address.
    pub fn indirect_slot(&self) -> Option<Vaddr> {
        let raw = &self.raw;
        if raw.op_count() != 1 || raw.op0_kind() != OpKind::Memory {
            return None;
        }
        if raw.memory_index() != iced_x86::Register::None {
            return None;
        }
        if raw.is_ip_rel_memory_operand() {
            return Some(Vaddr(raw.ip_rel_memory_address()));
        }
        (raw.memory_base() == iced_x86::Register::None).then(|| Vaddr(raw.memory_displacement64()))
    }

    /// The instruction in AT&T syntax (objdump's default), with branch targets as addresses.
    pub fn att_syntax(&self) -> String {
        let mut formatter = GasFormatter::new();
        let options = formatter.options_mut();
        options.set_first_operand_char_index(8);
        options.set_space_after_operand_separator(false);
        options.set_uppercase_hex(false);
        options.set_branch_leading_zeros(false);
        options.set_rip_relative_addresses(true);
        let mut out = String::new();
        formatter.format(&self.raw, &mut out);
        if let Some(target) = self.rip_relative_target() {
            out.push_str(&format!("  # {target}"));
        }
        out
    }

    pub fn mnemonic_name(&self) -> String {
        format!("{:?}", self.raw.mnemonic()).to_lowercase()
    }
}

impl X86Inst {
    /// What one execution costs, in cycles of a simple instruction: the latency class on
    /// current x86-64 cores (Agner Fog's instruction tables: integer division 25 and more,
    /// square root about 16, floating-point division about 14, other floating-point
    /// arithmetic and conversions 4, integer multiplication 3). Loads cost what they cost
    /// only at run time (a cache miss): they stay at 1, like everything else.
    pub fn cost(&self) -> u64 {
        let m = self.mnemonic_name();
        let m = m.strip_prefix('v').unwrap_or(&m);
        let fp_suffix = ["sd", "ss", "pd", "ps"].iter().any(|s| m.ends_with(s));
        if m == "div" || m == "idiv" {
            25
        } else if m.starts_with("sqrt") && fp_suffix {
            16
        } else if m.starts_with("div") && fp_suffix {
            14
        } else if (fp_suffix
            && [
                "add", "sub", "mul", "min", "max", "fmadd", "fmsub", "fnmadd", "fnmsub",
            ]
            .iter()
            .any(|p| m.starts_with(p)))
            || m.starts_with("cvt")
            || m.starts_with("ucomis")
            || m.starts_with("comis")
        {
            4
        } else if m == "imul" || m == "mul" {
            3
        } else {
            1
        }
    }
}

impl fmt::Debug for X86Inst {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.addr(), self.att_syntax())
    }
}

/// Decodes `bytes` (which start at `addr`) linearly. Invalid encodings come back as
/// instructions with `is_invalid()`, one byte at a time, so the caller decides what they mean.
pub(crate) fn decode_all(bytes: &[u8], addr: Vaddr) -> Vec<Inst> {
    let mut decoder = Decoder::with_ip(64, bytes, addr.get(), DecoderOptions::NONE);
    let mut out = Vec::with_capacity(bytes.len() / 4 + 1);
    let mut raw = Instruction::default();
    while decoder.can_decode() {
        decoder.decode_out(&mut raw);
        out.push(Inst::from_x86(X86Inst { raw }));
    }
    // Callers keep the instructions of every function for the whole run; the estimate above
    // is short for code of short instructions, and growing doubled the capacity.
    out.shrink_to_fit();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(bytes: &[u8], addr: u64) -> Inst {
        let v = decode_all(bytes, Vaddr(addr));
        assert_eq!(v.len(), 1, "{v:?}");
        v[0]
    }

    #[test]
    fn classifies_control_flow() {
        // jmp rel8 +0x10
        assert_eq!(
            one(&[0xeb, 0x10], 0x1000).flow(),
            Flow::Jump {
                target: Vaddr(0x1012)
            }
        );
        // jne rel32
        assert_eq!(
            one(&[0x0f, 0x85, 0x00, 0x01, 0x00, 0x00], 0x1000).flow(),
            Flow::CondJump {
                target: Vaddr(0x1106)
            }
        );
        // call rel32
        assert_eq!(
            one(&[0xe8, 0xfb, 0xff, 0xff, 0xff], 0x1000).flow(),
            Flow::Call {
                target: Vaddr(0x1000)
            }
        );
        assert_eq!(one(&[0xff, 0xe0], 0).flow(), Flow::IndirectJump); // jmp *%rax
        assert_eq!(one(&[0xff, 0xd0], 0).flow(), Flow::IndirectCall); // call *%rax
        assert_eq!(one(&[0xc3], 0).flow(), Flow::Return);
        assert_eq!(one(&[0x0f, 0x0b], 0).flow(), Flow::Trap); // ud2
        assert_eq!(one(&[0xcc], 0).flow(), Flow::Trap); // int3
        assert_eq!(one(&[0xf4], 0).flow(), Flow::Trap); // hlt
        assert_eq!(one(&[0x0f, 0x05], 0).flow(), Flow::Next); // syscall
    }

    #[test]
    fn finds_the_pc_relative_field_a_relocation_may_sit_on() {
        let field = |bytes: &[u8]| one(bytes, 0x1000).pc_relative_field().map(|v| v.get());
        assert_eq!(field(&[0xe8, 0, 0, 0, 0]), Some(0x1001)); // call rel32
        assert_eq!(field(&[0x0f, 0x85, 0, 1, 0, 0]), Some(0x1002)); // jne rel32
        assert_eq!(field(&[0xeb, 0x10]), None); // jmp rel8
        // lea 0x10(%rip),%rdi: the displacement ends the instruction.
        assert_eq!(field(&[0x48, 0x8d, 0x3d, 0x10, 0, 0, 0]), Some(0x1003));
        // movl $5,0x10(%rip): a 32-bit immediate follows the displacement.
        assert_eq!(
            field(&[0xc7, 0x05, 0x10, 0, 0, 0, 5, 0, 0, 0]),
            Some(0x1002)
        );
        // cmpb $1,0x10(%rip): an 8-bit one.
        assert_eq!(field(&[0x80, 0x3d, 0x10, 0, 0, 0, 1]), Some(0x1002));
        // What a relaxed TLS sequence leaves: mov %fs:0,%rax and lea -0x70(%rax),%rax.
        assert_eq!(field(&[0x64, 0x48, 0x8b, 0x04, 0x25, 0, 0, 0, 0]), None);
        assert_eq!(field(&[0x48, 0x8d, 0x80, 0x90, 0xff, 0xff, 0xff]), None);
    }

    #[test]
    fn recognizes_padding() {
        assert!(one(&[0x90], 0).is_nop());
        assert!(one(&[0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00], 0).is_nop());
        assert!(!one(&[0xc3], 0).is_nop());
        // Padding that rewritten code may leave out, and look-alikes it may not.
        assert!(one(&[0x90], 0).is_padding_nop());
        assert!(one(&[0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00], 0).is_padding_nop());
        assert!(one(&[0x0f, 0x1f, 0x80, 0, 0, 0, 0], 0).is_padding_nop());
        assert!(one(&[0x48, 0x8d, 0x76, 0x00], 0).is_padding_nop()); // lea 0(%rsi),%rsi
        assert!(!one(&[0x87, 0xc0], 0).is_padding_nop()); // xchg %eax,%eax zero-extends
        assert!(!one(&[0x8d, 0x76, 0x00], 0).is_padding_nop()); // lea 0(%rsi),%esi truncates
        assert!(!one(&[0xf3, 0x90], 0).is_padding_nop()); // pause
        assert!(!one(&[0xf3, 0x0f, 0x1e, 0xfa], 0).is_padding_nop()); // endbr64
        assert!(!one(&[0xd9, 0xd0], 0).is_padding_nop()); // fnop
    }

    #[test]
    fn rip_relative_and_slots() {
        // lea 0x10(%rip),%rax at 0x1000 (7 bytes) -> 0x1017
        let lea = one(&[0x48, 0x8d, 0x05, 0x10, 0x00, 0x00, 0x00], 0x1000);
        assert_eq!(lea.pc_relative_memory_target(), Some(Vaddr(0x1017)));
        // jmp *0x10(%rip) -> slot at 0x1016
        let jmp = one(&[0xff, 0x25, 0x10, 0x00, 0x00, 0x00], 0x1000);
        assert_eq!(jmp.indirect_slot(), Some(Vaddr(0x1016)));
        assert_eq!(jmp.flow(), Flow::IndirectJump);
    }

    #[test]
    fn formats_att() {
        let i = one(&[0x48, 0x89, 0xe5], 0);
        assert_eq!(i.to_asm(), "mov     %rsp,%rbp");
    }
}
