//! Tail duplication (`rivet_passes::taildup`) on hand-written x86-64 functions: the modes'
//! rules (distance, tails that leave the function or jump on), each refusal (landing pad,
//! size, unwind state, an edge that never ran, a tail placed next, a tail that calls or traps,
//! a jump-table target, an entry, an address-taken label, a tail reading its own address), and the
//! counts the layout keeps.

mod common;

use std::sync::Arc;

use rivet_arch::FragmentExits;

use common::{fall, function, program, taken};
use rivet_elf::eh_frame::{Cfa, CfiRow, SavedRegister};
use rivet_elf::{Vaddr, VaddrRange};
use rivet_ir::layout::{ExitChange, FunctionLayout, Layout};
use rivet_ir::{
    BlockExit, BlockId, EdgeKind, Function, JumpTable, JumpTableKind, TableBound, Terminator,
};
use rivet_passes::attach::FunctionCounts;
use rivet_passes::dyno::function_dyno_stats;
use rivet_passes::taildup::{TailDupMode, TailDupOptions, apply, function_duplications};

fn row(start: u64, len: u64, offset: i64) -> CfiRow {
    CfiRow {
        range: VaddrRange::new(Vaddr(start), len),
        cfa: Cfa::RegisterOffset {
            register: 7,
            offset,
        },
        saved: Arc::from(vec![(16u16, SavedRegister::AtCfaOffset(-8))]),
        args_size: 0,
    }
}

/// ```text
/// 1000     b0: test %edi,%edi ; je b2
/// 1004     b1: xor %eax,%eax ; jmp b3        the hot jump
/// 100b     b2: mov $1,%eax  x `filler`       falls into b3
/// 100b+5n  b3: <tail> ; ret (or jmp b1)      the tail
/// ```
fn shared_tail(filler: usize, tail: &[u8], tail_jumps_back: bool) -> Function {
    // b1's `jmp` is a rel32, so b2 starts at 0x100b and the `je` skips 7 bytes.
    let b2 = 0x100b;
    let b3 = b2 + 5 * filler as u64;
    let mut code = vec![0x85, 0xff, 0x74, 0x07, 0x31, 0xc0, 0xe9];
    code.extend_from_slice(&((b3 - 0x100b) as i32).to_le_bytes());
    for _ in 0..filler {
        code.extend_from_slice(&[0xb8, 0x01, 0x00, 0x00, 0x00]);
    }
    code.extend_from_slice(tail);
    let last = if tail_jumps_back {
        // jmp b1 (rel32 back from the end)
        let end = 0x1000 + code.len() as u64 + 5;
        code.push(0xe9);
        code.extend_from_slice(&((0x1004i64 - end as i64) as i32).to_le_bytes());
        (Terminator::Jump, vec![taken(1)])
    } else {
        code.push(0xc3);
        (Terminator::Return, vec![])
    };
    let mut f = function(
        0,
        0x1000,
        &code,
        vec![
            (0x1000, Terminator::CondJump, vec![taken(2), fall(1)]),
            (0x1004, Terminator::Jump, vec![taken(3)]),
            (b2, Terminator::FallThrough, vec![fall(3)]),
            (b3, last.0, last.1),
        ],
        vec![],
    );
    f.cfi = vec![row(0x1000, code.len() as u64, 8)];
    f
}

const ADD5: &[u8] = &[0x83, 0xc0, 0x05];

fn layout(order: &[u32]) -> FunctionLayout {
    FunctionLayout {
        fragments: vec![order.iter().copied().map(BlockId).collect()],
        ..FunctionLayout::default()
    }
}

/// Every edge ran 10 times.
fn ran(f: &Function) -> FunctionCounts {
    FunctionCounts {
        blocks: vec![10; f.blocks.len()],
        edges: f.blocks.iter().map(|b| vec![10; b.succs.len()]).collect(),
        entries: 10,
    }
}

fn options(mode: TailDupMode) -> TailDupOptions {
    TailDupOptions {
        mode,
        ..TailDupOptions::default()
    }
}

fn duplicated(f: &Function, order: &[u32], mode: TailDupMode) -> Vec<(u32, u32, BlockExit)> {
    function_duplications(f, &ran(f), &layout(order), options(mode))
        .into_iter()
        .map(|c| match c.change {
            ExitChange::TailDuplicate { tail } => {
                assert_eq!(c.bypassed, vec![(EdgeKind::Taken, tail)]);
                (c.block.0, tail.0, c.exit)
            }
            other => panic!("unexpected change {other:?}"),
        })
        .collect()
}

