/* Drives conflicting_tables.S's two dispatches over 0..5 and prints each result. */
#include <stdio.h>

int dispatch(int kind, unsigned x);

int main(void) {
    for (unsigned x = 0; x < 6; x++)
        printf("%u: %d %d\n", x, dispatch(0, x), dispatch(1, x));
    return 0;
}
