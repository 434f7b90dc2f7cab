//! Estimated size of a fragment as the emitter would write it, for layout decisions that
//! weigh bytes (whether splitting a function shrinks its hot part).
//!
//! The estimate takes the branch that ends each block from the emitter's own rule
//! (`rivet_ir::block_end`): a jump to the block placed next is dropped, a conditional jump
//! whose taken side comes next is inverted, a fall-through whose successor is elsewhere gets a
//! `jmp`, and a conditional jump with neither side next becomes `jcc` + `jmp`. A branch to a
//! block of the same fragment is short when the distance, measured on the fragment laid out
//! with short branches, is within the short form's reach (`Isa::short_branch_reaches`: a
//! signed byte on x86-64); a branch anywhere else (the other fragment, another
//! function) is near (in place the emitter may write a nearby function's entry short, which
//! only makes the estimate of both layouts compared a little high). The emitter relaxes until
//! nothing changes; one round is close enough to compare two layouts of one function, and the
//! emitter stays the authority on real sizes.
//! On AArch64 a conditional branch that leaves the fragment goes to an island, a `b` to its
//! target after the fragment's last block (one per target), unless it cannot reach the
//! island in its short form: then it is the opposite test over a `b` (8 bytes), as the
//! emitter writes it. Where the rewrite decided that the whole new text is within reach of
//! a conditional branch (`rivet_arch::FragmentExits::Direct`), such a branch to a block of
//! another fragment of the function is one short instruction straight there, no island.
//! Calls the emitter writes through a PLT stub's GOT slot (`rivet optimize --plt`, off by
//! default) take one byte more each, which the estimate leaves out.

use std::collections::{HashMap, HashSet};

use rivet_arch::{BranchKind, FragmentExits, Isa};
use rivet_elf::Vaddr;
use rivet_ir::{BlockId, Function, PlacedNext, WrittenEnd};

/// A branch the emitter writes at the end of a block.
#[derive(Clone, Copy)]
struct NewBranch {
    kind: BranchKind,
    /// `None`: outside the fragment.
    target: Option<BlockId>,
    /// The original address it goes to.
    to: Vaddr,
    /// A conditional branch to a block of another fragment written straight there
    /// (`FragmentExits::goes_direct`).
    direct: bool,
}

/// The form the emitter gives a branch at the end of a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WrittenForm {
    /// One instruction that reaches its target (x86-64: rel8).
    Short,
    /// The wide form: x86-64 rel32; AArch64 (a conditional branch) the opposite test over a
    /// `b` to the target.
    Near,
    /// AArch64: a conditional branch in its short form to an island, a `b` to the target
    /// placed after the fragment's code.
    Island,
}

/// The branches that end `b`, at position `pos` of a fragment placed as `placed` says, and the
/// bytes of `b` before them.
fn block_end(
    f: &Function,
    b: BlockId,
    placed: &PlacedNext,
    pos: usize,
    exits: FragmentExits,
) -> (u64, Vec<NewBranch>) {
    let block = f.block(b);
    let kept = f.kept_size(block);
    let Some(exit) = f.block_exit(block) else {
        return (kept, Vec::new());
    };
    let last = f.block_insts(block).last();
    let branch = |kind: BranchKind, addr: Vaddr| {
        let target = f.block_at(addr);
        NewBranch {
            kind,
            target,
            to: addr,
            // Only a branch to a block of this function (whose other fragments are new text
            // too) may go straight there; whether it leaves the fragment is for the caller.
            direct: kind == BranchKind::Cond
                && target.is_some()
                && last.is_some_and(|inst| exits.goes_direct(inst)),
        }
    };
    let written = exit.written(|addr| placed.is_next(pos, f.block_at(addr)));
    // A re-created last instruction is replaced by the branches written; any other is kept.
    let body = match (exit.recreates_last(), f.block_insts(block).last()) {
        (true, Some(last)) => kept.saturating_sub(u64::from(last.len())),
        _ => kept,
    };
    let branches = match written {
        None | Some(WrittenEnd::Nothing) => vec![],
        Some(WrittenEnd::Jump { to }) => vec![branch(BranchKind::Jump, to)],
        Some(WrittenEnd::Cond { to, .. }) => vec![branch(BranchKind::Cond, to)],
        Some(WrittenEnd::CondThenJump { taken, fall }) => {
            vec![
                branch(BranchKind::Cond, taken),
                branch(BranchKind::Jump, fall),
            ]
        }
    };
    (body, branches)
}

