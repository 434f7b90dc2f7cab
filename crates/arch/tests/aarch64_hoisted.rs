//! Switch tables whose base a dispatch loop computes once, before the loop
//! (`aarch64::hoisted_constants`): in a callee-saved register, or in a stack slot as gcc does
//! in SQLite's `sqlite3VdbeExec`. The dispatch window alone does not define the base; the
//! function-wide constants must supply it, and only when nothing else can write the register
//! or the slot. The code is real gcc-12 output (the stack slot) or assembled by binutils
//! (the register: the words and addresses `aarch64-linux-gnu-as` gave).

use rivet_arch::aarch64::{
    self, Hoisted, IndirectBranch, analyze_indirect_branch, analyze_indirect_branch_with,
    hoisted_constants,
};

fn decode(code: &[(u64, u32)]) -> Vec<aarch64::Inst> {
    code.iter()
        .map(|&(addr, word)| aarch64::decode(word, addr).unwrap())
        .collect()
}

fn position(insts: &[aarch64::Inst], addr: u64) -> usize {
    insts.iter().position(|i| i.addr == addr).unwrap()
}

/// `sqlite3VdbeExec` of scripts/build-real-aarch64.sh's sqlite3-gcc-pie (SQLite 3.40.1,
/// aarch64-linux-gnu-gcc-12 -O2), from its entry to the opcode dispatch: the table's address
/// goes to `[sp, #128]` in the prologue (0xd860c..0xd8614) and comes back at every dispatch
/// (0xd8658), after the loop head at 0xd8648.
const VDBE_EXEC: [(u64, u32); 59] = [
    (0xd8580, 0xa9ab7bfd), // stp x29, x30, [sp, #-336]!
    (0xd8584, 0x910003fd), // mov x29, sp
    (0xd8588, 0xa9025bf5), // stp x21, x22, [sp, #32]
    (0xd858c, 0xaa0003f5), // mov x21, x0
    (0xd8590, 0xb940cc01), // ldr w1, [x0, #204]
    (0xd8594, 0xf9400016), // ldr x22, [x0]
    (0xd8598, 0xa90153f3), // stp x19, x20, [sp, #16]
    (0xd859c, 0xf9403402), // ldr x2, [x0, #104]
    (0xd85a0, 0xa90363f7), // stp x23, x24, [sp, #48]
    (0xd85a4, 0xa9046bf9), // stp x25, x26, [sp, #64]
    (0xd85a8, 0xf9003fe2), // str x2, [sp, #120]
    (0xd85ac, 0xf9404402), // ldr x2, [x0, #136]
    (0xd85b0, 0xf90047e2), // str x2, [sp, #136]
    (0xd85b4, 0x394192c2), // ldrb w2, [x22, #100]
    (0xd85b8, 0xb900e3e2), // str w2, [sp, #224]
    (0xd85bc, 0x34000041), // cbz w1, d85c4
    (0xd85c0, 0x97fdb6a1), // bl 46044
    (0xd85c4, 0xf94112c0), // ldr x0, [x22, #544]
    (0xd85c8, 0x92800018), // mov x24, #-1
    (0xd85cc, 0xb40000c0), // cbz x0, d85e4
    (0xd85d0, 0xb94232c8), // ldr w8, [x22, #560]
    (0xd85d4, 0xb940e2a1), // ldr w1, [x21, #224]
    (0xd85d8, 0x1ac80820), // udiv w0, w1, w8
    (0xd85dc, 0x1b088400), // msub w0, w0, w8, w1
    (0xd85e0, 0x4b000118), // sub w24, w8, w0
    (0xd85e4, 0xb94036a0), // ldr w0, [x21, #52]
    (0xd85e8, 0x71001c1f), // cmp w0, #0x7
    (0xd85ec, 0x54001660), // b.eq d88b8
    (0xd85f0, 0xb90036bf), // str wzr, [x21, #52]
    (0xd85f4, 0x9106a2cc), // add x12, x22, #0x1a8
    (0xd85f8, 0xf90026bf), // str xzr, [x21, #72]
    (0xd85fc, 0xf90052bf), // str xzr, [x21, #160]
    (0xd8600, 0xb902aadf), // str wzr, [x22, #680]
    (0xd8604, 0xb9400180), // ldr w0, [x12]
    (0xd8608, 0x35000320), // cbnz w0, d866c
    (0xd860c, 0xf0000360), // adrp x0, 147000
    (0xd8610, 0x91060000), // add x0, x0, #0x180
    (0xd8614, 0xf90043e0), // str x0, [sp, #128]
    (0xd8618, 0xd2800013), // mov x19, #0x0
    (0xd861c, 0xf94047e0), // ldr x0, [sp, #136]
    (0xd8620, 0x52800014), // mov w20, #0x0
    (0xd8624, 0xb98032aa), // ldrsw x10, [x21, #48]
    (0xd8628, 0xa90573fb), // stp x27, x28, [sp, #80]
    (0xd862c, 0xaa1303fc), // mov x28, x19
    (0xd8630, 0x2a1403fb), // mov w27, w20
    (0xd8634, 0x8b0a1417), // add x23, x0, x10, lsl #5
    (0xd8638, 0xb90097ff), // str wzr, [sp, #148]
    (0xd863c, 0xaa1703fa), // mov x26, x23
    (0xd8640, 0xf9004fec), // str x12, [sp, #152]
    (0xd8644, 0xb900a3ff), // str wzr, [sp, #160]
    (0xd8648, 0x39400357), // ldrb w23, [x26]          the loop head
    (0xd864c, 0x9100079c), // add x28, x28, #0x1
    (0xd8650, 0x7102d6ff), // cmp w23, #0xb5
    (0xd8654, 0x54000f28), // b.hi d8838
    (0xd8658, 0xf94043e0), // ldr x0, [sp, #128]
    (0xd865c, 0x78775800), // ldrh w0, [x0, w23, uxtw #1]
    (0xd8660, 0x10000061), // adr x1, d866c
    (0xd8664, 0x8b20a820), // add x0, x1, w0, sxth #2
    (0xd8668, 0xd61f0000), // br x0
];

