/* mlp.c - the MLP (trainer.model.type mlp): Linear layers with ReLU or GELU
 * between them, as nn.Sequential(Linear, act, ..., Linear) with softmax
 * cross-entropy, behind the model interface (model.h).
 *
 * Each layer's forward and backward are written side by side with the math
 * above them, as llm.c's train_gpt2.c keeps them, each in fp32 and under
 * autocast.  Every arithmetic loop goes through the CPU kernel table
 * (worker/kernels.h).  The GPU half is mlp_cuda.c.
 *
 * Autocast (bf16 or fp16) is torch.autocast's policy for these ops: a Linear
 * casts its input, weight and bias to the low type and runs the GEMM there
 * with fp32 accumulation, its output is low precision; ReLU/GELU run in the
 * type they are given; cross_entropy casts the logits to fp32.  Backward
 * mirrors it: the gradient entering the logits' cast is rounded to the low
 * type, every layer's dz, dW, db and dx come out of low-precision
 * GEMMs/reductions, and each parameter gradient is cast back to fp32 and
 * accumulated there (the .grad of an fp32 master weight).  Low-precision
 * values are kept in float arrays holding exactly representable values: a
 * product of two bf16 (8-bit) or fp16 (11-bit) significands is exact in
 * float, so sgemm over rounded inputs is a low-precision GEMM with fp32
 * accumulation (OpenBLAS has sbgemm, but Debian's 0.3.21 build leaves it
 * out).  This costs a rounding pass per tensor, not memory savings; on CPU
 * AMP is for testing what CUDA runs fast.
 *
 * Not for the loss scale (worker/optim/grad_scaler.c scales dloss and unscales
 * gradients) or the optimizer.
 */
#include "worker/models/mlp_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/arena.h"
#include "base/clock.h"
#include "base/error.h"
#include "worker/data/sampler.h"

#ifdef DT_HAVE_CUDA
extern const struct dt_model_cuda_ops dt_mlp__cuda; /* mlp_cuda.c */
#define MLP_CUDA (&dt_mlp__cuda)
#else
#define MLP_CUDA NULL
#endif

static struct dt_mlp *mlp(struct dt_model *m)
{
    return (struct dt_mlp *)m;
}

/* ---- layout, initialisation, buffers ---- */

/* torch.nn.Linear.reset_parameters: kaiming_uniform_(a=sqrt(5)) gives
 * bound = gain * sqrt(3 / fan_in) with gain = sqrt(2 / (1 + 5)), i.e.
 * 1/sqrt(fan_in); the bias uses the same bound.  Uniform from 24 bits of MT19937. */
static void init_uniform(float *x, size_t n, float bound, struct dt_mt19937 *g)
{
    for (size_t i = 0; i < n; i++) {
        float u = (float)(dt_mt19937_next(g) >> 8) * (1.0f / 16777216.0f);
        x[i] = (2.0f * u - 1.0f) * bound;
    }
}

/* nn.Sequential(Linear, act, Linear, act, ..., Linear): Linear l is module 2l. */
static void name_tensors(struct dt_mlp *n, int l)
{
    const struct dt_mlp_layer *L = &n->layer[l];
    struct dt_model_tensor *w = &n->tensors[2 * l], *b = w + 1;
    *w = (struct dt_model_tensor){
        .ndim = 2, .shape = {L->out, L->in}, .offset = L->w, .decay = true, .row_chunks = true};
    *b = (struct dt_model_tensor){.ndim = 1, .shape = {L->out}, .offset = L->b, .decay = true};
    snprintf(w->name, sizeof w->name, "layers.%d.weight", 2 * l);
    snprintf(b->name, sizeof b->name, "layers.%d.bias", 2 * l);
}

static int layout(struct dt_mlp *n, const struct dt_model_spec *s)
{
    size_t off = 0;
    int prev = n->in;
    for (int l = 0; l < n->n_layers; l++) {
        struct dt_mlp_layer *L = &n->layer[l];
        L->in = prev;
        L->out = l < s->n_hidden ? s->hidden[l] : n->classes;
        if (L->out < 1)
            return dt_error_set(DT_EINVAL, "model: layer %d has width %d", l, L->out);
        L->act = l == n->n_layers - 1           ? DT_KACT_NONE
                 : s->activation == DT_ACT_GELU ? DT_KACT_GELU
                                                : DT_KACT_RELU;
        L->w = off;
        off += (size_t)L->out * (size_t)L->in;
        L->b = off;
        off += (size_t)L->out;
        prev = L->out;
        name_tensors(n, l);
    }
    n->m.n_params = off;
    return 0;
}

