/* kernels_cpu.c - the CPU kernel table: GEMMs through OpenBLAS (tiles over the
 * CPU pool, one single-threaded sgemm each), the rest as
 * fused loops (bias + activation forward, activation' + bias gradient backward,
 * softmax + cross-entropy + its gradient, AdamW in one pass).
 *
 * Fusion is where a C trainer beats an op-by-op framework on CPU: each loop
 * here reads and writes its arrays once.  Not for threading policy: the
 * trainer decides how many threads each rank gets (set_threads).
 */
/* The Makefile builds this file with -O3 -fno-math-errno: O3 vectorises the
 * elementwise loops, and without errno sqrtf is one instruction GCC can
 * vectorise (errno for sqrt of a negative can never happen here: v >= 0).
 * `#pragma GCC optimize("no-math-errno")` is not enough: GCC 12 still guards
 * each sqrtf with a branch to libm, and AdamW ran scalar (a third of a
 * batch-64 step).  The hot elementwise kernels are also cloned for x86-64-v4
 * (AVX-512) and v3 (AVX2 with FMA: a plain "avx2" clone has no FMA, so each
 * fmaf would be a libm call) and picked at load time, so one binary runs
 * everywhere and fast where it can. */
#if defined(__GNUC__) && !defined(__clang__)
#define DT_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define DT_CLONES
#endif
#include "worker/kernels.h"
#include "worker/cpu_pool.h"

#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- GEMMs: tiles fixed by the shape, over the pool ----
 *
 * OpenBLAS's bits for an element of C depend on more than its row of A and
 * column of B: on how a call is split among OpenBLAS's threads, and on some
 * kernels on the call's M and where the row falls in it (Haswell's and Zen's
 * sgemm, which AVX2 Intel and AMD CPUs get: rows 60-63 of a 300-row dW came
 * out other than from a 64-row call of the same rows; SkylakeX's did not).
 * So every GEMM is cut into tiles of C chosen from its shape alone, each one
 * sgemm over the whole K on one thread, and the pool runs the tiles: the same
 * shape makes the same calls whatever the threads, and an element's sum is
 * one call's.  The price is the packing each tile repeats: a train batch of
 * the 784-1024-1024-10 MLP took 8.3 ms of CPU at batch 64 and 28.2 ms at 256
 * on one thread, against 7.6 and 25.3 ms as whole calls (+9%, +11%; on two
 * threads 4.9 and 15.9 ms against OpenBLAS's threads' 7.0 and 15.1). */
struct gemm {
    bool ta, tb;
    int M, N, K, lda, ldb, ldc, tm, tn, cols; /* tiles of tm x tn, cols of them per row of tiles */
    const float *A, *B;
    float *C;
    float beta;
};

static void gemm_tiles(void *ctx, size_t lo, size_t hi)
{
    const struct gemm *g = ctx;
    for (size_t t = lo; t < hi; t++) {
        int i = (int)(t / (size_t)g->cols) * g->tm, j = (int)(t % (size_t)g->cols) * g->tn;
        int m = g->M - i < g->tm ? g->M - i : g->tm, n = g->N - j < g->tn ? g->N - j : g->tn;
        const float *a = g->ta ? g->A + i : g->A + (size_t)i * (size_t)g->lda;
        const float *b = g->tb ? g->B + (size_t)j * (size_t)g->ldb : g->B + j;
        cblas_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans, g->tb ? CblasTrans : CblasNoTrans, m, n,
                    g->K, 1.0f, a, g->lda, b, g->ldb, g->beta, g->C + (size_t)i * (size_t)g->ldc + j, g->ldc);
    }
}

/* OpenBLAS starts with a thread per core; a tile must run on its caller's
 * thread alone, or its bits would depend on OPENBLAS_NUM_THREADS. */
static void blas_one_thread(void)
{
    openblas_set_num_threads(1);
}

