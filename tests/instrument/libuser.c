/* Uses lib.c: main calls lib_work(N) K times and user_leaf() K times. */
#include <stdio.h>
#include <stdlib.h>
#define NOINLINE __attribute__((noinline))
long lib_work(long n);
volatile long user_sink;
NOINLINE void user_leaf(void) { user_sink++; }
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 10, k = argc > 2 ? atol(argv[2]) : 3, r = 0;
    for (long i = 0; i < k; i++) {
        r = lib_work(n);
        user_leaf();
    }
    printf("%ld %ld\n", r, (long)user_sink);
    return 0;
}
