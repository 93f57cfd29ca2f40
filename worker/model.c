/* model.c - MLP forward and backward over the flat arenas (see model.h).
 *
 * Each layer's forward and backward are written side by side with the math
 * above them, as in llm.c's train_gpt2.c.  Not for kernels themselves: every
 * arithmetic loop goes through the device table (kernels.h).
 */
#include "worker/model.h"
#include "base/arena.h"
#include "worker/model_amp.h"
#include "worker/trace.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "worker/data/sampler.h"
#include "base/clock.h"

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

static int layout(struct dt_model *m, int in, const int *hidden, int n_hidden, int classes, enum dt_kact act)
{
    if (n_hidden < 0 || n_hidden + 1 > DT_MODEL_MAX_LAYERS)
        return dt_error_set(DT_EINVAL, "model: %d hidden layers, at most %d", n_hidden, DT_MODEL_MAX_LAYERS - 1);
    size_t off = 0;
    int prev = in;
    m->n_layers = n_hidden + 1;
    for (int l = 0; l < m->n_layers; l++) {
        struct dt_model_layer *L = &m->layer[l];
        L->in = prev;
        L->out = l < n_hidden ? hidden[l] : classes;
        if (L->out < 1)
            return dt_error_set(DT_EINVAL, "model: layer %d has width %d", l, L->out);
        L->act = l < n_hidden ? act : DT_KACT_NONE;
        L->w = off;
        off += (size_t)L->out * (size_t)L->in;
        L->b = off;
        off += (size_t)L->out;
        prev = L->out;
    }
    m->n_params = off;
    return 0;
}

static int alloc_buffers(struct dt_model *m)
{
    size_t acts = 0, widest = (size_t)m->in;
    for (int l = 0; l < m->n_layers; l++) {
        size_t per = (size_t)m->max_batch * (size_t)m->layer[l].out;
        acts += per * (m->layer[l].act == DT_KACT_GELU ? 2 : 1);
        if ((size_t)m->layer[l].out > widest)
            widest = (size_t)m->layer[l].out;
    }
    size_t scratch = (size_t)m->max_batch * widest;
    m->params = m->params_own = dt_arena_calloc(m->n_params, sizeof(float));
    m->grads = m->grads_own = dt_arena_calloc(m->n_params, sizeof(float));
    m->acts = dt_arena_calloc(acts + 2 * scratch + (size_t)m->max_batch * (size_t)m->classes, sizeof(float));
    if (!m->params || !m->grads || !m->acts)
        return dt_error_set(DT_ENOMEM, "model: no memory for %zu parameters and %zu activations", m->n_params,
                            acts);
    float *p = m->acts;
    for (int l = 0; l < m->n_layers; l++) {
        struct dt_model_layer *L = &m->layer[l];
        size_t per = (size_t)m->max_batch * (size_t)L->out;
        L->h = p;
        p += per;
        if (L->act == DT_KACT_GELU) {
            L->z = p;
            p += per;
        }
    }
    m->scratch[0] = p;
    m->scratch[1] = p + scratch;
    m->dlogits = p + 2 * scratch;
    return 0;
}

int dt_model_create_mlp(const struct dt_kernels *k, int in, const int *hidden, int n_hidden, int classes,
                        enum dt_kact act, int max_batch, uint64_t seed, struct dt_model **out)
{
    *out = NULL;
    if (max_batch < 1 || in < 1 || classes < 2)
        return dt_error_set(DT_EINVAL, "model: bad sizes (in %d, classes %d, batch %d)", in, classes, max_batch);
    struct dt_model *m = calloc(1, sizeof *m);
    if (!m)
        return dt_error_set(DT_ENOMEM, "model: no memory");
    m->k = k;
    m->in = in;
    m->classes = classes;
    m->max_batch = max_batch;
    m->grad_chunk = DT_MODEL_GRAD_CHUNK;
    int rc = layout(m, in, hidden, n_hidden, classes, act);
    if (rc == 0)
        rc = alloc_buffers(m);
    if (rc) {
        dt_model_destroy(m);
        return rc;
    }
    struct dt_mt19937 g;
    dt_mt19937_seed(&g, (uint32_t)seed);
    for (int l = 0; l < m->n_layers; l++) {
        const struct dt_model_layer *L = &m->layer[l];
        float bound = 1.0f / sqrtf((float)L->in);
        init_uniform(m->params + L->w, (size_t)L->out * (size_t)L->in, bound, &g);
        init_uniform(m->params + L->b, (size_t)L->out, bound, &g);
    }
    *out = m;
    return 0;
}

/* An arena moves to caller-owned memory: its values go along when `copy`. */
static void move_arena(float **cur, float **own, float *to, size_t n, bool copy)
{
    if (copy)
        memcpy(to, *cur, n * sizeof *to);
    dt_arena_free(*own);
    *own = NULL;
    *cur = to;
}

void dt_model_use_grads(struct dt_model *m, float *grads)
{
    move_arena(&m->grads, &m->grads_own, grads, m->n_params, false);
}

void dt_model_use_params(struct dt_model *m, float *params, bool copy)
{
    move_arena(&m->params, &m->params_own, params, m->n_params, copy);
}

void dt_model_destroy(struct dt_model *m)
{
    if (!m)
        return;
    free(m->params_lp);
    dt_arena_free(m->params_own);
    dt_arena_free(m->grads_own);
    dt_arena_free(m->acts);
    free(m);
}

