/* test_adamw.c - AdamW against torch.optim.AdamW (tests/fixtures/adamw.safetensors,
 * <= 2e-7 relative in fp32), with OneCycle cycling beta1, and the decay and eps
 * placement facts that tell a decoupled AdamW from its look-alikes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>

#include "worker/optim/adamw.h"
#include "worker/optim/lr_schedule.h"
#include "fixture.h"

/* Largest |a - b| / max(|b|, |prev|): a parameter update that nearly cancels
 * the old value (p_new << p_old) makes a one-ulp difference in the update look
 * huge relative to p_new, so the parameter's error is taken relative to the
 * larger of its old and new values. */
static double rel_err_vs(const float *a, const float *b, const float *prev, size_t n)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double s = fmax(fabs((double)b[i]), prev ? fabs((double)prev[i]) : 0.0);
        double e = fabs((double)a[i] - (double)b[i]) / (s > 1e-30 ? s : 1e-30);
        worst = isnan(e) ? INFINITY : fmax(worst, e);
    }
    return worst;
}

/* Runs a fixture case.  stepwise: each step starts from torch's state after the
 * previous one; otherwise the whole trajectory runs on our own state. */
static void run_case(const struct dt_safetensors *f, const char *name, int stepwise)
{
    const char *cfg = dt_safetensors_meta(f, name);
    char key[64];
    snprintf(key, sizeof key, "%s.p0", name);
    const struct dt_st_tensor *p0 = fixture_tensor(f, key, "F32");
    snprintf(key, sizeof key, "%s.g", name);
    const struct dt_st_tensor *g = fixture_tensor(f, key, "F32");
    size_t n = fixture_numel(p0), steps = (size_t)g->shape[0];
    float *p = malloc(n * sizeof *p);
    memcpy(p, p0->data, n * sizeof *p);
    struct dt_adamw a;
    assert_int_equal(dt_adamw_init(&a, &dt_kernels_cpu, n, jnum(cfg, "beta2"), jnum(cfg, "eps"),
                                   jnum(cfg, "weight_decay")), 0);
    const char *what[3] = {"p", "m", "v"};
    float *mine[3] = {p, a.m, a.v};
    float *prev = malloc(n * sizeof *prev);
    for (size_t t = 0; t < steps; t++) {
        /* lr and beta1 of this step as torch's param group held them (the scheduler's, for "cycle"). */
        snprintf(key, sizeof key, "%s.lr.%zu", name, t);
        const double *hp = fixture_tensor(f, key, "F64")->data;
        memcpy(prev, p, n * sizeof *prev);
        dt_adamw_step(&a, p, (const float *)g->data + t * n, hp[0], hp[1], 1.0f);
        for (int w = 0; w < 3; w++) {
            snprintf(key, sizeof key, "%s.%s.%zu", name, what[w], t);
            const float *ref = fixture_tensor(f, key, "F32")->data;
            double e = rel_err_vs(mine[w], ref, w == 0 ? prev : NULL, n);
            /* The fixtures are torch with IEEE sqrt (MKL_CBWR=AVX2, see
             * make_fixtures.py) and the kernel follows torch's operation order,
             * so both the per-step and the whole-trajectory error stay within
             * the 2e-7 (measured: 0, bit-exact). */
            const double limit = 2e-7;
            if (e > limit)
                fail_msg("%s step %zu (%s): %s off by %.3g relative (limit %g)", name, t + 1,
                         stepwise ? "stepwise" : "trajectory", what[w], e, limit);
            if (stepwise)
                memcpy(mine[w], ref, n * sizeof(float));
        }
    }
    dt_adamw_release(&a);
    free(prev);
    free(p);
}

static void matches_torch(void **state)
{
    (void)state;
    struct dt_safetensors f;
    fixture_open("adamw.safetensors", &f);
    const char *cases[3] = {"ref", "rand", "cycle"};
    for (int c = 0; c < 3; c++) {
        run_case(&f, cases[c], 1);
        run_case(&f, cases[c], 0);
    }
    dt_safetensors_release(&f);
}

