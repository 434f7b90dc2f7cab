//! Dyno stats on hand-built functions: exact counts on the original code and on layouts that
//! make the emitter add, drop and invert branches.

mod common;

use common::{fall, function, profile, program, taken};
use rivet_elf::Vaddr;
use rivet_ir::layout::{
    FragmentRef, FunctionLayout, Layout, LayoutStrategy, PltCalls, PromotedCall, PromotedTarget,
    build_layout, split_every_block,
};
use rivet_ir::{BlockId, Call, CallTarget, FuncId, Function, Program, Terminator};
use rivet_passes::attach::{AttachedProfile, FunctionCounts};
use rivet_passes::dyno::{
    DynoStats, count_promoted_calls, dyno_stats, format_comparison, function_dyno_stats,
    move_plt_calls_via_got,
};

const PLT: Vaddr = Vaddr(0x5000);

fn plt() -> CallTarget {
    CallTarget::Plt {
        name: "ext".into(),
        addr: PLT,
    }
}

/// f0: two calls, then a loop of 10 iterations.
///   B0 0x1000: call ext@plt; call *%rax; xor %eax,%eax   (falls into B1)
///   B1 0x1009: inc %eax; cmp $10,%eax; jne B1
///   B2 0x1010: ret
fn loop_fn() -> Function {
    let code = [
        0xe8, 0xfb, 0x3f, 0x00, 0x00, // call 0x5000 (ext@plt)
        0xff, 0xd0, // call *%rax
        0x31, 0xc0, // xor %eax,%eax
        0xff, 0xc0, // inc %eax
        0x83, 0xf8, 0x0a, // cmp $10,%eax
        0x75, 0xf9, // jne 0x1009
        0xc3, // ret
    ];
    let call = |at, target| Call {
        at: Vaddr(at),
        target,
        noreturn: false,
        landing_pad: None,
    };
    function(
        0,
        0x1000,
        &code,
        vec![
            (0x1000, Terminator::FallThrough, vec![fall(1)]),
            (0x1009, Terminator::CondJump, vec![taken(1), fall(2)]),
            (0x1010, Terminator::Return, vec![]),
        ],
        vec![call(0x1000, plt()), call(0x1005, CallTarget::Indirect)],
    )
}

fn loop_counts() -> FunctionCounts {
    FunctionCounts {
        blocks: vec![1, 10, 1],
        edges: vec![vec![1], vec![9, 1], vec![]],
        entries: 1,
    }
}

/// f1: an if/else whose else side is the hot one.
///   B0 0x2000: test %edi,%edi; je B2
///   B1 0x2004: mov $1,%eax; ret
///   B2 0x200a: xor %eax,%eax; ret
fn branch_fn() -> Function {
    let code = [
        0x85, 0xff, // test %edi,%edi
        0x74, 0x06, // je 0x200a
        0xb8, 0x01, 0x00, 0x00, 0x00, // mov $1,%eax
        0xc3, // ret
        0x31, 0xc0, // xor %eax,%eax
        0xc3, // ret
    ];
    function(
        1,
        0x2000,
        &code,
        vec![
            (0x2000, Terminator::CondJump, vec![taken(2), fall(1)]),
            (0x2004, Terminator::Return, vec![]),
            (0x200a, Terminator::Return, vec![]),
        ],
        vec![],
    )
}

fn branch_counts() -> FunctionCounts {
    FunctionCounts {
        blocks: vec![100, 10, 90],
        edges: vec![vec![90, 10], vec![], vec![]],
        entries: 100,
    }
}

/// f2: a jump over a tail call.
///   B0 0x3000: test %edi,%edi; je B2
///   B1 0x3004: jmp B3
///   B2 0x3006: jmp ext@plt   (tail call)
///   B3 0x300b: ret
fn jump_fn() -> Function {
    let code = [
        0x85, 0xff, // test %edi,%edi
        0x74, 0x02, // je 0x3006
        0xeb, 0x05, // jmp 0x300b
        0xe9, 0xf5, 0x1f, 0x00, 0x00, // jmp 0x5000
        0xc3, // ret
    ];
    function(
        2,
        0x3000,
        &code,
        vec![
            (0x3000, Terminator::CondJump, vec![taken(2), fall(1)]),
            (0x3004, Terminator::Jump, vec![taken(3)]),
            (0x3006, Terminator::TailCall { target: plt() }, vec![]),
            (0x300b, Terminator::Return, vec![]),
        ],
        vec![],
    )
}

