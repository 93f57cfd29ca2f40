/* test_model_amp.c - the MLP under autocast (bf16, fp16) against PyTorch's
 * torch.autocast("cpu") run of the same weights and batch
 * (tests/fixtures/amp.safetensors) and against fp32 (mlp.safetensors), and a
 * loss small enough that fp16 gradients underflow: with the loss scaler it
 * trains as fp32 does, without it nothing moves. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>

#include "worker/optim/adamw.h"
#include "worker/optim/grad_scaler.h"
#include "fixture.h"
#include "mlp_fixture.h"

static struct dt_model *load(const struct dt_safetensors *f, const char *act, enum dt_activation kact)
{
    const int hidden[2] = {48, 24};
    struct dt_model *m;
    assert_int_equal(mlp_fixture(784, hidden, 2, 10, kact, 16, 0, &m), 0);
    for (int l = 0; l < 3; l++) {
        char key[32];
        snprintf(key, sizeof key, "%s.w%d", act, l);
        const struct dt_st_tensor *w = fixture_tensor(f, key, "F32");
        snprintf(key, sizeof key, "%s.b%d", act, l);
        const struct dt_st_tensor *b = fixture_tensor(f, key, "F32");
        memcpy(m->params + mlp_tensor(m, l, 0)->offset, w->data, fixture_numel(w) * 4);
        memcpy(m->params + mlp_tensor(m, l, 1)->offset, b->data, fixture_numel(b) * 4);
    }
    return m;
}

static void batch(const struct dt_safetensors *f, const char *act, const float **x, int32_t *y)
{
    char key[32];
    snprintf(key, sizeof key, "%s.y", act);
    const int64_t *y64 = fixture_tensor(f, key, "I64")->data;
    for (int i = 0; i < 16; i++)
        y[i] = (int32_t)y64[i];
    snprintf(key, sizeof key, "%s.x", act);
    *x = fixture_tensor(f, key, "F32")->data;
}

/* ||a - b|| / ||b|| over a tensor. */
static double rel(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return sqrt(num / den);
}

struct tol {
    double vs_torch;  /* tensor-wise, against torch.autocast's own result */
    double logits;    /* logits against fp32 */
    double loss;      /* loss against fp32 */
};

/* Against torch.autocast the result is the same GEMMs over the same rounded
 * values (measured: bit-identical here), so the bound is about one unit in
 * the low type's last place, room for another BLAS's summation order; against
 * fp32 it is two such units, the type's own precision (bf16 2^-8, fp16 2^-11). */
static void against(const char *act, enum dt_activation kact, const char *type, enum dt_kprec prec,
                    struct tol t)
{
    struct dt_safetensors f, g;
    fixture_open("amp.safetensors", &f);
    fixture_open("mlp.safetensors", &g);
    struct dt_model *m = load(&g, act, kact);
    assert_int_equal(dt_model_set_precision(m, prec), 0);
    const float *x;
    int32_t y[16];
    batch(&g, act, &x, y);
    struct dt_batch b = mlp_batch(x, y, 16);
    double loss = dt_model_train_batch(m, &b, 1.0f / 16, false, NULL, NULL) / 16;
    char key[48];
    snprintf(key, sizeof key, "%s.%s.loss", act, type);
    float tl = *(const float *)fixture_tensor(&f, key, "F32")->data;
    snprintf(key, sizeof key, "%s.loss", act);
    float fl = *(const float *)fixture_tensor(&g, key, "F32")->data;
    if (fabs(loss - tl) > 1e-6 * tl || fabs(loss - fl) > t.loss * fl)
        fail_msg("%s %s: loss %.9g, torch autocast %.9g, fp32 %.9g", act, type, loss, tl, fl);
    snprintf(key, sizeof key, "%s.%s.logits", act, type);
    double e1 = rel(dt_model_logits(m), fixture_tensor(&f, key, "F32")->data, 160);
    snprintf(key, sizeof key, "%s.logits", act);
    double e2 = rel(dt_model_logits(m), fixture_tensor(&g, key, "F32")->data, 160);
    if (e1 > t.vs_torch || e2 > t.logits)
        fail_msg("%s %s logits: %.3g from torch autocast (limit %g), %.3g from fp32 (limit %g)", act, type, e1,
                 t.vs_torch, e2, t.logits);
    for (int l = 0; l < 3; l++)
        for (int b = 0; b < 2; b++) {
            size_t n = dt_model_tensor_numel(mlp_tensor(m, l, b));
            const float *mine = m->grads + mlp_tensor(m, l, b)->offset;
            snprintf(key, sizeof key, "%s.%s.g%c%d", act, type, b ? 'b' : 'w', l);
            double e = rel(mine, fixture_tensor(&f, key, "F32")->data, n);
            if (e > t.vs_torch)
                fail_msg("%s: %.3g from torch autocast (limit %g)", key, e, t.vs_torch);
        }
    dt_model_destroy(m);
    dt_safetensors_release(&f);
    dt_safetensors_release(&g);
}