static void gemm_run(struct gemm *g)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, blas_one_thread);
    g->cols = (g->N + g->tn - 1) / g->tn;
    size_t tiles = (size_t)((g->M + g->tm - 1) / g->tm) * (size_t)g->cols;
    /* a multiply-add costs about an eighth of a streamed element */
    dt_cpu_pool_run_cost(gemm_tiles, g, tiles, 1, (size_t)g->tm * (size_t)g->tn * (size_t)g->K / 8 + 1);
}

static int half16(int x)
{
    return (x / 2 + 15) / 16 * 16;
}

/* The tiles: the larger side halved (to multiples of 16, not below 16) until
 * there are GEMM_TILES tiles.  A tile packs its rows of A and its columns of
 * B again, 4 K (tm + tn) bytes for 2 tm tn K flops, so tiles are kept square
 * and few: on gpt2 at 32 tiles the packing cost a single-threaded step ~18%
 * more CPU than whole calls, at 16 tiles ~12%, and 16 give 16, 8, 4 or 2
 * threads whole tiles each. */
#define GEMM_TILES 16

static void cpu_gemm(bool ta, bool tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                     float beta, float *C, int ldc)
{
    struct gemm g = {ta, tb, M, N, K, lda, ldb, ldc, M, N, 1, A, B, C, beta};
    for (;;) {
        int tiles = ((M + g.tm - 1) / g.tm) * ((N + g.tn - 1) / g.tn);
        if (tiles >= GEMM_TILES)
            break;
        if (g.tm >= g.tn && g.tm > 32)
            g.tm = half16(g.tm);
        else if (g.tn > 32)
            g.tn = half16(g.tn);
        else if (g.tm > 32)
            g.tm = half16(g.tm);
        else
            break;
    }
    gemm_run(&g);
}

/* y = x W^T: x [B,in] row-major, W [out,in] row-major. */
static void cpu_matmul_forward(float *y, const float *x, const float *w, int B, int in, int out)
{
    cpu_gemm(false, true, B, out, in, x, in, w, in, 0.0f, y, out);
}

/* Rows r0.. of dW = dy^T x: dy's columns r0..r0+rows, with dy's leading
 * dimension still out.  The tiles are DT_KERNELS_W_ROWS whole rows from r0,
 * so rows computed in chunks that start on multiples of it are the same
 * calls as the whole dW's (a shape rule over the chunk's rows would not be). */
static void cpu_matmul_backward_w_rows(float *dw, const float *dy, const float *x, int B, int in, int out, int r0,
                                       int rows, bool accumulate)
{
    struct gemm g = {.ta = true, .M = rows, .N = in, .K = B, .lda = out, .ldb = in, .ldc = in,
                     .tm = DT_KERNELS_W_ROWS, .tn = in, .A = dy + r0, .B = x, .C = dw,
                     .beta = accumulate ? 1.0f : 0.0f};
    gemm_run(&g);
}

/* dW = dy^T x: [out,B] x [B,in]. */
static void cpu_matmul_backward_w(float *dw, const float *dy, const float *x, int B, int in, int out,
                                  bool accumulate)
{
    cpu_matmul_backward_w_rows(dw, dy, x, B, in, out, 0, out, accumulate);
}

/* dx = dy W: [B,out] x [out,in]. */
static void cpu_matmul_backward_x(float *dx, const float *dy, const float *w, int B, int in, int out)
{
    cpu_gemm(false, false, B, in, out, dy, out, w, in, 0.0f, dx, in);
}

/* GELU (exact, torch's approximate='none'): gelu(z) = z * Phi(z) = 0.5 z (1 + erf(z / sqrt 2)). */
static inline float gelu(float z)
{
    return 0.5f * z * (1.0f + erff(z * (float)M_SQRT1_2));
}

