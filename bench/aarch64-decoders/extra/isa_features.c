/* Compiler-generated code for ISA extensions the plain corpus does not reach:
 * SVE/SVE2 (intrinsics and auto-vectorised loops), AES/SHA/SHA3 crypto, LSE atomics,
 * exclusive pairs, PAC/BTI (built with -mbranch-protection=standard).
 * Compiled only (never run): the objects feed the decoder comparison. */
#include <arm_neon.h>
#include <arm_acle.h>
#ifdef __ARM_FEATURE_SVE
#include <arm_sve.h>
#endif
#include <stdatomic.h>
#include <stdint.h>

void saxpy(float *restrict y, const float *restrict x, float a, int n) {
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

int64_t sum_sq_diff(const int32_t *a, const int32_t *b, int n) {
    int64_t s = 0;
    for (int i = 0; i < n; i++) { int64_t d = a[i] - b[i]; s += d * d; }
    return s;
}

void gather_add(double *restrict out, const double *restrict in, const int *restrict idx, int n) {
    for (int i = 0; i < n; i++) out[i] += in[idx[i]];
}

#ifdef __ARM_FEATURE_SVE2
uint64_t sve_count_matches(const uint8_t *p, uint64_t n, uint8_t c) {
    uint64_t count = 0;
    for (uint64_t i = 0; i < n; i += svcntb()) {
        svbool_t pg = svwhilelt_b8_u64(i, n);
        svuint8_t v = svld1_u8(pg, p + i);
        svbool_t eq = svcmpeq_n_u8(pg, v, c);
        count += svcntp_b8(pg, eq);
    }
    return count;
}

svint32_t sve2_ops(svint32_t a, svint32_t b, svbool_t pg) {
    svint32_t x = svqrdmulh_s32(a, b);             /* SVE2 */
    x = svaba_s32(x, a, b);                        /* SVE2 absolute difference accumulate */
    x = svadd_s32_m(pg, x, svrshl_s32_x(pg, a, b));
    return sveor3_s32(x, a, b);                    /* SVE2 bitwise ternary */
}

#ifdef __ARM_FEATURE_SVE2_BITPERM
svuint64_t sve2_bitperm(svuint64_t a, svuint64_t b) { return svbext_u64(a, b); }
#endif
#endif

uint8x16_t aes_round(uint8x16_t state, uint8x16_t key) {
    return vaesmcq_u8(vaeseq_u8(state, key));
}

uint8x16_t aes_dround(uint8x16_t state, uint8x16_t key) {
    return vaesimcq_u8(vaesdq_u8(state, key));
}

uint32x4_t sha256_rounds(uint32x4_t abcd, uint32x4_t efgh, uint32x4_t wk) {
    uint32x4_t t = vsha256hq_u32(abcd, efgh, wk);
    return vsha256h2q_u32(efgh, t, wk);
}

uint32x4_t sha1_rounds(uint32x4_t abcd, uint32_t e, uint32x4_t wk) {
    return vsha1cq_u32(abcd, e, wk);
}

uint64x2_t sha512_round(uint64x2_t a, uint64x2_t b, uint64x2_t c) {
    return vsha512hq_u64(a, b, c);
}

uint64x2_t sha3_ops(uint64x2_t a, uint64x2_t b, uint64x2_t c) {
    return veor3q_u64(vrax1q_u64(a, b), vbcaxq_u64(a, b, c), c);
}

poly128_t pmull(poly64_t a, poly64_t b) { return vmull_p64(a, b); }

uint32_t crc(uint32_t c, const uint8_t *p, int n) {
    for (int i = 0; i < n; i++) c = __crc32cb(c, p[i]);
    return c;
}

_Atomic long counter;
_Atomic int flag;
long lse_ops(long v) {
    long r = atomic_fetch_add(&counter, v);
    r += atomic_fetch_and(&counter, ~v);
    r += atomic_fetch_or_explicit(&counter, v, memory_order_relaxed);
    r += atomic_fetch_xor_explicit(&counter, v, memory_order_release);
    r += atomic_exchange(&flag, 3);
    int expect = 3;
    atomic_compare_exchange_strong(&flag, &expect, 4);
    return r;
}

__int128 cas128(__int128 *p, __int128 o, __int128 n) {
    __atomic_compare_exchange_n(p, &o, n, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return o;
}

int indirect(int (*f)(int), int x) { return f(x) + 1; }

int dispatch(int op, int a, int b) {
    switch (op) {
    case 0: return a + b;
    case 1: return a - b;
    case 2: return a * b;
    case 3: return a / (b | 1);
    case 4: return a << (b & 7);
    case 5: return a ^ b;
    case 6: return a | b;
    case 7: return a & b;
    default: return -1;
    }
}
