// AArch64 constructs discovery and the rewrite must handle, marked for BTI (every
// indirect branch target has its landing pad, and the GNU property note says so), so that
// qemu-aarch64 enforces BTI and PAC while rewritten copies run. `_start` exits with 52.
// With -DMISSING_PAD one case of the switch has no `bti j`: the negative control, which
// must die with SIGILL where BTI is enforced.
    .text
    .globl _start
    .type _start, %function
_start:
    .cfi_startproc
    .cfi_undefined x30
    mov x19, #0
    mov x0, #5
    bl branches
    add x19, x19, x0
    mov x0, #3
    bl table
    add x19, x19, x0
    bl literal
    add x19, x19, x0
    adrp x0, counter
    add x0, x0, :lo12:counter
    bl atomic_inc
    add x19, x19, x0
    bl signed
    add x19, x19, x0
    adrp x1, bti_target
    add x1, x1, :lo12:bti_target
    blr x1
    add x19, x19, x0
    mov x0, #2
    bl tail
    add x19, x19, x0
    mov x0, x19
    b exit_now
    .cfi_endproc
    .size _start, .-_start

// Every conditional branch form, and a loop: returns 1 for x0 = 5.
    .globl branches
    .type branches, %function
branches:
    .cfi_startproc
    mov x1, #0
1:  cbz x0, 4f
    tbnz x0, #0, 2f
    add x1, x1, #2
    b 3f
2:  add x1, x1, #1
3:  sub x0, x0, #1
    cmp x0, #100
    b.hi 5f
    cbnz x0, 1b
4:  tbz x1, #63, 6f
5:  mov x0, #99
    ret
6:  and x0, x1, #1
    ret
    .cfi_endproc
    .size branches, .-branches

// A switch as gcc writes it: bound check, byte table in .rodata, `adr` anchor, `sxtb #2`.
    .globl table
    .type table, %function
table:
    .cfi_startproc
    cmp w0, #3
    b.hi 9f
    adrp x1, .Ltable
    add x1, x1, :lo12:.Ltable
    ldrb w1, [x1, w0, uxtw]
    adr x2, 5f
    add x1, x2, w1, sxtb #2
    br x1
5:  bti j
    mov x0, #10
    ret
6:  bti j
    mov x0, #20
    ret
7:
#ifndef MISSING_PAD
    bti j
#endif
    mov x0, #30
    ret
8:  bti j
    mov x0, #4
    ret
9:  mov x0, #0
    ret
    .cfi_endproc
    .size table, .-table
    .section .rodata
.Ltable:
    .byte (5b - 5b) / 4, (6b - 5b) / 4, (7b - 5b) / 4, (8b - 5b) / 4
    .text

// A literal load whose pool the assembler places inside the function (`$d` marks it):
// returns 8.
    .globl literal
    .type literal, %function
literal:
    .cfi_startproc
    ldr x0, =0x1122334455667788
    b 1f
    .ltorg
1:  and x0, x0, #0xf
    ret
    .cfi_endproc
    .size literal, .-literal

// An exclusive-monitor loop (the shape of libgcc's outline atomics): returns the old value
// plus one, 1.
    .globl atomic_inc
    .type atomic_inc, %function
atomic_inc:
    .cfi_startproc
    mov x2, x0
1:  ldaxr x0, [x2]
    add x1, x0, #1
    stlxr w3, x1, [x2]
    cbnz w3, 1b
    add x0, x0, #1
    ret
    .cfi_endproc
    .size atomic_inc, .-atomic_inc

// Return-address signing, with its unwind rule: returns 3.
    .globl signed
    .type signed, %function
signed:
    .cfi_startproc
    paciasp
    .cfi_negate_ra_state
    stp x29, x30, [sp, #-16]!
    .cfi_def_cfa_offset 16
    .cfi_offset 29, -16
    .cfi_offset 30, -8
    mov x0, #2
    bl branches
    add x0, x0, #2
    ldp x29, x30, [sp], #16
    .cfi_restore 30
    .cfi_restore 29
    .cfi_def_cfa_offset 0
    autiasp
    .cfi_negate_ra_state
    ret
    .cfi_endproc
    .size signed, .-signed

// A BTI landing pad for the indirect call: returns 5.
    .globl bti_target
    .type bti_target, %function
bti_target:
    .cfi_startproc
    bti c
    mov x0, #5
    ret
    .cfi_endproc
    .size bti_target, .-bti_target

// A tail call: table(2) = 30.
    .globl tail
    .type tail, %function
tail:
    .cfi_startproc
    b table
    .cfi_endproc
    .size tail, .-tail

// Never returns.
    .globl exit_now
    .type exit_now, %function
exit_now:
    .cfi_startproc
    mov x8, #93
    svc #0
    brk #0
    .cfi_endproc
    .size exit_now, .-exit_now

    .data
    .balign 8
counter:
    .quad 0

    .section .note.gnu.property, "a"
    .p2align 3
    .word 4                 // n_namesz
    .word 16                // n_descsz
    .word 5                 // NT_GNU_PROPERTY_TYPE_0
    .asciz "GNU"
    .word 0xc0000000        // GNU_PROPERTY_AARCH64_FEATURE_1_AND
    .word 4
    .word 3                 // BTI | PAC
    .word 0
