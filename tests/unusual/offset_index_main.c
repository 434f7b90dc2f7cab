/* Drives offset_index.S's dispatches over 0..15 and prints each result. */
#include <stdio.h>

long before(long n);
long classify(unsigned long n);
long pick(unsigned long n);

int main(void) {
    for (unsigned long n = 0; n < 16; n++)
        printf("%lu: %ld %ld %ld\n", n, before((long)n), classify(n), pick(n));
    return 0;
}
