/* Uses libhot.c: prints lib_hot(N); with a second argument "smaps", reports the mapping that
 * holds lib_hot (smaps.h). Exits with a code derived from the result. */
#include <stdlib.h>
#include <string.h>
#include "smaps.h"

unsigned long lib_hot(long n);

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000;
    unsigned long h = lib_hot(n);
    printf("user %lu\n", h);
    if (argc > 2 && strcmp(argv[2], "smaps") == 0) report((unsigned long)(void *)lib_hot);
    return (int)(h % 5);
}
