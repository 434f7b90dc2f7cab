/* tls_threads.c -- covers: thread-local storage (`__thread` with an initialiser
 * (.tdata), zero-initialised `__thread` (.tbss), a C11 `_Thread_local` array, an
 * exported TLS variable, and taking the address of a TLS variable), pthreads
 * (pthread_create / pthread_join in a fixed order, a mutex-protected shared sum,
 * pthread_once). Each thread writes its result to its own slot; the checksum only
 * combines slots in index order and commutative sums, so it does not depend on
 * scheduling. Deterministic; ends with a checksum line. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

static uint64_t ck = 1469598103934665603ULL;
static void mix(uint64_t v) { ck ^= v; ck *= 1099511628211ULL; ck ^= ck >> 29; }

static __thread uint64_t tls_counter = 1000;   /* .tdata */
static __thread uint32_t tls_zero;             /* .tbss */
static _Thread_local uint32_t tls_hist[16];    /* .tbss array */
__thread int tls_exported = 7;                 /* global TLS symbol */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t shared_sum;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int once_runs;
static void init_once(void) { once_runs++; }

__attribute__((noinline)) static void bump(uint32_t v)
{
    tls_counter += v;
    tls_zero ^= v * 2654435761u;
    tls_hist[v & 15]++;
}

__attribute__((noinline)) static uint32_t *tls_zero_addr(void) { return &tls_zero; }

struct job { int id; uint64_t result; uint32_t hist_hash; };

static void *worker(void *arg)
{
    struct job *j = arg;
    pthread_once(&once, init_once);
    uint32_t s = (uint32_t)j->id * 7919u + 1;
    for (int i = 0; i < 100000; i++) {
        s ^= s << 13; s ^= s >> 17; s ^= s << 5;
        bump(s >> 20);
    }
    tls_exported += j->id;
    *tls_zero_addr() += 1;
    uint32_t hh = 0;
    for (int i = 0; i < 16; i++) hh = hh * 31 + tls_hist[i];
    j->result = tls_counter ^ ((uint64_t)tls_zero << 32) ^ (uint64_t)tls_exported;
    j->hist_hash = hh;
    pthread_mutex_lock(&lock);
    shared_sum += tls_counter;
    pthread_mutex_unlock(&lock);
    return NULL;
}

int main(void)
{
    enum { NT = 4 };
    pthread_t th[NT];
    struct job jobs[NT];
    bump(5); /* main thread's own copy */
    for (int i = 0; i < NT; i++) {
        jobs[i].id = i + 1;
        if (pthread_create(&th[i], NULL, worker, &jobs[i]) != 0) {
            printf("pthread_create failed\n");
            return 1;
        }
    }
    for (int i = 0; i < NT; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < NT; i++) {
        printf("thread %d: %016llx %08x\n", jobs[i].id,
               (unsigned long long)jobs[i].result, jobs[i].hist_hash);
        mix(jobs[i].result);
        mix(jobs[i].hist_hash);
    }
    /* main's TLS must be untouched by the workers */
    printf("main tls: %llu %08x %d hist5=%u\n", (unsigned long long)tls_counter, tls_zero,
           tls_exported, tls_hist[5]);
    mix(tls_counter); mix(tls_zero); mix((uint64_t)tls_exported);
    printf("shared sum: %llu once=%d\n", (unsigned long long)shared_sum, once_runs);
    mix(shared_sum); mix((uint64_t)once_runs);
    printf("checksum: %016llx\n", (unsigned long long)ck);
    return 0;
}
