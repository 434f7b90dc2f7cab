/* One instance of each shape `rivet optimize --peepholes --simplify-conditional-tail-calls`
 * rewrites, written in assembly so no compiler version changes them (crates/cli/tests/
 * peephole.rs keeps the input's block order, so that none of them is already laid out away):
 * a conditional jump to a block that only jumps on (double jump), a jump to a block that only
 * returns, a conditional jump whose sides meet (useless branch), and a conditional jump to a
 * block that only tail-calls a function. */
#include <stdio.h>
#include <stdlib.h>

int double_jump(int x);
int meet(int x);
int cond_tail(int x);

__attribute__((noinline, used)) int helper(int x) { return x * 3 + 1; }

__asm__(".text\n"
        ".p2align 4\n"
        ".globl double_jump\n"
        ".type double_jump, @function\n"
        "double_jump:\n"
        ".cfi_startproc\n"
        "  test $3, %edi\n"
        "  je 1f\n"
        "  lea 2(%rdi), %eax\n"
        "  jmp 3f\n"
        "1: jmp 2f\n"
        "3: ret\n"
        "2: mov $1, %eax\n"
        "  ret\n"
        ".cfi_endproc\n"
        ".size double_jump, .-double_jump\n"
        ".p2align 4\n"
        ".globl meet\n"
        ".type meet, @function\n"
        "meet:\n"
        ".cfi_startproc\n"
        "  test $1, %edi\n"
        "  je 1f\n"
        "  jmp 1f\n"
        "1: lea 5(%rdi), %eax\n"
        "  ret\n"
        ".cfi_endproc\n"
        ".size meet, .-meet\n"
        ".p2align 4\n"
        ".globl cond_tail\n"
        ".type cond_tail, @function\n"
        "cond_tail:\n"
        ".cfi_startproc\n"
        "  cmp $10, %edi\n"
        "  jg 1f\n"
        "  lea 1(%rdi), %eax\n"
        "  ret\n"
        "1: jmp helper\n"
        ".cfi_endproc\n"
        ".size cond_tail, .-cond_tail\n");

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 100;
    long sum = 0;
    for (long i = 0; i < n; i++) {
        int x = (int)(i % 17);
        sum += double_jump(x) + meet(x) * 7 + cond_tail(x) * 13;
    }
    printf("n=%ld sum=%ld\n", n, sum);
    return 0;
}
