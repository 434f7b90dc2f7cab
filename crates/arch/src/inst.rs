//! The ISA-neutral instruction: what discovery, the IR, the passes and the emitter hold and
//! ask about, whatever the machine.
//!
//! An [`Inst`] is a small `Copy` value holding one decoded instruction of one ISA. Every
//! question about it (its length, its control flow, whether it is padding, where its
//! PC-relative field is) is answered by that ISA's module; this file only dispatches. The
//! representation is private, so no other crate can reach the decoder's types: adding an ISA
//! adds a variant here and one arm to each method, and nothing outside `rivet-arch` changes.
//! Instructions are never mixed: every instruction of a program comes from the same [`Isa`].

use std::fmt;

use rivet_elf::Vaddr;

use crate::aarch64::inst::A64Inst;
use crate::indirect::RegisterDefinition;
use crate::isa::Isa;
use crate::x86_64::inst::X86Inst;
use crate::x86_64::jump_table::RegisterId;
use crate::x86_64::probe::Flags;

/// One decoded instruction at its address in the input.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Inst {
    repr: Repr,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Repr {
    X86_64(X86Inst),
    Aarch64(A64Inst),
}

/// What an instruction does to control flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Execution continues with the next instruction (this includes system calls and software
    /// interrupts that return).
    Next,
    /// An unconditional direct jump.
    Jump {
        target: Vaddr,
    },
    /// A conditional direct jump (on x86-64 also `loop`, `jrcxz`, and `xbegin`, whose abort
    /// path is the target).
    CondJump {
        target: Vaddr,
    },
    /// A jump through a register or memory.
    IndirectJump,
    /// A direct call.
    Call {
        target: Vaddr,
    },
    /// A call through a register or memory.
    IndirectCall,
    Return,
    /// Never continues here: traps, halts, invalid opcodes.
    Trap,
}

impl Flow {
    /// True when the next instruction can execute after this one (modulo noreturn calls,
    /// which discovery decides).
    pub fn falls_through(self) -> bool {
        matches!(
            self,
            Flow::Next | Flow::CondJump { .. } | Flow::Call { .. } | Flow::IndirectCall
        )
    }
    /// True when the instruction ends a basic block.
    pub fn ends_block(self) -> bool {
        !matches!(self, Flow::Next | Flow::Call { .. } | Flow::IndirectCall)
    }
}

impl Inst {
    pub(crate) fn from_x86(inst: X86Inst) -> Inst {
        Inst {
            repr: Repr::X86_64(inst),
        }
    }

    pub(crate) fn from_aarch64(inst: A64Inst) -> Inst {
        Inst {
            repr: Repr::Aarch64(inst),
        }
    }

    /// The x86-64 instruction inside, for x86-64 code that [`Isa::X86_64`] dispatched to.
    /// Instructions are never mixed (one ISA per program), so an AArch64 one here is a bug
    /// in the dispatch, not an input error.
    pub(crate) fn x86(&self) -> &X86Inst {
        match &self.repr {
            Repr::X86_64(inst) => inst,
            Repr::Aarch64(_) => panic!("an AArch64 instruction reached x86-64 code"),
        }
    }

    /// The AArch64 instruction inside, for AArch64 code that [`Isa::Aarch64`] dispatched to.
    pub(crate) fn aarch64(&self) -> &A64Inst {
        match &self.repr {
            Repr::Aarch64(inst) => inst,
            Repr::X86_64(_) => panic!("an x86-64 instruction reached AArch64 code"),
        }
    }

    /// The instruction set this instruction belongs to.
    pub fn isa(&self) -> Isa {
        match self.repr {
            Repr::X86_64(_) => Isa::X86_64,
            Repr::Aarch64(_) => Isa::Aarch64,
        }
    }

