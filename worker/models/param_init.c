/* param_init.c - counter-based initial parameters (see param_init.h). */
#include "worker/models/param_init.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "worker/cpu_pool.h"

/* The draw loop cloned for x86-64-v4 (AVX-512) and v3 (AVX2), picked at load
 * time as the CPU kernels' (kernels_cpu.c): wider vectors, the same
 * arithmetic, so the same bits (no contraction into FMA under -std=c11). */
#if defined(__GNUC__) && !defined(__clang__)
#define DT_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define DT_CLONES
#endif

/* ---- Philox4x32-10 (Random123's constants) ---- */

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u /* the golden ratio's and sqrt(3) - 1's bits: the key schedule */
#define PHILOX_W1 0xBB67AE85u

static inline void philox(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1,
                          uint32_t out[4])
{
#pragma GCC unroll 10
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0, p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

void dt_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    philox(ctr[0], ctr[1], ctr[2], ctr[3], key[0], key[1], out);
}

/* ---- log, sin and cos in plain double arithmetic ---- */

/* Branch-free, and without integer <-> double conversions SSE2 lacks, so
 * that the draw loop vectorises: integers reach doubles through their bits. */
static inline double from_bits(uint64_t b)
{
    double d;
    memcpy(&d, &b, sizeof d);
    return d;
}

static inline uint64_t to_bits(double d)
{
    uint64_t b;
    memcpy(&b, &d, sizeof b);
    return b;
}

/* 52 random bits as a double in [0, 1): 1.m - 1, exact. */
static inline double unit52(uint64_t r)
{
    return from_bits(0x3ff0000000000000ull | (r >> 12)) - 1.0;
}

/* ln u for u in (0, 1]: u = m 2^e with m in [sqrt(1/2), sqrt(2)), and
 * ln m = 2 atanh(s), s = (m - 1) / (m + 1), |s| <= 0.172: the series to
 * s^19 leaves an error below 1e-17.  e comes from the exponent bits as
 * 2^52 + bits - 2^52 (exact). */
static inline double ln_unit(double u)
{
    uint64_t bits = to_bits(u);
    double e = from_bits(0x4330000000000000ull | (bits >> 52)) - 4503599627370496.0 - 1023.0;
    double m = from_bits((bits & 0x000fffffffffffffull) | 0x3ff0000000000000ull); /* [1, 2) */
    bool big = m > 1.4142135623730951;
    m = big ? 0.5 * m : m;
    e = big ? e + 1.0 : e;
    double s = (m - 1.0) / (m + 1.0), z = s * s;
    double p = 2.0 / 19;
    p = p * z + 2.0 / 17;
    p = p * z + 2.0 / 15;
    p = p * z + 2.0 / 13;
    p = p * z + 2.0 / 11;
    p = p * z + 2.0 / 9;
    p = p * z + 2.0 / 7;
    p = p * z + 2.0 / 5;
    p = p * z + 2.0 / 3;
    p = p * z + 2.0;
    return e * 0.6931471805599453 + s * p;
}

/* sin and cos of 2 pi t for t in [0, 1): t = (q + f) / 4 with q the nearest
 * quarter turn (0..4) and |f| <= 1/2, so x = f pi / 2 is within pi / 4,
 * where the Taylor series to x^17 (sin) and x^16 (cos) err below 1e-17;
 * quarter turn q swaps and negates: sin(x + q pi/2), cos(x + q pi/2). */
static inline void sincos_turn(double t, double *sn, double *cs)
{
    /* 2^52 + 4t + 0.5 has no fraction bits left: its low bits are round(4t) */
    double q = (4.0 * t + 0.5 + 4503599627370496.0) - 4503599627370496.0;
    q = q > 4.0 * t + 0.5 ? q - 1.0 : q; /* round-to-even may go up: floor */
    double x = (4.0 * t - q) * 1.5707963267948966, z = x * x;
    double s = 1.0 / 355687428096000.0;
    s = s * z - 1.0 / 1307674368000.0;
    s = s * z + 1.0 / 6227020800.0;
    s = s * z - 1.0 / 39916800.0;
    s = s * z + 1.0 / 362880.0;
    s = s * z - 1.0 / 5040.0;
    s = s * z + 1.0 / 120.0;
    s = s * z - 1.0 / 6.0;
    s = x + x * z * s;
    double c = 1.0 / 20922789888000.0;
    c = c * z - 1.0 / 87178291200.0;
    c = c * z + 1.0 / 479001600.0;
    c = c * z - 1.0 / 3628800.0;
    c = c * z + 1.0 / 40320.0;
    c = c * z - 1.0 / 720.0;
    c = c * z + 1.0 / 24.0;
    c = c * z - 0.5;
    c = 1.0 + z * c;
    bool odd = (q == 1.0) | (q == 3.0), neg_sin = (q == 2.0) | (q == 3.0), neg_cos = (q == 1.0) | (q == 2.0);
    double a = odd ? c : s, b = odd ? s : c;
    *sn = neg_sin ? -a : a;
    *cs = neg_cos ? -b : b;
}

/* ---- the draws ---- */

struct normal_job {
    float *x;
    size_t n;
    double std;
    uint32_t key[2], stream;
};

/* Pair p: 52 bits of (w0, w1) give u in (0, 1], of (w2, w3) the turn t in
 * [0, 1); r cos, r sin of Box-Muller. */
static inline void normal_pair(const struct normal_job *j, size_t p, double *c, double *s)
{
    uint32_t w[4];
    philox((uint32_t)p, (uint32_t)((uint64_t)p >> 32), j->stream, 0, j->key[0], j->key[1], w);
    double u = 1.0 - unit52((uint64_t)w[0] << 32 | w[1]), t = unit52((uint64_t)w[2] << 32 | w[3]);
    double r = j->std * sqrt(-2.0 * ln_unit(u)), sn, cs;
    sincos_turn(t, &sn, &cs);
    *c = r * cs;
    *s = r * sn;
}

/* Pairs [lo, hi); the last one of an odd n is half written. */
DT_CLONES static void normal_pairs(void *ctx, size_t lo, size_t hi)
{
    const struct normal_job *j = ctx;
    size_t whole = hi < j->n / 2 ? hi : j->n / 2;
    float *x = j->x;
    for (size_t p = lo; p < whole; p++) {
        double c, s;
        normal_pair(j, p, &c, &s);
        x[2 * p] = (float)c;
        x[2 * p + 1] = (float)s;
    }
    if (whole < hi) {
        double c, s;
        normal_pair(j, whole, &c, &s);
        x[2 * whole] = (float)c;
    }
}

void dt_param_init_normal(float *x, size_t n, double std, uint64_t seed, uint32_t stream)
{
    struct normal_job j = {x, n, std, {(uint32_t)seed, (uint32_t)(seed >> 32)}, stream};
    /* a pair's work is some 60 flops and 20 multiplies: count it as 32 elements' */
    dt_cpu_pool_run_cost(normal_pairs, &j, (n + 1) / 2, 1, 32);
}

struct fill_job {
    float *x;
    float v;
};

static void fill_range(void *ctx, size_t lo, size_t hi)
{
    const struct fill_job *j = ctx;
    for (size_t i = lo; i < hi; i++)
        j->x[i] = j->v;
}

void dt_param_init_fill(float *x, size_t n, float v)
{
    struct fill_job j = {x, v};
    dt_cpu_pool_run(fill_range, &j, n, 1024);
}
