// ctors_dtors.cpp -- covers: __attribute__((constructor(N))) / destructor(N)
// functions (.init_array / .fini_array, with priorities), C++ global objects with
// dynamic initialisation and destructors (_GLOBAL__sub_I_*, __cxa_atexit),
// init_priority, a function-local static (guard variable), thread_local objects
// with dynamic initialisation and destructors (TLS init wrappers,
// __cxa_thread_atexit) in the main thread and in a pthread, and atexit().
// The checksum line is printed LAST, by the lowest-priority destructor, after
// every other destructor has run, so it covers the whole teardown order:
//   main returns -> thread_local dtors -> atexit / C++ global dtors (reverse
//   order) -> .fini_array: destructor(65535 default) -> (300) -> (101) prints.
// All ordering used is specified (explicit priorities), so gcc and clang agree.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <pthread.h>

static uint64_t ck = 1469598103934665603ULL;
static void mix(uint64_t v) { ck ^= v; ck *= 1099511628211ULL; ck ^= ck >> 29; }

// Plain storage, zero-initialised before any constructor runs.
static char trace[2048];
static size_t trace_len;
static int default_ctor_runs;
static void note(const char *s)
{
    size_t n = strlen(s);
    if (trace_len + n + 2 < sizeof trace) {
        memcpy(trace + trace_len, s, n);
        trace_len += n;
        trace[trace_len++] = ',';
        trace[trace_len] = 0;
    }
    for (size_t i = 0; i < n; i++) mix((unsigned char)s[i]);
    mix(',');
}

__attribute__((constructor(101))) static void ctor_101() { note("ctor101"); }
__attribute__((constructor(200))) static void ctor_200() { note("ctor200"); }
// Default priority: its order relative to the C++ globals is unspecified, so it
// only bumps a counter (commutative) instead of writing to the trace.
__attribute__((constructor)) static void ctor_default() { default_ctor_runs++; }

struct Logged {
    char name[24];
    uint64_t value;
    explicit Logged(const char *n, uint64_t v) : value(v)
    {
        std::snprintf(name, sizeof name, "%s", n);
        char buf[40];
        std::snprintf(buf, sizeof buf, "+%s", name);
        note(buf);
    }
    ~Logged()
    {
        char buf[40];
        std::snprintf(buf, sizeof buf, "-%s", name);
        note(buf);
    }
};

static uint64_t compute_seed()
{
    uint64_t s = 0;
    for (int i = 1; i <= 100; i++) s = s * 6364136223846793005ULL + (uint64_t)i;
    return s;
}

Logged early __attribute__((init_priority(300))) ("early", 1);
Logged g1("g1", compute_seed()); // dynamic initialiser calls a function
Logged g2("g2", g1.value ^ 0xffff);
static Logged g3("g3", 3);

static Logged &lazy()
{
    static Logged instance("lazy", 99); // guard variable, constructed on first use
    return instance;
}

static thread_local Logged tl_main("tl", 5);
static int tl_constructions;
struct PerThread {
    int id;
    PerThread() : id(++tl_constructions) { }
    ~PerThread() { note(id == 1 ? "~pt-main" : "~pt-thread"); }
};
static thread_local PerThread per_thread;

static void *thread_body(void *)
{
    // First use in this thread constructs the thread's own copy; its
    // destructor runs when the thread exits, before pthread_join returns.
    return reinterpret_cast<void *>(static_cast<intptr_t>(per_thread.id));
}

static size_t teardown_mark; // where main's part of the trace ends

static void at_exit_handler() { note("atexit"); }

__attribute__((destructor)) static void dtor_default() { note("dtor-default"); }
__attribute__((destructor(300))) static void dtor_300() { note("dtor300"); }
__attribute__((destructor(101))) static void dtor_101()
{
    note("dtor101");
    std::printf("teardown: %s\n", trace + teardown_mark);
    std::printf("checksum: %016llx\n", (unsigned long long)ck);
}

int main()
{
    std::printf("startup: %s\n", trace);
    std::printf("default ctor runs: %d\n", default_ctor_runs);
    mix((uint64_t)default_ctor_runs);
    std::printf("g1 %016llx g2 %016llx\n", (unsigned long long)g1.value, (unsigned long long)g2.value);
    mix(g1.value); mix(g2.value);

    uint64_t l = lazy().value + lazy().value;
    std::printf("lazy %llu\n", (unsigned long long)l);
    mix(l);
    std::printf("tl %llu main per_thread id %d\n", (unsigned long long)tl_main.value, per_thread.id);

    pthread_t t;
    void *ret = nullptr;
    if (pthread_create(&t, nullptr, thread_body, nullptr) != 0) return 1;
    pthread_join(t, &ret);
    std::printf("thread per_thread id %d\n", static_cast<int>(reinterpret_cast<intptr_t>(ret)));
    mix(static_cast<uint64_t>(reinterpret_cast<intptr_t>(ret)));

    std::atexit(at_exit_handler);
    std::printf("main done: %s\n", trace);
    teardown_mark = trace_len;
    return 0;
}
