//! Emission: turns a discovered `ir::Program` plus a `Layout` into the new content of a
//! rewritten binary (new text, unwind and exception tables, symbols, patches to original bytes).

pub mod bat;
pub mod cache_sets;
pub mod code;
pub mod debug;
pub mod frames;
pub mod hugify;
mod leb;
pub mod lsda;
mod output_sections;
pub mod references;
pub mod rewrite;
pub mod symbols;
pub mod unwind;
pub mod ways_in;
