/* test_cuda_gpt2.c - GPT-2's GPU half (worker/models/gpt2_cuda.c, through
 * its ops table) against the host model (gpt2.c in fp32, itself held to
 * PyTorch by tests/unit/test_gpt2.c) on small configurations: the loss, the
 * hit count and every parameter gradient, in fp32 and bf16; accumulation
 * doubling the gradients and the running loss; recompute gelu and block
 * against none; an evaluation forward leaving the gradients alone; backward's
 * ready reports (decreasing, ending at 0, on the compute stream); the weight
 * gradients on a second stream (DTRAIN_CUDA_WGRAD_STREAM=1) against one;
 * autocast rounding (DTRAIN_CUDA_ROUNDING=autocast) in bf16; act_bytes's
 * order of the modes; fp16 refused with a sentence.
 *
 * Configurations: c1 (L2 H2 C32 V67, T8 of block 16: wpe's unreached rows
 * must be zeroed), c2 (L2 H2 C128 V300 T64: head size 64, as GPT-2's), c3
 * (L1 H2 C128 V131 T128 B65: 8320 rows, two classifier chunks of 8192 and
 * 128).  The GPU gradient arena starts filled with 1000 so that any gradient
 * backward fails to write shows; each state is made for one more sequence
 * than the batch has.  The context's autotuning is off: each GEMM shape
 * runs one algorithm, so the same inputs give the same bits.
 *
 * Tolerances, |got - want| <= atol + rtol |want| per element, with atol =
 * rtol * max |want| over the tensor (elements that are sums of cancelling
 * terms carry absolute rounding error of the tensor's scale):
 *   fp32: rtol 1e-4 (another summation order and flash-style attention:
 *   measured differences are ~1e-6; tf32 stays off);
 *   bf16: rtol 2e-2 against the fp32 reference: bf16 keeps 8 bits (2^-8 =
 *   3.9e-3 per rounding), activations are rounded at each layer's output and
 *   backward compounds it over 2 blocks.  The host model's own bf16
 *   autocast, which rounds at more places than the GPU (scores, scaled
 *   scores), is within 0.41 of this tolerance of its fp32 on these three
 *   configurations (worst: ln_1.weight, 8.2e-3 of the scale).
 *   The loss: 1e-5 relative in fp32, 1e-3 in bf16 (the host's bf16 is 2e-5
 *   away).
 *   recompute block == none bit for bit (the same kernels on the same
 *   inputs); gelu to the tolerances above: its recomputation (an own
 *   kernel) may differ from the GEMM epilogue's GELU (cuBLASLt's own tanh,
 *   held to 2e-5 by test_cuda_linear.c), which only reaches mlp.c_proj's
 *   weight gradient; the loss is the same forward, bit for bit.
 */
#include "tests/gpu/gpu_buffers.h"
#include "worker/cuda/model_cuda.h"
#include "worker/models/gpt2_internal.h"
#include "worker/models/model.h"

struct cfg {
    const char *tag;
    int L, H, C, V, block, B, T;
};

static const struct cfg C1 = {"c1", 2, 2, 32, 67, 16, 3, 8};
static const struct cfg C2 = {"c2", 2, 2, 128, 300, 64, 2, 64};
static const struct cfg C3 = {"c3", 1, 2, 128, 131, 128, 65, 128};

static struct dt_model *host_model(const struct cfg *c, enum dt_recompute rc)
{
    static struct dt_model_spec s;
    s = (struct dt_model_spec){.type = "gpt2",
                               .n_layer = c->L,
                               .n_head = c->H,
                               .n_embd = c->C,
                               .vocab_size = c->V,
                               .block_size = c->block};
    struct dt_model_config mc = {.spec = &s,
                                 .k = &dt_kernels_cpu,
                                 .max_batch = c->B + 1,
                                 .seed = 1234,
                                 .recompute = rc,
                                 .data = {.kind = DT_BATCH_TOKENS, .seq_len = c->T, .vocab = c->V}};
    struct dt_model *m = NULL;
    if (dt_model_create(&mc, &m)) {
        printf("not ok - gpt2 %s on the host: %s\nBail out!\n", c->tag, dt_error_last());
        exit(1);
    }
    return m;
}