/// Estimated bytes of `blocks` (one fragment of `f`, in order) once emitted, without
/// alignment padding, with conditional exits to other fragments written as `exits` says.
pub fn estimated_fragment_size(
    isa: Isa,
    f: &Function,
    blocks: &[BlockId],
    exits: FragmentExits,
) -> u64 {
    let (ends, forms, islands) = branch_forms(isa, f, blocks, exits);
    let mut size = 0u64;
    for ((body, branches), forms) in ends.iter().zip(&forms) {
        size += body;
        for (br, &form) in branches.iter().zip(forms) {
            let sizes = isa.branch_sizes(br.kind);
            size += match form {
                WrittenForm::Near => sizes.near,
                WrittenForm::Short | WrittenForm::Island => sizes.short,
            };
        }
    }
    size + islands * isa.branch_sizes(BranchKind::Jump).near
}

/// The form the emitter gives each branch it writes at the end of each block of `blocks`
/// (one fragment of `f`, in order), by position in the fragment: for a conditional branch
/// followed by a jump, the branch first. What this says of a branch to another fragment or
/// function is exact; of one inside the fragment (and of one to an island), it is the
/// estimate's single round.
pub fn written_forms(
    isa: Isa,
    f: &Function,
    blocks: &[BlockId],
    exits: FragmentExits,
) -> Vec<Vec<WrittenForm>> {
    branch_forms(isa, f, blocks, exits).1
}

/// Each block of a fragment: its bytes before its branches, and the branches.
type BlockEnds = Vec<(u64, Vec<NewBranch>)>;

/// The ends of the blocks of a fragment, the form of each of their branches, and the number
/// of islands after the fragment's code.
fn branch_forms(
    isa: Isa,
    f: &Function,
    blocks: &[BlockId],
    exits: FragmentExits,
) -> (BlockEnds, Vec<Vec<WrittenForm>>, u64) {
    let placed = f.placed_next(blocks, true);
    let ends: BlockEnds = blocks
        .iter()
        .enumerate()
        .map(|(pos, &b)| block_end(f, b, &placed, pos, exits))
        .collect();
    let short = |br: &NewBranch| isa.branch_sizes(br.kind).short;
    let members: HashSet<BlockId> = blocks.iter().copied().collect();
    let inside = |br: &NewBranch| br.target.is_some_and(|t| members.contains(&t));
    let leaves = |br: &NewBranch| {
        isa.near_conditional_is_a_pair() && br.kind == BranchKind::Cond && !inside(br)
    };
    // Straight to a block of another fragment: short, whatever the distance (the rewrite's
    // bound on the new text guarantees the reach).
    let direct = |br: &NewBranch| leaves(br) && br.direct;
    let to_island = |br: &NewBranch| leaves(br) && !br.direct;
    // Offsets with every in-fragment branch short and every branch to an island short; the
    // islands, one per target in the order of first use, after the code.
    let mut start: HashMap<BlockId, u64> = HashMap::with_capacity(blocks.len());
    let mut island_targets: Vec<Vaddr> = Vec::new();
    let mut at = 0u64;
    for (&b, (body, branches)) in blocks.iter().zip(&ends) {
        start.insert(b, at);
        at += body;
        for br in branches {
            at += if inside(br) || leaves(br) {
                short(br)
            } else {
                isa.branch_sizes(br.kind).near
            };
            if to_island(br) && !island_targets.contains(&br.to) {
                island_targets.push(br.to);
            }
        }
    }
    let code_end = at;
    let jump = isa.branch_sizes(BranchKind::Jump).near;
    // The branches that do not reach in their short form grow to near.
    let mut forms = Vec::with_capacity(ends.len());
    let mut at = 0u64;
    for (body, branches) in &ends {
        at += body;
        let mut of_block = Vec::with_capacity(branches.len());
        for br in branches {
            let reaches = |target: u64| isa.short_branch_reaches(at, short(br), target as i64);
            of_block.push(if direct(br) {
                WrittenForm::Short
            } else if to_island(br) {
                let k = island_targets.iter().position(|&t| t == br.to).unwrap_or(0) as u64;
                if reaches(code_end + k * jump) {
                    WrittenForm::Island
                } else {
                    WrittenForm::Near
                }
            } else {
                match br.target.filter(|_| inside(br)).and_then(|t| start.get(&t)) {
                    Some(&target) if reaches(target) => WrittenForm::Short,
                    _ => WrittenForm::Near,
                }
            });
            at += short(br);
        }
        forms.push(of_block);
    }
    (ends, forms, island_targets.len() as u64)
}