/* gelu'(z) = Phi(z) + z phi(z), phi(z) = exp(-z^2 / 2) / sqrt(2 pi). */
static inline float gelu_grad(float z)
{
    const float alpha = (float)(M_2_SQRTPI * M_SQRT1_2 * 0.5);
    float cdf = 0.5f * (1.0f + erff(z * (float)M_SQRT1_2));
    float pdf = alpha * expf(-0.5f * z * z);
    return cdf + z * pdf;
}

DT_CLONES static void cpu_bias_act_forward(float *z, float *h, const float *y, const float *b, int B, int n,
                                 enum dt_kact act)
{
    for (int r = 0; r < B; r++) {
        const float *yr = y + (size_t)r * n;
        float *hr = h + (size_t)r * n, *zr = z ? z + (size_t)r * n : NULL;
        switch (act) {
        case DT_KACT_NONE:
            for (int i = 0; i < n; i++)
                hr[i] = yr[i] + b[i];
            break;
        case DT_KACT_RELU:
            for (int i = 0; i < n; i++) {
                float v = yr[i] + b[i];
                hr[i] = v > 0.0f ? v : 0.0f;
            }
            break;
        case DT_KACT_GELU:
            for (int i = 0; i < n; i++) {
                float v = yr[i] + b[i];
                zr[i] = v;
                hr[i] = gelu(v);
            }
            break;
        }
    }
}

/* relu'(z) = [z > 0] = [h > 0] (torch's threshold_backward reads the output). */
DT_CLONES static void cpu_act_bias_backward(float *dz, float *db, const float *dh, const float *z, const float *h, int B,
                                  int n, enum dt_kact act, bool accumulate)
{
    if (!accumulate)
        memset(db, 0, (size_t)n * sizeof *db);
    for (int r = 0; r < B; r++) {
        const float *dhr = dh + (size_t)r * n;
        float *dzr = dz + (size_t)r * n;
        if (act == DT_KACT_RELU) {
            const float *hr = h + (size_t)r * n;
            for (int i = 0; i < n; i++)
                dzr[i] = hr[i] > 0.0f ? dhr[i] : 0.0f;
        } else if (act == DT_KACT_GELU) {
            const float *zr = z + (size_t)r * n;
            for (int i = 0; i < n; i++)
                dzr[i] = dhr[i] * gelu_grad(zr[i]);
        } else if (dzr != dhr) {
            memcpy(dzr, dhr, (size_t)n * sizeof *dzr);
        }
        for (int i = 0; i < n; i++)
            db[i] += dzr[i];
    }
}

/* loss_i = logsumexp(x_i) - x_i[y_i] = log(sum_j exp(x_ij - max_i)) - (x_i[y_i] - max_i);
 * d loss_i / d x_ij = softmax_ij - [j == y_i]. */
static double cpu_xent(float *dlogits, const float *logits, const int32_t *y, int B, int C, float dscale,
                       int64_t *correct)
{
    double total = 0.0;
    int64_t hits = 0;
    for (int r = 0; r < B; r++) {
        const float *x = logits + (size_t)r * C;
        float mx = x[0];
        int arg = 0;
        for (int j = 1; j < C; j++)
            if (x[j] > mx) {
                mx = x[j];
                arg = j;
            }
        float sum = 0.0f;
        for (int j = 0; j < C; j++)
            sum += expf(x[j] - mx);
        float lse = logf(sum);
        total += (double)(lse - (x[y[r]] - mx));
        hits += arg == y[r];
        if (dlogits) {
            float *d = dlogits + (size_t)r * C, inv = 1.0f / sum;
            for (int j = 0; j < C; j++)
                d[j] = (expf(x[j] - mx) * inv - (j == y[r] ? 1.0f : 0.0f)) * dscale;
        }
    }
    if (correct)
        *correct += hits;
    return total;
}

/* Sum of x^2 over one block, in double.  A float's square is exact in double
 * (24 + 24 significant bits < 53), so only the adds round; sixteen partial
 * sums (lane k takes the elements i = k mod 16) vectorise without
 * -ffast-math and are combined in a fixed tree, so every clone and every
 * thread count gives the same bits. */
