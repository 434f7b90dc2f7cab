//! The peepholes (`rivet_passes::peephole`) on hand-written x86-64 functions: each rewrite,
//! each refusal (landing pad, jump-table target, address-taken block, unwind state that
//! differs or is unknown, a layout where the rewrite would not pay), and what the dyno stats
//! make of a changed exit.

mod common;

use std::sync::Arc;

use common::{fall, function, taken};
use rivet_arch::FragmentExits;
use rivet_elf::eh_frame::{Cfa, CfiRow, SavedRegister};
use rivet_elf::{Vaddr, VaddrRange};
use rivet_ir::layout::{ExitChange, FunctionLayout};
use rivet_ir::{
    BlockExit, BlockId, CallTarget, Function, JumpTable, JumpTableKind, TableBound, Terminator,
};
use rivet_passes::attach::FunctionCounts;
use rivet_passes::dyno::function_dyno_stats;
use rivet_passes::peephole::{PeepholeOptions, function_changes};

const ALL: PeepholeOptions = PeepholeOptions {
    double_jumps: true,
    useless_branches: true,
    jumps_to_returns: true,
    conditional_tail_calls: true,
};

/// One unwind row over `len` bytes from `start`, with the CFA `offset` bytes above `%rsp`.
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
/// 1000 b0: test %edi,%edi ; je 1008 (b2)
/// 1004 b1: xor %eax,%eax ; jmp 100a (b3)
/// 1008 b2: jmp 100b (b4)          only a jump
/// 100a b3: ret                    only a return
/// 100b b4: mov $1,%eax ; ret
/// ```
fn chains() -> Function {
    let code = [
        0x85, 0xff, 0x74, 0x04, // test; je b2
        0x31, 0xc0, 0xeb, 0x02, // xor; jmp b3
        0xeb, 0x01, // jmp b4
        0xc3, // ret
        0xb8, 0x01, 0x00, 0x00, 0x00, 0xc3, // mov $1,%eax; ret
    ];
    let mut f = function(
        0,
        0x1000,
        &code,
        vec![
            (0x1000, Terminator::CondJump, vec![taken(2), fall(1)]),
            (0x1004, Terminator::Jump, vec![taken(3)]),
            (0x1008, Terminator::Jump, vec![taken(4)]),
            (0x100a, Terminator::Return, vec![]),
            (0x100b, Terminator::Return, vec![]),
        ],
        vec![],
    );
    f.cfi = vec![row(0x1000, code.len() as u64, 8)];
    f
}

fn layout(order: &[u32]) -> FunctionLayout {
    FunctionLayout {
        fragments: vec![order.iter().copied().map(BlockId).collect()],
        ..FunctionLayout::default()
    }
}

/// Every edge of `f` ran once.
fn ran(f: &Function) -> FunctionCounts {
    FunctionCounts {
        blocks: vec![1; f.blocks.len()],
        edges: f.blocks.iter().map(|b| vec![1; b.succs.len()]).collect(),
        entries: 1,
    }
}

fn changes(f: &Function, order: &[u32]) -> Vec<(u32, ExitChange, BlockExit)> {
    function_changes(f, Some(&ran(f)), &layout(order), ALL)
        .into_iter()
        .map(|c| (c.block.0, c.change, c.exit))
        .collect()
}

#[test]
fn a_branch_to_a_jump_goes_to_its_target_and_a_jump_to_a_ret_becomes_the_ret() {
    let f = chains();
    assert_eq!(
        changes(&f, &[0, 1, 2, 3, 4]),
        vec![
            (
                0,
                ExitChange::DoubleJump,
                BlockExit::Cond {
                    taken: Vaddr(0x100b),
                    fall: Vaddr(0x1004),
                    tail_call: false,
                    invertible: true,
                }
            ),
            (1, ExitChange::JumpToReturn, BlockExit::Return { ret: 5 }),
        ]
    );
}

