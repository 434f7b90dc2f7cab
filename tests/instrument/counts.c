/* Known dynamic behaviour for instrumentation tests: every mode runs a pattern whose edge and
 * entry counts are known from its arguments (see crates/cli/tests/instrument_counts.rs).
 *   loop N          tick() N times
 *   switch N        dispatch(i % 11) for i < N: cases 0..7 call case_k(), 8..10 the default
 *   recurse D       rec(D): D + 1 entries, tick() once at the bottom
 *   threads T M     T threads, each tick() M times
 *   fork A B        tick() A times, fork; the child tick()s B times; the parent waits
 *   block N         tick() N times, say "ready", then wait to be killed
 *   fptr N          calls through a table of nine functions, target i % 9 for i < N
 *   step N M        tick() N times, say "ready", read a line from stdin, tick() M times
 *   step-dfl N M    the same after setting SIGBUS to its default action itself
 *   bus             a SIGBUS of its own: touches a mapped file it truncated
 *   raise           raise(SIGBUS) */
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))
volatile long sink;

NOINLINE void tick(void) { __atomic_fetch_add(&sink, 1, __ATOMIC_RELAXED); }
NOINLINE void case0(void) { sink += 1; }
NOINLINE void case1(void) { sink += 2; }
NOINLINE void case2(void) { sink += 3; }
NOINLINE void case3(void) { sink += 4; }
NOINLINE void case4(void) { sink += 5; }
NOINLINE void case5(void) { sink += 6; }
NOINLINE void case6(void) { sink += 7; }
NOINLINE void case7(void) { sink += 8; }
NOINLINE void fallback(void) { sink -= 1; }

NOINLINE void dispatch(int k) {
    switch (k) {
    case 0: case0(); break;
    case 1: case1(); break;
    case 2: case2(); break;
    case 3: case3(); break;
    case 4: case4(); break;
    case 5: case5(); break;
    case 6: case6(); break;
    case 7: case7(); break;
    default: fallback(); break;
    }
}

NOINLINE long rec(long d) {
    if (d == 0) {
        tick();
        return 0;
    }
    long r = rec(d - 1);
    sink += r; /* keeps the call from becoming a loop */
    return r + 1;
}

#define TARGET(k) NOINLINE void target##k(void) { sink += k; }
TARGET(0) TARGET(1) TARGET(2) TARGET(3) TARGET(4) TARGET(5) TARGET(6) TARGET(7) TARGET(8)
void (*volatile targets[9])(void) = {target0, target1, target2, target3, target4,
                                     target5, target6, target7, target8};
NOINLINE void call_through(long i) { targets[i % 9](); }

static long per_thread;
NOINLINE void *worker(void *arg) {
    (void)arg;
    for (long i = 0; i < per_thread; i++) tick();
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s loop|switch|recurse|threads|fork|block|step|step-dfl N [M], bus x, raise x\n", argv[0]);
        return 2;
    }
    const char *mode = argv[1];
    long n = atol(argv[2]);
    long m = argc > 3 ? atol(argv[3]) : 0;
    if (!strcmp(mode, "loop")) {
        for (long i = 0; i < n; i++) tick();
    } else if (!strcmp(mode, "switch")) {
        for (long i = 0; i < n; i++) dispatch((int)(i % 11));
    } else if (!strcmp(mode, "recurse")) {
        printf("%ld\n", rec(n));
    } else if (!strcmp(mode, "threads")) {
        per_thread = m;
        pthread_t t[64];
        if (n > 64) n = 64;
        for (long i = 0; i < n; i++) pthread_create(&t[i], NULL, worker, NULL);
        for (long i = 0; i < n; i++) pthread_join(t[i], NULL);
    } else if (!strcmp(mode, "fork")) {
        for (long i = 0; i < n; i++) tick();
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            for (long i = 0; i < m; i++) tick();
            _exit(0);
        }
        int status;
        waitpid(pid, &status, 0);
    } else if (!strcmp(mode, "fptr")) {
        for (long i = 0; i < n; i++) call_through(i);
    } else if (!strcmp(mode, "step") || !strcmp(mode, "step-dfl")) {
        if (!strcmp(mode, "step-dfl")) signal(SIGBUS, SIG_DFL);
        for (long i = 0; i < n; i++) tick();
        printf("ready\n");
        fflush(stdout);
        char line[64];
        if (!fgets(line, sizeof line, stdin)) return 3;
        for (long i = 0; i < m; i++) tick();
    } else if (!strcmp(mode, "bus")) {
        FILE *f = tmpfile();
        if (!f || ftruncate(fileno(f), 4096)) return 4;
        volatile char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fileno(f), 0);
        if (p == MAP_FAILED || ftruncate(fileno(f), 0)) return 5;
        p[0] = 1;
    } else if (!strcmp(mode, "raise")) {
        raise(SIGBUS);
    } else if (!strcmp(mode, "block")) {
        for (long i = 0; i < n; i++) tick();
        printf("ready\n");
        fflush(stdout);
        for (;;) pause();
    } else {
        return 2;
    }
    printf("sink %ld\n", (long)sink);
    return 0;
}
