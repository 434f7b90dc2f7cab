/* computed_goto.c -- covers: GNU C computed goto (&&label, goto *table[op]) in a
 * tiny bytecode interpreter with threaded dispatch (a label-address table in
 * .rodata / .data.rel.ro), plus a second interpreter that dispatches through a
 * label-address table stored in a local array. Programs: a loop summing squares,
 * an iterative fibonacci, a collatz length search. Deterministic; checksum. */
#include <stdint.h>
#include <stdio.h>

static uint64_t ck = 1469598103934665603ULL;
static void mix(uint64_t v) { ck ^= v; ck *= 1099511628211ULL; ck ^= ck >> 29; }

enum { OP_PUSH, OP_ADD, OP_SUB, OP_MUL, OP_DUP, OP_SWAP, OP_OVER, OP_DROP,
       OP_JNZ, OP_DEC, OP_MOD, OP_DIV, OP_JZ, OP_JMP, OP_ROT, OP_HALT };

/* Stack machine. Code is an int array: opcode, optional immediate. */
__attribute__((noinline)) static int64_t run(const int *code, int64_t *steps_out)
{
    static void *const dispatch[] = {
        &&do_push, &&do_add, &&do_sub, &&do_mul, &&do_dup, &&do_swap, &&do_over,
        &&do_drop, &&do_jnz, &&do_dec, &&do_mod, &&do_div, &&do_jz, &&do_jmp,
        &&do_rot, &&do_halt,
    };
    int64_t stack[64];
    int sp = 0;
    const int *pc = code;
    int64_t steps = 0;
#define NEXT do { steps++; goto *dispatch[*pc++]; } while (0)
    NEXT;
do_push: stack[sp++] = *pc++; NEXT;
do_add:  sp--; stack[sp - 1] += stack[sp]; NEXT;
do_sub:  sp--; stack[sp - 1] -= stack[sp]; NEXT;
do_mul:  sp--; stack[sp - 1] *= stack[sp]; NEXT;
do_dup:  stack[sp] = stack[sp - 1]; sp++; NEXT;
do_swap: { int64_t t = stack[sp - 1]; stack[sp - 1] = stack[sp - 2]; stack[sp - 2] = t; } NEXT;
do_over: stack[sp] = stack[sp - 2]; sp++; NEXT;
do_drop: sp--; NEXT;
do_jnz:  { int off = *pc++; if (stack[--sp]) pc = code + off; } NEXT;
do_dec:  stack[sp - 1]--; NEXT;
do_mod:  sp--; stack[sp - 1] %= stack[sp]; NEXT;
do_div:  sp--; stack[sp - 1] /= stack[sp]; NEXT;
do_jz:   { int off = *pc++; if (!stack[--sp]) pc = code + off; } NEXT;
do_jmp:  { int off = *pc++; pc = code + off; } NEXT;
do_rot:  { int64_t a = stack[sp - 3]; stack[sp - 3] = stack[sp - 2];
           stack[sp - 2] = stack[sp - 1]; stack[sp - 1] = a; } NEXT;
do_halt:
#undef NEXT
    *steps_out = steps;
    return sp > 0 ? stack[sp - 1] : 0;
}

/* Register machine whose dispatch table is a local (built on every call). */
__attribute__((noinline)) static uint32_t regvm(uint32_t n)
{
    void *tbl[4] = { &&r_step, &&r_even, &&r_odd, &&r_done };
    uint32_t x = n, len = 0;
    goto *tbl[0];
r_step:
    if (x == 1) goto *tbl[3];
    len++;
    goto *tbl[1 + (x & 1)];
r_even:
    x >>= 1;
    goto *tbl[0];
r_odd:
    x = 3 * x + 1;
    goto *tbl[0];
r_done:
    return len;
}

int main(void)
{
    /* sum of i*i for i = n..1 ; stack: acc n */
    const int sumsq[] = {
        OP_PUSH, 0, OP_PUSH, 3000,
        /* 4: */ OP_DUP, OP_DUP, OP_MUL, OP_ROT, OP_ADD, OP_SWAP, /* acc' n */
        OP_DEC, OP_DUP, OP_JNZ, 4,
        OP_DROP, OP_HALT,
    };
    /* fib: a b n -> loop n times (a, b) = (b, a+b) mod 1000000007 */
    const int fib[] = {
        OP_PUSH, 0, OP_PUSH, 1, OP_PUSH, 5000,
        /* 6: */ OP_DUP, OP_JZ, 24,
        OP_ROT, OP_ROT,            /* n a b */
        OP_DUP, OP_ROT,            /* n b b a */
        OP_ADD, OP_PUSH, 1000000007, OP_MOD, /* n b a+b */
        OP_ROT, OP_DEC,            /* b a+b n-1 */
        OP_JMP, 6,
        OP_HALT, OP_HALT, OP_HALT,
        /* 24: */ OP_DROP, OP_DROP, OP_HALT,
    };
    int64_t steps = 0;
    int64_t r1 = run(sumsq, &steps);
    printf("sumsq: %lld steps %lld\n", (long long)r1, (long long)steps);
    mix((uint64_t)r1); mix((uint64_t)steps);
    int64_t r2 = run(fib, &steps);
    printf("fib: %lld steps %lld\n", (long long)r2, (long long)steps);
    mix((uint64_t)r2); mix((uint64_t)steps);

    uint32_t best = 0, arg = 0;
    for (uint32_t n = 1; n < 30000; n++) {
        uint32_t l = regvm(n);
        if (l > best) { best = l; arg = n; }
    }
    printf("collatz: n=%u len=%u\n", arg, best);
    mix(best); mix(arg);

    printf("checksum: %016llx\n", (unsigned long long)ck);
    return 0;
}