#[test]
fn nothing_changes_where_the_layout_already_falls_into_the_target_or_nothing_ran() {
    let f = chains();
    // b2 after b0 (b0's taken side is next: it falls into the jump); b3 after b1.
    assert_eq!(changes(&f, &[0, 2, 4, 1, 3]), vec![]);
    let never = FunctionCounts {
        edges: f.blocks.iter().map(|b| vec![0; b.succs.len()]).collect(),
        ..ran(&f)
    };
    assert!(function_changes(&f, Some(&never), &layout(&[0, 1, 2, 3, 4]), ALL).is_empty());
    assert!(function_changes(&f, None, &layout(&[0, 1, 2, 3, 4]), ALL).is_empty());
}

#[test]
fn blocks_whose_address_is_observable_are_not_looked_through() {
    let mut pad = chains();
    pad.blocks[2].is_landing_pad = true;
    pad.blocks[3].is_address_taken = true;
    assert_eq!(changes(&pad, &[0, 1, 2, 3, 4]), vec![]);

    let mut table = chains();
    table.jump_tables.push(JumpTable {
        addr: Vaddr(0x4000),
        entry_size: 8,
        kind: JumpTableKind::Absolute,
        jump_at: Vaddr(0x1000),
        entries: vec![Vaddr(0x1008), Vaddr(0x100a)],
        bound: TableBound::Relocations,
        default_target: None,
    });
    assert_eq!(changes(&table, &[0, 1, 2, 3, 4]), vec![]);
}

#[test]
fn a_ret_is_copied_only_into_the_same_unwind_state() {
    let mut differs = chains();
    // The jump runs with 16 bytes on the stack, the `ret` with 8: a bad copy would unwind
    // wrongly (and such code cannot be right, but the pass must not trust it).
    differs.cfi = vec![row(0x1000, 0x0a, 16), row(0x100a, 7, 8)];
    let unknown = Function {
        cfi: Vec::new(),
        ..chains()
    };
    for f in [differs, unknown] {
        let got = changes(&f, &[0, 1, 2, 3, 4]);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].1, ExitChange::DoubleJump);
    }
}

#[test]
fn a_conditional_jump_whose_sides_meet_becomes_a_jump() {
    // 2000: test; je 2006 (b2) | 2004: jmp 2006 | 2006: ret
    let code = [0x85, 0xff, 0x74, 0x02, 0xeb, 0x00, 0xc3];
    let f = function(
        0,
        0x2000,
        &code,
        vec![
            (0x2000, Terminator::CondJump, vec![taken(2), fall(1)]),
            (0x2004, Terminator::Jump, vec![taken(2)]),
            (0x2006, Terminator::Return, vec![]),
        ],
        vec![],
    );
    for order in [[0, 1, 2], [0, 2, 1]] {
        let got = changes(&f, &order);
        assert_eq!(
            got,
            vec![(
                0,
                ExitChange::UselessBranch,
                BlockExit::Jump {
                    to: Vaddr(0x2006),
                    tail_call: false
                }
            )],
            "{order:?}"
        );
    }
}

/// ```text
/// 3000 b0: test %edi,%edi ; jne 3007 (b2)
/// 3004 b1: xor %eax,%eax ; ret
/// 3007 b2: jmp 5000                 a tail call
/// ```
fn tail_call() -> Function {
    let code = [
        0x85, 0xff, 0x75, 0x03, // test; jne b2
        0x31, 0xc0, 0xc3, // xor; ret
        0xe9, 0xf4, 0x1f, 0x00, 0x00, // jmp 0x5000
    ];
    let mut f = function(
        0,
        0x3000,
        &code,
        vec![
            (0x3000, Terminator::CondJump, vec![taken(2), fall(1)]),
            (0x3004, Terminator::Return, vec![]),
            (
                0x3007,
                Terminator::TailCall {
                    target: CallTarget::Unknown {
                        addr: Vaddr(0x5000),
                    },
                },
                vec![],
            ),
        ],
        vec![],
    );
    f.cfi = vec![row(0x3000, code.len() as u64, 8)];
    f
}