/* ---- the host reference ---- */

struct ref {
    double loss;
    int64_t hits;
    float *grads; /* n_params */
};

static struct ref host_reference(struct dt_model *m, const struct cfg *c, int32_t *x, int32_t *y)
{
    struct dt_batch b = {.kind = DT_BATCH_TOKENS, .n = c->B, .T = c->T, .inputs = x, .targets = y};
    int N = c->B * c->T;
    struct ref r = {0};
    r.loss = dt_model_eval_batch(m, &b, &r.hits);
    double loss = dt_model_train_batch(m, &b, 1.0f / (float)N, false, NULL, NULL);
    if (isnan(loss) || isnan(r.loss)) {
        printf("not ok - gpt2 %s host reference: %s\nBail out!\n", c->tag, dt_error_last());
        exit(1);
    }
    r.grads = malloc(m->n_params * sizeof(float));
    memcpy(r.grads, m->grads, m->n_params * sizeof(float));
    return r;
}

/* ---- the GPU side ---- */

struct ready_log {
    int n;
    size_t lo[256];
    cudaStream_t on[256];
};

static int record_ready(void *ctx, size_t lo, cudaStream_t on)
{
    struct ready_log *r = ctx;
    if (r->n < 256)
        r->lo[r->n] = lo, r->on[r->n] = on;
    r->n++;
    return 0;
}

struct gpu {
    struct dt_cuda_ctx *k;
    const struct dt_model_cuda_ops *ops;
    struct dt_model_cuda_env env;
    void *state;
    float *p, *g, *loss;
    void *plow;
    int32_t *x, *y;
    int *hits;
    double *loss_acc;
    size_t n;
};

static void *dev_copy(const void *h, size_t bytes)
{
    void *d = gt_alloc(bytes);
    gt_die_cuda(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice), "cudaMemcpy up");
    return d;
}

/* The engine's part, for model m: arenas, batch, env; then ops->create. */
/* kw: the weight-gradient stream's context (gpt2 uses it when
 * DTRAIN_CUDA_WGRAD_STREAM=1 at create), or NULL. */
static int gpu_make(struct gpu *G, struct dt_cuda_ctx *k, struct dt_cuda_ctx *kw, const struct dt_model *m,
                    const struct cfg *c, enum dt_cuda_dtype t, const int32_t *x, const int32_t *y)
{
    memset(G, 0, sizeof *G);
    G->k = k;
    G->ops = m->ops->cuda;
    G->n = m->n_params;
    size_t ntok = (size_t)(c->B + 1) * (size_t)c->T;
    G->p = dev_copy(m->params, G->n * sizeof(float));
    G->g = gt_alloc(G->n * sizeof(float));
    G->loss = gt_alloc(sizeof(float));
    G->hits = gt_alloc(sizeof(int));
    G->loss_acc = gt_alloc(sizeof(double));
    G->x = gt_alloc(ntok * sizeof(int32_t));
    G->y = gt_alloc(ntok * sizeof(int32_t));
    gt_die_cuda(cudaMemcpy(G->x, x, (size_t)c->B * c->T * sizeof(int32_t), cudaMemcpyHostToDevice), "x up");
    gt_die_cuda(cudaMemcpy(G->y, y, (size_t)c->B * c->T * sizeof(int32_t), cudaMemcpyHostToDevice), "y up");
    if (t == DT_CUDA_BF16) {
        G->plow = gt_alloc(G->n * 2);
        if (dt_cuda_cast(k, DT_CUDA_BF16, G->plow, DT_CUDA_F32, G->p, G->n) < 0)
            return -1;
    }
    float *fill = malloc(G->n * sizeof(float)); /* what backward must overwrite */
    for (size_t i = 0; i < G->n; i++)
        fill[i] = 1000.0f;
    gt_die_cuda(cudaMemcpy(G->g, fill, G->n * sizeof(float), cudaMemcpyHostToDevice), "g up");
    free(fill);
    G->env = (struct dt_model_cuda_env){.k = k,
                                        .kw = kw,
                                        .t = t,
                                        .max_batch = c->B + 1,
                                        .p = G->p,
                                        .plow = G->plow,
                                        .g = G->g,
                                        .x = G->x,
                                        .y = G->y,
                                        .seq_len = c->T};
    return G->ops->create(m, &G->env, &G->state);
}

