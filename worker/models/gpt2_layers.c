/* gpt2_layers.c - GPT-2's layers, each forward next to its backward with the
 * math above them, as llm.c's train_gpt2.c keeps them (gpt2_internal.h lists
 * them).  All the parallelism is the CPU pool's (worker/cpu_pool.h): a GEMM
 * is cut into tiles of its output, each one single-threaded OpenBLAS call
 * (the kernel table's gemm), attention runs one (b, h) per pool item with
 * its GEMMs inside (BLAS runs on its caller's thread), and every other loop
 * is split by rows or columns, weighted by the work of one (cpu_pool's
 * cost).  Each output element is one thread's, its sums run in a fixed
 * order, and the tiles depend on the shapes alone: the bits do not depend on
 * the thread count.
 *
 * Autocast (p = bf16 or fp16) follows torch.autocast on CPU for what GPT-2
 * runs: linear and matmul in the low type with fp32 accumulation (their
 * outputs rounded once), softmax and GELU in the type they are given (computed
 * in float, rounded), layer_norm, the residual adds and cross_entropy in fp32.
 * Low-precision values live in float arrays (as mlp.c explains).
 *
 * Not for the network's order of layers, buffers or recomputation (gpt2.c).
 */
#include "worker/models/gpt2_internal.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

#include "worker/cpu_pool.h"

#if defined(__GNUC__) && !defined(__clang__)
#define DT_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define DT_CLONES
#endif

/* One job of the pool: each kernel reads the fields it names. */
struct job {
    float *out, *out2, *out3;
    const float *in, *in2, *w, *b;
    const float *mean, *rstd;
    const int32_t *tok;
    const struct dt_kernels *k;
    int B, T, C, H, N, V, stride;
    float scale;
    bool acc, grad;
    enum dt_kprec p;
};

/* n items of `cost` elements' work each (a row of C floats: C) */
static void run(void (*fn)(void *, size_t, size_t), struct job *j, size_t n, size_t align, size_t cost)
{
    dt_cpu_pool_run_cost(fn, j, n, align, cost);
}

/* ---- a fast expf the compiler vectorises ---- */

/* exp(x) = 2^n e^r with n = round(x / ln 2), |r| <= ln2 / 2, e^r by its
 * degree-6 Taylor polynomial (error < 2 ulp over the range; glibc's expf is
 * a call per element that GCC does not vectorise without -ffast-math).
 * Below -87.3 the result is 0, the softmax's masked or negligible terms. */
static inline float fexp(float x)
{
    x = x < -87.3f ? -87.3f : x > 88.7f ? 88.7f : x;
    /* round to nearest even by adding 1.5 * 2^23 (exact for |x / ln 2| < 2^22) */
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = fmaf(n, -0.693145751953125f, x);
    r = fmaf(n, -1.428606765330187045e-06f, r);
    float e = 1.0f / 720.0f;
    e = fmaf(e, r, 1.0f / 120.0f);
    e = fmaf(e, r, 1.0f / 24.0f);
    e = fmaf(e, r, 1.0f / 6.0f);
    e = fmaf(e, r, 0.5f);
    e = fmaf(e, r, 1.0f);
    e = fmaf(e, r, 1.0f);
    union {
        int32_t i;
        float f;
    } two_n = {.i = ((int32_t)n + 127) << 23}; /* 2^n, built in the exponent field */
    return e * two_n.f;
}

/* ---- sums the compiler vectorises ---- */

/* Sixteen partial sums (lane k takes elements i = k mod 16) combined in a
 * fixed tree: C forbids reassociating a float sum, so a plain loop runs one
 * add at a time; this order is as fixed as the plain one, whatever the
 * clone or thread count. */
#define LANES 16

static inline float lanes_total(float *s)
{
    for (int w = LANES / 2; w > 0; w /= 2)
        for (int k = 0; k < w; k++)
            s[k] += s[k + w];
    return s[0];
}

static inline float vsum(const float *a, int n)
{
    float s[LANES] = {0};
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int k = 0; k < LANES; k++)
            s[k] += a[i + k];
    for (; i < n; i++)
        s[i % LANES] += a[i];
    return lanes_total(s);
}

