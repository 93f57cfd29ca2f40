/* test_gpt2.c - the gpt2 model against PyTorch (tests/fixtures/gpt2.safetensors,
 * made by tests/fixtures/gpt2_reference.py) on two small configurations:
 * logits, loss and every parameter's gradient, 10 AdamW steps with nanoGPT's
 * decay groups, clipping and the cosine schedule, and the same under bf16
 * autocast; then what the fixture cannot show: recompute modes and the
 * pool's thread counts give the same bits, the padded vocabulary is
 * invisible, shorter sequences work, the initialisation has GPT-2's
 * statistics, Hugging Face's names and shapes, backward reports every
 * gradient range once from the top down, and a token outside the vocabulary
 * is refused before anything reads with it.
 *
 * Tolerances (tensor-wise, ref = PyTorch's values, mine = dtrain's):
 *   fp32: ||mine - ref||_2 <= 1e-5 ||ref||_2  and  max_i |mine_i - ref_i| <= 1e-5 max_i |ref_i|
 *   (elements that are sums of cancelling terms carry absolute, not relative,
 *   rounding error, so the element bound is relative to the tensor's scale);
 *   the loss |mine - ref| <= 1e-5 |ref|; after 10 AdamW steps the parameters
 *   with ||.||_2 relative 1e-4 and each element within 1e-3 of its tensor's
 *   scale: Adam moves an element by about lr per step whatever its gradient
 *   (m / sqrt(v)), so where the gradient is near its rounding noise (biases
 *   starting at 0) the 1e-5 of the gradients becomes ~1e-3 of lr.
 *   bf16 autocast (torch.autocast("cpu", bfloat16) as the reference): logits
 *   ||.||_2 relative 1e-3 and elements within 1e-2 of the scale (c1's are
 *   bit for bit; fp32 logits are 2.8e-3 and 3.5e-3 away from the reference,
 *   which the test checks too, so autocast being off fails it), the loss
 *   2e-4, gradients ||.||_2 relative 1e-2 and elements within 2e-2 of the
 *   scale (bf16 keeps 8 bits: a sum rounded at another point differs by
 *   2^-8 = 3.9e-3, and backward compounds it; measured at most 2.7e-3).
 *   fp16 autocast is held to the same bounds (it keeps 11 bits). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>

#include "base/error.h"
#include "spec/jobspec.h"
#include "worker/models/model.h"
#include "worker/optim/adamw.h"
#include "worker/optim/lr_schedule.h"
#include "fixture.h"

struct cfg {
    const char *tag;
    int L, H, C, V, block, B, T;
};

static const struct cfg C1 = {"c1", 2, 2, 32, 67, 16, 3, 8};
static const struct cfg C2 = {"c2", 3, 4, 48, 256, 32, 2, 32};

static struct dt_model *make(const struct cfg *c, int seq_len, int max_batch, enum dt_recompute rc,
                             uint64_t seed)
{
    struct dt_model_spec s = {.type = "gpt2",
                              .n_layer = c->L,
                              .n_head = c->H,
                              .n_embd = c->C,
                              .vocab_size = c->V,
                              .block_size = c->block};
    struct dt_model_config mc = {.spec = &s,
                                 .k = &dt_kernels_cpu,
                                 .max_batch = max_batch,
                                 .seed = seed,
                                 .recompute = rc,
                                 .data = {.kind = DT_BATCH_TOKENS, .seq_len = seq_len, .vocab = c->V}};
    struct dt_model *m = NULL;
    if (dt_model_create(&mc, &m))
        fail_msg("gpt2 %s: %s", c->tag, dt_error_last());
    return m;
}

/* The fixture's initial parameters, by name, into the model's arena. */
static void load_params(struct dt_model *m, const struct dt_safetensors *f, const struct cfg *c)
{
    for (int i = 0; i < m->n_tensors; i++) {
        const struct dt_model_tensor *t = &m->tensors[i];
        char key[128];
        snprintf(key, sizeof key, "%s.p.%s", c->tag, t->name);
        const struct dt_st_tensor *ft = fixture_tensor(f, key, "F32");
        assert_int_equal(fixture_numel(ft), dt_model_tensor_numel(t));
        memcpy(m->params + t->offset, ft->data, fixture_numel(ft) * sizeof(float));
    }
}

struct tokens {
    int32_t x[64 * 64], y[64 * 64];
};

