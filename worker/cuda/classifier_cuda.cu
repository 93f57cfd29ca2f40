/* classifier_cuda.cu - GPT-2's classifier after its GEMM (transformer_cuda.h,
 * "classifier"): the softmax cross-entropy of each row of bf16 logits in
 * fp32, its gradient written over the logits in place, and the fixed-order
 * sum of the rows' losses and hits.  Per row, with m = max_j x_j,
 *   s = sum_j exp(x_j - m),  loss = log s - (x_y - m),
 *   dx_j = (exp(x_j - m) / s - [j == y]) * scale      (0 over the padding),
 * the max and sum kept online (a new max m' rescales s by exp(m - m')).
 * Two kernels: two passes over the row (the default), or through shared
 * memory where two rows fit, each row read once (DTRAIN_CUDA_XENT=smem).
 * Everything is fixed-order, no floating-point atomics.
 *
 * Not for the logits' GEMM (linear_cuda.c) or the MLP's small-class loss
 * (optim_cuda.cu's dt_cuda_xent).
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "base/error.h" /* a C header without C++ guards */
}
#include "worker/cuda/device_common.cuh"
#include "worker/cuda/transformer_cuda.h"

namespace {

/* ---- kernels ---- */

/* The running (max, sum of exp(x - max), first argmax) of a part of a row. */
struct SoftmaxAcc {
    float m, s;
    int a;
};

__device__ __forceinline__ SoftmaxAcc sm_merge(SoftmaxAcc p, SoftmaxAcc q)
{
    SoftmaxAcc o;
    o.m = fmaxf(p.m, q.m);
    float sp = p.s == 0.0f ? 0.0f : p.s * expf(p.m - o.m), sq = q.s == 0.0f ? 0.0f : q.s * expf(q.m - o.m);
    o.s = sp + sq; /* commutative: both lanes of a butterfly pair get the same bits */
    o.a = p.m > q.m ? p.a : q.m > p.m ? q.a : min(p.a, q.a);
    return o;
}

constexpr int kXentThreads = 512;

/* A 16-byte piece of a row, or one value (n values from column j0, those at
 * or past V left out) joins a thread's running max / sum: the piece's max
 * and its first index first, one rescale when that max is new, then the n
 * exponentials, independent of each other.  One value at a time made every
 * exponential wait on the one before through acc.m and acc.s: the kernel ran
 * at 1.6 TB/s in the H200's GPT-2 step, latency-bound. */
__device__ __forceinline__ void sm_push_piece(SoftmaxAcc &acc, const float *f, int n, int j0, int V)
{
    float pm = -INFINITY;
    int pa = V;
#pragma unroll
    for (int e = 0; e < n; e++)
        if (j0 + e < V && f[e] > pm) {
            pm = f[e];
            pa = j0 + e;
        }
    if (pm > acc.m) {
        acc.s = acc.s == 0.0f ? 0.0f : acc.s * expf(acc.m - pm);
        acc.m = pm;
        acc.a = pa;
    }
    float ps = 0.0f;
#pragma unroll
    for (int e = 0; e < n; e++)
        if (j0 + e < V)
            ps += expf(f[e] - acc.m);
    acc.s += ps;
}

/* 16 bytes of T as floats, and back. */
template <typename T> struct Pack {
    static constexpr int n = 16 / sizeof(T);
    float f[n];
    __device__ __forceinline__ void get(const T *p, size_t c)
    {
        uint4 u = ((const uint4 *)p)[c];
        const T *e = (const T *)&u;
#pragma unroll
        for (int i = 0; i < n; i++)
            f[i] = load(e, i);
    }
    __device__ __forceinline__ void put(T *p, size_t c) const
    {
        uint4 u;
        T *e = (T *)&u;
#pragma unroll
        for (int i = 0; i < n; i++)
            store(e, i, f[i]);
        ((uint4 *)p)[c] = u;
    }
};

/* d loss / d x_j of a row, times scale: softmax_j - [j == y] (0 over the
 * padding j >= V, and over a row whose label is outside [0,V)). */
__device__ __forceinline__ float xent_grad(float x, int j, int lbl, int V, float m, float inv, float scale)
{
    return lbl >= 0 && lbl < V && j < V ? (expf(x - m) * inv - (j == lbl ? 1.0f : 0.0f)) * scale : 0.0f;
}

/* The row's (max, sum, first argmax) from every thread's accumulator:
 * butterflies within each warp, then thread 0 merges the warps in order (a
 * fixed tree: the same bits every run) and writes the row's loss and hit,
 *   loss = log sum - (x_y - max)   (0, no hit, for a label outside [0,V)),
 * reading x_y from row (global or shared memory).  Every thread gets the
 * result after a barrier, past which no thread reads the row again. */
template <int NT, typename T>
__device__ __forceinline__ SoftmaxAcc row_softmax(SoftmaxAcc acc, const T *row, int r, int lbl, int V,
                                                  float *row_loss, int *row_hit)
{
    __shared__ SoftmaxAcc warps[NT / 32];
    __shared__ SoftmaxAcc all;
    for (int off = 16; off > 0; off >>= 1) {
        SoftmaxAcc o = {__shfl_xor_sync(0xffffffffu, acc.m, off), __shfl_xor_sync(0xffffffffu, acc.s, off),
                        __shfl_xor_sync(0xffffffffu, acc.a, off)};
        acc = sm_merge(acc, o);
    }
    if (threadIdx.x % 32 == 0)
        warps[threadIdx.x / 32] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        SoftmaxAcc t = warps[0];
        for (int k = 1; k < NT / 32; k++)
            t = sm_merge(t, warps[k]);
        all = t;
        const bool ok = lbl >= 0 && lbl < V;
        row_loss[r] = ok ? logf(t.s) - (load(row, lbl) - t.m) : 0.0f;
        if (row_hit)
            row_hit[r] = ok && t.a == lbl;
    }
    __syncthreads();
    return all;
}