static inline float vdot(const float *a, const float *b, int n)
{
    float s[LANES] = {0};
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int k = 0; k < LANES; k++)
            s[k] += a[i + k] * b[i + k];
    for (; i < n; i++)
        s[i % LANES] += a[i] * b[i];
    return lanes_total(s);
}

static inline float vmax(const float *a, int n)
{
    float s[LANES];
    for (int k = 0; k < LANES; k++)
        s[k] = a[0];
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int k = 0; k < LANES; k++)
            s[k] = a[i + k] > s[k] ? a[i + k] : s[k];
    for (; i < n; i++)
        s[0] = a[i] > s[0] ? a[i] : s[0];
    for (int k = 1; k < LANES; k++)
        s[0] = s[k] > s[0] ? s[k] : s[0];
    return s[0];
}

/* ---- encoder: token and position embeddings ---- */

/* out[b,t,:] = wte[inp[b,t],:] + wpe[t,:]  (rows are independent) */
static void encoder_fwd_rows(void *ctx, size_t lo, size_t hi)
{
    const struct job *j = ctx;
    for (size_t r = lo; r < hi; r++) {
        const float *te = j->in + (size_t)j->tok[r] * (size_t)j->C, *pe = j->in2 + (r % (size_t)j->T) * j->C;
        float *o = j->out + r * (size_t)j->C;
        for (int i = 0; i < j->C; i++)
            o[i] = te[i] + pe[i];
    }
}

void dt_gpt2__encoder_forward(float *out, const int32_t *inp, const float *wte, const float *wpe, int B,
                              int T, int C)
{
    struct job j = {.out = out, .in = wte, .in2 = wpe, .tok = inp, .T = T, .C = C};
    run(encoder_fwd_rows, &j, (size_t)B * (size_t)T, 1, (size_t)C);
}

/* dwte[inp[b,t],i] += dout[b,t,i] and dwpe[t,i] (+)= sum_b dout[b,t,i], rows
 * in order; split by columns i so that a token seen twice is one thread's. */
static void encoder_bwd_cols(void *ctx, size_t lo, size_t hi)
{
    const struct job *j = ctx;
    size_t C = (size_t)j->C;
    for (int t = 0; t < j->T; t++) {
        float *dp = j->out2 + (size_t)t * C;
        for (int b = 0; b < j->B; b++) {
            size_t r = (size_t)b * (size_t)j->T + (size_t)t;
            const float *d = j->in + r * C;
            float *dt = j->out + (size_t)j->tok[r] * C;
            bool first = b == 0 && !j->acc;
            for (size_t i = lo; i < hi; i++) {
                dt[i] += d[i];
                dp[i] = first ? d[i] : dp[i] + d[i];
            }
        }
    }
}

void dt_gpt2__encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int B, int T,
                               int C, bool accumulate)
{
    struct job j = {
        .out = dwte, .out2 = dwpe, .in = dout, .tok = inp, .B = B, .T = T, .C = C, .acc = accumulate};
    run(encoder_bwd_cols, &j, (size_t)C, 16, (size_t)B * (size_t)T);
}

/* ---- layernorm ---- */

/* mean = sum_i x_i / C, var = sum_i (x_i - mean)^2 / C (biased, as torch),
 * rstd = 1 / sqrt(var + 1e-5), out_i = (x_i - mean) rstd w_i + b_i */
DT_CLONES static void ln_fwd_rows(void *ctx, size_t lo, size_t hi)
{
    const struct job *j = ctx;
    int C = j->C;
    for (size_t r = lo; r < hi; r++) {
        const float *x = j->in + r * (size_t)C;
        float *o = j->out + r * (size_t)C;
        float m = vsum(x, C) / (float)C, v[LANES] = {0};
        for (int i = 0; i < C; i++)
            v[i % LANES] += (x[i] - m) * (x[i] - m);
        float rs = 1.0f / sqrtf(lanes_total(v) / (float)C + 1e-5f);
        for (int i = 0; i < C; i++)
            o[i] = (x[i] - m) * rs * j->w[i] + j->b[i];
        j->out2[r] = m;
        j->out3[r] = rs;
    }
}

