/* The caller of short_tail_jumps.S's functions: prints what they return for a few values. */
#include <stdio.h>
#include <stdlib.h>

int plus_one(int x);
int magnitude(int x);
int back(int x);

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 5;
    for (int x = -n; x <= n; x++)
        printf("%d: plus_one %d, magnitude %d, back %d\n", x, plus_one(x), magnitude(x), back(x));
    return 0;
}
