// The near side of a text larger than a branch reaches: main and near_twice call far.c's
// functions through the linker's veneers.
#include <stdio.h>
#include <stdlib.h>
int far_square(int x);
int far_sum(int n);
__attribute__((noinline)) int near_twice(int x) { return 2 * x + far_square(x); }
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 100;
    int t = 0;
    for (int i = 0; i < n; i++) t += near_twice(i) % 13 + (i & 1 ? far_sum(i % 50) : 0);
    printf("total %d\n", t);
    return t % 7 == 3;
}