void dt_gpt2__layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                                const float *b, int N, int C)
{
    struct job j = {.out = out, .out2 = mean, .out3 = rstd, .in = inp, .w = w, .b = b, .C = C};
    run(ln_fwd_rows, &j, (size_t)N, 1, (size_t)C);
}

/* With n_i = (x_i - mean) rstd and dn_i = w_i dout_i (rows independent):
 *   dx_i += rstd (dn_i - mean_k(dn_k) - n_i mean_k(dn_k n_k)) */
DT_CLONES static void ln_bwd_rows(void *ctx, size_t lo, size_t hi)
{
    const struct job *j = ctx;
    int C = j->C;
    for (size_t r = lo; r < hi; r++) {
        const float *x = j->in2 + r * (size_t)C, *d = j->in + r * (size_t)C;
        float *dx = j->out + r * (size_t)C, mu = j->mean[r], rs = j->rstd[r], sa[LANES] = {0},
              sc[LANES] = {0};
        for (int i = 0; i < C; i++) {
            float dn = j->w[i] * d[i];
            sa[i % LANES] += dn;
            sc[i % LANES] += dn * (x[i] - mu) * rs;
        }
        float a = lanes_total(sa) / (float)C, c = lanes_total(sc) / (float)C;
        for (int i = 0; i < C; i++)
            dx[i] += rs * (j->w[i] * d[i] - a - (x[i] - mu) * rs * c);
    }
}

/* dw_i (+)= sum_r dout_ri n_ri,  db_i (+)= sum_r dout_ri  (rows in order, split by columns) */
DT_CLONES static void ln_bwd_cols(void *ctx, size_t lo, size_t hi)
{
    const struct job *j = ctx;
    size_t C = (size_t)j->C;
    if (!j->acc)
        for (size_t i = lo; i < hi; i++)
            j->out2[i] = j->out3[i] = 0.0f;
    for (int r = 0; r < j->N; r++) {
        const float *x = j->in2 + (size_t)r * C, *d = j->in + (size_t)r * C;
        float mu = j->mean[r], rs = j->rstd[r];
        for (size_t i = lo; i < hi; i++) {
            j->out2[i] += d[i] * ((x[i] - mu) * rs);
            j->out3[i] += d[i];
        }
    }
}

void dt_gpt2__layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                 const float *w, const float *mean, const float *rstd, int N, int C,
                                 bool accumulate)
{
    struct job j = {.out = dinp,
                    .out2 = dw,
                    .out3 = db,
                    .in = dout,
                    .in2 = inp,
                    .w = w,
                    .mean = mean,
                    .rstd = rstd,
                    .N = N,
                    .C = C,
                    .acc = accumulate};
    run(ln_bwd_rows, &j, (size_t)N, 1, (size_t)C);
    run(ln_bwd_cols, &j, (size_t)C, 16, (size_t)N);
}

/* ---- matmul (Conv1D: W [in, out]; the tied head: W [out, in]) ---- */

static void bias_rows(void *ctx, size_t lo, size_t hi)
{
    const struct job *j = ctx;
    for (size_t r = lo; r < hi; r++)
        memcpy(j->out + r * (size_t)j->C, j->b, (size_t)j->C * sizeof(float));
}

/* out[N,oc] = b + inp[N,ic] W[ic,oc] (torch.addmm(b, x, W): the bias is the
 * GEMM's C with beta 1); without b (the head), out = inp W^T, W [oc, ic]. */
void dt_gpt2__matmul_forward(const struct dt_kernels *k, float *out, const float *inp, const float *w,
                             const float *b, int N, int ic, int oc, enum dt_kprec p)
{
    if (b) {
        struct job j = {.out = out, .b = b, .C = oc};
        run(bias_rows, &j, (size_t)N, 1, (size_t)oc);
        k->gemm(false, false, N, oc, ic, inp, ic, w, oc, 1.0f, out, oc);
    } else {
        k->gemm(false, true, N, oc, ic, inp, ic, w, ic, 0.0f, out, oc);
    }
    if (p != DT_KPREC_F32)
        k->round_lowp(out, out, (size_t)N * (size_t)oc, p, false);
}

