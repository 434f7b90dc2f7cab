//! `rivet_passes::fragment_size::estimated_fragment_size` against the emitter's own plan of
//! the same fragment: every order of every subset of blocks (entry first) of small functions
//! decoded from real x86-64 and AArch64 bytes, including ones whose branches only reach in
//! their near form (AArch64: a conditional branch inverted over a `b`, or one that leaves
//! the fragment through an island after its code, or straight to the other fragment when the
//! rewrite bounded the new text within reach: `FragmentExits`) and ones with
//! unreachable padding; and what the emitter writes for dead padding. It lives
//! with the CLI's tests because only the CLI crate may depend on both the passes and the
//! emitter.

// The hand-built functions of the passes' tests: decoded bytes cut into blocks, reachability
// from the entry. Their programs and profiles are not needed here.
#[path = "../../passes/tests/common/mod.rs"]
#[allow(dead_code)]
mod common;

use common::{fall, taken};
use rivet_arch::{FragmentExits, Isa};
use rivet_emit::code::{PlanOptions, plan_fragment};
use rivet_ir::layout::FragmentRef;
use rivet_ir::{BlockId, Function, Terminator};
use rivet_passes::fragment_size::estimated_fragment_size;

fn function(
    start: u64,
    code: &[u8],
    blocks: Vec<(u64, Terminator, Vec<rivet_ir::Edge>)>,
) -> Function {
    common::function(0, start, code, blocks, vec![])
}

/// B0 `test %edi,%edi; je B3`, B1 `mov $1,%eax; jmp B4`, B2 `nopl 0(%rax)` (unreachable
/// padding, falls into B3), B3 `xor %eax,%eax` (falls into B4), B4 `ret`.
fn padded() -> Function {
    let code = [
        0x85, 0xff, 0x74, 0x0b, // test %edi,%edi; je +0xf
        0xb8, 0x01, 0x00, 0x00, 0x00, 0xeb, 0x06, // mov $1,%eax; jmp +0x11
        0x0f, 0x1f, 0x40, 0x00, // nopl 0x0(%rax)
        0x31, 0xc0, // xor %eax,%eax
        0xc3, // ret
    ];
    function(
        0x1000,
        &code,
        vec![
            (0x1000, Terminator::CondJump, vec![taken(3), fall(1)]),
            (0x1004, Terminator::Jump, vec![taken(4)]),
            (0x100b, Terminator::FallThrough, vec![fall(3)]),
            (0x100f, Terminator::FallThrough, vec![fall(4)]),
            (0x1011, Terminator::Return, vec![]),
        ],
    )
}

/// B0 `test %edi,%edi; je B2`, B1 thirty `mov $k,%eax` (150 bytes; falls into B2), B2
/// `cmp $1,%eax; jne B1` (a backward branch over B1), B3 `ret`: around B1, branches need
/// their near form.
fn long_body() -> Function {
    let mut code = vec![0x85, 0xff, 0x0f, 0x84, 150, 0, 0, 0]; // test; je rel32 +150
    for k in 0..30 {
        code.extend([0xb8, k, 0, 0, 0]); // mov $k,%eax
    }
    let b2 = 0x1000 + code.len() as u64;
    code.extend([0x83, 0xf8, 0x01]); // cmp $1,%eax
    let back = -(150i32 + 3 + 6);
    code.extend([0x0f, 0x85]); // jne rel32 B1
    code.extend(back.to_le_bytes());
    code.push(0xc3); // ret
    function(
        0x1000,
        &code,
        vec![
            (0x1000, Terminator::CondJump, vec![taken(2), fall(1)]),
            (0x1008, Terminator::FallThrough, vec![fall(2)]),
            (b2, Terminator::CondJump, vec![taken(1), fall(3)]),
            (b2 + 9, Terminator::Return, vec![]),
        ],
    )
}