static void gpu_free(struct gpu *G)
{
    if (G->ops && G->state)
        G->ops->destroy(G->state);
    cudaFree(G->p), cudaFree(G->g), cudaFree(G->plow), cudaFree(G->loss), cudaFree(G->hits);
    cudaFree(G->loss_acc), cudaFree(G->x), cudaFree(G->y);
}

/* One forward_loss (+ backward when `train`); the loss and hits read back. */
static int gpu_step(struct gpu *G, const struct cfg *c, bool train, bool accumulate, struct ready_log *rl,
                    float *loss, int *hits)
{
    struct dt_model_cuda_loss ls = {.backward = train,
                                    .accumulate = accumulate,
                                    .dscale = 1.0f / (float)(c->B * c->T),
                                    .loss_scale = NULL,
                                    .loss_sum = G->loss,
                                    .correct = G->hits,
                                    .loss_acc = G->loss_acc};
    int rc = G->ops->forward_loss(G->state, c->B, &ls);
    if (!rc && train)
        rc = G->ops->backward(G->state, c->B, accumulate, rl ? record_ready : NULL, rl);
    if (!rc)
        rc = dt_cuda_sync(G->k);
    if (rc)
        return rc;
    gt_down(loss, G->loss, 1, DT_CUDA_F32);
    gt_die_cuda(cudaMemcpy(hits, G->hits, sizeof(int), cudaMemcpyDeviceToHost), "hits down");
    return 0;
}

static double loss_acc(const struct gpu *G)
{
    double v = 0;
    gt_die_cuda(cudaMemcpy(&v, G->loss_acc, sizeof v, cudaMemcpyDeviceToHost), "loss_acc down");
    return v;
}

static float *grads_down(const struct gpu *G)
{
    float *h = malloc(G->n * sizeof(float));
    gt_down(h, G->g, G->n, DT_CUDA_F32);
    return h;
}

/* ---- comparing ---- */

static double rtol_of(enum dt_cuda_dtype t)
{
    return t == DT_CUDA_BF16 ? 2e-2 : 1e-4;
}

/* Every tensor of m: got against want * factor at rtol (atol = rtol * the
 * tensor's max); one line naming the worst tensor. */
static void check_grads(const char *what, const struct dt_model *m, const float *got, const float *want,
                        double factor, double rtol)
{
    double worst = 0;
    int wt = 0;
    size_t wat = 0;
    double wwant = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const struct dt_model_tensor *t = &m->tensors[i];
        size_t n = dt_model_tensor_numel(t), at;
        double *w = malloc(n * sizeof *w), mx = 1e-30;
        for (size_t j = 0; j < n; j++) {
            w[j] = (double)want[t->offset + j] * factor;
            mx = fabs(w[j]) > mx ? fabs(w[j]) : mx;
        }
        double r = gt_worst(got + t->offset, w, n, rtol * mx, rtol, &at);
        if (!(r <= worst)) {
            worst = isnan(r) ? INFINITY : r, wt = i, wat = at, wwant = w[at];
        }
        free(w);
    }
    const struct dt_model_tensor *t = &m->tensors[wt];
    if (worst <= 1.0)
        gt_result(1, "%s: %d tensors, worst %.2f of tolerance (%s)", what, m->n_tensors, worst, t->name);
    else
        gt_result(0, "%s: %s[%zu] is %.9g, expected %.9g (rtol %g of the tensor's max)", what, t->name, wat,
                  (double)got[t->offset + wat], wwant, rtol);
}

