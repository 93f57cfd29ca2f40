/* optim_cuda.cu - the kernels between the last GEMM and the next step: fused
 * softmax cross-entropy (forward and backward in one pass), AdamW over the
 * whole flat arena in one kernel, the AMP inf/nan check with unscaling, the
 * scale update, and the sum of squares for clipping.
 *
 * No host synchronisation anywhere: the loss, the hit count, found_inf and
 * AdamW's step count live on the device, so a step can be captured whole in
 * a CUDA graph.  Reductions are fixed-order (per-block tree, then the last
 * block to finish adds the block partials in index order), so equal inputs
 * give equal bits, run after run.
 *
 * Not for the layer kernels (act_cuda.cu, linear_cuda.c).
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>

extern "C" {
#include "base/error.h" /* a C header without C++ guards */
}
#include "worker/cuda/device_common.cuh"

namespace {

/* One row per group of G lanes (G = 1 for few classes, 32 for many).
 * With m = max_j x_j and s = sum_j exp(x_j - m):
 *   loss = log s - (x_y - m)        dlogits_j = (exp(x_j - m) / s - [j == y]) * scale */
template <typename T, int G>
__global__ void xent_kernel(T *dl, const T *logits, const int32_t *y, int B, int C, float dscale,
                            const float *loss_scale, Partials part, float *loss_sum, int *correct, double *loss_acc)
{
    const float scale = dscale * (loss_scale ? *loss_scale : 1.0f);
    const int lane = threadIdx.x % G;
    const int groups = gridDim.x * kThreads / G;
    float my_loss = 0.0f;
    int my_hits = 0;
    for (int r = (blockIdx.x * kThreads + threadIdx.x) / G; r < B; r += groups) {
        const T *x = logits + (size_t)r * C;
        float m = -INFINITY;
        int am = C;
        for (int j = lane; j < C; j += G) {
            float v = load(x, j);
            if (v > m) {
                m = v;
                am = j;
            }
        }
        for (int off = G / 2; off > 0; off >>= 1) { /* max, first index on ties (torch's argmax) */
            float om = __shfl_xor_sync(0xffffffffu, m, off, G);
            int oa = __shfl_xor_sync(0xffffffffu, am, off, G);
            if (om > m || (om == m && oa < am)) {
                m = om;
                am = oa;
            }
        }
        float s = 0.0f;
        for (int j = lane; j < C; j += G)
            s += expf(load(x, j) - m);
        for (int off = G / 2; off > 0; off >>= 1)
            s += __shfl_xor_sync(0xffffffffu, s, off, G);
        const int lbl = y[r];
        const bool ok = lbl >= 0 && lbl < C;
        if (lane == 0 && ok) {
            my_loss += logf(s) - (load(x, lbl) - m);
            my_hits += am == lbl;
        }
        if (dl) {
            const float inv = 1.0f / s;
            for (int j = lane; j < C; j += G) {
                float p = expf(load(x, j) - m) * inv;
                store(dl + (size_t)r * C, j, ok ? (p - (j == lbl ? 1.0f : 0.0f)) * scale : 0.0f);
            }
        }
    }
    grid_sum<kThreads>(my_loss, my_hits, part, loss_sum, correct, loss_acc);
}

struct AdamScalars {
    double lr, beta1, beta2, eps;
    float decay, w1, w2, grad_scale;
};

/* torch.optim.AdamW for step t = *step + 1 (see kernels_cuda.h); the
 * step-dependent scalars are computed in double once per block, as torch
 * computes them in Python floats. */
__device__ __forceinline__ float adamw_one(float p, float g, float &m, float &v, const AdamScalars &a, float decay,
                                           float gmul, float neg_step, float bc2_sqrt)
{
    float gi = g * gmul;
    float pi = p * decay;
    m = m + a.w1 * (gi - m); /* lerp(m, g, 1 - beta1) */
    v = (float)a.beta2 * v + a.w2 * gi * gi;
    return pi + neg_step * m / (sqrtf(v) / bc2_sqrt + (float)a.eps);
}

/* The per-step inputs a replayed graph cannot bake in: lr and beta1 from
 * device memory (written before each replay), and the clipping coefficient
 * from the device's sum of squares, torch's clip_grad_norm_:
 *   coef = min(max_norm / (sqrt(sumsq) + 1e-6), 1). */
struct AdamDyn {
    const double *lr_beta1; /* NULL: use AdamScalars' lr, beta1, decay, w1 */
    double weight_decay;
    const float *sumsq;     /* NULL: no clipping from the device */
    float max_norm;
};

/* The elements without decay: nd ranges [lo, hi) (ascending, disjoint),
 * copied into shared memory by each block.  nodecay_from gives the first
 * range that ends above i (binary search); nodecay_at then walks forward
 * from there for ascending i, so a vector of four costs one search. */
constexpr int kMaxNodecay = 1024;

__device__ __forceinline__ int nodecay_from(const uint64_t *r, int nd, uint64_t i)
{
    int lo = 0, hi = nd;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (r[2 * mid + 1] <= i)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

__device__ __forceinline__ bool nodecay_at(const uint64_t *r, int nd, int &c, uint64_t i)
{
    while (c < nd && r[2 * c + 1] <= i)
        c++;
    return c < nd && r[2 * c] <= i;
}

/* torch.optim.AdamW for step t = *step + 1 (see kernels_cuda.h); the
 * step-dependent scalars are computed in double once per block, as torch
 * computes them in Python floats.  16-byte loads when the arenas allow.
 * An element without decay is stepped with the factor 1 (torch skipping
 * p.mul_(1 - lr * 0): the same bits). */
template <typename L>
__global__ void adamw_kernel(float *p, const float *g, float *m, float *v, L *pl, size_t n,
                             AdamScalars a, AdamDyn dyn, const int64_t *step, const float *found_inf,
                             const float *amp_scale, int vec, const uint64_t *nodecay, int nd)
{
    if (found_inf && *found_inf != 0.0f)
        return;
    extern __shared__ uint64_t nd_ranges[]; /* [nd][2], visible after the __syncthreads below */
    for (int i = threadIdx.x; i < 2 * nd; i += blockDim.x)
        nd_ranges[i] = nodecay[i];
    __shared__ float sc[5];
    if (threadIdx.x == 0) {
        double lr = a.lr, beta1 = a.beta1;
        float decay = a.decay, w1 = a.w1, gs = a.grad_scale;
        if (dyn.lr_beta1) {
            lr = dyn.lr_beta1[0];
            beta1 = dyn.lr_beta1[1];
            decay = (float)(1.0 - lr * dyn.weight_decay);
            w1 = (float)(1.0 - beta1);
        }
        if (dyn.sumsq && dyn.max_norm > 0.0f) {
            float coef = dyn.max_norm / (sqrtf(*dyn.sumsq) + 1e-6f);
            gs = coef < 1.0f ? coef : 1.0f;
        }
        double t = (double)(*step + 1);
        sc[0] = (float)(-lr / (1.0 - pow(beta1, t)));
        sc[1] = (float)sqrt(1.0 - pow(a.beta2, t));
        sc[2] = amp_scale ? gs * (float)(1.0 / (double)*amp_scale) : gs;
        sc[3] = decay;
        sc[4] = w1;
    }
    __syncthreads();
    a.decay = sc[3];
    a.w1 = sc[4];
    const float neg_step = sc[0], bc2_sqrt = sc[1], gmul = sc[2];
    const size_t stride = (size_t)gridDim.x * blockDim.x, tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    const size_t n4 = vec ? n / 4 : 0;
    const uint64_t *r = nd_ranges;
    for (size_t q = tid; q < n4; q += stride) {
        float4 P = ((float4 *)p)[q], G = ((const float4 *)g)[q], M = ((float4 *)m)[q], V = ((float4 *)v)[q];
        const uint64_t i0 = 4 * (uint64_t)q;
        int c = nd ? nodecay_from(r, nd, i0) : 0;
        float d0 = nodecay_at(r, nd, c, i0) ? 1.0f : a.decay, d1 = nodecay_at(r, nd, c, i0 + 1) ? 1.0f : a.decay;
        float d2 = nodecay_at(r, nd, c, i0 + 2) ? 1.0f : a.decay, d3 = nodecay_at(r, nd, c, i0 + 3) ? 1.0f : a.decay;
        P.x = adamw_one(P.x, G.x, M.x, V.x, a, d0, gmul, neg_step, bc2_sqrt);
        P.y = adamw_one(P.y, G.y, M.y, V.y, a, d1, gmul, neg_step, bc2_sqrt);
        P.z = adamw_one(P.z, G.z, M.z, V.z, a, d2, gmul, neg_step, bc2_sqrt);
        P.w = adamw_one(P.w, G.w, M.w, V.w, a, d3, gmul, neg_step, bc2_sqrt);
        ((float4 *)p)[q] = P, ((float4 *)m)[q] = M, ((float4 *)v)[q] = V;
        if (pl)
            store4(pl, q, P);
    }
    for (size_t i = n4 * 4 + tid; i < n; i += stride) {
        float mi = m[i], vi = v[i];
        int c = nd ? nodecay_from(r, nd, i) : 0;
        float di = nodecay_at(r, nd, c, i) ? 1.0f : a.decay;
        float pi = adamw_one(p[i], g[i], mi, vi, a, di, gmul, neg_step, bc2_sqrt);
        m[i] = mi, v[i] = vi, p[i] = pi;
        if (pl)
            store(pl, i, pi);
    }
}

__global__ void adamw_commit_kernel(int64_t *step, const float *found_inf)
{
    if (!found_inf || *found_inf == 0.0f)
        *step += 1;
}

__global__ void unscale_kernel(float *g, size_t n, const float *scale, float *found_inf)
{
    const float inv = (float)(1.0 / (double)*scale); /* torch: reciprocal in double */
    bool bad = false;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float x = g[i];
        bad |= !isfinite(x);
        g[i] = x * inv;
    }
    if (bad)
        *found_inf = 1.0f;
}

__global__ void scaler_update_kernel(float *scale, int *tracker, const float *found_inf, float growth,
                                     float backoff, int interval)
{
    if (*found_inf != 0.0f) {
        *scale *= backoff;
        *tracker = 0;
        return;
    }
    int ok = *tracker + 1;
    if (ok == interval) {
        float grown = *scale * growth;
        if (isfinite(grown))
            *scale = grown;
        *tracker = 0;
    } else {
        *tracker = ok;
    }
}

__device__ __forceinline__ float sq4(float4 v)
{
    return (v.x * v.x + v.y * v.y) + (v.z * v.z + v.w * v.w);
}

/* sum g^2 over the whole gradient (124M floats for GPT-2 124M: 500 MB, one
 * read).  Memory-bound, so what counts is the bytes in flight: 64K threads
 * with one 4-byte load each kept about 260 KB in flight, 0.66 TB/s (0.76 ms a
 * step, CUPTI on the H200); here each thread has four 16-byte loads in flight
 * into four independent sums, 16x the bytes.  The grid and each thread's
 * elements are fixed by n, so the order of the sum, and its bits, are too. */
__global__ void sumsq_kernel(const float *g, size_t n, Partials part, float *out)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x, first = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    const size_t n4 = (uintptr_t)g % 16 == 0 ? n / 4 : 0; /* cudaMalloc'd buffers are aligned */
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
    size_t i = first;
    for (; i + 3 * stride < n4; i += 4 * stride) {
        const float4 a = load4(g, i), b = load4(g, i + stride), c = load4(g, i + 2 * stride),
                     d = load4(g, i + 3 * stride);
        s0 += sq4(a);
        s1 += sq4(b);
        s2 += sq4(c);
        s3 += sq4(d);
    }
    for (; i < n4; i += stride)
        s0 += sq4(load4(g, i));
    for (size_t j = 4 * n4 + first; j < n; j += stride)
        s1 += g[j] * g[j];
    grid_sum<kThreads>((s0 + s1) + (s2 + s3), 0, part, out, nullptr);
}

} // namespace

