/* A program with a SIGBUS handler of its own, set before it loads an instrumented library
 * (whose runtime then installs its handler over this one and passes on the faults it did not
 * cause). What the handler observes must be what it observes with the original library
 * (see crates/cli/tests/instrument_hardening.rs).
 *   busowner LIBRARY keep   handler with SA_ONSTACK on an alternate stack, SIGUSR1 in its
 *                           mask: two faults, each reported
 *   busowner LIBRARY once   a one-shot handler (SA_RESETHAND | SA_NODEFER): the first fault
 *                           is reported, the second ends the program by SIGBUS
 * Each fault is a real one: a store to a mapped file this program truncated. */
#include <dlfcn.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static sigjmp_buf back;
static char alt_stack[1 << 16];
static volatile sig_atomic_t on_alt, usr1_blocked, bus_blocked, code, reset;

static void on_bus(int sig, siginfo_t *info, void *ctx) {
    (void)sig;
    (void)ctx;
    char here;
    on_alt = (uintptr_t)&here >= (uintptr_t)alt_stack &&
             (uintptr_t)&here < (uintptr_t)alt_stack + sizeof alt_stack;
    sigset_t now;
    sigprocmask(SIG_BLOCK, NULL, &now);
    usr1_blocked = sigismember(&now, SIGUSR1);
    bus_blocked = sigismember(&now, SIGBUS);
    code = info->si_code;
    struct sigaction current;
    sigaction(SIGBUS, NULL, &current);
    reset = current.sa_handler == SIG_DFL;
    siglongjmp(back, 1);
}

static void fault(void) {
    FILE *f = tmpfile();
    if (!f || ftruncate(fileno(f), 4096)) exit(4);
    volatile char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fileno(f), 0);
    if (p == MAP_FAILED || ftruncate(fileno(f), 0)) exit(5);
    p[0] = 1;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s LIBRARY keep|once\n", argv[0]);
        return 2;
    }
    int once = !strcmp(argv[2], "once");
    stack_t ss = {.ss_sp = alt_stack, .ss_size = sizeof alt_stack};
    if (sigaltstack(&ss, NULL)) return 6;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_bus;
    sa.sa_flags = SA_SIGINFO | (once ? SA_RESETHAND | SA_NODEFER : SA_ONSTACK);
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGUSR1);
    if (sigaction(SIGBUS, &sa, NULL)) return 7;

    void *lib = dlopen(argv[1], RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "%s\n", dlerror());
        return 8;
    }
    long (*work)(long) = (long (*)(long))dlsym(lib, "lib_work");
    if (!work) return 9;
    printf("work %ld\n", work(5));
    for (int i = 1; i <= 2; i++) {
        if (sigsetjmp(back, 1) == 0) {
            fault();
            printf("fault %d not delivered\n", i);
        } else {
            printf("fault %d: alternate stack %d, SIGUSR1 blocked %d, SIGBUS blocked %d, "
                   "si_code %d, reset to default %d\n",
                   i, (int)on_alt, (int)usr1_blocked, (int)bus_blocked, (int)code, (int)reset);
        }
        fflush(stdout);
    }
    printf("work %ld\n", work(5));
    return 0;
}