/* db_i (+)= sum_r dout_ri, rows in order, split by columns */
DT_CLONES static void colsum_cols(void *ctx, size_t lo, size_t hi)
{
    const struct job *j = ctx;
    if (!j->acc)
        memset(j->out + lo, 0, (hi - lo) * sizeof(float));
    for (int r = 0; r < j->N; r++) {
        const float *d = j->in + (size_t)r * (size_t)j->C;
        for (size_t i = lo; i < hi; i++)
            j->out[i] += d[i];
    }
}

/* Conv1D (b != NULL or db != NULL): dinp = dout W^T, dW (+)= inp^T dout, db (+)= sum_r dout.
 * The head (db == NULL, W [oc, ic]): dinp = dout W, dW (+)= dout^T inp.
 * Autocast: dW and db come out of the low-precision GEMM/sum rounded, then
 * are added in fp32 (wtmp holds dW, or db, before rounding); dinp is rounded. */
void dt_gpt2__matmul_backward(const struct dt_kernels *k, float *dinp, float *dw, float *db,
                              const float *dout, const float *inp, const float *w, int N, int ic, int oc,
                              bool accumulate, enum dt_kprec p, float *wtmp)
{
    bool lp = p != DT_KPREC_F32;
    float beta = accumulate && !lp ? 1.0f : 0.0f, *dwo = lp ? wtmp : dw;
    if (db) {
        struct job j = {.out = lp ? wtmp : db, .in = dout, .N = N, .C = oc, .acc = accumulate && !lp};
        run(colsum_cols, &j, (size_t)oc, 16, (size_t)N);
        if (lp)
            k->round_lowp(db, wtmp, (size_t)oc, p, accumulate);
        k->gemm(true, false, ic, oc, N, inp, ic, dout, oc, beta, dwo, oc);
        if (dinp)
            k->gemm(false, true, N, ic, oc, dout, oc, w, oc, 0.0f, dinp, ic);
    } else {
        k->gemm(true, false, oc, ic, N, dout, oc, inp, ic, beta, dwo, ic);
        if (dinp)
            k->gemm(false, false, N, ic, oc, dout, oc, w, ic, 0.0f, dinp, ic);
    }
    if (lp) {
        k->round_lowp(dw, wtmp, (size_t)ic * (size_t)oc, p, accumulate);
        if (dinp)
            k->round_lowp(dinp, dinp, (size_t)N * (size_t)ic, p, false);
    }
}

/* ---- causal self-attention ---- */

/* For batch b and head h (hs = C/H columns of q, k and v in qkv's rows), as
 * nanoGPT without flash and Hugging Face's eager attention:
 *   S = Q K^T
 *   att_t = softmax(S_t / sqrt(hs)) over columns <= t, 0 above (the mask)
 *   Y = att V
 * in blocks of ATT_ROWS rows t (BLAS GEMMs): a block reads and writes only
 * the columns up to its last row, the causal triangle and the diagonal
 * blocks (5/8 of T x T at T = 256), never the masked rest.
 * Autocast rounds S (a bmm output), the scaled scores (a bf16 multiply),
 * att (softmax's output in the type it was given) and Y. */
DT_CLONES static void softmax_rows(void *ctx, size_t lo, size_t hi)
{
    const struct job *j = ctx;
    bool lp = j->p != DT_KPREC_F32;
    for (size_t r = lo; r < hi; r++) {
        int t = (int)(r % (size_t)j->T), n = t + 1;
        float *row = j->out + r * (size_t)j->T;
        if (lp)
            j->k->round_lowp(row, row, (size_t)n, j->p, false);
        for (int i = 0; i < n; i++)
            row[i] *= j->scale;
        if (lp)
            j->k->round_lowp(row, row, (size_t)n, j->p, false);
        float mx = vmax(row, n);
        for (int i = 0; i < n; i++)
            row[i] = fexp(row[i] - mx);
        float inv = 1.0f / vsum(row, n);
        for (int i = 0; i < n; i++)
            row[i] *= inv;
        if (lp)
            j->k->round_lowp(row, row, (size_t)n, j->p, false);
        memset(row + n, 0, (size_t)(j->T - n) * sizeof *row);
    }
}

