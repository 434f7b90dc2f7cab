/* report(addr): prints on stderr what /proc/self/smaps says of the mapping holding addr:
 *   hot-mapping anon_huge_kb=N inode=I
 * (inode 0: anonymous memory, i.e. the copy --hugify's start-up code made; AnonHugePages: how
 * much of it the kernel backs with transparent huge pages). */
#include <stdio.h>

static void report(unsigned long addr) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) {
        fprintf(stderr, "hot-mapping unreadable\n");
        return;
    }
    char line[512];
    int inside = 0;
    unsigned long inode = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi, kb;
        char perms[8];
        if (sscanf(line, "%lx-%lx %7s %*s %*s %lu", &lo, &hi, perms, &inode) == 4) {
            inside = addr >= lo && addr < hi;
        } else if (inside && sscanf(line, "AnonHugePages: %lu kB", &kb) == 1) {
            fprintf(stderr, "hot-mapping anon_huge_kb=%lu inode=%lu\n", kb, inode);
            fclose(f);
            return;
        }
    }
    fclose(f);
    fprintf(stderr, "hot-mapping not found\n");
}

