/* A shared library for --hugify tests: lib_hot() is hot. Its destructor prints, so that a
 * caller whose start-up code lost the dynamic linker's finalizer (rdx at _start) shows it. */
#include <stdio.h>
#define NOINLINE __attribute__((noinline))

volatile unsigned long lib_sink;

NOINLINE static unsigned long step(unsigned long x) { return (x ^ (x >> 7)) * 0x9E3779B97F4A7C15UL; }

NOINLINE unsigned long lib_hot(long n) {
    unsigned long h = 1;
    for (long i = 0; i < n; i++) {
        h = step(h + (unsigned long)i);
        if ((h & 15) == 0) lib_sink++;
    }
    return h;
}

__attribute__((destructor)) static void lib_fini(void) { printf("libhot fini %lu\n", (unsigned long)lib_sink); }