static void check_loss(const char *what, double got, double want, double rtol)
{
    double err = fabs(got - want) / fabs(want);
    gt_result(err <= rtol, "%s: %.9g, expected %.9g (relative %.2g, limit %g)", what, got, want, err, rtol);
}

/* Decreasing lo from ln_f down to 0, all on k's stream, 4 per block. */
/* sw: the weight-gradient stream, where each block's reports of its c_fc
 * and c_attn ranges (the 1st and 3rd of its four) must come from; NULL:
 * every report on s. */
static void check_ready(const char *what, const struct ready_log *r, const struct dt_model *m,
                        const struct cfg *c, cudaStream_t s, cudaStream_t sw)
{
    const struct dt_model_tensor *lnf = dt_model_find_tensor(m, "transformer.ln_f.weight");
    bool ok = r->n == 2 + 4 * c->L && r->n <= 256 && lnf && r->lo[0] == lnf->offset && r->lo[r->n - 1] == 0;
    for (int i = 0; ok && i < r->n; i++) {
        bool weights = sw && i > 0 && i < r->n - 1 && (i - 1) % 2 == 0;
        ok = r->on[i] == (weights ? sw : s) && (i == 0 || r->lo[i] < r->lo[i - 1]);
    }
    gt_result(ok, "%s: %d ready reports, decreasing from ln_f.weight (%zu) to 0, on the %s", what, r->n,
              lnf ? lnf->offset : 0, sw ? "stream that wrote each range" : "compute stream");
}

/* ---- the runs ---- */

static void tokens(const struct cfg *c, int32_t **x, int32_t **y)
{
    size_t n = (size_t)c->B * (size_t)c->T;
    *x = malloc(n * sizeof **x);
    *y = malloc(n * sizeof **y);
    for (size_t i = 0; i < n; i++) {
        (*x)[i] = (int32_t)gt_uniform(0, (float)c->V) % c->V;
        (*y)[i] = (int32_t)gt_uniform(0, (float)c->V) % c->V;
    }
}

static bool made(int rc, const char *what)
{
    if (rc)
        gt_result(0, "%s: %s", what, dt_error_last());
    return rc == 0;
}

/* recompute gelu and block against none's gradients `base` (same params and batch). */
static void recompute_modes(struct dt_cuda_ctx *k, const struct cfg *c, enum dt_cuda_dtype t,
                            const int32_t *x, const int32_t *y, float base_loss, const float *base)
{
    for (int rc = DT_RECOMPUTE_GELU; rc <= DT_RECOMPUTE_BLOCK; rc++) {
        const char *mode = rc == DT_RECOMPUTE_GELU ? "gelu" : "block";
        char what[128];
        snprintf(what, sizeof what, "gpt2 %s %s recompute %s", c->tag, gt_tname(t), mode);
        struct dt_model *m = host_model(c, (enum dt_recompute)rc);
        struct gpu G;
        float loss;
        int hits;
        if (made(gpu_make(&G, k, NULL, m, c, t, x, y), what) &&
            made(gpu_step(&G, c, true, false, NULL, &loss, &hits), what)) {
            float *got = grads_down(&G);
            if (rc == DT_RECOMPUTE_BLOCK) {
                bool same = loss == base_loss && !memcmp(got, base, m->n_params * sizeof(float));
                gt_result(same, "%s: loss and every gradient bit for bit as none", what);
            } else {
                check_loss(what, loss, base_loss, 0);
                check_grads(what, m, got, base, 1.0, rtol_of(t));
            }
            free(got);
        }
        gpu_free(&G);
        dt_model_destroy(m);
    }
}

