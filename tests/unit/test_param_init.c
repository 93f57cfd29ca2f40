/* test_param_init.c - the counter-based initial parameters
 * (worker/models/param_init.h): Philox4x32-10 gives Random123's known
 * answers; every normal draw is, to float rounding, Box-Muller computed with
 * libm from the same two uniforms (so the polynomial log, sin and cos are
 * right over the whole range); the draws have N(0, std)'s moments and tails;
 * the bits depend on seed, stream and index only: any thread count, and a
 * longer draw's prefix, give the same; streams and seeds differ. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "worker/kernels.h"
#include "worker/models/param_init.h"

/* Random123's kat_vectors: counter, key, output. */
static void philox_known_answers(void **state)
{
    (void)state;
    static const uint32_t kat[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {~0u, ~0u, ~0u, ~0u, ~0u, ~0u, 0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09, 0x94fdcceb,
         0x5001e420, 0x24126ea1}};
    for (int i = 0; i < 3; i++) {
        uint32_t out[4];
        dt_philox4x32_10(kat[i], kat[i] + 4, out);
        for (int k = 0; k < 4; k++)
            if (out[k] != kat[i][6 + k])
                fail_msg("vector %d word %d: %08x, Random123 says %08x", i, k, out[k], kat[i][6 + k]);
    }
}

/* Pair j of (seed, stream) with libm: u = 1 - (52 bits of w0 w1) 2^-52,
 * t = (52 bits of w2 w3) 2^-52. */
static void libm_pair(uint64_t seed, uint32_t stream, uint64_t j, double std, double out[2])
{
    uint32_t ctr[4] = {(uint32_t)j, (uint32_t)(j >> 32), stream, 0},
             key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t w[4];
    dt_philox4x32_10(ctr, key, w);
    double u = 1.0 - (double)(((uint64_t)w[0] << 32 | w[1]) >> 12) / 4503599627370496.0;
    double t = (double)(((uint64_t)w[2] << 32 | w[3]) >> 12) / 4503599627370496.0;
    double r = std * sqrt(-2.0 * log(u));
    out[0] = r * cos(2 * M_PI * t);
    out[1] = r * sin(2 * M_PI * t);
}

static float *draw(size_t n, double std, uint64_t seed, uint32_t stream)
{
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    dt_param_init_normal(x, n, std, seed, stream);
    return x;
}

/* Every element within 2 float ulps of libm's Box-Muller (a float rounding
 * of a double that differs from libm's in its last bits, near a rounding
 * boundary, moves by one ulp; sin and cos near 0 are compared absolutely, at
 * the scale of std). */
static void normal_is_box_muller(void **state)
{
    (void)state;
    const size_t n = 200001; /* odd: the last pair is half written */
    dt_kernels_cpu.set_threads(2);
    float *x = draw(n, 0.02, 1234567890123ull, 5);
    for (size_t i = 0; i < n; i++) {
        double want[2];
        libm_pair(1234567890123ull, 5, i / 2, 0.02, want);
        double w = want[i % 2], tol = 2 * 0x1p-23 * fmax(fabs(w), 0.02 * 0x1p-10);
        if (!(fabs((double)x[i] - w) <= tol))
            fail_msg("element %zu: %.9g, libm's Box-Muller gives %.9g", i, (double)x[i], w);
    }
    free(x);
}

/* 2^21 draws: the mean within 5 standard errors, the std within 0.5% (its
 * standard error is 0.05%), the fourth moment within 2% of 3 std^4, and the
 * share beyond 1, 2, 3 std within 1% (relative) of the normal's. */
static void normal_moments_and_tails(void **state)
{
    (void)state;
    const size_t n = (size_t)1 << 21;
    const double std = 0.02;
    dt_kernels_cpu.set_threads(2);
    float *x = draw(n, std, 0, 0);
    double s = 0, s2 = 0, s4 = 0;
    size_t beyond[3] = {0};
    for (size_t i = 0; i < n; i++) {
        double v = x[i] / std;
        s += v;
        s2 += v * v;
        s4 += v * v * v * v;
        for (int k = 0; k < 3; k++)
            beyond[k] += fabs(v) > k + 1;
    }
    double mean = s / (double)n, var = s2 / (double)n - mean * mean, kurt = s4 / (double)n;
    if (fabs(mean) > 5 / sqrt((double)n) || fabs(sqrt(var) - 1) > 0.005 || fabs(kurt - 3) > 0.06)
        fail_msg("mean %.3g sd %.5f E[z^4] %.4f of N(0, 1)", mean, sqrt(var), kurt);
    for (int k = 0; k < 3; k++) {
        double want = erfc((k + 1) / sqrt(2.0)), got = (double)beyond[k] / (double)n;
        double se = sqrt(want * (1 - want) / (double)n);
        if (fabs(got - want) > fmax(0.01 * want, 5 * se))
            fail_msg("share beyond %d sd: %.5f, the normal's %.5f", k + 1, got, want);
    }
    free(x);
}

/* The same bits whatever the threads, and x[0, m) of a longer draw is the
 * shorter draw (m even: whole pairs); another stream or seed differs. */
static void bits_depend_on_index_only(void **state)
{
    (void)state;
    const size_t n = 300001, m = 1000;
    static const int threads[] = {1, 2, 3, 7};
    dt_kernels_cpu.set_threads(1);
    float *one = draw(n, 0.5, 42, 3);
    for (size_t k = 1; k < sizeof threads / sizeof *threads; k++) {
        dt_kernels_cpu.set_threads(threads[k]);
        float *x = draw(n, 0.5, 42, 3);
        if (memcmp(one, x, n * sizeof *x))
            fail_msg("%d threads draw other bits than 1", threads[k]);
        free(x);
    }
    float *prefix = draw(m, 0.5, 42, 3), *stream = draw(m, 0.5, 42, 4), *seed = draw(m, 0.5, 43, 3);
    assert_memory_equal(prefix, one, m * sizeof *one);
    assert_memory_not_equal(stream, one, m * sizeof *one);
    assert_memory_not_equal(seed, one, m * sizeof *one);
    free(prefix);
    free(stream);
    free(seed);
    free(one);
}

static void fill_sets_every_element(void **state)
{
    (void)state;
    const size_t n = 1000003;
    dt_kernels_cpu.set_threads(3);
    float *x = calloc(n, sizeof *x);
    assert_non_null(x);
    dt_param_init_fill(x, n, 1.0f);
    for (size_t i = 0; i < n; i++)
        assert_true(x[i] == 1.0f);
    free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(philox_known_answers),
        cmocka_unit_test(normal_is_box_muller),
        cmocka_unit_test(normal_moments_and_tails),
        cmocka_unit_test(bits_depend_on_index_only),
        cmocka_unit_test(fill_sets_every_element),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
