/* test_grad_scaler.c - the loss scaler against torch.amp.GradScaler
 * (tests/fixtures/grad_scaler.safetensors: scale, growth tracker and whether
 * the optimizer stepped, for scripted overflow patterns), the found_inf
 * agreement across ranks, the unscale-and-check kernel and the bf16/fp16
 * rounding the autocast emulation relies on. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>

#include "test_comm_harness.h"
#include "worker/optim/grad_scaler.h"
#include "worker/kernels.h"
#include "fixture.h"

/* Drives the scaler as the trainer does: scaled gradients [0.5, -0.25, 0.125]
 * * scale, an inf or NaN injected on the pattern's bad steps, unscale and
 * check, agree (one process), update; every step compared with torch. */
static void run_case(const struct dt_safetensors *f, const char *name)
{
    const char *cfg = dt_safetensors_meta(f, name);
    struct dt_amp_spec a = {.dtype = DT_AMP_FP16, .dynamic = true, .init_scale = jnum(cfg, "init_scale"),
                            .growth_factor = jnum(cfg, "growth_factor"),
                            .backoff_factor = jnum(cfg, "backoff_factor"),
                            .growth_interval = (int)jnum(cfg, "growth_interval")};
    struct dt_grad_scaler s;
    assert_int_equal(dt_grad_scaler_init(&s, &a), 0);
    char key[64];
    snprintf(key, sizeof key, "%s.pattern", name);
    const struct dt_st_tensor *pt = fixture_tensor(f, key, "I32");
    const int32_t *pattern = pt->data;
    const float *ref[3];
    const int32_t *tracker, *stepped;
    const char *what[3] = {"scale", "inv_scale"};
    for (int w = 0; w < 2; w++) {
        snprintf(key, sizeof key, "%s.%s", name, what[w]);
        ref[w] = fixture_tensor(f, key, "F32")->data;
    }
    snprintf(key, sizeof key, "%s.tracker", name);
    tracker = fixture_tensor(f, key, "I32")->data;
    snprintf(key, sizeof key, "%s.stepped", name);
    stepped = fixture_tensor(f, key, "I32")->data;
    int64_t skips = 0;
    for (size_t t = 0; t < fixture_numel(pt); t++) {
        float inv = dt_grad_scaler_inv_scale(&s), ls = dt_grad_scaler_loss_scale(&s);
        if (memcmp(&inv, &ref[1][t], sizeof inv))
            fail_msg("%s step %zu: inv_scale %a, torch %a", name, t, (double)inv, (double)ref[1][t]);
        float g[3] = {0.5f * ls, -0.25f * ls, 0.125f * ls};
        if (pattern[t])
            g[1] = t % 2 == 0 ? INFINITY : NAN;
        bool skip;
        assert_int_equal(dt_grad_scaler_agree(&s, NULL, dt_kernels_cpu.unscale(g, 3, inv), &skip), 0);
        skips += skip;
        dt_grad_scaler_update(&s);
        if (skip == (stepped[t] != 0) || s.scale != ref[0][t] || s.growth_tracker != tracker[t])
            fail_msg("%s step %zu: skip %d scale %.9g tracker %d; torch stepped %d scale %.9g tracker %d", name, t,
                     skip, (double)s.scale, s.growth_tracker, stepped[t], (double)ref[0][t], tracker[t]);
        float want = 0.5f * ls * inv; /* NaN once the scale has backed off to 0 (0 * inf), as in torch */
        if (!skip && g[0] != want && !(isnan(g[0]) && isnan(want)))
            fail_msg("%s step %zu: unscaled gradient %.9g", name, t, (double)g[0]);
    }
    assert_int_equal(s.skipped, skips);
}

static void matches_torch(void **state)
{
    (void)state;
    struct dt_safetensors f;
    fixture_open("grad_scaler.safetensors", &f);
    const char *cases = dt_safetensors_meta(&f, "cases");
    assert_non_null(cases);
    char buf[256], *save = NULL;
    snprintf(buf, sizeof buf, "%s", cases);
    int n = 0;
    for (char *c = strtok_r(buf, ",", &save); c; c = strtok_r(NULL, ",", &save), n++)
        run_case(&f, c);
    assert_int_equal(n, 5);
    dt_safetensors_release(&f);
}

static void fixed_scale_skips_but_never_moves(void **state)
{
    (void)state;
    struct dt_amp_spec a = {.dtype = DT_AMP_FP16, .dynamic = false, .loss_scale = 128, .init_scale = 65536,
                            .growth_factor = 2, .backoff_factor = 0.5, .growth_interval = 1};
    struct dt_grad_scaler s;
    assert_int_equal(dt_grad_scaler_init(&s, &a), 0);
    bool skip;
    for (int i = 0; i < 4; i++) {
        assert_int_equal(dt_grad_scaler_agree(&s, NULL, i == 2, &skip), 0);
        assert_true(skip == (i == 2));
        dt_grad_scaler_update(&s);
        assert_true(s.scale == 128.0f);
    }
    assert_int_equal(s.skipped, 1);
    /* amp off: scale 1, nothing skipped even with an inf. */
    a.dtype = DT_AMP_OFF;
    assert_int_equal(dt_grad_scaler_init(&s, &a), 0);
    assert_int_equal(dt_grad_scaler_agree(&s, NULL, true, &skip), 0);
    assert_false(skip);
    assert_true(dt_grad_scaler_loss_scale(&s) == 1.0f);
    a = (struct dt_amp_spec){.dtype = DT_AMP_BF16, .dynamic = true, .init_scale = 1e39, .growth_factor = 2,
                             .backoff_factor = 0.5, .growth_interval = 1};
    assert_int_equal(dt_grad_scaler_init(&s, &a), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "init_scale"));
}

