// libcalls.c: hot loops that call libc through the PLT (calls and tail calls), for
// `rivet optimize --plt`. Usage: libcalls N  (prints a checksum of what the calls returned)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int compare(const void *a, const void *b) {
    return *(const int *)a - *(const int *)b;
}

// Ends in a tail call into the PLT (`jmp strlen@plt`).
__attribute__((noinline)) size_t length_of(const char *s) { return strlen(s); }

// A call into the PLT on one path, a tail call on the other.
__attribute__((noinline)) void *resize(void *p, size_t n) {
    if (n == 0) {
        free(p);
        return NULL;
    }
    return realloc(p, n);
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000;
    unsigned long sum = 0;
    char text[64];
    void *slots[16] = {0};
    int numbers[32];
    for (long i = 0; i < n; i++) {
        snprintf(text, sizeof text, "item %ld", i);
        sum += length_of(text);
        for (int k = 0; k < 32; k++) numbers[k] = (int)((i * 7919 + k * 104729) % 1000);
        qsort(numbers, 32, sizeof numbers[0], compare);
        sum += (unsigned long)numbers[0] + (unsigned long)numbers[31];
        int s = (int)(i % 16);
        slots[s] = resize(slots[s], (i % 3 == 0) ? 0 : (size_t)(16 + i % 200));
        if (slots[s]) memset(slots[s], 1, 16);
        sum += slots[s] != NULL;
    }
    for (int s = 0; s < 16; s++) free(slots[s]);
    printf("%lu\n", sum);
    return 0;
}