static void matches_torch_autocast(void **state)
{
    (void)state;
    const struct tol bf16 = {4e-3, 8e-3, 1e-3}, fp16 = {5e-4, 1e-3, 1.2e-4};
    against("relu", DT_ACT_RELU, "bf16", DT_KPREC_BF16, bf16);
    against("relu", DT_ACT_RELU, "fp16", DT_KPREC_F16, fp16);
    against("gelu", DT_ACT_GELU, "bf16", DT_KPREC_BF16, bf16);
    against("gelu", DT_ACT_GELU, "fp16", DT_KPREC_F16, fp16);
}

/* 30 AdamW steps on the fixture batch with the loss multiplied by 2^-28:
 * the fp16 gradients (about 1e-3 * 2^-28 ~ 4e-12) are far below fp16's
 * smallest subnormal 2^-24 ~ 6e-8.  AdamW is invariant to the gradient's
 * scale (eps 1e-30 here), so with the scaler this must train like fp32;
 * without it every gradient is 0 and the loss cannot fall. */
static double train_tiny_loss(const struct dt_safetensors *g, enum dt_kprec prec, bool scaled, int64_t *skipped)
{
    struct dt_model *m = load(g, "relu", DT_ACT_RELU);
    assert_int_equal(dt_model_set_precision(m, prec), 0);
    const float *x;
    int32_t y[16];
    batch(g, "relu", &x, y);
    struct dt_amp_spec as = {.dtype = scaled ? DT_AMP_FP16 : DT_AMP_OFF, .dynamic = true, .init_scale = 65536,
                             .growth_factor = 2, .backoff_factor = 0.5, .growth_interval = 2};
    struct dt_grad_scaler s;
    assert_int_equal(dt_grad_scaler_init(&s, &as), 0);
    struct dt_adamw a;
    assert_int_equal(dt_adamw_init(&a, &dt_kernels_cpu, m->n_params, 0.999, 1e-30, 0.0), 0);
    double loss = 0;
    for (int step = 0; step < 30; step++) {
        float dscale = 0x1p-28f * dt_grad_scaler_loss_scale(&s) / 16;
        struct dt_batch b = mlp_batch(x, y, 16);
        loss = dt_model_train_batch(m, &b, dscale, false, NULL, NULL) / 16;
        bool skip;
        bool bad = dt_kernels_cpu.unscale(m->grads, m->n_params, dt_grad_scaler_inv_scale(&s));
        assert_int_equal(dt_grad_scaler_agree(&s, NULL, bad, &skip), 0);
        if (!skip)
            dt_adamw_step(&a, m->params, m->grads, 1e-3, 0.9, 1.0f);
        dt_grad_scaler_update(&s);
    }
    *skipped = s.skipped;
    dt_adamw_release(&a);
    dt_model_destroy(m);
    return loss;
}

static void fp16_underflow_needs_the_scaler(void **state)
{
    (void)state;
    struct dt_safetensors g;
    fixture_open("mlp.safetensors", &g);
    int64_t skipped;
    double first = *(const double *)fixture_tensor(&g, "relu.losses", "F64")->data;
    double fp32 = train_tiny_loss(&g, DT_KPREC_F32, false, &skipped);
    double unscaled = train_tiny_loss(&g, DT_KPREC_F16, false, &skipped);
    double scaled = train_tiny_loss(&g, DT_KPREC_F16, true, &skipped);
    /* The scale doubles every 2 clean steps (2^31 by the end); a step that
     * overflowed on the way would only be skipped. */
    if (!(fp32 < 0.5 * first) || !(fabs(scaled - fp32) < 0.05 * fp32) || !(fabs(unscaled - first) < 1e-3 * first))
        fail_msg("loss after 30 steps from %.4f: fp32 %.4f, fp16 scaled %.4f (%lld skipped), fp16 unscaled %.4f",
                 first, fp32, scaled, (long long)skipped, unscaled);
    dt_safetensors_release(&g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(matches_torch_autocast),
        cmocka_unit_test(fp16_underflow_needs_the_scaler),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
