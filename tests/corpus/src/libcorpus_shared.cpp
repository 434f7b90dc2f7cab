// libcorpus_shared.cpp -- the shared library of the pair (built -fPIC -shared as
// libcorpus_shared.<cc>.<opt>.<pie>.so; its user is shared_user.cpp). Covers:
// exported functions called through the PLT, a switch jump table in PIC code
// (table of relative offsets), a function that throws a C++ exception out of the
// library, a callback API where the user's callback may throw through the
// library's frames, exported data (a copy relocation in non-PIE users),
// general-dynamic TLS, a virtual class created by a factory (vtable in the .so),
// a library constructor in .init_array, and a function whose address the user
// takes. No header: shared_user.cpp repeats these declarations.
#include <cstdint>
#include <cstdio>
#include <stdexcept>

extern "C" {
int cs_version = 3;              // exported data
__thread int cs_tls_calls;       // exported TLS (general dynamic from the user)
static int init_runs;

__attribute__((constructor)) static void cs_init() { init_runs = 10; }

int cs_init_runs() { return init_runs; }

// Dense switch: jump table in a shared object.
__attribute__((noinline)) int cs_classify(int op, int x)
{
    cs_tls_calls++;
    switch (op) {
    case 0: return x + 1;
    case 1: return x * 2;
    case 2: return x - 3;
    case 3: return x ^ 0x55;
    case 4: return x << 2;
    case 5: return x >> 1;
    case 6: return x % 7;
    case 7: return -x;
    case 8: return x * x;
    case 9: return x | 0x100;
    case 10: return x & 0xff;
    default: return 0;
    }
}

typedef int (*cs_callback)(void *user, int index, int value);

// Calls back into the user for every element; returns the sum of callback
// results. A C++ exception thrown by the callback unwinds through this frame.
int cs_for_each(const int *values, int n, cs_callback cb, void *user)
{
    int sum = 0;
    for (int i = 0; i < n; i++) sum += cb(user, i, values[i]);
    return sum;
}
} // extern "C"

namespace cs {

// Throws std::invalid_argument (caught by the user as std::logic_error).
int parse_number(const char *s)
{
    if (!s || !*s) throw std::invalid_argument("empty input");
    int v = 0;
    bool neg = false;
    if (*s == '-') { neg = true; s++; }
    for (; *s; s++) {
        if (*s < '0' || *s > '9') throw std::invalid_argument("not a digit");
        v = v * 10 + (*s - '0');
        if (v > 1000000) throw std::out_of_range("too large");
    }
    return neg ? -v : v;
}

struct Accumulator {
    virtual ~Accumulator() { }
    virtual void add(int64_t v) = 0;
    virtual int64_t result() const = 0;
};

struct SumAcc : Accumulator {
    int64_t s = 0;
    void add(int64_t v) override { s += v; }
    int64_t result() const override { return s; }
};

struct HashAcc : Accumulator {
    uint64_t h = 1469598103934665603ULL;
    void add(int64_t v) override { h = (h ^ (uint64_t)v) * 1099511628211ULL; }
    int64_t result() const override { return (int64_t)(h >> 1); }
};

Accumulator *make_accumulator(int kind)
{
    if (kind == 0) return new SumAcc;
    if (kind == 1) return new HashAcc;
    throw std::invalid_argument("unknown accumulator kind");
}

} // namespace cs
