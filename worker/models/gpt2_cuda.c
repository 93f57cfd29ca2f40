/* gpt2_cuda.c - GPT-2 on a GPU: its half of worker/cuda/model_cuda.h, built
 * only with CUDA.  The same network, layout and recompute modes as gpt2.c
 * (gpt2_internal.h), through the layer kernels of transformer_cuda.h; the
 * engine's arenas are the host model's, so offsets are the host model's.
 *
 * Precision (as PyTorch's bf16 autocast; t = env.t, F32 or BF16): the
 * residual stream x_l and its gradient are fp32, LayerNorm reads fp32
 * parameters (env.p) and writes t; every GEMM reads t (weights from env.plow,
 * the arena's bf16 copy, or env.p in fp32), c_attn's and c_fc's biases are
 * in t, and the two projections that add into the residual write fp32 with
 * their fp32 bias and the residual fused (dt_cuda_mm_forward's res_in).
 * Gradients are fp32, into env.g.
 *
 *   x_0 = wte[idx] + wpe[pos]                                   (fp32)
 *   per block l:  ln1 = ln_1(x_l);  qkv = ln1 Wqkv + b;  atty, lse = attention(qkv)
 *                 res2 = x_l + atty Wattp + b;  ln2 = ln_2(res2)
 *                 fch_gelu = gelu_tanh(fch),  fch = ln2 Wfc + b
 *                 x_{l+1} = res2 + fch_gelu Wfcp + b
 *   logits = ln_f(x_L) wte^T over the padded vocabulary (the zero rows of wte
 *   give zero columns, which the cross-entropy never reads)
 *
 * The classifier runs in chunks of HEAD_ROWS rows, never N x Vp: per chunk
 * the logits GEMM, the cross-entropy turning them into dlogits in place and,
 * when training, the head's backward right there (dlnf rows, dwte), which is
 * why the loss has `accumulate`: dwte is written by forward_loss.  dscale is
 * applied per target token as the engine gives it (it counts rows x T terms).
 *
 * Memory (activations, bytes per token of the batch; C = n_embd, e = t's size,
 * H heads), kept per block by trainer.recompute:
 *   none   t: ln1 C, qkv 3C, atty C, ln2 C, fch 4C, fch_gelu 4C = 14C e;
 *          fp32: res2 C, x_{l+1} C; lse H, LayerNorm stats 4
 *   gelu   the same without fch_gelu (10C e): recomputed into one shared
 *          buffer from fch before mlp.c_proj's weight gradient
 *   block  x_{l+1} only (4C): backward recomputes the block's forward (up to
 *          fch_gelu) into one shared set
 * plus once: x_0 fp32 C, ln_f out C e and stats, per-row loss and hit,
 * backward's dres fp32 C, its t copy C e and dln C e, and a work region
 * (max of: the classifier's HEAD_ROWS x Vp e; dfch 4C e + dqkv 3C e + the
 * second dres_t C e + attention scratch + the shared recompute set; the
 * embedding's scratch), whose phases never overlap: the blocks' forward, the
 * classifier, each block's backward, the embedding's backward.  datty lives
 * in dln's memory.
 * GPT-2 124M at B=32, T=1024 in bf16 (N = 32768 tokens, C 768, 12 layers,
 * Vp 50304): none 27.7 kB per token per layer = 10.9 GB, gelu 21.6 kB = 8.5 GB,
 * block 3.1 kB = 1.2 GB (+ 0.8 GB shared set); the rest 0.35 GB and a work
 * region of 0.82 GB (the classifier chunk): none needs 12.1 GB, and with the
 * engine's four fp32 arenas and the bf16 copy (2.2 GB) 14.3 GB = 13.3 GiB,
 * under torch.compile's 15.1 GiB.  act_bytes says exactly what create takes.
 *
 * Streams.  Forward, the loss and backward's input-gradient chain run on
 * env.k's stream.  With DTRAIN_CUDA_WGRAD_STREAM=1 (for gpt2 off unless asked,
 * until measured on the H200; the MLP's is on unless 0) the four weight
 * gradients of each block run on env.kw's, beside the chain, so their GEMMs
 * fill the GPU while the chain runs LayerNorm and attention backward.  Each
 * weight gradient waits for its inputs (an event on k after their writer);
 * each buffer one of them reads is written again on k only after an event
 * on kw says it was read.  For that the two halves of a block read separate
 * dres_t copies (ln_1's and ln_f's output gradient in dres_t[0], ln_2's in
 * [1]) and dqkv has its own place beside dfch; both sit in the work region,
 * which the classifier's chunk bounds at GPT-2's sizes.  Backward joins kw
 * back into k before the embedding's backward (whose scratch is the work
 * region) and so before anything after it.  Nothing waits for the host, so a
 * step can be captured in a CUDA graph.  Not for the kernels (worker/cuda/)
 * or the engine's step.
 */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "worker/cuda/model_cuda.h"
