/* The bundled sample: a tiny bytecode interpreter with the constructs a post-link optimizer
 * must understand (a switch jump table, a computed-goto dispatch loop, function pointers,
 * a cold error path). `scripts/demo.sh` builds it with relocations and inspects it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { OP_PUSH, OP_ADD, OP_MUL, OP_DUP, OP_SWAP, OP_DROP, OP_JNZ, OP_DEC, OP_PRINT, OP_HALT };

static long run_switch(const int *code, int len) {
    long stack[64];
    int sp = 0, pc = 0;
    long out = 0;
    while (pc < len) {
        switch (code[pc++]) {
        case OP_PUSH: stack[sp++] = code[pc++]; break;
        case OP_ADD: sp--; stack[sp - 1] += stack[sp]; break;
        case OP_MUL: sp--; stack[sp - 1] *= stack[sp]; break;
        case OP_DUP: stack[sp] = stack[sp - 1]; sp++; break;
        case OP_SWAP: { long t = stack[sp - 1]; stack[sp - 1] = stack[sp - 2]; stack[sp - 2] = t; break; }
        case OP_DROP: sp--; break;
        case OP_JNZ: { int target = code[pc++]; if (stack[--sp]) pc = target; break; }
        case OP_DEC: stack[sp - 1]--; break;
        case OP_PRINT: out = out * 31 + stack[sp - 1]; break;
        case OP_HALT: return out;
        default: fprintf(stderr, "bad opcode\n"); abort();
        }
    }
    return out;
}

static long run_threaded(const int *code) {
    static const void *labels[] = { &&push, &&add, &&mul, &&dup, &&swap, &&drop, &&jnz, &&dec, &&print, &&halt };
    long stack[64];
    int sp = 0, pc = 0;
    long out = 0;
#define NEXT goto *labels[code[pc++]]
    NEXT;
push: stack[sp++] = code[pc++]; NEXT;
add: sp--; stack[sp - 1] += stack[sp]; NEXT;
mul: sp--; stack[sp - 1] *= stack[sp]; NEXT;
dup: stack[sp] = stack[sp - 1]; sp++; NEXT;
swap: { long t = stack[sp - 1]; stack[sp - 1] = stack[sp - 2]; stack[sp - 2] = t; } NEXT;
drop: sp--; NEXT;
jnz: { int target = code[pc++]; if (stack[--sp]) pc = target; } NEXT;
dec: stack[sp - 1]--; NEXT;
print: out = out * 31 + stack[sp - 1]; NEXT;
halt: return out;
}

typedef long (*runner)(const int *, int);
static long threaded_adapter(const int *code, int len) { (void)len; return run_threaded(code); }

int main(int argc, char **argv) {
    int iterations = argc > 1 ? atoi(argv[1]) : 200000;
    /* acc = 1; n = iterations; loop: acc = acc * 3 + n (mod wrap); print; n--; jnz loop */
    int code[] = { OP_PUSH, 1, OP_PUSH, iterations,
                   /* 4 */ OP_SWAP, OP_PUSH, 3, OP_MUL, OP_PUSH, 7, OP_ADD, OP_PRINT, OP_SWAP,
                   OP_DEC, OP_DUP, OP_JNZ, 4, OP_HALT };
    runner runners[] = { run_switch, threaded_adapter };
    long result = 0;
    for (unsigned i = 0; i < sizeof runners / sizeof runners[0]; i++)
        result += runners[i](code, (int)(sizeof code / sizeof code[0]));
    printf("checksum: %lx\n", (unsigned long)result);
    return 0;
}
