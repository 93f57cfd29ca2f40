/* gpt2_layers.c - GPT-2's layers, each forward next to its backward with the
 * math above them, as llm.c's train_gpt2.c keeps them (gpt2_internal.h lists
 * them).  GEMMs go to OpenBLAS (its own threads); every other loop is split
 * over the CPU pool (worker/cpu_pool.h) by rows, columns or heads, so that
 * each output element is one thread's and sums run in a fixed order: the
 * bits do not depend on the thread count.
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

static void run(void (*fn)(void *, size_t, size_t), struct job *j, size_t n, size_t align)
{
    dt_cpu_pool_run(fn, j, n, align);
}

/* ---- a fast expf the compiler vectorises ---- */

/* exp(x) = 2^n e^r with n = round(x / ln 2), |r| <= ln2 / 2, e^r by its
 * degree-6 Taylor polynomial (error < 2 ulp over the range; glibc's expf is
 * a call per element that GCC does not vectorise without -ffast-math).
 * Below -87.3 the result is 0, the softmax's masked or negligible terms. */
static inline float fexp(float x)
{
    x = x < -87.3f ? -87.3f : x > 88.7f ? 88.7f : x;
    float n = __builtin_roundevenf(x * 1.44269504088896341f);
    float r = fmaf(n, -0.693145751953125f, x);
    r = fmaf(n, -1.428606765330187045e-06f, r);
    float e = 1.0f / 720.0f;
    e = fmaf(e, r, 1.0f / 120.0f);
    e = fmaf(e, r, 1.0f / 24.0f);
    e = fmaf(e, r, 1.0f / 6.0f);
    e = fmaf(e, r, 0.5f);
    e = fmaf(e, r, 1.0f);
    e = fmaf(e, r, 1.0f);
    int32_t bits = ((int32_t)n + 127) << 23;
    float two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    return e * two_n;
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

void dt_gpt2__encoder_forward(float *out, const int32_t *inp, const float *wte, const float *wpe, int B, int T,
                              int C)
{
    struct job j = {.out = out, .in = wte, .in2 = wpe, .tok = inp, .T = T, .C = C};
    run(encoder_fwd_rows, &j, (size_t)B * (size_t)T, 1);
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
    struct job j = {.out = dwte, .out2 = dwpe, .in = dout, .tok = inp, .B = B, .T = T, .C = C, .acc = accumulate};
    run(encoder_bwd_cols, &j, (size_t)C, 16);
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
        float s = 0.0f;
        for (int i = 0; i < C; i++)
            s += x[i];
        float m = s / (float)C, v = 0.0f;
        for (int i = 0; i < C; i++)
            v += (x[i] - m) * (x[i] - m);
        float rs = 1.0f / sqrtf(v / (float)C + 1e-5f);
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
    run(ln_fwd_rows, &j, (size_t)N, 1);
}

/* With n_i = (x_i - mean) rstd and dn_i = w_i dout_i (rows independent):
 *   dx_i += rstd (dn_i - mean_k(dn_k) - n_i mean_k(dn_k n_k)) */
DT_CLONES static void ln_bwd_rows(void *ctx, size_t lo, size_t hi)
{
    const struct job *j = ctx;
    int C = j->C;
    for (size_t r = lo; r < hi; r++) {
        const float *x = j->in2 + r * (size_t)C, *d = j->in + r * (size_t)C;
        float *dx = j->out + r * (size_t)C, mu = j->mean[r], rs = j->rstd[r], a = 0.0f, c = 0.0f;
        for (int i = 0; i < C; i++) {
            float dn = j->w[i] * d[i];
            a += dn;
            c += dn * (x[i] - mu) * rs;
        }
        a /= (float)C;
        c /= (float)C;
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
    struct job j = {.out = dinp, .out2 = dw, .out3 = db, .in = dout, .in2 = inp, .w = w, .mean = mean,
                    .rstd = rstd, .N = N, .C = C, .acc = accumulate};
    run(ln_bwd_rows, &j, (size_t)N, 1);
    run(ln_bwd_cols, &j, (size_t)C, 16);
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
        run(bias_rows, &j, (size_t)N, 1);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, oc, ic, 1.0f, inp, ic, w, oc, 1.0f, out, oc);
    } else {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, oc, ic, 1.0f, inp, ic, w, ic, 0.0f, out, oc);
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
void dt_gpt2__matmul_backward(const struct dt_kernels *k, float *dinp, float *dw, float *db, const float *dout,
                              const float *inp, const float *w, int N, int ic, int oc, bool accumulate,
                              enum dt_kprec p, float *wtmp)
{
    bool lp = p != DT_KPREC_F32;
    float beta = accumulate && !lp ? 1.0f : 0.0f, *dwo = lp ? wtmp : dw;
    if (db) {
        struct job j = {.out = lp ? wtmp : db, .in = dout, .N = N, .C = oc, .acc = accumulate && !lp};
        run(colsum_cols, &j, (size_t)oc, 16);
        if (lp)
            k->round_lowp(db, wtmp, (size_t)oc, p, accumulate);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ic, oc, N, 1.0f, inp, ic, dout, oc, beta, dwo, oc);
        if (dinp)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, ic, oc, 1.0f, dout, oc, w, oc, 0.0f, dinp, ic);
    } else {
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, oc, ic, N, 1.0f, dout, oc, inp, ic, beta, dwo, ic);
        if (dinp)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, ic, oc, 1.0f, dout, oc, w, ic, 0.0f, dinp, ic);
    }
    if (lp) {
        k->round_lowp(dw, wtmp, (size_t)ic * (size_t)oc, p, accumulate);
        if (dinp)
            k->round_lowp(dinp, dinp, (size_t)N * (size_t)ic, p, false);
    }
}