/* One block per row: an online max / sum of exponentials (one read), the
 * block's merge in a fixed tree, then, with grad, a second read that writes
 *   (exp(x_j - max) / sum - [j == y]) * scale   over j < V, 0 over the padding.
 * VEC: 16-byte loads and stores (the row's start and the stride are 16-byte
 * multiples; then the last chunk that holds column V-1 is inside the stride).
 * Held to 40 registers: three blocks (48 warps) an SM, where the two pieces a
 * turn would otherwise take 48 and leave two. */
template <typename T, bool VEC>
__global__ void __launch_bounds__(kXentThreads, 3)
    xent_rows_kernel(T *logits, float *row_loss, int *row_hit, const int32_t *y, int V, int stride, float dscale,
                     const float *loss_scale, int grad)
{
    constexpr int W = Pack<T>::n;
    const int r = blockIdx.x;
    T *x = logits + (size_t)r * stride;
    SoftmaxAcc acc = {-INFINITY, 0.0f, V};
    if (VEC) {
        /* Two pieces a turn, both loads issued before either is used. */
        const int nc = (V + W - 1) / W;
        int c = threadIdx.x;
        for (; c + kXentThreads < nc; c += 2 * kXentThreads) {
            Pack<T> p, q;
            p.get(x, c);
            q.get(x, c + kXentThreads);
            sm_push_piece(acc, p.f, W, c * W, V);
            sm_push_piece(acc, q.f, W, (c + kXentThreads) * W, V);
        }
        if (c < nc) {
            Pack<T> p;
            p.get(x, c);
            sm_push_piece(acc, p.f, W, c * W, V);
        }
    } else {
        for (int j = threadIdx.x; j < V; j += kXentThreads) {
            const float v = load(x, j);
            sm_push_piece(acc, &v, 1, j, V);
        }
    }
    const int lbl = y[r];
    const SoftmaxAcc all = row_softmax<kXentThreads>(acc, x, r, lbl, V, row_loss, row_hit);
    if (!grad)
        return;
    const float scale = dscale * (loss_scale ? *loss_scale : 1.0f), inv = 1.0f / all.s, m = all.m;
    if (VEC) {
        /* Two pieces a turn: a store to the row keeps the compiler from
         * moving the next turn's load above it, so one piece a turn had one
         * 16-byte load in flight a thread. */
        const int nc = stride / W;
        for (int c = threadIdx.x; c < nc; c += 2 * kXentThreads) {
            const int c2 = c + kXentThreads;
            Pack<T> p[2];
            p[0].get(x, c);
            if (c2 < nc)
                p[1].get(x, c2);
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int e = 0; e < W; e++)
                    p[h].f[e] = xent_grad(p[h].f[e], (h ? c2 : c) * W + e, lbl, V, m, inv, scale);
            p[0].put(x, c);
            if (c2 < nc)
                p[1].put(x, c2);
        }
    } else {
        for (int j = threadIdx.x; j < stride; j += kXentThreads)
            store(x, j, xent_grad(load(x, j), j, lbl, V, m, inv, scale));
    }
}

constexpr int kXentRowThreads = 1024;

/* cp.async of a row's n 16-byte pieces into shared memory, one group. */
template <typename T> __device__ __forceinline__ void fetch_row(uint4 *dst, const T *row, int n)
{
    for (int c = threadIdx.x; c < n; c += kXentRowThreads)
        cp_async16(dst + c, (const uint4 *)row + c, true);
    cp_async_commit();
}

