//! The optimizing layout (`rivet_passes::optimize`) on hand-built functions decoded from real
//! x86-64 bytes: ext-TSP, input and reversed block orders; hot/cold splitting (trailing run,
//! every cold block, landing pads, `min_hot_count`); which functions and compiler-split
//! families are rewritten; the function orders and the hot/cold order lists; hot loop head
//! alignment. Every layout built here must pass `Layout::validate`.

mod common;

use common::{fall, function, profile, program, taken};
use rivet_ir::layout::{AlignedBlock, FragmentRef, FunctionLayout, Layout};
use rivet_ir::{BlockId, FuncId, Function, Parent, PartKind, Program, Terminator};
use rivet_layout::LandingPads;
use rivet_passes::attach::{AttachedProfile, FunctionCounts};
use rivet_passes::optimize::{
    BlockAlignment, BlockOrder, FunctionOrder, OptimizeOptions, Splitting, optimized_layout,
    order_blocks, order_blocks_for,
};

// ---------------------------------------------------------------------------------------------
// Functions. Each is placed at `base` (a multiple of 0x1000) so that programs can hold several;
// jumps are relative, so the bytes do not depend on `base`.

/// An if/else whose else side (B2) is the hot one.
///   B0 +0x0: test %edi,%edi; je B2
///   B1 +0x4: mov $1,%eax; jmp B3
///   B2 +0xb: xor %eax,%eax            (falls into B3)
///   B3 +0xd: ret
fn diamond(id: u32, base: u64) -> Function {
    let code = [
        0x85, 0xff, // test %edi,%edi
        0x74, 0x07, // je +0xb
        0xb8, 0x01, 0x00, 0x00, 0x00, // mov $1,%eax
        0xeb, 0x02, // jmp +0xd
        0x31, 0xc0, // xor %eax,%eax
        0xc3, // ret
    ];
    function(
        id,
        base,
        &code,
        vec![
            (base, Terminator::CondJump, vec![taken(2), fall(1)]),
            (base + 0x4, Terminator::Jump, vec![taken(3)]),
            (base + 0xb, Terminator::FallThrough, vec![fall(3)]),
            (base + 0xd, Terminator::Return, vec![]),
        ],
        vec![],
    )
}

/// The diamond entered `n` times, the else side taken 9 times out of 10.
fn diamond_counts(n: u64) -> FunctionCounts {
    let (hot, cold) = (n - n / 10, n / 10);
    FunctionCounts {
        blocks: vec![n, cold, hot, n],
        edges: vec![vec![hot, cold], vec![cold], vec![hot], vec![]],
        entries: n,
    }
}

/// A loop of ten iterations whose latch is a block of its own.
///   B0 +0x0: xor %eax,%eax                 (falls into B1)
///   B1 +0x2: inc %eax; cmp $10,%eax; je B3  (the loop head, 7 bytes)
///   B2 +0x9: jmp B1                         (the latch)
///   B3 +0xb: ret
fn latch_loop(id: u32, base: u64) -> Function {
    latch_loop_exiting_with(id, base, &[0xc3]) // ret
}

/// `latch_loop` with a 16-byte exit block: `mov $1,%eax; mov $2,%eax; mov $3,%eax; ret`
/// (B3 at +0xb), big enough that moving it and the latch out shrinks the hot part.
fn latch_loop_long_exit(id: u32, base: u64) -> Function {
    let mut exit = Vec::new();
    for k in 1..=3 {
        exit.extend([0xb8, k, 0, 0, 0]); // mov $k,%eax
    }
    exit.push(0xc3); // ret
    latch_loop_exiting_with(id, base, &exit)
}

/// `latch_loop`'s head and latch, with `exit` as B3.
fn latch_loop_exiting_with(id: u32, base: u64, exit: &[u8]) -> Function {
    let mut code = vec![
        0x31, 0xc0, // xor %eax,%eax
        0xff, 0xc0, // inc %eax
        0x83, 0xf8, 0x0a, // cmp $10,%eax
        0x74, 0x02, // je +0xb
        0xeb, 0xf7, // jmp +0x2
    ];
    code.extend_from_slice(exit);
    function(
        id,
        base,
        &code,
        vec![
            (base, Terminator::FallThrough, vec![fall(1)]),
            (base + 0x2, Terminator::CondJump, vec![taken(3), fall(2)]),
            (base + 0x9, Terminator::Jump, vec![taken(1)]),
            (base + 0xb, Terminator::Return, vec![]),
        ],
        vec![],
    )
}

/// One entry, ten runs of the loop head, nine of the latch.
fn latch_loop_counts() -> FunctionCounts {
    FunctionCounts {
        blocks: vec![1, 10, 9, 1],
        edges: vec![vec![1], vec![1, 9], vec![9], vec![]],
        entries: 1,
    }
}

/// A loop entered through a jump to its bottom, with an error path that never runs.
///   B0 +0x0:  test %edi,%edi; js B2
///   B1 +0x4:  xor %eax,%eax; jmp B3
///   B2 +0x8:  mov $-1,%eax; ret          (never runs)
///   B3 +0xe:  inc %eax; cmp $10,%eax; jne B3
///   B4 +0x15: ret
fn guarded_loop(id: u32, base: u64) -> Function {
    let code = [
        0x85, 0xff, // test %edi,%edi
        0x78, 0x04, // js +0x8
        0x31, 0xc0, // xor %eax,%eax
        0xeb, 0x06, // jmp +0xe
        0xb8, 0xff, 0xff, 0xff, 0xff, // mov $-1,%eax
        0xc3, // ret
        0xff, 0xc0, // inc %eax
        0x83, 0xf8, 0x0a, // cmp $10,%eax
        0x75, 0xf9, // jne +0xe
        0xc3, // ret
    ];
    function(
        id,
        base,
        &code,
        vec![
            (base, Terminator::CondJump, vec![taken(2), fall(1)]),
            (base + 0x4, Terminator::Jump, vec![taken(3)]),
            (base + 0x8, Terminator::Return, vec![]),
            (base + 0xe, Terminator::CondJump, vec![taken(3), fall(4)]),
            (base + 0x15, Terminator::Return, vec![]),
        ],
        vec![],
    )
}