/// The opcode table: 182 halfword entries (opcodes 0..=0xb5) from 0x147180, counted in
/// instructions from 0xd866c.
fn is_vdbe_table(found: IndirectBranch) -> bool {
    matches!(
        found,
        IndirectBranch::Table {
            table: 0x147180,
            anchor: 0xd866c,
            entry_size: 2,
            signed: true,
            shift: 2,
            bound: Some(b),
        } if b.entries == 182 && b.check == 0xd8654 && b.default_target == 0xd8838
    )
}

#[test]
fn a_table_base_kept_in_a_stack_slot_is_found() {
    let insts = decode(&VDBE_EXEC);
    let hoisted = hoisted_constants(&insts);
    assert!(
        hoisted.contains(&(Hoisted::StackSlot(128), 0x147180)),
        "{hoisted:?}"
    );
    // The slots written with other values, or with registers the code does not show to
    // hold one address, are not constants.
    assert!(
        hoisted
            .iter()
            .all(|(h, _)| !matches!(h, Hoisted::StackSlot(o) if *o != 128)),
        "{hoisted:?}"
    );
    // Discovery's window: from the loop head, a merge point, to the jump.
    let window = &insts[position(&insts, 0xd8648)..];
    assert_eq!(
        analyze_indirect_branch(window, &[]),
        IndirectBranch::Unknown
    );
    let found = analyze_indirect_branch_with(window, &[], &hoisted);
    assert!(is_vdbe_table(found), "{found:?}");
    // The whole straight line from the entry shows the store itself: the same table.
    let found = analyze_indirect_branch_with(&insts[position(&insts, 0xd860c)..], &[], &[]);
    assert!(is_vdbe_table(found), "{found:?}");
}

/// `VDBE_EXEC` with the instruction at `addr` (a store of a zero, which matters to nothing
/// here) replaced by `word`.
fn vdbe_with(addr: u64, word: u32) -> Vec<aarch64::Inst> {
    let mut code = VDBE_EXEC;
    let k = code.iter().position(|c| c.0 == addr).unwrap();
    code[k].1 = word;
    decode(&code)
}

