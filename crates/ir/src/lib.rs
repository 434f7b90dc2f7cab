//! Rivet's model of a program: functions made of basic blocks of decoded instructions.
//!
//! Discovery builds it; passes will transform it; emission will write it out. Functions and
//! blocks are addressed by dense `u32` ids (`FuncId`, `BlockId`) rather than references, so the
//! model is plain owned data that can be processed in parallel and dumped deterministically.
//!
//! The central invariant is honesty about what is understood: a function is either `Simple`
//! (every byte of it is an instruction in some block, every control transfer out of every block
//! is resolved to blocks, other functions, or a known exit) or `Skipped` with a reason naming
//! the construct and its address. Later phases may only transform simple functions.

pub mod block_end;
pub mod dump;
pub mod layout;
pub mod probes;
pub mod program;
pub mod skip;

pub use block_end::{BlockExit, WrittenEnd};
pub use program::*;
pub use skip::SkipReason;