static inline double block_sumsq(const float *x, size_t n)
{
    double s[16] = {0};
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 16; k++)
            s[k] += (double)x[i + k] * (double)x[i + k];
    for (; i < n; i++)
        s[i % 16] += (double)x[i] * (double)x[i];
    for (int w = 8; w > 0; w /= 2)
        for (int k = 0; k < w; k++)
            s[k] += s[k + w];
    return s[0];
}

struct sumsq_job {
    double *out;
    const float *x;
    size_t block;
};

/* The pool's pieces are whole blocks (align = block), so each sum is one thread's. */
DT_CLONES static void sumsq_range(void *ctx, size_t lo, size_t hi)
{
    const struct sumsq_job *j = ctx;
    for (size_t at = lo; at < hi; at += j->block)
        j->out[at / j->block] = block_sumsq(j->x + at, hi - at < j->block ? hi - at : j->block);
}

/* A chunk summed behind backward (<= 256k floats, in cache) takes ~30 us on
 * one core; waking a pool helper for half of it cost as much again on the
 * 2-core test VM.  Only a whole-arena pass (after an all-reduce) is split. */
#define SUMSQ_SPLIT ((size_t)1 << 20)

static void cpu_sumsq_blocks(double *out, const float *x, size_t n, size_t block)
{
    struct sumsq_job j = {out, x, block};
    if (n < SUMSQ_SPLIT)
        sumsq_range(&j, 0, n);
    else
        dt_cpu_pool_run(sumsq_range, &j, n, block);
}

/* torch's single-tensor AdamW, step t, in its order of operations:
 *   p = p * (1 - lr wd)
 *   m = lerp(m, g, 1 - b1) = m + (1 - b1)(g - m)     (fused multiply-add, as ATen's lerp)
 *   v = v b2 + (1 - b2) g g                           (the last add fused, as ATen's addcmul compiles)
 *   p = p + (-lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps) */
struct adamw_job {
    float *p, *m, *v;
    const float *g;
    const struct dt_adamw_scalars *s;
};

DT_CLONES static void adamw_range(void *ctx, size_t lo, size_t hi)
{
    const struct adamw_job *j = ctx;
    float *restrict p = j->p, *restrict m = j->m, *restrict v = j->v;
    const float *restrict g = j->g;
    const struct dt_adamw_scalars *s = j->s;
    const float decay = s->decay, w1 = s->w1, b2 = s->beta2, w2 = s->w2, bc2 = s->bc2_sqrt, eps = s->eps,
                step = s->neg_step, gs = s->grad_scale;
    const bool small = w1 < 0.5f;
    for (size_t i = lo; i < hi; i++) {
        float gi = g[i] * gs;
        float pi = p[i] * decay;
        float mi = small ? fmaf(w1, gi - m[i], m[i]) : fmaf(w1 - 1.0f, gi - m[i], gi);
        float vi = fmaf(w2 * gi, gi, v[i] * b2);
        float denom = sqrtf(vi) / bc2 + eps;
        p[i] = pi + step * mi / denom;
        m[i] = mi;
        v[i] = vi;
    }
}

/* Elementwise, so split over the pool's threads without changing a bit. */
static void cpu_adamw(float *p, const float *g, float *m, float *v, size_t n, const struct dt_adamw_scalars *s)
{
    struct adamw_job j = {p, m, v, g, s};
    dt_cpu_pool_run(adamw_range, &j, n, 16);
}