#define ATT_ROWS 64

/* One (b, h) per item, on one thread (the pool's pieces are the B H pairs):
 * per block of rows [r, e), S's columns [0, e), their softmax, then Y. */
static void attention_fwd_heads(void *ctx, size_t lo, size_t hi)
{
    const struct job *j = ctx;
    int T = j->T, C = j->C, H = j->H, hs = C / H, C3 = 3 * C;
    size_t TT = (size_t)T * (size_t)T;
    for (size_t bh = lo; bh < hi; bh++) {
        size_t b = bh / (size_t)H, h = bh % (size_t)H;
        const float *q = j->in + b * (size_t)T * (size_t)C3 + h * (size_t)hs, *kk = q + C, *v = q + 2 * C;
        float *s = j->out + bh * TT, *y = j->out2 + b * (size_t)T * (size_t)C + h * (size_t)hs;
        for (int r = 0; r < T; r += ATT_ROWS) {
            int e = r + ATT_ROWS < T ? r + ATT_ROWS : T;
            float *sr = s + (size_t)r * (size_t)T;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, e - r, e, hs, 1.0f, q + (size_t)r * C3, C3,
                        kk, C3, 0.0f, sr, T);
            softmax_rows(ctx, bh * (size_t)T + (size_t)r, bh * (size_t)T + (size_t)e);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, e - r, hs, e, 1.0f, sr, T, v, C3, 0.0f,
                        y + (size_t)r * (size_t)C, C);
        }
    }
}

void dt_gpt2__attention_forward(const struct dt_kernels *k, float *out, float *att, const float *qkv, int B,
                                int T, int C, int H, enum dt_kprec p)
{
    int hs = C / H;
    struct job j = {.out = att,
                    .out2 = out,
                    .in = qkv,
                    .k = k,
                    .T = T,
                    .C = C,
                    .H = H,
                    .p = p,
                    .scale = 1.0f / sqrtf((float)hs)};
    run(attention_fwd_heads, &j, (size_t)B * (size_t)H, 1, (size_t)T * (size_t)T * (size_t)hs / 4);
    if (p != DT_KPREC_F32)
        k->round_lowp(out, out, (size_t)B * T * C, p, false);
}

/* Backward of the above for one (b, h), given dY:
 *   dV = att^T dY,  datt = dY V^T
 *   dS_t = att_t * (datt_t - sum_k att_tk datt_tk) / sqrt(hs)
 *          (softmax', then the scale; 0 above the diagonal)
 *   dQ = dS K,  dK = dS^T Q
 * Each (b, h) writes its own columns of dqkv and its own [T,T] of datt.
 * Autocast rounds datt, the softmax gradient, its scaled value and (at the
 * end) dq, dk, dv. */
DT_CLONES static void softmax_bwd_rows(void *ctx, size_t lo, size_t hi)
{
    const struct job *j = ctx;
    bool lp = j->p != DT_KPREC_F32;
    for (size_t r = lo; r < hi; r++) {
        int n = (int)r + 1;
        float *row = j->out + r * (size_t)j->T, *d = j->out2 + r * (size_t)j->T;
        if (lp)
            j->k->round_lowp(d, d, (size_t)n, j->p, false);
        float dot = vdot(row, d, n);
        for (int i = 0; i < n; i++)
            row[i] *= d[i] - dot;
        if (lp)
            j->k->round_lowp(row, row, (size_t)n, j->p, false);
        for (int i = 0; i < n; i++)
            row[i] *= j->scale;
        if (lp)
            j->k->round_lowp(row, row, (size_t)n, j->p, false);
    }
}

/* One (b, h) per item, on one thread, with its own [T,T] of datt.  The row
 * blocks [r, e) of datt, dS and dQ read columns [0, e); dV and dK's rows
 * [r, e) are sums over the rows t >= r of att and dS (the rest are 0). */
