/* Drives hoisted_tables.S's run() over a few operation lists; prints each result. */
#include <stdio.h>

long run(const int *ops, int n, long *acc);

int main(void) {
    int ops[1000];
    for (int i = 0; i < 1000; i++)
        ops[i] = (i * 7 + i / 3) % 11;
    for (int n = 0; n <= 1000; n += 111) {
        long acc = n;
        printf("%d: %ld\n", n, run(ops, n, &acc));
    }
    return 0;
}