fn guarded_loop_counts() -> FunctionCounts {
    FunctionCounts {
        blocks: vec![1, 1, 0, 10, 1],
        edges: vec![vec![0, 1], vec![1], vec![], vec![9, 1], vec![]],
        entries: 1,
    }
}

/// Two checks, each with a rarely or never taken side: a cold block in the middle of the input
/// order (B2) and one at its end (B5).
///   B0 +0x0:  test %edi,%edi; js B2
///   B1 +0x4:  mov $1,%eax; jmp B3
///   B2 +0xb:  xor %eax,%eax; ret
///   B3 +0xe:  test %esi,%esi; jne B5
///   B4 +0x12: ret
///   B5 +0x13: mov $2,%eax; ret
fn two_checks(id: u32, base: u64) -> Function {
    let code = [
        0x85, 0xff, // test %edi,%edi
        0x78, 0x07, // js +0xb
        0xb8, 0x01, 0x00, 0x00, 0x00, // mov $1,%eax
        0xeb, 0x03, // jmp +0xe
        0x31, 0xc0, // xor %eax,%eax
        0xc3, // ret
        0x85, 0xf6, // test %esi,%esi
        0x75, 0x01, // jne +0x13
        0xc3, // ret
        0xb8, 0x02, 0x00, 0x00, 0x00, // mov $2,%eax
        0xc3, // ret
    ];
    function(
        id,
        base,
        &code,
        vec![
            (base, Terminator::CondJump, vec![taken(2), fall(1)]),
            (base + 0x4, Terminator::Jump, vec![taken(3)]),
            (base + 0xb, Terminator::Return, vec![]),
            (base + 0xe, Terminator::CondJump, vec![taken(5), fall(4)]),
            (base + 0x12, Terminator::Return, vec![]),
            (base + 0x13, Terminator::Return, vec![]),
        ],
        vec![],
    )
}

/// `two_checks` entered 50 times with B1 run `b1` times (so B2 runs 50 - b1 times) and B5
/// never.
fn two_checks_counts(b1: u64) -> FunctionCounts {
    let b2 = 50 - b1;
    FunctionCounts {
        blocks: vec![50, b1, b2, b1, b1, 0],
        edges: vec![vec![b2, b1], vec![b1], vec![], vec![0, b1], vec![]],
        entries: 50,
    }
}

/// A one-block function: `mov $-1,%eax; ret` (6 bytes).
fn leaf(id: u32, base: u64) -> Function {
    function(
        id,
        base,
        &[0xb8, 0xff, 0xff, 0xff, 0xff, 0xc3],
        vec![(base, Terminator::Return, vec![])],
        vec![],
    )
}

