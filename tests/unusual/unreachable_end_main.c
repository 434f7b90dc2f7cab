/* The caller of unreachable_end.S's checked: prints 2n for each argument in range. */
#include <stdio.h>
#include <stdlib.h>

long checked(long n);

/* Exits for level 2 and above; below, it returns (nothing here calls it so). */
__attribute__((noinline)) void report(int level, long value) {
    printf("report %d: %ld\n", level, value);
    fflush(stdout);
    if (level >= 2)
        exit(level);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        printf("checked(%s) = %ld\n", argv[i], checked(atol(argv[i])));
    return 0;
}
