/* test_kernel_profile.c - the per-kernel table of DTRAIN_CUDA_PROFILE
 * (worker/kernel_profile.h) fed by hand: records summed by name, mangled
 * names made readable, the categories, and the table's rows, order and
 * per-step figures.  The CUPTI collector itself needs a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/kernel_profile.h"

static void short_names(void **s)
{
    (void)s;
    char b[64];
    assert_string_equal(dt_kprof_short_name("_Z15ln_forward_kernelPfS_", b, sizeof b), "ln_forward_kern");
    assert_string_equal(dt_kprof_short_name("_Z17ln_forward_kernelPfS_", b, sizeof b), "ln_forward_kernel");
    assert_string_equal(dt_kprof_short_name("_Z8fwd_fastILi64ELb1EEvPK13__nv_bfloat16", b, sizeof b),
                        "fwd_fast");
    assert_string_equal(dt_kprof_short_name("_ZN7cutlass6KernelINS_4gemmEEEvNT_6ParamsE", b, sizeof b),
                        "cutlass::Kernel");
    assert_string_equal(dt_kprof_short_name("_ZN6dtrain6detail10adamw_stepEPf", b, sizeof b),
                        "dtrain::detail::adamw_step");
    assert_string_equal(dt_kprof_short_name("_ZNSt6vectorIiE4sizeEv", b, sizeof b), "std::vector");
    /* not mangled, or mangled beyond this reading: the raw name */
    assert_string_equal(dt_kprof_short_name("nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_TNT", b, sizeof b),
                        "nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_TNT");
    assert_string_equal(dt_kprof_short_name("_Z99short", b, sizeof b), "_Z99short");
    assert_string_equal(dt_kprof_short_name("[memcpy HtoD]", b, sizeof b), "[memcpy HtoD]");
    /* bounded by the buffer */
    char t[8];
    assert_string_equal(dt_kprof_short_name("_Z17ln_forward_kernelPf", t, sizeof t), "ln_forw");
    assert_string_equal(dt_kprof_short_name("sm90_xmma_gemm_bf16", t, sizeof t), "sm90_xm");
}

static void categories(void **s)
{
    (void)s;
    assert_string_equal(dt_kprof_category("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"),
                        "GEMM");
    assert_string_equal(dt_kprof_category("_ZN7cutlass7Kernel2I..."), "GEMM");
    assert_string_equal(dt_kprof_category("nvjet_tst_192x192_64x4_1x2_h_bz_coopA_NNT"), "GEMM");
    assert_string_equal(dt_kprof_category("_Z8fwd_fastILi64EEvv"), "attention");
    assert_string_equal(dt_kprof_category("_Z13bwd_dkdv_fastILi64EEvv"), "attention");
    assert_string_equal(dt_kprof_category("cudnn_generated_fort_native_sdpa_sm90_knob_7_64x128x128_4x1x1_kernel0_0"),
                        "attention");
    assert_string_equal(dt_kprof_category("cudnn::fusion::matmul_dq"), "attention"); /* cuDNN's backward, seen */
    /* as CUPTI gives them: mangled (seen as "other" on the H100 before the category read the short name) */
    assert_string_equal(dt_kprof_category("_ZN5cudnn6fusion27compute_dot_do_o_specializedILi128EEEvPKvS3_Pf"),
                        "attention");
    assert_string_equal(dt_kprof_category("_ZN5cudnn6fusion20convert_dq_to_16bitsEPKfPvi"), "attention");
    assert_string_equal(dt_kprof_category("_Z17ln_backward_kernelPf"), "layernorm");
    assert_string_equal(dt_kprof_category("_Z15xent_rows_kernelPf"), "cross-entropy");
    assert_string_equal(dt_kprof_category("_Z12adamw_kernelPf"), "AdamW");
    assert_string_equal(dt_kprof_category("ncclDevKernel_AllReduce_Sum_f32_RING_LL"), "NCCL");
    assert_string_equal(dt_kprof_category("[memset]"), "copies");
    assert_string_equal(dt_kprof_category("_Z16act_forward_kernelPf"), "other");
    assert_string_equal(dt_kprof_category(NULL), "other");
}

