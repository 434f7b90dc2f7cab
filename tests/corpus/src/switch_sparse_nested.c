/* switch_sparse_nested.c -- covers: sparse switches (widely spaced case values,
 * compiled as compare trees / binary search), a mostly-dense switch with holes
 * (jump table whose holes go to the default), nested switches (a switch inside a
 * case of another switch, both big enough for jump tables), and a small state
 * machine driven by a switch in a loop. Deterministic; ends with a checksum. */
#include <stdint.h>
#include <stdio.h>

static uint64_t ck = 1469598103934665603ULL;
static void mix(uint64_t v) { ck ^= v; ck *= 1099511628211ULL; ck ^= ck >> 29; }

/* Sparse: values far apart, no table possible. */
__attribute__((noinline)) static int sparse(uint32_t key)
{
    switch (key) {
    case 3: return 1;
    case 97: return 2;
    case 1000: return 3;
    case 4096: return 4;
    case 65537: return 5;
    case 1000003: return 6;
    case 0x7fffffffu: return 7;
    case 0xdeadbeefu: return 8;
    case 0xfffffff0u: return 9;
    default: return 0;
    }
}

/* Dense range 0..30 with holes: table entries of the holes point to default. */
__attribute__((noinline)) static uint32_t holes(uint32_t k, uint32_t x)
{
    switch (k) {
    case 0: return x + 1;
    case 1: return x * 3;
    case 3: return x ^ 0xff;
    case 4: return x >> 2;
    case 7: return x + 77;
    case 9: return x * x;
    case 10: return ~x;
    case 14: return x - 14;
    case 17: return x << 3;
    case 20: return x | 0x100;
    case 23: return x & 0xfff;
    case 27: return x + k * k;
    case 30: return x ^ (x >> 5);
    default: return x + k;
    }
}

/* Nested: outer switch on a command class, inner switches on the sub-op. */
__attribute__((noinline)) static uint32_t nested(uint32_t cls, uint32_t op, uint32_t v)
{
    switch (cls) {
    case 0:
        switch (op) {
        case 0: return v + 1; case 1: return v + 2; case 2: return v + 3;
        case 3: return v + 4; case 4: return v + 5; case 5: return v + 6;
        case 6: return v + 7; case 7: return v + 8; case 8: return v + 9;
        default: return v;
        }
    case 1:
        switch (op) {
        case 0: return v * 2; case 1: return v * 3; case 2: return v * 5;
        case 3: return v * 7; case 4: return v * 11; case 5: return v * 13;
        case 6: return v * 17; case 7: return v * 19; case 8: return v * 23;
        default: return v * 29;
        }
    case 2:
        switch (op) {
        case 0: return v ^ 1; case 1: return v ^ 2; case 2: return v ^ 4;
        case 3: return v ^ 8; case 4: return v ^ 16; case 5: return v ^ 32;
        case 6: return v ^ 64; case 7: return v ^ 128; case 8: return v ^ 256;
        default: return v ^ 512;
        }
    case 3: return v >> 1;
    case 4: return v << 1;
    case 5: return v - 1;
    case 6: return v + cls + op;
    case 7: return v * 9 + 7;
    case 8: return (v << 5) | (v >> 27);
    default: return v ^ 0xabcdef;
    }
}

/* A tiny tokenizer state machine: switch on state, inner switch on the char. */
enum { S_START, S_NUM, S_WORD, S_SPACE };
static uint32_t tokenize(const char *s, int *ntok)
{
    int state = S_START, n = 0;
    uint32_t h = 0;
    for (; *s; s++) {
        char c = *s;
        switch (state) {
        case S_START:
        case S_SPACE:
            switch (c) {
            case '0': case '1': case '2': case '3': case '4':
            case '5': case '6': case '7': case '8': case '9':
                state = S_NUM; n++; h = h * 10 + (uint32_t)(c - '0'); break;
            case ' ': case '\t': case ',': case ';':
                state = S_SPACE; break;
            default:
                state = S_WORD; n++; h = h * 33 + (uint32_t)c; break;
            }
            break;
        case S_NUM:
            if (c >= '0' && c <= '9') h = h * 10 + (uint32_t)(c - '0');
            else if (c == ' ' || c == ',') state = S_SPACE;
            else { state = S_WORD; n++; h ^= (uint32_t)c; }
            break;
        case S_WORD:
            if (c == ' ' || c == ',' || c == ';') state = S_SPACE;
            else h = h * 33 + (uint32_t)c;
            break;
        }
    }
    *ntok = n;
    return h;
}

int main(void)
{
    static const uint32_t keys[] = {3, 4, 97, 1000, 4096, 4097, 65537, 1000003,
                                    0x7fffffffu, 0xdeadbeefu, 0xfffffff0u, 0, 5};
    int ssum = 0;
    for (unsigned r = 0; r < 1000; r++)
        for (unsigned i = 0; i < sizeof keys / sizeof keys[0]; i++)
            ssum += sparse(keys[i] + (r % 7 == 0 ? 1u : 0u)) * (int)(i + 1);
    printf("sparse: %d\n", ssum);
    mix((uint64_t)ssum);

    uint32_t hx = 7;
    for (uint32_t i = 0; i < 50000; i++)
        hx = holes((hx ^ i) % 32, hx + i);
    printf("holes: %08x\n", hx);
    mix(hx);

    uint32_t nv = 1;
    uint32_t seed = 2463534242u;
    for (int i = 0; i < 100000; i++) {
        seed ^= seed << 13; seed ^= seed >> 17; seed ^= seed << 5;
        nv = nested(seed % 11, (seed >> 8) % 10, nv);
    }
    printf("nested: %08x\n", nv);
    mix(nv);

    int ntok = 0;
    uint32_t th = tokenize("let x1 = 42, y = 7; call foo 123 bar9 9bar\tend", &ntok);
    printf("tokens: %d %08x\n", ntok, th);
    mix(th);
    mix((uint64_t)ntok);

    printf("checksum: %016llx\n", (unsigned long long)ck);
    return 0;
}
