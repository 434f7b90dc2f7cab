/* A small program in two versions, for stale-profile tests (crates/cli/tests/stale_cli.rs):
 * built once as is and once with -DV2, which changes it the way a release does: the hot
 * interpreter loop gains an opcode and one of its cases computes differently, a new
 * function appears before the others (every address after it moves), and the rest of
 * the code is unchanged. Both versions print the same for the same arguments. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { OP_PUSH, OP_ADD, OP_MUL, OP_DUP, OP_SWAP, OP_JNZ, OP_DEC, OP_POP, OP_HALT, OP_NOP };

#ifdef V2
__attribute__((noinline)) static long checked(long x) {
    if (x > 1000000007L || x < -1000000007L) {
        return x % 1000000007L;
    }
    return x;
}
#endif

__attribute__((noinline)) static unsigned hash_str(const char *s) {
    unsigned h = 2166136261u;
    while (*s) {
        h ^= (unsigned char)*s++;
        h *= 16777619u;
    }
    return h;
}

__attribute__((noinline)) static long fib(int n) {
    long a = 0, b = 1;
    for (int i = 0; i < n; i++) {
        long t = a + b;
        a = b;
        b = t % 1000003;
    }
    return a;
}

__attribute__((noinline)) static void sort(int *v, int n) {
    for (int i = 1; i < n; i++) {
        int x = v[i], j = i - 1;
        while (j >= 0 && v[j] > x) {
            v[j + 1] = v[j];
            j--;
        }
        v[j + 1] = x;
    }
}

__attribute__((noinline)) static long run(const int *code, long counter) {
    long stack[64];
    int sp = 0, pc = 0;
    stack[sp++] = counter;
    for (;;) {
        int op = code[pc++];
        switch (op) {
        case OP_PUSH:
            stack[sp++] = code[pc++];
            break;
        case OP_ADD:
            sp--;
#ifdef V2
            stack[sp - 1] = checked(stack[sp - 1] + stack[sp]);
#else
            stack[sp - 1] = (stack[sp - 1] + stack[sp]) % 1000000007L;
#endif
            break;
        case OP_MUL:
            sp--;
            stack[sp - 1] = (stack[sp - 1] * stack[sp]) % 1000000007L;
            break;
        case OP_DUP:
            stack[sp] = stack[sp - 1];
            sp++;
            break;
        case OP_SWAP: {
            long t = stack[sp - 1];
            stack[sp - 1] = stack[sp - 2];
            stack[sp - 2] = t;
            break;
        }
        case OP_JNZ: {
            int target = code[pc++];
            if (stack[sp - 1] != 0) {
                pc = target;
            }
            break;
        }
        case OP_DEC:
            stack[sp - 1]--;
            break;
        case OP_POP:
            sp--;
            break;
#ifdef V2
        case OP_NOP:
            break;
#endif
        case OP_HALT:
            return sp > 1 ? stack[sp - 2] : stack[0];
        default:
            fprintf(stderr, "bad opcode %d\n", op);
            exit(2);
        }
    }
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000;
    /* acc = 1; loop: acc = acc * 3 + 7; counter--; while counter */
    static const int code[] = {
        OP_PUSH, 1,                  /* 0: stack: counter acc */
        OP_SWAP,                     /* 2: acc counter */
        OP_SWAP, OP_PUSH, 3, OP_MUL, /* 3: counter acc*3 */
        OP_PUSH, 7, OP_ADD,          /* 7: counter acc*3+7 */
        OP_SWAP, OP_DEC,             /* 10: acc counter-1 */
        OP_JNZ, 3,                   /* 12 */
        OP_HALT,                     /* 14 */
    };
    long r = run(code, n);
    int v[200];
    for (int i = 0; i < 200; i++) {
        v[i] = (int)((i * 7919L + n) % 1009);
    }
    sort(v, 200);
    printf("run %ld fib %ld hash %u min %d max %d\n", r, fib((int)(n % 5000)),
           hash_str(argc > 2 ? argv[2] : "rivet"), v[0], v[199]);
    return 0;
}
