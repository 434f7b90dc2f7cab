/* trailing_call.c: `checked` ends with a call to `twice`, which returns: the compiler emits
   nothing after the call because the program promises (`__builtin_unreachable()`) that the
   path never goes on. main calls `twice` in a loop and uses its results. */
#include <stdio.h>
/* Returns, and is called from a loop whose result is used. */
__attribute__((noinline)) int twice(int x) { printf("twice %d\n", x); return 2 * x; }
/* The compiler may end this function with the call to twice: what follows it is
   unreachable by the program's own promise, so no code is emitted after the call. */
__attribute__((noinline)) void checked(int k) {
    if (k > 100) {
        twice(k);
        __builtin_unreachable();
    }
    printf("k=%d\n", k);
}
int main(int argc, char **argv) {
    (void)argv;
    int s = 0;
    for (int i = 0; i < argc + 3; i++) s += twice(i);
    checked(argc);
    printf("sum %d\n", s);
    return 0;
}