extern "C" int dt_cuda_xent_acc(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, void *dlogits, float *loss_sum,
                                int *correct, const void *logits, const int32_t *y, int B, int C, float dscale,
                                const float *loss_scale, double *loss_acc)
{
    if (B <= 0 || C <= 0)
        return dt_error_set(DT_EINVAL, "dt_cuda_xent: batch %d and classes %d must be positive", B, C);
    Partials part = {k->part_f, k->part_i, k->ticket};
    const bool narrow = C <= 32;
    unsigned grid = blocks_for((size_t)B * (narrow ? 1 : 32), DT_CUDA_MAX_BLOCKS);
    cudaStream_t s = k->stream;
    if (t == DT_CUDA_BF16) {
        auto *d = (__nv_bfloat16 *)dlogits;
        auto *x = (const __nv_bfloat16 *)logits;
        if (narrow)
            xent_kernel<__nv_bfloat16, 1><<<grid, kThreads, 0, s>>>(d, x, y, B, C, dscale, loss_scale, part,
                                                                   loss_sum, correct, loss_acc);
        else
            xent_kernel<__nv_bfloat16, 32><<<grid, kThreads, 0, s>>>(d, x, y, B, C, dscale, loss_scale, part,
                                                                    loss_sum, correct, loss_acc);
    } else if (t == DT_CUDA_F16) {
        auto *d = (__half *)dlogits;
        auto *x = (const __half *)logits;
        if (narrow)
            xent_kernel<__half, 1><<<grid, kThreads, 0, s>>>(d, x, y, B, C, dscale, loss_scale, part, loss_sum,
                                                            correct, loss_acc);
        else
            xent_kernel<__half, 32><<<grid, kThreads, 0, s>>>(d, x, y, B, C, dscale, loss_scale, part, loss_sum,
                                                             correct, loss_acc);
    } else {
        auto *d = (float *)dlogits;
        auto *x = (const float *)logits;
        if (narrow)
            xent_kernel<float, 1><<<grid, kThreads, 0, s>>>(d, x, y, B, C, dscale, loss_scale, part, loss_sum,
                                                           correct, loss_acc);
        else
            xent_kernel<float, 32><<<grid, kThreads, 0, s>>>(d, x, y, B, C, dscale, loss_scale, part, loss_sum,
                                                            correct, loss_acc);
    }
    return launched("softmax cross-entropy kernel launch");
}

