//! Identical code folding (`rivet optimize --icf`, BOLT's `-icf`), in safe mode: functions
//! whose code is the same are folded into one kept copy, which alone goes to the new text.
//!
//! Two functions are identical when they have the same size and the same instruction bytes
//! once every PC-relative field is masked, and each masked field points at the same place:
//! the same offset inside its own function, the same address outside any function entry
//! (data, PLT stubs), or the entries of functions that are themselves identical. That last
//! rule is circular (mutually recursive pairs, or two families of template instances that call
//! each other), so classes are refined to a fixed point, starting from "same bytes": a class
//! splits whenever its members call into different classes, until no class splits (the
//! greatest fixed point, as BOLT's folding reaches by iterating). They must also have the same
//! blocks and edges (the profile counts of the folded copy are added to the kept one, block by
//! block) and the same unwind rows at the same offsets.
//!
//! Left out of folding altogether: functions with a jump table or computed goto (their tables
//! are data the masked bytes do not show), with an LSDA (call-site tables and landing pads),
//! with secondary entries, with compiler-split parts (`foo.cold`) or that are such a part,
//! and functions with an address-taken label. Safe mode: a function whose entry's address is
//! taken (`Function::address_taken`: stored in data, computed in code, exported, the entry
//! point) is never folded away, because a program may compare function pointers; it can be
//! the kept copy of its class. Two address-taken members of a class both stay.
//!
//! The pass reads instruction bytes through a closure the caller gives (the passes crate
//! does not read ELF files), and only x86-64 code: on AArch64 PC-relative fields are bit
//! fields of the instruction word, and `adrp` immediates depend on the page offset of the
//! instruction, so "same bytes" needs another rule there.

use std::collections::HashMap;
use std::sync::Arc;

use rayon::prelude::*;
use rivet_arch::{Flow, Isa};
use rivet_elf::Vaddr;
use rivet_elf::eh_frame::{Cfa, SavedRegister};
use rivet_ir::{FuncId, Function, Program, Terminator};

use crate::attach::AttachedProfile;

/// Reads `len` bytes of the input at an address (the caller's view of the file).
pub type CodeBytes<'a> = dyn Fn(Vaddr, u64) -> Option<&'a [u8]> + Sync + 'a;

/// Where a masked PC-relative field points, as the comparison sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Target {
    /// An offset inside the function itself.
    Local(u64),
    /// An address that is no candidate's entry: compared as it is.
    Address(u64),
    /// The entry of a folding candidate: compared by class, in refinement.
    Candidate,
}

/// Everything two identical functions share, apart from which classes they call.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct StaticKey {
    size: u64,
    masked: Vec<u8>,
    targets: Vec<Target>,
    /// Per block: offset, instruction range, terminator kind, successors (block, edge kind)
    /// and the flags a layout reads.
    blocks: Vec<BlockKey>,
    /// Per call: offset and whether it returns.
    calls: Vec<(u64, bool)>,
    cfi: Vec<CfiKey>,
}

/// A block's offset, instruction range, terminator kind, successors and flags.
type BlockKey = (u64, u32, u32, u8, Vec<(u32, u8)>, u8);

type CfiKey = (u64, u64, Cfa, Arc<[(u16, SavedRegister)]>, u64);

/// A candidate's key and the candidates its masked fields point at, in instruction order.
struct Candidate {
    id: FuncId,
    key: StaticKey,
    calls: Vec<FuncId>,
}

/// The outcome: `(folded, kept)` pairs, sorted by the folded function.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Folding {
    pub pairs: Vec<(FuncId, FuncId)>,
    /// Classes of two or more identical functions found (before safe mode kept some apart).
    pub classes: usize,
    /// Identical functions left alone because their address is taken.
    pub address_taken: usize,
}

/// Whether `f` can take part in folding at all (see the module comment).
pub fn is_foldable(program: &Program, f: &Function, has_parts: &[bool]) -> bool {
    program.info.isa == Isa::X86_64
        && f.is_simple()
        && !f.blocks.is_empty()
        && f.block_at(f.range.start).is_some()
        && f.parent.is_none()
        && !has_parts[f.id.0 as usize]
        && f.secondary_entries.is_empty()
        && f.jump_tables.is_empty()
        && f.lsda.is_none()
        && f.blocks.iter().all(|b| {
            !matches!(b.terminator, Terminator::ComputedGoto)
                && !b.is_landing_pad
                && (!b.is_address_taken || b.start == f.range.start)
        })
}