/* The same rows through shared memory, each read from memory once: a block
 * an SM holds two rows (GPT-2's vocabulary in bf16 is 100 KB a row), works
 * on one while cp.async brings the next, and takes rows blockIdx.x,
 * + gridDim.x, ...  The two-pass kernel reads each row twice (2 reads + 1
 * write of the logits against 1 + 1 here) and its loads wait behind its own
 * exponentials.  Same math, order and bits per thread piece as xent_rows_kernel
 * with VEC: each thread's pieces in increasing column order, then
 * row_softmax's tree. */
template <typename T>
__global__ void __launch_bounds__(kXentRowThreads, 1)
    xent_rows_smem_kernel(T *logits, float *row_loss, int *row_hit, const int32_t *y, int N, int V, int stride,
                          float dscale, const float *loss_scale, int grad)
{
    extern __shared__ uint4 rows_sh[]; /* [2][nc] */
    constexpr int W = Pack<T>::n;
    const int nc = stride / W, nv = (V + W - 1) / W;
    const float scale = grad ? dscale * (loss_scale ? *loss_scale : 1.0f) : 0.0f;
    int buf = 0;
    if ((int)blockIdx.x < N)
        fetch_row(rows_sh, logits + (size_t)blockIdx.x * stride, nc);
    for (int r = blockIdx.x; r < N; r += gridDim.x, buf ^= 1) {
        const T *cur = (const T *)(rows_sh + (size_t)buf * nc);
        cp_async_wait_all();
        __syncthreads(); /* row r is in cur for every thread */
        if (r + (int)gridDim.x < N)
            fetch_row(rows_sh + (size_t)(buf ^ 1) * nc, logits + (size_t)(r + gridDim.x) * stride, nc);
        SoftmaxAcc acc = {-INFINITY, 0.0f, V};
        for (int c = threadIdx.x; c < nv; c += kXentRowThreads) {
            Pack<T> p;
            p.get(cur, c);
            sm_push_piece(acc, p.f, W, c * W, V);
        }
        const int lbl = y[r];
        const SoftmaxAcc all = row_softmax<kXentRowThreads>(acc, cur, r, lbl, V, row_loss, row_hit);
        if (grad) {
            const float inv = 1.0f / all.s;
            T *x = logits + (size_t)r * stride;
            for (int c = threadIdx.x; c < nc; c += kXentRowThreads) {
                Pack<T> p;
                p.get(cur, c);
#pragma unroll
                for (int e = 0; e < W; e++)
                    p.f[e] = xent_grad(p.f[e], c * W + e, lbl, V, all.m, inv, scale);
                p.put(x, c);
            }
        }
        __syncthreads(); /* cur is read by all before the fetch of row r + 2 gridDim.x overwrites it */
    }
}

__global__ void sum_rows_kernel(const float *row_loss, const int *row_hit, int N, Partials part,
                                float *loss_sum, int *correct, double *loss_acc)
{
    float s = 0.0f;
    int h = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < N; i += gridDim.x * blockDim.x) {
        s += row_loss[i];
        h += row_hit ? row_hit[i] : 0;
    }
    grid_sum<kThreads>(s, h, part, loss_sum, correct, loss_acc);
}

} // namespace

/* ---- launchers ---- */

/* Which xent_rows kernel runs.  auto is the two-pass one: on the H100
 * (2026-12-05) it took 0.234 ms for 2048 rows of 50304 bf16 against the
 * smem kernel's 0.290 (and 0.350 for a row split over a cluster of 8 blocks
 * holding it in registers, since dropped), and GPT-2's B=32 step ran 530k
 * tokens/s against 525k.  Its second read mostly hits L2 (three 100 KB rows
 * a block an SM: 40 MB in flight), while the smem kernel walks one row an SM
 * at a time.  DTRAIN_CUDA_XENT=smem (or a test, dt_cuda__xent_force_kernel)
 * takes the smem kernel where two rows fit, for A/B on other GPUs. */
static int xent_forced = DT_CUDA__XENT_AUTO;

extern "C" int dt_cuda__xent_force_kernel(int way)
{
    int was = xent_forced;
    xent_forced = way;
    return was;
}