#include "worker/cuda/transformer_cuda.h"
#include "worker/models/gpt2_internal.h"

#define HEAD_ROWS 8192 /* the classifier's chunk: 0.8 GB of bf16 logits at Vp 50304 */
#define ALIGN 256      /* every buffer starts on a 256-byte boundary */

/* One block's activations (t unless fp32 is said); under trainer.recompute
 * some point into the work region, shared by every block. */
struct blk_acts {
    void *ln1, *qkv, *atty, *ln2, *fch, *fch_gelu;
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd; /* [N] fp32 */
    float *lse;                                       /* [B,H,T] fp32 */
    float *res2;                                      /* [N,C] fp32 */
};

struct gpt2_dev {
    struct dt_model_cuda_env e;
    const struct dt_gpt2 *g; /* the host model: shapes and arena offsets */
    int T;
    enum dt_recompute recompute;
    size_t es; /* bytes of one value in e.t */
    void *mem; /* everything below, one allocation of act_bytes */
    struct blk_acts *a;
    float **res; /* [L+1]: res[l] is block l's input, res[L] the last block's output */
    void *lnf;   /* ln_f(x_L) [N,C] */
    float *lnf_mean, *lnf_rstd;
    float *row_loss;    /* [N] */
    int *row_hit;       /* [N] */
    float *dres;           /* [N,C] fp32: dloss/dx of the residual stream */
    void *dres_t[2], *dln; /* [N,C] t: dres as the GEMMs read it (see Streams); a LayerNorm's output gradient */
    void *logits;          /* work: [HEAD_ROWS, Vp] t */
    void *dfch, *dqkv;     /* work: [N,4C] t, [N,3C] t */
    void *att_scratch;     /* work, after them and dres_t[1] */
    void *emb_scratch;     /* work */
    /* The weight-gradient stream (header, Streams): kw NULL when not used.
     * in_ev: k -> kw, a weight gradient's inputs are written.  done_ev: kw ->
     * k, that weight gradient has read them (indexed by enum wgrad), and
     * whether it was recorded in this backward (a wait before is no wait). */
    struct dt_cuda_ctx *kw;
    cudaEvent_t in_ev, done_ev[4];
    bool pending[4];
    bool autocast; /* DTRAIN_CUDA_ROUNDING=autocast: round where torch.autocast does (see rounding_create) */
};

/* The weight gradients of a block, in the order backward queues them. */
enum wgrad { WG_FCP, WG_FC, WG_ATTP, WG_QKV };

/* ---- memory: one planner for act_bytes and create ---- */

struct dims {
    int L, H, C, Vp, T, rows;
    size_t es;
    enum dt_recompute rc;
};

/* Hands out `bytes` from *p (counting only while base is NULL). */
struct plan {
    char *base;
    size_t at;
};

static size_t al(size_t bytes)
{
    return (bytes + ALIGN - 1) / ALIGN * ALIGN;
}

static void *take(struct plan *p, size_t bytes)
{
    void *r = p->base ? p->base + p->at : NULL;
    p->at += al(bytes);
    return r;
}

/* One block's buffers but the output residual; fch_gelu only when `gelu_out`. */
static void carve_block(struct plan *p, struct blk_acts *a, const struct dims *z, bool gelu_out)
{
    size_t N = (size_t)z->rows * (size_t)z->T, NC = N * (size_t)z->C, e = z->es, f = sizeof(float);
    a->ln1 = take(p, NC * e);
    a->qkv = take(p, 3 * NC * e);
    a->atty = take(p, NC * e);
    a->ln2 = take(p, NC * e);
    a->fch = take(p, 4 * NC * e);
    a->fch_gelu = gelu_out ? take(p, 4 * NC * e) : NULL;
    a->ln1_mean = take(p, N * f);
    a->ln1_rstd = take(p, N * f);
    a->ln2_mean = take(p, N * f);
    a->ln2_rstd = take(p, N * f);
    a->lse = take(p, N * (size_t)z->H * f);
    a->res2 = take(p, NC * f);
}

static size_t max3(size_t a, size_t b, size_t c)
{
    size_t m = a > b ? a : b;
    return m > c ? m : c;
}

