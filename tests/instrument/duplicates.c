#include <stdio.h>
#include <stdlib.h>
/* Identical functions for `rivet optimize --icf` (crates/cli/tests/icf.rs); built with
 * -fno-ipa-icf so that gcc keeps them apart. Prints a checksum and whether two identical
 * functions whose addresses are taken still compare different, as C requires. */
__attribute__((noinline)) long sum_a(const long *v, int n) { long s = 0; for (int i = 0; i < n; i++) s += v[i] * 3 + (v[i] >> 2); return s; }
__attribute__((noinline)) long sum_b(const long *v, int n) { long s = 0; for (int i = 0; i < n; i++) s += v[i] * 3 + (v[i] >> 2); return s; }
/* Identical bodies calling identical callees: fold at the fixed point. */
__attribute__((noinline)) long leaf_a(long x) { return x * 7 + 1; }
__attribute__((noinline)) long leaf_b(long x) { return x * 7 + 1; }
__attribute__((noinline)) long mid_a(long x) { return leaf_a(x) ^ leaf_a(x + 1); }
__attribute__((noinline)) long mid_b(long x) { return leaf_b(x) ^ leaf_b(x + 1); }
/* Mutually recursive pairs. */
long odd_a(long n);
long odd_b(long n);
__attribute__((noinline)) long even_a(long n) { return n == 0 ? 1 : odd_a(n - 1) + 0 * n; }
__attribute__((noinline)) long odd_a(long n) { return n == 0 ? 0 : even_a(n - 1); }
__attribute__((noinline)) long even_b(long n) { return n == 0 ? 1 : odd_b(n - 1) + 0 * n; }
__attribute__((noinline)) long odd_b(long n) { return n == 0 ? 0 : even_b(n - 1); }
/* Same code, address taken: compared by pointer below, must stay apart. */
__attribute__((noinline)) long ptr_a(long x) { return x * 11 - 5; }
__attribute__((noinline)) long ptr_b(long x) { return x * 11 - 5; }
/* Same shape, different callee: not identical. */
__attribute__((noinline)) long other(long x) { return x * 13 + 2; }
__attribute__((noinline)) long mid_c(long x) { return other(x) ^ other(x + 1); }

long (*volatile fa)(long) = ptr_a;
long (*volatile fb)(long) = ptr_b;

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 20000;
    long v[64];
    for (int i = 0; i < 64; i++) v[i] = i * 37 - 100;
    long acc = 0;
    for (int r = 0; r < rounds; r++) {
        acc += sum_a(v, 64) - sum_b(v, 64 - (r & 7));
        acc ^= mid_a(r) + mid_b(r + 3) + mid_c(r);
        acc += even_a(r & 31) + odd_b(r & 15) + even_b(r & 7);
        acc += fa(r) - fb(r);
    }
    printf("acc=%ld distinct=%d\n", acc, fa != fb);
    return 0;
}
