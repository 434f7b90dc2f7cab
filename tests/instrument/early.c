/* Code that runs before the instrumentation runtime: an IFUNC resolver, which the dynamic
 * loader calls while it relocates the program, before its entry point (where the runtime
 * starts). Its counts exist before the profile file is mapped (see
 * crates/cli/tests/instrument_hardening.rs).
 *   early N     calls the resolved function N times and prints the sum */
#include <stdio.h>
#include <stdlib.h>

#define NOINLINE __attribute__((noinline))
volatile long sink;

NOINLINE static long add_one(long x) { return x + 1; }
NOINLINE static long add_two(long x) { return x + 2; }

/* Chooses by a byte of its own code's address, so the compiler cannot fold the choice. */
NOINLINE static long (*resolve_step(void))(long) {
    if (((unsigned long)&add_two & 1) == 0)
        return add_one;
    return add_two;
}

long step(long) __attribute__((ifunc("resolve_step")));

int main(int argc, char **argv) {
    long n = argc > 2 ? atol(argv[2]) : 10, total = 0;
    for (long i = 0; i < n; i++)
        total = step(total);
    printf("total %ld\n", total);
    return 0;
}