/* Lays out everything (d NULL: only counts) and returns the bytes. */
static size_t carve(const struct dims *z, char *base, struct gpt2_dev *d)
{
    struct plan p = {base, 0};
    size_t N = (size_t)z->rows * (size_t)z->T, NC = N * (size_t)z->C, e = z->es, f = sizeof(float);
    struct blk_acts tmp, shared;
    for (int l = 0; l < z->L; l++) {
        struct blk_acts *a = d ? &d->a[l] : &tmp;
        if (z->rc != DT_RECOMPUTE_BLOCK)
            carve_block(&p, a, z, z->rc == DT_RECOMPUTE_NONE);
        float *r = take(&p, NC * f);
        if (d)
            d->res[l + 1] = r;
    }
    float *r0 = take(&p, NC * f);
    void *lnf = take(&p, NC * e);
    float *lm = take(&p, N * f), *lr = take(&p, N * f), *rl = take(&p, N * f);
    int *rh = take(&p, N * sizeof(int));
    float *dres = take(&p, NC * f);
    void *dres_t = take(&p, NC * e), *dln = take(&p, NC * e);
    /* the work region: [dfch | dqkv | dres_t[1] | attention scratch | shared
     * recompute set]; the classifier's chunk and the embedding's scratch from
     * its start */
    size_t head_rows = N < HEAD_ROWS ? N : HEAD_ROWS;
    size_t dfch = al(4 * NC * e), dqkv = al(3 * NC * e), dres_t1 = al(NC * e);
    size_t att = al(dt_cuda_attention_scratch_bytes(z->rows, z->T, z->H));
    struct plan q = {NULL, 0};
    if (z->rc == DT_RECOMPUTE_BLOCK)
        carve_block(&q, &shared, z, true);
    else if (z->rc == DT_RECOMPUTE_GELU)
        take(&q, 4 * NC * e);
    size_t work = max3(head_rows * (size_t)z->Vp * e, dfch + dqkv + dres_t1 + att + q.at,
                       dt_cuda_embed_scratch_bytes((int)N));
    char *w = take(&p, work);
    if (!d)
        return p.at;
    d->res[0] = r0, d->lnf = lnf, d->lnf_mean = lm, d->lnf_rstd = lr, d->row_loss = rl, d->row_hit = rh;
    d->dres = dres, d->dres_t[0] = dres_t, d->dln = dln;
    d->logits = d->emb_scratch = d->dfch = w;
    d->dqkv = w + dfch;
    d->dres_t[1] = w + dfch + dqkv;
    d->att_scratch = w + dfch + dqkv + dres_t1;
    struct plan s = {w + dfch + dqkv + dres_t1 + att, 0};
    if (z->rc == DT_RECOMPUTE_BLOCK) {
        carve_block(&s, &shared, z, true);
        for (int l = 0; l < z->L; l++)
            d->a[l] = shared;
    } else if (z->rc == DT_RECOMPUTE_GELU) {
        void *gelu = take(&s, 4 * NC * e);
        for (int l = 0; l < z->L; l++)
            d->a[l].fch_gelu = gelu;
    }
    return p.at;
}

static struct dims dims_of(const struct dt_gpt2 *g, int rows, int T, enum dt_cuda_dtype t, int recompute)
{
    return (struct dims){.L = g->L,
                         .H = g->H,
                         .C = g->C,
                         .Vp = g->Vp,
                         .T = T,
                         .rows = rows,
                         .es = dt_cuda_dtype_size(t),
                         .rc = (enum dt_recompute)recompute};
}

static size_t gpt2_cuda_act_bytes(const struct dt_model *m, int rows, enum dt_cuda_dtype t, int recompute)
{
    struct dims z = dims_of((const struct dt_gpt2 *)m, rows, m->seq_len, t, recompute);
    return carve(&z, NULL, NULL);
}

/* ---- creating and freeing ---- */

static void gpt2_cuda_destroy(void *state)
{
    struct gpt2_dev *d = state;
    if (!d)
        return;
    for (int i = 0; i < 5; i++) {
        cudaEvent_t ev = i ? d->done_ev[i - 1] : d->in_ev;
        if (ev)
            cudaEventDestroy(ev);
    }
    cudaFree(d->mem);
    free(d->a);
    free(d->res);
    free(d);
}

static int check_env(const struct dt_gpt2 *g, const struct dt_model_cuda_env *env)
{
    if (env->t == DT_CUDA_F16)
        return dt_error_set(DT_EUNSUPPORTED, "cuda gpt2: fp16 is not supported; gpt2 on cuda takes amp bf16 "
                                             "or none");
    if (env->t == DT_CUDA_BF16 && !env->plow)
        return dt_error_set(DT_EINVAL, "cuda gpt2: bf16 needs the parameters' bf16 copy (env.plow)");
    if (env->seq_len < 1 || env->seq_len > g->block || env->max_batch < 1)
        return dt_error_set(DT_EINVAL,
                            "cuda gpt2: batches of %d sequences of %d tokens; block_size is %d (a token "
                            "data set of sequences up to it is what gpt2 reads)",
                            env->max_batch, env->seq_len, g->block);
    return 0;
}