static struct dt_batch batch(const struct dt_safetensors *f, const struct cfg *c, struct tokens *tk)
{
    char key[32];
    snprintf(key, sizeof key, "%s.x", c->tag);
    const int64_t *x = fixture_tensor(f, key, "I64")->data;
    snprintf(key, sizeof key, "%s.y", c->tag);
    const int64_t *y = fixture_tensor(f, key, "I64")->data;
    for (int i = 0; i < c->B * c->T; i++) {
        tk->x[i] = (int32_t)x[i];
        tk->y[i] = (int32_t)y[i];
    }
    return (struct dt_batch){
        .kind = DT_BATCH_TOKENS, .n = c->B, .T = c->T, .inputs = tk->x, .targets = tk->y};
}

/* The tolerance formula of the file comment; rows of `stride` floats of which `cols` count. */
static void check(const char *what, const float *mine, size_t stride, const struct dt_st_tensor *t,
                  size_t cols, double rel_l2, double rel_max)
{
    const float *ref = t->data;
    size_t n = fixture_numel(t);
    double num = 0, den = 0, scale = 0, worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)mine[i / cols * stride + i % cols] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
        scale = fmax(scale, fabs(ref[i]));
        worst = fmax(worst, fabs(d));
    }
    double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    if (!(rel <= rel_l2) || !(worst <= rel_max * scale))
        fail_msg("%s: relative error %.3g (limit %.3g), worst element %.3g of scale %.3g (limit %.3g)", what,
                 rel, rel_l2, worst, scale, rel_max);
}

static void check_grads(const struct dt_model *m, const struct dt_safetensors *f, const char *pre,
                        double rel_l2, double rel_max)
{
    for (int i = 0; i < m->n_tensors; i++) {
        const struct dt_model_tensor *t = &m->tensors[i];
        char key[128];
        snprintf(key, sizeof key, "%s.g.%s", pre, t->name);
        size_t n = dt_model_tensor_numel(t);
        check(key, m->grads + t->offset, n, fixture_tensor(f, key, "F32"), n, rel_l2, rel_max);
    }
}

/* Logits (after an eval batch: train turns them into their gradient), loss, gradients. */
static void against_torch(const struct cfg *c, enum dt_kprec prec)
{
    struct dt_safetensors f;
    fixture_open("gpt2.safetensors", &f);
    struct dt_model *m = make(c, c->block, c->B, DT_RECOMPUTE_NONE, 0);
    load_params(m, &f, c);
    assert_int_equal(dt_model_set_precision(m, prec), 0);
    struct tokens tk;
    struct dt_batch b = batch(&f, c, &tk);
    int N = c->B * c->T;
    bool lp = prec != DT_KPREC_F32;
    char pre[32], key[64];
    snprintf(pre, sizeof pre, "%s%s", c->tag,
             prec == DT_KPREC_BF16  ? ".bf16"
             : prec == DT_KPREC_F16 ? ".fp16"
                                    : "");
    int64_t hits = 0;
    double eval = dt_model_eval_batch(m, &b, &hits) / N;
    snprintf(key, sizeof key, "%s.logits", pre);
    check(key, dt_model_logits(m), (size_t)m->logits_stride, fixture_tensor(&f, key, "F32"), (size_t)c->V,
          lp ? 1e-3 : 1e-5, lp ? 1e-2 : 1e-5);
    double loss = dt_model_train_batch(m, &b, 1.0f / (float)N, false, NULL, NULL) / N;
    snprintf(key, sizeof key, "%s.loss", pre);
    double want = *(const float *)fixture_tensor(&f, key, "F32")->data, tol = lp ? 2e-4 : 1e-5;
    if (fabs(loss - want) > tol * fabs(want) || fabs(eval - want) > tol * fabs(want))
        fail_msg("%s loss %.9g (eval %.9g), torch %.9g", pre, loss, eval, want);
    check_grads(m, &f, pre, lp ? 1e-2 : 1e-5, lp ? 2e-2 : 1e-5);
    if (prec == DT_KPREC_BF16) { /* without autocast the logits are further from the reference than allowed */
        assert_int_equal(dt_model_set_precision(m, DT_KPREC_F32), 0);
        dt_model_eval_batch(m, &b, NULL);
        snprintf(key, sizeof key, "%s.logits", pre);
        const struct dt_st_tensor *t = fixture_tensor(&f, key, "F32");
        const float *ref = t->data, *mine = dt_model_logits(m);
        double num = 0, den = 0;
        for (size_t i = 0; i < fixture_numel(t); i++) {
            double d = (double)mine[i / c->V * m->logits_stride + i % c->V] - ref[i];
            num += d * d;
            den += (double)ref[i] * ref[i];
        }
        assert_true(sqrt(num / den) > 2e-3);
    }
    dt_model_destroy(m);
    dt_safetensors_release(&f);
}

