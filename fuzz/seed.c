/* Source of the fuzz seeds (built by fuzz/make-seeds.sh): small, but with the constructs
 * discovery models, so that mutations start from interesting tables: a switch dense enough for
 * a jump table, a computed goto (label-address table), function pointers, a noreturn call,
 * a tail call, a loop, a constructor and a local (static) function. */
#include <stdio.h>
#include <stdlib.h>

static int table_switch(int x) {
    switch (x) {
    case 0: return x * 3 + 1;
    case 1: return x ^ 0x55;
    case 2: return x - 7;
    case 3: return x << 2;
    case 4: return x / 3;
    case 5: return x % 11;
    case 6: return ~x;
    case 7: return x + 1000;
    default: return -1;
    }
}

static int computed_goto(const unsigned char *ops, int n) {
    static void *const labels[] = {&&add, &&sub, &&done};
    int acc = 0, i = 0;
#define NEXT() goto *labels[i < n ? ops[i++] % 3 : 2]
    NEXT();
add:
    acc += 3;
    NEXT();
sub:
    acc -= 1;
    NEXT();
done:
    return acc;
#undef NEXT
}

__attribute__((noreturn, noinline)) static void die(const char *why) {
    fprintf(stderr, "fatal: %s\n", why);
    exit(2);
}

static int twice(int x) { return 2 * x; }
static int negate(int x) { return -x; }
int (*const operations[])(int) = {twice, negate};

__attribute__((noinline)) int tail(int x) { return operations[x & 1](x + 1); }

static int ready;
__attribute__((constructor)) static void init(void) { ready = 1; }

int main(int argc, char **argv) {
    if (!ready)
        die("constructor did not run");
    int sum = 0;
    for (int i = 0; i < argc * 5; i++)
        sum += table_switch(i % 9) + tail(i);
    sum += computed_goto((const unsigned char *)argv[0], 8);
    if (sum == 12345)
        die("unlucky");
    printf("%d\n", sum);
    return 0;
}