#[test]
fn a_hot_jump_to_a_returning_tail_becomes_a_copy_of_it() {
    let f = shared_tail(1, ADD5, false);
    let ret = f.block(BlockId(3)).insts.end - 1;
    let want = vec![(1, 3, BlockExit::Return { ret })];
    assert_eq!(duplicated(&f, &[0, 1, 2, 3], TailDupMode::Cache), want);
    assert_eq!(duplicated(&f, &[0, 1, 2, 3], TailDupMode::Aggressive), want);
    // Moderate leaves a jump of 5 bytes: it stays in the cache line.
    assert!(duplicated(&f, &[0, 1, 2, 3], TailDupMode::Moderate).is_empty());
    // Past 64 bytes it copies too.
    let far = shared_tail(13, ADD5, false);
    let ret = far.block(BlockId(3)).insts.end - 1;
    assert_eq!(
        duplicated(&far, &[0, 1, 2, 3], TailDupMode::Moderate),
        vec![(1, 3, BlockExit::Return { ret })]
    );
    assert!(duplicated(&f, &[0, 1, 2, 3], TailDupMode::None).is_empty());
}

#[test]
fn a_tail_placed_next_or_never_jumped_to_is_left() {
    let f = shared_tail(1, ADD5, false);
    assert!(duplicated(&f, &[0, 1, 3, 2], TailDupMode::Aggressive).is_empty());
    let mut cold = ran(&f);
    cold.edges[1] = vec![0];
    assert!(
        function_duplications(
            &f,
            &cold,
            &layout(&[0, 1, 2, 3]),
            options(TailDupMode::Cache)
        )
        .is_empty()
    );
}

#[test]
fn tails_that_cannot_be_copied_are_refused() {
    // Larger than the threshold (3 + 1 bytes > 3).
    let f = shared_tail(1, ADD5, false);
    let small = TailDupOptions {
        max_bytes: 3,
        ..options(TailDupMode::Cache)
    };
    assert!(function_duplications(&f, &ran(&f), &layout(&[0, 1, 2, 3]), small).is_empty());
    // A landing pad.
    let mut pad = shared_tail(1, ADD5, false);
    pad.blocks[3].is_landing_pad = true;
    assert!(duplicated(&pad, &[0, 1, 2, 3], TailDupMode::Cache).is_empty());
    // Entered in another unwind state than the jump leaves.
    let mut state = shared_tail(1, ADD5, false);
    let t = state.block(BlockId(3)).start.get();
    let end = 0x1000 + state.range.len();
    state.cfi = vec![row(0x1000, t - 0x1000, 8), row(t, end - t, 16)];
    assert!(duplicated(&state, &[0, 1, 2, 3], TailDupMode::Cache).is_empty());
    // No unwind rows at all: nothing to compare.
    let mut none = shared_tail(1, ADD5, false);
    none.cfi.clear();
    assert!(duplicated(&none, &[0, 1, 2, 3], TailDupMode::Cache).is_empty());
    // A tail that calls (`call rel32` to itself: any call) is never copied.
    let call = shared_tail(1, &[0xe8, 0, 0, 0, 0], false);
    assert!(duplicated(&call, &[0, 1, 2, 3], TailDupMode::Aggressive).is_empty());
}

#[test]
fn tails_whose_address_matters_or_that_trap_are_refused() {
    // The control: the same tail, nothing special about it, is copied.
    let plain = shared_tail(1, ADD5, false);
    assert_eq!(
        duplicated(&plain, &[0, 1, 2, 3], TailDupMode::Cache).len(),
        1
    );
    let t = plain.block(BlockId(3)).start;
    // A jump-table target: left alone on purpose (the pass copies only code that branches
    // of this function alone reach, so a copy never has to agree with a table).
    let mut table = shared_tail(1, ADD5, false);
    table.jump_tables.push(JumpTable {
        addr: Vaddr(0x8000),
        entry_size: 8,
        kind: JumpTableKind::Absolute,
        jump_at: Vaddr(0x1000),
        entries: vec![t],
        bound: TableBound::Relocations,
        default_target: None,
    });
    assert!(duplicated(&table, &[0, 1, 2, 3], TailDupMode::Aggressive).is_empty());
    // A secondary entry and an address-taken label: something outside this jump reaches it.
    let mut entry = shared_tail(1, ADD5, false);
    entry.secondary_entries.push(t);
    assert!(duplicated(&entry, &[0, 1, 2, 3], TailDupMode::Aggressive).is_empty());
    let mut taken_address = shared_tail(1, ADD5, false);
    taken_address.blocks[3].is_address_taken = true;
    assert!(duplicated(&taken_address, &[0, 1, 2, 3], TailDupMode::Aggressive).is_empty());
    // `lea -7(%rip),%rax` reads the tail's own address: in a copy it would read the
    // original's, which differs from what the copied code ran at.
    let own = shared_tail(1, &[0x48, 0x8d, 0x05, 0xf9, 0xff, 0xff, 0xff], false);
    let lea = &own.insts[own.block(BlockId(3)).insts.start as usize];
    assert_eq!(lea.pc_relative_target(), Some(own.block(BlockId(3)).start));
    assert!(duplicated(&own, &[0, 1, 2, 3], TailDupMode::Aggressive).is_empty());
    // A RIP-relative reference elsewhere (the function's entry) is re-encoded: copied.
    let elsewhere_disp = (0x1000i64 - (t.get() as i64 + 7)) as i32;
    let mut lea_entry = vec![0x48, 0x8d, 0x05];
    lea_entry.extend_from_slice(&elsewhere_disp.to_le_bytes());
    let elsewhere = shared_tail(1, &lea_entry, false);
    assert_eq!(
        duplicated(&elsewhere, &[0, 1, 2, 3], TailDupMode::Cache).len(),
        1
    );
    // A trap (`ud2`) does not continue: never copied.
    let trap = shared_tail(1, &[0x0f, 0x0b], false);
    assert!(duplicated(&trap, &[0, 1, 2, 3], TailDupMode::Aggressive).is_empty());
}