/* The weight-gradient stream when env.kw exists and DTRAIN_CUDA_WGRAD_STREAM=1
 * asks for it (header, Streams); its events. */
static int wgrad_stream_create(struct gpt2_dev *d)
{
    const char *env = getenv("DTRAIN_CUDA_WGRAD_STREAM");
    if (!d->e.kw || !env || strcmp(env, "1") != 0)
        return 0;
    d->kw = d->e.kw;
    for (int i = 0; i < 5; i++) {
        cudaError_t e = cudaEventCreateWithFlags(i ? &d->done_ev[i - 1] : &d->in_ev, cudaEventDisableTiming);
        if (e != cudaSuccess)
            return dt_cuda_err(e, "cudaEventCreate (gpt2's weight-gradient stream)");
    }
    return 0;
}

/* DTRAIN_CUDA_ROUNDING=autocast: round where torch.autocast rounds, for
 * comparing loss curves step by step with PyTorch's bf16 autocast
 * (tests/gpu/test_gpt2_curve.sh).  By default (unset or `dtrain`) dtrain
 * rounds less; autocast casts each Linear's fp32 weight and bias to bf16, so
 *   - the weight and bias gradients leave the bf16 GEMM rounded (wgrad());
 *   - the residual projections' output is rounded, bias included, before the
 *     fp32 residual add, which dtrain fuses into the GEMM in fp32
 *     (proj_residual());
 *   - GELU reads the rounded pre-activation, and its backward the rounded
 *     GEMM output: the GEMM + own kernel way (fusion SEPARATE), not
 *     cuBLASLt's GELU/DGELU epilogues, which work on the fp32 accumulator.
 * The embeddings, LayerNorms, softmax and loss are fp32 on both sides. */
static int rounding_create(struct gpt2_dev *d)
{
    const char *r = getenv("DTRAIN_CUDA_ROUNDING");
    if (r && *r && strcmp(r, "dtrain") != 0 && strcmp(r, "autocast") != 0)
        return dt_error_set(DT_EINVAL, "DTRAIN_CUDA_ROUNDING=%s: `autocast` rounds gpt2 where torch.autocast "
                                       "does, `dtrain` (or unset) as dtrain does",
                            r);
    d->autocast = r && strcmp(r, "autocast") == 0 && d->e.t != DT_CUDA_F32;
    if (d->autocast) {
        dt_cuda_set_fusion(d->e.k, DT_CUDA_FUSE_SEPARATE);
        if (d->e.kw)
            dt_cuda_set_fusion(d->e.kw, DT_CUDA_FUSE_SEPARATE);
    }
    return 0;
}

static int gpt2_cuda_create(const struct dt_model *m, const struct dt_model_cuda_env *env, void **state)
{
    *state = NULL;
    const struct dt_gpt2 *g = (const struct dt_gpt2 *)m;
    int rc = check_env(g, env);
    if (rc)
        return rc;
    struct gpt2_dev *d = calloc(1, sizeof *d);
    if (d) {
        d->a = calloc((size_t)g->L, sizeof *d->a);
        d->res = calloc((size_t)g->L + 1, sizeof *d->res);
    }
    if (!d || !d->a || !d->res) {
        gpt2_cuda_destroy(d);
        return dt_error_set(DT_ENOMEM, "cuda gpt2: no memory");
    }
    d->e = *env;
    d->g = g;
    d->T = env->seq_len;
    d->recompute = g->recompute;
    d->es = dt_cuda_dtype_size(env->t);
    struct dims z = dims_of(g, env->max_batch, d->T, env->t, g->recompute);
    size_t bytes = carve(&z, NULL, NULL);
    rc = dt_cuda_alloc(&d->mem, bytes, "gpt2's activations");
    if (rc) {
        gpt2_cuda_destroy(d);
        return rc;
    }
    carve(&z, d->mem, d);
    rc = wgrad_stream_create(d);
    if (!rc)
        rc = rounding_create(d);
    if (rc) {
        gpt2_cuda_destroy(d);
        return rc;
    }
    *state = d;
    return 0;
}

/* ---- forward ---- */

/* The GEMMs' weights (and c_attn's, c_fc's biases): the t copy, or fp32. */
static const void *W(const struct gpt2_dev *d, size_t off)
{
    return d->e.plow ? (const void *)((const uint16_t *)d->e.plow + off) : (const void *)(d->e.p + off);
}

static size_t bo(const struct gpt2_dev *d, int l, int i)
{
    return d->g->blk[l * G_PER_BLOCK + i];
}

/* out = res + inp W + b (fp32) for a residual projection (weight index wi,
 * bias bi of block l): the add fused into the GEMM, or under autocast
 * rounding (rounding_create) the projection in t with t's bias into dln's
 * memory (unused in forward and in backward's recomputation), then added. */