/* DTRAIN_CUDA_WGRAD_STREAM=1: the weight gradients on kw's stream beside the
 * chain on k's (gpt2_cuda.c, Streams), against one stream's `base`, for
 * recompute none and block (whose shared buffers block l+1's weight
 * gradients still read when block l recomputes them), then a second
 * micro-batch.  The chain is the same kernels on the same inputs, so the
 * loss is the same bits; a weight-gradient GEMM on kw's context may take
 * another cuBLASLt algorithm (a different fp32 summation order), hence 1e-5
 * relative there, far below what a race leaves (a buffer overwritten while
 * read gives errors of the gradient's own size). */
static void two_streams(struct dt_cuda_ctx *k, struct dt_cuda_ctx *kw, const struct cfg *c,
                        enum dt_cuda_dtype t, const int32_t *x, const int32_t *y, float base_loss, const float *base)
{
    setenv("DTRAIN_CUDA_WGRAD_STREAM", "1", 1);
    static const enum dt_recompute modes[] = {DT_RECOMPUTE_NONE, DT_RECOMPUTE_BLOCK};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        enum dt_recompute rc = modes[i];
        char what[160];
        snprintf(what, sizeof what, "gpt2 %s %s two streams, recompute %s", c->tag, gt_tname(t),
                 rc == DT_RECOMPUTE_NONE ? "none" : "block");
        struct dt_model *m = host_model(c, rc);
        struct gpu G;
        float loss, loss2;
        int hits;
        struct ready_log rl = {0};
        if (made(gpu_make(&G, k, kw, m, c, t, x, y), what) &&
            made(gpu_step(&G, c, true, false, &rl, &loss, &hits), what)) {
            float *got = grads_down(&G);
            gt_result(loss == base_loss, "%s: the loss bit for bit as one stream's (%.9g, %.9g)", what, loss,
                      base_loss);
            check_grads(what, m, got, base, 1.0, 1e-5);
            check_ready(what, &rl, m, c, dt_cuda_stream(k), dt_cuda_stream(kw));
            char ac[200];
            snprintf(ac, sizeof ac, "%s, accumulate", what);
            if (made(gpu_step(&G, c, true, true, NULL, &loss2, &hits), ac)) {
                float *g2 = grads_down(&G);
                check_grads(ac, m, g2, got, 2.0, 1e-5);
                free(g2);
            }
            free(got);
        }
        gpu_free(&G);
        dt_model_destroy(m);
    }
    unsetenv("DTRAIN_CUDA_WGRAD_STREAM");
}

/* DTRAIN_CUDA_ROUNDING=autocast (gpt2_cuda.c, rounding_create): the loss
 * and gradients still the host's within bf16's tolerance; every Linear
 * weight and bias gradient a bf16 value (low 16 bits zero), which the
 * default leaves fp32; and recompute block the same bits as none (the
 * residual projections' temporary in dln's memory outlives nothing that
 * backward's recomputation needs). */