static void c1_matches_torch(void **state)
{
    (void)state;
    against_torch(&C1, DT_KPREC_F32);
}

static void c2_matches_torch(void **state)
{
    (void)state;
    against_torch(&C2, DT_KPREC_F32);
}

static void bf16_autocast_matches_torch(void **state)
{
    (void)state;
    against_torch(&C1, DT_KPREC_BF16);
    against_torch(&C2, DT_KPREC_BF16);
}

static void fp16_autocast_matches_torch(void **state)
{
    (void)state;
    against_torch(&C1, DT_KPREC_F16);
    against_torch(&C2, DT_KPREC_F16);
}

/* ---- 10 AdamW steps ---- */

/* nanoGPT's groups as the trainer sets them: decay 0.1 on the tensors the
 * model marks (2+ dimensions), none on the others (worker/optim/adamw.h). */
static void set_groups(struct dt_adamw *a, const struct dt_model *m)
{
    size_t start[128];
    bool decay[128];
    assert_true(m->n_tensors <= 128);
    for (int i = 0; i < m->n_tensors; i++) {
        start[i] = m->tensors[i].offset;
        decay[i] = m->tensors[i].decay;
    }
    assert_int_equal(dt_adamw_set_decay(a, start, decay, m->n_tensors), 0);
}

static double grad_norm(const struct dt_model *m)
{
    double s = 0;
    for (size_t i = 0; i < m->n_params; i++)
        s += (double)m->grads[i] * m->grads[i];
    return sqrt(s);
}

static void ten_steps(const struct cfg *c)
{
    struct dt_safetensors f;
    fixture_open("gpt2.safetensors", &f);
    struct dt_model *m = make(c, c->block, c->B, DT_RECOMPUTE_NONE, 0);
    load_params(m, &f, c);
    struct tokens tk;
    struct dt_batch b = batch(&f, c, &tk);
    int N = c->B * c->T;
    char key[128];
    snprintf(key, sizeof key, "%s.losses", c->tag);
    const float *losses = fixture_tensor(&f, key, "F32")->data;
    struct dt_adamw a;
    assert_int_equal(dt_adamw_init(&a, &dt_kernels_cpu, m->n_params, 0.95, 1e-8, 0.1), 0);
    set_groups(&a, m);
    /* the fixture's schedule: warm-up 3, then cosine down to 1e-4 at step 10 */
    struct dt_scheduler_spec ss = {.type = DT_SCHED_COSINE, .warmup_steps = 3, .min_lr = 1e-4};
    struct dt_lr_schedule sched;
    assert_int_equal(dt_lr_schedule_init(&sched, &ss, 10, 1e-3, 0.9), 0);
    for (int s = 0; s < 10; s++) {
        double l = dt_model_train_batch(m, &b, 1.0f / (float)N, false, NULL, NULL) / N;
        if (fabs(l - losses[s]) > 1e-5 * fabs(losses[s]))
            fail_msg("%s step %d loss %.9g, torch %.9g", c->tag, s, l, losses[s]);
        dt_adamw_step(&a, m->params, m->grads, sched.lr, sched.beta1, dt_adamw_clip_coef(grad_norm(m), 1.0));
        assert_int_equal(dt_lr_schedule_step(&sched), 0);
    }
    for (int i = 0; i < m->n_tensors; i++) {
        const struct dt_model_tensor *t = &m->tensors[i];
        snprintf(key, sizeof key, "%s.a.%s", c->tag, t->name);
        size_t n = dt_model_tensor_numel(t);
        const struct dt_st_tensor *ft = fixture_tensor(&f, key, "F32");
        if (!strstr(t->name, "c_attn.bias")) {
            check(key, m->params + t->offset, n, ft, n, 1e-4, 1e-3);
            continue;
        }
        /* The key third of c_attn.bias adds q.b_k to every score of a row,
         * which softmax cancels: its gradient is 0 plus rounding noise, in
         * torch as here, and Adam turns noise into steps of ~lr.  The query
         * and value thirds are compared. */
        for (int part = 0; part < 3; part += 2) {
            struct dt_st_tensor third = *ft;
            third.shape[0] = c->C;
            third.data = (const float *)ft->data + part * c->C;
            check(key, m->params + t->offset + (size_t)part * c->C, (size_t)c->C, &third, (size_t)c->C, 1e-4,
                  1e-3);
        }
    }
    /* the padding rows took no step */
    const struct dt_model_tensor *wte = dt_model_find_tensor(m, "transformer.wte.weight");
    for (size_t i = dt_model_tensor_numel(wte); i < m->tensors[1].offset; i++)
        assert_true(m->params[i] == 0.0f);
    dt_adamw_release(&a);
    dt_model_destroy(m);
    dt_safetensors_release(&f);
}