static int proj_residual(struct gpt2_dev *d, int l, int wi, int bi, float *out, const void *inp, const float *res,
                         int N, int ic, int oc)
{
    struct dt_cuda_ctx *k = d->e.k;
    if (!d->autocast)
        return dt_cuda_mm_forward(k, d->e.t, out, NULL, inp, W(d, bo(d, l, wi)), DT_CUDA_W_IN_OUT,
                                  d->e.p + bo(d, l, bi), res, N, ic, oc, DT_CUDA_ACT_NONE);
    int rc = dt_cuda_mm_forward(k, d->e.t, d->dln, NULL, inp, W(d, bo(d, l, wi)), DT_CUDA_W_IN_OUT,
                                W(d, bo(d, l, bi)), NULL, N, ic, oc, DT_CUDA_ACT_NONE);
    return rc ? rc : dt_cuda_add_residual(k, d->e.t, out, res, d->dln, (size_t)N * oc);
}

/* Block l from its input res[l]; `whole` false (backward's recomputation)
 * stops at fch_gelu: the output residual is kept and backward needs no more. */
static int block_forward(struct gpt2_dev *d, int l, int B, bool whole)
{
    struct dt_cuda_ctx *k = d->e.k;
    enum dt_cuda_dtype t = d->e.t;
    struct blk_acts *a = &d->a[l];
    const float *p = d->e.p;
    int N = B * d->T, C = d->g->C;
    int rc = dt_cuda_layernorm_forward(k, t, a->ln1, a->ln1_mean, a->ln1_rstd, d->res[l],
                                       p + bo(d, l, G_LN1W), p + bo(d, l, G_LN1B), N, C);
    if (!rc)
        rc = dt_cuda_mm_forward(k, t, a->qkv, NULL, a->ln1, W(d, bo(d, l, G_QKVW)), DT_CUDA_W_IN_OUT,
                                W(d, bo(d, l, G_QKVB)), NULL, N, C, 3 * C, DT_CUDA_ACT_NONE);
    if (!rc)
        rc = dt_cuda_attention_forward(k, t, a->atty, a->lse, a->qkv, B, d->T, C, d->g->H);
    if (!rc)
        rc = proj_residual(d, l, G_ATTPW, G_ATTPB, a->res2, a->atty, d->res[l], N, C, C);
    if (!rc)
        rc = dt_cuda_layernorm_forward(k, t, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, p + bo(d, l, G_LN2W),
                                       p + bo(d, l, G_LN2B), N, C);
    if (!rc)
        rc = dt_cuda_mm_forward(k, t, a->fch_gelu, a->fch, a->ln2, W(d, bo(d, l, G_FCW)), DT_CUDA_W_IN_OUT,
                                W(d, bo(d, l, G_FCB)), NULL, N, C, 4 * C, DT_CUDA_ACT_GELU_TANH);
    if (!rc && whole)
        rc = proj_residual(d, l, G_FCPW, G_FCPB, d->res[l + 1], a->fch_gelu, a->res2, N, 4 * C, C);
    return rc ? dt_error_prefix("cuda gpt2: block %d forward", l) : 0;
}

/* A Linear's weight and bias gradients, dw (+)= dz^T x, db (+)= sum dz,
 * fp32; under DTRAIN_CUDA_ROUNDING=autocast then rounded to the AMP type
 * (rounding_create says why).  Exact for one micro-step; with accumulation
 * it rounds the running sum. */
static int wgrad(struct gpt2_dev *d, struct dt_cuda_ctx *kw, float *dw, float *db, const void *dz, const void *x,
                 int N, int in, int out, bool acc)
{
    int rc = dt_cuda_mm_backward_w(kw, d->e.t, dw, db, dz, x, DT_CUDA_W_IN_OUT, N, in, out, acc);
    if (!rc && d->autocast)
        rc = dt_cuda_round(kw, d->e.t, dw, (size_t)in * out);
    if (!rc && d->autocast && db)
        rc = dt_cuda_round(kw, d->e.t, db, (size_t)out);
    return rc;
}

/* The classifier in chunks of HEAD_ROWS rows: logits = lnf wte^T, the
 * cross-entropy (dlogits in place when training) and the head's backward:
 * dlnf rows = dlogits wte, dwte (+)= dlogits^T lnf (the first chunk
 * overwrites unless l->accumulate). */