fn jump_counts() -> FunctionCounts {
    FunctionCounts {
        blocks: vec![50, 30, 20, 30],
        edges: vec![vec![20, 30], vec![30], vec![], vec![]],
        entries: 50,
    }
}

/// f3: a conditional tail call.
///   B0 0x4000: test %edi,%edi; je ext@plt
///   B1 0x4008: ret
fn cond_tail_fn() -> Function {
    let code = [
        0x85, 0xff, // test %edi,%edi
        0x0f, 0x84, 0xf8, 0x0f, 0x00, 0x00, // je 0x5000
        0xc3, // ret
    ];
    function(
        3,
        0x4000,
        &code,
        vec![
            (
                0x4000,
                Terminator::CondTailCall { target: plt() },
                vec![fall(1)],
            ),
            (0x4008, Terminator::Return, vec![]),
        ],
        vec![],
    )
}

fn cond_tail_counts() -> FunctionCounts {
    FunctionCounts {
        blocks: vec![40, 25],
        edges: vec![vec![25], vec![]],
        entries: 40,
    }
}

/// f4: a jump to the very next block, which the emitter drops even in the identity layout.
///   B0 0x6000: jmp B1
///   B1 0x6002: ret
fn jump_next_fn() -> Function {
    function(
        4,
        0x6000,
        &[0xeb, 0x00, 0xc3],
        vec![
            (0x6000, Terminator::Jump, vec![taken(1)]),
            (0x6002, Terminator::Return, vec![]),
        ],
        vec![],
    )
}

fn jump_next_counts() -> FunctionCounts {
    FunctionCounts {
        blocks: vec![5, 5],
        edges: vec![vec![5], vec![]],
        entries: 5,
    }
}

/// A layout of the single function `f0` with these fragments.
fn one_function_layout(fragments: Vec<Vec<u32>>) -> Layout {
    let n = fragments.len() as u32;
    Layout {
        functions: vec![Some(FunctionLayout {
            fragments: fragments
                .into_iter()
                .map(|fr| fr.into_iter().map(BlockId).collect())
                .collect(),
            aligned: Vec::new(),
            changed_exits: Vec::new(),
            promoted_calls: Vec::new(),
        })],
        hot_order: vec![FragmentRef {
            function: FuncId(0),
            fragment: 0,
        }],
        cold_order: (1..n)
            .map(|fragment| FragmentRef {
                function: FuncId(0),
                fragment,
            })
            .collect(),
        in_place: false,
        block_counts: Vec::new(),
        folded: Vec::new(),
        exits: rivet_arch::FragmentExits::Islands,
    }
}

/// A program of the one function `f`, renumbered as f0.
fn single(mut f: Function) -> Program {
    f.id = FuncId(0);
    program(vec![f])
}

#[test]
fn loop_original_and_reversed() {
    let p = single(loop_fn());
    let prof = profile(vec![Some(loop_counts())]);
    let original = dyno_stats(&p, &prof, None);
    assert_eq!(
        original,
        DynoStats {
            instructions: 3 + 3 * 10 + 1,
            function_entries: 1,
            function_calls: 2,
            indirect_calls: 1,
            plt_calls: 1,
            tail_calls: 0,
            returns: 1,
            taken_conditional: 9,
            nontaken_conditional: 1,
            unconditional: 0,
            jump_table: 0,
            computed_goto: 0,
        }
    );
    assert_eq!(original.taken_branches(), 9);
    assert_eq!(original.total_branches(), 10);

    let identity = build_layout(&p, &[true], LayoutStrategy::Identity, false);
    identity.validate(&p).unwrap();
    assert_eq!(dyno_stats(&p, &prof, Some(&identity)), original);

    // [B0, B2, B1]: B0 no longer falls into B1 (one added jmp, run once); the loop branch
    // ends the fragment, so its exit needs a jmp to B2 (run once, on the last iteration).
    let reverse = build_layout(&p, &[true], LayoutStrategy::Reverse, false);
    reverse.validate(&p).unwrap();
    assert_eq!(
        reverse.functions[0].as_ref().unwrap().fragments,
        vec![vec![BlockId(0), BlockId(2), BlockId(1)]]
    );
    let reversed = dyno_stats(&p, &prof, Some(&reverse));
    assert_eq!(
        reversed,
        DynoStats {
            instructions: original.instructions + 2,
            unconditional: 2,
            ..original
        }
    );
    assert_eq!(reversed.taken_branches(), 11);
}

