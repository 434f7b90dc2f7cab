// main of the every-block-split-cold test (crates/cli/tests/aarch64_rewrite.rs): calls the
// chain of generated functions gen_f0 .. gen_fN (the test writes their assembly) and far.c's
// functions across gap.s's 136 MiB.
#include <stdio.h>
#include <stdlib.h>
unsigned gen_f0(unsigned x);
int far_sum(int n);
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    unsigned t = 0;
    for (int i = 0; i < n; i++) t = t * 31 + gen_f0((unsigned)i * 2654435761u) + far_sum(i % 20);
    printf("chain %u\n", t);
    return 0;
}
