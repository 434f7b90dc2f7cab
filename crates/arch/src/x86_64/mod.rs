//! x86-64, decoded and encoded with iced-x86.
//!
//! ABI facts the analyses rely on: calls push an 8-byte return address, so at a function's
//! entry the CFA is rsp+8 with the return address just below it; `call` clobbers the SysV
//! caller-saved registers (rax, rcx, rdx, rsi, rdi, r8-r11); writing a 32-bit register
//! zero-extends into the full 64-bit register, which is how compilers zero-extend a switch
//! index (`mov %edi,%edi`). Linkers fill gaps in code with `int3` (`0xcc`), a one-byte trap.

pub mod encode;
pub mod inst;
pub mod jump_table;
pub mod probe;
pub mod promote;
pub mod relocs;

use rivet_elf::Vaddr;

/// `EM_X86_64`.
pub(crate) const EM_X86_64: u16 = 62;

/// The architectural limit on an instruction's length.
pub(crate) const MAX_INST_LEN: u64 = 15;

/// `int3`: what fills code that must never run.
pub(crate) const FILL_BYTE: u8 = 0xcc;

/// DWARF register number of rsp.
pub(crate) const DWARF_RSP: u16 = 7;

/// Name of a DWARF register number (the System V psABI's numbering; 16 is the return
/// address column, rip).
pub(crate) fn dwarf_register_name(register: u16) -> &'static str {
    const NAMES: [&str; 17] = [
        "rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12",
        "r13", "r14", "r15", "rip",
    ];
    NAMES.get(register as usize).copied().unwrap_or("reg?")
}

/// True when `bytes` hold only filler: zeros, `int3`, or nop instructions.
pub(crate) fn is_filler(bytes: &[u8], addr: Vaddr) -> bool {
    if bytes.iter().all(|&b| b == 0 || b == FILL_BYTE) {
        return true;
    }
    inst::decode_all(bytes, addr)
        .iter()
        .all(|i| !i.is_invalid() && (i.is_nop() || i.is_fill_trap()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filler_bytes() {
        assert!(is_filler(&[0x90, 0x66, 0x90, 0xcc], Vaddr(0)));
        assert!(is_filler(&[0, 0, 0], Vaddr(0)));
        assert!(!is_filler(&[0xc3], Vaddr(0)));
    }
}
