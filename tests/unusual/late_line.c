/* late_line.c: `late_start` begins with an instruction that has no line-table row: its rows
   start one instruction in, in a section of its own (so a line sequence of its own), the way
   gcc can start a `.cold` part with a register copy it gave no line (PostgreSQL's
   DiscardCommand.cold). Rewritten, the function must keep its rows. */
#include <stdio.h>
__attribute__((noinline)) int twice(int x) { return 2 * x; }
int late_start(int);
/* After a function, so that the compiler has declared file 1 (built with
   -fno-toplevel-reorder, which keeps this order). */
__asm__(".section .text.late,\"ax\",@progbits\n"
        ".globl late_start\n"
        ".type late_start, @function\n"
        "late_start:\n"
        ".cfi_startproc\n"
        "  movl %edi, %ecx\n"
        ".loc 1 20 0\n"
        "  leal 3(%rcx), %eax\n"
        ".loc 1 21 0\n"
        "  ret\n"
        ".cfi_endproc\n"
        ".size late_start, .-late_start\n"
        ".text\n");
int main(int argc, char **argv) {
    (void)argv;
    printf("%d %d\n", twice(argc), late_start(argc));
    return 0;
}