static int alloc_buffers(struct dt_mlp *n)
{
    size_t acts = 0, widest = (size_t)n->in;
    for (int l = 0; l < n->n_layers; l++) {
        size_t per = (size_t)n->max_batch * (size_t)n->layer[l].out;
        acts += per * (n->layer[l].act == DT_KACT_GELU ? 2 : 1);
        if ((size_t)n->layer[l].out > widest)
            widest = (size_t)n->layer[l].out;
    }
    size_t scratch = (size_t)n->max_batch * widest;
    int rc = dt_model__alloc_arenas(&n->m);
    if (rc)
        return rc;
    n->acts = dt_arena_calloc(acts + 2 * scratch + (size_t)n->max_batch * (size_t)n->classes, sizeof(float));
    if (!n->acts)
        return dt_error_set(DT_ENOMEM, "model: no memory for %zu activations", acts);
    float *p = n->acts;
    for (int l = 0; l < n->n_layers; l++) {
        struct dt_mlp_layer *L = &n->layer[l];
        size_t per = (size_t)n->max_batch * (size_t)L->out;
        L->h = p;
        p += per;
        if (L->act == DT_KACT_GELU) {
            L->z = p;
            p += per;
        }
    }
    n->scratch[0] = p;
    n->scratch[1] = p + scratch;
    n->dlogits = p + 2 * scratch;
    return 0;
}

extern const struct dt_model_ops dt_model__mlp;

/* An MLP in -> hidden[0..n_hidden) -> classes; parameters get PyTorch's
 * nn.Linear default initialisation (U(-1/sqrt(in), 1/sqrt(in)) for weight
 * and bias) from an MT19937 seeded with the seed. */
static int mlp_create(const struct dt_model_config *c, struct dt_model **out)
{
    const struct dt_model_spec *s = c->spec;
    if (c->max_batch < 1 || c->data.features < 1 || c->data.classes < 2 || s->n_hidden < 0)
        return dt_error_set(DT_EINVAL, "model: bad sizes (in %d, classes %d, batch %d, %d hidden layers)",
                            c->data.features, c->data.classes, c->max_batch, s->n_hidden);
    struct dt_mlp *n = calloc(1, sizeof *n);
    if (!n)
        return dt_error_set(DT_ENOMEM, "model: no memory");
    n->m.ops = &dt_model__mlp;
    n->m.k = c->k;
    n->in = c->data.features;
    n->classes = c->data.classes;
    n->max_batch = c->max_batch;
    n->m.logits_cols = n->m.logits_stride = n->classes;
    n->n_layers = s->n_hidden + 1;
    n->layer = calloc((size_t)n->n_layers, sizeof *n->layer);
    n->tensors = calloc(2 * (size_t)n->n_layers, sizeof *n->tensors);
    n->m.tensors = n->tensors;
    n->m.n_tensors = 2 * n->n_layers;
    int rc = n->layer && n->tensors ? layout(n, s) : dt_error_set(DT_ENOMEM, "model: no memory");
    if (rc == 0)
        rc = alloc_buffers(n);
    if (rc) {
        dt_model_destroy(&n->m);
        return rc;
    }
    struct dt_mt19937 g;
    dt_mt19937_seed(&g, (uint32_t)c->seed);
    for (int l = 0; l < n->n_layers; l++) {
        const struct dt_mlp_layer *L = &n->layer[l];
        float bound = 1.0f / sqrtf((float)L->in);
        init_uniform(n->m.params + L->w, (size_t)L->out * (size_t)L->in, bound, &g);
        init_uniform(n->m.params + L->b, (size_t)L->out, bound, &g);
    }
    *out = &n->m;
    return 0;
}

static void mlp_destroy(struct dt_model *m)
{
    struct dt_mlp *n = mlp(m);
    free(n->params_lp);
    dt_arena_free(n->acts);
    free(n->layer);
    free(n->tensors);
    free(n);
}

/* Autocast's copies: the parameters and the input batch rounded, one layer's
 * gradients before rounding, a zero bias. */
static int mlp_set_precision(struct dt_model *m, enum dt_kprec p)
{
    struct dt_mlp *n = mlp(m);
    free(n->params_lp);
    n->params_lp = n->x_lp = n->wtmp = n->btmp = n->zeros = NULL;
    m->prec = p;
    if (p == DT_KPREC_F32)
        return 0;
    size_t wmax = 0, widest = 0;
    for (int l = 0; l < n->n_layers; l++) {
        size_t w = (size_t)n->layer[l].out * (size_t)n->layer[l].in;
        wmax = w > wmax ? w : wmax;
        widest = (size_t)n->layer[l].out > widest ? (size_t)n->layer[l].out : widest;
    }
    size_t xin = (size_t)n->max_batch * (size_t)n->in;
    n->params_lp = calloc(m->n_params + xin + wmax + 2 * widest, sizeof(float));
    if (!n->params_lp) {
        m->prec = DT_KPREC_F32;
        return dt_error_set(DT_ENOMEM, "model: no memory for the autocast copies (%zu parameters)",
                            m->n_params);
    }
    n->x_lp = n->params_lp + m->n_params;
    n->wtmp = n->x_lp + xin;
    n->btmp = n->wtmp + wmax;
    n->zeros = n->btmp + widest;
    return 0;
}