fn leaf_counts(n: u64) -> FunctionCounts {
    FunctionCounts {
        blocks: vec![n],
        edges: vec![vec![]],
        entries: n,
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers.

fn ids(v: &[u32]) -> Vec<BlockId> {
    v.iter().map(|&b| BlockId(b)).collect()
}

fn fragments(v: &[&[u32]]) -> Vec<Vec<BlockId>> {
    v.iter().map(|f| ids(f)).collect()
}

fn frag(function: u32, fragment: u32) -> FragmentRef {
    FragmentRef {
        function: FuncId(function),
        fragment,
    }
}

fn options(block_order: BlockOrder, splitting: Splitting) -> OptimizeOptions {
    OptimizeOptions {
        block_order,
        splitting,
        ..OptimizeOptions::default()
    }
}

/// `optimized_layout` with every function movable and selected, checked valid.
fn layout(p: &Program, prof: &AttachedProfile, o: &OptimizeOptions) -> Layout {
    layout_with(p, prof, o, &vec![true; p.functions.len()], &|_| true, false)
}

/// `optimized_layout`, checked valid.
fn layout_with(
    p: &Program,
    prof: &AttachedProfile,
    o: &OptimizeOptions,
    movable: &[bool],
    selected: &dyn Fn(FuncId) -> bool,
    in_place: bool,
) -> Layout {
    let l = optimized_layout(p, prof, o, movable, selected, in_place);
    if let Err(e) = l.validate(p) {
        panic!("{e}: {l:#?}");
    }
    l
}

fn function_layout(l: &Layout, f: u32) -> &FunctionLayout {
    l.function(FuncId(f))
        .unwrap_or_else(|| panic!("f{f} is not rewritten"))
}

fn frags_of(l: &Layout, f: u32) -> Vec<Vec<BlockId>> {
    function_layout(l, f).fragments.clone()
}

fn rewritten(l: &Layout) -> Vec<bool> {
    l.functions.iter().map(Option::is_some).collect()
}

/// The functions of the hot order.
fn hot_functions(l: &Layout) -> Vec<u32> {
    l.hot_order
        .iter()
        .inspect(|r| assert_eq!(r.fragment, 0))
        .map(|r| r.function.0)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Block order.

#[test]
fn ext_tsp_puts_the_hot_else_side_right_after_the_entry() {
    let p = program(vec![diamond(0, 0x1000)]);
    let counts = diamond_counts(100);
    // B0 falls into the hot B2, which falls into B3; the cold B1 jumps back to B3.
    assert_eq!(
        order_blocks(&p.functions[0], &counts, BlockOrder::ExtTsp),
        ids(&[0, 2, 3, 1])
    );
    let l = layout(
        &p,
        &profile(vec![Some(counts)]),
        &OptimizeOptions::default(),
    );
    // No block has a zero count: nothing to split.
    assert_eq!(frags_of(&l, 0), fragments(&[&[0, 2, 3, 1]]));
    assert_eq!(l.hot_order, vec![frag(0, 0)]);
    assert!(l.cold_order.is_empty());

    // With the then side hot, B1 is placed next and its jmp to B3 becomes a fall-through.
    let then_hot = FunctionCounts {
        blocks: vec![100, 90, 10, 100],
        edges: vec![vec![10, 90], vec![90], vec![10], vec![]],
        entries: 100,
    };
    assert_eq!(
        order_blocks(&p.functions[0], &then_hot, BlockOrder::ExtTsp),
        ids(&[0, 1, 3, 2])
    );
}

#[test]
fn ext_tsp_makes_a_hot_loop_fall_through_and_sinks_the_never_run_block() {
    let p = program(vec![guarded_loop(0, 0x1000)]);
    let counts = guarded_loop_counts();
    // B1 falls into the loop B3 (its jmp goes), B3 exits by falling into B4; B2 never ran.
    assert_eq!(
        order_blocks(&p.functions[0], &counts, BlockOrder::ExtTsp),
        ids(&[0, 1, 3, 4, 2])
    );
    for splitting in [Splitting::HotCold, Splitting::AllCold] {
        let l = layout(
            &p,
            &profile(vec![Some(counts.clone())]),
            &options(BlockOrder::ExtTsp, splitting),
        );
        assert_eq!(frags_of(&l, 0), fragments(&[&[0, 1, 3, 4], &[2]]));
        assert_eq!(l.hot_order, vec![frag(0, 0)]);
        assert_eq!(l.cold_order, vec![frag(0, 1)]);
    }
    let l = layout(
        &p,
        &profile(vec![Some(counts)]),
        &options(BlockOrder::ExtTsp, Splitting::Off),
    );
    assert_eq!(frags_of(&l, 0), fragments(&[&[0, 1, 3, 4, 2]]));
}

#[test]
fn in_place_ext_tsp_keeps_the_input_fall_throughs_it_has_no_reason_to_break() {
    // Both sides of the diamond run equally often: no order scores better than the input's,
    // whose fall-throughs cost no jump. A function rewritten in place must fit in its old
    // bytes, so there ext-TSP keeps them.
    let p = program(vec![diamond(0, 0x1000), guarded_loop(1, 0x2000)]);
    let even = FunctionCounts {
        blocks: vec![100, 50, 50, 100],
        edges: vec![vec![50, 50], vec![50], vec![50], vec![]],
        entries: 100,
    };
    assert_eq!(
        order_blocks_for(&p.functions[0], &even, BlockOrder::ExtTsp, true),
        ids(&[0, 1, 2, 3])
    );
    // A real gain still wins: the loop is entered by falling into it, its error path sinks.
    assert_eq!(
        order_blocks_for(
            &p.functions[1],
            &guarded_loop_counts(),
            BlockOrder::ExtTsp,
            true
        ),
        ids(&[0, 1, 3, 4, 2])
    );
}

#[test]
fn ext_tsp_rotates_a_loop_with_a_separate_latch() {
    // The latch B2 goes above the head B1: it falls into B1 and B1 falls out of the loop into
    // B3, leaving one backward jump per iteration and one jump from the entry.
    let p = program(vec![latch_loop(0, 0x1000)]);
    assert_eq!(
        order_blocks(&p.functions[0], &latch_loop_counts(), BlockOrder::ExtTsp),
        ids(&[0, 2, 1, 3])
    );
}

#[test]
fn input_and_reversed_block_orders() {
    let p = program(vec![diamond(0, 0x1000), two_checks(1, 0x2000)]);
    let (d, t) = (&p.functions[0], &p.functions[1]);
    let (dc, tc) = (diamond_counts(100), two_checks_counts(45));
    assert_eq!(order_blocks(d, &dc, BlockOrder::None), ids(&[0, 1, 2, 3]));
    assert_eq!(
        order_blocks(d, &dc, BlockOrder::Reverse),
        ids(&[0, 3, 2, 1])
    );
    assert_eq!(
        order_blocks(t, &tc, BlockOrder::None),
        ids(&[0, 1, 2, 3, 4, 5])
    );
    assert_eq!(
        order_blocks(t, &tc, BlockOrder::Reverse),
        ids(&[0, 5, 4, 3, 2, 1])
    );
    // The counts do not matter to these orders.
    assert_eq!(
        order_blocks(d, &FunctionCounts::default(), BlockOrder::Reverse),
        ids(&[0, 3, 2, 1])
    );

    let prof = profile(vec![Some(dc), Some(tc)]);
    let l = layout(&p, &prof, &options(BlockOrder::None, Splitting::Off));
    assert_eq!(frags_of(&l, 0), fragments(&[&[0, 1, 2, 3]]));
    assert_eq!(frags_of(&l, 1), fragments(&[&[0, 1, 2, 3, 4, 5]]));
    let l = layout(&p, &prof, &options(BlockOrder::Reverse, Splitting::Off));
    assert_eq!(frags_of(&l, 0), fragments(&[&[0, 3, 2, 1]]));
    assert_eq!(frags_of(&l, 1), fragments(&[&[0, 5, 4, 3, 2, 1]]));
    // Reversed, two_checks ends with its hot B1: no trailing cold run, but B5 is cold.
    let l = layout(&p, &prof, &options(BlockOrder::Reverse, Splitting::HotCold));
    assert_eq!(frags_of(&l, 1), fragments(&[&[0, 5, 4, 3, 2, 1]]));
    let l = layout(&p, &prof, &options(BlockOrder::Reverse, Splitting::AllCold));
    assert_eq!(frags_of(&l, 1), fragments(&[&[0, 4, 3, 2, 1], &[5]]));
}

// ---------------------------------------------------------------------------------------------
// Splitting.

#[test]
fn all_cold_moves_every_cold_block_and_hot_cold_only_the_trailing_run() {
    // B1 runs every time: B2 (mid-order) and B5 (last) never run.
    let p = program(vec![two_checks(0, 0x1000)]);
    let prof = profile(vec![Some(two_checks_counts(50))]);
    let l = layout(&p, &prof, &options(BlockOrder::None, Splitting::AllCold));
    assert_eq!(frags_of(&l, 0), fragments(&[&[0, 1, 3, 4], &[2, 5]]));
    assert_eq!(l.cold_order, vec![frag(0, 1)]);
    let l = layout(&p, &prof, &options(BlockOrder::None, Splitting::HotCold));
    assert_eq!(frags_of(&l, 0), fragments(&[&[0, 1, 2, 3, 4], &[5]]));
    assert_eq!(l.cold_order, vec![frag(0, 1)]);
    let l = layout(&p, &prof, &options(BlockOrder::None, Splitting::Off));
    assert_eq!(frags_of(&l, 0), fragments(&[&[0, 1, 2, 3, 4, 5]]));
    assert!(l.cold_order.is_empty());
    assert_eq!(l.hot_order, vec![frag(0, 0)]);
}

#[test]
fn a_split_that_does_not_shrink_the_hot_part_is_undone() {
    // With min_hot_count 10, latch_loop's latch B2 (9 runs) and exit B3 (1 run) are cold.
    // Moving them out would take 3 bytes from the hot part and add 9: a near `je` to B3 and a
    // near `jmp` to B2 instead of the short `je` and the fall-through. The function stays whole.
    let o = OptimizeOptions {
        min_hot_count: 10,
        ..options(BlockOrder::None, Splitting::AllCold)
    };
    let p = program(vec![latch_loop(0, 0x1000)]);
    let l = layout(&p, &profile(vec![Some(latch_loop_counts())]), &o);
    assert_eq!(frags_of(&l, 0), fragments(&[&[0, 1, 2, 3]]));
    assert!(l.cold_order.is_empty());
    // A 16-byte exit is worth the branches: split.
    let p = program(vec![latch_loop_long_exit(0, 0x1000)]);
    let l = layout(&p, &profile(vec![Some(latch_loop_counts())]), &o);
    assert_eq!(frags_of(&l, 0), fragments(&[&[0, 1], &[2, 3]]));
    assert_eq!(l.cold_order, vec![frag(0, 1)]);
}

#[test]
fn unreachable_padding_never_makes_a_cold_fragment() {
    // B0 `test %edi,%edi; je B3`, B1 `mov $1,%eax; ret`, B2 `nopl 0(%rax)` (the padding
    // after the `ret`; nothing reaches it), B3 `xor %eax,%eax; ret`. Both sides run: the only
    // never-run block is the padding, which takes no bytes before B3.
    let code = [
        0x85, 0xff, 0x74, 0x0a, // test %edi,%edi; je +0xe
        0xb8, 0x01, 0x00, 0x00, 0x00, 0xc3, // mov $1,%eax; ret
        0x0f, 0x1f, 0x40, 0x00, // nopl 0x0(%rax)
        0x31, 0xc0, 0xc3, // xor %eax,%eax; ret
    ];
    let f = function(
        0,
        0x1000,
        &code,
        vec![
            (0x1000, Terminator::CondJump, vec![taken(3), fall(1)]),
            (0x1004, Terminator::Return, vec![]),
            (0x100a, Terminator::FallThrough, vec![fall(3)]),
            (0x100e, Terminator::Return, vec![]),
        ],
        vec![],
    );
    assert!(!f.blocks[2].is_reachable);
    let counts = FunctionCounts {
        blocks: vec![10, 4, 0, 6],
        edges: vec![vec![6, 4], vec![], vec![0], vec![]],
        entries: 10,
    };
    let p = program(vec![f]);
    for order in [BlockOrder::None, BlockOrder::ExtTsp] {
        for splitting in [Splitting::HotCold, Splitting::AllCold] {
            let l = layout(
                &p,
                &profile(vec![Some(counts.clone())]),
                &options(order, splitting),
            );
            let frags = frags_of(&l, 0);
            assert_eq!(frags.len(), 1, "{order:?} {splitting:?}: {frags:?}");
            assert_eq!(frags[0].len(), 4);
            assert!(l.cold_order.is_empty());
            // Right before its successor, where it takes no bytes and separates nothing.
            let at = |b| frags[0].iter().position(|&x| x == BlockId(b)).unwrap();
            assert_eq!(at(2) + 1, at(3), "{order:?} {splitting:?}: {frags:?}");
        }
    }
}

#[test]
fn a_function_entered_but_with_all_block_counts_zero_stays_whole() {
    // `cold_blocks` has nothing to go by when every block count is zero: no split, but the
    // entry count alone makes the function hot enough to be rewritten.
    let p = program(vec![two_checks(0, 0x1000), two_checks(1, 0x2000)]);
    let zero = |entries| FunctionCounts {
        blocks: vec![0; 6],
        edges: vec![vec![0, 0], vec![0], vec![], vec![0, 0], vec![]],
        entries,
    };
    let prof = profile(vec![Some(zero(5)), Some(zero(0))]);
    for order in [BlockOrder::None, BlockOrder::ExtTsp] {
        let l = layout(&p, &prof, &options(order, Splitting::AllCold));
        assert_eq!(rewritten(&l), [true, false]);
        assert_eq!(frags_of(&l, 0), fragments(&[&[0, 1, 2, 3, 4, 5]]));
        assert_eq!(l.hot_order, vec![frag(0, 0)]);
        assert!(l.cold_order.is_empty());
    }
    // Block counts without an entry count (a sampled profile) are enough too.
    let sampled = FunctionCounts {
        blocks: vec![0, 0, 0, 7, 7, 0],
        edges: vec![vec![0, 0], vec![0], vec![], vec![0, 7], vec![]],
        entries: 0,
    };
    let prof = profile(vec![Some(sampled), None]);
    let l = layout(&p, &prof, &options(BlockOrder::None, Splitting::AllCold));
    assert_eq!(rewritten(&l), [true, false]);
    // The entry stays first and hot even with a zero count.
    assert_eq!(frags_of(&l, 0), fragments(&[&[0, 3, 4], &[1, 2, 5]]));
}

#[test]
fn landing_pads_stay_hot_go_by_count_or_all_go_cold() {
    let mut f = two_checks(0, 0x1000);
    f.blocks[2].is_landing_pad = true;
    let p = program(vec![f]);
    let split = |b1: u64, pads: LandingPads, splitting: Splitting| {
        let o = OptimizeOptions {
            block_order: BlockOrder::None,
            splitting,
            landing_pads: pads,
            ..OptimizeOptions::default()
        };
        frags_of(
            &layout(&p, &profile(vec![Some(two_checks_counts(b1))]), &o),
            0,
        )
    };
    let pad_stays = fragments(&[&[0, 1, 2, 3, 4], &[5]]);
    let pad_moves = fragments(&[&[0, 1, 3, 4], &[2, 5]]);
    // The pad never ran (b1 = 50).
    assert_eq!(
        split(50, LandingPads::StayHot, Splitting::AllCold),
        pad_stays
    );
    assert_eq!(
        split(50, LandingPads::ByCount, Splitting::AllCold),
        pad_moves
    );
    assert_eq!(
        split(50, LandingPads::AllCold, Splitting::AllCold),
        pad_moves
    );
    // The pad ran 5 times (b1 = 45).
    assert_eq!(
        split(45, LandingPads::StayHot, Splitting::AllCold),
        pad_stays
    );
    assert_eq!(
        split(45, LandingPads::ByCount, Splitting::AllCold),
        pad_stays
    );
    assert_eq!(
        split(45, LandingPads::AllCold, Splitting::AllCold),
        pad_moves
    );
    // A hot landing pad at the end of the order stops the trailing cold run.
    let mut f = two_checks(0, 0x1000);
    f.blocks[5].is_landing_pad = true;
    let p = program(vec![f]);
    let o = |pads| OptimizeOptions {
        block_order: BlockOrder::None,
        splitting: Splitting::HotCold,
        landing_pads: pads,
        ..OptimizeOptions::default()
    };
    let prof = profile(vec![Some(two_checks_counts(50))]);
    let l = layout(&p, &prof, &o(LandingPads::StayHot));
    assert_eq!(frags_of(&l, 0), fragments(&[&[0, 1, 2, 3, 4, 5]]));
    let l = layout(&p, &prof, &o(LandingPads::ByCount));
    assert_eq!(frags_of(&l, 0), fragments(&[&[0, 1, 2, 3, 4], &[5]]));
}

#[test]
fn min_hot_count_makes_rarely_run_blocks_cold_and_lukewarm_functions_untouched() {
    // B1, B3 and B4 run twice, B2 48 times, B5 never.
    let p = program(vec![two_checks(0, 0x1000), leaf(1, 0x2000)]);
    let prof = profile(vec![Some(two_checks_counts(2)), Some(leaf_counts(2))]);
    let with = |min_hot_count| {
        let o = OptimizeOptions {
            block_order: BlockOrder::None,
            min_hot_count,
            ..OptimizeOptions::default()
        };
        layout(&p, &prof, &o)
    };
    for min in [0, 1, 2] {
        let l = with(min);
        assert_eq!(rewritten(&l), [true, true], "min_hot_count {min}");
        assert_eq!(frags_of(&l, 0), fragments(&[&[0, 1, 2, 3, 4], &[5]]));
    }
    let l = with(3);
    // The leaf ran only twice: left alone. Blocks with count 2 are cold.
    assert_eq!(rewritten(&l), [true, false]);
    assert_eq!(frags_of(&l, 0), fragments(&[&[0, 2], &[1, 3, 4, 5]]));
    assert_eq!(l.hot_order, vec![frag(0, 0)]);
    assert_eq!(l.cold_order, vec![frag(0, 1)]);
    // Above every count (50 entries): nothing is rewritten.
    let l = with(51);
    assert_eq!(rewritten(&l), [false, false]);
    assert!(l.hot_order.is_empty() && l.cold_order.is_empty());
}

// ---------------------------------------------------------------------------------------------
// Which functions are rewritten.

#[test]
fn only_profiled_movable_selected_functions_are_rewritten() {
    let p = program(vec![
        diamond(0, 0x1000),
        latch_loop(1, 0x2000),
        guarded_loop(2, 0x3000),
        two_checks(3, 0x4000),
        leaf(4, 0x5000),
        leaf(5, 0x6000),
    ]);
    let prof = profile(vec![
        Some(diamond_counts(100)),
        None,
        Some(guarded_loop_counts()),
        Some(two_checks_counts(50)),
        Some(leaf_counts(0)),
        Some(leaf_counts(3)),
    ]);
    let movable = [true, true, false, true, true, true];
    let l = layout_with(
        &p,
        &prof,
        &OptimizeOptions::default(),
        &movable,
        &|f| f != FuncId(3),
        false,
    );
    // f1 has no profile, f2 cannot move, f3 is filtered out, f4 never ran.
    assert_eq!(rewritten(&l), [true, false, false, false, false, true]);
    assert_eq!(l.rewritten_count(), 2);
    let mut hot = hot_functions(&l);
    hot.sort_unstable();
    assert_eq!(hot, [0, 5]);
    assert!(l.cold_order.is_empty());

    // A `movable` slice shorter than the program means "not movable" for the rest.
    let l = layout_with(
        &p,
        &prof,
        &OptimizeOptions::default(),
        &[true],
        &|_| true,
        false,
    );
    assert_eq!(rewritten(&l), [true, false, false, false, false, false]);
    // So does a profile shorter than the program.
    let l = layout(
        &p,
        &profile(vec![None, None, Some(guarded_loop_counts())]),
        &OptimizeOptions::default(),
    );
    assert_eq!(rewritten(&l), [false, false, true, false, false, false]);
    assert_eq!(frags_of(&l, 2), fragments(&[&[0, 1, 3, 4], &[2]]));
}

/// f0 (a hot diamond), f1 (`f0.cold`, never run), f2 (an unrelated hot leaf).
fn family_program(kind: PartKind) -> Program {
    let mut cold = leaf(1, 0x2000);
    cold.names = vec!["f0.cold".into()];
    cold.parent = Some(Parent {
        function: FuncId(0),
        kind,
    });
    program(vec![diamond(0, 0x1000), cold, leaf(2, 0x3000)])
}

#[test]
fn a_compiler_split_family_is_rewritten_whole_or_not_at_all() {
    let p = family_program(PartKind::ColdFragment);
    let all = [true, true, true];
    for cold_counts in [None, Some(leaf_counts(0))] {
        let prof = profile(vec![
            Some(diamond_counts(100)),
            cold_counts,
            Some(leaf_counts(7)),
        ]);
        let o = OptimizeOptions::default();
        let l = layout_with(&p, &prof, &o, &all, &|_| true, false);
        assert_eq!(rewritten(&l), [true, true, true]);
        // The cold part has no counts to split by: one fragment, entry first.
        assert_eq!(frags_of(&l, 1), fragments(&[&[0]]));
        let mut hot = hot_functions(&l);
        hot.sort_unstable();
        assert_eq!(hot, [0, 1, 2]);

        // One member cannot move (or is filtered out): none of the family is rewritten.
        let l = layout_with(&p, &prof, &o, &[true, false, true], &|_| true, false);
        assert_eq!(rewritten(&l), [false, false, true]);
        assert_eq!(hot_functions(&l), [2]);
        let l = layout_with(&p, &prof, &o, &[false, true, true], &|_| true, false);
        assert_eq!(rewritten(&l), [false, false, true]);
        let l = layout_with(&p, &prof, &o, &all, &|f| f != FuncId(1), false);
        assert_eq!(rewritten(&l), [false, false, true]);
    }
    // The family is hot through its cold part alone: the parent comes along, unsplit.
    let prof = profile(vec![None, Some(leaf_counts(4)), None]);
    let l = layout(&p, &prof, &OptimizeOptions::default());
    assert_eq!(rewritten(&l), [true, true, false]);
    assert_eq!(frags_of(&l, 0), fragments(&[&[0, 1, 2, 3]]));
    // Nobody ran: nothing moves.
    let prof = profile(vec![Some(diamond_counts(0)), None, None]);
    assert_eq!(
        rewritten(&layout(&p, &prof, &OptimizeOptions::default())),
        [false, false, false]
    );
}

#[test]
fn a_partial_inline_part_is_a_function_of_its_own() {
    let p = family_program(PartKind::PartialInline);
    let prof = profile(vec![Some(diamond_counts(100)), None, Some(leaf_counts(7))]);
    let l = layout(&p, &prof, &OptimizeOptions::default());
    assert_eq!(rewritten(&l), [true, false, true]);
    // Its not being movable does not hold its caller back.
    let l = layout_with(
        &p,
        &prof,
        &OptimizeOptions::default(),
        &[true, false, true],
        &|_| true,
        false,
    );
    assert_eq!(rewritten(&l), [true, false, true]);
}

// ---------------------------------------------------------------------------------------------
// Function order and the order lists.

/// f0 diamond (100 entries), f1 leaf (1000), f2 guarded loop (1, split), f3 latch loop
/// (unprofiled), f4 two_checks (50, split), f5 leaf (70).
fn six_functions() -> (Program, AttachedProfile) {
    let p = program(vec![
        diamond(0, 0x1000),
        leaf(1, 0x2000),
        guarded_loop(2, 0x3000),
        latch_loop(3, 0x4000),
        two_checks(4, 0x5000),
        leaf(5, 0x6000),
    ]);
    let prof = profile(vec![
        Some(diamond_counts(100)),
        Some(leaf_counts(1000)),
        Some(guarded_loop_counts()),
        None,
        Some(two_checks_counts(50)),
        Some(leaf_counts(70)),
    ]);
    (p, prof)
}

fn ordered(function_order: FunctionOrder) -> OptimizeOptions {
    OptimizeOptions {
        function_order,
        ..OptimizeOptions::default()
    }
}

/// Checks that the order lists hold each rewritten function's fragments exactly once, cold
/// fragments in the hot order's function order, and returns the hot order's functions.
fn check_order_lists(l: &Layout) -> Vec<u32> {
    let hot = hot_functions(l);
    let mut sorted = hot.clone();
    sorted.sort_unstable();
    let expected: Vec<u32> = (0..l.functions.len() as u32)
        .filter(|&f| l.is_rewritten(FuncId(f)))
        .collect();
    assert_eq!(sorted, expected, "hot order {hot:?}");
    let cold: Vec<FragmentRef> = hot
        .iter()
        .flat_map(|&f| (1..function_layout(l, f).fragments.len() as u32).map(move |k| frag(f, k)))
        .collect();
    assert_eq!(l.cold_order, cold);
    hot
}

#[test]
fn input_function_order_and_order_lists() {
    let (p, prof) = six_functions();
    let l = layout(&p, &prof, &ordered(FunctionOrder::None));
    assert_eq!(check_order_lists(&l), [0, 1, 2, 4, 5]);
    assert_eq!(
        l.hot_order,
        vec![frag(0, 0), frag(1, 0), frag(2, 0), frag(4, 0), frag(5, 0)]
    );
    assert_eq!(l.cold_order, vec![frag(2, 1), frag(4, 1)]);
    assert!(!l.in_place);
}

#[test]
fn in_place_keeps_first_fragments_where_they_are() {
    let (p, prof) = six_functions();
    let o = OptimizeOptions {
        function_order: FunctionOrder::None,
        align_blocks: Some(BlockAlignment {
            alignment: 16,
            threshold_percent: 100,
        }),
        ..OptimizeOptions::default()
    };
    let all = [true; 6];
    let l = layout_with(&p, &prof, &o, &all, &|_| true, true);
    assert!(l.in_place);
    assert!(l.hot_order.is_empty());
    assert_eq!(l.cold_order, vec![frag(2, 1), frag(4, 1)]);
    assert_eq!(l.rewritten_count(), 5);
    assert!(l.functions.iter().flatten().all(|fl| fl.aligned.is_empty()));
    // The same options moved: the guarded loop's head is aligned.
    let moved = layout_with(&p, &prof, &o, &all, &|_| true, false);
    assert_eq!(function_layout(&moved, 2).aligned, [at(3, 7)]);
    // Block order and splits do not depend on in place.
    for f in [0, 1, 2, 4, 5] {
        assert_eq!(frags_of(&l, f), frags_of(&moved, f));
    }
}

#[test]
fn user_function_order_lists_the_named_functions_first() {
    let (p, prof) = six_functions();
    let l = layout(
        &p,
        &prof,
        &ordered(FunctionOrder::User(vec![FuncId(2), FuncId(0)])),
    );
    assert_eq!(check_order_lists(&l), [2, 0, 1, 4, 5]);
    assert_eq!(l.cold_order, vec![frag(2, 1), frag(4, 1)]);
    // Duplicates, functions not rewritten (f3) and ids out of range are skipped.
    let list = vec![FuncId(4), FuncId(3), FuncId(99), FuncId(4), FuncId(1)];
    let l = layout(&p, &prof, &ordered(FunctionOrder::User(list)));
    assert_eq!(check_order_lists(&l), [4, 1, 0, 2, 5]);
    assert_eq!(l.cold_order, vec![frag(4, 1), frag(2, 1)]);
    let l = layout(&p, &prof, &ordered(FunctionOrder::User(Vec::new())));
    assert_eq!(check_order_lists(&l), [0, 1, 2, 4, 5]);
}

#[test]
fn exec_count_order_puts_the_most_entered_first() {
    let (p, prof) = six_functions();
    let l = layout(&p, &prof, &ordered(FunctionOrder::ExecCount));
    // 1000, 100, 70, 50, 1 entries.
    assert_eq!(check_order_lists(&l), [1, 0, 5, 4, 2]);
    assert_eq!(l.cold_order, vec![frag(4, 1), frag(2, 1)]);
    // The entry block's count stands in for a missing entry count.
    let mut prof = prof;
    prof.functions[2] = Some(FunctionCounts {
        entries: 0,
        blocks: vec![500, 500, 0, 5000, 500],
        ..guarded_loop_counts()
    });
    let l = layout(&p, &prof, &ordered(FunctionOrder::ExecCount));
    assert_eq!(check_order_lists(&l), [1, 2, 0, 5, 4]);
}

#[test]
fn call_graph_orders_place_the_heaviest_caller_callee_pair_together() {
    let (p, mut prof) = six_functions();
    // f2 calls f5 most; f0 calls f4; f3 (not rewritten) calls f1 hardest, which is ignored.
    prof.calls.insert((FuncId(2), FuncId(5)), 1000);
    prof.calls.insert((FuncId(0), FuncId(4)), 50);
    prof.calls.insert((FuncId(3), FuncId(1)), 100_000);
    prof.calls.insert((FuncId(5), FuncId(0)), 1);
    for order in [FunctionOrder::CdSort, FunctionOrder::C3] {
        let l = layout(&p, &prof, &ordered(order.clone()));
        let hot = check_order_lists(&l);
        let at = |f: u32| hot.iter().position(|&g| g == f).unwrap();
        assert_eq!(at(5), at(2) + 1, "{order:?}: {hot:?}");
        assert_eq!(at(4), at(0) + 1, "{order:?}: {hot:?}");
        // The same inputs give the same order.
        assert_eq!(layout(&p, &prof, &ordered(order)), l);
    }
    // cdsort is the default.
    assert_eq!(
        layout(&p, &prof, &OptimizeOptions::default()),
        layout(&p, &prof, &ordered(FunctionOrder::CdSort))
    );
}

#[test]
fn a_never_run_compiler_split_part_comes_last_in_the_hot_order() {
    // f1 (`f0.cold`) is rewritten with its parent but never ran; its only fragment is a first
    // fragment, so it is in the hot order: the count-driven orders put it after the hot code.
    let p = family_program(PartKind::ColdFragment);
    let mut prof = profile(vec![Some(diamond_counts(100)), None, Some(leaf_counts(7))]);
    prof.calls.insert((FuncId(0), FuncId(2)), 7);
    for order in [
        FunctionOrder::CdSort,
        FunctionOrder::C3,
        FunctionOrder::ExecCount,
    ] {
        let l = layout(&p, &prof, &ordered(order.clone()));
        assert_eq!(check_order_lists(&l).last(), Some(&1), "{order:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Block alignment.

fn aligned(alignment: u16, threshold_percent: u64) -> OptimizeOptions {
    OptimizeOptions {
        block_order: BlockOrder::None,
        align_blocks: Some(BlockAlignment {
            alignment,
            threshold_percent,
        }),
        ..OptimizeOptions::default()
    }
}

fn aligned_blocks(p: &Program, counts: FunctionCounts, o: &OptimizeOptions) -> Vec<AlignedBlock> {
    let l = layout(p, &profile(vec![Some(counts)]), o);
    function_layout(&l, 0).aligned.clone()
}

fn at(block: u32, max_padding: u8) -> AlignedBlock {
    AlignedBlock {
        block: BlockId(block),
        max_padding,
    }
}

#[test]
fn a_loop_head_reached_by_its_back_edge_is_aligned() {
    // In input order: the head B1 runs 10 times per entry, once from B0 above it. The latch B2
    // runs 9 times per entry but is entered by falling out of B1 9 times: not aligned.
    let p = program(vec![latch_loop(0, 0x1000)]);
    let c = latch_loop_counts();
    assert_eq!(aligned_blocks(&p, c.clone(), &aligned(16, 800)), [at(1, 7)]);
    // The padding is bounded by the alignment and by the block's size (7 bytes).
    assert_eq!(aligned_blocks(&p, c.clone(), &aligned(4, 800)), [at(1, 3)]);
    assert_eq!(aligned_blocks(&p, c.clone(), &aligned(64, 800)), [at(1, 7)]);
    // Ten runs per entry is 1000%: the threshold must be strictly below.
    assert_eq!(aligned_blocks(&p, c.clone(), &aligned(16, 999)), [at(1, 7)]);
    assert_eq!(aligned_blocks(&p, c.clone(), &aligned(16, 1000)), []);
    // At 99% the latch B2 (900%) still fails, as B1 falls into it 9 times out of 9; the exit
    // B3 (100%) passes: B2 before it ends in a jmp and never falls into it. One byte of
    // padding at most, its size.
    assert_eq!(
        aligned_blocks(&p, c.clone(), &aligned(16, 99)),
        [at(1, 7), at(3, 1)]
    );
    // On by default (16 bytes, 800%); turned off, nothing is aligned.
    let o = options(BlockOrder::None, Splitting::AllCold);
    assert_eq!(o.align_blocks, aligned(16, 800).align_blocks);
    assert_eq!(aligned_blocks(&p, c.clone(), &o), [at(1, 7)]);
    let o = OptimizeOptions {
        align_blocks: None,
        ..o
    };
    assert_eq!(aligned_blocks(&p, c, &o), []);
}

#[test]
fn alignment_follows_the_chosen_block_order() {
    // ext-TSP rotates the latch loop to [B0, B2, B1, B3]. The latch B2 holds only its `jmp`
    // to B1, placed right after it: it takes no bytes, and B1 ends the loop with a branch back
    // to itself (`jne` to B2's label, which is B1's address). B1 is jumped to nine times out of
    // ten: aligned, with up to its own 7 bytes of padding.
    let p = program(vec![latch_loop(0, 0x1000)]);
    let o = OptimizeOptions {
        block_order: BlockOrder::ExtTsp,
        ..aligned(16, 800)
    };
    let l = layout(&p, &profile(vec![Some(latch_loop_counts())]), &o);
    assert_eq!(frags_of(&l, 0), fragments(&[&[0, 2, 1, 3]]));
    assert_eq!(function_layout(&l, 0).aligned, [at(1, 7)]);
    // The guarded loop: B1 falls into the loop B3 once per entry, B3 runs 10 times.
    let p = program(vec![guarded_loop(0, 0x1000)]);
    let l = layout(&p, &profile(vec![Some(guarded_loop_counts())]), &o);
    assert_eq!(frags_of(&l, 0), fragments(&[&[0, 1, 3, 4], &[2]]));
    assert_eq!(function_layout(&l, 0).aligned, [at(3, 7)]);
}

#[test]
fn a_block_fallen_into_more_than_half_of_its_runs_is_not_aligned() {
    let p = program(vec![latch_loop(0, 0x1000)]);
    let with_fall_in = |n: u64| FunctionCounts {
        edges: vec![vec![n], vec![1, 9], vec![9], vec![]],
        ..latch_loop_counts()
    };
    // B1 runs 10 times: falling into it 5 times is half, still aligned; 6 is too many.
    assert_eq!(
        aligned_blocks(&p, with_fall_in(5), &aligned(16, 800)),
        [at(1, 7)]
    );
    assert_eq!(aligned_blocks(&p, with_fall_in(6), &aligned(16, 800)), []);
    // The entry count is the function's count when larger than the entry block's.
    let entered = FunctionCounts {
        entries: 2,
        ..latch_loop_counts()
    };
    assert_eq!(aligned_blocks(&p, entered, &aligned(16, 800)), []);
}

#[test]
fn only_first_fragment_blocks_are_aligned() {
    // With min_hot_count 10 the latch B2 (9 runs) and the exit B3 (1 run) are cold. At 99%
    // B3 would be aligned (see above), but it is in the cold fragment now.
    let p = program(vec![latch_loop_long_exit(0, 0x1000)]);
    let o = OptimizeOptions {
        min_hot_count: 10,
        ..aligned(16, 99)
    };
    let l = layout(&p, &profile(vec![Some(latch_loop_counts())]), &o);
    assert_eq!(frags_of(&l, 0), fragments(&[&[0, 1], &[2, 3]]));
    assert_eq!(function_layout(&l, 0).aligned, [at(1, 7)]);
    let o = OptimizeOptions {
        splitting: Splitting::Off,
        ..o
    };
    let l = layout(&p, &profile(vec![Some(latch_loop_counts())]), &o);
    assert_eq!(frags_of(&l, 0), fragments(&[&[0, 1, 2, 3]]));
    assert_eq!(function_layout(&l, 0).aligned, [at(1, 7), at(3, 15)]);
}

// ---------------------------------------------------------------------------------------------
// Robustness.

#[test]
fn every_option_combination_gives_a_valid_layout() {
    let (mut p, mut prof) = six_functions();
    // two_checks' never run B2 is a landing pad.
    p.functions[4].blocks[2].is_landing_pad = true;
    prof.calls.insert((FuncId(2), FuncId(5)), 1000);
    prof.calls.insert((FuncId(0), FuncId(4)), 50);
    let orders = [
        FunctionOrder::CdSort,
        FunctionOrder::C3,
        FunctionOrder::ExecCount,
        FunctionOrder::None,
        FunctionOrder::User(vec![FuncId(5), FuncId(1)]),
    ];
    let mut count = 0;
    for block_order in [BlockOrder::ExtTsp, BlockOrder::None, BlockOrder::Reverse] {
        for splitting in [Splitting::Off, Splitting::HotCold, Splitting::AllCold] {
            for landing_pads in [
                LandingPads::StayHot,
                LandingPads::ByCount,
                LandingPads::AllCold,
            ] {
                for function_order in &orders {
                    for min_hot_count in [1, 2, 60] {
                        for in_place in [false, true] {
                            let o = OptimizeOptions {
                                block_order,
                                function_order: function_order.clone(),
                                splitting,
                                landing_pads,
                                min_hot_count,
                                align_blocks: Some(BlockAlignment::default()),
                            };
                            let l = layout_with(&p, &prof, &o, &[true; 6], &|_| true, in_place);
                            check_order_lists_in_place(&l, in_place);
                            count += 1;
                        }
                    }
                }
            }
        }
    }
    assert_eq!(count, 3 * 3 * 3 * 5 * 3 * 2);
}

/// `check_order_lists`, with the hot order empty in place.
fn check_order_lists_in_place(l: &Layout, in_place: bool) {
    if in_place {
        assert!(l.hot_order.is_empty());
        assert!(l.cold_order.iter().all(|r| r.fragment > 0));
        let fragments: usize = l
            .functions
            .iter()
            .flatten()
            .map(|fl| fl.fragments.len() - 1)
            .sum();
        assert_eq!(l.cold_order.len(), fragments);
    } else {
        check_order_lists(l);
    }
}

#[test]
fn an_empty_program_and_an_empty_profile() {
    let p = program(Vec::new());
    let l = layout(&p, &AttachedProfile::default(), &OptimizeOptions::default());
    assert_eq!(l, Layout::default());
    let (p, _) = six_functions();
    let l = layout(&p, &AttachedProfile::default(), &OptimizeOptions::default());
    assert_eq!(l.functions, vec![None; 6]);
    assert!(l.hot_order.is_empty() && l.cold_order.is_empty());
}

#[test]
fn a_zero_block_alignment_aligns_nothing() {
    let p = program(vec![latch_loop(0, 0x1000)]);
    assert_eq!(
        aligned_blocks(&p, latch_loop_counts(), &aligned(0, 800)),
        []
    );
}

#[test]
fn huge_fall_in_counts_do_not_overflow() {
    // `test %edi,%edi; je B1` with B1 right behind: both edges of B0 lead to B1.
    let f = function(
        0,
        0x1000,
        &[0x85, 0xff, 0x74, 0x00, 0xc3],
        vec![
            (0x1000, Terminator::CondJump, vec![taken(1), fall(1)]),
            (0x1004, Terminator::Return, vec![]),
        ],
        vec![],
    );
    let p = program(vec![f]);
    let half = u64::MAX / 2 + 1;
    let counts = FunctionCounts {
        blocks: vec![1, u64::MAX],
        edges: vec![vec![half, half], vec![]],
        entries: 1,
    };
    // B1 runs u64::MAX times and is fallen into 2^64 times, more than half of its runs: not
    // aligned (and no overflow panic in debug builds).
    assert_eq!(aligned_blocks(&p, counts, &aligned(16, 800)), []);
}
