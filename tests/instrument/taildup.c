/* A hot loop whose two latches jump to one small shared tail, written in assembly so no
 * compiler version changes the shape (crates/cli/tests/tail_duplication.rs keeps the input's
 * block order): `kernel` adds 3 or 7 by parity and both sides `jmp` to a tail that adds,
 * bumps a counter RIP-relatively and returns; a cold block lies between them, so the jumps
 * go more than 64 bytes and `--tail-duplication` copies the tail into both. */
#include <stdio.h>
#include <stdlib.h>

int kernel(int x);
int hits;

__asm__(".text\n"
        ".p2align 4\n"
        ".globl kernel\n"
        ".type kernel, @function\n"
        "kernel:\n"
        ".cfi_startproc\n"
        "  cmp $100000000, %edi\n"
        "  ja 5f\n"
        "  test $1, %edi\n"
        "  jne 1f\n"
        "  lea 3(%rdi), %eax\n"
        "  jmp 9f\n"
        "1: lea 7(%rdi), %eax\n"
        "  jmp 9f\n"
        "5: imul $7, %edi, %edi\n"
        "  imul $7, %edi, %edi\n"
        "  imul $7, %edi, %edi\n"
        "  imul $7, %edi, %edi\n"
        "  imul $7, %edi, %edi\n"
        "  imul $7, %edi, %edi\n"
        "  imul $7, %edi, %edi\n"
        "  imul $7, %edi, %edi\n"
        "  imul $7, %edi, %edi\n"
        "  imul $7, %edi, %edi\n"
        "  imul $7, %edi, %edi\n"
        "  imul $7, %edi, %edi\n"
        "  imul $7, %edi, %edi\n"
        "  imul $7, %edi, %edi\n"
        "  imul $7, %edi, %edi\n"
        "  imul $7, %edi, %edi\n"
        "  imul $7, %edi, %edi\n"
        "  imul $7, %edi, %edi\n"
        "  imul $7, %edi, %edi\n"
        "  imul $7, %edi, %edi\n"
        "  imul $7, %edi, %edi\n"
        "  imul $7, %edi, %edi\n"
        "  lea 1(%rdi), %eax\n"
        "  jmp 9f\n"
        "9: add $5, %eax\n"
        "  addl $1, hits(%rip)\n"
        "  xor $0x55, %eax\n"
        "  ret\n"
        ".cfi_endproc\n"
        ".size kernel, .-kernel\n");

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 100;
    long sum = 0;
    for (long i = 0; i < n; i++)
        sum += kernel((int)i);
    printf("%ld %d\n", sum, hits);
    return 0;
}