    pub fn addr(&self) -> Vaddr {
        match &self.repr {
            Repr::X86_64(i) => i.addr(),
            Repr::Aarch64(i) => i.addr(),
        }
    }
    /// Length in bytes.
    pub fn len(&self) -> u8 {
        match &self.repr {
            Repr::X86_64(i) => i.len(),
            Repr::Aarch64(i) => i.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        match &self.repr {
            Repr::X86_64(i) => i.is_empty(),
            Repr::Aarch64(_) => false,
        }
    }
    /// The address right after the instruction.
    pub fn end(&self) -> Vaddr {
        match &self.repr {
            Repr::X86_64(i) => i.end(),
            Repr::Aarch64(i) => i.end(),
        }
    }
    /// True for bytes that decode to no instruction (one byte at a time on x86-64).
    pub fn is_invalid(&self) -> bool {
        match &self.repr {
            Repr::X86_64(i) => i.is_invalid(),
            Repr::Aarch64(i) => i.is_invalid(),
        }
    }

    pub fn flow(&self) -> Flow {
        match &self.repr {
            Repr::X86_64(i) => i.flow(),
            Repr::Aarch64(i) => i.flow(),
        }
    }

    /// True for instructions compilers and linkers use as padding.
    pub fn is_nop(&self) -> bool {
        match &self.repr {
            Repr::X86_64(i) => i.is_nop(),
            Repr::Aarch64(i) => i.is_nop(),
        }
    }

    /// True for the padding forms that do nothing at all, which compilers put in front of
    /// aligned loop heads and labels, and which rewritten code may therefore leave out.
    /// Narrower than [`Inst::is_nop`]: some padding look-alikes have effects.
    pub fn is_padding_nop(&self) -> bool {
        match &self.repr {
            Repr::X86_64(i) => i.is_padding_nop(),
            Repr::Aarch64(i) => i.is_nop(),
        }
    }

    /// True for the trap instruction linkers fill gaps between functions with (the same that
    /// [`Isa::fill`] writes).
    pub fn is_fill_trap(&self) -> bool {
        match &self.repr {
            Repr::X86_64(i) => i.is_int3(),
            Repr::Aarch64(i) => i.is_fill_trap(),
        }
    }

    /// True for an instruction that may have to become two, taking the `nop` before it: lld
    /// relaxes an AArch64 `adrp`+`add` pair into `nop`+`adr` when the address is within
    /// +-1 MiB, and moved code may no longer be ([`Isa::widen_address`]).
    pub fn may_widen_into_previous(&self) -> bool {
        match &self.repr {
            Repr::X86_64(_) => false,
            Repr::Aarch64(i) => i.is_adr(),
        }
    }

    /// True for a load that opens an exclusive-monitor sequence (AArch64 `ldxr`, `ldaxr`,
    /// `ldxp`, ...). x86-64 has none: its atomics are single instructions.
    pub fn is_exclusive_load(&self) -> bool {
        match &self.repr {
            Repr::X86_64(_) => false,
            Repr::Aarch64(i) => i.exclusive() == Some(crate::aarch64::Exclusive::Load),
        }
    }

    /// True for the store or `clrex` that closes an exclusive-monitor sequence.
    pub fn is_exclusive_end(&self) -> bool {
        match &self.repr {
            Repr::X86_64(_) => false,
            Repr::Aarch64(i) => matches!(
                i.exclusive(),
                Some(crate::aarch64::Exclusive::Store | crate::aarch64::Exclusive::Clear)
            ),
        }
    }

    /// The address a PC-relative memory operand refers to (a load, a store, an address
    /// computation relative to the instruction).
    pub fn pc_relative_memory_target(&self) -> Option<Vaddr> {
        match &self.repr {
            Repr::X86_64(i) => i.rip_relative_target(),
            Repr::Aarch64(i) => i.pc_relative_memory_target(),
        }
    }

    /// Where this instruction's PC-relative field starts, the field a static relocation on
    /// it must sit on. `None` for an instruction without one.
    ///
    /// A static relocation elsewhere in an instruction is stale: the linker rewrote the
    /// sequence it belonged to (TLS relaxation), and keeps the relocation in `--emit-relocs`
    /// output.
    pub fn pc_relative_field(&self) -> Option<Vaddr> {
        match &self.repr {
            Repr::X86_64(i) => i.pc_relative_field(),
            Repr::Aarch64(i) => i.pc_relative_field(),
        }
    }

    /// Absolute addresses this instruction mentions (candidates for code pointers in
    /// non-PIE code).
    pub fn absolute_constants(&self) -> impl Iterator<Item = u64> + '_ {
        let found = match &self.repr {
            Repr::X86_64(i) => i.absolute_constants(),
            // Addresses are built by ADRP pairs or MOVZ/MOVK sequences, never one
            // immediate; the relocations on those are what name code addresses.
            Repr::Aarch64(_) => [None, None],
        };
        found.into_iter().flatten()
    }

    /// For a call or jump whose target is read from memory at a fixed address (GOT slots,
    /// function pointer variables): that address.
    pub fn indirect_slot(&self) -> Option<Vaddr> {
        match &self.repr {
            Repr::X86_64(i) => i.indirect_slot(),
            // Read from an ADRP+LDR pair, not one instruction: `Isa::indirect_jump_slots`.
            Repr::Aarch64(_) => None,
        }
    }

    /// The instruction as objdump prints it by default (AT&T syntax on x86-64), with branch
    /// targets as addresses.
    pub fn to_asm(&self) -> String {
        match &self.repr {
            Repr::X86_64(i) => i.att_syntax(),
            Repr::Aarch64(i) => i.to_asm(),
        }
    }

    /// The mnemonic, lower case.
    pub fn mnemonic_name(&self) -> String {
        match &self.repr {
            Repr::X86_64(i) => i.mnemonic_name(),
            Repr::Aarch64(i) => i.mnemonic_name(),
        }
    }

