// Switch tables whose base register is defined away from the dispatch, in the shapes gcc-12
// and clang-19 give Lua and SQLite (docs/aarch64-discovery.md, "Discovery gaps"): the base
// reaches the dispatch loop's head on every path, but the register holds other values
// elsewhere in the function, so only reaching definitions over the paths find it; and the
// cases where they must not be trusted. `_start` exits with 10 (kept_base) + 21
// (rematerialised) + 111 (check_before) + 20+10 (disagree) + 30+20 (split_pair) + 6
// (changed_on_back_edge) = 228.
    .text
    .globl _start
    .type _start, %function
_start:
    .cfi_startproc
    .cfi_undefined x30
    mov x19, #0
    adrp x0, .Lcodes
    add x0, x0, :lo12:.Lcodes
    bl kept_base
    add x19, x19, x0
    adrp x0, .Lcodes
    add x0, x0, :lo12:.Lcodes
    bl rematerialised
    add x19, x19, x0
    adrp x0, .Lletters
    add x0, x0, :lo12:.Lletters
    bl check_before
    add x19, x19, x0
    mov x0, #0
    mov x1, #1
    bl disagree
    add x19, x19, x0
    mov x0, #1
    mov x1, #1
    bl disagree
    add x19, x19, x0
    mov x0, #0
    mov x1, #0
    adrp x3, .Lsplit_table
    bl split_pair
    add x19, x19, x0
    mov x0, #1
    mov x1, #1
    adrp x3, .Lsplit_table
    bl split_pair
    add x19, x19, x0
    adrp x0, .Lcodes
    add x0, x0, :lo12:.Lcodes
    bl changed_on_back_edge
    add x19, x19, x0
    mov x0, x19
    mov x8, #93
    svc #0
    brk #0
    .cfi_endproc
    .size _start, .-_start

// Returns 7: what a case calls (a call clobbers x0-x18 and x30, never x19-x28).
    .globl seven
    .type seven, %function
seven:
    .cfi_startproc
    mov x0, #7
    mov x1, #0
    ret
    .cfi_endproc
    .size seven, .-seven

// gcc's llex: x21 gets the switch table in the prologue (adrp+add, one definition), the
// cases loop back to the dispatch, and a path that leaves the loop puts another table in
// x21. Codes 0..2 add 1, 2 and seven(); 3 ends; above 3, the other table's entry. For
// .Lcodes (0, 1, 2, 3): 10.
    .globl kept_base
    .type kept_base, %function
