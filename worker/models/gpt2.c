/* gpt2.c - GPT-2 (trainer.model.type gpt2) behind the model interface
 * (model.h): Hugging Face's GPT2LMHeadModel, which is nanoGPT's GPT with
 * dropout 0, on CPU.
 *
 *   x_0 = wte[idx] + wpe[pos]
 *   x_{l+1} = r + mlp(ln_2(r)),  r = x_l + attn(ln_1(x_l))      (pre-LayerNorm blocks, eps 1e-5)
 *   logits = ln_f(x_L) wte^T                                      (the head tied to wte)
 *   loss = sum over the n T targets of cross_entropy(logits, target)
 *
 * This file holds the layout (HF's names, order and Conv1D [in, out]
 * weights; gpt2_internal.h), the initialisation (GPT-2's: N(0, 0.02), the
 * residual projections N(0, 0.02 / sqrt(2 n_layer)), biases 0, LayerNorm 1
 * and 0), the activation buffers (all allocated at creation for max_batch
 * sequences of seq_len tokens; trainer.recompute shares some between blocks
 * and recomputes them in backward), and the order of the layers forward and
 * backward, with each gradient range reported to the reducer as soon as it is
 * final.  The layers' arithmetic is gpt2_layers.c.
 *
 * The vocabulary is padded to a multiple of 128 (llm.c's 50304 for 50257):
 * the head's GEMM runs over whole tiles.  The padding rows of wte are zero,
 * outside every tensor, and their logits are never read: the loss and every
 * gradient are those of the unpadded model.
 *
 * The GPU half (trainer.device: cuda) is gpt2_cuda.c, behind .cuda.
 *
 * Not for data (worker/data/), the optimizer or checkpoints.
 */
#include "worker/models/gpt2_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/arena.h"
#include "base/clock.h"
#include "base/error.h"
#include "worker/models/param_init.h"

#define VOCAB_PAD 128

#ifdef DT_HAVE_CUDA
extern const struct dt_model_cuda_ops dt_gpt2__cuda; /* gpt2_cuda.c */
#define GPT2_CUDA (&dt_gpt2__cuda)
#else
#define GPT2_CUDA NULL
#endif

static struct dt_gpt2 *gpt(struct dt_model *m)
{
    return (struct dt_gpt2 *)m;
}

/* ---- layout: Hugging Face's tensors, in state_dict order ---- */