/* ---- one Linear layer and its activation: forward ---- */

/* Layer l forward:  z = x W^T + b,  h = act(z)   (x [B,in], W [out,in], h [B,out]).
 * Autocast:  h = round(act(round(x_lp W_lp^T + b_lp)))  (the GEMM accumulates
 * in fp32; the Linear's output is rounded once, the activation's again; for
 * ReLU the second rounding is exact).  GELU keeps its rounded input z for
 * backward. */
static void layer_forward(struct dt_mlp *n, int l, const float *x, int B)
{
    const struct dt_kernels *k = n->m.k;
    struct dt_mlp_layer *L = &n->layer[l];
    enum dt_kprec p = n->m.prec;
    if (p == DT_KPREC_F32) {
        k->matmul_forward(L->h, x, n->m.params + L->w, B, L->in, L->out);
        k->bias_act_forward(L->z, L->h, L->h, n->m.params + L->b, B, L->out, L->act);
        return;
    }
    size_t numel = (size_t)B * (size_t)L->out;
    const float *b = n->params_lp + L->b;
    k->matmul_forward(L->h, x, n->params_lp + L->w, B, L->in, L->out);
    if (L->act == DT_KACT_GELU) {
        k->bias_act_forward(NULL, L->z, L->h, b, B, L->out, DT_KACT_NONE);
        k->round_lowp(L->z, L->z, numel, p, false);
        k->bias_act_forward(L->z, L->h, L->z, n->zeros, B, L->out, DT_KACT_GELU);
    } else {
        k->bias_act_forward(NULL, L->h, L->h, b, B, L->out, L->act);
    }
    k->round_lowp(L->h, L->h, numel, p, false);
}

/* ---- one Linear layer and its activation: backward ---- */

/* dW of layer l in fp32, chunk by chunk from the last rows down
 * (dt_model_set_grad_chunk; chunks start on the kernels' row tiles, so they
 * hold the whole GEMM's bits); the bias gradient is already final, so the
 * first range reported also covers it. */
static void weight_grad(struct dt_mlp *n, int l, const float *dz, const float *x, int B, bool accumulate,
                        dt_model_ready_fn ready, void *ctx)
{
    const struct dt_kernels *k = n->m.k;
    const struct dt_mlp_layer *L = &n->layer[l];
    int R = dt_model_chunk_rows(&n->m, &n->tensors[2 * l]);
    size_t hi = L->b + (size_t)L->out;
    if (R >= L->out) {
        k->matmul_backward_w(n->m.grads + L->w, dz, x, B, L->in, L->out, accumulate);
        if (ready)
            ready(ctx, L->w, hi);
        return;
    }
    for (int top = L->out; top > 0;) {
        int r0 = dt_model__chunk_below(top, R);
        size_t lo = L->w + (size_t)r0 * (size_t)L->in;
        k->matmul_backward_w_rows(n->m.grads + lo, dz, x, B, L->in, L->out, r0, top - r0, accumulate);
        if (ready)
            ready(ctx, lo, hi);
        hi = lo;
        top = r0;
    }
}

/* Layer l backward, given dh = dloss/dh [B,out] (overwritten with dz), and
 * its input x [B,in]:
 *   dz = dh * act'(z)          db = sum_rows dz
 *   dW = dz^T x                (the last layer has no activation: dz = dlogits)
 * Autocast:  dz = round(dh * act'(z)), db = round(sum_rows dz),
 * dW = round(dz^T x_lp), each added in fp32 to the gradient arena; GELU's
 * derivative is not exact in the low type, so dz is rounded and summed again. */
static void layer_backward(struct dt_mlp *n, int l, float *dh, const float *x, int B, bool accumulate,
                           dt_model_ready_fn ready, void *ctx)
{
    const struct dt_kernels *k = n->m.k;
    struct dt_mlp_layer *L = &n->layer[l];
    enum dt_kprec p = n->m.prec;
    float *dz = dh; /* in place: dh is dead once dz is known */
    if (p == DT_KPREC_F32) {
        k->act_bias_backward(dz, n->m.grads + L->b, dh, L->z, L->h, B, L->out, L->act, accumulate);
        weight_grad(n, l, dz, x, B, accumulate, ready, ctx);
        return;
    }
    k->act_bias_backward(dz, n->btmp, dz, L->z, L->h, B, L->out, L->act, false);
    if (L->act == DT_KACT_GELU) {
        k->round_lowp(dz, dz, (size_t)B * (size_t)L->out, p, false);
        k->act_bias_backward(dz, n->btmp, dz, NULL, NULL, B, L->out, DT_KACT_NONE, false);
    }
    k->round_lowp(n->m.grads + L->b, n->btmp, (size_t)L->out, p, accumulate);
    k->matmul_backward_w(n->wtmp, dz, x, B, L->in, L->out, false);
    k->round_lowp(n->m.grads + L->w, n->wtmp, (size_t)L->out * (size_t)L->in, p, accumulate);
    if (ready)
        ready(ctx, L->w, L->b + (size_t)L->out);
}

