//! AArch64: decoding instructions into Rivet's model and encoding the forms a rewrite
//! changes. Fixed four-byte instructions make the encoder small (only fields that depend on
//! an instruction's address ever change); the hard parts are elsewhere: branch reach
//! (`encode::Reach`: +-128 MiB for `b`/`bl`, +-1 MiB for conditional branches and literal
//! loads, +-32 KiB for `tbz`/`tbnz`), ADRP/ADD pairs, exclusive-monitor sequences and
//! BTI/PAC, which `decode::Inst` marks for the passes that must respect them.
//!
//! This module also holds the AArch64 facts `crate::Isa` answers with: the ELF machine,
//! DWARF register numbers, what padding looks like.

pub mod asm;
pub mod decode;
pub mod encode;
pub(crate) mod inst;
pub mod jump_table;
pub(crate) mod pairs;
pub(crate) mod plt;
pub mod probe;
pub(crate) mod relocs;

pub use decode::{
    CondForm, Control, Exclusive, Guard, INSN_SIZE, Inst, Invalid, PcRelative, decode, decode_all,
    text,
};
pub use encode::{
    BTI_C, BTI_J, BTI_JC, EncodeError, FEATURE_1_BTI, FILL, NOP, PACIASP, PACIBSP,
    PROPERTY_FEATURE_1_AND, Reach, VENEER_REGISTER, b, bl, invert, landing_pad, landing_pad_target,
    lands_veneer, reach_of, retarget, set_low12, veneer, veneer_target,
};
pub use jump_table::{
    Bound, Hoisted, IndirectBranch, RegisterWrite, analyze_indirect_branch,
    analyze_indirect_branch_with, hoisted_constants, register_write, window_live_in,
};

/// `EM_AARCH64`.
pub(crate) const EM_AARCH64: u16 = 183;

/// DWARF register number of sp (the "DWARF for the Arm 64-bit Architecture" numbering:
/// x0..x30 are 0..30, sp is 31).
pub(crate) const DWARF_SP: u16 = 31;

/// The return-address signing state, a pseudo-register of the unwind rules.
pub(crate) const DWARF_RA_SIGN_STATE: u16 = 34;

/// Name of a DWARF register number: x0..x30 (x29 the frame pointer, x30 the link register),
/// sp, RA_SIGN_STATE at 34, and v0..v31 at 64..95.
pub(crate) fn dwarf_register_name(register: u16) -> &'static str {
    const X: [&str; 32] = [
        "x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9", "x10", "x11", "x12", "x13",
        "x14", "x15", "x16", "x17", "x18", "x19", "x20", "x21", "x22", "x23", "x24", "x25", "x26",
        "x27", "x28", "x29", "x30", "sp",
    ];
    const V: [&str; 32] = [
        "v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9", "v10", "v11", "v12", "v13",
        "v14", "v15", "v16", "v17", "v18", "v19", "v20", "v21", "v22", "v23", "v24", "v25", "v26",
        "v27", "v28", "v29", "v30", "v31",
    ];
    match register {
        0..=31 => X[register as usize],
        // The return-address signing state (PAC), a pseudo-register of the unwind rules.
        DWARF_RA_SIGN_STATE => "ra_sign_state",
        64..=95 => V[register as usize - 64],
        _ => "reg?",
    }
}

/// True when `bytes` hold only what separates functions: zero words (`udf #0`, what linkers
/// put between input sections) and `nop`s (what assemblers align code with).
pub(crate) fn is_filler(bytes: &[u8]) -> bool {
    bytes.len().is_multiple_of(4)
        && bytes.chunks_exact(4).all(|w| {
            let w = u32::from_le_bytes(w.try_into().expect("chunks of four"));
            w == FILL || w == NOP
        })
}

/// Appends `n` bytes of `nop`s (`n` is a multiple of 4 wherever AArch64 code is aligned;
/// a remainder, which only misaligned data could ask for, is zeros).
pub(crate) fn write_nops(out: &mut Vec<u8>, n: usize) {
    for _ in 0..n / 4 {
        out.extend_from_slice(&NOP.to_le_bytes());
    }
    out.resize(out.len() + n % 4, 0);
}