static void adamw_ten_steps_match_torch(void **state)
{
    (void)state;
    ten_steps(&C1);
    ten_steps(&C2);
}

/* ---- what the fixture cannot show ---- */

/* trainer.recompute gelu and block recompute what none keeps: same loss and
 * gradient bits, accumulated or not. */
static void recompute_modes_same_bits(void **state)
{
    (void)state;
    struct dt_safetensors f;
    fixture_open("gpt2.safetensors", &f);
    struct tokens tk;
    struct dt_batch b = batch(&f, &C2, &tk);
    float *ref = NULL;
    double ref_loss = 0;
    for (int rc = DT_RECOMPUTE_NONE; rc <= DT_RECOMPUTE_BLOCK; rc++) {
        struct dt_model *m = make(&C2, C2.block, C2.B, (enum dt_recompute)rc, 0);
        load_params(m, &f, &C2);
        double loss = dt_model_train_batch(m, &b, 0.01f, false, NULL, NULL);
        loss += dt_model_train_batch(m, &b, 0.01f, true, NULL, NULL);
        if (!ref) {
            ref = malloc(m->n_params * sizeof *ref);
            memcpy(ref, m->grads, m->n_params * sizeof *ref);
            ref_loss = loss;
        } else {
            assert_true(loss == ref_loss);
            assert_memory_equal(ref, m->grads, m->n_params * sizeof *ref);
        }
        dt_model_destroy(m);
    }
    free(ref);
    dt_safetensors_release(&f);
}

/* The pool's thread count never changes a bit: the loss and every gradient
 * (two micro-batches, the second accumulated) are the same with 1, 3 and 4
 * threads.  The shapes are large enough that the GEMMs are cut into tiles,
 * attention's (b, h) pairs, the cross-entropy rows and the layernorm rows go
 * to several threads (cpu_pool splits at 64k elements of work). */
static void threads_same_bits(void **state)
{
    (void)state;
    const struct cfg big = {"threads", 2, 4, 256, 500, 128, 4, 128};
    static int32_t x[4 * 128], y[4 * 128];
    uint32_t r = 12345;
    for (int i = 0; i < 4 * 128; i++) {
        r = r * 1664525u + 1013904223u;
        x[i] = (int32_t)((r >> 8) % 500);
        y[i] = (int32_t)((r >> 20) % 500);
    }
    struct dt_batch b = {.kind = DT_BATCH_TOKENS, .n = 4, .T = 128, .inputs = x, .targets = y};
    static const int threads[] = {1, 3, 4};
    float *ref = NULL;
    double ref_loss = 0;
    for (int k = 0; k < 3; k++) {
        dt_kernels_cpu.set_threads(threads[k]);
        struct dt_model *m = make(&big, 128, 4, DT_RECOMPUTE_NONE, 3);
        double loss = dt_model_train_batch(m, &b, 1.0f / 512, false, NULL, NULL);
        loss += dt_model_train_batch(m, &b, 1.0f / 512, true, NULL, NULL);
        assert_true(isfinite(loss) && loss > 0);
        if (!ref) {
            ref = malloc(m->n_params * sizeof *ref);
            memcpy(ref, m->grads, m->n_params * sizeof *ref);
            ref_loss = loss;
        } else {
            if (loss != ref_loss)
                fail_msg("%d threads: loss %.17g, 1 thread %.17g", threads[k], loss, ref_loss);
            assert_memory_equal(ref, m->grads, m->n_params * sizeof *ref);
        }
        dt_model_destroy(m);
    }
    dt_kernels_cpu.set_threads(2);
    free(ref);
}

/* The padded vocabulary never changes the loss or a gradient: with garbage
 * in the padding rows every bit is the same, and their gradient is 0. */
