//! The ISA boundary.
//!
//! Everything that knows what an x86-64 instruction looks like lives here: decoding, classifying
//! control flow, formatting, and the data-flow pattern matching that recognizes jump-table
//! dispatch. The rest of Rivet sees `Inst` and `Flow`, never iced-x86 types, so a second ISA
//! (AArch64) can be added behind the same surface.

pub mod aarch64;
pub mod x86_64;

pub use x86_64::encode::{
    Branch, BranchEncoder, BranchForm, EncodeError, VIA_SLOT_SIZE, encode_via_slot, relocate,
    write_nops,
};
pub use x86_64::inst::{Flow, Inst, decode_all};
pub use x86_64::jump_table::{
    IndexBound, IndirectJump, RegisterId, analyze_indirect_jump, analyze_indirect_jump_path,
    analyze_indirect_jump_with, register_constants, window_live_in,
};
pub use x86_64::probe::{
    Flags, IndirectProbeError, ProbeShape, encode_indirect_probe, encode_probe, indirect_probe_size,
};