static const char *const block_names[G_PER_BLOCK] = {
    "ln_1.weight",        "ln_1.bias",        "attn.c_attn.weight", "attn.c_attn.bias",
    "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",        "ln_2.bias",
    "mlp.c_fc.weight",    "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};

/* Appends tensor `name` of shape [d0] or [d0, d1] at *off. */
static size_t add(struct dt_gpt2 *g, int *n, size_t *off, const char *name, int64_t d0, int64_t d1)
{
    struct dt_model_tensor *t = &g->tensors[(*n)++];
    *t = (struct dt_model_tensor){.ndim = d1 ? 2 : 1, .shape = {d0, d1}, .offset = *off, .decay = d1 != 0};
    snprintf(t->name, sizeof t->name, "%s", name);
    size_t at = *off;
    *off += (size_t)d0 * (size_t)(d1 ? d1 : 1);
    return at;
}

static void layout(struct dt_gpt2 *g)
{
    int n = 0;
    size_t off = 0;
    int64_t C = g->C;
    g->wte = add(g, &n, &off, "transformer.wte.weight", g->V, C);
    off += (size_t)(g->Vp - g->V) * (size_t)C; /* the padding rows: with wte, in no tensor */
    g->wpe = add(g, &n, &off, "transformer.wpe.weight", g->block, C);
    const int64_t shape[G_PER_BLOCK][2] = {{C, 0}, {C, 0}, {C, 3 * C}, {3 * C, 0}, {C, C},     {C, 0},
                                           {C, 0}, {C, 0}, {C, 4 * C}, {4 * C, 0}, {4 * C, C}, {C, 0}};
    for (int l = 0; l < g->L; l++)
        for (int i = 0; i < G_PER_BLOCK; i++) {
            char name[64];
            snprintf(name, sizeof name, "transformer.h.%d.%s", l, block_names[i]);
            g->blk[l * G_PER_BLOCK + i] = add(g, &n, &off, name, shape[i][0], shape[i][1]);
        }
    g->lnfw = add(g, &n, &off, "transformer.ln_f.weight", C, 0);
    g->lnfb = add(g, &n, &off, "transformer.ln_f.bias", C, 0);
    g->m.n_tensors = n;
    g->m.n_params = off;
}

/* ---- initialisation ---- */

/* GPT-2's: matrices and embeddings N(0, 0.02), the two residual output
 * projections N(0, 0.02 / sqrt(2 n_layer)), biases 0, LayerNorm weight 1.
 * Tensor i is stream i of the counter-based draws (param_init.h) under key
 * `seed`: every value is a function of (seed, tensor, index) alone, so the
 * CPU pool draws them in parallel and any thread count gives the same bits. */
static void init_params(struct dt_gpt2 *g, uint64_t seed)
{
    double proj_std = 0.02 / sqrt(2.0 * g->L);
    for (int i = 0; i < g->m.n_tensors; i++) {
        const struct dt_model_tensor *t = &g->tensors[i];
        float *x = g->m.params + t->offset;
        size_t n = dt_model_tensor_numel(t);
        size_t len = strlen(t->name);
        bool is_weight = len > 7 && !strcmp(t->name + len - 7, ".weight");
        if (t->ndim == 2)
            dt_param_init_normal(x, n, strstr(t->name, "c_proj.weight") ? proj_std : 0.02, seed, (uint32_t)i);
        else /* LayerNorm weights; every 1-D bias is 0 */
            dt_param_init_fill(x, n, is_weight ? 1.0f : 0.0f);
    }
}

/* ---- activations: one allocation, shared between blocks by recompute ---- */

/* Hands out n floats from *at (counting only while base is NULL). */
static float *take(float *base, size_t *at, size_t n)
{
    float *p = base ? base + *at : NULL;
    *at += n;
    return p;
}

/* One block's buffers; `keep` says which exist per block (the rest point to
 * block 0's, which backward recomputes into). */
static void block_acts(struct dt_gpt2 *g, float *base, size_t *at, int l)
{
    size_t NC = (size_t)g->max_batch * (size_t)g->seq_len * (size_t)g->C, N = NC / (size_t)g->C;
    size_t att = (size_t)g->max_batch * (size_t)g->H * (size_t)g->seq_len * (size_t)g->seq_len;
    struct dt_gpt2_acts *a = &g->acts[l], *first = &g->acts[0];
    bool own = l == 0 || g->recompute != DT_RECOMPUTE_BLOCK;
    if (!own) {
        *a = *first;
    } else {
        a->ln1 = take(base, at, NC);
        a->ln1_mean = take(base, at, N);
        a->ln1_rstd = take(base, at, N);
        a->qkv = take(base, at, 3 * NC);
        a->att = take(base, at, att);
        a->atty = take(base, at, NC);
        a->res2 = take(base, at, NC);
        a->ln2 = take(base, at, NC);
        a->ln2_mean = take(base, at, N);
        a->ln2_rstd = take(base, at, N);
        a->fch = take(base, at, 4 * NC);
        a->fch_gelu = l == 0 || g->recompute == DT_RECOMPUTE_NONE ? take(base, at, 4 * NC) : first->fch_gelu;
    }
    a->res3 = take(base, at, NC);
}

static size_t assign_acts(struct dt_gpt2 *g, float *base)
{
    size_t at = 0, N = (size_t)g->max_batch * (size_t)g->seq_len, NC = N * (size_t)g->C;
    for (int l = 0; l < g->L; l++)
        block_acts(g, base, &at, l);
    g->encoded = take(base, &at, NC);
    g->lnf = take(base, &at, NC);
    g->lnf_mean = take(base, &at, N);
    g->lnf_rstd = take(base, &at, N);
    g->logits = take(base, &at, N * (size_t)g->Vp);
    g->losses = take(base, &at, 2 * N);
    g->proj = take(base, &at, NC);
    g->dres = take(base, &at, NC);
    g->dln = take(base, &at, NC);
    g->datty = take(base, &at, NC);
    g->dqkv = take(base, &at, 3 * NC);
    g->dfch = take(base, &at, 4 * NC);
    g->datt = take(base, &at, (size_t)g->max_batch * (size_t)g->H * (size_t)g->seq_len * (size_t)g->seq_len);
    return at;
}

static int alloc_acts(struct dt_gpt2 *g)
{
    size_t n = assign_acts(g, NULL);
    g->act_mem = dt_arena_calloc(n, sizeof(float));
    if (!g->act_mem)
        return dt_error_set(DT_ENOMEM,
                            "model gpt2: no memory for %.1f GiB of activations (%d sequences of %d "
                            "tokens; trainer.recompute: block keeps less)",
                            (double)n * 4 / (1 << 30), g->max_batch, g->seq_len);
    assign_acts(g, g->act_mem);
    return 0;
}

/* ---- creating and freeing ---- */

extern const struct dt_model_ops dt_model__gpt2;

static int check_config(const struct dt_model_config *c)
{
    const struct dt_model_spec *s = c->spec;
    if (s->n_layer < 1 || s->n_head < 1 || s->n_embd < 1 || s->vocab_size < 1 || s->block_size < 1 ||
        s->n_embd % s->n_head)
        return dt_error_set(
            DT_EINVAL,
            "model gpt2: n_layer %d, n_head %d, n_embd %d, vocab_size %d, block_size %d: each must "
            "be > 0 and n_embd a multiple of n_head",
            s->n_layer, s->n_head, s->n_embd, s->vocab_size, s->block_size);
    if (c->data.seq_len < 1 || c->data.seq_len > s->block_size)
        return dt_error_set(DT_EINVAL,
                            "model gpt2: sequences of %d tokens; block_size %d is the longest it reads",
                            c->data.seq_len, s->block_size);
    if (c->data.vocab > s->vocab_size)
        return dt_error_set(DT_EINVAL, "model gpt2: the data's vocabulary has %d tokens, vocab_size is %d",
                            c->data.vocab, s->vocab_size);
    if (c->max_batch < 1)
        return dt_error_set(DT_EINVAL, "model gpt2: batch of %d sequences", c->max_batch);
    return 0;
}

static int gpt2_create(const struct dt_model_config *c, struct dt_model **out)
{
    int rc = check_config(c);
    if (rc)
        return rc;
    const struct dt_model_spec *s = c->spec;
    struct dt_gpt2 *g = calloc(1, sizeof *g);
    if (!g)
        return dt_error_set(DT_ENOMEM, "model gpt2: no memory");
    g->m.ops = &dt_model__gpt2;
    g->m.k = c->k;
    g->L = s->n_layer;
    g->H = s->n_head;
    g->C = s->n_embd;
    g->V = s->vocab_size;
    g->Vp = (s->vocab_size + VOCAB_PAD - 1) / VOCAB_PAD * VOCAB_PAD;
    g->block = s->block_size;
    g->max_batch = c->max_batch;
    g->seq_len = c->data.seq_len;
    g->recompute = c->recompute;
    g->m.logits_cols = g->V;
    g->m.logits_stride = g->Vp;
    g->blk = calloc((size_t)g->L * G_PER_BLOCK, sizeof *g->blk);
    g->tensors = calloc((size_t)g->L * G_PER_BLOCK + 4, sizeof *g->tensors);
    g->acts = calloc((size_t)g->L, sizeof *g->acts);
    g->m.tensors = g->tensors;
    if (!g->blk || !g->tensors || !g->acts)
        rc = dt_error_set(DT_ENOMEM, "model gpt2: no memory");
    if (rc == 0) {
        layout(g);
        rc = dt_model__alloc_arenas(&g->m);
    }
    if (rc == 0)
        rc = alloc_acts(g);
    if (rc) {
        dt_model_destroy(&g->m);
        return rc;
    }
    init_params(g, c->seed);
    *out = &g->m;
    return 0;
}

static void gpt2_destroy(struct dt_model *m)
{
    struct dt_gpt2 *g = gpt(m);
    dt_arena_free(g->params_lp);
    dt_arena_free(g->act_mem);
    free(g->blk);
    free(g->tensors);
    free(g->acts);
    free(g);
}

/* Autocast's buffers: the parameters rounded (refreshed each forward) and
 * one weight gradient before rounding (the largest is the head's, wte). */
static int gpt2_set_precision(struct dt_model *m, enum dt_kprec p)
{
    struct dt_gpt2 *g = gpt(m);
    dt_arena_free(g->params_lp);
    g->params_lp = g->wtmp = NULL;
    m->prec = p;
    if (p == DT_KPREC_F32)
        return 0;
    size_t w = (size_t)g->Vp * (size_t)g->C, c4 = 4 * (size_t)g->C * (size_t)g->C;
    w = w > c4 ? w : c4;
    g->params_lp = dt_arena_calloc(m->n_params + w, sizeof(float));
    if (!g->params_lp) {
        m->prec = DT_KPREC_F32;
        return dt_error_set(DT_ENOMEM, "model gpt2: no memory for the autocast copies (%zu parameters)",
                            m->n_params);
    }
    g->wtmp = g->params_lp + m->n_params;
    return 0;
}

/* ---- forward ---- */

/* Parameter i of block l: fp32 (LayerNorm, always) or as the GEMMs read it
 * (rounded under autocast). */
static const float *P(const struct dt_gpt2 *g, int l, int i)
{
    return g->m.params + g->blk[l * G_PER_BLOCK + i];
}

static const float *W(const struct dt_gpt2 *g, int l, int i)
{
    return (g->m.prec == DT_KPREC_F32 ? g->m.params : g->params_lp) + g->blk[l * G_PER_BLOCK + i];
}

static float *G(const struct dt_gpt2 *g, int l, int i)
{
    return g->m.grads + g->blk[l * G_PER_BLOCK + i];
}

/* Under autocast a LayerNorm's fp32 output only feeds a Linear, which casts
 * it: it is rounded in place (its backward reads the input, not the output). */
static void cast_for_linear(const struct dt_gpt2 *g, float *x, size_t n)
{
    if (g->m.prec != DT_KPREC_F32)
        g->m.k->round_lowp(x, x, n, g->m.prec, false);
}

/* Block l on input x [B,T,C] (the encoding or block l-1's output):
 *   ln1 = ln_1(x);  qkv = ln1 W_attn + b;  atty = causal_attention(qkv)
 *   res2 = x + (atty W_proj + b)
 *   ln2 = ln_2(res2);  fch = ln2 W_fc + b;  h = gelu(fch)
 *   res3 = res2 + (h W_fcproj + b) */
static void block_forward(struct dt_gpt2 *g, int l, const float *x, int B, int T)
{
    const struct dt_kernels *k = g->m.k;
    struct dt_gpt2_acts *a = &g->acts[l];
    enum dt_kprec p = g->m.prec;
    int N = B * T, C = g->C;
    size_t NC = (size_t)N * (size_t)C;
    dt_gpt2__layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x, P(g, l, G_LN1W), P(g, l, G_LN1B), N, C);
    cast_for_linear(g, a->ln1, NC);
    dt_gpt2__matmul_forward(k, a->qkv, a->ln1, W(g, l, G_QKVW), W(g, l, G_QKVB), N, C, 3 * C, p);
    dt_gpt2__attention_forward(k, a->atty, a->att, a->qkv, B, T, C, g->H, p);
    dt_gpt2__matmul_forward(k, g->proj, a->atty, W(g, l, G_ATTPW), W(g, l, G_ATTPB), N, C, C, p);
    dt_gpt2__residual_forward(a->res2, x, g->proj, NC);
    dt_gpt2__layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, P(g, l, G_LN2W), P(g, l, G_LN2B), N,
                               C);
    cast_for_linear(g, a->ln2, NC);
    dt_gpt2__matmul_forward(k, a->fch, a->ln2, W(g, l, G_FCW), W(g, l, G_FCB), N, C, 4 * C, p);
    dt_gpt2__gelu_forward(k, a->fch_gelu, a->fch, 4 * NC, p);
    dt_gpt2__matmul_forward(k, g->proj, a->fch_gelu, W(g, l, G_FCPW), W(g, l, G_FCPB), N, 4 * C, C, p);
    dt_gpt2__residual_forward(a->res3, a->res2, g->proj, NC);
}