static void padding_invisible(void **state)
{
    (void)state;
    struct dt_safetensors f;
    fixture_open("gpt2.safetensors", &f);
    struct tokens tk;
    struct dt_batch b = batch(&f, &C1, &tk);
    struct dt_model *m[2];
    double loss[2];
    for (int k = 0; k < 2; k++) {
        m[k] = make(&C1, C1.block, C1.B, DT_RECOMPUTE_NONE, 0);
        load_params(m[k], &f, &C1);
        assert_int_equal(m[k]->logits_cols, 67);
        assert_int_equal(m[k]->logits_stride, 128);
        for (size_t i = 67 * 32; i < 128 * 32; i++)
            m[k]->params[i] = k ? 3.0f : 0.0f;
        loss[k] = dt_model_train_batch(m[k], &b, 0.1f, false, NULL, NULL);
        for (size_t i = 67 * 32; i < 128 * 32; i++)
            assert_true(m[k]->grads[i] == 0.0f);
    }
    assert_true(loss[0] == loss[1]);
    assert_memory_equal(m[0]->grads, m[1]->grads, m[0]->n_params * sizeof(float));
    for (int k = 0; k < 2; k++)
        dt_model_destroy(m[k]);
    dt_safetensors_release(&f);
}

/* A sequence shorter than the model's seq_len (generation): the first T'
 * positions' logits are those of the full sequence (attention is causal). */
static void shorter_sequences(void **state)
{
    (void)state;
    struct dt_safetensors f;
    fixture_open("gpt2.safetensors", &f);
    struct tokens tk, cut;
    batch(&f, &C1, &tk);
    const float *ref = fixture_tensor(&f, "c1.logits", "F32")->data;
    struct dt_model *m = make(&C1, C1.block, C1.B, DT_RECOMPUTE_BLOCK, 0);
    load_params(m, &f, &C1);
    for (int T = 1; T <= C1.T; T += 3) {
        for (int s = 0; s < C1.B; s++)
            for (int t = 0; t < T; t++) {
                cut.x[s * T + t] = tk.x[s * C1.T + t];
                cut.y[s * T + t] = tk.y[s * C1.T + t];
            }
        struct dt_batch b = {.kind = DT_BATCH_TOKENS, .n = C1.B, .T = T, .inputs = cut.x, .targets = cut.y};
        assert_true(isfinite(dt_model_eval_batch(m, &b, NULL)));
        const float *lg = dt_model_logits(m);
        for (int s = 0; s < C1.B; s++)
            for (int t = 0; t < T; t++)
                for (int v = 0; v < C1.V; v++) {
                    float want = ref[(size_t)(s * C1.T + t) * C1.V + v];
                    float got = lg[(size_t)(s * T + t) * m->logits_stride + v];
                    if (fabsf(got - want) > 1e-5f * fmaxf(fabsf(want), 0.1f))
                        fail_msg("T=%d seq %d pos %d token %d: %.9g, full sequence %.9g", T, s, t, v, got,
                                 want);
                }
        b.targets = NULL; /* logits only */
        assert_true(dt_model_eval_batch(m, &b, NULL) == 0.0);
        assert_true(dt_model_train_batch(
                        m,
                        &(struct dt_batch){
                            .kind = DT_BATCH_TOKENS, .n = 1, .T = T, .inputs = cut.x, .targets = cut.y},
                        1.0f, false, NULL, NULL) > 0);
    }
    dt_model_destroy(m);
    dt_safetensors_release(&f);
}

/* Moments of one kind of tensor, pooled. */
struct kind {
    const char *what;
    double want_std;
    double n, s, ss;
};

static void kind_add(struct kind *k, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        k->s += x[i];
        k->ss += (double)x[i] * x[i];
    }
    k->n += (double)n;
}

/* Within 1% of the std (pooled over >= 300k draws its standard error is
 * 0.13%) and the mean within 5 standard errors. */
static void kind_check(const struct kind *k)
{
    double mean = k->s / k->n, sd = sqrt(k->ss / k->n - mean * mean);
    if (fabs(sd - k->want_std) > 0.01 * k->want_std || fabs(mean) > 5 * k->want_std / sqrt(k->n))
        fail_msg("%s (%.0f values): mean %.3g std %.5g, want N(0, %.5g)", k->what, k->n, mean, sd, k->want_std);
}

/* GPT-2's initialisation from the seed: N(0, 0.02) matrices and embeddings,
 * N(0, 0.02/sqrt(2L)) residual projections (each tensor, and pooled by kind),
 * zero biases, LayerNorm 1 and 0, zero padding; another seed gives other
 * values, and 1, 3 and 4 threads the same bits (the draws are counter-based,
 * worker/models/param_init.h). */
