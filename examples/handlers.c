/* The demo's workload: a request dispatcher whose hot code is scattered.
 *
 * 256 request handlers, each a few dozen bytes of hot path followed by a large error path
 * that valid requests never take (validation failures, retries, diagnostics), so the compiled
 * handlers sit about 1 KiB apart and the hot paths of all of them span ~300 KiB: far more than
 * a 32 KiB instruction cache. A profile-guided layout moves the error paths out and packs the
 * hot paths together (about 16 KiB), which is where the speedup comes from.
 *
 * Usage: handlers [REQUESTS [STRICT]]   (prints a checksum; 20 million requests by default;
 * STRICT > 0 turns the error checks on) */
#include <stdio.h>
#include <stdlib.h>

static volatile long diagnostics;
/* Raised only when debugging: valid requests never take the error paths. */
static volatile int strict_checks;

/* An error path: enough distinct work that it compiles to a few hundred bytes. */
__attribute__((noinline)) static void report(long code, long a, long b, long c) {
    diagnostics += code * 7 + a * 3 + b * 5 + c;
}

#define COLD(K)                                                                            \
    if (strict_checks > (K) % 7 && x % (1000003 + (K)) == 999983) {                        \
        for (int i = 0; i < (int)(x & 7) + 3; i++) {                                       \
            report((K) * 100 + i, x ^ (K), x * (i + 1), (x >> ((K) % 5)) + i);            \
            if ((x + i) % 11 == 3) report((K) * 100 + 50 + i, x, i, (K));                 \
        }                                                                                  \
        x = x * 31 + (K);                                                                  \
    }

#define HANDLER(N)                                                                         \
    __attribute__((noinline)) static long handle_##N(long x) {                             \
        COLD(N * 4 + 0)                                                                    \
        x = x * (2 * (N) + 1) + ((N) ^ 0x5a);                                              \
        COLD(N * 4 + 1)                                                                    \
        x ^= x >> ((N) % 13 + 3);                                                          \
        COLD(N * 4 + 2)                                                                    \
        x += (N) * 0x9e3779b1L;                                                            \
        COLD(N * 4 + 3)                                                                    \
        return x & 0xffffffffffffL;                                                        \
    }

#define H4(N) HANDLER(N##0) HANDLER(N##1) HANDLER(N##2) HANDLER(N##3)
#define H16(N) H4(N##0) H4(N##1) H4(N##2) H4(N##3)
#define H64(N) H16(N##0) H16(N##1) H16(N##2) H16(N##3)
/* Handler names are base-4 digit strings after a leading 1: handle_10000 .. handle_13333. */
H64(10)
H64(11)
H64(12)
H64(13)

#define E4(N) handle_##N##0, handle_##N##1, handle_##N##2, handle_##N##3,
#define E16(N) E4(N##0) E4(N##1) E4(N##2) E4(N##3)
#define E64(N) E16(N##0) E16(N##1) E16(N##2) E16(N##3)
static long (*const handlers[256])(long) = {E64(10) E64(11) E64(12) E64(13)};

int main(int argc, char **argv) {
    long requests = argc > 1 ? atol(argv[1]) : 20000000;
    strict_checks = argc > 2 ? atoi(argv[2]) : 0;
    unsigned long state = 88172645463325252UL;
    long sum = 0;
    for (long r = 0; r < requests; r++) {
        /* xorshift: requests arrive for every handler, in no order a predictor can learn */
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        sum += handlers[state & 255]((long)(state >> 8) & 0xffffff);
    }
    printf("%ld %ld\n", sum, diagnostics);
    return 0;
}
