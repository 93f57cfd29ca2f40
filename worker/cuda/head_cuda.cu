/* head_cuda.cu - the last Linear layer when it has few outputs (the 10
 * classes), its softmax cross-entropy and the input gradient, in one kernel:
 *
 *   logits[r,j] = sum_k x[r,k] W[j,k] + b[j]
 *   m = max_j logits[r,j],  s = sum_j exp(logits[r,j] - m)
 *   loss_r = log s - (logits[r,y_r] - m)
 *   dl[r,j] = (exp(logits[r,j] - m) / s - [j == y_r]) * scale
 *   dx[r,k] = sum_j dl[r,j] W[j,k] * act'(src[r,k])        (the previous layer's dz)
 *
 * Why one kernel: apart, these are a GEMM with 10 outputs per row (no
 * tensor-core kernel takes a 10-element leading dimension), the
 * cross-entropy kernel and the narrow input-gradient kernel: three launches
 * and two round trips through memory for ~2.6 M multiply-adds at B=256, on
 * the critical path of every step.  Here a block of 128 threads owns a row
 * at a time: thread t reads x[r, t + 128i] (K = 1024: 8 columns, their loads
 * in flight together), the C dot products are summed over the block in a
 * fixed order (block_sum), every thread then knows the row's logits and dl,
 * and writes its own columns of dx.  W (C x K) comes from L1/L2 for every
 * block.  A first version gave a row to one warp: 32 dependent iterations
 * per pass made it latency-bound, 30 us slower per step than the three
 * kernels at B=256 on an H200.
 *
 * The numbers are the separate kernels' up to the order of the dot
 * products' sums: the logits and dl are rounded to T before use, as they
 * would be between kernels; the cross-entropy is xent_kernel's (first index
 * on argmax ties, a label outside [0, C) gives no loss, no hit, zero
 * gradient); dx is summed over j in the narrow kernel's order.  The loss sum
 * and hits go through the fixed-order grid_sum.  dl is written for the
 * weight gradient, the logits for completeness.
 *
 * Not for wide layers (linear_cuda.c) or evaluation (dt_cuda_xent).
 */
#include <math.h>

extern "C" {
#include "comm/error.h" /* a C header without C++ guards */
}
#include "worker/cuda/device_common.cuh"
#include "worker/cuda/kernels_cuda.h"

