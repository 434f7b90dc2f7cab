/* The caller of foreign_table.S's pick and apply. */
#include <stdio.h>
#include <stdlib.h>

int pick(int k);
long apply(long (*fn)(long), long x);

__attribute__((noinline)) static long square(long x) { return x * x; }

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 20;
    long sum = 0;
    for (int k = 0; k < n; k++)
        sum += pick(k) + apply(square, k);
    printf("sum over %d = %ld\n", n, sum);
    return 0;
}
