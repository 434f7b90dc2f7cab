//! AArch64: decoding instructions into Rivet's model and encoding the forms a rewrite
//! changes. Fixed four-byte instructions make the encoder small (only fields that depend on
//! an instruction's address ever change); the hard parts are elsewhere: branch reach
//! (`encode::Reach`: +-128 MiB for `b`/`bl`, +-1 MiB for conditional branches and literal
//! loads, +-32 KiB for `tbz`/`tbnz`), ADRP/ADD pairs, exclusive-monitor sequences and
//! BTI/PAC, which `decode::Inst` marks for the passes that must respect them.

pub mod decode;
pub mod encode;
pub mod jump_table;

pub use decode::{
    CondForm, Control, Exclusive, Guard, INSN_SIZE, Inst, Invalid, PcRelative, decode, decode_all,
    text,
};
pub use encode::{
    BTI_C, BTI_J, BTI_JC, EncodeError, FILL, NOP, Reach, VENEER_REGISTER, b, bl, invert, reach_of,
    retarget, veneer,
};
pub use jump_table::{Bound, IndirectBranch, analyze_indirect_branch};