static void init_statistics(void **state)
{
    (void)state;
    const struct cfg big = {"init", 4, 4, 128, 1001, 64, 1, 8};
    dt_kernels_cpu.set_threads(1);
    struct dt_model *m = make(&big, 8, 1, DT_RECOMPUTE_NONE, 7), *o = make(&big, 8, 1, DT_RECOMPUTE_NONE, 8);
    for (int th = 3; th <= 4; th++) {
        dt_kernels_cpu.set_threads(th);
        struct dt_model *p = make(&big, 8, 1, DT_RECOMPUTE_NONE, 7);
        if (memcmp(m->params, p->params, m->n_params * sizeof *m->params))
            fail_msg("%d threads initialise other bits than 1", th);
        dt_model_destroy(p);
    }
    dt_kernels_cpu.set_threads(2);
    double proj = 0.02 / sqrt(8.0);
    struct kind matrices = {"embeddings and matrices", 0.02, 0, 0, 0},
                projections = {"residual projections", proj, 0, 0, 0};
    for (int i = 0; i < m->n_tensors; i++) {
        const struct dt_model_tensor *t = &m->tensors[i];
        const float *x = m->params + t->offset;
        size_t n = dt_model_tensor_numel(t);
        double s = 0, ss = 0;
        for (size_t k = 0; k < n; k++) {
            s += x[k];
            ss += (double)x[k] * x[k];
        }
        double mean = s / n, sd = sqrt(ss / n - mean * mean);
        if (t->ndim == 2) {
            bool is_proj = strstr(t->name, "c_proj.weight") != NULL;
            double want = is_proj ? proj : 0.02;
            /* n >= 8k draws: the sample std is within 3% and the mean within 4 sd/sqrt(n) */
            if (fabs(sd - want) > 0.03 * want || fabs(mean) > 4 * want / sqrt((double)n))
                fail_msg("%s: mean %.3g std %.4g, want N(0, %.4g)", t->name, mean, sd, want);
            kind_add(is_proj ? &projections : &matrices, x, n);
            assert_true(memcmp(x, o->params + t->offset, n * sizeof *x) != 0);
        } else {
            bool ln_w = strstr(t->name, "ln_") && strstr(t->name, ".weight");
            for (size_t k = 0; k < n; k++)
                assert_true(x[k] == (ln_w ? 1.0f : 0.0f));
        }
    }
    kind_check(&matrices);
    kind_check(&projections);
    for (size_t i = 1001 * 128; i < m->tensors[1].offset; i++)
        assert_true(m->params[i] == 0.0f);
    dt_model_destroy(m);
    dt_model_destroy(o);
}

/* Hugging Face's state_dict order, names and Conv1D shapes; decay on 2+ dims;
 * the padding after wte and nowhere else; no lm_head (tied). */
static void hf_names_and_shapes(void **state)
{
    (void)state;
    struct dt_model *m = make(&C1, C1.block, 1, DT_RECOMPUTE_NONE, 0);
    static const char *const block[] = {"ln_1.weight",      "ln_1.bias",          "attn.c_attn.weight",
                                        "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
                                        "ln_2.weight",      "ln_2.bias",          "mlp.c_fc.weight",
                                        "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};
    const int64_t C = 32, shape[12][2] = {{C, 0}, {C, 0}, {C, 3 * C}, {3 * C, 0}, {C, C},     {C, 0},
                                          {C, 0}, {C, 0}, {C, 4 * C}, {4 * C, 0}, {4 * C, C}, {C, 0}};
    assert_int_equal(m->n_tensors, 2 + 12 * 2 + 2);
    assert_string_equal(m->tensors[0].name, "transformer.wte.weight");
    assert_int_equal(m->tensors[0].shape[0], 67);
    assert_int_equal(m->tensors[1].offset, 128 * 32); /* wpe after the padded wte */
    assert_string_equal(m->tensors[1].name, "transformer.wpe.weight");
    assert_int_equal(m->tensors[1].shape[0], 16);
    size_t end = m->tensors[1].offset + 16 * 32;
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < 12; i++) {
            const struct dt_model_tensor *t = &m->tensors[2 + 12 * l + i];
            char name[64];
            snprintf(name, sizeof name, "transformer.h.%d.%s", l, block[i]);
            assert_string_equal(t->name, name);
            assert_int_equal(t->ndim, shape[i][1] ? 2 : 1);
            assert_int_equal(t->shape[0], shape[i][0]);
            if (shape[i][1])
                assert_int_equal(t->shape[1], shape[i][1]);
            assert_int_equal(t->decay, t->ndim >= 2);
            assert_int_equal(t->offset, end);
            end += dt_model_tensor_numel(t);
        }
    assert_string_equal(m->tensors[26].name, "transformer.ln_f.weight");
    assert_string_equal(m->tensors[27].name, "transformer.ln_f.bias");
    assert_int_equal(m->tensors[27].offset + 32, m->n_params);
    assert_null(dt_model_find_tensor(m, "lm_head.weight"));
    assert_string_equal(m->spec.type, "gpt2");
    assert_int_equal(m->spec.vocab_size, 67);
    dt_model_destroy(m);
}

