/* cold_split.c -- covers: hot loops whose functions also contain large, never
 * executed error-handling paths (diagnostics, state dumps, cleanup, then a
 * noreturn exit). gcc's default -freorder-blocks-and-partition (the "O2split"
 * build) moves those paths into separate `<function>.cold` fragments in
 * .text.unlikely, so this program exercises functions split into a hot and a
 * cold part (jumps from hot to cold and back, cold parts that return into the
 * hot part). Also: __builtin_expect, __attribute__((cold)), a switch in the
 * hot loop with a cold default. Deterministic; ends with a checksum line. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t ck = 1469598103934665603ULL;
static void mix(uint64_t v) { ck ^= v; ck *= 1099511628211ULL; ck ^= ck >> 29; }

struct record { uint32_t id, kind, len; uint8_t data[52]; };
struct stats { uint64_t sum, xor_, count, errors, kinds[8]; char last_error[128]; };

__attribute__((noreturn, cold, noinline)) static void die(const struct stats *st, const char *why, int code)
{
    fprintf(stderr, "fatal: %s (after %llu records, %llu errors)\n", why,
            (unsigned long long)st->count, (unsigned long long)st->errors);
    for (int k = 0; k < 8; k++)
        fprintf(stderr, "  kind %d: %llu\n", k, (unsigned long long)st->kinds[k]);
    exit(code);
}

/* Hot function with a large inline cold path. */
__attribute__((noinline)) static uint32_t checksum_record(const struct record *r, struct stats *st)
{
    if (__builtin_expect(r->len > sizeof r->data, 0)) {
        /* ----- cold: detailed diagnostics, never executed ----- */
        char hex[3 * sizeof r->data + 1];
        size_t pos = 0;
        for (size_t i = 0; i < sizeof r->data; i++)
            pos += (size_t)snprintf(hex + pos, sizeof hex - pos, "%02x ", r->data[i]);
        snprintf(st->last_error, sizeof st->last_error, "record %u: bad length %u (kind %u)",
                 r->id, r->len, r->kind);
        fprintf(stderr, "%s\n  data: %s\n", st->last_error, hex);
        st->errors++;
        if (st->errors > 10) die(st, "too many bad records", 3);
        for (int k = 0; k < 8; k++)
            if (st->kinds[k] > 1000000) die(st, "kind overflow", 4);
        return 0;
    }
    uint32_t h = 2166136261u;
    for (uint32_t i = 0; i < r->len; i++) h = (h ^ r->data[i]) * 16777619u;
    return h;
}

__attribute__((noinline)) static void update(struct stats *st, const struct record *r, uint32_t h)
{
    switch (r->kind) {
    case 0: st->sum += h; break;
    case 1: st->sum += h >> 1; break;
    case 2: st->xor_ ^= h; break;
    case 3: st->xor_ ^= (uint64_t)h << 7; break;
    case 4: st->sum -= h & 0xff; break;
    case 5: st->xor_ += h; break;
    case 6: st->sum ^= h; break;
    case 7: st->sum += 7; break;
    default:
        /* cold: corrupt kind */
        snprintf(st->last_error, sizeof st->last_error, "record %u: kind %u out of range",
                 r->id, r->kind);
        fputs(st->last_error, stderr);
        fputc('\n', stderr);
        memset(st->kinds, 0, sizeof st->kinds);
        die(st, "corrupt kind", 5);
    }
    st->kinds[r->kind]++;
    st->count++;
}

static void fill(struct record *r, uint32_t id, uint32_t *seed)
{
    r->id = id;
    *seed = *seed * 1664525u + 1013904223u;
    r->kind = (*seed >> 24) & 7;
    r->len = 8 + ((*seed >> 8) % 45);
    for (uint32_t i = 0; i < sizeof r->data; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        r->data[i] = (uint8_t)(*seed >> 16);
    }
}

__attribute__((noinline)) static void *xmalloc(size_t n)
{
    void *p = malloc(n);
    if (__builtin_expect(p == NULL, 0)) {
        fprintf(stderr, "out of memory allocating %zu bytes\n", n);
        abort();
    }
    return p;
}

int main(void)
{
    enum { N = 512 };
    struct record *recs = xmalloc(N * sizeof *recs);
    struct stats st;
    memset(&st, 0, sizeof st);
    uint32_t seed = 7;
    for (uint32_t i = 0; i < N; i++) fill(&recs[i], i, &seed);

    for (int pass = 0; pass < 200; pass++) /* hot loop */
        for (uint32_t i = 0; i < N; i++) {
            uint32_t h = checksum_record(&recs[i], &st);
            update(&st, &recs[i], h ^ (uint32_t)pass);
        }
    free(recs);

    printf("count %llu errors %llu sum %016llx xor %016llx\n", (unsigned long long)st.count,
           (unsigned long long)st.errors, (unsigned long long)st.sum, (unsigned long long)st.xor_);
    mix(st.count); mix(st.errors); mix(st.sum); mix(st.xor_);
    for (int k = 0; k < 8; k++) {
        printf("kind %d: %llu\n", k, (unsigned long long)st.kinds[k]);
        mix(st.kinds[k]);
    }
    if (st.errors) die(&st, "errors seen", 6); /* never */
    printf("checksum: %016llx\n", (unsigned long long)ck);
    return 0;
}
