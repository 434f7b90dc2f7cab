/* Drives masked_short_table.S's dispatch: the first table with values whose low 3 bits are
   0 to 3 (all the code ever passes it), the second with 0 to 5. */
#include <stdio.h>

int dispatch(int kind, unsigned x);

int main(void) {
    long sum = 0;
    for (unsigned x = 0; x < 64; x++) {
        unsigned masked = x & ~4u; /* low 3 bits 0..3 */
        printf("%u: %d %d\n", x, dispatch(0, masked), dispatch(1, x % 6));
        sum += dispatch(0, masked) + dispatch(1, x % 6);
    }
    printf("sum %ld\n", sum);
    return 0;
}
