// Called from near.c across the gap.s filler: 136 MiB away, beyond a bl's 128 MiB.
#include <stdio.h>
__attribute__((noinline)) int far_square(int x) { return x * x + 1; }
__attribute__((noinline)) int far_sum(int n) {
    int s = 0;
    for (int i = 0; i < n; i++) s += far_square(i) % 7;
    if (s < 0) puts("negative");
    return s;
}