/// Functions that have compiler-split parts, by `FuncId`.
pub fn functions_with_parts(program: &Program) -> Vec<bool> {
    let mut out = vec![false; program.functions.len()];
    for f in &program.functions {
        if let Some(p) = f.parent {
            out[p.function.0 as usize] = true;
        }
    }
    out
}

/// The bytes of `inst` (`bytes`) with its PC-relative field zeroed: the rel8 or rel32 of a
/// direct branch, the disp32 of a RIP-relative operand. `None` when the field is not where
/// the rule expects it.
pub fn masked_instruction(inst: &rivet_arch::Inst, bytes: &[u8]) -> Option<Vec<u8>> {
    let mut out = bytes.to_vec();
    if inst.pc_relative_target().is_none() {
        return Some(out);
    }
    let len = out.len();
    let branch = matches!(
        inst.flow(),
        Flow::Call { .. } | Flow::Jump { .. } | Flow::CondJump { .. }
    );
    let (from, to) = match (inst.pc_relative_field(), branch) {
        (Some(field), true) => ((field - inst.addr()) as usize, len),
        (None, true) => (len.checked_sub(1)?, len),
        (Some(field), false) => {
            let from = (field - inst.addr()) as usize;
            (from, from + 4)
        }
        (None, false) => return None,
    };
    out.get_mut(from..to)?.fill(0);
    Some(out)
}

fn terminator_kind(t: &Terminator) -> u8 {
    match t {
        Terminator::FallThrough => 0,
        Terminator::Jump => 1,
        Terminator::CondJump => 2,
        Terminator::CondTailCall { .. } => 3,
        Terminator::TailCall { .. } => 4,
        Terminator::JumpTable { .. } => 5,
        Terminator::ComputedGoto => 6,
        Terminator::Return => 7,
        Terminator::NoReturnCall => 8,
        Terminator::Trap => 9,
    }
}

fn candidate(
    f: &Function,
    code: &CodeBytes<'_>,
    entry_of: &HashMap<Vaddr, FuncId>,
) -> Option<Candidate> {
    let start = f.range.start;
    let bytes = code(start, f.range.len())?;
    let mut masked = Vec::with_capacity(bytes.len());
    let mut targets = Vec::new();
    let mut calls = Vec::new();
    for inst in &f.insts {
        let at = (inst.addr() - start) as usize;
        let own = bytes.get(at..at + usize::from(inst.len()))?;
        masked.extend(masked_instruction(inst, own)?);
        let Some(t) = inst.pc_relative_target() else {
            continue;
        };
        if f.range.contains(t) {
            targets.push(Target::Local(t - start));
        } else if let Some(&g) = entry_of.get(&t) {
            targets.push(Target::Candidate);
            calls.push(g);
        } else {
            targets.push(Target::Address(t.get()));
        }
    }
    // Bytes between instructions (none in a decoded function) would escape the comparison.
    if masked.len() as u64 != f.range.len() {
        return None;
    }
    let blocks = f
        .blocks
        .iter()
        .map(|b| {
            (
                b.start - start,
                b.insts.start,
                b.insts.end,
                terminator_kind(&b.terminator),
                b.succs
                    .iter()
                    .map(|e| (e.to.0, e.kind as u8))
                    .collect::<Vec<_>>(),
                u8::from(b.is_entry) | u8::from(b.is_reachable) << 1,
            )
        })
        .collect();
    let cfi = f
        .cfi
        .iter()
        .map(|r| {
            (
                r.range.start.checked_since(start).unwrap_or(u64::MAX),
                r.range.len(),
                r.cfa.clone(),
                r.saved.clone(),
                r.args_size,
            )
        })
        .collect();
    Some(Candidate {
        id: f.id,
        key: StaticKey {
            size: f.range.len(),
            masked,
            targets,
            blocks,
            calls: f.calls.iter().map(|c| (c.at - start, c.noreturn)).collect(),
            cfi,
        },
        calls,
    })
}