/* The gradient of layer l's input, the previous layer's dh:  dx = dz W
 * (autocast: round(dz W_lp)).  The first layer's input needs none. */
static void input_grad(struct dt_mlp *n, int l, float *dx, const float *dz, int B)
{
    const struct dt_kernels *k = n->m.k;
    const struct dt_mlp_layer *L = &n->layer[l];
    if (n->m.prec == DT_KPREC_F32) {
        k->matmul_backward_x(dx, dz, n->m.params + L->w, B, L->in, L->out);
        return;
    }
    k->matmul_backward_x(dx, dz, n->params_lp + L->w, B, L->in, L->out);
    k->round_lowp(dx, dx, (size_t)B * (size_t)L->in, n->m.prec, false);
}

/* ---- the network ---- */

/* Returns the logits [B, classes]; under autocast the parameters and the
 * batch are rounded once first. */
static const float *forward(struct dt_mlp *n, const float *x, int B)
{
    const struct dt_kernels *k = n->m.k;
    if (n->m.prec != DT_KPREC_F32) {
        k->round_lowp(n->params_lp, n->m.params, n->m.n_params, n->m.prec, false);
        k->round_lowp(n->x_lp, x, (size_t)B * (size_t)n->in, n->m.prec, false);
        x = n->x_lp;
    }
    for (int l = 0; l < n->n_layers; l++) {
        layer_forward(n, l, x, B);
        x = n->layer[l].h;
    }
    return n->layer[n->n_layers - 1].h;
}

/* From dlogits (fp32, as the loss leaves it; autocast rounds it first, the
 * cast's gradient) down to the first layer; x0 is the first layer's input as
 * forward used it. */
static void backward(struct dt_mlp *n, const float *x0, int B, bool accumulate, dt_model_ready_fn ready,
                     void *ctx)
{
    float *dh = n->dlogits;
    if (n->m.prec != DT_KPREC_F32)
        n->m.k->round_lowp(dh, dh, (size_t)B * (size_t)n->classes, n->m.prec, false);
    int buf = 0;
    for (int l = n->n_layers - 1; l >= 0; l--) {
        layer_backward(n, l, dh, l > 0 ? n->layer[l - 1].h : x0, B, accumulate, ready, ctx);
        if (l > 0) {
            float *dx = n->scratch[buf];
            buf ^= 1;
            input_grad(n, l, dx, dh, B);
            dh = dx;
        }
    }
}

/* loss_i = logsumexp(logits_i) - logits_i[y_i], then backward from
 * dlogits = (softmax - onehot) * dscale. */
static double mlp_train_batch(struct dt_model *m, const struct dt_batch *b, float dscale, bool accumulate,
                              dt_model_ready_fn ready, void *ctx)
{
    struct dt_mlp *n = mlp(m);
    const float *logits = forward(n, b->x, b->n);
    double loss = m->k->xent(n->dlogits, logits, b->y, b->n, n->classes, dscale, NULL);
    m->backward_start_ns = dt_clock_ns();
    backward(n, m->prec == DT_KPREC_F32 ? b->x : n->x_lp, b->n, accumulate, ready, ctx);
    return loss;
}

static double mlp_eval_batch(struct dt_model *m, const struct dt_batch *b, int64_t *correct)
{
    struct dt_mlp *n = mlp(m);
    const float *logits = forward(n, b->x, b->n);
    return m->k->xent(NULL, logits, b->y, b->n, n->classes, 0.0f, correct);
}

static const float *mlp_logits(const struct dt_model *m)
{
    const struct dt_mlp *n = dt_mlp__of(m);
    return n->layer[n->n_layers - 1].h;
}

const struct dt_model_ops dt_model__mlp = {
    .name = "mlp",
    .input = DT_BATCH_IMAGES,
    .create = mlp_create,
    .destroy = mlp_destroy,
    .set_precision = mlp_set_precision,
    .train_batch = mlp_train_batch,
    .eval_batch = mlp_eval_batch,
    .logits = mlp_logits,
    .cuda = MLP_CUDA,
};
