/* The caller of secondary_entry.S's functions: prints what they return for a few values,
   and sums many calls so that a profile finds `scaled` and both ways into it hot. */
#include <stdio.h>
#include <stdlib.h>

int via_near(int x);
int via_short(int x);
int scaled(int x);

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 5;
    for (int x = -n; x <= n; x++)
        printf("%d: via_near %d, via_short %d, scaled %d\n", x, via_near(x), via_short(x),
               scaled(x));
    long sum = 0;
    for (int i = 0; i < 200000; i++)
        sum += via_near(i & 1023) + via_short(i & 511) + scaled(i & 255);
    printf("sum %ld\n", sum);
    return 0;
}