#[test]
fn loop_exit_split_into_cold_fragment() {
    // [[B0, B1], [B2]]: only the loop exit needs a jmp.
    let p = single(loop_fn());
    let prof = profile(vec![Some(loop_counts())]);
    let layout = one_function_layout(vec![vec![0, 1], vec![2]]);
    layout.validate(&p).unwrap();
    let original = dyno_stats(&p, &prof, None);
    let split = dyno_stats(&p, &prof, Some(&layout));
    assert_eq!(split.instructions, original.instructions + 1);
    assert_eq!(split.unconditional, 1);
    assert_eq!(
        (split.taken_conditional, split.nontaken_conditional),
        (9, 1)
    );
}

#[test]
fn hot_taken_side_placed_next_inverts_the_branch() {
    let p = single(branch_fn());
    let prof = profile(vec![Some(branch_counts())]);
    let original = dyno_stats(&p, &prof, None);
    assert_eq!(original.instructions, 2 * 100 + 2 * 10 + 2 * 90);
    assert_eq!(
        (original.taken_conditional, original.nontaken_conditional),
        (90, 10)
    );
    assert_eq!(original.returns, 100);
    // [B0, B2, B1]: the taken side comes next, so `je` becomes `jne B1`: taken 10 times.
    let reverse = build_layout(&p, &[true], LayoutStrategy::Reverse, false);
    let after = dyno_stats(&p, &prof, Some(&reverse));
    assert_eq!(
        after,
        DynoStats {
            taken_conditional: 10,
            nontaken_conditional: 90,
            ..original
        }
    );
}

#[test]
fn jump_to_next_block_is_dropped_and_tail_calls_stay() {
    let p = single(jump_fn());
    let prof = profile(vec![Some(jump_counts())]);
    let original = dyno_stats(&p, &prof, None);
    assert_eq!(
        original,
        DynoStats {
            instructions: 2 * 50 + 30 + 20 + 30,
            function_entries: 50,
            tail_calls: 20,
            returns: 30,
            taken_conditional: 20,
            nontaken_conditional: 30,
            unconditional: 30,
            ..DynoStats::default()
        }
    );
    // [B0, B1, B3, B2]: B1's jmp to B3 is dropped (30 fewer instructions and jumps).
    let layout = one_function_layout(vec![vec![0, 1, 3, 2]]);
    layout.validate(&p).unwrap();
    assert_eq!(
        dyno_stats(&p, &prof, Some(&layout)),
        DynoStats {
            instructions: original.instructions - 30,
            unconditional: 0,
            ..original
        }
    );
    // [B0, B2, B1, B3]: the branch is inverted (taken 30 times, to B1) and the jmp dropped.
    let layout = one_function_layout(vec![vec![0, 2, 1, 3]]);
    assert_eq!(
        dyno_stats(&p, &prof, Some(&layout)),
        DynoStats {
            instructions: original.instructions - 30,
            taken_conditional: 30,
            nontaken_conditional: 20,
            unconditional: 0,
            ..original
        }
    );
}

#[test]
fn conditional_tail_call_is_never_inverted() {
    let p = single(cond_tail_fn());
    let prof = profile(vec![Some(cond_tail_counts())]);
    let original = dyno_stats(&p, &prof, None);
    // Taken = block count - fall-through edge = 40 - 25.
    assert_eq!(
        original,
        DynoStats {
            instructions: 2 * 40 + 25,
            function_entries: 40,
            tail_calls: 15,
            returns: 25,
            taken_conditional: 15,
            nontaken_conditional: 25,
            ..DynoStats::default()
        }
    );
    // [[B0], [B1]]: the fall-through moved away, so a jmp follows the conditional tail call.
    let layout = one_function_layout(vec![vec![0], vec![1]]);
    layout.validate(&p).unwrap();
    assert_eq!(
        dyno_stats(&p, &prof, Some(&layout)),
        DynoStats {
            instructions: original.instructions + 25,
            unconditional: 25,
            ..original
        }
    );
}

