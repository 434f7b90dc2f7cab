//! The ISA boundary.
//!
//! Everything that knows what a machine instruction looks like lives here: decoding,
//! classifying control flow, formatting, the data-flow pattern matching that recognizes
//! jump-table dispatch, encoding branches and probes, and the facts the rest of Rivet would
//! otherwise hard-code (instruction length limit, fill bytes, branch sizes and reach, DWARF
//! register numbers, PLT entry sizes, relocation types). The rest of Rivet sees [`Isa`],
//! [`Inst`] and [`Flow`], never a decoder's types, and no ISA constant.
//!
//! # Why an enum, not a trait
//!
//! Cranelift's `isa/` puts each backend behind `dyn TargetIsa`, chosen at run time from a
//! target triple, while each backend's instructions are its own `MachInst` type and the code
//! generator is generic over it (`VCode<I>`). wild adds an architecture by implementing its
//! `Arch` trait (relocation decoding, PLT entries, relaxations, thunks) and monomorphizes the
//! whole link over it (`link_for_arch::<Elf, ElfX86_64>`), after matching a closed
//! `Architecture` enum once. Both work because their per-ISA code is large and open-ended
//! (instruction selection; every relocation of every input).
//!
//! Rivet's needs differ in three ways, which decide for a closed enum:
//! - The IR keeps every decoded instruction of the program for the whole run (tens of
//!   millions on a big binary), in dense vectors, and every crate reads them. A trait object
//!   per instruction costs a pointer and an allocation; a generic `Program<I: Isa>` would
//!   thread a type parameter through `ir`, `discover`, `passes`, `emit` and `cli` (what the
//!   style guide calls wild's weakness). A small `Copy` enum ([`Inst`], private variants)
//!   stores in place and dispatches with one predictable `match`.
//! - The set is closed and tiny: x86-64 and AArch64. Adding an ISA is a variant in
//!   [`Isa`] and in [`Inst`], and one arm per method; the compiler lists every place.
//! - The per-ISA surface is small and fact-shaped (sizes, ranges, register numbers, fill)
//!   next to a few operations (decode, analyse an indirect jump, encode a branch or a
//!   probe, re-place an instruction). Values and plain methods say that better than a
//!   trait with associated types.
//!
//! What the interface must carry for AArch64, and where it will: fixed 4-byte instructions
//! ([`Isa::max_inst_len`], [`Inst::len`]); branch ranges (B/BL +-128 MiB, B.cond/CBZ
//! +-1 MiB, TBZ +-32 KiB) through [`Isa::branch_sizes`] and [`Isa::short_branch_reaches`],
//! which will take the branch's kind; ADRP/ADD pairs as instructions whose PC-relative
//! target spans two instructions ([`Inst::pc_relative_target`] on the pair's second half);
//! `R_AARCH64_*` relocations as the `Isa`'s `rivet_elf::relocs::RelocTypes` table; fill with
//! `udf` ([`Isa::fill`] writes whole instructions, not a byte); SP as DWARF register 31 and
//! the return address in x30 ([`Isa::dwarf_stack_pointer`], [`Isa::entry_frame`]); BTI
//! landing pads as a fact the emitter will ask for at indirect branch targets.
//!
//! Still shaped by x86-64 behind the interface: [`Flags`] (rflags liveness; AArch64 probes
//! write no flags, so NZCV liveness is never asked for). [`BranchForm`]'s two forms fit
//! AArch64 as "one instruction" and "inverted branch over a `b`"; targets beyond a `b`'s reach
//! go through veneers.
//!
//! AArch64 is [`Isa::Aarch64`]: module [`aarch64`] decodes through disarm64 (see
//! `docs/aarch64-decoders.md`), keeps each instruction in 16 bytes (`aarch64::inst`), reads
//! `R_AARCH64_*` relocations, PLT slots (`adrp`+`ldr`) and switch tables
//! ([`IndirectJump::ScaledTable`]), encodes the forms a rewrite changes ([`BranchEncoder`]
//! writes `b`, short conditional branches and the inverted-branch-over-`b` far form), and
//! writes instrumentation probes ([`ProbeShape::Lse`], [`ProbeShape::LlSc`]) with
//! `aarch64::asm`, the assembler the AArch64 instrumentation runtime uses too.

pub mod aarch64;
mod branch;
mod front_end;
mod indirect;
mod inst;
mod isa;
mod probe;
mod x86_64;

pub use branch::{Branch, BranchEncoder, BranchForm, EncodeError};
pub use front_end::{CacheGeometry, FetchModel, TlbGeometry};
pub use indirect::{IndexBound, IndirectJump, RegisterDefinition};
pub use inst::{Flow, Inst};
pub use isa::{BranchKind, BranchSizes, EntryFrame, FragmentExits, Isa};
pub use probe::{Atomics, IndirectProbeError, ProbeShape};
pub use x86_64::jump_table::RegisterId;
pub use x86_64::probe::Flags;
pub use x86_64::promote::{PromotionError, PromotionShape, ReadPromotion};