kept_base:
    .cfi_startproc
    stp x29, x30, [sp, #-48]!
    .cfi_def_cfa_offset 48
    .cfi_offset 29, -48
    .cfi_offset 30, -40
    mov x29, sp
    stp x21, x22, [sp, #16]
    .cfi_offset 21, -32
    .cfi_offset 22, -24
    str x23, [sp, #32]
    .cfi_offset 23, -16
    adrp x21, .Lkept_table
    mov x22, x0
    add x21, x21, :lo12:.Lkept_table
    mov x23, #0
1:  ldrb w0, [x22], #1
    cmp w0, #3
    b.hi 6f
    ldrh w0, [x21, w0, uxtw #1]
    adr x1, 2f
    add x0, x1, w0, sxth #2
    br x0
2:  add x23, x23, #1
    b 1b
3:  add x23, x23, #2
    b 1b
4:  bl seven
    add x23, x23, x0
    b 1b
5:  mov x0, x23
    b 7f
6:  adrp x21, .Lkept_other
    add x21, x21, :lo12:.Lkept_other
    and w0, w0, #3
    ldrb w0, [x21, w0, uxtw]
    add x0, x0, x23
7:  ldp x21, x22, [sp, #16]
    ldr x23, [sp, #32]
    ldp x29, x30, [sp], #48
    .cfi_restore 29
    .cfi_restore 30
    .cfi_restore 21
    .cfi_restore 22
    .cfi_restore 23
    .cfi_def_cfa_offset 0
    ret
    .cfi_endproc
    .size kept_base, .-kept_base
    .section .rodata
    .balign 2
.Lkept_table:
    .hword (2b - 2b) / 4, (3b - 2b) / 4, (4b - 2b) / 4, (5b - 2b) / 4
.Lkept_other:
    .byte 9, 8, 7, 6
    .text

// clang's sqlite3VdbeExec: x22 is the table at the loop head on every path, but cases use
// it for other values and put the table back (`adrp; add`) before they loop. Code 0 adds
// 3, 1 adds 7, 2 sets the sum to itself plus 6, 3 adds 5 and returns: 21 for .Lcodes.
    .globl rematerialised
    .type rematerialised, %function
rematerialised:
    .cfi_startproc
    stp x29, x30, [sp, #-32]!
    .cfi_def_cfa_offset 32
    .cfi_offset 29, -32
    .cfi_offset 30, -24
    mov x29, sp
    stp x21, x22, [sp, #16]
    .cfi_offset 21, -16
    .cfi_offset 22, -8
    mov x21, x0
    mov x0, #0
    adrp x22, .Lremat_table
    add x22, x22, :lo12:.Lremat_table
1:  ldrb w8, [x21], #1
    cmp w8, #3
    b.hi 6f
    adr x9, 2f
    ldrb w10, [x22, x8]
    add x9, x9, x10, lsl #2
    br x9
2:  add x0, x0, #3
    b 1b
3:  mov x22, #7
    add x0, x0, x22
    adrp x22, .Lremat_table
    add x22, x22, :lo12:.Lremat_table
    b 1b
4:  add x22, x0, #6
    mov x0, x22
    adrp x22, .Lremat_table
    add x22, x22, :lo12:.Lremat_table
    b 1b
5:  add x0, x0, #5
    ldp x21, x22, [sp, #16]
    ldp x29, x30, [sp], #32
    .cfi_remember_state
    .cfi_restore 29
    .cfi_restore 30
    .cfi_restore 21
    .cfi_restore 22
    .cfi_def_cfa_offset 0
    ret
    .cfi_restore_state
6:  mov x0, #0
    ldp x21, x22, [sp, #16]
    ldp x29, x30, [sp], #32
    .cfi_restore 29
    .cfi_restore 30
    .cfi_restore 21
    .cfi_restore 22
    .cfi_def_cfa_offset 0
    ret
    .cfi_endproc
    .size rematerialised, .-rematerialised
    .section .rodata
.Lremat_table:
    .byte (2b - 2b) / 4, (3b - 2b) / 4, (4b - 2b) / 4, (5b - 2b) / 4
    .text

// gcc's str_format: the base is x27's only value in the function, the range check is in
// the dispatch block's only predecessor, inside a loop, and the dispatch block follows a
// `ret`. Letters A, B, C add 5, 100 and 6; anything else ends: 111 for "ABC".
    .globl check_before
    .type check_before, %function
check_before:
    .cfi_startproc
    stp x29, x30, [sp, #-48]!
    .cfi_def_cfa_offset 48
    .cfi_offset 29, -48
    .cfi_offset 30, -40
    mov x29, sp
    stp x22, x23, [sp, #16]
    .cfi_offset 22, -32
    .cfi_offset 23, -24
    str x27, [sp, #32]
    .cfi_offset 27, -16
    mov x22, x0
    mov x23, #0
    adrp x27, .Lcheck_table
    add x27, x27, :lo12:.Lcheck_table
1:  bl seven
    ldrb w0, [x22], #1
    sub w0, w0, #0x41
    cmp w0, #2
    b.ls 2f
    mov x0, x23
    ldp x22, x23, [sp, #16]
    ldr x27, [sp, #32]
    ldp x29, x30, [sp], #48
    .cfi_remember_state
    .cfi_restore 29
    .cfi_restore 30
    .cfi_restore 22
    .cfi_restore 23
    .cfi_restore 27
    .cfi_def_cfa_offset 0
    ret
    .cfi_restore_state
2:  ldrh w0, [x27, w0, uxtw #1]
    adr x1, 3f
    add x0, x1, w0, sxth #2
    br x0
3:  add x23, x23, #5
    b 1b
4:  add x23, x23, #100
    b 1b
5:  add x23, x23, #6
    b 1b
    .cfi_endproc
    .size check_before, .-check_before
    .section .rodata
    .balign 2
.Lcheck_table:
    .hword (3b - 3b) / 4, (4b - 3b) / 4, (5b - 3b) / 4
    .text

// Negative: the two paths into the dispatch bring two different tables in x21 (x0 = 0:
// table a, else table b; x1 indexes it). Both run correctly, but no one table describes
// the jump: the function stays skipped (unresolved-indirect-jump). disagree(0, 1) = 20,
// disagree(1, 1) = 10.
    .globl disagree
    .type disagree, %function
disagree:
    .cfi_startproc
    stp x29, x30, [sp, #-32]!
    .cfi_def_cfa_offset 32
    .cfi_offset 29, -32
    .cfi_offset 30, -24
    mov x29, sp
    str x21, [sp, #16]
    .cfi_offset 21, -16
    cbnz x0, 1f
    adrp x21, .Ldisagree_a
    add x21, x21, :lo12:.Ldisagree_a
    b 2f
1:  adrp x21, .Ldisagree_b
    add x21, x21, :lo12:.Ldisagree_b
2:  cmp w1, #1
    b.hi 5f
    ldrb w1, [x21, w1, uxtw]
    adr x2, 3f
    add x1, x2, w1, sxtb #2
    br x1
3:  mov x0, #10
    b 6f
4:  mov x0, #20
    b 6f
5:  mov x0, #0
6:  ldr x21, [sp, #16]
    ldp x29, x30, [sp], #32
    .cfi_restore 29
    .cfi_restore 30
    .cfi_restore 21
    .cfi_def_cfa_offset 0
    ret
    .cfi_endproc
    .size disagree, .-disagree
    .section .rodata
.Ldisagree_a:
    .byte (3b - 3b) / 4, (4b - 3b) / 4
.Ldisagree_b:
    .byte (4b - 3b) / 4, (3b - 3b) / 4
    .text

// Negative: a path enters between the `adrp` and the `add` of the base, with the page in
// x21 from somewhere the analysis does not follow (x3, the caller's). The program is right
// (the caller passes the same page), but the `add` alone proves nothing: skipped.
// split_pair(0, 0) = 30, split_pair(1, 1) = 20.
    .globl split_pair
    .type split_pair, %function
split_pair:
    .cfi_startproc
    stp x29, x30, [sp, #-32]!
    .cfi_def_cfa_offset 32
    .cfi_offset 29, -32
    .cfi_offset 30, -24
    mov x29, sp
    str x21, [sp, #16]
    .cfi_offset 21, -16
    cbnz x0, 1f
    adrp x21, .Lsplit_table
    b 2f
1:  mov x21, x3
2:  add x21, x21, :lo12:.Lsplit_table
    cmp w1, #1
    b.hi 5f
    ldrb w1, [x21, w1, uxtw]
    adr x2, 3f
    add x1, x2, w1, sxtb #2
    br x1
3:  mov x0, #30
    b 6f
4:  mov x0, #20
    b 6f
5:  mov x0, #0
6:  ldr x21, [sp, #16]
    ldp x29, x30, [sp], #32
    .cfi_restore 29
    .cfi_restore 30
    .cfi_restore 21
    .cfi_def_cfa_offset 0
    ret
    .cfi_endproc
    .size split_pair, .-split_pair
    .section .rodata
.Lsplit_table:
    .byte (3b - 3b) / 4, (4b - 3b) / 4
    .text

// Negative: the check's predecessor reaches back, in a straight line through the loop
// head, to the first table; but the back edge brings the second. Codes 0, 1, 2 from
// .Lcodes: the first table's case 0 (add 2, then switch to the second table), then the
// second's cases 1 and 2 (add 3, add 1), then code 3 ends: 6.
    .globl changed_on_back_edge
    .type changed_on_back_edge, %function
changed_on_back_edge:
    .cfi_startproc
    stp x29, x30, [sp, #-48]!
    .cfi_def_cfa_offset 48
    .cfi_offset 29, -48
    .cfi_offset 30, -40
    mov x29, sp
    stp x21, x22, [sp, #16]
    .cfi_offset 21, -32
    .cfi_offset 22, -24
    str x23, [sp, #32]
    .cfi_offset 23, -16
    mov x22, x0
    mov x23, #0
    adrp x21, .Lback_first
    add x21, x21, :lo12:.Lback_first
1:  ldrb w0, [x22], #1
    cmp w0, #2
    b.ls 2f
    mov x0, x23
    ldp x21, x22, [sp, #16]
    ldr x23, [sp, #32]
    ldp x29, x30, [sp], #48
    .cfi_remember_state
    .cfi_restore 29
    .cfi_restore 30
    .cfi_restore 21
    .cfi_restore 22
    .cfi_restore 23
    .cfi_def_cfa_offset 0
    ret
    .cfi_restore_state
2:  ldrb w0, [x21, w0, uxtw]
    adr x1, 3f
    add x0, x1, w0, sxtb #2
    br x0
3:  add x23, x23, #2
    adrp x21, .Lback_second
    add x21, x21, :lo12:.Lback_second
    b 1b
4:  add x23, x23, #3
    b 1b
5:  add x23, x23, #1
    b 1b
    .cfi_endproc
    .size changed_on_back_edge, .-changed_on_back_edge
    .section .rodata
.Lback_first:
    .byte (3b - 3b) / 4, (3b - 3b) / 4, (3b - 3b) / 4
.Lback_second:
    .byte (3b - 3b) / 4, (4b - 3b) / 4, (5b - 3b) / 4

.Lcodes:
    .byte 0, 1, 2, 3
.Lletters:
    .ascii "ABC"
    .byte 0
