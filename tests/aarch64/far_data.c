// lld relaxes `adrp x0, msg; add x0, x0, :lo12:msg` in `show` into `nop; adr x0, msg`: msg is
// within 1 MiB of the text. `big` (3 MiB of .data) puts Rivet's new text beyond that reach.
#include <stdio.h>
static char big[3 << 20] = {1};
const char msg[] = "far from the new text";
__attribute__((noinline)) int show(int n) { puts(msg); return n + big[n]; }
int main(int argc, char **argv) { (void)argv; big[argc] = 2; return show(argc) + big[0] - 4; }
