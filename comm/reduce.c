/* reduce.c - typed element-wise reductions (f32 f64 f16 bf16 i32 i64 x sum avg
 * max min) and the half-precision conversions behind them.
 *
 * One macro writes each loop once per type; the loops are branch-free so gcc
 * vectorizes them (O3 for this file: the loops are memory bound and the
 * vectorizer needs the alias-check versioning that -O2's cheap model skips).
 * Integer sums wrap (computed in the unsigned type, so no undefined overflow).
 * Float max/min propagate NaN, like torch.max.
 *
 * Not for anything that allocates or talks to peers.
 */
#if defined(__GNUC__) && !defined(__clang__) /* clang (the fuzz build) has no such pragma */
#pragma GCC optimize("O3")
#endif
#include "comm/reduce.h"

#include <string.h>

static inline uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* binary16 -> binary32 (F. Giesen's half_to_float): shift exponent+mantissa
 * into place, rebias by 127-15; Inf/NaN get the extra bias to reach 255;
 * subnormals are renormalized by subtracting the magic 2^-14. */
float dt_f16_to_f32(uint16_t h)
{
    const uint32_t shifted_exp = 0x7c00u << 13;
    uint32_t o = (uint32_t)(h & 0x7fff) << 13;
    uint32_t exp = shifted_exp & o;
    o += (uint32_t)(127 - 15) << 23;
    if (exp == shifted_exp)
        o += (uint32_t)(128 - 16) << 23;
    else if (exp == 0) {
        o += 1u << 23;
        o = f32_bits(bits_f32(o) - bits_f32(113u << 23));
    }
    return bits_f32(o | ((uint32_t)(h & 0x8000) << 16));
}

/* binary32 -> binary16, round to nearest even (Giesen's float_to_half_fast3_rtne):
 * >= 65520 (0x47800000 after the sign) overflows to Inf, NaN stays a quiet NaN;
 * below 2^-14 (0x38800000) adding 0.5 lets the FPU round the subnormal for us;
 * normal numbers rebias and add 0xfff plus the mantissa's odd bit (ties to even). */
uint16_t dt_f32_to_f16(float f)
{
    uint32_t x = f32_bits(f);
    uint32_t sign = x & 0x80000000u;
    uint16_t o;
    x ^= sign;
    if (x >= 0x47800000u) {
        o = x > 0x7f800000u ? 0x7e00 : 0x7c00;
    } else if (x < 0x38800000u) {
        o = (uint16_t)(f32_bits(bits_f32(x) + bits_f32(0x3f000000u)) - 0x3f000000u);
    } else {
        uint32_t odd = (x >> 13) & 1;
        x += ((uint32_t)(15 - 127) << 23) + 0xfff + odd;
        o = (uint16_t)(x >> 13);
    }
    return (uint16_t)(o | (sign >> 16));
}

float dt_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

/* bfloat16 is the top half of binary32: round to nearest even by adding
 * 0x7fff plus the lowest kept bit; a NaN keeps a quiet mantissa bit. */
uint16_t dt_f32_to_bf16(float f)
{
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

/* The four operations on a widened value; AVG combines as SUM. */
#define OP_SUM(x, y) ((x) + (y))
#define OP_MAX(x, y) (((x) > (y) || (x) != (x)) ? (x) : (y))
#define OP_MIN(x, y) (((x) < (y) || (x) != (x)) ? (x) : (y))

/* Native types: W is the type the arithmetic runs in (unsigned for ints). */
#define DEF_NATIVE(NAME, T, W)                                                                   \
    static void NAME##_sum(T *d, const T *a, const T *b, size_t n)                               \
    { for (size_t i = 0; i < n; i++) d[i] = (T)OP_SUM((W)a[i], (W)b[i]); }                        \
    static void NAME##_max(T *d, const T *a, const T *b, size_t n)                               \
    { for (size_t i = 0; i < n; i++) d[i] = OP_MAX(a[i], b[i]); }                                 \
    static void NAME##_min(T *d, const T *a, const T *b, size_t n)                               \
    { for (size_t i = 0; i < n; i++) d[i] = OP_MIN(a[i], b[i]); }                                 \
    static void NAME##_avg(T *d, size_t n, int world)                                            \
    { T w = (T)world; for (size_t i = 0; i < n; i++) d[i] = (T)(d[i] / w); }

DEF_NATIVE(f32, float, float)
DEF_NATIVE(f64, double, double)
DEF_NATIVE(i32, int32_t, uint32_t)
DEF_NATIVE(i64, int64_t, uint64_t)

/* 16-bit floats: widen both operands, combine in fp32, round once. */
#define DEF_HALF(NAME, TO32, TO16)                                                               \
    static void NAME##_sum(uint16_t *d, const uint16_t *a, const uint16_t *b, size_t n)          \
    { for (size_t i = 0; i < n; i++) d[i] = TO16(OP_SUM(TO32(a[i]), TO32(b[i]))); }               \
    static void NAME##_max(uint16_t *d, const uint16_t *a, const uint16_t *b, size_t n)          \
    { for (size_t i = 0; i < n; i++) { float x = TO32(a[i]), y = TO32(b[i]);                     \
          d[i] = (x > y || x != x) ? a[i] : b[i]; } }                                            \
    static void NAME##_min(uint16_t *d, const uint16_t *a, const uint16_t *b, size_t n)          \
    { for (size_t i = 0; i < n; i++) { float x = TO32(a[i]), y = TO32(b[i]);                     \
          d[i] = (x < y || x != x) ? a[i] : b[i]; } }                                \
    static void NAME##_avg(uint16_t *d, size_t n, int world)                                     \
    { float w = (float)world; for (size_t i = 0; i < n; i++) d[i] = TO16(TO32(d[i]) / w); }

DEF_HALF(f16, dt_f16_to_f32, dt_f32_to_f16)
DEF_HALF(bf16, dt_bf16_to_f32, dt_f32_to_bf16)

#define DISPATCH(NAME, T)                                                                        \
    case DT_SUM: case DT_AVG: NAME##_sum((T *)dst, (const T *)a, (const T *)b, n); return;       \
    case DT_MAX: NAME##_max((T *)dst, (const T *)a, (const T *)b, n); return;                    \
    case DT_MIN: NAME##_min((T *)dst, (const T *)a, (const T *)b, n); return;                    \
    default: return;

void dt_reduce(enum dt_dtype t, enum dt_redop op, void *dst, const void *a, const void *b, size_t n)
{
    switch (t) {
    case DT_F32: switch (op) { DISPATCH(f32, float) }
    case DT_F64: switch (op) { DISPATCH(f64, double) }
    case DT_F16: switch (op) { DISPATCH(f16, uint16_t) }
    case DT_BF16: switch (op) { DISPATCH(bf16, uint16_t) }
    case DT_I32: switch (op) { DISPATCH(i32, int32_t) }
    case DT_I64: switch (op) { DISPATCH(i64, int64_t) }
    default: return;
    }
}

/* Blocks of 8 KiB: the running result stays in L1 while each source streams
 * through once.  The accumulator is a local block so that dst may alias any
 * source without the partial result clobbering an input not yet read. */
void dt_reduce_many(enum dt_dtype t, enum dt_redop op, void *dst, const void *const *srcs, int nsrc, size_t n)
{
    enum { BLK = 8192 };
    _Alignas(64) unsigned char acc[BLK];
    size_t es = dt_dtype_size(t), per = BLK / es;
    if (nsrc == 1) {
        if (dst != srcs[0])
            memmove(dst, srcs[0], n * es);
        return;
    }
    if (nsrc == 2) {
        dt_reduce(t, op, dst, srcs[0], srcs[1], n);
        return;
    }
    for (size_t i = 0; i < n; i += per) {
        size_t m = n - i < per ? n - i : per, off = i * es;
        dt_reduce(t, op, acc, (const char *)srcs[0] + off, (const char *)srcs[1] + off, m);
        for (int s = 2; s < nsrc; s++)
            dt_reduce(t, op, acc, acc, (const char *)srcs[s] + off, m);
        memcpy((char *)dst + off, acc, m * es);
    }
}

void dt_reduce_finish(enum dt_dtype t, enum dt_redop op, void *buf, size_t n, int world)
{
    if (op != DT_AVG || world == 1)
        return;
    switch (t) {
    case DT_F32: f32_avg(buf, n, world); return;
    case DT_F64: f64_avg(buf, n, world); return;
    case DT_F16: f16_avg(buf, n, world); return;
    case DT_BF16: bf16_avg(buf, n, world); return;
    case DT_I32: i32_avg(buf, n, world); return;
    case DT_I64: i64_avg(buf, n, world); return;
    default: return;
    }
}

double dt_dtype_get(enum dt_dtype t, const void *buf, size_t i)
{
    switch (t) {
    case DT_F32: return ((const float *)buf)[i];
    case DT_F64: return ((const double *)buf)[i];
    case DT_F16: return dt_f16_to_f32(((const uint16_t *)buf)[i]);
    case DT_BF16: return dt_bf16_to_f32(((const uint16_t *)buf)[i]);
    case DT_I32: return ((const int32_t *)buf)[i];
    case DT_I64: return (double)((const int64_t *)buf)[i];
    default: return 0;
    }
}

void dt_dtype_put(enum dt_dtype t, void *buf, size_t i, double v)
{
    switch (t) {
    case DT_F32: ((float *)buf)[i] = (float)v; return;
    case DT_F64: ((double *)buf)[i] = v; return;
    case DT_F16: ((uint16_t *)buf)[i] = dt_f32_to_f16((float)v); return;
    case DT_BF16: ((uint16_t *)buf)[i] = dt_f32_to_bf16((float)v); return;
    case DT_I32: ((int32_t *)buf)[i] = (int32_t)v; return;
    case DT_I64: ((int64_t *)buf)[i] = (int64_t)v; return;
    default: return;
    }
}
