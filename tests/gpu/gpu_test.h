/* gpu_test.h - the few helpers the GPU tests share: TAP lines ("ok - ...",
 * "not ok - ..."), tolerance checks against a CPU reference, bf16 rounding
 * as the GPU does it, and a deterministic random source.
 *
 * The GPU tests are plain programs (the GPU machine has no cmocka); each ends
 * with "N passed, N failed" and exits non-zero on any failure.  Without a
 * CUDA device they print one "ok - # SKIP" line and exit 0, so CI without a GPU
 * can still build them.  Not for CPU tests (tests/unit/).
 */
#ifndef DT_GPU_TEST_H
#define DT_GPU_TEST_H

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int gt_passed, gt_failed;

static inline void gt_result(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void gt_result(int ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s - ", ok ? "ok" : "not ok");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    if (ok)
        gt_passed++;
    else
        gt_failed++;
}

static inline int gt_finish(void)
{
    printf("%d passed, %d failed\n", gt_passed, gt_failed);
    return gt_failed ? 1 : 0;
}

/* xorshift64*: the same numbers on every machine. */
static uint64_t gt_rng = 0x9E3779B97F4A7C15ull;
static inline float gt_uniform(float lo, float hi)
{
    gt_rng ^= gt_rng >> 12;
    gt_rng ^= gt_rng << 25;
    gt_rng ^= gt_rng >> 27;
    uint64_t r = gt_rng * 2685821657736338717ull;
    return lo + (hi - lo) * (float)((r >> 40) / 16777216.0);
}

/* bf16 <-> f32 with round-to-nearest-even, as __float2bfloat16 does. */
static inline uint16_t gt_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float gt_from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Largest violation of |got - want| <= atol + rtol |want| over n values,
 * as a ratio (<= 1 passes); *at gets its index. */
static inline double gt_worst(const float *got, const double *want, size_t n, double atol, double rtol, size_t *at)
{
    double worst = 0;
    *at = 0;
    for (size_t i = 0; i < n; i++) {
        double tol = atol + rtol * fabs(want[i]);
        double r = fabs((double)got[i] - want[i]) / tol;
        if (!(r <= worst)) { /* NaN counts as the worst */
            worst = isnan(r) ? INFINITY : r;
            *at = i;
        }
    }
    return worst;
}

static inline void gt_check_close(const char *name, const float *got, const double *want, size_t n, double atol,
                           double rtol)
{
    size_t at;
    double w = gt_worst(got, want, n, atol, rtol, &at);
    if (w <= 1.0)
        gt_result(1, "%s (%zu values, worst %.2f of tolerance)", name, n, w);
    else
        gt_result(0, "%s: [%zu] is %.9g, expected %.9g (atol %g, rtol %g)", name, at, (double)got[at], want[at],
                  atol, rtol);
}

#endif