static const float *block_input(const struct dt_gpt2 *g, int l)
{
    return l == 0 ? g->encoded : g->acts[l - 1].res3;
}

/* x_0 = wte[idx] + wpe[pos], the blocks, ln_f, logits = ln_f(x_L) wte^T
 * (the padded vocabulary's columns are 0: those rows of wte are). */
static void forward(struct dt_gpt2 *g, const int32_t *inputs, int B, int T)
{
    const struct dt_kernels *k = g->m.k;
    int N = B * T, C = g->C;
    if (g->m.prec != DT_KPREC_F32)
        k->round_lowp(g->params_lp, g->m.params, g->m.n_params, g->m.prec, false);
    dt_gpt2__encoder_forward(g->encoded, inputs, g->m.params + g->wte, g->m.params + g->wpe, B, T, C);
    for (int l = 0; l < g->L; l++)
        block_forward(g, l, block_input(g, l), B, T);
    dt_gpt2__layernorm_forward(g->lnf, g->lnf_mean, g->lnf_rstd, g->acts[g->L - 1].res3,
                               g->m.params + g->lnfw, g->m.params + g->lnfb, N, C);
    cast_for_linear(g, g->lnf, (size_t)N * (size_t)C);
    const float *wte = (g->m.prec == DT_KPREC_F32 ? g->m.params : g->params_lp) + g->wte;
    dt_gpt2__matmul_forward(k, g->logits, g->lnf, wte, NULL, N, C, g->Vp, g->m.prec);
}