#[test]
fn identity_layout_drops_a_jump_to_the_next_block() {
    let p = single(jump_next_fn());
    let prof = profile(vec![Some(jump_next_counts())]);
    let original = dyno_stats(&p, &prof, None);
    assert_eq!((original.instructions, original.unconditional), (10, 5));
    let identity = build_layout(&p, &[true], LayoutStrategy::Identity, false);
    let after = dyno_stats(&p, &prof, Some(&identity));
    assert_eq!((after.instructions, after.unconditional), (5, 0));
}

#[test]
fn whole_program_sums_functions_and_keeps_untouched_ones() {
    let p = program(vec![
        loop_fn(),
        branch_fn(),
        jump_fn(),
        cond_tail_fn(),
        jump_next_fn(),
    ]);
    let counts = vec![
        Some(loop_counts()),
        Some(branch_counts()),
        Some(jump_counts()),
        Some(cond_tail_counts()),
        Some(jump_next_counts()),
    ];
    let prof = profile(counts.clone());
    let per_function: DynoStats = p
        .functions
        .iter()
        .zip(&counts)
        .map(|(f, c)| function_dyno_stats(f, c.as_ref().unwrap(), None))
        .sum();
    let original = dyno_stats(&p, &prof, None);
    assert_eq!(original, per_function);
    assert_eq!(original.function_entries, 1 + 100 + 50 + 40 + 5);

    // Only f1 is rewritten (reversed): only its branch changes.
    let layout = build_layout(
        &p,
        &[false, true, false, false, false],
        LayoutStrategy::Reverse,
        false,
    );
    layout.validate(&p).unwrap();
    let after = dyno_stats(&p, &prof, Some(&layout));
    assert_eq!(
        after,
        DynoStats {
            taken_conditional: original.taken_conditional - 90 + 10,
            nontaken_conditional: original.nontaken_conditional - 10 + 90,
            ..original
        }
    );

    // Without counts a function contributes nothing.
    let partial = profile(vec![None, Some(branch_counts())]);
    assert_eq!(
        dyno_stats(&p, &partial, None),
        function_dyno_stats(&p.functions[1], &branch_counts(), None)
    );
    assert_eq!(
        dyno_stats(&p, &AttachedProfile::default(), Some(&layout)),
        DynoStats::default()
    );
}

#[test]
fn missing_counts_do_not_panic() {
    let p = single(loop_fn());
    // One block count, no edge counts: B0 ran 10 times, the rest never.
    let prof = profile(vec![Some(FunctionCounts {
        blocks: vec![10],
        edges: vec![],
        entries: 0,
    })]);
    let original = dyno_stats(&p, &prof, None);
    assert_eq!(original.instructions, 30);
    assert_eq!(
        (
            original.function_calls,
            original.indirect_calls,
            original.plt_calls
        ),
        (20, 10, 10)
    );
    let reverse = build_layout(&p, &[true], LayoutStrategy::Reverse, false);
    let after = dyno_stats(&p, &prof, Some(&reverse));
    assert_eq!((after.instructions, after.unconditional), (40, 10));
    assert_eq!(after.all_conditional(), 0);

    // Huge counts saturate instead of overflowing.
    let prof = profile(vec![Some(FunctionCounts {
        blocks: vec![u64::MAX; 3],
        edges: vec![vec![u64::MAX], vec![u64::MAX, u64::MAX], vec![]],
        entries: u64::MAX,
    })]);
    let s = dyno_stats(&p, &prof, Some(&reverse));
    assert_eq!(s.instructions, u64::MAX);
    assert_eq!(s.total_branches(), u64::MAX);
    assert_eq!((s + s).function_entries, u64::MAX);

    // A layout naming a block the function does not have is ignored, not indexed.
    let bogus = one_function_layout(vec![vec![0, 7]]);
    let prof = profile(vec![Some(loop_counts())]);
    assert_eq!(dyno_stats(&p, &prof, Some(&bogus)).instructions, 3 + 1);
}

