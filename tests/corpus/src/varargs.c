/* varargs.c -- covers: variadic functions (va_start/va_arg/va_end, va_copy,
 * passing a va_list down to another function, vsnprintf / vprintf-style
 * wrappers, mixed int / long / double / pointer arguments, which makes the
 * caller set %al and the callee spill the register save area), a variadic
 * function called through a function pointer, and a sentinel-terminated list.
 * Deterministic (doubles are printed with fixed precision from exact values);
 * ends with a checksum line. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static uint64_t ck = 1469598103934665603ULL;
static void mix(uint64_t v) { ck ^= v; ck *= 1099511628211ULL; ck ^= ck >> 29; }
static void mix_str(const char *s) { while (*s) mix((unsigned char)*s++); }

/* Sum n ints. */
__attribute__((noinline)) static int64_t sum_ints(int n, ...)
{
    va_list ap;
    va_start(ap, n);
    int64_t s = 0;
    for (int i = 0; i < n; i++) s += va_arg(ap, int);
    va_end(ap);
    return s;
}

/* Sentinel-terminated list of strings; walks it twice using va_copy. */
__attribute__((noinline, sentinel)) static size_t join(char *out, size_t cap, ...)
{
    va_list ap, ap2;
    va_start(ap, cap);
    va_copy(ap2, ap);
    size_t total = 0;
    for (const char *s = va_arg(ap, const char *); s; s = va_arg(ap, const char *))
        total += strlen(s) + 1;
    va_end(ap);
    size_t pos = 0;
    out[0] = 0;
    for (const char *s = va_arg(ap2, const char *); s; s = va_arg(ap2, const char *)) {
        size_t n = strlen(s);
        if (pos + n + 2 > cap) break;
        if (pos) out[pos++] = '/';
        memcpy(out + pos, s, n);
        pos += n;
        out[pos] = 0;
    }
    va_end(ap2);
    return total;
}

/* Mini formatter: %i int, %l long, %d double, %s string, %c char. */
static uint64_t vformat(char *out, size_t cap, const char *fmt, va_list ap)
{
    size_t pos = 0;
    uint64_t h = 0;
    for (const char *f = fmt; *f && pos + 32 < cap; f++) {
        if (*f != '%') { out[pos++] = *f; continue; }
        switch (*++f) {
        case 'i': { int v = va_arg(ap, int); pos += (size_t)sprintf(out + pos, "%d", v); h = h * 3 + (uint64_t)v; break; }
        case 'l': { long v = va_arg(ap, long); pos += (size_t)sprintf(out + pos, "%ld", v); h = h * 5 + (uint64_t)v; break; }
        case 'd': { double v = va_arg(ap, double); pos += (size_t)sprintf(out + pos, "%.3f", v); h = h * 7 + (uint64_t)(int64_t)(v * 1000); break; }
        case 's': { const char *v = va_arg(ap, const char *); size_t n = strlen(v); if (n > 20) n = 20; memcpy(out + pos, v, n); pos += n; h = h * 11 + n; break; }
        case 'c': { int v = va_arg(ap, int); out[pos++] = (char)v; h = h * 13 + (uint64_t)v; break; }
        default: out[pos++] = '?'; break;
        }
    }
    out[pos] = 0;
    return h;
}

__attribute__((noinline, format(printf, 1, 2))) static int log_line(const char *fmt, ...)
{
    char buf[256];
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    mix_str(buf);
    vprintf(fmt, ap2); /* prints the same text again to stdout */
    va_end(ap2);
    return n;
}

__attribute__((noinline)) static uint64_t fmt_line(const char *fmt, ...)
{
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    uint64_t h = vformat(buf, sizeof buf, fmt, ap);
    va_end(ap);
    printf("fmt: %s\n", buf);
    mix_str(buf);
    return h;
}

/* Many double and integer arguments: some in registers, the rest on the stack. */
__attribute__((noinline)) static double weighted(int n, ...)
{
    va_list ap;
    va_start(ap, n);
    double s = 0;
    for (int i = 0; i < n; i++) {
        int w = va_arg(ap, int);
        double x = va_arg(ap, double);
        s += w * x;
    }
    va_end(ap);
    return s;
}

typedef int64_t (*vfn)(int, ...);

int main(void)
{
    int64_t s1 = sum_ints(3, 1, 2, 3);
    int64_t s2 = sum_ints(12, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12);
    vfn f = sum_ints;
    int64_t s3 = 0;
    for (int i = 0; i < 10000; i++) s3 += f(4, i, -i, i * 2, 7);
    printf("sums: %lld %lld %lld\n", (long long)s1, (long long)s2, (long long)s3);
    mix((uint64_t)s1); mix((uint64_t)s2); mix((uint64_t)s3);

    char path[128];
    size_t t = join(path, sizeof path, "usr", "lib", "x86_64-linux-gnu", "rivet", (char *)NULL);
    printf("join: %s (%zu)\n", path, t);
    mix_str(path); mix(t);

    uint64_t h = fmt_line("int %i long %l double %d str %s char %c end", -42, 1234567890123L, 2.5,
                          "hello", 'Z');
    h ^= fmt_line("%d %d %d %d %d %d %d %d %d %d", 0.5, 1.25, 2.0, 3.125, 4.5, 5.75, 6.0, 7.5, 8.25, 9.0);
    printf("fmt hash: %016llx\n", (unsigned long long)h);
    mix(h);

    int n = log_line("log: %s=%d, %s=%.2f, %c%c, %lu\n", "alpha", 17, "beta", 0.75, 'o', 'k', 4000000000UL);
    mix((uint64_t)n);

    double w = weighted(9, 1, 0.5, 2, 1.5, 3, 2.5, 4, 3.5, 5, 4.5, 6, 5.5, 7, 6.5, 8, 7.5, 9, 8.5);
    printf("weighted: %.4f\n", w);
    mix((uint64_t)(w * 16));

    printf("checksum: %016llx\n", (unsigned long long)ck);
    return 0;
}