/* ---- causal self-attention ---- */

/* For batch b, head h (hs = C/H columns of q, k, v in qkv's row), row t:
 *   s_t2 = (q_t . k_t2) / sqrt(hs)  for t2 <= t     (autocast: round(round(q.k) scale), as q @ k^T * scale)
 *   att_t2 = exp(s_t2 - max) / sum                  (masked columns t2 > t are 0 and not stored)
 *   y_t = sum_t2 att_t2 v_t2                        (autocast: att and y rounded)
 * Each (b, h) pair is one thread's: it writes only its own att rows and y columns. */
DT_CLONES static void attn_fwd_heads(void *ctx, size_t lo, size_t hi)
{
    const struct job *j = ctx;
    int T = j->T, C = j->C, hs = C / j->H;
    size_t C3 = 3 * (size_t)C;
    bool lp = j->p != DT_KPREC_F32;
    for (size_t bh = lo; bh < hi; bh++) {
        size_t b = bh / (size_t)j->H, h = bh % (size_t)j->H;
        const float *base = j->in + b * (size_t)T * C3 + h * (size_t)hs;
        for (int t = 0; t < T; t++) {
            const float *q = base + (size_t)t * C3;
            float *row = j->out2 + (bh * (size_t)T + (size_t)t) * (size_t)T, mx = -INFINITY, sum = 0.0f;
            for (int t2 = 0; t2 <= t; t2++) {
                const float *kk = base + (size_t)t2 * C3 + C;
                float s = 0.0f;
                for (int i = 0; i < hs; i++)
                    s += q[i] * kk[i];
                row[t2] = s;
            }
            if (lp)
                j->k->round_lowp(row, row, (size_t)t + 1, j->p, false);
            for (int t2 = 0; t2 <= t; t2++) {
                row[t2] *= j->scale;
                mx = row[t2] > mx ? row[t2] : mx;
            }
            if (lp) {
                j->k->round_lowp(row, row, (size_t)t + 1, j->p, false);
                mx = -INFINITY;
                for (int t2 = 0; t2 <= t; t2++)
                    mx = row[t2] > mx ? row[t2] : mx;
            }
            for (int t2 = 0; t2 <= t; t2++) {
                row[t2] = fexp(row[t2] - mx);
                sum += row[t2];
            }
            float inv = 1.0f / sum;
            for (int t2 = 0; t2 <= t; t2++)
                row[t2] *= inv;
            if (lp)
                j->k->round_lowp(row, row, (size_t)t + 1, j->p, false);
            float *y = j->out + (b * (size_t)T + (size_t)t) * (size_t)C + h * (size_t)hs;
            memset(y, 0, (size_t)hs * sizeof *y);
            for (int t2 = 0; t2 <= t; t2++) {
                const float *v = base + (size_t)t2 * C3 + 2 * (size_t)C;
                for (int i = 0; i < hs; i++)
                    y[i] += row[t2] * v[i];
            }
            if (lp)
                j->k->round_lowp(y, y, (size_t)hs, j->p, false);
        }
    }
}