static void decay_applies_to_old_param_first(void **state)
{
    (void)state;
    /* lr 0.1, wd 0.5, zero gradient: m = v = 0, so the step is exactly p * (1 - 0.05). */
    float p[3] = {1.0f, -2.0f, 0.25f}, g[3] = {0, 0, 0};
    struct dt_adamw a;
    assert_int_equal(dt_adamw_init(&a, &dt_kernels_cpu, 3, 0.999, 1e-8, 0.5), 0);
    dt_adamw_step(&a, p, g, 0.1, 0.9, 1.0f);
    assert_true(p[0] == 1.0f * 0.95f && p[1] == -2.0f * 0.95f && p[2] == 0.25f * 0.95f);
    dt_adamw_release(&a);
}

static void eps_outside_the_corrected_sqrt(void **state)
{
    (void)state;
    /* step 1: m^ = g, v^ = g^2, so the move is lr g / (|g| + eps); g = 1e-10, eps = 1e-8 gives ~0.0099 lr. */
    float p[1] = {0}, g[1] = {1e-10f};
    struct dt_adamw a;
    assert_int_equal(dt_adamw_init(&a, &dt_kernels_cpu, 1, 0.999, 1e-8, 0.0), 0);
    dt_adamw_step(&a, p, g, 1.0, 0.9, 1.0f);
    assert_true(fabs(p[0] + 0.0099) < 1e-4);
    dt_adamw_release(&a);
}

static void clip_coefficient(void **state)
{
    (void)state;
    assert_true(dt_adamw_clip_coef(0.5, 1.0) == 1.0f);
    float c = dt_adamw_clip_coef(4.0, 1.0);
    assert_true(c == 1.0f / (4.0f + 1e-6f));
}

/* adamw_step = INT64_MAX from a checkpoint overflowed the count (issue 26):
 * it saturates, and the step is the one with bias corrections of 1. */
static void step_count_saturates(void **state)
{
    (void)state;
    float p[1] = {1.0f}, g[1] = {0.5f};
    struct dt_adamw a;
    assert_int_equal(dt_adamw_init(&a, &dt_kernels_cpu, 1, 0.999, 1e-8, 0.0), 0);
    a.step = INT64_MAX;
    dt_adamw_step(&a, p, g, 0.1, 0.9, 1.0f);
    assert_true(a.step == INT64_MAX);
    /* m = 0.05, v = 0.00025: p = 1 - 0.1 * 0.05 / (sqrt(0.00025) + 1e-8) */
    assert_true(isfinite(p[0]) && fabs(p[0] - (1.0 - 0.1 * 0.05 / (sqrt(0.00025) + 1e-8))) < 1e-5);
    dt_adamw_release(&a);
}

/* ---- per-tensor weight decay: two param groups (tests/fixtures/adamw_decay.safetensors) ---- */

/* The fixture's arena, tensors listed out of offset order: padding after b0
 * (3 floats) and w1 (1) goes with them. */
static const size_t decay_start[4] = {28, 0, 41, 20};
static const bool decay_flag[4] = {true, true, false, false};
#define DECAY_N 48
#define DECAY_STEPS 10

static void decay_init(struct dt_adamw *a, size_t base, size_t n)
{
    assert_int_equal(dt_adamw_init(a, &dt_kernels_cpu, n, 0.95, 1e-8, 0.1), 0);
    a->base = base;
    assert_int_equal(dt_adamw_set_decay(a, decay_start, decay_flag, 4), 0);
}