/* FNV-1a over 32-bit words, four lanes interleaved for speed. */
static uint64_t cpu_hash(const float *x, size_t n)
{
    uint64_t h[4] = {0xcbf29ce484222325ull, 0x84222325cbf29ce4ull, 0x9ce484222325cbf2ull, 0x2325cbf29ce48422ull};
    const uint32_t *w = (const uint32_t *)x;
    size_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int k = 0; k < 4; k++)
            h[k] = (h[k] ^ w[i + k]) * 0x100000001b3ull;
    for (; i < n; i++)
        h[0] = (h[0] ^ w[i]) * 0x100000001b3ull;
    return h[0] ^ (h[1] * 31) ^ (h[2] * 961) ^ (h[3] * 29791) ^ n;
}

/* Finiteness by the exponent bits (all ones: inf or NaN), OR-ed so the loop
 * vectorises; the value is checked before it is scaled, as torch does. */
DT_CLONES static bool cpu_unscale(float *g, size_t n, float inv_scale)
{
    uint32_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &g[i], sizeof u);
        bad |= (u & 0x7f800000u) == 0x7f800000u;
        g[i] *= inv_scale;
    }
    return bad != 0;
}

/* bf16 is float's top 16 bits: add 0x7fff plus the lowest kept bit and cut
 * (round to nearest, ties to even; a carry into the exponent is the right
 * result, up to inf).  NaN stays NaN. */
static inline float round_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return x;
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* fp16 keeps 11 significant bits for |x| >= 2^-14, the same bit trick at bit
 * 13; below that its subnormals are multiples of 2^-24, which adding 0.5 (a
 * float whose ulp is 2^-24) rounds to, ties to even.  |x| >= 65520 (half way
 * between 65504, the largest fp16, and 65536) overflows to inf. */
static inline float round_f16(float x)
{
    float a = fabsf(x);
    if (a >= 65520.0f)
        return a == a ? copysignf(INFINITY, x) : x;
    if (a < 0x1p-14f)
        return copysignf((a + 0.5f) - 0.5f, x);
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    u = (u + 0xfffu + ((u >> 13) & 1u)) & 0xffffe000u;
    memcpy(&x, &u, sizeof x);
    return x;
}

DT_CLONES static void cpu_round_lowp(float *dst, const float *src, size_t n, enum dt_kprec p, bool accumulate)
{
    if (p == DT_KPREC_BF16) {
        for (size_t i = 0; i < n; i++)
            dst[i] = accumulate ? dst[i] + round_bf16(src[i]) : round_bf16(src[i]);
    } else if (p == DT_KPREC_F16) {
        for (size_t i = 0; i < n; i++)
            dst[i] = accumulate ? dst[i] + round_f16(src[i]) : round_f16(src[i]);
    } else if (accumulate) {
        for (size_t i = 0; i < n; i++)
            dst[i] += src[i];
    } else if (dst != src) {
        memcpy(dst, src, n * sizeof *dst);
    }
}

const char *dt_kernels_cpu_blas_coretype(void)
{
    if (getenv("OPENBLAS_CORETYPE"))
        return NULL;
    const char *core = openblas_get_corename();
    if (!core || strcmp(core, "Prescott") != 0)
        return NULL;
    if (__builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512dq"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return "Haswell";
    return NULL;
}

static void cpu_set_threads(int n)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, blas_one_thread);
    dt_cpu_pool_set_threads(n);
}

const struct dt_kernels dt_kernels_cpu = {
    .name = "cpu",
    .matmul_forward = cpu_matmul_forward,
    .matmul_backward_w = cpu_matmul_backward_w,
    .matmul_backward_w_rows = cpu_matmul_backward_w_rows,
    .matmul_backward_x = cpu_matmul_backward_x,
    .gemm = cpu_gemm,
    .bias_act_forward = cpu_bias_act_forward,
    .act_bias_backward = cpu_act_bias_backward,
    .xent = cpu_xent,
    .sumsq_blocks = cpu_sumsq_blocks,
    .adamw = cpu_adamw,
    .hash = cpu_hash,
    .unscale = cpu_unscale,
    .round_lowp = cpu_round_lowp,
    .set_threads = cpu_set_threads,
};