#[test]
fn rows_are_stable_and_table_is_aligned() {
    let p = single(loop_fn());
    let prof = profile(vec![Some(loop_counts())]);
    let before = dyno_stats(&p, &prof, None);
    let reverse = build_layout(&p, &[true], LayoutStrategy::Reverse, false);
    let after = dyno_stats(&p, &prof, Some(&reverse));
    let names: Vec<&str> = before.rows().iter().map(|r| r.0).collect();
    assert_eq!(names.len(), DynoStats::ROWS);
    assert_eq!(names[0], "executed instructions");
    assert_eq!(names[DynoStats::ROWS - 1], "total branches");
    let table = format_comparison(&before, &after);
    // The header line starts with spaces, so the expectation is written line by line.
    let expected = [
        "                                before  after   change",
        "executed instructions               34     36   +5.88%",
        "function entries                     1      1    0.00%",
        "function calls                       2      2    0.00%",
        "indirect calls                       1      1    0.00%",
        "PLT calls                            1      1    0.00%",
        "tail calls                           0      0    0.00%",
        "returns                              1      1    0.00%",
        "taken conditional branches           9      9    0.00%",
        "non-taken conditional branches       1      1    0.00%",
        "all conditional branches            10     10    0.00%",
        "unconditional branches               0      2      n/a",
        "jump table branches                  0      0    0.00%",
        "computed goto branches               0      0    0.00%",
        "taken branches                       9     11  +22.22%",
        "total branches                      10     12  +20.00%",
    ];
    assert_eq!(table.lines().collect::<Vec<_>>(), expected);
    assert!(table.ends_with('\n'));
}

/// The input's alignment padding runs in the original and not in rewritten code: f0 with a
/// `nop` (`xchg %ax,%ax`) aligning the loop head that B0 falls into.
///   B0 0x1000: xor %eax,%eax; xchg %ax,%ax   (falls into B1)
///   B1 0x1004: inc %eax; cmp $10,%eax; jne B1
///   B2 0x100b: ret
#[test]
fn padding_runs_in_the_original_only() {
    let code = [
        0x31, 0xc0, // xor %eax,%eax
        0x66, 0x90, // xchg %ax,%ax (padding)
        0xff, 0xc0, // inc %eax
        0x83, 0xf8, 0x0a, // cmp $10,%eax
        0x75, 0xf9, // jne 0x1004
        0xc3, // ret
    ];
    let f = function(
        0,
        0x1000,
        &code,
        vec![
            (0x1000, Terminator::FallThrough, vec![fall(1)]),
            (0x1004, Terminator::CondJump, vec![taken(1), fall(2)]),
            (0x100b, Terminator::Return, vec![]),
        ],
        vec![],
    );
    assert!(f.is_dropped_padding(1) && !f.is_dropped_padding(0));
    let p = single(f);
    let prof = profile(vec![Some(loop_counts())]);
    let original = dyno_stats(&p, &prof, None);
    assert_eq!(original.instructions, 2 + 3 * 10 + 1);
    let identity = build_layout(&p, &[true], LayoutStrategy::Identity, false);
    let after = dyno_stats(&p, &prof, Some(&identity));
    assert_eq!(after.instructions, original.instructions - 1);
    assert_eq!(after.unconditional, 0);
}

/// f3: a PLT call on the cold side of a branch.
///   B0 0x4000: test %edi,%edi; je B2
///   B1 0x4004: call ext@plt; ret
///   B2 0x400a: ret
fn plt_call_fn() -> Function {
    let code = [
        0x85, 0xff, // test %edi,%edi
        0x74, 0x06, // je 0x400a
        0xe8, 0xf7, 0x0f, 0x00, 0x00, // call 0x5000 (ext@plt)
        0xc3, // ret
        0xc3, // ret
    ];
    function(
        3,
        0x4000,
        &code,
        vec![
            (0x4000, Terminator::CondJump, vec![taken(2), fall(1)]),
            (0x4004, Terminator::Return, vec![]),
            (0x400a, Terminator::Return, vec![]),
        ],
        vec![Call {
            at: Vaddr(0x4004),
            target: plt(),
            noreturn: false,
            landing_pad: None,
        }],
    )
}