extern "C" int dt_cuda_xent(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, void *dlogits, float *loss_sum,
                            int *correct, const void *logits, const int32_t *y, int B, int C, float dscale,
                            const float *loss_scale)
{
    return dt_cuda_xent_acc(k, t, dlogits, loss_sum, correct, logits, y, B, C, dscale, loss_scale, nullptr);
}

static int adamw_launch(struct dt_cuda_ctx *k, float *p, const float *g, float *m, float *v, void *p_lowp,
                        size_t n, const struct dt_cuda_adamw_args *a, AdamDyn dyn, int64_t *step,
                        const float *found_inf, const float *inv_from_scale)
{
    AdamScalars sc;
    sc.lr = a->lr;
    sc.beta1 = a->beta1;
    sc.beta2 = a->beta2;
    sc.eps = a->eps;
    sc.decay = (float)(1.0 - a->lr * a->weight_decay);
    sc.w1 = (float)(1.0 - a->beta1);
    sc.w2 = (float)(1.0 - a->beta2);
    sc.grad_scale = a->grad_scale;
    const int nd = a->nodecay ? a->n_nodecay : 0;
    if (nd < 0 || nd > kMaxNodecay)
        return dt_error_set(DT_EINVAL, "dt_cuda_adamw: %d ranges without weight decay (at most %d)", nd,
                            kMaxNodecay);
    const size_t smem = (size_t)nd * 2 * sizeof(uint64_t); /* 16 KiB at most */
    uintptr_t al = (uintptr_t)p | (uintptr_t)g | (uintptr_t)m | (uintptr_t)v;
    int vec = (al % 16) == 0 && ((uintptr_t)p_lowp % 8) == 0;
    unsigned grid = blocks_for(vec ? n / 4 : n, 132 * 16); /* a few waves over the H200's 132 SMs */
    if (a->lowp_f16)
        adamw_kernel<<<grid, kThreads, smem, k->stream>>>(p, g, m, v, (__half *)p_lowp, n, sc, dyn, step,
                                                          found_inf, inv_from_scale, vec, a->nodecay, nd);
    else
        adamw_kernel<<<grid, kThreads, smem, k->stream>>>(p, g, m, v, (__nv_bfloat16 *)p_lowp, n, sc, dyn, step,
                                                          found_inf, inv_from_scale, vec, a->nodecay, nd);
    int rc = launched("AdamW kernel launch");
    if (rc == 0) {
        adamw_commit_kernel<<<1, 1, 0, k->stream>>>(step, found_inf);
        rc = launched("AdamW step-count kernel launch");
    }
    return rc;
}