/* The table as text, from a file. */
static char *table(const struct dt_kprof *p, int64_t steps, int top)
{
    FILE *f = tmpfile();
    assert_non_null(f);
    dt_kprof_write(p, f, steps, top);
    long n = ftell(f);
    rewind(f);
    char *out = calloc(1, (size_t)n + 1);
    assert_int_equal(fread(out, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    return out;
}

static void table_rows(void **s)
{
    (void)s;
    struct dt_kprof *p = dt_kprof_new();
    assert_non_null(p);
    /* 4 steps: a GEMM of 3 ms a step in 2 calls, attention 1 ms, a copy 0.5 ms,
     * an unknown kernel 0.5 ms: 5 ms a step, 20 ms in all */
    for (int i = 0; i < 4; i++) {
        assert_int_equal(dt_kprof_add(p, "sm90_xmma_gemm_x", 1000000), 0);
        assert_int_equal(dt_kprof_add(p, "sm90_xmma_gemm_x", 2000000), 0);
        assert_int_equal(dt_kprof_add(p, "_Z8fwd_fastILi64EEvv", 1000000), 0);
        assert_int_equal(dt_kprof_add(p, "[memcpy HtoD]", 500000), 0);
        assert_int_equal(dt_kprof_add(p, "_Z3foov", 500000), 0);
    }
    char *t = table(p, 4, 0);
    assert_non_null(strstr(t, "20 records, 4 names, GPU time 20.000 ms over 4 steps (5.000 ms/step)"));
    /* total ms, calls, calls/step, mean us, ms/step, % and the readable name */
    const char *gemm =
        strstr(t, "    12.000         8       2.0    1500.00    3.0000  60.0%  sm90_xmma_gemm_x\n");
    const char *attn = strstr(t, "     4.000         4       1.0    1000.00    1.0000  20.0%  fwd_fast\n");
    const char *copy =
        strstr(t, "     2.000         4       1.0     500.00    0.5000  10.0%  [memcpy HtoD]\n");
    const char *other = strstr(t, "     2.000         4       1.0     500.00    0.5000  10.0%  foo\n");
    assert_non_null(gemm);
    assert_non_null(attn);
    assert_non_null(copy);
    assert_non_null(other);
    assert_true(gemm < attn && attn < copy && copy < other); /* by time, ties by raw name */
    assert_non_null(strstr(t, "  GEMM                3.000   60.0%\n"));
    assert_non_null(strstr(t, "  attention           1.000   20.0%\n"));
    assert_non_null(strstr(t, "  copies              0.500   10.0%\n"));
    assert_non_null(strstr(t, "  other               0.500   10.0%\n"));
    assert_non_null(strstr(t, "  NCCL                0.000    0.0%\n"));
    free(t);
    /* the top rows only */
    t = table(p, 4, 2);
    assert_non_null(strstr(t, "fwd_fast\n"));
    assert_null(strstr(t, "[memcpy HtoD]\n"));
    assert_non_null(strstr(t, "(2 more rows)\n"));
    free(t);
    dt_kprof_free(p);
}

/* Many names: the hash table grows and keeps every sum apart. */
static void many_names(void **s)
{
    (void)s;
    struct dt_kprof *p = dt_kprof_new();
    char name[32];
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < 1000; i++) {
            snprintf(name, sizeof name, "k%d", i);
            assert_int_equal(dt_kprof_add(p, name, (uint64_t)i + 1), 0);
        }
    char *t = table(p, 0, 1);
    assert_non_null(strstr(t, "3000 records, 1000 names"));
    assert_non_null(strstr(t, "     0.003         3       0.0       1.00    0.0000   0.2%  k999\n"));
    assert_non_null(strstr(t, "(999 more rows)\n"));
    free(t);
    dt_kprof_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(short_names),
        cmocka_unit_test(categories),
        cmocka_unit_test(table_rows),
        cmocka_unit_test(many_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
