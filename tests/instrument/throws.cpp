// Exceptions with known counts: run(N) calls thrower(i) for i < N; thrower throws when
// i % 3 == 0 (caught in run, which calls on_catch), else returns and run calls after().
#include <cstdio>
#include <cstdlib>

#define NOINLINE __attribute__((noinline))
volatile long sink;

NOINLINE void tick() { sink++; }
NOINLINE void after() { sink += 2; }
NOINLINE void on_catch() { sink += 3; }
NOINLINE void thrower(int i) {
    if (i % 3 == 0) throw i;
    tick();
}
NOINLINE void run(int n) {
    for (int i = 0; i < n; i++) {
        try {
            thrower(i);
            after();
        } catch (int) {
            on_catch();
        }
    }
}

int main(int argc, char **argv) {
    run(argc > 1 ? atoi(argv[1]) : 10);
    std::printf("sink %ld\n", (long)sink);
    return 0;
}