/* ---- backward ---- */

/* The gradient a Linear's low-precision output receives from the fp32
 * residual stream is rounded (the cast's backward); in fp32 it is dres. */
static const float *linear_dout(struct dt_gpt2 *g, size_t n)
{
    if (g->m.prec == DT_KPREC_F32)
        return g->dres;
    g->m.k->round_lowp(g->proj, g->dres, n, g->m.prec, false);
    return g->proj;
}

static void report(dt_model_ready_fn ready, void *ctx, size_t lo, size_t *hi)
{
    if (ready)
        ready(ctx, lo, *hi);
    *hi = lo;
}

/* Block l backward, given dres = dloss/dres3 (left holding dloss/dx); the
 * recomputation trainer.recompute asks for first.  Mirrors block_forward:
 *   dh = dres W_fcproj^T, dW_fcproj += h^T dres;  dfch = dh gelu'(fch);  dln2 = dfch W_fc^T, ...
 *   dres += ln_2'(dln2)   (the residual passes dres through unchanged)
 *   datty = dres W_proj^T, ...;  dqkv = attention'(datty);  dln1 = dqkv W_attn^T, ...
 *   dres += ln_1'(dln1) */
static void block_backward(struct dt_gpt2 *g, int l, int B, int T, bool acc, dt_model_ready_fn ready,
                           void *ctx, size_t *hi)
{
    const struct dt_kernels *k = g->m.k;
    struct dt_gpt2_acts *a = &g->acts[l];
    enum dt_kprec p = g->m.prec;
    int N = B * T, C = g->C;
    size_t NC = (size_t)N * (size_t)C;
    const float *x = block_input(g, l);
    if (g->recompute == DT_RECOMPUTE_BLOCK && l < g->L - 1)
        block_forward(g, l, x, B, T);
    else if (g->recompute == DT_RECOMPUTE_GELU && l < g->L - 1)
        dt_gpt2__gelu_forward(k, a->fch_gelu, a->fch, 4 * NC, p);
    dt_gpt2__matmul_backward(k, g->dfch, G(g, l, G_FCPW), G(g, l, G_FCPB), linear_dout(g, NC), a->fch_gelu,
                             W(g, l, G_FCPW), N, 4 * C, C, acc, p, g->wtmp);
    dt_gpt2__gelu_backward(k, g->dfch, a->fch, g->dfch, 4 * NC, p);
    dt_gpt2__matmul_backward(k, g->dln, G(g, l, G_FCW), G(g, l, G_FCB), g->dfch, a->ln2, W(g, l, G_FCW), N, C,
                             4 * C, acc, p, g->wtmp);
    report(ready, ctx, g->blk[l * G_PER_BLOCK + G_FCW], hi);
    dt_gpt2__layernorm_backward(g->dres, G(g, l, G_LN2W), G(g, l, G_LN2B), g->dln, a->res2, P(g, l, G_LN2W),
                                a->ln2_mean, a->ln2_rstd, N, C, acc);
    report(ready, ctx, g->blk[l * G_PER_BLOCK + G_LN2W], hi);
    dt_gpt2__matmul_backward(k, g->datty, G(g, l, G_ATTPW), G(g, l, G_ATTPB), linear_dout(g, NC), a->atty,
                             W(g, l, G_ATTPW), N, C, C, acc, p, g->wtmp);
    dt_gpt2__attention_backward(k, g->dqkv, a->att, g->datt, g->datty, a->qkv, B, T, C, g->H, p);
    dt_gpt2__matmul_backward(k, g->dln, G(g, l, G_QKVW), G(g, l, G_QKVB), g->dqkv, a->ln1, W(g, l, G_QKVW), N,
                             C, 3 * C, acc, p, g->wtmp);
    report(ready, ctx, g->blk[l * G_PER_BLOCK + G_QKVW], hi);
    dt_gpt2__layernorm_backward(g->dres, G(g, l, G_LN1W), G(g, l, G_LN1B), g->dln, x, P(g, l, G_LN1W),
                                a->ln1_mean, a->ln1_rstd, N, C, acc);
    report(ready, ctx, g->blk[l * G_PER_BLOCK + G_LN1W], hi);
}

