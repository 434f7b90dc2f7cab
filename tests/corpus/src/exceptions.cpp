// exceptions.cpp -- covers: C++ exceptions: throw, rethrow (`throw;`), nested try
// blocks, destructors run during unwinding (RAII objects that log to a trace),
// noexcept functions (that catch internally), catch by base class of a derived
// exception type, catch(...), exceptions crossing several call frames (including
// frames with no handler but with cleanups), std::exception_ptr rethrow, and a
// throw from a constructor of a member (partially constructed object cleanup).
// Landing pads tend to end up in .cold parts at -O2 with gcc. Deterministic.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <stdexcept>

static uint64_t ck = 1469598103934665603ULL;
static void mix(uint64_t v) { ck ^= v; ck *= 1099511628211ULL; ck ^= ck >> 29; }

static char trace[4096];
static size_t trace_len;
static void note(const char *s)
{
    size_t n = strlen(s);
    if (trace_len + n + 1 < sizeof trace) {
        memcpy(trace + trace_len, s, n);
        trace_len += n;
        trace[trace_len++] = ' ';
        trace[trace_len] = 0;
    }
    for (size_t i = 0; i < n; i++) mix((unsigned char)s[i]);
}

struct Guard {
    const char *name;
    explicit Guard(const char *n) : name(n) { }
    ~Guard() { note(name); }
};

struct BaseError : std::exception {
    int code;
    explicit BaseError(int c) : code(c) { }
    const char *what() const noexcept override { return "BaseError"; }
};
struct ParseError : BaseError {
    int line;
    ParseError(int c, int l) : BaseError(c), line(l) { }
    const char *what() const noexcept override { return "ParseError"; }
};
struct IoError : BaseError {
    explicit IoError(int c) : BaseError(c) { }
    const char *what() const noexcept override { return "IoError"; }
};

__attribute__((noinline)) static int leaf(int depth, int kind)
{
    Guard g("leaf");
    if (kind == 1) throw ParseError(depth, depth * 10);
    if (kind == 2) throw IoError(depth + 100);
    if (kind == 3) throw std::runtime_error("runtime");
    if (kind == 4) throw 42;
    return depth * 3;
}

// Several frames with cleanups but no handlers.
__attribute__((noinline)) static int middle(int depth, int kind)
{
    Guard g(depth % 2 ? "mid-odd" : "mid-even");
    if (depth == 0) return leaf(depth, kind) + 1;
    return middle(depth - 1, kind) + 1;
}

// Catches, logs, rethrows the same object with `throw;`.
__attribute__((noinline)) static int rethrower(int kind)
{
    Guard g("rethrower");
    try {
        return middle(3, kind);
    } catch (const BaseError &e) {
        note("rethrow");
        mix((uint64_t)e.code);
        throw;
    }
}

// noexcept function that handles everything inside.
static int safe_call(int kind) noexcept
{
    try {
        return rethrower(kind);
    } catch (const ParseError &e) {
        note("parse");
        return 1000 + e.line;
    } catch (const BaseError &e) { // catch by base class
        note(e.what());
        return 2000 + e.code;
    } catch (const std::exception &e) {
        note(e.what());
        return 3000;
    } catch (...) {
        note("ellipsis");
        return 4000;
    }
}

// Nested try blocks: inner handler throws a new exception, outer catches it.
__attribute__((noinline)) static int nested(int n)
{
    int r = 0;
    try {
        Guard g1("outer-guard");
        try {
            Guard g2("inner-guard");
            if (n & 1) throw IoError(n);
            r += 1;
        } catch (const IoError &e) {
            note("inner-catch");
            r += e.code;
            if (n & 2) throw ParseError(e.code, n); // new exception from a handler
        }
        try {
            if (n & 4) throw std::logic_error("logic");
        } catch (const std::logic_error &) {
            note("logic");
            r += 50;
        }
    } catch (const ParseError &e) {
        note("outer-catch");
        r += e.line * 7;
    }
    return r;
}

struct Member {
    explicit Member(int v) { if (v < 0) throw std::invalid_argument("neg"); note("member"); }
    ~Member() { note("~member"); }
};
struct Holder {
    Guard a;
    Member b;
    Member c;
    Holder(int x, int y) : a("holder-a"), b(x), c(y) { }
};

static int construct(int x, int y)
{
    try {
        Holder h(x, y);
        return 1;
    } catch (const std::invalid_argument &) {
        note("ctor-failed");
        return 0;
    }
}

static std::exception_ptr saved;
static void capture()
{
    try {
        throw ParseError(7, 77);
    } catch (...) {
        saved = std::current_exception();
    }
}

int main()
{
    int total = 0;
    for (int kind = 0; kind <= 4; kind++) {
        int r = safe_call(kind);
        std::printf("safe_call(%d) = %d\n", kind, r);
        total += r;
    }
    for (int n = 0; n < 8; n++) {
        int r = nested(n);
        std::printf("nested(%d) = %d\n", n, r);
        total += r;
    }
    int c = construct(1, 2) * 10 + construct(1, -1) * 100 + construct(-1, 1) * 1000;
    std::printf("construct = %d\n", c);
    total += c;

    capture();
    try {
        std::rethrow_exception(saved);
    } catch (const BaseError &e) {
        std::printf("exception_ptr: %s %d\n", e.what(), e.code);
        total += e.code;
    }
    saved = nullptr;

    // Many throws in a loop (unwinder performance path).
    int caught = 0;
    for (int i = 0; i < 2000; i++) {
        try {
            if (leaf(i, 1 + i % 4) == -1) caught--;
        } catch (const BaseError &e) {
            caught += e.code & 3;
        } catch (...) {
            caught += 5;
        }
    }
    std::printf("loop caught = %d\n", caught);
    total += caught;

    std::printf("trace length = %zu\n", trace_len);
    std::printf("trace head = %.120s\n", trace);
    mix((uint64_t)total);
    std::printf("total = %d\n", total);
    std::printf("checksum: %016llx\n", (unsigned long long)ck);
    return 0;
}
