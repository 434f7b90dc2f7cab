/* recursion.c -- covers: deep and branching recursion with known depth
 * (Ackermann A(2,n) and A(3,5), naive fibonacci), mutual recursion (a recursive
 * descent expression parser: expr -> term -> factor -> expr, and is_even/is_odd),
 * recursion over a tree built on the heap (insert/height/sum/free), and the
 * Tower of Hanoi. Depths are bounded (< 10000 frames) so -O0 builds fit the
 * default 8 MiB stack. Deterministic; ends with a checksum line. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static uint64_t ck = 1469598103934665603ULL;
static void mix(uint64_t v) { ck ^= v; ck *= 1099511628211ULL; ck ^= ck >> 29; }

static uint64_t calls;

__attribute__((noinline)) static uint32_t ack(uint32_t m, uint32_t n)
{
    calls++;
    if (m == 0) return n + 1;
    if (n == 0) return ack(m - 1, 1);
    return ack(m - 1, ack(m, n - 1));
}

__attribute__((noinline)) static uint32_t fib(uint32_t n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

/* Mutual recursion that the compiler must not turn into a loop across two
 * functions (the extra work after the call prevents sibling-call conversion). */
static int is_odd(uint32_t n);
__attribute__((noinline)) static int is_even(uint32_t n) { return n == 0 ? 1 : is_odd(n - 1) & 1; }
__attribute__((noinline)) static int is_odd(uint32_t n) { return n == 0 ? 0 : is_even(n - 1) & 1; }

/* Recursive descent parser: expr := term (('+'|'-') term)*, term := factor
 * (('*'|'/'|'%') factor)*, factor := number | '(' expr ')' | '-' factor. */
static const char *src;
static int64_t expr(void);
static void skip(void) { while (*src == ' ') src++; }
static int64_t factor(void)
{
    skip();
    if (*src == '(') { src++; int64_t v = expr(); skip(); if (*src == ')') src++; return v; }
    if (*src == '-') { src++; return -factor(); }
    int64_t v = 0;
    while (*src >= '0' && *src <= '9') v = v * 10 + (*src++ - '0');
    return v;
}
static int64_t term(void)
{
    int64_t v = factor();
    for (;;) {
        skip();
        char c = *src;
        if (c != '*' && c != '/' && c != '%') return v;
        src++;
        int64_t r = factor();
        if (c == '*') v *= r;
        else if (r == 0) v = 0;
        else if (c == '/') v /= r;
        else v %= r;
    }
}
static int64_t expr(void)
{
    int64_t v = term();
    for (;;) {
        skip();
        char c = *src;
        if (c != '+' && c != '-') return v;
        src++;
        int64_t r = term();
        v = c == '+' ? v + r : v - r;
    }
}
static int64_t eval(const char *s) { src = s; return expr(); }

struct node { int key; struct node *l, *r; };
static struct node *insert(struct node *t, int key)
{
    if (!t) {
        t = malloc(sizeof *t);
        if (!t) abort();
        t->key = key; t->l = t->r = NULL;
        return t;
    }
    if (key < t->key) t->l = insert(t->l, key);
    else if (key > t->key) t->r = insert(t->r, key);
    return t;
}
static int height(const struct node *t)
{
    if (!t) return 0;
    int a = height(t->l), b = height(t->r);
    return 1 + (a > b ? a : b);
}
static uint64_t inorder_hash(const struct node *t, uint64_t h)
{
    if (!t) return h;
    h = inorder_hash(t->l, h);
    h = h * 1000003u + (uint64_t)t->key;
    return inorder_hash(t->r, h);
}
static void free_tree(struct node *t) { if (t) { free_tree(t->l); free_tree(t->r); free(t); } }

static uint64_t moves;
static void hanoi(int n, int from, int to, int via)
{
    if (n == 0) return;
    hanoi(n - 1, from, via, to);
    moves = moves * 3 + (uint64_t)(from * 3 + to);
    hanoi(n - 1, via, to, from);
}

int main(void)
{
    uint32_t a1 = ack(2, 300), a2 = ack(3, 5);
    printf("ack(2,300)=%u ack(3,5)=%u calls=%llu\n", a1, a2, (unsigned long long)calls);
    mix(a1); mix(a2); mix(calls);

    uint32_t f = fib(24);
    printf("fib(24)=%u\n", f);
    mix(f);

    int ev = is_even(5000) * 10 + is_odd(7777);
    printf("even/odd=%d\n", ev);
    mix((uint64_t)ev);

    static const char *exprs[] = {
        "1 + 2 * 3", "(1 + 2) * 3", "-(4 - 10) * (3 + -2) % 5",
        "((((((((7))))))))", "100 / 7 / 2 + 100 % 7", "2*(3*(4*(5*(6+1)-2)+3)-4)",
    };
    for (unsigned i = 0; i < sizeof exprs / sizeof exprs[0]; i++) {
        int64_t v = eval(exprs[i]);
        printf("eval(%s) = %lld\n", exprs[i], (long long)v);
        mix((uint64_t)v);
    }

    struct node *root = NULL;
    uint32_t s = 42;
    for (int i = 0; i < 3000; i++) { s = s * 1103515245u + 12345u; root = insert(root, (int)(s >> 16) % 10000); }
    int h = height(root);
    uint64_t th = inorder_hash(root, 0);
    printf("tree height %d hash %016llx\n", h, (unsigned long long)th);
    mix((uint64_t)h); mix(th);
    free_tree(root);

    hanoi(16, 0, 2, 1);
    printf("hanoi %016llx\n", (unsigned long long)moves);
    mix(moves);

    printf("checksum: %016llx\n", (unsigned long long)ck);
    return 0;
}
