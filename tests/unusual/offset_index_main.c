/* Drives offset_index.S's dispatches (over 0..15, and niche over its 5 tags and its fixed
   one) and prints each result. */
#include <stdio.h>

long before(long n);
long classify(unsigned long n);
long pick(unsigned long n);
long niche(unsigned long tag, int fixed);

int main(void) {
    for (unsigned long n = 0; n < 16; n++)
        printf("%lu: %ld %ld %ld\n", n, before((long)n), classify(n), pick(n));
    for (unsigned long k = 0; k < 5; k++)
        printf("niche %lu: %ld\n", k, niche(0x8000000000000002ul + k, 0));
    printf("fixed: %ld\n", niche(0, 1));
    return 0;
}