static void autocast_rounding(struct dt_cuda_ctx *k, const struct cfg *c, const int32_t *x, const int32_t *y,
                              const struct ref *r)
{
    static const int linear[] = {G_QKVW, G_QKVB, G_ATTPW, G_ATTPB, G_FCW, G_FCB, G_FCPW, G_FCPB};
    const size_t C = (size_t)c->C, size[] = {3 * C * C, 3 * C, C * C, C, 4 * C * C, 4 * C, 4 * C * C, C};
    setenv("DTRAIN_CUDA_ROUNDING", "autocast", 1);
    float loss[2] = {0, 0}, *g[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        enum dt_recompute rc = i ? DT_RECOMPUTE_BLOCK : DT_RECOMPUTE_NONE;
        char what[160];
        snprintf(what, sizeof what, "gpt2 %s bf16 autocast rounding, recompute %s", c->tag, i ? "block" : "none");
        struct dt_model *m = host_model(c, rc);
        struct gpu G;
        int hits;
        if (made(gpu_make(&G, k, NULL, m, c, DT_CUDA_BF16, x, y), what) &&
            made(gpu_step(&G, c, true, false, NULL, &loss[i], &hits), what)) {
            g[i] = grads_down(&G);
            if (i == 0) {
                check_loss(what, loss[0], r->loss, 1e-3);
                check_grads(what, m, g[0], r->grads, 1.0, rtol_of(DT_CUDA_BF16));
                const struct dt_gpt2 *gp = (const struct dt_gpt2 *)m;
                size_t n = 0, off = 0;
                for (int l = 0; l < gp->L; l++)
                    for (size_t j = 0; j < sizeof linear / sizeof linear[0]; j++) {
                        size_t a = gp->blk[l * G_PER_BLOCK + linear[j]];
                        for (size_t e = a; e < a + size[j]; e++) {
                            uint32_t u;
                            memcpy(&u, &g[0][e], 4);
                            off += (u & 0xffffu) != 0;
                            n++;
                        }
                    }
                gt_result(off == 0 && n > 0, "%s: all %zu Linear weight and bias gradients are bf16 values (%zu not)",
                          what, n, off);
            } else if (g[0]) {
                gt_result(loss[1] == loss[0] && !memcmp(g[1], g[0], G.n * sizeof(float)),
                          "%s: the loss and gradients bit for bit as recompute none's", what);
            }
        }
        gpu_free(&G);
        dt_model_destroy(m);
    }
    free(g[0]), free(g[1]);
    unsetenv("DTRAIN_CUDA_ROUNDING");
    dt_cuda_set_fusion(k, DT_CUDA_FUSE_AUTO); /* the model set GEMM + own kernels on the context */
}

static struct dt_cuda_ctx *kw_ctx; /* main's second context: the weight-gradient stream */

static void run_config(struct dt_cuda_ctx *k, const struct cfg *c, enum dt_cuda_dtype t)
{
    int32_t *x, *y;
    tokens(c, &x, &y);
    struct dt_model *m = host_model(c, DT_RECOMPUTE_NONE);
    struct ref r = host_reference(m, c, x, y);
    int N = c->B * c->T;
    char what[128];
    snprintf(what, sizeof what, "gpt2 %s %s (B %d, T %d)", c->tag, gt_tname(t), c->B, c->T);
    struct gpu G;
    float loss, loss2, eloss;
    int hits, ehits;
    struct ready_log rl = {0};
    if (!made(gpu_make(&G, k, NULL, m, c, t, x, y), what) ||
        !made(gpu_step(&G, c, true, false, &rl, &loss, &hits), what)) {
        gpu_free(&G);
        goto out;
    }
    double lrt = t == DT_CUDA_BF16 ? 1e-3 : 1e-5;
    check_loss(what, loss, r.loss, lrt);
    if (t == DT_CUDA_F32)
        gt_result(hits == r.hits, "%s: %d argmax hits, the host has %lld", what, hits, (long long)r.hits);
    else /* near-ties of a random model's logits may flip in bf16 */
        gt_result(abs(hits - (int)r.hits) <= N / 20 + 1, "%s: %d argmax hits, the host has %lld", what, hits,
                  (long long)r.hits);
    float *g1 = grads_down(&G);
    check_grads(what, m, g1, r.grads, 1.0, rtol_of(t));
    check_ready(what, &rl, m, c, dt_cuda_stream(k), NULL);
    gt_result(fabs(loss_acc(&G) - loss) <= 1e-6 * fabs(loss), "%s: loss_acc holds the loss sum", what);

    /* evaluation: the same loss, the gradients untouched */
    char ev[160];
    snprintf(ev, sizeof ev, "%s evaluation", what);
    if (made(gpu_step(&G, c, false, false, NULL, &eloss, &ehits), ev)) {
        float *ge = grads_down(&G);
        check_loss(ev, eloss, loss, 1e-6);
        gt_result(ehits == hits && !memcmp(ge, g1, G.n * sizeof(float)), "%s: same hits, gradients untouched",
                  ev);
        free(ge);
    }

    /* accumulate: a second micro-batch adds the same gradients (the head's dwte in forward_loss included) */
    char ac[160];
    snprintf(ac, sizeof ac, "%s accumulate", what);
    if (made(gpu_step(&G, c, true, true, NULL, &loss2, &hits), ac)) {
        float *g2 = grads_down(&G);
        check_grads(ac, m, g2, r.grads, 2.0, rtol_of(t));
        check_grads(ac, m, g2, g1, 2.0, 1e-5);
        double acc = loss_acc(&G), want = (double)loss + eloss + loss2;
        gt_result(fabs(acc - want) <= 1e-6 * fabs(want),
                  "%s: loss_acc %.9g is the sum of the three losses %.9g", ac, acc, want);
        free(g2);
    }
    gpu_free(&G);
    recompute_modes(k, c, t, x, y, loss, g1);
    two_streams(k, kw_ctx, c, t, x, y, loss, g1);
    if (t == DT_CUDA_BF16)
        autocast_rounding(k, c, x, y, &r);
    free(g1);
out:
    free(r.grads);
    dt_model_destroy(m);
    free(x), free(y);
}