/// AArch64 instruction words as bytes.
fn words(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// The AArch64 twin of `padded`: B0 `cbz w0, B3`, B1 `mov w0, #1; b B4`, B2 `nop`
/// (unreachable padding, falls into B3), B3 `mov w0, #0` (falls into B4), B4 `ret`.
fn padded_aarch64() -> Function {
    let code = words(&[
        0x3400_0080, // cbz w0, +0x10
        0x5280_0020, // mov w0, #1
        0x1400_0003, // b +0xc
        0xd503_201f, // nop
        0x5280_0000, // mov w0, #0
        0xd65f_03c0, // ret
    ]);
    common::function_of(
        Isa::Aarch64,
        0,
        0x1000,
        &code,
        vec![
            (0x1000, Terminator::CondJump, vec![taken(3), fall(1)]),
            (0x1004, Terminator::Jump, vec![taken(4)]),
            (0x100c, Terminator::FallThrough, vec![fall(3)]),
            (0x1010, Terminator::FallThrough, vec![fall(4)]),
            (0x1014, Terminator::Return, vec![]),
        ],
        vec![],
    )
}

/// Instructions in the long block of `long_body_aarch64`: 32,800 bytes, past the 32 KiB a
/// short conditional branch is trusted to reach (`tbz`'s, the shortest of the forms).
const LONG_AARCH64: u32 = 8200;

/// B0 `cbz w0, B2`, B1 `add w1, w1, #1` x LONG_AARCH64 (falls into B2), B2 `cmp w0, #1;
/// b.ne B1` (backward over B1), B3 `ret`: around B1, conditional branches need their near
/// form, the inverted branch over a `b` (8 bytes).
fn long_body_aarch64() -> Function {
    let b2 = 0x1000 + 4 + 4 * u64::from(LONG_AARCH64);
    let imm19 = |from: u64, to: u64| (((to as i64 - from as i64) / 4) as u32 & 0x7_ffff) << 5;
    let mut w = vec![0x3400_0000 | imm19(0x1000, b2)]; // cbz w0, B2
    w.extend(std::iter::repeat_n(0x1100_0421, LONG_AARCH64 as usize)); // add w1, w1, #1
    w.push(0x7100_041f); // cmp w0, #1
    w.push(0x5400_0001 | imm19(b2 + 4, 0x1004)); // b.ne B1
    w.push(0xd65f_03c0); // ret
    common::function_of(
        Isa::Aarch64,
        0,
        0x1000,
        &words(&w),
        vec![
            (0x1000, Terminator::CondJump, vec![taken(2), fall(1)]),
            (0x1004, Terminator::FallThrough, vec![fall(2)]),
            (b2, Terminator::CondJump, vec![taken(1), fall(3)]),
            (b2 + 8, Terminator::Return, vec![]),
        ],
        vec![],
    )
}

fn emitted_size(f: &Function, blocks: &[BlockId]) -> u64 {
    emitted_size_of(Isa::X86_64, f, blocks, FragmentExits::Islands)
}

fn estimated_fragment_size_islands(isa: Isa, f: &Function, blocks: &[BlockId]) -> u64 {
    estimated_fragment_size(isa, f, blocks, FragmentExits::Islands)
}

/// `b.cond`/`cbz`/`cbnz` straight to other fragments, `tbz`/`tbnz` through islands: the
/// regime of new text under 1 MiB.
const DIRECT_1M: FragmentExits = FragmentExits::Direct {
    reach: (1 << 20) - 4,
};
/// Every conditional branch straight to other fragments: new text under 32 KiB.
const DIRECT_32K: FragmentExits = FragmentExits::Direct {
    reach: (1 << 15) - 4,
};

fn emitted_size_of(isa: Isa, f: &Function, blocks: &[BlockId], exits: FragmentExits) -> u64 {
    let fragment = FragmentRef {
        function: f.id,
        fragment: 0,
    };
    plan_fragment(
        f,
        fragment,
        blocks,
        &mut isa.branch_encoder(),
        PlanOptions {
            block_alignment: 16,
            exits,
            ..PlanOptions::default()
        },
    )
    .expect("the emitter plans the fragment")
    .size
}

/// Every ordering of every subset of the blocks after the entry, the entry first.
fn fragments(n: u32) -> Vec<Vec<BlockId>> {
    fn permutations(rest: Vec<u32>, prefix: Vec<u32>, out: &mut Vec<Vec<BlockId>>) {
        out.push(prefix.iter().map(|&b| BlockId(b)).collect());
        for (i, &b) in rest.iter().enumerate() {
            let mut rest = rest.clone();
            rest.remove(i);
            let mut prefix = prefix.clone();
            prefix.push(b);
            permutations(rest, prefix, out);
        }
    }
    let mut out = Vec::new();
    permutations((1..n).collect(), vec![0], &mut out);
    out
}

#[test]
fn the_estimate_is_the_emitted_size_of_every_fragment() {
    assert!(!padded().blocks[2].is_reachable);
    for f in [padded(), long_body()] {
        let all = fragments(f.blocks.len() as u32);
        assert!(all.len() > 10);
        for blocks in all {
            assert_eq!(
                estimated_fragment_size(Isa::X86_64, &f, &blocks, FragmentExits::Islands),
                emitted_size(&f, &blocks),
                "{} with blocks {blocks:?}",
                f.name()
            );
        }
    }
}

#[test]
fn the_aarch64_estimate_is_the_emitted_size_of_every_fragment() {
    assert!(!padded_aarch64().blocks[2].is_reachable);
    for f in [padded_aarch64(), long_body_aarch64(), bit_test_aarch64()] {
        let all = fragments(f.blocks.len() as u32);
        assert!(all.len() > 4);
        for blocks in all {
            for exits in [FragmentExits::Islands, DIRECT_1M, DIRECT_32K] {
                assert_eq!(
                    estimated_fragment_size(Isa::Aarch64, &f, &blocks, exits),
                    emitted_size_of(Isa::Aarch64, &f, &blocks, exits),
                    "{} with blocks {blocks:?}, {exits:?}",
                    f.name()
                );
            }
        }
    }
}

/// B0 `tbz w0, #0, B2`, B1 `mov w0, #1; ret`, B2 `mov w0, #0; ret`.
fn bit_test_aarch64() -> Function {
    let code = words(&[
        0x3600_0060, // tbz w0, #0, +0xc
        0x5280_0020, // mov w0, #1
        0xd65f_03c0, // ret
        0x5280_0000, // mov w0, #0
        0xd65f_03c0, // ret
    ]);
    common::function_of(
        Isa::Aarch64,
        0,
        0x1000,
        &code,
        vec![
            (0x1000, Terminator::CondJump, vec![taken(2), fall(1)]),
            (0x1004, Terminator::Return, vec![]),
            (0x100c, Terminator::Return, vec![]),
        ],
        vec![],
    )
}

/// Below the bound, a conditional exit to another fragment is one word straight there, no
/// island; `tbz` only below 32 KiB. Above it (`Islands`), every exit goes through an island.
#[test]
fn aarch64_exits_to_other_fragments_go_direct_below_the_bound() {
    let ids = |v: &[u32]| v.iter().map(|&b| BlockId(b)).collect::<Vec<_>>();
    let f = padded_aarch64();
    // [B0, B1], B3 and B4 elsewhere: `cbz` to B3, B1's `mov` and `b`: 12 bytes; with islands
    // 16 (the island's `b` to B3 after the code).
    let size = |f: &Function, order: &[u32], exits| {
        let blocks = ids(order);
        let estimate = estimated_fragment_size(Isa::Aarch64, f, &blocks, exits);
        assert_eq!(
            estimate,
            emitted_size_of(Isa::Aarch64, f, &blocks, exits),
            "{order:?} {exits:?}"
        );
        estimate
    };
    assert_eq!(size(&f, &[0, 1], FragmentExits::Islands), 16);
    assert_eq!(size(&f, &[0, 1], DIRECT_1M), 12);
    assert_eq!(size(&f, &[0, 1], DIRECT_32K), 12);
    // Inside the fragment nothing changes.
    assert_eq!(size(&f, &[0, 1, 2, 3, 4], DIRECT_1M), 20);
    // `tbz` (+-32 KiB) keeps its island in the 1 MiB regime.
    let f = bit_test_aarch64();
    assert_eq!(size(&f, &[0, 1], FragmentExits::Islands), 16);
    assert_eq!(size(&f, &[0, 1], DIRECT_1M), 16);
    assert_eq!(size(&f, &[0, 1], DIRECT_32K), 12);
    // Inverted (`tbnz` to B1 elsewhere, B2 next): the same.
    assert_eq!(size(&f, &[0, 2], DIRECT_1M), 16);
    assert_eq!(size(&f, &[0, 2], DIRECT_32K), 12);
    // A long fragment: `cbz` to B2 elsewhere, past 32 KiB of B1, which no island after B1
    // is in reach of (the pair, 8 bytes, and the unused island): direct, one word.
    let f = long_body_aarch64();
    let long = 4 * u64::from(LONG_AARCH64);
    assert_eq!(size(&f, &[0, 1], FragmentExits::Islands), 8 + long + 4 + 4);
    assert_eq!(size(&f, &[0, 1], DIRECT_1M), 4 + long + 4);
}

#[test]
fn aarch64_sizes_are_words_and_far_conditional_branches_two() {
    let ids = |v: &[u32]| v.iter().map(|&b| BlockId(b)).collect::<Vec<_>>();
    let f = padded_aarch64();
    // The input order: five words, the padding left out.
    assert_eq!(
        estimated_fragment_size_islands(Isa::Aarch64, &f, &ids(&[0, 1, 2, 3, 4])),
        20
    );
    // Without B3 and B4 (another fragment): `cbz` to an island (4 bytes), B1's `mov` and
    // `b`, then the island, a `b` to B3 (4 bytes).
    assert_eq!(
        estimated_fragment_size_islands(Isa::Aarch64, &f, &ids(&[0, 1])),
        16
    );
    let f = long_body_aarch64();
    let long = 4 * u64::from(LONG_AARCH64);
    // The input order: `cbz` over B1 and `b.ne` back over it, both two words.
    assert_eq!(
        estimated_fragment_size_islands(Isa::Aarch64, &f, &ids(&[0, 1, 2, 3])),
        8 + long + 4 + 8 + 4
    );
    // Without B2 and B3: B0's `cbz` to B2 cannot reach an island past B1, so it is the
    // opposite test over a `b` (8 bytes); B1 ends with a `b` to B2, and the island the
    // emitter planned stays (4 bytes, never run).
    assert_eq!(
        estimated_fragment_size_islands(Isa::Aarch64, &f, &ids(&[0, 1])),
        8 + long + 4 + 4
    );
    // B2 after B0: `cbnz` to B1 (past B2 and B3) and B2's `b.ne` stay one word; B1, last,
    // goes back to B2 with a `b`.
    assert_eq!(
        estimated_fragment_size_islands(Isa::Aarch64, &f, &ids(&[0, 2, 3, 1])),
        4 + (4 + 4) + 4 + (long + 4)
    );
}

#[test]
fn branches_around_a_long_block_are_near() {
    let f = long_body();
    let ids = |v: &[u32]| v.iter().map(|&b| BlockId(b)).collect::<Vec<_>>();
    // The input order: `je` over B1 and `jne` back over it, both near (6 bytes).
    assert_eq!(
        estimated_fragment_size_islands(Isa::X86_64, &f, &ids(&[0, 1, 2, 3])),
        2 + 6 + 150 + 3 + 6 + 1
    );
    // B2 right after B0 turns `je` into a short `jne` to B1 (past B2 and B3), B2's `jne`
    // to B1 stays short, and B1, last, falls back to B2 through a near `jmp` over itself.
    assert_eq!(
        estimated_fragment_size_islands(Isa::X86_64, &f, &ids(&[0, 2, 3, 1])),
        (2 + 2) + (3 + 2) + 1 + (150 + 5)
    );
}

#[test]
fn unreachable_padding_and_dropped_jumps_count_nothing() {
    let f = padded();
    let ids = |v: &[u32]| v.iter().map(|&b| BlockId(b)).collect::<Vec<_>>();
    // The input order: 4 + 7 + 2 + 1 bytes, the padding left out.
    assert_eq!(
        estimated_fragment_size_islands(Isa::X86_64, &f, &ids(&[0, 1, 2, 3, 4])),
        14
    );
    // B3 after B0 turns `je` around to reach B1, which jumps back to B4: 4 + 2 + 7 + 1.
    assert_eq!(
        estimated_fragment_size_islands(Isa::X86_64, &f, &ids(&[0, 3, 4, 1])),
        14
    );
    // Without B3 and B4 (in another fragment), B0 needs `je rel32` and B1 a `jmp rel32`:
    // 2 + 6, then 5 + 5.
    assert_eq!(
        estimated_fragment_size_islands(Isa::X86_64, &f, &ids(&[0, 1])),
        18
    );
    // Neither side next: `je rel32` to B3 and `jmp rel32` to B1.
    assert_eq!(
        estimated_fragment_size_islands(Isa::X86_64, &f, &ids(&[0, 4])),
        2 + 6 + 5 + 1
    );
}

/// B0 `test %edi,%edi; je B3`, B1 `ret`, B2 `nopl 0(%rax)` (padding after the `ret`, falls
/// into B3), B3 `xor %eax,%eax; ret`; B2 made reachable when `b2_reachable`.
fn ret_then_padding(b2_reachable: bool) -> Function {
    let code = [
        0x85, 0xff, 0x74, 0x05, // test %edi,%edi; je +9
        0xc3, // ret
        0x0f, 0x1f, 0x40, 0x00, // nopl 0x0(%rax)
        0x31, 0xc0, 0xc3, // xor %eax,%eax; ret
    ];
    let mut f = function(
        0x1000,
        &code,
        vec![
            (0x1000, Terminator::CondJump, vec![taken(3), fall(1)]),
            (0x1004, Terminator::Return, vec![]),
            (0x1005, Terminator::FallThrough, vec![fall(3)]),
            (0x1009, Terminator::Return, vec![]),
        ],
    );
    assert!(!f.blocks[2].is_reachable);
    f.blocks[2].is_reachable = b2_reachable;
    f
}

#[test]
fn padding_takes_no_bytes_and_does_not_separate_its_neighbours() {
    let size = |f: &Function, order: &[u32]| {
        let blocks: Vec<BlockId> = order.iter().map(|&b| BlockId(b)).collect();
        emitted_size(f, &blocks)
    };
    let dead = ret_then_padding(false);
    let live = ret_then_padding(true);
    // In the input order: 4 + 1 + 3 bytes, the padding left out.
    assert_eq!(size(&dead, &[0, 1, 2, 3]), 8);
    assert_eq!(size(&live, &[0, 1, 2, 3]), 8);
    // Between B0 and B3, padding leaves B3 next to B0, whose `je` is inverted to go to B1:
    // 4 + 3 + 1. Reachable padding too: it starts where B3 does, so a branch to it arrives at
    // B3. Counted as what follows B0, it would cost a `je` + `jmp` (10 bytes), the `jmp`
    // landing on the next instruction.
    assert_eq!(size(&dead, &[0, 2, 3, 1]), 8);
    assert_eq!(size(&live, &[0, 2, 3, 1]), 8);
    // Away from B3 either kind jumps there, so it still arrives where it did.
    assert_eq!(size(&dead, &[0, 3, 1, 2]), 10);
    assert_eq!(size(&live, &[0, 3, 1, 2]), 10);
    // Then it takes bytes, and B0 before it is not followed by B1: `je` + `jmp` (6), the
    // padding's `jmp` (2), B1 (1), B3 (3).
    assert_eq!(size(&dead, &[0, 2, 1, 3]), 12);
    assert_eq!(size(&live, &[0, 2, 1, 3]), 12);
}

/// B0 `test %edi,%edi; je B2`, B1 `mov $1,%eax; ret`, B2 `xor %eax,%eax` (falls into B3),
/// B3 `add $1,%eax; cmp $100,%eax; jne B3` (the loop, to align), B4 `ret`.
fn loop_after_return() -> Function {
    let code = [
        0x85, 0xff, 0x74, 0x06, // test %edi,%edi; je +6
        0xb8, 0x01, 0x00, 0x00, 0x00, 0xc3, // mov $1,%eax; ret
        0x31, 0xc0, // xor %eax,%eax
        0x83, 0xc0, 0x01, 0x83, 0xf8, 0x64, 0x75, 0xf8, // add; cmp; jne -8
        0xc3, // ret
    ];
    function(
        0x1000,
        &code,
        vec![
            (0x1000, Terminator::CondJump, vec![taken(2), fall(1)]),
            (0x1004, Terminator::Return, vec![]),
            (0x100a, Terminator::FallThrough, vec![fall(3)]),
            (0x100c, Terminator::CondJump, vec![taken(3), fall(4)]),
            (0x1014, Terminator::Return, vec![]),
        ],
    )
}

/// Plans `order` of `f` with block 3 to align on 16 bytes; the plan's count of aligned
/// blocks (and of those whose padding never runs), and the new offset of each instruction
/// by its original address.
fn plan_aligned(
    f: &Function,
    order: &[u32],
) -> ((usize, usize), std::collections::HashMap<u64, u32>) {
    let blocks: Vec<BlockId> = order.iter().map(|&b| BlockId(b)).collect();
    let aligned = [rivet_ir::layout::AlignedBlock {
        block: BlockId(3),
        max_padding: 15,
    }];
    let plan = plan_fragment(
        f,
        FragmentRef {
            function: f.id,
            fragment: 0,
        },
        &blocks,
        &mut Isa::X86_64.branch_encoder(),
        PlanOptions {
            aligned: &aligned,
            block_alignment: 16,
            ..PlanOptions::default()
        },
    )
    .expect("the emitter plans the fragment");
    let offsets = plan
        .inst_offsets
        .iter()
        .map(|&(i, off)| (f.insts[i as usize].addr().get(), off))
        .collect();
    (plan.aligned_blocks(), offsets)
}

#[test]
fn alignment_padding_goes_where_no_code_falls_through() {
    let f = loop_after_return();
    // In the input order, B2 falls into the loop B3, and B1 before it ends in a `ret`: the
    // padding goes after the `ret` (10 bytes in), B2 and B3 move together, and B3 starts on
    // 16 bytes. Nothing runs the padding.
    let (aligned, at) = plan_aligned(&f, &[0, 1, 2, 3, 4]);
    assert_eq!(aligned, (1, 1));
    assert_eq!(at[&0x1009], 9, "the ret stays");
    assert_eq!((at[&0x100a], at[&0x100c]), (14, 16), "B2 then B3, aligned");
    // B0 falling into B2 (its `je` turned around to reach B1), B2 into B3: no point before
    // B3 that code does not fall through. The padding goes right before B3, after B2.
    let (aligned, at) = plan_aligned(&f, &[0, 2, 3, 1, 4]);
    assert_eq!(aligned, (1, 0));
    assert_eq!((at[&0x100a], at[&0x100c]), (4, 16));
    // B3 right after B1's `ret`: padding there never runs either.
    let (aligned, at) = plan_aligned(&f, &[0, 1, 3, 2, 4]);
    assert_eq!(aligned, (1, 1));
    assert_eq!((at[&0x1009], at[&0x100c]), (9, 16));
}
