// Source of the C++ fuzz seeds (built by fuzz/make-seeds.sh): exceptions thrown, caught and
// rethrown, with a cleanup, so the seeds carry .gcc_except_table LSDAs, landing pads and a
// personality routine for the mutator to work on.
#include <cstdio>
#include <stdexcept>

struct Guard {
    int *counter;
    ~Guard() { ++*counter; }
};

__attribute__((noinline)) static int may_throw(int x) {
    if (x % 3 == 0)
        throw std::runtime_error("divisible by three");
    if (x % 5 == 0)
        throw x;
    return x * 2;
}

__attribute__((noinline)) static int with_cleanup(int x, int *cleanups) {
    Guard g{cleanups};
    return may_throw(x);
}

int main(int argc, char **) {
    int sum = 0, cleanups = 0;
    for (int i = 1; i < 10 + argc; i++) {
        try {
            try {
                sum += with_cleanup(i, &cleanups);
            } catch (int v) {
                sum -= v;
                throw;
            }
        } catch (const std::exception &e) {
            sum += 100;
        } catch (...) {
            sum += 1;
        }
    }
    std::printf("%d %d\n", sum, cleanups);
    return 0;
}