/* From dlogits (in g->logits) down: the head (dwte, dlnf), ln_f, the blocks
 * from the last, the embeddings.  Ranges are reported from the top of the
 * arena down; wte's gradient, written first by the head and last by the
 * embedding, is reported last. */
static void backward(struct dt_gpt2 *g, const int32_t *inputs, int B, int T, bool acc,
                     dt_model_ready_fn ready, void *ctx)
{
    const struct dt_kernels *k = g->m.k;
    enum dt_kprec p = g->m.prec;
    int N = B * T, C = g->C;
    size_t NC = (size_t)N * (size_t)C, hi = g->m.n_params;
    float *grads = g->m.grads;
    if (p != DT_KPREC_F32)
        k->round_lowp(g->logits, g->logits, (size_t)N * (size_t)g->Vp, p, false);
    const float *wte = (p == DT_KPREC_F32 ? g->m.params : g->params_lp) + g->wte;
    dt_gpt2__matmul_backward(k, g->dln, grads + g->wte, NULL, g->logits, g->lnf, wte, N, C, g->Vp, acc, p,
                             g->wtmp);
    memset(g->dres, 0, NC * sizeof *g->dres);
    dt_gpt2__layernorm_backward(g->dres, grads + g->lnfw, grads + g->lnfb, g->dln, g->acts[g->L - 1].res3,
                                g->m.params + g->lnfw, g->lnf_mean, g->lnf_rstd, N, C, acc);
    report(ready, ctx, g->lnfw, &hi);
    for (int l = g->L - 1; l >= 0; l--)
        block_backward(g, l, B, T, acc, ready, ctx, &hi);
    if (!acc) /* positions the batch does not reach get no gradient */
        memset(grads + g->wpe + (size_t)T * (size_t)C, 0, (size_t)(g->block - T) * (size_t)C * sizeof(float));
    dt_gpt2__encoder_backward(grads + g->wte, grads + g->wpe, g->dres, inputs, B, T, C, acc);
    report(ready, ctx, 0, &hi);
}

