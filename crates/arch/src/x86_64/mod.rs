//! x86-64, decoded and encoded with iced-x86.
//!
//! ABI facts the analyses rely on: calls push an 8-byte return address; `call` clobbers the
//! SysV caller-saved registers (rax, rcx, rdx, rsi, rdi, r8-r11); writing a 32-bit register
//! zero-extends into the full 64-bit register, which is how compilers zero-extend a switch
//! index (`mov %edi,%edi`).

pub mod encode;
pub mod inst;
pub mod jump_table;
pub mod probe;