static void attention_bwd_heads(void *ctx, size_t lo, size_t hi)
{
    const struct job *j = ctx;
    int T = j->T, C = j->C, H = j->H, hs = C / H, C3 = 3 * C;
    size_t TT = (size_t)T * (size_t)T;
    struct job rows = *j;
    for (size_t bh = lo; bh < hi; bh++) {
        size_t b = bh / (size_t)H, h = bh % (size_t)H, at = b * (size_t)T * (size_t)C3 + h * (size_t)hs;
        const float *q = j->in2 + at, *kk = q + C, *v = q + 2 * C;
        const float *dy = j->in + b * (size_t)T * (size_t)C + h * (size_t)hs;
        float *s = j->out2 + bh * TT, *datt = j->out3 + bh * TT, *dq = j->out + at, *dk = dq + C,
              *dv = dq + 2 * C;
        for (int r = 0; r < T; r += ATT_ROWS) {
            int e = r + ATT_ROWS < T ? r + ATT_ROWS : T;
            size_t rT = (size_t)r * (size_t)T;
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, e - r, hs, T - r, 1.0f, s + rT + r, T,
                        dy + (size_t)r * C, C, 0.0f, dv + (size_t)r * C3, C3);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, e - r, e, hs, 1.0f, dy + (size_t)r * C, C, v,
                        C3, 0.0f, datt + rT, T);
        }
        rows.out = s;
        rows.out2 = datt;
        softmax_bwd_rows(&rows, 0, (size_t)T);
        for (int r = 0; r < T; r += ATT_ROWS) {
            int e = r + ATT_ROWS < T ? r + ATT_ROWS : T;
            size_t rT = (size_t)r * (size_t)T;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, e - r, hs, e, 1.0f, s + rT, T, kk, C3,
                        0.0f, dq + (size_t)r * C3, C3);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, e - r, hs, T - r, 1.0f, s + rT + r, T,
                        q + (size_t)r * C3, C3, 0.0f, dk + (size_t)r * C3, C3);
        }
    }
}

void dt_gpt2__attention_backward(const struct dt_kernels *k, float *dqkv, float *att, float *datt,
                                 const float *dout, const float *qkv, int B, int T, int C, int H,
                                 enum dt_kprec p)
{
    int hs = C / H;
    struct job j = {.out = dqkv,
                    .out2 = att,
                    .out3 = datt,
                    .in = dout,
                    .in2 = qkv,
                    .k = k,
                    .T = T,
                    .C = C,
                    .H = H,
                    .p = p,
                    .scale = 1.0f / sqrtf((float)hs)};
    run(attention_bwd_heads, &j, (size_t)B * (size_t)H, 1, (size_t)T * (size_t)T * (size_t)hs / 2);
    if (p != DT_KPREC_F32)
        k->round_lowp(dqkv, dqkv, (size_t)B * T * 3 * C, p, false);
}

/* ---- GELU (tanh approximation) and the residual add ---- */

#define GELU_K 0.7978845608028654f /* sqrt(2 / pi) */

/* tanh(a) = 1 - 2 / (exp(2a) + 1): its absolute error is an ulp of 1, and
 * GELU only ever adds it to 1. */
static inline float ftanh(float a)
{
    return 1.0f - 2.0f / (fexp(2.0f * a) + 1.0f);
}

/* gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
DT_CLONES static void gelu_fwd_range(void *ctx, size_t lo, size_t hi)
{
    const struct job *j = ctx;
    for (size_t i = lo; i < hi; i++) {
        float x = j->in[i];
        j->out[i] = 0.5f * x * (1.0f + ftanh(GELU_K * (x + 0.044715f * x * x * x)));
    }
    if (j->p != DT_KPREC_F32)
        j->k->round_lowp(j->out + lo, j->out + lo, hi - lo, j->p, false);
}

void dt_gpt2__gelu_forward(const struct dt_kernels *k, float *out, const float *inp, size_t n,
                           enum dt_kprec p)
{
    struct job j = {.out = out, .in = inp, .k = k, .p = p};
    run(gelu_fwd_range, &j, n, 64, 1);
}

/* gelu'(x) = 0.5 (1 + th) + 0.5 x (1 - th^2) sqrt(2/pi) (1 + 3 0.044715 x^2),
 * th = tanh(sqrt(2/pi) (x + 0.044715 x^3)) */
