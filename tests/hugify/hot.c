/* A program for --hugify tests: work() and mix() are hot, cold_path() never runs. Prints a
 * deterministic result on stdout and exits with a code derived from it (the differential
 * tests compare both). With a second argument "smaps", it also reports on stderr the mapping
 * that holds work() at that moment (smaps.h). */
#include <stdlib.h>
#include <string.h>
#include "smaps.h"
#define NOINLINE __attribute__((noinline))

volatile unsigned long sink;

NOINLINE unsigned long mix(unsigned long x) {
    return x * 6364136223846793005UL + 1442695040888963407UL;
}

NOINLINE unsigned long work(long n) {
    unsigned long h = 0;
    for (long i = 0; i < n; i++) {
        h = mix(h ^ (unsigned long)i);
        if (h % 3 == 0) sink++;
    }
    return h;
}

NOINLINE void cold_path(void) { puts("never printed"); }

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000;
    unsigned long h = work(n);
    if (n < 0) cold_path();
    printf("%lu %lu\n", h, (unsigned long)sink);
    if (argc > 2 && strcmp(argv[2], "smaps") == 0) report((unsigned long)(void *)work);
    return (int)(h % 7);
}
