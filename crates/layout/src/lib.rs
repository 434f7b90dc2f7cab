//! Layout algorithms on pure weighted graphs: no ELF, no IR, only sizes, counts and edges.
//!
//! `ext_tsp` orders the blocks of one function (Newell & Pupyrev's ext-TSP), `function_order`
//! orders functions by their call graph (C3/hfsort, cdsort, exec-count), `split` picks the
//! blocks that go to a function's cold fragment. Every entry point takes dense `u32` ids
//! (`0..n`) and returns plain vectors, so passes can hand over any graph they build and tests
//! can compare with brute force.

pub mod ext_tsp;
pub mod function_order;
pub mod split;

pub use ext_tsp::{
    ext_tsp_order, ext_tsp_order_with_indirect, ext_tsp_score, ext_tsp_score_with_indirect,
};
pub use function_order::{c3_order, cdsort_order, exec_count_order};
pub use split::{LandingPads, Split, SplitOptions, split_blocks};