static int classifier(struct gpt2_dev *d, int N, const struct dt_model_cuda_loss *l)
{
    struct dt_cuda_ctx *k = d->e.k;
    enum dt_cuda_dtype t = d->e.t;
    const struct dt_gpt2 *g = d->g;
    size_t rowb = (size_t)g->C * d->es;
    const void *wte = W(d, g->wte);
    int rc = 0;
    for (int r0 = 0; r0 < N && !rc; r0 += HEAD_ROWS) {
        int n = N - r0 < HEAD_ROWS ? N - r0 : HEAD_ROWS;
        const char *x = (const char *)d->lnf + (size_t)r0 * rowb;
        rc = dt_cuda_mm_forward(k, t, d->logits, NULL, x, wte, DT_CUDA_W_OUT_IN, NULL, NULL, n, g->C, g->Vp,
                                DT_CUDA_ACT_NONE);
        if (!rc)
            rc = dt_cuda_xent_rows(k, t, d->logits, d->row_loss + r0, d->row_hit + r0, d->e.y + r0, n, g->V,
                                   g->Vp, l->dscale, l->loss_scale, l->backward);
        if (!rc && l->backward)
            rc = dt_cuda_mm_backward_x(k, t, (char *)d->dln + (size_t)r0 * rowb, d->logits, wte,
                                       DT_CUDA_W_OUT_IN, NULL, n, g->C, g->Vp);
        if (!rc && l->backward)
            rc = dt_cuda_mm_backward_w(k, t, d->e.g + g->wte, NULL, d->logits, x, DT_CUDA_W_OUT_IN, n, g->C,
                                       g->Vp, l->accumulate || r0 > 0);
    }
    if (!rc && l->backward && d->autocast) /* the tied head's share of dwte, before the embedding's */
        rc = dt_cuda_round(k, t, d->e.g + g->wte, (size_t)g->Vp * g->C);
    if (!rc)
        rc = dt_cuda_sum_rows(k, l->loss_sum, l->correct, l->loss_acc, d->row_loss, d->row_hit, N);
    return rc ? dt_error_prefix("cuda gpt2: the classifier") : 0;
}

static int gpt2_cuda_forward_loss(void *state, int B, const struct dt_model_cuda_loss *l)
{
    struct gpt2_dev *d = state;
    const struct dt_gpt2 *g = d->g;
    if (B < 1 || B > d->e.max_batch)
        return dt_error_set(DT_EINVAL, "cuda gpt2: a batch of %d sequences; made for 1 to %d", B,
                            d->e.max_batch);
    int N = B * d->T;
    int rc =
        dt_cuda_embed_forward(d->e.k, d->res[0], d->e.x, d->e.p + g->wte, d->e.p + g->wpe, B, d->T, g->C);
    for (int l = 0; l < g->L && !rc; l++)
        rc = block_forward(d, l, B, true);
    if (!rc)
        rc = dt_cuda_layernorm_forward(d->e.k, d->e.t, d->lnf, d->lnf_mean, d->lnf_rstd, d->res[g->L],
                                       d->e.p + g->lnfw, d->e.p + g->lnfb, N, g->C);
    if (!rc)
        rc = classifier(d, N, l);
    return rc;
}

/* ---- the weight-gradient stream (header, Streams) ---- */

/* Where the next weight gradient runs: kw's context, after everything k has
 * queued so far (its inputs), or k's own. */
static int wgrad_begin(struct gpt2_dev *d, struct dt_cuda_ctx **on)
{
    *on = d->kw ? d->kw : d->e.k;
    return d->kw ? dt_cuda_stream_after(dt_cuda_stream(d->kw), dt_cuda_stream(d->e.k), d->in_ev,
                                        "ordering a weight gradient after its inputs")
                 : 0;
}

/* Weight gradient w has read its inputs once kw has run what it has queued. */
static int wgrad_end(struct gpt2_dev *d, enum wgrad w)
{
    if (!d->kw)
        return 0;
    cudaError_t e = cudaEventRecord(d->done_ev[w], dt_cuda_stream(d->kw));
    if (e != cudaSuccess)
        return dt_cuda_err(e, "cudaEventRecord (a weight gradient has read its inputs)");
    d->pending[w] = true;
    return 0;
}

/* k's next write goes to a buffer weight gradient w (its newest) reads: wait for it. */
static int wgrad_wait(struct gpt2_dev *d, enum wgrad w)
{
    if (!d->kw || !d->pending[w])
        return 0;
    cudaError_t e = cudaStreamWaitEvent(dt_cuda_stream(d->e.k), d->done_ev[w], 0);
    return e == cudaSuccess ? 0 : dt_cuda_err(e, "cudaStreamWaitEvent (a weight gradient has read its inputs)");
}

/* ---- backward ---- */

static int report(dt_model_cuda_ready_fn ready, void *ctx, size_t lo, struct dt_cuda_ctx *k)
{
    return ready ? ready(ctx, lo, dt_cuda_stream(k)) : 0;
}