fn counts(taken_to_tail_call: u64) -> FunctionCounts {
    FunctionCounts {
        blocks: vec![100, 100 - taken_to_tail_call, taken_to_tail_call],
        edges: vec![
            vec![taken_to_tail_call, 100 - taken_to_tail_call],
            vec![],
            vec![],
        ],
        entries: 100,
    }
}

#[test]
fn a_conditional_jump_to_a_tail_call_goes_to_the_callee_when_it_ran() {
    let f = tail_call();
    let c = counts(30);
    let got = function_changes(&f, Some(&c), &layout(&[0, 1, 2]), ALL);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].change, ExitChange::ConditionalTailCall);
    assert_eq!(
        got[0].exit,
        BlockExit::Cond {
            taken: Vaddr(0x5000),
            fall: Vaddr(0x3004),
            tail_call: true,
            invertible: true,
        }
    );
    // The dyno stats: the tail-call block's 30 jumps are no longer executed.
    let plain = layout(&[0, 1, 2]);
    let changed = FunctionLayout {
        changed_exits: got,
        promoted_calls: Vec::new(),
        ..layout(&[0, 1, 2])
    };
    let before = function_dyno_stats(&f, &c, Some((&plain, FragmentExits::Islands)));
    let after = function_dyno_stats(&f, &c, Some((&changed, FragmentExits::Islands)));
    assert_eq!(before.instructions - after.instructions, 30);
    assert_eq!(before.tail_calls, after.tail_calls);
    assert_eq!(before.taken_conditional, after.taken_conditional);
}

#[test]
fn no_conditional_tail_call_without_runs_a_fall_into_it_or_the_same_unwind_state() {
    let f = tail_call();
    let none = |f: &Function, c: &FunctionCounts, order: &[u32]| {
        function_changes(f, Some(c), &layout(order), ALL).is_empty()
    };
    assert!(none(&f, &counts(0), &[0, 1, 2]), "the edge never ran");
    assert!(
        none(&f, &counts(30), &[0, 2, 1]),
        "the tail call is placed next"
    );
    let mut differs = tail_call();
    differs.cfi = vec![row(0x3000, 7, 16), row(0x3007, 5, 8)];
    assert!(
        none(&differs, &counts(30), &[0, 1, 2]),
        "unwind state differs"
    );
    let mut observed = tail_call();
    observed.blocks[2].is_address_taken = true;
    assert!(none(&observed, &counts(30), &[0, 1, 2]), "address taken");
    let only_peepholes = PeepholeOptions {
        conditional_tail_calls: false,
        ..ALL
    };
    assert!(
        function_changes(&f, Some(&counts(30)), &layout(&[0, 1, 2]), only_peepholes).is_empty()
    );
}

#[test]
fn a_bypassed_jump_leaves_the_dyno_stats() {
    let f = chains();
    // b0 runs 100 times, 60 to b2 (then b4), 40 to b1 (then b3).
    let c = FunctionCounts {
        blocks: vec![100, 40, 60, 40, 60],
        edges: vec![vec![60, 40], vec![40], vec![60], vec![], vec![]],
        entries: 100,
    };
    let plain = layout(&[0, 1, 2, 3, 4]);
    let changed = FunctionLayout {
        changed_exits: function_changes(&f, Some(&c), &plain, ALL),
        promoted_calls: Vec::new(),
        ..layout(&[0, 1, 2, 3, 4])
    };
    let before = function_dyno_stats(&f, &c, Some((&plain, FragmentExits::Islands)));
    let after = function_dyno_stats(&f, &c, Some((&changed, FragmentExits::Islands)));
    // b2's 60 jumps and b3's 40 returns are gone; b1's 40 jumps are returns now.
    assert_eq!(before.unconditional - after.unconditional, 100);
    assert_eq!(before.instructions - after.instructions, 100);
    assert_eq!(before.returns, after.returns);
}
