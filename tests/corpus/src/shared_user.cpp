// shared_user.cpp -- the user of libcorpus_shared (linked against the matching
// variant of the library, found at run time through -rpath '$ORIGIN'). Covers:
// calls through the PLT, reading exported data (copy relocation when non-PIE),
// a library's TLS variable, exceptions thrown inside the library and caught
// here, an exception thrown by our callback that unwinds through the library's
// frame, virtual calls on objects whose vtables live in the library, and a
// pointer to a library function (canonical PLT entry in non-PIE).
#include <cstdint>
#include <cstdio>
#include <stdexcept>

extern "C" {
extern int cs_version;
extern __thread int cs_tls_calls;
int cs_init_runs();
int cs_classify(int op, int x);
typedef int (*cs_callback)(void *user, int index, int value);
int cs_for_each(const int *values, int n, cs_callback cb, void *user);
}
namespace cs {
int parse_number(const char *s);
struct Accumulator {
    virtual ~Accumulator() { }
    virtual void add(int64_t v) = 0;
    virtual int64_t result() const = 0;
};
Accumulator *make_accumulator(int kind);
} // namespace cs

static uint64_t ck = 1469598103934665603ULL;
static void mix(uint64_t v) { ck ^= v; ck *= 1099511628211ULL; ck ^= ck >> 29; }

struct Stop {
    int at;
};

static int cb_scale(void *user, int index, int value)
{
    int k = *static_cast<int *>(user);
    return value * k + index;
}

static int cb_throw(void *user, int index, int value)
{
    int limit = *static_cast<int *>(user);
    if (value > limit) throw Stop{index};
    return value;
}

int main()
{
    std::printf("version %d init %d\n", cs_version, cs_init_runs());
    mix((uint64_t)cs_version); mix((uint64_t)cs_init_runs());

    int (*classify)(int, int) = cs_classify; // address of a library function
    int64_t acc = 0;
    for (int i = 0; i < 20000; i++) acc += classify(i % 13, i) + cs_classify((i * 7) % 12, i);
    std::printf("classify %lld tls calls %d\n", (long long)acc, cs_tls_calls);
    mix((uint64_t)acc); mix((uint64_t)cs_tls_calls);

    static const char *inputs[] = { "123", "-45", "", "12a", "99999999", "0", "7" };
    int parsed = 0, logic = 0, range = 0;
    for (const char *s : inputs) {
        try {
            parsed += cs::parse_number(s);
        } catch (const std::out_of_range &e) { // more specific first
            range++;
            std::printf("range error: %s\n", e.what());
        } catch (const std::logic_error &e) { // base of invalid_argument
            logic++;
            std::printf("logic error: %s\n", e.what());
        }
    }
    std::printf("parsed %d logic %d range %d\n", parsed, logic, range);
    mix((uint64_t)parsed); mix((uint64_t)logic); mix((uint64_t)range);

    int values[64];
    for (int i = 0; i < 64; i++) values[i] = (i * 37) % 50;
    int k = 3;
    int s1 = cs_for_each(values, 64, cb_scale, &k);
    int limit = 45, stopped = -1;
    try {
        cs_for_each(values, 64, cb_throw, &limit);
    } catch (const Stop &st) { // thrown by our callback, through the library
        stopped = st.at;
    }
    std::printf("for_each %d stopped at %d\n", s1, stopped);
    mix((uint64_t)s1); mix((uint64_t)stopped);

    int64_t results[2];
    for (int kind = 0; kind < 2; kind++) {
        cs::Accumulator *a = cs::make_accumulator(kind);
        for (int i = 0; i < 1000; i++) a->add(i * kind + i);
        results[kind] = a->result();
        delete a;
    }
    try {
        cs::make_accumulator(5);
    } catch (const std::exception &e) {
        std::printf("factory: %s\n", e.what());
    }
    std::printf("accumulators %lld %lld\n", (long long)results[0], (long long)results[1]);
    mix((uint64_t)results[0]); mix((uint64_t)results[1]);

    std::printf("checksum: %016llx\n", (unsigned long long)ck);
    return 0;
}