/* Layer l forward:  z = x W^T + b,  h = act(z)   (x [B,in], W [out,in], h [B,out]). */
const float *dt_model_forward(struct dt_model *m, const float *x, int B)
{
    if (m->prec != DT_KPREC_F32)
        return dt_model_amp_forward(m, x, B);
    const struct dt_kernels *k = m->k;
    for (int l = 0; l < m->n_layers; l++) {
        struct dt_model_layer *L = &m->layer[l];
        k->matmul_forward(L->h, x, m->params + L->w, B, L->in, L->out);
        k->bias_act_forward(L->z, L->h, L->h, m->params + L->b, B, L->out, L->act);
        x = L->h;
    }
    return m->layer[m->n_layers - 1].h;
}

void dt_model_set_grad_chunk(struct dt_model *m, size_t floats)
{
    m->grad_chunk = floats;
}

int dt_model_chunk_rows(const struct dt_model *m, int l)
{
    const struct dt_model_layer *L = &m->layer[l];
    size_t per = m->grad_chunk / (size_t)L->in / 64 * 64;
    if (m->grad_chunk == 0 || (size_t)L->out * (size_t)L->in <= m->grad_chunk)
        return L->out;
    if (per < 64)
        per = 64;
    return per >= (size_t)L->out ? L->out : (int)per;
}

/* Chunk starts: 0, 64, 64 + R, 64 + 2R, ...: every chunk starts on a multiple
 * of 64 rows, as the whole GEMM's tiles do, and the first rows, written last,
 * are one 64-row chunk: the all-reduce nothing can hide is the smallest. */
static int next_chunk(int r, int R)
{
    return r == 0 ? 64 : r + R;
}

int dt_model_grad_segments(const struct dt_model *m, size_t *bounds, bool *cut)
{
    int n = 0;
    for (int l = 0; l < m->n_layers; l++) {
        const struct dt_model_layer *L = &m->layer[l];
        int R = dt_model_chunk_rows(m, l);
        for (int r = 0; r < L->out; r = next_chunk(r, R), n++) {
            if (bounds)
                bounds[n] = L->w + (size_t)r * (size_t)L->in;
            if (bounds && cut)
                cut[n] = R < L->out;
        }
        if (bounds)
            bounds[n] = L->b;
        if (bounds && cut)
            cut[n] = false;
        n++;
    }
    if (bounds)
        bounds[n] = m->n_params;
    return n;
}

/* dW of layer l, chunk by chunk from the last rows down (see
 * dt_model_set_grad_chunk); the bias gradient is already final, so the first
 * range reported also covers it. */
static void weight_grad(struct dt_model *m, int l, const float *dz, const float *x, int B, int accumulate,
                        dt_model_ready_fn ready, void *ctx)
{
    const struct dt_model_layer *L = &m->layer[l];
    int R = dt_model_chunk_rows(m, l);
    size_t hi = L->b + (size_t)L->out;
    if (R >= L->out) {
        m->k->matmul_backward_w(m->grads + L->w, dz, x, B, L->in, L->out, accumulate);
        if (ready)
            ready(ctx, L->w, hi);
        return;
    }
    for (int top = L->out; top > 0;) {
        int r0 = top <= 64 ? 0 : 64 + (top - 64 - 1) / R * R; /* the chunk start below top */
        size_t lo = L->w + (size_t)r0 * (size_t)L->in;
        m->k->matmul_backward_w_rows(m->grads + lo, dz, x, B, L->in, L->out, r0, top - r0, accumulate);
        if (ready)
            ready(ctx, lo, hi);
        hi = lo;
        top = r0;
    }
}

/* Layer l backward, given dh = dloss/dh [B,out]:
 *   dz = dh * act'(z)          db = sum_rows dz
 *   dW = dz^T x                dx = dz W     (skipped for the first layer: the input needs no gradient)
 * The last layer has no activation: dz = dlogits = (softmax - onehot) * dscale. */
static void backward(struct dt_model *m, const float *x0, int B, int accumulate, dt_model_ready_fn ready,
                     void *ctx)
{
    const struct dt_kernels *k = m->k;
    const float *dh = m->dlogits;
    int buf = 0;
    for (int l = m->n_layers - 1; l >= 0; l--) {
        struct dt_model_layer *L = &m->layer[l];
        const float *x = l > 0 ? m->layer[l - 1].h : x0;
        float *dz = (float *)dh; /* in place: dh is dead once dz is known */
        k->act_bias_backward(dz, m->grads + L->b, dh, L->z, L->h, B, L->out, L->act, accumulate);
        weight_grad(m, l, dz, x, B, accumulate, ready, ctx);
        if (l > 0) {
            float *dx = m->scratch[buf];
            buf ^= 1;
            k->matmul_backward_x(dx, dz, m->params + L->w, B, L->in, L->out);
            dh = dx;
        }
    }
}

double dt_model_train_batch(struct dt_model *m, const float *x, const int32_t *y, int B, float dscale,
                            int accumulate, dt_model_ready_fn ready, void *ctx, int64_t *correct)
{
    const float *logits = dt_model_forward(m, x, B);
    double loss = m->k->xent(m->dlogits, logits, y, B, m->classes, dscale, correct);
    m->backward_start_ns = dt_clock_ns();
    if (m->prec != DT_KPREC_F32)
        dt_model_amp_backward(m, B, accumulate, ready, ctx);
    else
        backward(m, x, B, accumulate, ready, ctx);
    return loss;
}

double dt_model_eval_batch(struct dt_model *m, const float *x, const int32_t *y, int B, int64_t *correct)
{
    const float *logits = dt_model_forward(m, x, B);
    return m->k->xent(NULL, logits, y, B, m->classes, 0.0f, correct);
}

void dt_model_param_name(const struct dt_model *m, int layer, int is_bias, char *buf, size_t len)
{
    (void)m;
    /* nn.Sequential(Linear, act, Linear, act, ..., Linear): Linear l is module 2l. */
    snprintf(buf, len, "layers.%d.%s", 2 * layer, is_bias ? "bias" : "weight");
}
