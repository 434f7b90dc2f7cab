//! Zero-copy view of an x86-64 ELF64 input.
//!
//! The whole crate reads; nothing here writes the input. `ElfFile` borrows the mapped bytes for
//! the run and hands out views (sections, symbols, relocations, unwind entries, LSDAs) that
//! borrow them too. Parsing is done with `object`'s low-level ELF layer (raw, endian-aware
//! structs, so no ELF detail is lost) and `gimli` for `.eh_frame`; the LSDA format, which no
//! maintained crate reads as we need, is parsed here. Every parse step fails with an `ElfError`
//! naming the structure, never a panic: inputs are untrusted.

pub mod addr;
pub mod dynamic;
pub mod eh_frame;
pub mod error;
pub mod file;
pub mod lines;
pub mod lsda;
pub mod mapped;
pub mod relocs;
pub mod sink;
pub mod symbols;
pub mod writer;

pub use addr::{FileOffset, Vaddr, VaddrRange};
pub use error::{ElfError, Result};
pub use file::{ElfFile, ElfKind, Section, Segment};
pub use mapped::MappedFile;