/* The MLP half of block l backward, from dres (and its t copy dres_t[0]) = dloss/dx_{l+1}:
 *   dfch = (dres Wfcp^T) * gelu'(fch)   dWfcp, dbfcp from dres and fch_gelu
 *   dln2 = dfch Wfc^T                    dWfc, dbfc from dfch and ln2
 *   dres += ln_2'(dln2)  (the residual passes dres through; its copy into dres_t[1]) */
static int mlp_backward(struct gpt2_dev *d, int l, int N, bool acc, dt_model_cuda_ready_fn ready, void *ctx)
{
    struct dt_cuda_ctx *k = d->e.k, *kw;
    enum dt_cuda_dtype t = d->e.t;
    struct blk_acts *a = &d->a[l];
    float *g = d->e.g;
    int C = d->g->C;
    int rc = wgrad_begin(d, &kw);
    if (!rc)
        rc = wgrad_wait(d, WG_FC); /* block l+1's c_fc weight gradient reads dfch */
    if (!rc)
        rc = dt_cuda_mm_backward_x(k, t, d->dfch, d->dres_t[0], W(d, bo(d, l, G_FCPW)), DT_CUDA_W_IN_OUT,
                                   a->fch, N, 4 * C, C);
    if (!rc)
        rc = wgrad(d, kw, g + bo(d, l, G_FCPW), g + bo(d, l, G_FCPB), d->dres_t[0], a->fch_gelu, N, 4 * C, C, acc);
    if (!rc)
        rc = wgrad_end(d, WG_FCP);
    if (!rc)
        rc = wgrad_begin(d, &kw);
    if (!rc)
        rc = dt_cuda_mm_backward_x(k, t, d->dln, d->dfch, W(d, bo(d, l, G_FCW)), DT_CUDA_W_IN_OUT, NULL, N, C,
                                   4 * C);
    if (!rc)
        rc = wgrad(d, kw, g + bo(d, l, G_FCW), g + bo(d, l, G_FCB), d->dfch, a->ln2, N, C, 4 * C, acc);
    if (!rc)
        rc = wgrad_end(d, WG_FC);
    if (!rc)
        rc = report(ready, ctx, bo(d, l, G_FCW), kw);
    if (!rc)
        rc = wgrad_wait(d, WG_ATTP); /* block l+1's attn.c_proj weight gradient reads dres_t[1] */
    if (!rc)
        rc = dt_cuda_layernorm_backward(k, t, d->dres, d->dres_t[1], g + bo(d, l, G_LN2W),
                                        g + bo(d, l, G_LN2B), d->dln, a->res2, d->e.p + bo(d, l, G_LN2W),
                                        a->ln2_mean, a->ln2_rstd, N, C, acc);
    if (!rc)
        rc = report(ready, ctx, bo(d, l, G_LN2W), k);
    return rc;
}

/* The attention half, from dres = dloss/dres2 (its copy dres_t[1]):
 *   datty = dres Wattp^T (in dln's memory)   dWattp, dbattp from dres and atty
 *   dqkv = attention'(datty)                 dln1 = dqkv Wqkv^T, dWqkv, dbqkv
 *   dres += ln_1'(dln1)  (its copy into dres_t[0]) */
static int attn_backward(struct gpt2_dev *d, int l, int B, bool acc, dt_model_cuda_ready_fn ready, void *ctx)
{
    struct dt_cuda_ctx *k = d->e.k, *kw;
    enum dt_cuda_dtype t = d->e.t;
    struct blk_acts *a = &d->a[l];
    float *g = d->e.g;
    int N = B * d->T, C = d->g->C;
    void *datty = d->dln;
    int rc = wgrad_begin(d, &kw);
    if (!rc)
        rc = dt_cuda_mm_backward_x(k, t, datty, d->dres_t[1], W(d, bo(d, l, G_ATTPW)), DT_CUDA_W_IN_OUT, NULL,
                                   N, C, C);
    if (!rc)
        rc = wgrad(d, kw, g + bo(d, l, G_ATTPW), g + bo(d, l, G_ATTPB), d->dres_t[1], a->atty, N, C, C, acc);
    if (!rc)
        rc = wgrad_end(d, WG_ATTP);
    if (!rc)
        rc = wgrad_wait(d, WG_QKV); /* block l+1's c_attn weight gradient reads dqkv */
    if (!rc)
        rc = dt_cuda_attention_backward(k, t, d->dqkv, datty, a->qkv, a->atty, a->lse, B, d->T, C, d->g->H,
                                        d->att_scratch);
    if (!rc)
        rc = wgrad_begin(d, &kw);
    if (!rc)
        rc = dt_cuda_mm_backward_x(k, t, d->dln, d->dqkv, W(d, bo(d, l, G_QKVW)), DT_CUDA_W_IN_OUT, NULL, N, C,
                                   3 * C);
    if (!rc)
        rc = wgrad(d, kw, g + bo(d, l, G_QKVW), g + bo(d, l, G_QKVB), d->dqkv, a->ln1, N, C, 3 * C, acc);
    if (!rc)
        rc = wgrad_end(d, WG_QKV);
    if (!rc)
        rc = report(ready, ctx, bo(d, l, G_QKVW), kw);
    if (!rc)
        rc = wgrad_wait(d, WG_FCP); /* this block's mlp.c_proj weight gradient reads dres_t[0] */
    if (!rc)
        rc = dt_cuda_layernorm_backward(k, t, d->dres, d->dres_t[0], g + bo(d, l, G_LN1W),
                                        g + bo(d, l, G_LN1B), d->dln, d->res[l], d->e.p + bo(d, l, G_LN1W),
                                        a->ln1_mean, a->ln1_rstd, N, C, acc);
    if (!rc)
        rc = report(ready, ctx, bo(d, l, G_LN1W), k);
    return rc;
}