extern "C" int dt_cuda_adamw(struct dt_cuda_ctx *k, float *p, const float *g, float *m, float *v, void *p_lowp,
                             size_t n, const struct dt_cuda_adamw_args *a, int64_t *step, const float *found_inf,
                             const float *inv_from_scale)
{
    AdamDyn none = {nullptr, 0.0, nullptr, 0.0f};
    return adamw_launch(k, p, g, m, v, p_lowp, n, a, none, step, found_inf, inv_from_scale);
}

extern "C" int dt_cuda_adamw_dev(struct dt_cuda_ctx *k, float *p, const float *g, float *m, float *v,
                                 void *p_lowp, size_t n, const struct dt_cuda_adamw_args *a,
                                 const double *lr_beta1, const float *sumsq, float max_norm, int64_t *step,
                                 const float *found_inf, const float *inv_from_scale)
{
    AdamDyn dyn = {lr_beta1, a->weight_decay, sumsq, max_norm};
    return adamw_launch(k, p, g, m, v, p_lowp, n, a, dyn, step, found_inf, inv_from_scale);
}

extern "C" int dt_cuda_unscale_check(struct dt_cuda_ctx *k, float *g, size_t n, const float *scale,
                                     float *found_inf)
{
    unscale_kernel<<<blocks_for(n, 132 * 8), kThreads, 0, k->stream>>>(g, n, scale, found_inf);
    return launched("AMP unscale kernel launch");
}

extern "C" int dt_cuda_scaler_update(struct dt_cuda_ctx *k, float *scale, int *growth_tracker,
                                     const float *found_inf, float growth, float backoff, int interval)
{
    scaler_update_kernel<<<1, 1, 0, k->stream>>>(scale, growth_tracker, found_inf, growth, backoff, interval);
    return launched("AMP scale update kernel launch");
}

extern "C" int dt_cuda_sumsq(struct dt_cuda_ctx *k, float *out, const float *g, size_t n)
{
    Partials part = {k->part_f, k->part_i, k->ticket};
    sumsq_kernel<<<blocks_for((n + 15) / 16, DT_CUDA_MAX_BLOCKS), kThreads, 0, k->stream>>>(g, n, part, out);
    return launched("sum of squares kernel launch");
}