/// Finds the functions to fold among those `eligible` accepts (and `is_foldable` allows),
/// reading their code through `code`.
pub fn find_identical(
    program: &Program,
    code: &CodeBytes<'_>,
    eligible: &(dyn Fn(FuncId) -> bool + Sync),
) -> Folding {
    let has_parts = functions_with_parts(program);
    let foldable: Vec<&Function> = program
        .functions
        .iter()
        .filter(|f| eligible(f.id) && is_foldable(program, f, &has_parts))
        .collect();
    let entry_of: HashMap<Vaddr, FuncId> = foldable.iter().map(|f| (f.range.start, f.id)).collect();
    let candidates: Vec<Candidate> = foldable
        .par_iter()
        .filter_map(|f| candidate(f, code, &entry_of))
        .collect();

    // Classes by static key; singletons drop out at once.
    let mut by_key: HashMap<&StaticKey, Vec<usize>> = HashMap::new();
    for (i, c) in candidates.iter().enumerate() {
        by_key.entry(&c.key).or_default().push(i);
    }
    let mut groups: Vec<Vec<usize>> = by_key.into_values().filter(|g| g.len() > 1).collect();
    groups.sort();
    // Class of each candidate FuncId; functions outside every class compare by identity.
    let mut class: HashMap<FuncId, usize> = HashMap::new();
    for (k, g) in groups.iter().enumerate() {
        for &i in g {
            class.insert(candidates[i].id, k);
        }
    }
    // Refinement: split every class by the classes its members point at, until nothing
    // splits. Each round that changes anything adds a class, so at most one round per
    // candidate.
    for _ in 0..=candidates.len() {
        let mut next: Vec<Vec<usize>> = Vec::with_capacity(groups.len());
        for g in &groups {
            let mut split: HashMap<Vec<(bool, u32)>, Vec<usize>> = HashMap::new();
            for &i in g {
                let sig = candidates[i]
                    .calls
                    .iter()
                    .map(|callee| match class.get(callee) {
                        Some(&k) => (true, k as u32),
                        None => (false, callee.0),
                    })
                    .collect();
                split.entry(sig).or_default().push(i);
            }
            let mut parts: Vec<Vec<usize>> = split.into_values().collect();
            parts.sort();
            next.extend(parts);
        }
        let changed = next.len() != groups.len();
        let kept: Vec<Vec<usize>> = next.into_iter().filter(|g| g.len() > 1).collect();
        let shrunk = kept.len() != groups.len();
        groups = kept;
        class.clear();
        for (k, g) in groups.iter().enumerate() {
            for &i in g {
                class.insert(candidates[i].id, k);
            }
        }
        if !changed && !shrunk {
            break;
        }
    }

    let mut folding = Folding {
        classes: groups.len(),
        ..Folding::default()
    };
    for g in &groups {
        let mut members: Vec<FuncId> = g.iter().map(|&i| candidates[i].id).collect();
        members.sort();
        let taken = |f: &FuncId| program.function(*f).address_taken;
        let kept = members
            .iter()
            .copied()
            .find(|f| taken(f))
            .unwrap_or(members[0]);
        for &f in &members {
            if f == kept {
                continue;
            }
            if taken(&f) {
                folding.address_taken += 1;
            } else {
                folding.pairs.push((f, kept));
            }
        }
    }
    folding.pairs.sort();
    folding
}

/// Adds the profile of each folded function to its kept copy's (blocks, edges, entries,
/// samples, calls to and from it) and clears the folded one's: the kept copy runs for both
/// now, and the folded one is laid out by no one.
pub fn merge_profiles(profile: &mut AttachedProfile, pairs: &[(FuncId, FuncId)]) {
    let into: HashMap<FuncId, FuncId> = pairs.iter().copied().collect();
    for &(f, kept) in pairs {
        let Some(counts) = profile.functions[f.0 as usize].take() else {
            continue;
        };
        match &mut profile.functions[kept.0 as usize] {
            Some(k) => {
                for (a, b) in k.blocks.iter_mut().zip(&counts.blocks) {
                    *a = a.saturating_add(*b);
                }
                for (a, b) in k.edges.iter_mut().zip(&counts.edges) {
                    for (x, y) in a.iter_mut().zip(b) {
                        *x = x.saturating_add(*y);
                    }
                }
                k.entries = k.entries.saturating_add(counts.entries);
            }
            slot @ None => *slot = Some(counts),
        }
        if let Some(s) = profile.samples.get(f.0 as usize).copied() {
            profile.samples[f.0 as usize] = 0;
            profile.samples[kept.0 as usize] += s;
        }
    }
    if into.is_empty() {
        return;
    }
    let calls = std::mem::take(&mut profile.calls);
    for ((caller, callee), n) in calls {
        let key = (
            into.get(&caller).copied().unwrap_or(caller),
            into.get(&callee).copied().unwrap_or(callee),
        );
        *profile.calls.entry(key).or_default() += n;
    }
}
