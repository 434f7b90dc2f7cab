/* The caller of byte_dispatch.S's run: a few byte-code programs and what they compute. */
#include <stdio.h>

long run(const unsigned char *code);

int main(void) {
    static const unsigned char programs[][12] = {
        {1, 1, 2, 2, 3, 0},          /* ((1 + 1) * 2 * 2) - 1 = 7 */
        {1, 2, 2, 2, 2, 2, 3, 3, 0}, /* 32 - 2 = 30 */
        {3, 3, 2, 1, 9, 1},          /* -4 + 1 = -3, halted by opcode 9 */
        {0},
    };
    for (unsigned i = 0; i < sizeof programs / sizeof programs[0]; i++)
        printf("program %u: %ld\n", i, run(programs[i]));
    return 0;
}
