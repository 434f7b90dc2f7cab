//! What an AArch64 instruction does to a general register, as the reaching-definitions walk
//! of discovery sees it (`aarch64::register_write`, `aarch64::window_live_in`): an `adrp` is
//! a constant, the `add` completing it an offset from its source register (so the pair is
//! one definition only where the `adrp` is what reaches the `add`), and every other way of
//! writing a register is a write, including the ones that do not go through bits 0-4 (a
//! call's clobbers, a store-exclusive's status, a compare-and-swap's old value, a
//! post-indexed base, a PAC hint). The words are binutils' (`aarch64-linux-gnu-as
//! -march=armv8.8-a`, shown beside each).

use rivet_arch::aarch64::{self, RegisterWrite, register_write, window_live_in};

fn inst(word: u32) -> aarch64::Inst {
    aarch64::decode(word, 0x1000).unwrap()
}

fn write(word: u32, reg: u8) -> RegisterWrite {
    register_write(&inst(word), reg)
}

#[test]
fn an_address_built_in_two_instructions_is_a_constant_and_an_offset() {
    // adrp x21, 0x35000 (assembled at 0x1000: the page is relative to 0x1000's page)
    let adrp = 0x90000015 | (0xd << 5); // immhi 0xd, immlo 0: 0x34 pages on
    assert_eq!(write(adrp, 21), RegisterWrite::Constant(0x35000));
    assert_eq!(write(adrp, 20), RegisterWrite::Untouched);
    // add x21, x21, #0x95c
    assert_eq!(
        write(0x912572b5, 21),
        RegisterWrite::Offset {
            from: 21,
            add: 0x95c
        }
    );
    // adr x21, . (at 0x1000)
    assert_eq!(write(0x10000015, 21), RegisterWrite::Constant(0x1000));
    // mov x1, x2
    assert_eq!(
        write(0xaa0203e1, 1),
        RegisterWrite::Offset { from: 2, add: 0 }
    );
    assert_eq!(write(0xaa0203e1, 2), RegisterWrite::Untouched);
}

#[test]
fn what_is_not_an_address_is_another_write() {
    // add w21, w21, #0x95c: a 32-bit result is not the 64-bit address
    assert_eq!(write(0x112572b5, 21), RegisterWrite::Other);
    // mov w1, w2
    assert_eq!(write(0x2a0203e1, 1), RegisterWrite::Other);
    // add x21, sp, #0x10: a stack address
    assert_eq!(write(0x910043f5, 21), RegisterWrite::Other);
    // mov x21, xzr
    assert_eq!(write(0xaa1f03f5, 21), RegisterWrite::Other);
}

#[test]
fn every_way_of_writing_a_register_is_seen() {
    let written = [
        (
            0xb9800415,
            21,
            "ldrsw x21, [x0, #4] (opc 10, like a store's bit 22)",
        ),
        (0xb89fc015, 21, "ldursw x21, [x0, #-4]"),
        (0x38801415, 21, "ldrsb x21, [x0], #1"),
        (0x38801415, 0, "ldrsb x21, [x0], #1: the base"),
        (0xb8210015, 21, "ldadd w1, w21, [x0] (no release bit)"),
        (0xc8157c01, 21, "stxr w21, x1, [x0]: the status"),
        (0xc8b57c02, 21, "cas x21, x2, [x0]: the old value"),
        (0x94000000, 0, "bl: x0-x18"),
        (0x94000000, 18, "bl: x0-x18"),
        (0x94000000, 30, "bl: the link register"),
        (0xd4000001, 0, "svc #0: the result"),
        (0xd503233f, 30, "paciasp"),
        (0xd503211f, 17, "pacia1716"),
        (0x4cdf72a0, 21, "ld1 {v0.16b}, [x21], #16: the base"),
        (
            0xa94157f4,
            21,
            "ldp x20, x21, [sp, #16]: the second register",
        ),
        (0xa94157f4, 20, "ldp x20, x21, [sp, #16]"),
        (0xf8201c15, 21, "ldraa x21, [x0, #8]!"),
        (0xf8201c15, 0, "ldraa x21, [x0, #8]!: the base"),
        (0x19010455, 21, "cpyfp [x21]!, [x1]!, x2!"),
        (0x19010455, 1, "cpyfp [x21]!, [x1]!, x2!"),
        (0x19010455, 2, "cpyfp [x21]!, [x1]!, x2!"),
    ];
    for (word, reg, what) in written {
        assert_eq!(write(word, reg), RegisterWrite::Other, "x{reg} by {what}");
    }
    let untouched = [
        (0x94000000, 19, "bl: x19-x28 are callee-saved"),
        (0x94000000, 28, "bl"),
        (0xf9000bf5, 21, "str x21, [sp, #16]"),
        (0xd503233f, 17, "paciasp"),
        (0xd4000001, 1, "svc #0"),
        (0xc8157c01, 1, "stxr w21, x1, [x0]: the stored register"),
    ];
    for (word, reg, what) in untouched {
        assert_eq!(
            write(word, reg),
            RegisterWrite::Untouched,
            "x{reg} by {what}"
        );
    }
}

#[test]
fn a_window_reads_what_it_does_not_write_first() {
    // llex (gcc-12, Lua 5.4.4) at 0x3194c: x21 and w20 come from before the window; w0 and
    // x1 are written before they are read.
    let window: Vec<_> = [
        0x5100_8a80u32, // sub w0, w20, #0x22
        0x7101_701f,    // cmp w0, #0x5c
        0x5400_00a8,    // b.hi +0x14
        0x7860_5aa0,    // ldrh w0, [x21, w0, uxtw #1]
        0x1000_0061,    // adr x1, +0xc
        0x8b20_a820,    // add x0, x1, w0, sxth #2
        0xd61f_0000,    // br x0
    ]
    .iter()
    .enumerate()
    .map(|(k, &w)| aarch64::decode(w, 0x3194c + 4 * k as u64).unwrap())
    .collect();
    let live = window_live_in(&window);
    assert!(live.contains(&21) && live.contains(&20), "{live:?}");
    assert!(!live.contains(&1), "{live:?}");
    // An over-approximation: fields that are no register (the `sub`'s immediate bits, the
    // `cmp`'s) may add some, never remove one the window reads.
    assert!(!live.contains(&31), "{live:?}");
}
