/* A shared library for instrumentation tests: lib_work(n) calls lib_leaf() n times. */
#define NOINLINE __attribute__((noinline))
volatile long lib_sink;
NOINLINE void lib_leaf(void) { lib_sink++; }
NOINLINE long lib_work(long n) {
    for (long i = 0; i < n; i++) lib_leaf();
    return lib_sink;
}