void dt_gpt2__attention_forward(const struct dt_kernels *k, float *out, float *att, const float *qkv, int B,
                                int T, int C, int H, enum dt_kprec p)
{
    struct job j = {.out = out, .out2 = att, .in = qkv, .k = k, .T = T, .C = C, .H = H, .p = p,
                    .scale = 1.0f / sqrtf((float)(C / H))};
    run(attn_fwd_heads, &j, (size_t)B * (size_t)H, 1);
}

/* Backward of the above, given dy_t (the heads' output gradient):
 *   datt_t2 = dy_t . v_t2,        dv_t2 += att_t2 dy_t
 *   ds_t2 = att_t2 (datt_t2 - sum_k att_k datt_k) / sqrt(hs)     (softmax backward, then the scale)
 *   dq_t += sum_t2 ds_t2 k_t2,    dk_t2 += ds_t2 q_t
 * Autocast rounds datt (a bmm output), the softmax gradient and its scaled
 * value, and each of dq, dk, dv once they are summed (bmm outputs). */
DT_CLONES static void attn_bwd_heads(void *ctx, size_t lo, size_t hi)
{
    const struct job *j = ctx;
    int T = j->T, C = j->C, hs = C / j->H;
    size_t C3 = 3 * (size_t)C;
    bool lp = j->p != DT_KPREC_F32;
    float datt[T];
    for (size_t bh = lo; bh < hi; bh++) {
        size_t b = bh / (size_t)j->H, h = bh % (size_t)j->H;
        const float *base = j->in2 + b * (size_t)T * C3 + h * (size_t)hs;
        float *dbase = j->out + b * (size_t)T * C3 + h * (size_t)hs;
        for (int t = 0; t < T; t++)
            for (int part = 0; part < 3; part++)
                memset(dbase + (size_t)t * C3 + (size_t)part * C, 0, (size_t)hs * sizeof(float));
        for (int t = 0; t < T; t++) {
            const float *q = base + (size_t)t * C3;
            const float *dy = j->in + (b * (size_t)T + (size_t)t) * (size_t)C + h * (size_t)hs;
            float *row = j->out2 + (bh * (size_t)T + (size_t)t) * (size_t)T, *dq = dbase + (size_t)t * C3;
            for (int t2 = 0; t2 <= t; t2++) {
                const float *v = base + (size_t)t2 * C3 + 2 * (size_t)C;
                float *dv = dbase + (size_t)t2 * C3 + 2 * (size_t)C, s = 0.0f, a = row[t2];
                for (int i = 0; i < hs; i++) {
                    s += dy[i] * v[i];
                    dv[i] += a * dy[i];
                }
                datt[t2] = s;
            }
            if (lp)
                j->k->round_lowp(datt, datt, (size_t)t + 1, j->p, false);
            float dot = 0.0f;
            for (int t2 = 0; t2 <= t; t2++)
                dot += row[t2] * datt[t2];
            for (int t2 = 0; t2 <= t; t2++)
                row[t2] = row[t2] * (datt[t2] - dot);
            if (lp)
                j->k->round_lowp(row, row, (size_t)t + 1, j->p, false);
            for (int t2 = 0; t2 <= t; t2++)
                row[t2] *= j->scale;
            if (lp)
                j->k->round_lowp(row, row, (size_t)t + 1, j->p, false);
            for (int t2 = 0; t2 <= t; t2++) {
                const float *kk = base + (size_t)t2 * C3 + C;
                float *dk = dbase + (size_t)t2 * C3 + C, ds = row[t2];
                for (int i = 0; i < hs; i++) {
                    dq[i] += ds * kk[i];
                    dk[i] += ds * q[i];
                }
            }
        }
        for (int t = 0; lp && t < T; t++)
            for (int part = 0; part < 3; part++) {
                float *d = dbase + (size_t)t * C3 + (size_t)part * C;
                j->k->round_lowp(d, d, (size_t)hs, j->p, false);
            }
    }
}