    /// What one execution costs, in cycles of a simple instruction (its latency class), for
    /// spreading timer samples over a block's instructions.
    pub fn cost(&self) -> u64 {
        match &self.repr {
            Repr::X86_64(i) => i.cost(),
            Repr::Aarch64(i) => i.cost(),
        }
    }

    /// How far this conditional branch reaches in its one-instruction form, in bytes either
    /// way (the smaller of its two bounds): AArch64 `b.cond`/`cbz`/`cbnz` about 1 MiB,
    /// `tbz`/`tbnz` about 32 KiB. `None` for anything else, and on x86-64 (whose near form is
    /// one instruction, so no decision depends on it).
    pub fn conditional_reach(&self) -> Option<u64> {
        match &self.repr {
            Repr::X86_64(_) => None,
            Repr::Aarch64(i) => {
                let word = i.decoded()?.word;
                match crate::aarch64::encode::reach_of(word)? {
                    reach @ (crate::aarch64::Reach::Imm19 | crate::aarch64::Reach::Imm14)
                        if i.is_invertible_cond_jump() =>
                    {
                        let (lo, hi) = reach.bounds();
                        Some(hi.min(-lo) as u64)
                    }
                    _ => None,
                }
            }
        }
    }

    /// True for a conditional jump whose condition can be inverted and which has short and
    /// near forms.
    pub fn is_invertible_cond_jump(&self) -> bool {
        match &self.repr {
            Repr::X86_64(i) => i.is_invertible_cond_jump(),
            Repr::Aarch64(i) => i.is_invertible_cond_jump(),
        }
    }

    /// The condition of a conditional jump, as a comparable code (on AArch64 it includes
    /// the register and bit a `cbz` or `tbz` tests).
    pub fn condition(&self) -> Option<u32> {
        match &self.repr {
            Repr::X86_64(i) => i.condition().map(u32::from),
            Repr::Aarch64(i) => i.condition(),
        }
    }

    /// The inverse of `condition()`.
    pub fn inverted_condition(&self) -> Option<u32> {
        match &self.repr {
            Repr::X86_64(i) => i.inverted_condition().map(u32::from),
            Repr::Aarch64(i) => i.inverted_condition(),
        }
    }

    /// True when the instruction has a PC-relative field that must be recomputed when the
    /// instruction moves (direct branch or call, PC-relative memory operand).
    pub fn is_pc_relative(&self) -> bool {
        match &self.repr {
            Repr::X86_64(i) => i.is_pc_relative(),
            Repr::Aarch64(i) => i.is_pc_relative(),
        }
    }

    /// The target of a direct branch or call, or of a PC-relative memory operand.
    pub fn pc_relative_target(&self) -> Option<Vaddr> {
        match &self.repr {
            Repr::X86_64(i) => i.pc_relative_target(),
            Repr::Aarch64(i) => i.pc_relative_target(),
        }
    }

    /// Arithmetic flags live before this instruction, given those live after it.
    pub fn flags_live_before(&self, live_after: Flags) -> Flags {
        match &self.repr {
            Repr::X86_64(i) => i.flags_live_before(live_after),
            // AArch64 probes write no flags (`aarch64::probe`), so their shape never depends
            // on NZCV liveness: everything live stays live.
            Repr::Aarch64(_) => live_after,
        }
    }

    /// How this instruction defines register `r` (an id from [`Isa::window_live_in`]).
    pub fn register_definition(&self, r: RegisterId) -> RegisterDefinition {
        match &self.repr {
            Repr::X86_64(i) => match i.register_definition(r) {
                None => RegisterDefinition::Unchanged,
                Some(Some(c)) => RegisterDefinition::Constant(c),
                Some(None) => RegisterDefinition::Other,
            },
            Repr::Aarch64(i) => {
                // Ids at 0x8000 and above name stack slots (`Isa::register_constants`),
                // which no walk asks about: nothing is claimed for them.
                let (Some(inst), Ok(reg)) = (i.decoded(), u8::try_from(r.raw())) else {
                    return RegisterDefinition::Other;
                };
                match crate::aarch64::register_write(&inst, reg) {
                    crate::aarch64::RegisterWrite::Untouched => RegisterDefinition::Unchanged,
                    crate::aarch64::RegisterWrite::Constant(c) => RegisterDefinition::Constant(c),
                    crate::aarch64::RegisterWrite::Offset { from, add } => {
                        RegisterDefinition::Offset {
                            from: RegisterId::from_raw(u16::from(from)),
                            add,
                        }
                    }
                    crate::aarch64::RegisterWrite::Other => RegisterDefinition::Other,
                }
            }
        }
    }
}

impl fmt::Debug for Inst {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.repr {
            Repr::X86_64(i) => i.fmt(f),
            Repr::Aarch64(i) => i.fmt(f),
        }
    }
}