/* Whole arena, torch's two groups: within 2e-7 relative at every step (measured: bit-exact). */
static void two_param_groups_match_torch(void **state)
{
    (void)state;
    struct dt_safetensors f;
    fixture_open("adamw_decay.safetensors", &f);
    assert_int_equal(fixture_numel(fixture_tensor(&f, "p0", "F32")), DECAY_N);
    assert_non_null(strstr(dt_safetensors_meta(&f, "layout"), "\"offset\": 41"));
    const double *lr = fixture_tensor(&f, "lr", "F64")->data;
    const float *g = fixture_tensor(&f, "g", "F32")->data;
    float p[DECAY_N], prev[DECAY_N];
    memcpy(p, fixture_tensor(&f, "p0", "F32")->data, sizeof p);
    struct dt_adamw a;
    decay_init(&a, 0, DECAY_N);
    assert_int_equal(a.n_runs, 4);
    for (int t = 0; t < DECAY_STEPS; t++) {
        memcpy(prev, p, sizeof p);
        dt_adamw_step(&a, p, g + t * DECAY_N, lr[t], 0.9, 1.0f);
        const char *what[3] = {"p", "m", "v"};
        const float *mine[3] = {p, a.m, a.v};
        for (int w = 0; w < 3; w++) {
            char key[16];
            snprintf(key, sizeof key, "%s.%d", what[w], t);
            double e = rel_err_vs(mine[w], fixture_tensor(&f, key, "F32")->data, w == 0 ? prev : NULL, DECAY_N);
            if (e > 2e-7)
                fail_msg("step %d: %s off by %.3g relative", t + 1, what[w], e);
        }
    }
    /* A no-decay tensor differs from what one decay for all gives: the flags are used. */
    float q[DECAY_N];
    memcpy(q, fixture_tensor(&f, "p0", "F32")->data, sizeof q);
    struct dt_adamw all;
    assert_int_equal(dt_adamw_init(&all, &dt_kernels_cpu, DECAY_N, 0.95, 1e-8, 0.1), 0);
    for (int t = 0; t < DECAY_STEPS; t++)
        dt_adamw_step(&all, q, g + t * DECAY_N, lr[t], 0.9, 1.0f);
    assert_true(memcmp(q, p, 20 * sizeof *p) == 0);        /* w0 decays either way */
    assert_true(memcmp(q + 20, p + 20, 8 * sizeof *p) != 0); /* b0 and its padding do not */
    dt_adamw_release(&all);
    dt_adamw_release(&a);
    dt_safetensors_release(&f);
}

/* Slices cut anywhere (host_state.h: one struct per rank over shared
 * moments) and shards with their own moments (ZeRO-1: base = the shard's
 * start) give the whole step's bits, whatever tensor a cut falls in. */
static void slices_and_shards_match_whole(void **state)
{
    (void)state;
    struct dt_safetensors f;
    fixture_open("adamw_decay.safetensors", &f);
    const double *lr = fixture_tensor(&f, "lr", "F64")->data;
    const float *g = fixture_tensor(&f, "g", "F32")->data;
    const float *p0 = fixture_tensor(&f, "p0", "F32")->data;
    static const size_t cut[5] = {0, 7, 23, 41, DECAY_N};
    float whole[DECAY_N], sliced[DECAY_N], sharded[DECAY_N];
    memcpy(whole, p0, sizeof whole);
    memcpy(sliced, p0, sizeof sliced);
    memcpy(sharded, p0, sizeof sharded);
    struct dt_adamw a, slice[4], shard[4];
    decay_init(&a, 0, DECAY_N);
    float m[DECAY_N] = {0}, v[DECAY_N] = {0};
    for (int r = 0; r < 4; r++) {
        decay_init(&slice[r], 0, DECAY_N);
        dt_adamw_use_state(&slice[r], m, v, false);
        decay_init(&shard[r], cut[r], cut[r + 1] - cut[r]);
    }
    for (int t = 0; t < DECAY_STEPS; t++) {
        dt_adamw_step(&a, whole, g + t * DECAY_N, lr[t], 0.9, 0.75f);
        for (int r = 0; r < 4; r++) {
            dt_adamw_step_range(&slice[r], sliced, g + t * DECAY_N, cut[r], cut[r + 1], lr[t], 0.9, 0.75f);
            dt_adamw_step(&shard[r], sharded, g + t * DECAY_N, lr[t], 0.9, 0.75f);
        }
    }
    assert_true(memcmp(whole, sliced, sizeof whole) == 0);
    assert_true(memcmp(whole, sharded, sizeof whole) == 0);
    assert_true(memcmp(a.m, m, sizeof m) == 0 && memcmp(a.v, v, sizeof v) == 0);
    for (int r = 0; r < 4; r++) {
        assert_true(memcmp(a.m + cut[r], shard[r].m, (cut[r + 1] - cut[r]) * sizeof *m) == 0);
        assert_true(memcmp(a.v + cut[r], shard[r].v, (cut[r + 1] - cut[r]) * sizeof *v) == 0);
        dt_adamw_release(&slice[r]);
        dt_adamw_release(&shard[r]);
    }
    dt_adamw_release(&a);
    dt_safetensors_release(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(matches_torch),
        cmocka_unit_test(decay_applies_to_old_param_first),
        cmocka_unit_test(eps_outside_the_corrected_sqrt),
        cmocka_unit_test(clip_coefficient),
        cmocka_unit_test(step_count_saturates),
        cmocka_unit_test(two_param_groups_match_torch),
        cmocka_unit_test(slices_and_shards_match_whole),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
