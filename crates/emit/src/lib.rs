//! Emission: turns a discovered `ir::Program` plus a `Layout` into the new content of a
//! rewritten binary (new text, unwind and exception tables, symbols, patches to original bytes).

pub mod code;
pub mod lsda;
pub mod unwind;
