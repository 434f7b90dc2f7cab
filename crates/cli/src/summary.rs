//! Summary lines that more than one command prints about the binary it wrote. `rewrite` and
//! `optimize` each print their own report, but the facts both can meet (branches sent to
//! veneers, landing pads, bypassed linker veneers) read the same way in both.

use rivet_emit::rewrite::Summary;

/// The lines about branches whose targets moved beyond their reach or past a linker's veneer
/// (AArch64; all zero on x86-64).
pub(crate) fn print_branch_reach(s: &Summary) {
    if s.veneers > 0 {
        println!(
            "  {} veneers for calls and jumps beyond a branch's reach",
            s.veneers
        );
    }
    if s.landing_pads > 0 {
        println!(
            "  {} landing pads for veneers into code without one (BTI)",
            s.landing_pads
        );
    }
    if s.veneers_bypassed > 0 {
        println!(
            "  {} calls and jumps sent past the linker's veneers to their destinations",
            s.veneers_bypassed
        );
    }
}