/* ---- the ops ---- */

/* A batch the buffers hold, of tokens the embedding has: anything else is
 * refused before a table is indexed with it. */
static int check_batch(const struct dt_gpt2 *g, const struct dt_batch *b)
{
    if (b->kind != DT_BATCH_TOKENS || b->n < 1 || b->n > g->max_batch || b->T < 1 || b->T > g->seq_len)
        return dt_error_set(
            DT_EINVAL,
            "model gpt2: a batch of %d sequences of %d tokens; it was made for up to %d of up to %d", b->n,
            b->T, g->max_batch, g->seq_len);
    size_t n = (size_t)b->n * (size_t)b->T;
    for (size_t i = 0; i < n; i++) {
        int32_t x = b->inputs[i], y = b->targets ? b->targets[i] : 0;
        if (x < 0 || x >= g->V || y < 0 || y >= g->V)
            return dt_error_set(DT_EINVAL,
                                "model gpt2: token %d at position %zu of the batch is outside the "
                                "vocabulary (vocab_size %d)",
                                x < 0 || x >= g->V ? x : y, i, g->V);
    }
    return 0;
}

/* The summed loss over n T targets; backward from dlogits = (softmax - onehot) dscale.
 * A bad batch returns NaN with the error set, and leaves the gradients alone. */
