/* switch_dense.c -- covers: dense switch jump tables (>= 8 consecutive cases, so
 * both gcc and clang emit an indirect jump through a table), a switch inside a
 * hot loop, a switch whose cases fall through, and a dense switch with a default
 * path.  Also: a switch on a char (table indexed after subtracting a base).
 * Deterministic; prints one line per sub-test and a final checksum line. */
#include <stdint.h>
#include <stdio.h>

static uint64_t ck = 1469598103934665603ULL;
static void mix(uint64_t v) { ck ^= v; ck *= 1099511628211ULL; ck ^= ck >> 29; }

/* 12 dense cases: a classic jump table. noinline so the table stays in this
 * function at every optimisation level. */
__attribute__((noinline)) static uint32_t op_dense(uint32_t op, uint32_t a, uint32_t b)
{
    switch (op) {
    case 0: return a + b;
    case 1: return a - b;
    case 2: return a * b;
    case 3: return b ? a / b : 0xffffffffu;
    case 4: return b ? a % b : 0u;
    case 5: return a & b;
    case 6: return a | b;
    case 7: return a ^ b;
    case 8: return a << (b & 31);
    case 9: return a >> (b & 31);
    case 10: return (a << 7) | (a >> 25);
    case 11: return ~a + b;
    default: return a * 2654435761u;
    }
}

/* Dense switch with fall-through chains (Duff-like accumulation). */
__attribute__((noinline)) static uint32_t fallthrough(uint32_t n, uint32_t x)
{
    uint32_t acc = 0;
    switch (n % 10) {
    case 9: acc += x * 9; /* fall through */
    case 8: acc ^= x << 3; /* fall through */
    case 7: acc += 7; /* fall through */
    case 6: acc *= 3; /* fall through */
    case 5: acc += x >> 1; /* fall through */
    case 4: acc ^= 0x5a5a; /* fall through */
    case 3: acc += n; /* fall through */
    case 2: acc *= 5; /* fall through */
    case 1: acc += 1; /* fall through */
    case 0: acc ^= x; break;
    }
    return acc;
}

/* Switch on a character range 'a'..'p': table with a non-zero base. */
__attribute__((noinline)) static int classify(char c)
{
    switch (c) {
    case 'a': return 10; case 'b': return 11; case 'c': return 12;
    case 'd': return 13; case 'e': return 14; case 'f': return 15;
    case 'g': return 1;  case 'h': return 2;  case 'i': return 3;
    case 'j': return 4;  case 'k': return 5;  case 'l': return 6;
    case 'm': return 7;  case 'n': return 8;  case 'o': return 9;
    case 'p': return 0;
    default: return -1;
    }
}

int main(void)
{
    /* Hot loop: the switch is inlined (or called) 200000 times. */
    uint32_t state = 12345u, acc = 0;
    for (uint32_t i = 0; i < 200000; i++) {
        state = state * 1103515245u + 12345u;
        uint32_t op = (state >> 16) % 13; /* 12 is the default path */
        acc = op_dense(op, acc + i, (state >> 8) & 0xffff);
        /* A second, inline switch in the same hot loop. */
        switch (i & 15) {
        case 0: acc += 1; break;
        case 1: acc ^= 0x1234; break;
        case 2: acc = acc * 3 + 1; break;
        case 3: acc -= i; break;
        case 4: acc += i >> 2; break;
        case 5: acc ^= acc >> 7; break;
        case 6: acc += 0x9e37; break;
        case 7: acc = (acc << 1) | (acc >> 31); break;
        case 8: acc ^= state; break;
        case 9: acc += 99; break;
        default: break;
        }
    }
    printf("hot loop: %08x\n", acc);
    mix(acc);

    uint32_t f = 0;
    for (uint32_t n = 0; n < 1000; n++)
        f = f * 31 + fallthrough(n, n * 7 + 3);
    printf("fallthrough: %08x\n", f);
    mix(f);

    const char *text = "the quick brown fox jumps over the lazy dog; pack my box";
    uint32_t sum = 0; /* unsigned: wraps without undefined behaviour */
    for (const char *p = text; *p; p++)
        sum = sum * 3u + (uint32_t)classify(*p);
    printf("classify: %08x\n", sum);
    mix(sum);

    printf("checksum: %016llx\n", (unsigned long long)ck);
    return 0;
}
