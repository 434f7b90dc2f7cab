//! Verification of identical code folding (`optimize --icf --verify`, `rivet verify`).
//!
//! Written apart from the pass (`rivet_passes::icf`), from the input's bytes decoded afresh:
//! for every folded pair, the folded function and its kept copy have the same size and the
//! same number of instructions, each instruction of the kept copy, re-encoded at the folded
//! one's address with the folded one's target, gives the folded one's bytes exactly, and each
//! pair of targets agrees (the same offset in each function, the same address, or entries of
//! functions folded into the same copy). Their unwind rows match at the same offsets, and
//! neither has an LSDA or a jump table. The folded function's address must not be taken: no
//! stored reference to its entry other than the field of a direct call or jump, and no dynamic
//! symbol exports it. That calls into a folded function go to the kept copy's new code, and not
//! to its old body, the block checks of `verify_check` see: they expect every call target
//! translated, and the address map sends a folded entry to the kept copy.

use std::collections::HashMap;

use rivet_arch::Flow;
use rivet_elf::{ElfFile, Vaddr};
use rivet_emit::references::Reference;
use rivet_ir::{FuncId, Function, Program};

/// Checks every `(folded, kept)` pair; `references` are the input's stored references.
pub fn check_folds(
    input: &ElfFile<'_>,
    program: &Program,
    folded: &[(FuncId, FuncId)],
    references: &[Reference],
) -> Result<usize, String> {
    // Nothing folded, nothing to check: in particular, a malformed `.dynsym` that the rewrite
    // never needed must not fail the verification of a run without `--icf`.
    if folded.is_empty() {
        return Ok(0);
    }
    let kept_of: HashMap<Vaddr, Vaddr> = folded
        .iter()
        .map(|&(f, k)| {
            (
                program.function(f).range.start,
                program.function(k).range.start,
            )
        })
        .collect();
    let canonical = |a: Vaddr| kept_of.get(&a).copied().unwrap_or(a);
    let exported: Vec<Vaddr> = input
        .dynamic_symbols()
        .map_err(|e| e.to_string())?
        .iter()
        .filter(|s| !s.is_undefined)
        .map(|s| s.value)
        .collect();
    for &(f, k) in folded {
        let (f, k) = (program.function(f), program.function(k));
        identical(input, program, f, k, &canonical)
            .map_err(|why| format!("{} was folded into {}, but {why}", f.name(), k.name()))?;
        if exported.contains(&f.range.start) || input.entry == f.range.start {
            return Err(format!(
                "{} was folded away, but it is exported or the entry point",
                f.name()
            ));
        }
    }
    // Code that computes a folded entry's address (`lea f(%rip)`), anywhere.
    for g in &program.functions {
        for inst in &g.insts {
            if let Some(t) = inst.pc_relative_memory_target()
                && kept_of.contains_key(&t)
            {
                return Err(format!(
                    "{} was folded away, but `{}` at {} takes its address",
                    program
                        .function_containing(t)
                        .map_or("a function", Function::name),
                    inst.to_asm(),
                    inst.addr()
                ));
            }
        }
    }
    // References to a folded entry: only fields of direct calls and jumps.
    for r in references {
        if !kept_of.contains_key(&r.target) {
            continue;
        }
        let direct = program.function_containing(r.site).is_some_and(|g| {
            let i = g.insts.partition_point(|i| i.addr() <= r.site);
            i.checked_sub(1).is_some_and(|i| {
                let inst = &g.insts[i];
                inst.end() > r.site
                    && inst.pc_relative_field() == Some(r.site)
                    && matches!(
                        inst.flow(),
                        Flow::Call { .. } | Flow::Jump { .. } | Flow::CondJump { .. }
                    )
            })
        });
        if !direct {
            return Err(format!(
                "{} was folded away, but its address is stored at {}",
                program
                    .function_containing(r.target)
                    .map_or("a function", Function::name),
                r.site
            ));
        }
    }
    Ok(folded.len())
}

/// Whether `f` and `k` are the same code under the folding rule.
fn identical(
    input: &ElfFile<'_>,
    program: &Program,
    f: &Function,
    k: &Function,
    canonical: &dyn Fn(Vaddr) -> Vaddr,
) -> Result<(), String> {
    let isa = program.info.isa;
    if f.range.len() != k.range.len() {
        return Err(format!(
            "their sizes differ ({} and {} bytes)",
            f.range.len(),
            k.range.len()
        ));
    }
    if f.lsda.is_some() || k.lsda.is_some() || !f.jump_tables.is_empty() {
        return Err("one has an LSDA or a jump table".into());
    }
    let read = |g: &Function| {
        input
            .bytes_at(g.range.start, g.range.len())
            .ok_or_else(|| format!("{} cannot be read", g.name()))
    };
    let (fb, kb) = (read(f)?, read(k)?);
    let fi = isa.decode_all(fb, f.range.start);
    let ki = isa.decode_all(kb, k.range.start);
    if fi.len() != ki.len() {
        return Err("they decode to different instruction counts".into());
    }
    for (a, b) in fi.iter().zip(&ki) {
        let at = a.addr() - f.range.start;
        if at != b.addr() - k.range.start || a.len() != b.len() {
            return Err(format!(
                "the instructions at offset {at:#x} differ in length"
            ));
        }
        let a_bytes = &fb[at as usize..at as usize + usize::from(a.len())];
        let b_bytes = &kb[at as usize..at as usize + usize::from(b.len())];
        let targets = (a.pc_relative_target(), b.pc_relative_target());
        let same_target = match targets {
            (None, None) => true,
            (Some(ta), Some(tb)) => {
                let local = |t: Vaddr, g: &Function| g.range.contains(t).then(|| t - g.range.start);
                match (local(ta, f), local(tb, k)) {
                    (Some(x), Some(y)) => x == y,
                    (None, None) => canonical(ta) == canonical(tb),
                    _ => false,
                }
            }
            _ => false,
        };
        if !same_target {
            return Err(format!(
                "`{}` and `{}` (offset {at:#x}) go to different places",
                a.to_asm(),
                b.to_asm()
            ));
        }
        // The kept copy's instruction, moved to the folded one's place and pointed at its
        // target, must be the folded one's bytes.
        let mut moved = Vec::new();
        isa.relocate(b, b_bytes, a.addr(), targets.0, &mut moved)
            .map_err(|e| format!("offset {at:#x} cannot be compared: {e}"))?;
        if moved != a_bytes {
            return Err(format!(
                "`{}` and `{}` (offset {at:#x}) are different instructions",
                a.to_asm(),
                b.to_asm()
            ));
        }
    }
    let rows = |g: &Function| {
        g.cfi
            .iter()
            .map(|r| {
                (
                    r.range.start.checked_since(g.range.start),
                    r.range.len(),
                    r.cfa.clone(),
                    r.saved.clone(),
                    r.args_size,
                )
            })
            .collect::<Vec<_>>()
    };
    if rows(f) != rows(k) {
        return Err("their unwind rows differ".into());
    }
    Ok(())
}