/* Rank 2 alone sees an inf; every rank must skip and back off the same way. */
static int agree_body(struct dt_comm *c, int rank, int world, void *arg)
{
    (void)arg;
    (void)world;
    struct dt_amp_spec a = {.dtype = DT_AMP_FP16, .dynamic = true, .init_scale = 1024, .growth_factor = 2,
                            .backoff_factor = 0.5, .growth_interval = 2};
    struct dt_grad_scaler s;
    int rc = dt_grad_scaler_init(&s, &a);
    for (int step = 0; step < 4 && !rc; step++) {
        float g[4] = {1, 2, 3, 4};
        if (rank == 2 && step == 1)
            g[3] = INFINITY;
        bool skip = false;
        rc = dt_grad_scaler_agree(&s, c, dt_kernels_cpu.unscale(g, 4, dt_grad_scaler_inv_scale(&s)), &skip);
        dt_grad_scaler_update(&s);
        static const float want[4] = {1024, 512, 512, 1024};
        if (!rc && (skip != (step == 1) || s.scale != want[step]))
            rc = dt_error_set(DT_EINTERNAL, "rank %d step %d: skip %d scale %g", rank, step, skip, (double)s.scale);
    }
    return rc;
}

static void one_rank_inf_skips_on_all(void **state)
{
    (void)state;
    assert_int_equal(harness_run(4, "tcp", 30, agree_body, NULL), 0);
}

static void unscale_checks_before_scaling(void **state)
{
    (void)state;
    /* 3e38 * 2 would be inf after scaling by 2, but the value itself is finite: no overflow flagged. */
    float g[5] = {1, -2, 3e38f, 0, 5};
    assert_false(dt_kernels_cpu.unscale(g, 5, 0.5f));
    assert_true(g[0] == 0.5f && g[1] == -1.0f && g[2] == 1.5e38f);
    g[4] = NAN;
    assert_true(dt_kernels_cpu.unscale(g, 5, 1.0f));
    g[4] = -INFINITY;
    assert_true(dt_kernels_cpu.unscale(g, 5, 1.0f));
}

static float ref_bf16(float x) /* round to nearest even via double arithmetic on the 8-bit significand */
{
    if (!isfinite(x) || x == 0)
        return x;
    int e;
    double m = frexp((double)x, &e);            /* x = m 2^e, 0.5 <= |m| < 1 */
    double q = nearbyint(ldexp(m, 8));          /* 8 significant bits; default rounding is ties-to-even */
    return (float)ldexp(q, e - 8);
}

static void rounding_to_low_precision(void **state)
{
    (void)state;
    float x[12] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65519.0f, 65520.0f, -70000.0f, 0x1p-25f, 3 * 0x1p-26f,
                   1e-8f, -0x1p-24f, 0x1p-14f + 0x1p-25f, 0.1f, NAN};
    const float f16[12] = {1.0f, 1.0f + 0x1p-9f, 65504.0f, INFINITY, -INFINITY, 0.0f, 0x1p-24f, 0.0f, -0x1p-24f,
                           0x1p-14f, 0.0999755859375f, NAN};
    float y[12];
    dt_kernels_cpu.round_lowp(y, x, 12, DT_KPREC_F16, false);
    for (int i = 0; i < 11; i++)
        if (y[i] != f16[i])
            fail_msg("fp16(%a) = %a, expected %a", (double)x[i], (double)y[i], (double)f16[i]);
    assert_true(isnan(y[11]));
#ifdef __FLT16_MAX__
    /* Against the compiler's own float -> _Float16 conversion over many magnitudes. */
    srand(7);
    for (int i = 0; i < 200000; i++) {
        float v = ldexpf((float)rand() / (float)RAND_MAX - 0.5f, rand() % 60 - 40), r;
        dt_kernels_cpu.round_lowp(&r, &v, 1, DT_KPREC_F16, false);
        if (r != (float)(_Float16)v)
            fail_msg("fp16(%a) = %a, _Float16 gives %a", (double)v, (double)r, (double)(float)(_Float16)v);
    }
#endif
    srand(8);
    for (int i = 0; i < 200000; i++) {
        float v = ldexpf((float)rand() / (float)RAND_MAX - 0.5f, rand() % 200 - 100), r;
        dt_kernels_cpu.round_lowp(&r, &v, 1, DT_KPREC_BF16, false);
        if (r != ref_bf16(v))
            fail_msg("bf16(%a) = %a, expected %a", (double)v, (double)r, (double)ref_bf16(v));
    }
    /* accumulate: dst += round(src) */
    float acc[2] = {1, 1}, src[2] = {1.0f + 0x1p-10f, 0x1p-30f};
    dt_kernels_cpu.round_lowp(acc, src, 2, DT_KPREC_BF16, true);
    assert_true(acc[0] == 2.0f && acc[1] == 1.0f + 0x1p-30f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(matches_torch),
        cmocka_unit_test(fixed_scale_skips_but_never_moves),
        cmocka_unit_test(one_rank_inf_skips_on_all),
        cmocka_unit_test(unscale_checks_before_scaling),
        cmocka_unit_test(rounding_to_low_precision),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
