/* test_grad_norm.c - the blocked gradient norm: summed behind backward in
 * ranges (one rank) or in one pass after the all-reduce, on one thread or
 * several, it has the same bits; and it is the sum of squares to double's
 * accuracy. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "worker/optim/grad_norm.h"

/* Not a multiple of the block, and large enough for the kernel to split it
 * over the pool (a whole-arena pass: >= 2^20 floats). */
#define N (((size_t)1 << 20) + 12345)

static float *random_grads(void)
{
    float *g = malloc(N * sizeof *g);
    assert_non_null(g);
    uint32_t s = 12345;
    for (size_t i = 0; i < N; i++) {
        s = s * 1664525u + 1013904223u;
        g[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * (i % 7 == 0 ? 1e3f : 1e-3f);
    }
    return g;
}

static double one_pass(const float *g, int threads)
{
    struct dt_grad_norm gn;
    dt_kernels_cpu.set_threads(threads);
    assert_int_equal(dt_grad_norm_init(&gn, &dt_kernels_cpu, g, N), 0);
    dt_grad_norm_begin(&gn);
    double s = dt_grad_norm_finish(&gn);
    dt_grad_norm_release(&gn);
    return s;
}

/* Ranges reported from the top down, as backward reports them, with edges
 * that fall inside blocks; a second step on the same state starts afresh. */
static double behind_backward(const float *g, int threads)
{
    static const size_t edges[] = {N - 1000, 250003, 250003, 131072, 4097, 4096, 1};
    struct dt_grad_norm gn;
    dt_kernels_cpu.set_threads(threads);
    assert_int_equal(dt_grad_norm_init(&gn, &dt_kernels_cpu, g, N), 0);
    double s = 0;
    for (int step = 0; step < 2; step++) {
        dt_grad_norm_begin(&gn);
        for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
            dt_grad_norm_ready(&gn, edges[i]);
        s = dt_grad_norm_finish(&gn);
    }
    dt_grad_norm_release(&gn);
    return s;
}

static void same_bits_every_way(void **state)
{
    (void)state;
    float *g = random_grads();
    double ref = one_pass(g, 1);
    assert_true(ref > 0);
    assert_true(one_pass(g, 3) == ref);
    assert_true(behind_backward(g, 1) == ref);
    assert_true(behind_backward(g, 2) == ref);
    dt_kernels_cpu.set_threads(1);
    free(g);
}

static void sum_of_squares(void **state)
{
    (void)state;
    float *g = random_grads();
    long double exact = 0;
    for (size_t i = 0; i < N; i++)
        exact += (long double)g[i] * (long double)g[i];
    double s = one_pass(g, 2);
    assert_true(fabsl((long double)s - exact) <= 1e-13L * exact);
    dt_kernels_cpu.set_threads(1);
    free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(same_bits_every_way),
        cmocka_unit_test(sum_of_squares),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
