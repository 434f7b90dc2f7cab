// virtual_calls.cpp -- covers: virtual calls through a class hierarchy (abstract
// base, overrides at two levels, a final class, virtual destructor), multiple
// inheritance (this-adjusting thunks in the vtables), calls through pointers to
// member functions (virtual and non-virtual), std::sort with a comparator
// object (a total order), and devirtualisation-resistant dispatch (objects chosen at run time).
// Deterministic; ends with a checksum line.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <vector>

static uint64_t ck = 1469598103934665603ULL;
static void mix(uint64_t v) { ck ^= v; ck *= 1099511628211ULL; ck ^= ck >> 29; }

static int destroyed;

struct Shape {
    int id = 0; // creation order: last tie-breaker, so sorting is a total order
    virtual ~Shape() { destroyed++; }
    virtual int64_t area() const = 0;
    virtual int64_t perimeter() const = 0;
    virtual const char *name() const { return "shape"; }
    int64_t score() const { return area() * 3 + perimeter(); } // calls virtuals
};

struct Rect : Shape {
    int64_t w, h;
    Rect(int64_t w_, int64_t h_) : w(w_), h(h_) { }
    int64_t area() const override { return w * h; }
    int64_t perimeter() const override { return 2 * (w + h); }
    const char *name() const override { return "rect"; }
};

struct Square final : Rect {
    explicit Square(int64_t s) : Rect(s, s) { }
    const char *name() const override { return "square"; }
};

struct Tri : Shape {
    int64_t a, b, c;
    Tri(int64_t a_, int64_t b_, int64_t c_) : a(a_), b(b_), c(c_) { }
    int64_t area() const override { return (a * b) / 2; } // right triangle legs a, b
    int64_t perimeter() const override { return a + b + c; }
    const char *name() const override { return "tri"; }
};

// Multiple inheritance: Printable's vtable in Labelled needs a this-adjusting thunk.
struct Printable {
    virtual ~Printable() { }
    virtual uint64_t fingerprint() const = 0;
};
struct Labelled : Rect, Printable {
    uint64_t tag;
    Labelled(int64_t w_, int64_t h_, uint64_t t) : Rect(w_, h_), tag(t) { }
    uint64_t fingerprint() const override { return tag * 31 + (uint64_t)area(); }
    const char *name() const override { return "labelled"; }
};

static std::unique_ptr<Shape> make(uint32_t r)
{
    switch (r % 4) {
    case 0: return std::unique_ptr<Shape>(new Rect(r % 17 + 1, r % 13 + 1));
    case 1: return std::unique_ptr<Shape>(new Square(r % 11 + 1));
    case 2: return std::unique_ptr<Shape>(new Tri(3 * (r % 5 + 1), 4 * (r % 5 + 1), 5 * (r % 5 + 1)));
    default: return std::unique_ptr<Shape>(new Labelled(r % 7 + 2, r % 9 + 2, r));
    }
}

struct ByScoreThenName {
    bool operator()(const std::unique_ptr<Shape> &x, const std::unique_ptr<Shape> &y) const
    {
        if (x->score() != y->score()) return x->score() < y->score();
        if (x->perimeter() != y->perimeter()) return x->perimeter() < y->perimeter();
        return x->id < y->id;
    }
};

struct Counter {
    int64_t n = 0;
    void add(int64_t v) { n += v; }
    void sub(int64_t v) { n -= v; }
    virtual void twice(int64_t v) { n += 2 * v; }
    virtual ~Counter() { }
};
struct LoudCounter : Counter {
    void twice(int64_t v) override { n += 3 * v; }
};

int main()
{
    std::vector<std::unique_ptr<Shape>> shapes;
    uint32_t seed = 99;
    for (int i = 0; i < 400; i++) {
        seed = seed * 1664525u + 1013904223u;
        shapes.push_back(make(seed >> 10));
        shapes.back()->id = i;
    }
    int64_t total_area = 0, total_perim = 0;
    for (int round = 0; round < 50; round++)
        for (auto &s : shapes) {
            total_area += s->area();
            total_perim += s->perimeter();
        }
    std::printf("area %lld perimeter %lld\n", (long long)total_area, (long long)total_perim);
    mix((uint64_t)total_area); mix((uint64_t)total_perim);

    std::sort(shapes.begin(), shapes.end(), ByScoreThenName());
    std::printf("min %s %lld, max %s %lld\n", shapes.front()->name(),
                (long long)shapes.front()->score(), shapes.back()->name(),
                (long long)shapes.back()->score());
    for (auto &s : shapes) mix((uint64_t)s->score());

    uint64_t fp = 0;
    int nlab = 0;
    for (auto &s : shapes)
        if (auto *l = dynamic_cast<Labelled *>(s.get())) {
            const Printable *p = l; // adjusts this
            fp = fp * 1000003u + p->fingerprint();
            nlab++;
        }
    std::printf("labelled %d fingerprint %016llx\n", nlab, (unsigned long long)fp);
    mix(fp);

    void (Counter::*ops[])(int64_t) = { &Counter::add, &Counter::sub, &Counter::twice };
    Counter plain;
    LoudCounter loud;
    Counter *cs[2] = { &plain, &loud };
    for (int i = 0; i < 3000; i++)
        (cs[i & 1]->*ops[i % 3])(i);
    std::printf("counters %lld %lld\n", (long long)plain.n, (long long)loud.n);
    mix((uint64_t)plain.n); mix((uint64_t)loud.n);

    shapes.clear();
    std::printf("destroyed %d\n", destroyed);
    mix((uint64_t)destroyed);
    std::printf("checksum: %016llx\n", (unsigned long long)ck);
    return 0;
}