static double gpt2_train_batch(struct dt_model *m, const struct dt_batch *b, float dscale, bool accumulate,
                               dt_model_ready_fn ready, void *ctx)
{
    struct dt_gpt2 *g = gpt(m);
    if (check_batch(g, b))
        return NAN;
    forward(g, b->inputs, b->n, b->T);
    int N = b->n * b->T;
    double loss = dt_gpt2__xent(g->logits, g->losses, b->targets, N, g->V, g->Vp, dscale, true, NULL);
    m->backward_start_ns = dt_clock_ns();
    backward(g, b->inputs, b->n, b->T, accumulate, ready, ctx);
    return loss;
}

/* Forward only; targets may be NULL (the logits are all that is wanted). */
static double gpt2_eval_batch(struct dt_model *m, const struct dt_batch *b, int64_t *correct)
{
    struct dt_gpt2 *g = gpt(m);
    if (check_batch(g, b))
        return NAN;
    forward(g, b->inputs, b->n, b->T);
    if (!b->targets) /* generation: only the logits */
        return 0.0;
    return dt_gpt2__xent(g->logits, g->losses, b->targets, b->n * b->T, g->V, g->Vp, 0.0f, false, correct);
}

static const float *gpt2_logits(const struct dt_model *m)
{
    return ((const struct dt_gpt2 *)m)->logits;
}

const struct dt_model_ops dt_model__gpt2 = {
    .name = "gpt2",
    .input = DT_BATCH_TOKENS,
    .create = gpt2_create,
    .destroy = gpt2_destroy,
    .set_precision = gpt2_set_precision,
    .train_batch = gpt2_train_batch,
    .eval_batch = gpt2_eval_batch,
    .logits = gpt2_logits,
    .cuda = GPT2_CUDA,
};