DT_CLONES static void gelu_bwd_range(void *ctx, size_t lo, size_t hi)
{
    const struct job *j = ctx;
    for (size_t i = lo; i < hi; i++) {
        float x = j->in2[i], th = ftanh(GELU_K * (x + 0.044715f * x * x * x));
        float g =
            0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
        j->out[i] = g * j->in[i];
    }
    if (j->p != DT_KPREC_F32)
        j->k->round_lowp(j->out + lo, j->out + lo, hi - lo, j->p, false);
}

void dt_gpt2__gelu_backward(const struct dt_kernels *k, float *dinp, const float *inp, const float *dout,
                            size_t n, enum dt_kprec p)
{
    struct job j = {.out = dinp, .in = dout, .in2 = inp, .k = k, .p = p};
    run(gelu_bwd_range, &j, n, 64, 1);
}

DT_CLONES static void residual_range(void *ctx, size_t lo, size_t hi)
{
    const struct job *j = ctx;
    for (size_t i = lo; i < hi; i++)
        j->out[i] = j->in[i] + j->in2[i];
}

/* out = a + b (the residual stream stays fp32 under autocast: fp32 + bf16 promotes) */
void dt_gpt2__residual_forward(float *out, const float *a, const float *b, size_t n)
{
    struct job j = {.out = out, .in = a, .in2 = b};
    run(residual_range, &j, n, 64, 1);
}

/* ---- softmax cross-entropy over the vocabulary ---- */

/* loss_r = log(sum_j exp(x_j - max)) - (x_y - max) over the first V columns;
 * with grad, the row becomes (softmax - onehot) dscale in place: exp(x_j -
 * max) is written once, then scaled, so the row is read three times, all in
 * cache (the max, the exponentials, the scaling).  Without grad (evaluation)
 * out2[r] = 1 when the argmax (first of equals, as torch.argmax) is the target. */
DT_CLONES static void xent_rows(void *ctx, size_t lo, size_t hi)
{
    const struct job *j = ctx;
    int V = j->V;
    for (size_t r = lo; r < hi; r++) {
        float *x = j->out + r * (size_t)j->stride, mx = vmax(x, V), sum;
        int arg = 0, y = j->tok[r];
        while (!j->grad && arg < V && x[arg] != mx) /* the first maximum, as torch.argmax (evaluation) */
            arg++;
        float xy = x[y];
        if (j->grad) {
            for (int i = 0; i < V; i++)
                x[i] = fexp(x[i] - mx);
            sum = vsum(x, V);
            float sc = j->scale / sum;
            for (int i = 0; i < V; i++)
                x[i] *= sc;
            x[y] -= j->scale;
            for (int i = V; i < j->stride; i++)
                x[i] = 0.0f;
        } else {
            float s[LANES] = {0};
            for (int i = 0; i < V; i++)
                s[i % LANES] += fexp(x[i] - mx);
            sum = lanes_total(s);
        }
        j->out3[r] = logf(sum) - (xy - mx);
        j->out2[r] = arg == y ? 1.0f : 0.0f;
    }
}

double dt_gpt2__xent(float *logits, float *losses, const int32_t *targets, int N, int V, int stride,
                     float dscale, bool grad, int64_t *correct)
{
    struct job j = {.out = logits,
                    .out2 = losses + N,
                    .out3 = losses,
                    .tok = targets,
                    .V = V,
                    .stride = stride,
                    .scale = dscale,
                    .grad = grad};
    run(xent_rows, &j, (size_t)N, 1, (size_t)V);
    double total = 0.0;
    int64_t hits = 0;
    for (int r = 0; r < N; r++) {
        total += losses[r];
        hits += losses[N + r] != 0.0f;
    }
    if (correct)
        *correct += hits;
    return total;
}