#[test]
fn plt_calls_made_through_the_got_count_as_indirect_calls() {
    let p = single(plt_call_fn());
    let prof = profile(vec![Some(FunctionCounts {
        blocks: vec![10, 2, 8],
        edges: vec![vec![8, 2], vec![], vec![]],
        entries: 10,
    })]);
    let whole = one_function_layout(vec![vec![0, 1, 2]]);
    let split = one_function_layout(vec![vec![0, 2], vec![1]]);
    whole.validate(&p).unwrap();
    split.validate(&p).unwrap();
    // (PLT calls, indirect calls, all calls)
    let stats = |layout: &Layout, plt_calls| {
        let mut s = dyno_stats(&p, &prof, Some(layout));
        move_plt_calls_via_got(&mut s, &p, &prof, layout, plt_calls);
        (s.plt_calls, s.indirect_calls, s.function_calls)
    };
    assert_eq!(stats(&whole, PltCalls::Keep), (2, 0, 2));
    assert_eq!(stats(&whole, PltCalls::Hot), (0, 2, 2));
    // Cold code keeps its PLT calls under `hot`, not under `all`.
    assert_eq!(stats(&split, PltCalls::Hot), (2, 0, 2));
    assert_eq!(stats(&split, PltCalls::All), (0, 2, 2));
    // Functions rewritten in place keep theirs.
    let in_place = Layout {
        in_place: true,
        ..whole.clone()
    };
    assert_eq!(stats(&in_place, PltCalls::All), (2, 0, 2));
}

/// `loop_fn`'s `call *%rax` (instruction 1, in B0, run 10 times) promoted to two callees
/// that the site table says made `first` and `second` of its calls.
fn promoted_loop(first: u64, second: u64) -> (Layout, AttachedProfile) {
    let mut layout = one_function_layout(vec![vec![0, 1, 2]]);
    let target = |count| PromotedTarget {
        function: FuncId(0),
        entry: Vaddr(0x1000),
        count,
    };
    layout.functions[0].as_mut().unwrap().promoted_calls = vec![PromotedCall {
        inst: 1,
        targets: vec![target(first), target(second)],
        site_count: 10,
        noreturn: false,
    }];
    let prof = profile(vec![Some(FunctionCounts {
        blocks: vec![10, 100, 10],
        edges: vec![vec![10], vec![90, 10], vec![]],
        entries: 10,
    })]);
    (layout, prof)
}

#[test]
fn promoted_calls_taken_by_their_compares_count_as_direct() {
    let p = single(loop_fn());
    let (layout, prof) = promoted_loop(6, 3);
    layout.validate(&p).unwrap();
    let plain = dyno_stats(&p, &prof, Some(&layout));
    assert_eq!(plain.indirect_calls, 10);
    let promoted = |p: &Program, layout: &Layout, rewritten: bool| {
        let mut s = dyno_stats(p, &prof, Some(layout));
        count_promoted_calls(&mut s, p, &prof, layout, |_| rewritten);
        s
    };
    let s = promoted(&p, &layout, true);
    // 6 + 3 runs go direct; 1 takes the fallback. Calls in all stay 10.
    assert_eq!(s.indirect_calls, 1);
    assert_eq!(s.function_calls, plain.function_calls);
    // The first je runs 10 times (6 taken), the second 4 (3 taken).
    assert_eq!(s.taken_conditional, plain.taken_conditional + 9);
    assert_eq!(s.nontaken_conditional, plain.nontaken_conditional + 5);
    // Jumps to the join: after the second callee's call (3) and after the fallback (1).
    assert_eq!(s.unconditional, plain.unconditional + 4);
    // `cmp $T,%rax; je` twice for 10 and 4 runs, and the 4 jumps.
    assert_eq!(s.instructions, plain.instructions + 2 * 10 + 2 * 4 + 4);

    // With PIC each compare is `lea T(%rip),%r11; cmp %r11,%rax`.
    let mut pie = p.clone();
    pie.info.kind = rivet_elf::ElfKind::PieExecutable;
    let s = promoted(&pie, &layout, true);
    assert_eq!(s.instructions, plain.instructions + 3 * 10 + 3 * 4 + 4);

    // A site table with more calls than reach a compare (a scaled or merged profile) is
    // capped by the runs: no run counts twice, and none is left for the fallback.
    let (capped, prof2) = promoted_loop(6, 30);
    let mut s = dyno_stats(&p, &prof2, Some(&capped));
    count_promoted_calls(&mut s, &p, &prof2, &capped, |_| true);
    assert_eq!(s.indirect_calls, 0);
    assert_eq!(s.taken_conditional, plain.taken_conditional + 10);
    assert_eq!(s.unconditional, plain.unconditional + 4);

    // A function the output did not rewrite keeps its indirect call.
    assert_eq!(promoted(&p, &layout, false), plain);
}