void dt_gpt2__attention_backward(const struct dt_kernels *k, float *dqkv, float *att, const float *dout,
                                 const float *qkv, int B, int T, int C, int H, enum dt_kprec p)
{
    struct job j = {.out = dqkv, .out2 = att, .in = dout, .in2 = qkv, .k = k, .T = T, .C = C, .H = H, .p = p,
                    .scale = 1.0f / sqrtf((float)(C / H))};
    run(attn_bwd_heads, &j, (size_t)B * (size_t)H, 1);
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

void dt_gpt2__gelu_forward(const struct dt_kernels *k, float *out, const float *inp, size_t n, enum dt_kprec p)
{
    struct job j = {.out = out, .in = inp, .k = k, .p = p};
    run(gelu_fwd_range, &j, n, 64);
}

/* gelu'(x) = 0.5 (1 + th) + 0.5 x (1 - th^2) sqrt(2/pi) (1 + 3 0.044715 x^2),
 * th = tanh(sqrt(2/pi) (x + 0.044715 x^3)) */
DT_CLONES static void gelu_bwd_range(void *ctx, size_t lo, size_t hi)
{
    const struct job *j = ctx;
    for (size_t i = lo; i < hi; i++) {
        float x = j->in2[i], th = ftanh(GELU_K * (x + 0.044715f * x * x * x));
        float g = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
        j->out[i] = g * j->in[i];
    }
    if (j->p != DT_KPREC_F32)
        j->k->round_lowp(j->out + lo, j->out + lo, hi - lo, j->p, false);
}

void dt_gpt2__gelu_backward(const struct dt_kernels *k, float *dinp, const float *inp, const float *dout,
                            size_t n, enum dt_kprec p)
{
    struct job j = {.out = dinp, .in = dout, .in2 = inp, .k = k, .p = p};
    run(gelu_bwd_range, &j, n, 64);
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
    run(residual_range, &j, n, 64);
}

/* ---- softmax cross-entropy over the vocabulary ---- */

/* loss_r = log(sum_j exp(x_j - max)) - (x_y - max) over the first V columns;
 * with grad, the row becomes (softmax - onehot) dscale in place: exp(x_j -
 * max) is written once, then scaled, so the row is read three times, all in
 * cache (the max, the exponentials, the scaling).  out2[r] = 1 when the
 * argmax (first of equals, as torch.argmax) is the target. */
DT_CLONES static void xent_rows(void *ctx, size_t lo, size_t hi)
{
    const struct job *j = ctx;
    int V = j->V;
    for (size_t r = lo; r < hi; r++) {
        float *x = j->out + r * (size_t)j->stride, mx = x[0];
        int arg = 0, y = j->tok[r];
        for (int i = 1; i < V; i++)
            if (x[i] > mx) {
                mx = x[i];
                arg = i;
            }
        float xy = x[y], sum = 0.0f;
        if (j->grad) {
            for (int i = 0; i < V; i++) {
                x[i] = fexp(x[i] - mx);
                sum += x[i];
            }
            float sc = j->scale / sum;
            for (int i = 0; i < V; i++)
                x[i] *= sc;
            x[y] -= j->scale;
            for (int i = V; i < j->stride; i++)
                x[i] = 0.0f;
        } else {
            for (int i = 0; i < V; i++)
                sum += fexp(x[i] - mx);
        }
        j->out3[r] = logf(sum) - (xy - mx);
        j->out2[r] = arg == y ? 1.0f : 0.0f;
    }
}

double dt_gpt2__xent(float *logits, float *losses, const int32_t *targets, int N, int V, int stride,
                     float dscale, bool grad, int64_t *correct)
{
    struct job j = {.out = logits, .out2 = losses + N, .out3 = losses, .tok = targets, .V = V,
                    .stride = stride, .scale = dscale, .grad = grad};
    run(xent_rows, &j, (size_t)N, 1);
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
