/* The caller of register_table.S's dispatch: prints the sum for a few counts. */
#include <stdio.h>
#include <stdlib.h>

extern const int dispatch_table[];
int dispatch(const int *table, int n);

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 10;
    for (int k = n; k < n + 3; k++)
        printf("dispatch(%d) = %d\n", k, dispatch(dispatch_table, k));
    return 0;
}