/* The kernel in force, or -1 (error set) for a DTRAIN_CUDA_XENT that names none. */
static int xent_way(void)
{
    static int env = -1; /* read once */
    static const char *bad;
    if (xent_forced != DT_CUDA__XENT_AUTO)
        return xent_forced;
    if (env < 0 && !bad) {
        const char *e = getenv("DTRAIN_CUDA_XENT");
        if (!e || !*e || strcmp(e, "auto") == 0)
            env = DT_CUDA__XENT_AUTO;
        else if (strcmp(e, "two-pass") == 0)
            env = DT_CUDA__XENT_TWO_PASS;
        else if (strcmp(e, "smem") == 0)
            env = DT_CUDA__XENT_SMEM;
        else
            bad = e;
    }
    if (bad)
        return dt_error_set(DT_EINVAL, "DTRAIN_CUDA_XENT=%s names no classifier kernel (auto, two-pass or smem)",
                            bad);
    return env;
}

/* The dynamic shared memory the smem kernel may have: what a block may opt
 * in to (H100/H200: 227 KB) less its static part, allowed to it once per
 * process and type.  0 where that fails: the two-pass kernel then runs. */
template <typename T> static size_t smem_rows_bytes(int device)
{
    static int dyn = -1;
    if (dyn < 0) {
        int optin = 0;
        cudaFuncAttributes fa;
        if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess ||
            cudaFuncGetAttributes(&fa, xent_rows_smem_kernel<T>) != cudaSuccess ||
            optin <= (int)fa.sharedSizeBytes ||
            cudaFuncSetAttribute(xent_rows_smem_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 optin - (int)fa.sharedSizeBytes) != cudaSuccess) {
            (void)cudaGetLastError(); /* a performance choice, not an error */
            dyn = 0;
        } else {
            dyn = optin - (int)fa.sharedSizeBytes;
        }
    }
    return (size_t)dyn;
}

template <typename T>
static int xent_rows_launch(struct dt_cuda_ctx *k, void *logits, float *row_loss, int *row_hit, const int32_t *y,
                            int N, int V, int stride, float dscale, const float *loss_scale, bool grad)
{
    const int way = xent_way();
    if (way < 0)
        return way;
    cudaStream_t s = k->stream;
    T *x = (T *)logits;
    const size_t two_rows = 2 * (size_t)stride * sizeof(T);
    bool vec = (uintptr_t)logits % 16 == 0 && (size_t)stride * sizeof(T) % 16 == 0;
    if (vec && way == DT_CUDA__XENT_SMEM && two_rows <= smem_rows_bytes<T>(k->device)) {
        unsigned grid = (unsigned)(N < k->sms ? N : k->sms);
        xent_rows_smem_kernel<T><<<grid, kXentRowThreads, two_rows, s>>>(x, row_loss, row_hit, y, N, V, stride,
                                                                         dscale, loss_scale, grad);
    } else if (vec) {
        xent_rows_kernel<T, true>
            <<<(unsigned)N, kXentThreads, 0, s>>>(x, row_loss, row_hit, y, V, stride, dscale, loss_scale, grad);
    } else {
        xent_rows_kernel<T, false>
            <<<(unsigned)N, kXentThreads, 0, s>>>(x, row_loss, row_hit, y, V, stride, dscale, loss_scale, grad);
    }
    return 0;
}

extern "C" int dt_cuda_xent_rows(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, void *logits, float *row_loss,
                                 int *row_hit, const int32_t *y, int N, int V, int stride, float dscale,
                                 const float *loss_scale, bool grad)
{
    if (N <= 0 || V <= 0 || stride < V)
        return dt_error_set(DT_EINVAL, "dt_cuda_xent_rows: %d rows of %d classes in a stride of %d", N, V, stride);
    int rc;
    if (t == DT_CUDA_BF16)
        rc = xent_rows_launch<__nv_bfloat16>(k, logits, row_loss, row_hit, y, N, V, stride, dscale, loss_scale,
                                             grad);
    else if (t == DT_CUDA_F16)
        rc = xent_rows_launch<__half>(k, logits, row_loss, row_hit, y, N, V, stride, dscale, loss_scale, grad);
    else
        rc = xent_rows_launch<float>(k, logits, row_loss, row_hit, y, N, V, stride, dscale, loss_scale, grad);
    return rc ? rc : launched("row-wise softmax cross-entropy kernel launch");
}

extern "C" int dt_cuda_sum_rows(struct dt_cuda_ctx *k, float *loss_sum, int *correct, double *loss_acc,
                                const float *row_loss, const int *row_hit, int N)
{
    if (N <= 0)
        return dt_error_set(DT_EINVAL, "dt_cuda_sum_rows: %d rows", N);
    Partials part = {k->part_f, k->part_i, k->ticket};
    sum_rows_kernel<<<blocks_for((size_t)N, 64), kThreads, 0, k->stream>>>(row_loss, row_hit, N, part,
                                                                           loss_sum, correct, loss_acc);
    return launched("loss sum kernel launch");
}