#[test]
fn a_stack_slot_that_something_else_may_write_is_no_constant() {
    let slot = |insts: &[aarch64::Inst]| {
        hoisted_constants(insts)
            .into_iter()
            .any(|(h, _)| h == Hoisted::StackSlot(128))
    };
    // Another store into the slot, of a register not shown to hold the table.
    assert!(!slot(&vdbe_with(0xd8638, 0xf90043e1))); // str x1, [sp, #128]
    // A wider store overlapping it.
    assert!(!slot(&vdbe_with(0xd8638, 0xa907ffff))); // stp xzr, xzr, [sp, #120]
    // Its address (or one below it) escapes: a callee could write it.
    assert!(!slot(&vdbe_with(0xd8638, 0x910203e1))); // add x1, sp, #0x80
    // sp goes down after the slot is written: the offsets no longer name the same bytes.
    assert!(!slot(&vdbe_with(0xd8638, 0xd10043ff))); // sub sp, sp, #0x10
    // What stays a constant: an address above the slot escapes (C objects start at their
    // address), or a store of the same address.
    assert!(slot(&vdbe_with(0xd8638, 0x9103c3e1))); // add x1, sp, #0xf0
    let mut code = VDBE_EXEC.to_vec();
    code.truncate(code.iter().position(|c| c.0 == 0xd8648).unwrap());
    // adrp x0 / add x0 / str x0, [sp, #128] again, a second time
    code.extend([
        (0xd8648, 0xf0000360),
        (0xd864c, 0x91060000),
        (0xd8650, 0xf90043e0),
    ]);
    assert!(slot(&decode(&code)));
    // Without the slot the dispatch is not understood, and a guess is never made.
    let insts = vdbe_with(0xd8638, 0xf90043e1);
    let window = &insts[position(&insts, 0xd8648)..];
    let hoisted = hoisted_constants(&insts);
    assert_eq!(
        analyze_indirect_branch_with(window, &[], &hoisted),
        IndirectBranch::Unknown
    );
}

/// A function that keeps its table in x21 across a call (callee-saved), assembled at 0x1000
/// with the table at 0x3010.
const REGISTER_BASE: [(u64, u32); 11] = [
    (0x1000, 0xd0000015), // adrp x21, 3000
    (0x1004, 0x910042b5), // add x21, x21, #0x10
    (0x1008, 0x97fffffe), // bl 1000
    (0x100c, 0x71000c1f), // cmp w0, #0x3           a merge point in a real loop
    (0x1010, 0x540000a8), // b.hi 1024
    (0x1014, 0x38604aa0), // ldrb w0, [x21, w0, uxtw]
    (0x1018, 0x10000041), // adr x1, 1020
    (0x101c, 0x8b208820), // add x0, x1, w0, sxtb #2
    (0x1020, 0xd61f0000), // br x0
    (0x1024, 0xa9425bf5), // ldp x21, x22, [sp, #32]  the epilogue's restore
    (0x1028, 0xd65f03c0), // ret
];

#[test]
fn a_table_base_kept_in_a_callee_saved_register_is_found() {
    let insts = decode(&REGISTER_BASE);
    let hoisted = hoisted_constants(&insts);
    assert!(
        hoisted.contains(&(Hoisted::Register(21), 0x3010)),
        "{hoisted:?}"
    );
    // x1 and x0 are written with other values, and the call clobbers x0-x18 and x30.
    assert_eq!(hoisted.len(), 1, "{hoisted:?}");
    let window = &insts[position(&insts, 0x100c)..=position(&insts, 0x1020)];
    assert_eq!(
        analyze_indirect_branch(window, &[]),
        IndirectBranch::Unknown
    );
    let found = analyze_indirect_branch_with(window, &[], &hoisted);
    assert!(
        matches!(
            found,
            IndirectBranch::Table {
                table: 0x3010,
                anchor: 0x1020,
                entry_size: 1,
                signed: true,
                shift: 2,
                bound: Some(b),
            } if b.entries == 4
        ),
        "{found:?}"
    );
    // A second definition with another value (`mov x21, x0`) makes x21 no constant, so the
    // dispatch stays unknown.
    let mut code = REGISTER_BASE;
    code[9].1 = 0xaa0003f5; // mov x21, x0 instead of the restore
    let insts = decode(&code);
    let hoisted = hoisted_constants(&insts);
    assert!(hoisted.is_empty(), "{hoisted:?}");
    assert_eq!(
        analyze_indirect_branch_with(window, &[], &hoisted),
        IndirectBranch::Unknown
    );
}
