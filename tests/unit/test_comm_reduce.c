/* test_comm_reduce.c - the typed reductions and half-precision conversions:
 * round-to-nearest-even at ties, overflow to Inf, subnormals, NaN, and every
 * dtype x op against a scalar reference, including aliasing dst with a source. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "comm/reduce.h"

static void f16_round_trip_and_rne(void **s)
{
    (void)s;
    /* Every finite half converts to float and back unchanged. */
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff))
            continue; /* NaN payloads: checked below */
        assert_int_equal(dt_f32_to_f16(dt_f16_to_f32((uint16_t)h)), h);
    }
    assert_true(dt_f16_to_f32(0x3c00) == 1.0f);
    assert_true(dt_f16_to_f32(0x0001) == ldexpf(1, -24)); /* smallest subnormal */
    /* 1 + 2^-11 is halfway between 1 and 1+2^-10: ties to even (1.0). */
    assert_int_equal(dt_f32_to_f16(1.0f + ldexpf(1, -11)), 0x3c00);
    /* 1 + 3*2^-11 is halfway between 1+2^-10 (odd) and 1+2^-9: up. */
    assert_int_equal(dt_f32_to_f16(1.0f + 3 * ldexpf(1, -11)), 0x3c02);
    assert_int_equal(dt_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(dt_f32_to_f16(65520.0f), 0x7c00); /* rounds past the max: Inf */
    assert_int_equal(dt_f32_to_f16(-INFINITY), 0xfc00);
    assert_true(isnan(dt_f16_to_f32(dt_f32_to_f16(NAN))));
    assert_int_equal(dt_f32_to_f16(ldexpf(1, -25)), 0x0000);                 /* tie to even zero */
    assert_int_equal(dt_f32_to_f16(ldexpf(1, -25) * 1.5f), 0x0001);
}

static void bf16_rne(void **s)
{
    (void)s;
    assert_int_equal(dt_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(dt_f32_to_bf16(1.0f + ldexpf(1, -8)), 0x3f80);     /* tie: even */
    assert_int_equal(dt_f32_to_bf16(1.0f + 3 * ldexpf(1, -8)), 0x3f82); /* tie: up to even */
    assert_true(dt_bf16_to_f32(0x4049) == 3.140625f);
    assert_true(isnan(dt_bf16_to_f32(dt_f32_to_bf16(NAN))));
    assert_int_equal(dt_f32_to_bf16(INFINITY), 0x7f80);
}

static double ref_op(enum dt_redop op, double a, double b)
{
    return op == DT_MAX ? (a > b ? a : b) : op == DT_MIN ? (a < b ? a : b) : a + b;
}

static void every_dtype_and_op(void **s)
{
    (void)s;
    enum { N = 1037 };
    static char a[N * 8], b[N * 8], d[N * 8];
    for (int t = 0; t < DT_DTYPE_COUNT; t++)
        for (int op = 0; op < DT_REDOP_COUNT; op++) {
            for (size_t i = 0; i < N; i++) {
                dt_dtype_put(t, a, i, (double)((long)(i * 7 % 23) - 11));
                dt_dtype_put(t, b, i, (double)((long)(i * 5 % 19) - 9));
            }
            dt_reduce(t, op, d, a, b, N);
            for (size_t i = 0; i < N; i++)
                assert_true(dt_dtype_get(t, d, i) == ref_op(op, dt_dtype_get(t, a, i), dt_dtype_get(t, b, i)));
            dt_reduce(t, op, a, a, b, N); /* dst aliases a */
            assert_memory_equal(a, d, N * dt_dtype_size(t));
            dt_reduce_finish(t, op, d, N, 3);
            if (op == DT_AVG)
                for (size_t i = 0; i < N; i++) {
                    double want = dt_dtype_get(t, a, i) / 3;
                    if (t == DT_I32 || t == DT_I64)
                        want = (double)((long)dt_dtype_get(t, a, i) / 3);
                    assert_true(fabs(dt_dtype_get(t, d, i) - want) <= fabs(want) * 1e-2 + 1e-9);
                }
        }
}

static void many_sources_in_order(void **s)
{
    (void)s;
    enum { N = 5000 };
    static float x[4][N], out[N];
    const void *srcs[4] = {x[0], x[1], x[2], x[3]};
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < N; i++)
            x[k][i] = (float)(i % 13) * (k + 1) - 7;
    dt_reduce_many(DT_F32, DT_SUM, out, srcs, 4, N);
    for (int i = 0; i < N; i++)
        assert_true(out[i] == ((x[0][i] + x[1][i]) + x[2][i]) + x[3][i]);
    dt_reduce_many(DT_F32, DT_MAX, x[2], srcs, 4, N); /* dst aliases a later source */
    for (int i = 0; i < N; i++)
        assert_true(x[2][i] == x[3][i] || (i % 13) * 1.0f - 7 < 0);
}

static void int_sum_wraps(void **s)
{
    (void)s;
    int32_t a = INT32_MAX, b = 1, d;
    dt_reduce(DT_I32, DT_SUM, &d, &a, &b, 1);
    assert_int_equal(d, INT32_MIN);
    float nan = NAN, one = 1;
    float m;
    dt_reduce(DT_F32, DT_MAX, &m, &one, &nan, 1);
    assert_true(isnan(m));
    dt_reduce(DT_F32, DT_MIN, &m, &nan, &one, 1);
    assert_true(isnan(m));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(f16_round_trip_and_rne), cmocka_unit_test(bf16_rne),
        cmocka_unit_test(every_dtype_and_op),     cmocka_unit_test(many_sources_in_order),
        cmocka_unit_test(int_sum_wraps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
