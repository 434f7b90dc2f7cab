/* Runs a program with transparent huge pages disabled for it (prctl PR_SET_THP_DISABLE,
 * which execve keeps): how the --hugify tests show that the start-up code then does nothing.
 * Usage: nothp PROGRAM ARGS... */
#include <stdio.h>
#include <sys/prctl.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: nothp PROGRAM ARGS...\n");
        return 2;
    }
    if (prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) != 0) {
        perror("nothp: prctl(PR_SET_THP_DISABLE)");
        return 2;
    }
    execv(argv[1], argv + 1);
    perror("nothp: execv");
    return 127;
}
