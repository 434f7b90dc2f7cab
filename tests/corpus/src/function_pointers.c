/* function_pointers.c -- covers: tables of function pointers (static const array
 * in .data.rel.ro, and a writable table filled at run time), callbacks passed to
 * libc (qsort, bsearch), a callback registry with user data, a function returning
 * a function pointer, and indirect tail calls through a pointer.
 * Deterministic (all comparators are total orders); ends with a checksum. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t ck = 1469598103934665603ULL;
static void mix(uint64_t v) { ck ^= v; ck *= 1099511628211ULL; ck ^= ck >> 29; }

typedef uint32_t (*unop)(uint32_t);
static uint32_t f_inc(uint32_t x) { return x + 1; }
static uint32_t f_dbl(uint32_t x) { return x * 2; }
static uint32_t f_sq(uint32_t x) { return x * x; }
static uint32_t f_rot(uint32_t x) { return (x << 5) | (x >> 27); }
static uint32_t f_xor(uint32_t x) { return x ^ 0xa5a5a5a5u; }
static uint32_t f_neg(uint32_t x) { return 0u - x; }

static const unop const_table[] = { f_inc, f_dbl, f_sq, f_rot, f_xor, f_neg };
static unop rw_table[6];

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}
static int cmp_u32_desc(const void *a, const void *b) { return cmp_u32(b, a); }

struct rec { char name[12]; int age; };
static int cmp_rec(const void *a, const void *b)
{
    const struct rec *x = a, *y = b;
    if (x->age != y->age) return x->age - y->age;
    return strcmp(x->name, y->name);
}

typedef void (*visitor)(void *user, int value);
struct registry { visitor fn[8]; void *user[8]; int n; };
static void reg_add(struct registry *r, visitor fn, void *user)
{
    r->fn[r->n] = fn;
    r->user[r->n] = user;
    r->n++;
}
static void reg_fire(const struct registry *r, int value)
{
    for (int i = 0; i < r->n; i++) r->fn[i](r->user[i], value);
}
static void v_sum(void *u, int v) { *(int64_t *)u += v; }
static void v_max(void *u, int v) { if (v > *(int *)u) *(int *)u = v; }
static void v_hash(void *u, int v) { *(uint32_t *)u = *(uint32_t *)u * 16777619u ^ (uint32_t)v; }

static unop pick(uint32_t k) { return const_table[k % 6]; }

/* Indirect tail call: at -O2 this is `jmp *%rax`-style. */
__attribute__((noinline)) static uint32_t apply(uint32_t k, uint32_t x) { return pick(k)(x); }

int main(void)
{
    for (int i = 0; i < 6; i++) rw_table[i] = const_table[5 - i];

    uint32_t x = 1, y = 1;
    for (uint32_t i = 0; i < 100000; i++) {
        x = const_table[i % 6](x) + i;
        y = rw_table[(i * 7) % 6](y) ^ i;
    }
    printf("tables: %08x %08x\n", x, y);
    mix(x); mix(y);

    uint32_t z = 3;
    for (uint32_t i = 0; i < 50000; i++) z = apply(z ^ i, z);
    printf("apply: %08x\n", z);
    mix(z);

    enum { N = 5000 };
    static uint32_t arr[N];
    uint32_t s = 12345;
    for (int i = 0; i < N; i++) { s = s * 1103515245u + 12345u; arr[i] = s >> 3; }
    qsort(arr, N, sizeof arr[0], cmp_u32);
    uint64_t h = 0;
    for (int i = 0; i < N; i += 97) h = h * 131 + arr[i];
    uint32_t key = arr[1234];
    uint32_t *found = bsearch(&key, arr, N, sizeof arr[0], cmp_u32);
    printf("qsort: %016llx found %d\n", (unsigned long long)h, found ? (int)(found - arr) : -1);
    mix(h); mix(found ? (uint64_t)(found - arr) : 0);
    qsort(arr, N, sizeof arr[0], cmp_u32_desc);
    printf("desc: first %u last %u\n", arr[0], arr[N - 1]);
    mix(arr[0]); mix(arr[N - 1]);

    struct rec people[] = { {"mallory", 41}, {"alice", 30}, {"bob", 30}, {"carol", 25},
                            {"dave", 41}, {"eve", 19}, {"trent", 30}, {"peggy", 25} };
    qsort(people, sizeof people / sizeof people[0], sizeof people[0], cmp_rec);
    for (size_t i = 0; i < sizeof people / sizeof people[0]; i++) {
        printf("%s%s:%d", i ? " " : "", people[i].name, people[i].age);
        for (const char *p = people[i].name; *p; p++) mix((unsigned char)*p);
    }
    printf("\n");

    struct registry reg = { {0}, {0}, 0 };
    int64_t sum = 0; int mx = -1; uint32_t hh = 2166136261u;
    reg_add(&reg, v_sum, &sum);
    reg_add(&reg, v_max, &mx);
    reg_add(&reg, v_hash, &hh);
    for (int i = 0; i < 1000; i++) reg_fire(&reg, (i * 37) % 1001);
    printf("registry: %lld %d %08x\n", (long long)sum, mx, hh);
    mix((uint64_t)sum); mix((uint64_t)mx); mix(hh);

    printf("checksum: %016llx\n", (unsigned long long)ck);
    return 0;
}