struct ranges {
    size_t lo[256], hi[256];
    int n;
};

static void record(void *ctx, size_t lo, size_t hi)
{
    struct ranges *r = ctx;
    r->lo[r->n] = lo;
    r->hi[r->n++] = hi;
}

/* Backward reports [lo, hi) ranges from the top of the arena down, each
 * starting where the last ended, down to 0 (wte, the last written). */
static void ready_ranges_top_down(void **state)
{
    (void)state;
    struct dt_safetensors f;
    fixture_open("gpt2.safetensors", &f);
    struct tokens tk;
    struct dt_batch b = batch(&f, &C2, &tk);
    struct dt_model *m = make(&C2, C2.block, C2.B, DT_RECOMPUTE_GELU, 0);
    struct ranges r = {.n = 0};
    dt_model_train_batch(m, &b, 1.0f, false, record, &r);
    assert_int_equal(r.n, 1 + 4 * 3 + 1);
    assert_int_equal(r.hi[0], m->n_params);
    assert_int_equal(r.lo[0], dt_model_find_tensor(m, "transformer.ln_f.weight")->offset);
    for (int i = 1; i < r.n; i++) {
        assert_int_equal(r.hi[i], r.lo[i - 1]);
        assert_true(r.lo[i] < r.hi[i]);
    }
    assert_int_equal(r.lo[r.n - 1], 0);
    dt_model_destroy(m);
    dt_safetensors_release(&f);
}

/* A token outside the vocabulary, or a batch larger than the buffers, is
 * refused with a sentence (NaN loss) before any table is read with it, and
 * the gradients stay as they were. */
static void bad_batches_refused(void **state)
{
    (void)state;
    struct dt_model *m = make(&C1, 8, 2, DT_RECOMPUTE_NONE, 0);
    int32_t x[16] = {0}, y[16] = {0};
    struct dt_batch b = {.kind = DT_BATCH_TOKENS, .n = 2, .T = 8, .inputs = x, .targets = y};
    for (size_t i = 0; i < m->n_params; i++)
        m->grads[i] = 1.0f;
    x[5] = 67;
    assert_true(isnan(dt_model_train_batch(m, &b, 1.0f, false, NULL, NULL)));
    assert_non_null(strstr(dt_error_last(), "outside the vocabulary"));
    x[5] = 0;
    y[9] = -1;
    assert_true(isnan(dt_model_eval_batch(m, &b, NULL)));
    y[9] = 0;
    b.T = 9;
    assert_true(isnan(dt_model_train_batch(m, &b, 1.0f, false, NULL, NULL)));
    assert_non_null(strstr(dt_error_last(), "9 tokens"));
    for (size_t i = 0; i < m->n_params; i++)
        assert_true(m->grads[i] == 1.0f);
    dt_model_destroy(m);
    /* and sizes the model cannot be made with */
    struct dt_model_spec s = {
        .type = "gpt2", .n_layer = 1, .n_head = 3, .n_embd = 32, .vocab_size = 10, .block_size = 8};
    struct dt_model_config mc = {.spec = &s,
                                 .k = &dt_kernels_cpu,
                                 .max_batch = 1,
                                 .data = {.kind = DT_BATCH_TOKENS, .seq_len = 8, .vocab = 10}};
    struct dt_model *bad = NULL;
    assert_int_not_equal(dt_model_create(&mc, &bad), 0);
    assert_non_null(strstr(dt_error_last(), "multiple of n_head"));
    s.n_head = 4;
    mc.data.seq_len = 9;
    assert_int_not_equal(dt_model_create(&mc, &bad), 0);
    assert_non_null(strstr(dt_error_last(), "block_size 8"));
    assert_null(bad);
}

/* Gradient accumulation: a second micro-batch with accumulate adds its
 * gradients (the same batch twice: twice the gradient, to rounding), one
 * without overwrites them. */
