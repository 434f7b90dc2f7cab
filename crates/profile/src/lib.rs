//! Profiles: what Rivet knows about how a program ran, independent of the program model.
//!
//! Everything here is keyed by locations in the binary the profile describes (a symbol and an
//! offset, as in BOLT's fdata), never by IR ids, so this crate depends on no other Rivet crate.
//! `model` is the common in-memory profile; `fdata`, `yaml` and `native` read and write the
//! file formats; `merge` sums profiles of one binary; `counters` reads the files the
//! instrumentation runtime writes and turns raw counters into edge counts; `counter_sum` adds
//! such files counter by counter into a summed counter file; `perf` reads
//! `perf script` output; `inference` turns sampled block counts into consistent edge counts.

pub mod counter_sum;
pub mod counters;
pub mod fdata;
pub mod inference;
pub mod merge;
pub mod model;
pub mod native;
pub mod perf;
pub mod yaml;

pub use model::{
    Architecture, BlockHash, BranchCount, FunctionHash, LocKind, Location, Mode, Profile,
};