/* act_bytes: the modes keep less in order; fp16 is refused with a sentence. */
static void memory_and_refusal(struct dt_cuda_ctx *k)
{
    struct dt_model *m = host_model(&C2, DT_RECOMPUTE_NONE);
    const struct dt_model_cuda_ops *ops = m->ops->cuda;
    if (!ops->act_bytes) {
        gt_result(0, "gpt2 act_bytes is set");
    } else {
        size_t b[3];
        for (int rc = 0; rc < 3; rc++)
            b[rc] = ops->act_bytes(m, C2.B, DT_CUDA_BF16, rc);
        gt_result(b[0] > b[1] && b[1] > b[2] && b[2] > 0,
                  "gpt2 act_bytes c2 bf16: none %zu > gelu %zu > block %zu bytes", b[0], b[1], b[2]);
        size_t f = ops->act_bytes(m, C2.B, DT_CUDA_F32, 0), b2 = ops->act_bytes(m, 2 * C2.B, DT_CUDA_BF16, 0);
        gt_result(f > b[0] && b2 > b[0], "gpt2 act_bytes grows with fp32 (%zu) and with rows (%zu)", f, b2);
    }
    int32_t *x, *y;
    tokens(&C2, &x, &y);
    struct gpu G;
    int rc = gpu_make(&G, k, NULL, m, &C2, DT_CUDA_F16, x, y);
    gt_result(rc != 0 && strstr(dt_error_last(), "bf16"), "gpt2 on cuda refuses fp16: %s",
              rc ? dt_error_last() : "(accepted)");
    gpu_free(&G);
    free(x), free(y);
    dt_model_destroy(m);
}

int main(void)
{
    if (gt_need_gpu("test_cuda_gpt2") < 0)
        return 0;
    struct dt_cuda_ctx *k = NULL;
    if (dt_cuda_ctx_create(0, 0, &k) < 0) {
        printf("not ok - dt_cuda_ctx_create: %s\n", dt_error_last());
        return 1;
    }
    dt_cuda_set_autotune(k, false);
    if (dt_cuda_ctx_create(0, 0, &kw_ctx) < 0) {
        printf("not ok - dt_cuda_ctx_create (the weight-gradient stream's): %s\n", dt_error_last());
        return 1;
    }
    dt_cuda_set_autotune(kw_ctx, false);
    memory_and_refusal(k);
    const enum dt_cuda_dtype types[] = {DT_CUDA_F32, DT_CUDA_BF16};
    for (int ti = 0; ti < 2; ti++) {
        run_config(k, &C1, types[ti]);
        run_config(k, &C2, types[ti]);
        run_config(k, &C3, types[ti]);
    }
    dt_cuda_ctx_destroy(kw_ctx);
    dt_cuda_ctx_destroy(k);
    return gt_finish();
}
