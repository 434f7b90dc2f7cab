//! The library half of the `rivet` package: what other programs than the command need too.
//! The writer fuzz target (`fuzz/fuzz_targets/writers.rs`) checks every output it makes with
//! the same verifier `rewrite --verify` uses, so the verifier lives here rather than in the
//! binary.

pub mod verify_check;
pub mod verify_hugify;
pub mod verify_icf;