/* Block l backward, after what trainer.recompute dropped is made again (the
 * shared buffers of the work region: the classifier and block l+1's backward
 * overwrote them, so every block recomputes, the last included; block l+1's
 * weight gradients read them, and c_attn's is the last of those queued). */
static int block_backward(struct gpt2_dev *d, int l, int B, bool acc, dt_model_cuda_ready_fn ready, void *ctx)
{
    int N = B * d->T, rc = 0;
    if (d->recompute != DT_RECOMPUTE_NONE)
        rc = wgrad_wait(d, WG_QKV);
    if (!rc && d->recompute == DT_RECOMPUTE_BLOCK)
        rc = block_forward(d, l, B, false);
    else if (!rc && d->recompute == DT_RECOMPUTE_GELU)
        rc = dt_cuda_gelu_tanh_forward(d->e.k, d->e.t, d->a[l].fch_gelu, d->a[l].fch,
                                       (size_t)N * 4 * (size_t)d->g->C);
    if (!rc)
        rc = mlp_backward(d, l, N, acc, ready, ctx);
    if (!rc)
        rc = attn_backward(d, l, B, acc, ready, ctx);
    return rc ? dt_error_prefix("cuda gpt2: block %d backward", l) : 0;
}

/* From dlnf (the classifier left it in dln) down: ln_f, the blocks from the
 * last, the embeddings (adding to dwte, which the head wrote).  Ranges are
 * reported from the top of the arena down, wte's last; the weight gradients'
 * stream is joined into k's before the embeddings (their scratch is the work
 * region, which the weight gradients read). */
static int gpt2_cuda_backward(void *state, int B, bool accumulate, dt_model_cuda_ready_fn ready, void *ctx)
{
    struct gpt2_dev *d = state;
    const struct dt_gpt2 *g = d->g;
    struct dt_cuda_ctx *k = d->e.k;
    int T = d->T, N = B * T, C = g->C;
    size_t NC = (size_t)N * (size_t)C;
    memset(d->pending, 0, sizeof d->pending);
    int rc = dt_cuda_zero(k, d->dres, NC * sizeof(float));
    if (!rc)
        rc = dt_cuda_layernorm_backward(k, d->e.t, d->dres, d->dres_t[0], d->e.g + g->lnfw, d->e.g + g->lnfb,
                                        d->dln, d->res[g->L], d->e.p + g->lnfw, d->lnf_mean, d->lnf_rstd, N,
                                        C, accumulate);
    if (!rc)
        rc = report(ready, ctx, g->lnfw, k);
    for (int l = g->L - 1; l >= 0 && !rc; l--)
        rc = block_backward(d, l, B, accumulate, ready, ctx);
    if (!rc && d->kw)
        rc = dt_cuda_stream_after(dt_cuda_stream(k), dt_cuda_stream(d->kw), d->done_ev[WG_QKV],
                                  "joining gpt2's weight-gradient stream");
    if (!rc && !accumulate && T < g->block) /* positions the batch does not reach get no gradient */
        rc = dt_cuda_zero(k, d->e.g + g->wpe + (size_t)T * (size_t)C,
                          (size_t)(g->block - T) * (size_t)C * sizeof(float));
    if (!rc)
        rc = dt_cuda_embed_backward(k, d->e.g + g->wte, d->e.g + g->wpe, d->dres, d->e.x, B, T, C, accumulate,
                                    d->emb_scratch);
    if (!rc)
        rc = report(ready, ctx, 0, k);
    return rc;
}

const struct dt_model_cuda_ops dt_gpt2__cuda = {
    .create = gpt2_cuda_create,
    .destroy = gpt2_cuda_destroy,
    .forward_loss = gpt2_cuda_forward_loss,
    .backward = gpt2_cuda_backward,
    .act_bytes = gpt2_cuda_act_bytes,
};