/// AArch64 instruction words as bytes.
fn words(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// `branch_fn` on AArch64: B0 0x2000 `cbz w0, B2`; B1 0x2004 `mov w0, #1; ret`; B2 0x200c
/// `mov w0, #0; ret`. Counts as `branch_counts`: B2 the hot side.
fn branch_fn_aarch64() -> Function {
    let code = words(&[
        0x3400_0060, // cbz w0, +0xc
        0x5280_0020, // mov w0, #1
        0xd65f_03c0, // ret
        0x5280_0000, // mov w0, #0
        0xd65f_03c0, // ret
    ]);
    common::function_of(
        rivet_arch::Isa::Aarch64,
        0,
        0x2000,
        &code,
        vec![
            (0x2000, Terminator::CondJump, vec![taken(2), fall(1)]),
            (0x2004, Terminator::Return, vec![]),
            (0x200c, Terminator::Return, vec![]),
        ],
        vec![],
    )
}

#[test]
fn aarch64_conditional_branches_to_another_fragment_go_through_an_island() {
    let p = single(branch_fn_aarch64());
    let prof = profile(vec![Some(branch_counts())]);
    let original = dyno_stats(&p, &prof, None);
    assert_eq!(original.instructions, 100 + 2 * 10 + 2 * 90);
    assert_eq!(
        (original.taken_conditional, original.nontaken_conditional),
        (90, 10)
    );
    // In one fragment every branch is short: as the original.
    let identity = build_layout(&p, &[true], LayoutStrategy::Identity, false);
    assert_eq!(dyno_stats(&p, &prof, Some(&identity)), original);
    // [[B0, B1], [B2]]: `cbz` to B2 in the other fragment is written `cbz w0, island` with
    // the island `b B2` after B1. The 90 runs to B2 take the `cbz` and the island's `b`; the
    // 10 to B1 fall through.
    let layout = one_function_layout(vec![vec![0, 1], vec![2]]);
    layout.validate(&p).unwrap();
    assert_eq!(
        dyno_stats(&p, &prof, Some(&layout)),
        DynoStats {
            instructions: original.instructions + 90,
            taken_conditional: 90,
            nontaken_conditional: 10,
            unconditional: 90,
            ..original
        }
    );
    // [[B0, B2], [B1]]: inverted to `cbnz w0, island`, the island `b B1`, B1 in the other
    // fragment. The 90 runs to B2 fall through (no taken branch on the hot path), the 10 to
    // B1 take the `cbnz` and the `b`.
    let layout = one_function_layout(vec![vec![0, 2], vec![1]]);
    layout.validate(&p).unwrap();
    assert_eq!(
        dyno_stats(&p, &prof, Some(&layout)),
        DynoStats {
            instructions: original.instructions + 10,
            taken_conditional: 10,
            nontaken_conditional: 90,
            unconditional: 10,
            ..original
        }
    );
}

/// Below the new-text bound (`FragmentExits::Direct`) the same exits go straight to the other
/// fragment: one taken branch to reach it, no island's `b`.
#[test]
fn aarch64_conditional_branches_to_another_fragment_go_direct_below_the_bound() {
    let p = single(branch_fn_aarch64());
    let prof = profile(vec![Some(branch_counts())]);
    let original = dyno_stats(&p, &prof, None);
    let direct = |fragments| Layout {
        exits: rivet_arch::FragmentExits::Direct {
            reach: (1 << 20) - 4,
        },
        ..one_function_layout(fragments)
    };
    // [[B0, B1], [B2]]: `cbz w0, B2`, taken 90 times, as in the original.
    let layout = direct(vec![vec![0, 1], vec![2]]);
    layout.validate(&p).unwrap();
    assert_eq!(dyno_stats(&p, &prof, Some(&layout)), original);
    // [[B0, B2], [B1]]: inverted to `cbnz w0, B1`, taken the 10 times B1 runs.
    let layout = direct(vec![vec![0, 2], vec![1]]);
    assert_eq!(
        dyno_stats(&p, &prof, Some(&layout)),
        DynoStats {
            taken_conditional: 10,
            nontaken_conditional: 90,
            ..original
        }
    );
}

#[test]
fn aarch64_conditional_tail_calls_go_through_an_island() {
    // `cond_tail_fn` on AArch64: B0 0x4000 `cbz w0, ext@plt`; B1 0x4004 `ret`.
    let f = common::function_of(
        rivet_arch::Isa::Aarch64,
        0,
        0x4000,
        &words(&[0x3400_8000, 0xd65f_03c0]), // cbz w0, 0x5000; ret
        vec![
            (
                0x4000,
                Terminator::CondTailCall { target: plt() },
                vec![fall(1)],
            ),
            (0x4004, Terminator::Return, vec![]),
        ],
        vec![],
    );
    let p = single(f);
    let prof = profile(vec![Some(cond_tail_counts())]);
    let original = dyno_stats(&p, &prof, None);
    assert_eq!(
        (
            original.taken_conditional,
            original.nontaken_conditional,
            original.tail_calls
        ),
        (15, 25, 15)
    );
    // Rewritten, the branch to another function is `cbz w0, island` with the island
    // `b ext@plt` after the `ret`: the 25 returns fall through, the 15 tail calls take the
    // `cbz` and are the island's `b`, one more instruction each.
    let identity = build_layout(&p, &[true], LayoutStrategy::Identity, false);
    assert_eq!(
        dyno_stats(&p, &prof, Some(&identity)),
        DynoStats {
            instructions: original.instructions + 15,
            taken_conditional: 15,
            nontaken_conditional: 25,
            ..original
        }
    );
}

/// `rewrite --split-every-block`: the entry alone in the first fragment, every other block in
/// one cold fragment in the order the strategy chose, cold fragments in the order of the hot
/// ones (reversed here), and in place in address order. The loop's branch then runs in the
/// cold fragment and every iteration still falls through where it did.
#[test]
fn every_block_split_cold_follows_the_strategys_orders() {
    let p = program(vec![loop_fn(), branch_fn()]);
    let reverse = split_every_block(
        &p,
        build_layout(&p, &[true, true], LayoutStrategy::Reverse, false),
    );
    reverse.validate(&p).unwrap();
    for f in 0..2 {
        assert_eq!(
            reverse.functions[f].as_ref().unwrap().fragments,
            vec![vec![BlockId(0)], vec![BlockId(2), BlockId(1)]]
        );
    }
    let refs = |f: u32, fragment: u32| FragmentRef {
        function: FuncId(f),
        fragment,
    };
    assert_eq!(reverse.hot_order, vec![refs(1, 0), refs(0, 0)]);
    assert_eq!(reverse.cold_order, vec![refs(1, 1), refs(0, 1)]);

    let in_place = split_every_block(
        &p,
        build_layout(&p, &[true, true], LayoutStrategy::Identity, true),
    );
    in_place.validate(&p).unwrap();
    assert!(in_place.hot_order.is_empty());
    assert_eq!(in_place.cold_order, vec![refs(0, 1), refs(1, 1)]);
    assert_eq!(
        in_place.functions[0].as_ref().unwrap().fragments,
        vec![vec![BlockId(0)], vec![BlockId(1), BlockId(2)]]
    );

    // One added jump: the entry falls into B1, now in the other fragment.
    let prof = profile(vec![Some(loop_counts()), None]);
    let original = dyno_stats(&p, &prof, None);
    let split = dyno_stats(&p, &prof, Some(&in_place));
    assert_eq!(split.unconditional, original.unconditional + 1);
    assert_eq!(split.taken_conditional, original.taken_conditional);
}