static void accumulate_adds(void **state)
{
    (void)state;
    struct dt_safetensors f;
    fixture_open("gpt2.safetensors", &f);
    struct tokens tk;
    struct dt_batch b = batch(&f, &C1, &tk);
    struct dt_model *m = make(&C1, C1.block, C1.B, DT_RECOMPUTE_NONE, 0);
    load_params(m, &f, &C1);
    dt_model_train_batch(m, &b, 0.05f, false, NULL, NULL);
    float *once = malloc(m->n_params * sizeof *once);
    memcpy(once, m->grads, m->n_params * sizeof *once);
    dt_model_train_batch(m, &b, 0.05f, true, NULL, NULL);
    double num = 0, den = 0;
    for (size_t i = 0; i < m->n_params; i++) {
        double d = (double)m->grads[i] - 2.0 * once[i];
        num += d * d;
        den += 4.0 * (double)once[i] * once[i];
    }
    if (!(sqrt(num / den) <= 1e-6))
        fail_msg("accumulated gradients are %.3g away from twice one batch's", sqrt(num / den));
    dt_model_train_batch(m, &b, 0.05f, false, NULL, NULL);
    assert_memory_equal(once, m->grads, m->n_params * sizeof *once);
    free(once);
    dt_model_destroy(m);
    dt_safetensors_release(&f);
}

/* trainer.model's gpt2 keys and trainer.recompute, through the job spec;
 * heads that do not split n_embd are refused naming the key. */
static void spec_keys(void **state)
{
    (void)state;
    static const char ok[] = "name: t\ntrainer:\n"
                             "  model: {type: gpt2, n_layer: 2, n_head: 4, n_embd: 64, vocab_size: 256, "
                             "block_size: 128}\n"
                             "  data: {dataset: tokens, train: t.bin, seq_len: 128}\n" /* gpt2 reads tokens */
                             "  recompute: block\n";
    struct dt_job *job = NULL;
    if (dt_job_load_string(ok, sizeof ok - 1, "t.yaml", &job))
        fail_msg("%s", dt_error_last());
    const struct dt_trainer_spec *t = job->trainer;
    assert_string_equal(t->model.type, "gpt2");
    assert_int_equal(t->model.n_layer, 2);
    assert_int_equal(t->model.n_head, 4);
    assert_int_equal(t->model.n_embd, 64);
    assert_int_equal(t->model.vocab_size, 256);
    assert_int_equal(t->model.block_size, 128);
    assert_int_equal(t->recompute, DT_RECOMPUTE_BLOCK);
    dt_job_free(job);
    static const char defaults[] =
        "name: t\ntrainer:\n  model: {type: gpt2}\n  data: {dataset: tokens, train: t.bin, seq_len: 8}\n";
    assert_int_equal(dt_job_load_string(defaults, sizeof defaults - 1, "t.yaml", &job), 0);
    assert_int_equal(job->trainer->model.n_layer, 12);
    assert_int_equal(job->trainer->model.n_embd, 768);
    assert_int_equal(job->trainer->model.vocab_size, 50257);
    assert_int_equal(job->trainer->model.block_size, 1024);
    assert_int_equal(job->trainer->recompute, DT_RECOMPUTE_NONE);
    dt_job_free(job);
    static const char bad[] = "name: t\ntrainer:\n  model: {type: gpt2, n_head: 5, n_embd: 64}\n";
    assert_int_not_equal(dt_job_load_string(bad, sizeof bad - 1, "t.yaml", &job), 0);
    assert_non_null(strstr(dt_error_last(), "n_embd"));
    assert_non_null(strstr(dt_error_last(), "multiple of n_head (5)"));
    static const char big[] = "name: t\ntrainer:\n  model: {type: gpt2, n_layer: 0}\n";
    assert_int_not_equal(dt_job_load_string(big, sizeof big - 1, "t.yaml", &job), 0);
    assert_non_null(strstr(dt_error_last(), "n_layer"));
    static const char rc[] = "name: t\ntrainer:\n  recompute: all\n";
    assert_int_not_equal(dt_job_load_string(rc, sizeof rc - 1, "t.yaml", &job), 0);
    assert_non_null(strstr(dt_error_last(), "recompute"));
}

int main(void)
{
    dt_kernels_cpu.set_threads(2);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(c1_matches_torch),
        cmocka_unit_test(c2_matches_torch),
        cmocka_unit_test(bf16_autocast_matches_torch),
        cmocka_unit_test(fp16_autocast_matches_torch),
        cmocka_unit_test(adamw_ten_steps_match_torch),
        cmocka_unit_test(recompute_modes_same_bits),
        cmocka_unit_test(threads_same_bits),
        cmocka_unit_test(accumulate_adds),
        cmocka_unit_test(padding_invisible),
        cmocka_unit_test(shorter_sequences),
        cmocka_unit_test(init_statistics),
        cmocka_unit_test(hf_names_and_shapes),
        cmocka_unit_test(ready_ranges_top_down),
        cmocka_unit_test(bad_batches_refused),
        cmocka_unit_test(spec_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