#[test]
fn a_tail_that_jumps_on_is_copied_by_aggressive_and_by_cache_only_when_it_then_falls() {
    // b3: add $5,%eax ; jmp b1 — a loop back to b1.
    let f = shared_tail(1, ADD5, true);
    let jump = BlockExit::Jump {
        to: Vaddr(0x1004),
        tail_call: false,
    };
    // And b3's jump back to b1 becomes a copy of b1 in turn: each copy holds its original's
    // code and exit, so the two do not compound.
    let back = BlockExit::Jump {
        to: f.block(BlockId(3)).start,
        tail_call: false,
    };
    assert_eq!(
        duplicated(&f, &[0, 1, 2, 3], TailDupMode::Aggressive),
        vec![(1, 3, jump), (3, 1, back)]
    );
    // The copy would jump to b1 as b1's jump to b3 did: no taken branch saved.
    assert!(duplicated(&f, &[0, 1, 2, 3], TailDupMode::Cache).is_empty());
    // Moderate copies only tails that leave the function.
    let far = shared_tail(13, ADD5, true);
    assert!(duplicated(&far, &[0, 1, 2, 3], TailDupMode::Moderate).is_empty());
}

#[test]
fn apply_records_the_copy_and_moves_the_edge_count_off_the_tail() {
    let f = shared_tail(1, ADD5, false);
    let counts = vec![Some(ran(&f))];
    let p = program(vec![f]);
    let mut l = Layout {
        functions: vec![Some(layout(&[0, 1, 2, 3]))],
        block_counts: vec![vec![10, 10, 10, 20]],
        ..Layout::default()
    };
    let done = apply(&p, &counts, &mut l, options(TailDupMode::Cache));
    assert_eq!(done.duplicated, 1);
    assert_eq!(done.bytes, 4);
    assert_eq!(done.jumps_removed, 10);
    assert_eq!(l.block_counts[0][3], 10);
    let fl = l.functions[0].as_ref().unwrap();
    assert_eq!(fl.changed_exits.len(), 1);
    assert_eq!(
        rivet_ir::layout::duplicated_tail(&fl.changed_exits, BlockId(1)),
        Some(BlockId(3))
    );
    // In place nothing is copied (the function must fit its old bytes).
    let mut in_place = Layout {
        functions: vec![Some(layout(&[0, 1, 2, 3]))],
        in_place: true,
        ..Layout::default()
    };
    assert_eq!(
        apply(&p, &counts, &mut in_place, options(TailDupMode::Cache)).duplicated,
        0
    );
}

#[test]
fn the_dyno_stats_count_the_copy_and_not_the_jump() {
    // b1 (10 runs) jumped to b3 (`add $5 ; ret`); with the copy b1 runs `xor ; add ; ret`
    // and b3 runs only for its other way in: one instruction fewer per run of b1, no taken
    // jump, and the copy's `add` counted.
    let f = shared_tail(1, ADD5, false);
    let c = FunctionCounts {
        blocks: vec![20, 10, 10, 20],
        edges: vec![vec![10, 10], vec![10], vec![10], vec![]],
        entries: 20,
    };
    let plain = layout(&[0, 1, 2, 3]);
    let mut changed = plain.clone();
    changed.changed_exits = function_duplications(&f, &c, &plain, options(TailDupMode::Cache));
    assert_eq!(changed.changed_exits.len(), 1);
    let before = function_dyno_stats(&f, &c, Some((&plain, FragmentExits::Islands)));
    let after = function_dyno_stats(&f, &c, Some((&changed, FragmentExits::Islands)));
    assert_eq!(before.instructions - after.instructions, 10);
    assert_eq!(before.unconditional - after.unconditional, 10);
}
