//! Ways into a function other than its entry, counted over a whole binary: what moving some
//! functions and leaving others in place can break. `rivet inspect` reports the counts and
//! `scripts/sweep.sh` adds them up over the real programs and the system's libraries.
//!
//! Each kind is handled by the rewrite: a branch of code that stays into moved code is patched
//! from its relocation, or from its decoded instruction when the assembler resolved it
//! (`references::collect`); one that cannot reach new text (a 2-byte branch) or that only a
//! linear sweep of a skipped function saw keeps entering the old body, which keeps its bytes
//! wherever such an entry lies under the forwarding jump (`references::old_entry_is_free`).
//! `rivet verify` checks all of them on the output.

use std::collections::HashSet;

use rivet_arch::Flow;
use rivet_elf::relocs::StaticReloc;
use rivet_elf::{ElfFile, Vaddr};
use rivet_ir::{FuncId, Program};

use crate::references::is_entered_within;

/// The counts. "Interior" is anywhere in another function but its first byte; branches
/// between a function and its compiler-split cold part are the function's own and not counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaysIn {
    /// Direct jumps, conditional jumps and calls into another function's interior.
    pub interior_branches: usize,
    /// Of those, the ones no static relocation covers (all of them without relocations): the
    /// assembler resolved them, so only the decoded instruction shows them.
    pub interior_branches_without_relocation: usize,
    /// Of those, 2-byte (rel8) ones, which cannot be sent to code that moved.
    pub interior_short_branches: usize,
    /// RIP-relative operands holding an address in another function's interior.
    pub interior_code_addresses: usize,
    /// Functions entered (by a secondary entry, a landing pad or a label whose address is taken)
    /// within the first bytes a forwarding jump at their entry would take.
    pub entered_under_forwarding_jump: usize,
}

/// Counts the ways in of `program`, given the static relocations of `elf` (empty without).
pub fn count(elf: &ElfFile<'_>, program: &Program, statics: &[StaticReloc]) -> WaysIn {
    let relocated: HashSet<Vaddr> = statics
        .iter()
        .filter(|r| elf.section(r.target_section).is_some_and(|s| s.is_exec()))
        .map(|r| r.site)
        .collect();
    let mut out = WaysIn::default();
    let interior_of_another = |from: FuncId, target: Vaddr| {
        program.function_containing(target).is_some_and(|g| {
            g.range.start != target && program.family_root(g.id) != program.family_root(from)
        })
    };
    for f in &program.functions {
        for inst in &f.insts {
            match inst.flow() {
                Flow::Jump { target } | Flow::CondJump { target } | Flow::Call { target } => {
                    if !interior_of_another(f.id, target) {
                        continue;
                    }
                    out.interior_branches += 1;
                    match inst.pc_relative_field() {
                        None => out.interior_short_branches += 1,
                        Some(field) if !relocated.contains(&field) => {
                            out.interior_branches_without_relocation += 1
                        }
                        Some(_) => {}
                    }
                }
                _ => {
                    if inst
                        .pc_relative_memory_target()
                        .is_some_and(|t| elf.is_code_address(t) && interior_of_another(f.id, t))
                    {
                        out.interior_code_addresses += 1;
                    }
                }
            }
        }
        if is_entered_within(f, program.info.isa.forwarding_jump_size()) {
            out.entered_under_forwarding_jump += 1;
        }
    }
    // A short branch has no relocation either.
    out.interior_branches_without_relocation += out.interior_short_branches;
    out
}
