/* A loop with a known branch sequence, for tests that synthesize branch stacks
 * (crates/cli/tests/aggregate.rs): for ecx = N..1: call leaf; if ecx is even, jump over a
 * nop; decrement and loop. Built with -nostdlib -static. */
    .text
    .globl _start
    .type _start, @function
_start:
    mov $1000, %ecx
.Lloop:
    call leaf
    test $1, %ecx
    jz .Lskip
    nop
.Lskip:
    dec %ecx
    jnz .Lloop
    mov $60, %eax
    xor %edi, %edi
    syscall
    ud2
    .size _start, .-_start

    .globl leaf
    .type leaf, @function
leaf:
    ret
    .size leaf, .-leaf
