/* tailcalls_noreturn.c -- covers: tail calls (sibling calls that -O2 compiles to
 * `jmp`: a dispatcher tail-calling one of several handlers, mutually tail-calling
 * state functions, a tail call through a function pointer, a self tail call that
 * becomes a loop), noreturn paths (error branches calling abort() / exit() that
 * are never taken, a custom __attribute__((noreturn)) function, calls to it
 * followed by __builtin_unreachable), and exit from deep inside a call chain.
 * EXIT CODE: this program deliberately exits with status 42 (through the
 * noreturn function finish()); the manifest records expected exit 42. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static uint64_t ck = 1469598103934665603ULL;
static void mix(uint64_t v) { ck ^= v; ck *= 1099511628211ULL; ck ^= ck >> 29; }

__attribute__((noreturn, noinline)) static void fatal(const char *what, int code)
{
    fprintf(stderr, "fatal: %s\n", what);
    exit(code);
}

__attribute__((noreturn, noinline)) static void finish(int depth)
{
    printf("finishing at depth %d\n", depth);
    mix((uint64_t)depth);
    printf("checksum: %016llx\n", (unsigned long long)ck);
    fflush(stdout);
    exit(42);
}

/* Handlers take the same arguments as the dispatcher: sibling calls. */
__attribute__((noinline)) uint64_t h_add(uint64_t a, uint64_t b) { return a + b; }
__attribute__((noinline)) uint64_t h_mul(uint64_t a, uint64_t b) { return a * b + 1; }
__attribute__((noinline)) uint64_t h_xor(uint64_t a, uint64_t b) { return (a ^ b) * 3; }
__attribute__((noinline)) uint64_t h_bad(uint64_t a, uint64_t b)
{
    if (a == 0xdeadbeefULL && b == 0xdeadbeefULL) fatal("h_bad reached", 3); /* never */
    return a - b;
}

__attribute__((noinline)) uint64_t dispatch(uint64_t a, uint64_t b)
{
    switch (a & 3) {
    case 0: return h_add(a, b);
    case 1: return h_mul(a, b);
    case 2: return h_xor(a, b);
    default: return h_bad(a, b);
    }
}

/* A state machine of mutually tail-calling functions: each step is a `jmp`. */
uint64_t st_a(uint64_t n, uint64_t acc);
uint64_t st_b(uint64_t n, uint64_t acc);
uint64_t st_c(uint64_t n, uint64_t acc);
__attribute__((noinline)) uint64_t st_a(uint64_t n, uint64_t acc)
{
    if (n == 0) return acc;
    return (n % 3 == 0) ? st_b(n - 1, acc * 3 + 1) : st_c(n - 1, acc + n);
}
__attribute__((noinline)) uint64_t st_b(uint64_t n, uint64_t acc)
{
    if (n == 0) return acc ^ 0xb;
    return st_a(n - 1, acc ^ (acc >> 3));
}
__attribute__((noinline)) uint64_t st_c(uint64_t n, uint64_t acc)
{
    if (n == 0) return acc ^ 0xc;
    return (n & 1) ? st_a(n - 1, acc + 7) : st_b(n - 1, acc * 5);
}

typedef uint64_t (*binop)(uint64_t, uint64_t);
static binop ops[4] = { h_add, h_mul, h_xor, h_bad };
__attribute__((noinline)) uint64_t via_pointer(uint64_t a, uint64_t b) { return ops[b & 3](a, b); }

/* Self tail call: a loop at -O2, real recursion at -O0 (depth <= 2000). */
__attribute__((noinline)) static uint64_t gcd(uint64_t a, uint64_t b) { return b ? gcd(b, a % b) : a; }

static int checked_div(int a, int b)
{
    if (b == 0) {
        fatal("division by zero", 4); /* never taken */
        __builtin_unreachable();
    }
    return a / b;
}

__attribute__((noreturn, noinline)) static void descend(int depth, int stop)
{
    if (depth < stop) descend(depth + 1, stop); /* noreturn call: no code after it */
    finish(depth);
}

int main(void)
{
    uint64_t x = 1;
    for (uint64_t i = 0; i < 100000; i++) x = dispatch(x + i, i * 2654435761u);
    printf("dispatch: %016llx\n", (unsigned long long)x);
    mix(x);

    /* Depth 1500 keeps -O0 (no tail calls) within the stack. */
    uint64_t s = 0;
    for (uint64_t n = 1000; n < 1500; n += 7) s = s * 31 + st_a(n, n);
    printf("states: %016llx\n", (unsigned long long)s);
    mix(s);

    uint64_t p = 5;
    for (uint64_t i = 0; i < 10000; i++) p = via_pointer(p, i) + 1;
    printf("pointer: %016llx\n", (unsigned long long)p);
    mix(p);

    uint64_t g = 0;
    for (uint64_t i = 1; i < 2000; i++) g += gcd(i * 1234567u, 987654321u + i * 13u);
    printf("gcd sum: %llu\n", (unsigned long long)g);
    mix(g);

    int q = 0;
    for (int i = 1; i < 100; i++) q += checked_div(1000000, i);
    printf("div sum: %d\n", q);
    mix((uint64_t)q);

    if (q < 0) abort(); /* never */
    descend(0, 25);
}