namespace {

constexpr int kHeadThreads = 128; /* one row per block at a time: 4 warps split its K columns */
constexpr int kWarp = 32, kWarps = kHeadThreads / kWarp;
constexpr int kHeadBlocks = DT_CUDA_PARTIALS; /* B=256: 256 blocks; B=4096: 1024, 4 rows each */

/* The row's C dot products, summed over the block in a fixed order: each
 * warp's xor butterfly (every lane gets the same bits), then the warps'
 * sums in warp order from shared memory, so every thread holds the same z. */
template <int CMAX> __device__ void block_sum(float (&z)[CMAX], int C, float (*sz)[CMAX])
{
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
#pragma unroll
    for (int j = 0; j < CMAX; j++) {
        if (j >= C)
            break;
        for (int off = kWarp / 2; off > 0; off >>= 1)
            z[j] += __shfl_xor_sync(0xffffffffu, z[j], off);
        if (lane == 0)
            sz[warp][j] = z[j];
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < CMAX; j++) {
        if (j >= C)
            break;
        float t = sz[0][j];
        for (int q = 1; q < kWarps; q++)
            t += sz[q][j];
        z[j] = t;
    }
    __syncthreads(); /* sz is free for the next row */
}

template <typename T, int CMAX>
__global__ void __launch_bounds__(kHeadThreads) head_kernel(struct dt_cuda_head a, Partials part)
{
    __shared__ float sz[kWarps][CMAX];
    const T *x = (const T *)a.x, *w = (const T *)a.w, *b = (const T *)a.b, *src = (const T *)a.src;
    const float scale = a.dscale * (a.loss_scale ? *a.loss_scale : 1.0f);
    const int C = a.C, K = a.K;
    float my_loss = 0.0f;
    int my_hits = 0;
    for (int r = blockIdx.x; r < a.B; r += gridDim.x) {
        const T *xr = x + (size_t)r * K;
        float z[CMAX];
#pragma unroll
        for (int j = 0; j < CMAX; j++)
            z[j] = 0.0f;
#pragma unroll 4
        for (int k = threadIdx.x; k < K; k += kHeadThreads) {
            float xv = load(xr, k);
#pragma unroll
            for (int j = 0; j < CMAX; j++)
                if (j < C)
                    z[j] += xv * load(w, (size_t)j * K + k);
        }
        block_sum<CMAX>(z, C, sz);
        float m = -INFINITY, zy = 0.0f;
        int am = C;
        const int lbl = a.y[r];
        const bool ok = lbl >= 0 && lbl < C;
#pragma unroll
        for (int j = 0; j < CMAX; j++) {
            if (j >= C)
                break;
            z[j] = rounded<T>(z[j] + load(b, j));
            if (z[j] > m) { /* first index on ties (torch's argmax) */
                m = z[j];
                am = j;
            }
            if (j == lbl)
                zy = z[j];
        }
        float s = 0.0f;
#pragma unroll
        for (int j = 0; j < CMAX; j++)
            if (j < C)
                s += expf(z[j] - m);
        if (threadIdx.x == 0 && ok) {
            my_loss += logf(s) - (zy - m);
            my_hits += am == lbl;
        }
        const float inv = 1.0f / s;
        float d[CMAX];
#pragma unroll
        for (int j = 0; j < CMAX; j++) {
            d[j] = j < C && ok ? rounded<T>((expf(z[j] - m) * inv - (j == lbl ? 1.0f : 0.0f)) * scale) : 0.0f;
            if (j < C && threadIdx.x == j) {
                store((T *)a.logits + (size_t)r * C, j, z[j]);
                store((T *)a.dl + (size_t)r * C, j, d[j]);
            }
        }
#pragma unroll 4
        for (int k = threadIdx.x; k < K; k += kHeadThreads) {
            float acc = 0.0f;
#pragma unroll
            for (int j = 0; j < CMAX; j++)
                if (j < C)
                    acc += d[j] * load(w, (size_t)j * K + k);
            if (a.act != DT_CUDA_ACT_NONE)
                acc *= act_grad(load(src, (size_t)r * K + k), a.act);
            store((T *)a.dx + (size_t)r * K, k, acc);
        }
    }
    grid_sum<kHeadThreads>(my_loss, my_hits, part, a.loss_sum, a.correct, a.loss_acc);
}

template <typename T> void launch(const struct dt_cuda_head *a, unsigned grid, cudaStream_t s, Partials part)
{
    if (a->C <= 16)
        head_kernel<T, 16><<<grid, kHeadThreads, 0, s>>>(*a, part);
    else
        head_kernel<T, 32><<<grid, kHeadThreads, 0, s>>>(*a, part);
}

} // namespace

extern "C" int dt_cuda_head_fused(struct dt_cuda_ctx *k, const struct dt_cuda_head *a)
{
    if (a->B <= 0 || a->K <= 0 || a->C <= 0 || a->C > DT_CUDA_HEAD_MAX_CLASSES)
        return dt_error_set(DT_EINVAL, "fused head: batch %d, inputs %d, classes %d (classes 1..%d)", a->B, a->K,
                            a->C, DT_CUDA_HEAD_MAX_CLASSES);
    if (a->act != DT_CUDA_ACT_NONE && !a->src)
        return dt_error_set(DT_EINVAL, "fused head: an activation gradient without its source");
    Partials part = {k->part_f, k->part_i, k->ticket};
    unsigned grid = (unsigned)(a->B < kHeadBlocks ? a->B : kHeadBlocks);
    cudaStream_t s = k->stream;
    if (a->t == DT_CUDA_BF16)
        launch<__nv_bfloat16>(a, grid, s, part);
    else if (a->t == DT_CUDA_F16)
        launch<__half>(a, grid, s, part);
    else
        launch<float>(a, grid, s, part);
    return launched("fused head kernel launch");
}
