/* setjmp_signals.c -- covers: setjmp/longjmp (error escape from deep recursion,
 * a longjmp-based generator loop, volatile locals across longjmp),
 * sigsetjmp/siglongjmp out of a signal handler, and signal handlers installed
 * with sigaction and signal(), triggered synchronously with raise(SIGUSR1/2)
 * and kill(getpid(), ...) while the signal is blocked then unblocked
 * (sigprocmask). Everything is synchronous, hence deterministic; checksum. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static uint64_t ck = 1469598103934665603ULL;
static void mix(uint64_t v) { ck ^= v; ck *= 1099511628211ULL; ck ^= ck >> 29; }

static jmp_buf escape;

__attribute__((noinline)) static int descend(int depth, int fail_at)
{
    if (depth == fail_at) longjmp(escape, depth + 1);
    if (depth == 0) return 1;
    return descend(depth - 1, fail_at) + 1;
}

static volatile sig_atomic_t usr1_count;
static volatile sig_atomic_t usr1_last_sig;
static void on_usr1(int sig, siginfo_t *info, void *uctx)
{
    (void)uctx;
    usr1_count++;
    usr1_last_sig = sig + (info->si_code == SI_TKILL || info->si_code == SI_USER ? 1000 : 0);
}

static sigjmp_buf from_handler;
static volatile sig_atomic_t usr2_count;
static void on_usr2(int sig)
{
    (void)sig;
    usr2_count++;
    siglongjmp(from_handler, 7);
}

int main(void)
{
    /* 1. longjmp escapes from recursion at several depths. */
    volatile uint64_t acc = 0; /* volatile: live across setjmp */
    for (volatile int fail_at = -1; fail_at < 50; fail_at += 5) {
        volatile int attempts = 0;
        int r = setjmp(escape);
        attempts++;
        if (r == 0) {
            int d = descend(40, fail_at);
            printf("descend(fail_at=%d) returned %d\n", fail_at, d);
            acc = acc * 7 + (uint64_t)d;
        } else {
            printf("descend(fail_at=%d) escaped with %d after %d attempts\n", fail_at, r, attempts);
            acc = acc * 11 + (uint64_t)r * 100 + (uint64_t)attempts;
        }
    }
    mix(acc);

    /* 2. A loop driven by longjmp: the counter lives in a volatile. */
    volatile uint32_t loops = 0;
    jmp_buf again;
    if (setjmp(again) < 100) {
        loops++;
        if (loops < 100) longjmp(again, (int)loops);
    }
    printf("longjmp loop: %u\n", loops);
    mix(loops);

    /* 3. sigaction handler, raise and kill. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_usr1;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGUSR1, &sa, NULL) != 0) return 2;
    for (int i = 0; i < 10; i++) raise(SIGUSR1);
    kill(getpid(), SIGUSR1);
    printf("usr1: count %d last %d\n", (int)usr1_count, (int)usr1_last_sig);
    mix((uint64_t)usr1_count); mix((uint64_t)usr1_last_sig);

    /* 4. Blocked signal stays pending until unblocked (only delivered once). */
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigprocmask(SIG_BLOCK, &set, &old);
    raise(SIGUSR1);
    raise(SIGUSR1);
    int before = usr1_count;
    sigprocmask(SIG_SETMASK, &old, NULL);
    printf("pending: before %d after %d\n", before, (int)usr1_count);
    mix((uint64_t)before); mix((uint64_t)usr1_count);

    /* 5. siglongjmp out of a handler; the mask is restored by sigsetjmp(.., 1). */
    signal(SIGUSR2, on_usr2);
    volatile int jumps = 0;
    int r = sigsetjmp(from_handler, 1);
    if (r == 0 || jumps < 5) {
        if (r) jumps++;
        raise(SIGUSR2);
        printf("not reached\n");
    }
    printf("siglongjmp: jumps %d usr2 %d r %d\n", jumps, (int)usr2_count, r);
    mix((uint64_t)jumps); mix((uint64_t)usr2_count); mix((uint64_t)r);

    printf("checksum: %016llx\n", (unsigned long long)ck);
    return 0;
}
