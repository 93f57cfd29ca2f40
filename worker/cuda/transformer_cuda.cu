/* transformer_cuda.cu - GPT-2's layer kernels around the GEMMs
 * (transformer_cuda.h): the embedding forward and its deterministic
 * backward, LayerNorm forward and backward, tanh GELU, and the bias
 * gradient over many rows (for linear_cuda.c's GPT-2 GEMMs).
 *
 * Everything is fixed-order: no floating-point atomics, so equal inputs give
 * equal bits run after run (and a CUDA graph replays the same numbers).
 * Arithmetic is fp32; bf16 only on load and store.
 *
 * Not for the GEMMs (linear_cuda.c), attention or the classifier's
 * cross-entropy (files of their own).
 */
#include <cub/device/device_radix_sort.cuh>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>

extern "C" {
#include "base/error.h" /* a C header without C++ guards */
}
#include "worker/cuda/device_common.cuh"
#include "worker/cuda/transformer_cuda.h"

namespace {

/* ---- embedding ---- */

__global__ void embed_forward_kernel(float *out, const int32_t *tok, const float *wte, const float *wpe,
                                     int T, int C, size_t n)
{
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n;
         e += (size_t)gridDim.x * blockDim.x) {
        size_t r = e / (size_t)C, i = e % (size_t)C;
        int id = tok[r];
        id = id < 0 ? 0 : id;
        out[e] = wte[(size_t)id * C + i] + wpe[(r % (size_t)T) * C + i];
    }
}

/* Sort keys (token ids) with their positions as values: a radix sort is
 * stable, so each token's positions come out ascending. */
__global__ void embed_keys_kernel(uint32_t *keys, int32_t *pos, const int32_t *tok, int N)
{
    for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < N; r += gridDim.x * blockDim.x) {
        keys[r] = tok[r] < 0 ? 0u : (uint32_t)tok[r];
        pos[r] = r;
    }
}

/* One block per sorted position; the block at the start of a token's run
 * sums the run's rows in position order and adds the sum to its wte row. */
__global__ void embed_token_grad_kernel(float *dwte, const float *dout, const uint32_t *keys,
                                        const int32_t *pos, int N, int C)
{
    const int j = blockIdx.x;
    const uint32_t key = keys[j];
    if (j > 0 && keys[j - 1] == key)
        return;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = 0.0f;
        for (int e = j; e < N && keys[e] == key; e++)
            acc += dout[(size_t)pos[e] * C + c];
        dwte[(size_t)key * C + c] += acc;
    }
}

/* dwpe[t, i] (+)= sum_b dout[b, t, i], b in order. */
__global__ void embed_pos_grad_kernel(float *dwpe, const float *dout, int B, int T, int C, int accumulate)
{
    const size_t n = (size_t)T * C;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n;
         e += (size_t)gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (int b = 0; b < B; b++)
            s += dout[(size_t)b * n + e];
        dwpe[e] = accumulate ? dwpe[e] + s : s;
    }
}

size_t align256(size_t x)
{
    return (x + 255) / 256 * 256;
}

/* CUB's temporary bytes for sorting n pairs (a host-side query: no
 * allocation, no stream work); 0 when it fails. */
size_t sort_temp_bytes(int n)
{
    size_t temp = 0;
    cudaError_t e =
        cub::DeviceRadixSort::SortPairs(nullptr, temp, (const uint32_t *)nullptr, (uint32_t *)nullptr,
                                        (const int32_t *)nullptr, (int32_t *)nullptr, n, 0, 32);
    return e == cudaSuccess ? temp : 0;
}

/* ---- LayerNorm ---- */

/* One warp per row, two passes as the CPU's (worker/models/gpt2_layers.c):
 *   mean = sum x / C,  var = sum (x - mean)^2 / C,  rstd = 1 / sqrt(var + 1e-5) */
template <typename T>
__global__ void ln_forward_kernel(T *out, float *mean, float *rstd, const float *inp, const float *w,
                                  const float *b, int N, int C)
{
    const int lane = threadIdx.x % 32;
    const int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (r >= N)
        return;
    const float *x = inp + (size_t)r * C;
    float s = 0.0f;
    for (int i = lane; i < C; i += 32)
        s += x[i];
    const float m = warp_sum(s) / (float)C;
    float v = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float d = x[i] - m;
        v += d * d;
    }
    const float rs = 1.0f / sqrtf(warp_sum(v) / (float)C + 1e-5f);
    for (int i = lane; i < C; i += 32)
        store(out, (size_t)r * C + i, (x[i] - m) * rs * w[i] + b[i]);
    if (lane == 0 && mean)
        mean[r] = m;
    if (lane == 0 && rstd)
        rstd[r] = rs;
}

/* LayerNorm backward's block partial: the nw warps' [2C] sums in shared
 * memory (dw, then db), added in warp order into part[block]. */
__device__ __forceinline__ void block_partials(float *part, const float *sh, int nw, int C)
{
    __syncthreads();
    for (int i = threadIdx.x; i < 2 * C; i += blockDim.x) {
        float s = 0.0f;
        for (int k = 0; k < nw; k++)
            s += sh[(size_t)k * 2 * C + i];
        part[(size_t)blockIdx.x * 2 * C + i] = s;
    }
}

/* One warp per row (a block takes `rows` consecutive rows, its warps in
 * turn).  With xhat = (x - mean) rstd and g = dout w:
 *   dinp += rstd (g - mean(g) - xhat mean(g xhat))
 * Each warp sums dout xhat and dout per column in its own slice of shared
 * memory (a lane owns its columns: no races, no atomics); then the block
 * adds its warps in order into its partial part[block][2C] (dw, then db). */
template <typename T>
__global__ void ln_backward_kernel(float *dinp, T *dinp_t, float *part, const T *dout, const float *inp,
                                   const float *w, const float *mean, const float *rstd, int N, int C,
                                   int rows)
{
    extern __shared__ float sh[]; /* [warps][2C] */
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    float *sdw = sh + (size_t)warp * 2 * C, *sdb = sdw + C;
    for (int i = lane; i < C; i += 32)
        sdw[i] = sdb[i] = 0.0f;
    const int r0 = blockIdx.x * rows, r1 = min(N, r0 + rows);
    for (int r = r0 + warp; r < r1; r += nw) {
        const T *d = dout + (size_t)r * C;
        const float *x = inp + (size_t)r * C;
        const float mu = mean[r], rs = rstd[r];
        float sa = 0.0f, sc = 0.0f;
        for (int i = lane; i < C; i += 32) {
            float g = w[i] * load(d, i);
            sa += g;
            sc += g * ((x[i] - mu) * rs);
        }
        const float a = warp_sum(sa) / (float)C, c = warp_sum(sc) / (float)C;
        for (int i = lane; i < C; i += 32) {
            float dv = load(d, i), xh = (x[i] - mu) * rs;
            size_t at = (size_t)r * C + i;
            float v = dinp[at] + rs * (w[i] * dv - a - xh * c);
            dinp[at] = v;
            if (dinp_t)
                store(dinp_t, at, v);
            sdw[i] += dv * xh;
            sdb[i] += dv;
        }
    }
    block_partials(part, sh, nw, C);
}

/* The same two kernels held in registers, for C = 128 NV (NV <= 8: GPT-2's
 * 768 and 1024 channels) with 16-byte aligned rows: lane l keeps columns
 * 4 (l + 32 j) .. +3 for j < NV, read once in 16-byte (fp32) or 8-byte
 * (bf16) accesses, where the scalar loop above re-reads each value from L1
 * in 2- and 4-byte pieces.  Both are memory-bound: a forward row moves 4C
 * bytes in and C e out, a backward row 4C (inp) + C e (dout) + 8C (dinp
 * read and written) + C e (dinp_t), so the aim is to keep enough bytes in
 * flight (every load of a row is issued before its first use). */
template <typename T, int NV>
__global__ void __launch_bounds__(kThreads) ln_forward_vec_kernel(T *out, float *mean, float *rstd,
                                                                  const float *inp, const float *w,
                                                                  const float *b, int N)
{
    constexpr int C = 128 * NV;
    const int lane = threadIdx.x % 32;
    const int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (r >= N)
        return;
    const size_t row = (size_t)r * (C / 4);
    float4 x[NV];
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < NV; j++) {
        x[j] = load4(inp, row + lane + 32 * j);
        s += (x[j].x + x[j].y) + (x[j].z + x[j].w);
    }
    const float m = warp_sum(s) / (float)C;
    float v = 0.0f;
#pragma unroll
    for (int j = 0; j < NV; j++) {
        x[j] = make_float4(x[j].x - m, x[j].y - m, x[j].z - m, x[j].w - m);
        v += (x[j].x * x[j].x + x[j].y * x[j].y) + (x[j].z * x[j].z + x[j].w * x[j].w);
    }
    const float rs = 1.0f / sqrtf(warp_sum(v) / (float)C + 1e-5f);
#pragma unroll
    for (int j = 0; j < NV; j++) {
        const int c = lane + 32 * j;
        const float4 wv = load4(w, c), bv = load4(b, c);
        store4(out, row + c,
               make_float4(x[j].x * rs * wv.x + bv.x, x[j].y * rs * wv.y + bv.y, x[j].z * rs * wv.z + bv.z,
                           x[j].w * rs * wv.w + bv.w));
    }
    if (lane == 0 && mean)
        mean[r] = m;
    if (lane == 0 && rstd)
        rstd[r] = rs;
}

constexpr int kLnBwdThreads = 128; /* 4 warps a block */

/* Backward as ln_backward_kernel, but a warp keeps its columns' dw and db
 * sums in registers over all its rows, so shared memory is touched once, at
 * the end, to add the block's warps in order into part[block][2C].  Up to
 * C = 768 the registers are held to 168 a thread (three blocks, 12 warps an
 * SM, where 185 gave two): a row's loads in flight are what it runs on. */
template <typename T, int NV>
__global__ void __launch_bounds__(kLnBwdThreads, NV <= 6 ? 3 : 1)
    ln_backward_vec_kernel(float *dinp, T *dinp_t, float *part, const T *dout, const float *inp, const float *w,
                           const float *mean, const float *rstd, int N, int rows)
{
    constexpr int C = 128 * NV;
    extern __shared__ float sh[]; /* [warps][2C] */
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    float4 wv[NV], dw[NV], db[NV];
#pragma unroll
    for (int j = 0; j < NV; j++) {
        wv[j] = load4(w, lane + 32 * j);
        dw[j] = db[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    const int r0 = blockIdx.x * rows, r1 = min(N, r0 + rows);
    for (int r = r0 + warp; r < r1; r += nw) {
        const size_t row = (size_t)r * (C / 4);
        float4 x[NV], d[NV], di[NV];
#pragma unroll
        for (int j = 0; j < NV; j++) {
            x[j] = load4(inp, row + lane + 32 * j);
            d[j] = load4(dout, row + lane + 32 * j);
            di[j] = load4(dinp, row + lane + 32 * j);
        }
        const float mu = mean[r], rs = rstd[r];
        float sa = 0.0f, sc = 0.0f;
#pragma unroll
        for (int j = 0; j < NV; j++) {
            x[j] = make_float4((x[j].x - mu) * rs, (x[j].y - mu) * rs, (x[j].z - mu) * rs, (x[j].w - mu) * rs);
            const float4 g = make_float4(wv[j].x * d[j].x, wv[j].y * d[j].y, wv[j].z * d[j].z, wv[j].w * d[j].w);
            sa += (g.x + g.y) + (g.z + g.w);
            sc += (g.x * x[j].x + g.y * x[j].y) + (g.z * x[j].z + g.w * x[j].w);
        }
        const float a = warp_sum(sa) / (float)C, c = warp_sum(sc) / (float)C;
#pragma unroll
        for (int j = 0; j < NV; j++) {
            const float4 v = make_float4(di[j].x + rs * (wv[j].x * d[j].x - a - x[j].x * c),
                                         di[j].y + rs * (wv[j].y * d[j].y - a - x[j].y * c),
                                         di[j].z + rs * (wv[j].z * d[j].z - a - x[j].z * c),
                                         di[j].w + rs * (wv[j].w * d[j].w - a - x[j].w * c));
            store4(dinp, row + lane + 32 * j, v);
            if (dinp_t)
                store4(dinp_t, row + lane + 32 * j, v);
            dw[j] = make_float4(dw[j].x + d[j].x * x[j].x, dw[j].y + d[j].y * x[j].y, dw[j].z + d[j].z * x[j].z,
                                dw[j].w + d[j].w * x[j].w);
            db[j] = make_float4(db[j].x + d[j].x, db[j].y + d[j].y, db[j].z + d[j].z, db[j].w + d[j].w);
        }
    }
    float4 *mine = (float4 *)(sh + (size_t)warp * 2 * C);
#pragma unroll
    for (int j = 0; j < NV; j++) {
        mine[lane + 32 * j] = dw[j];
        mine[C / 4 + lane + 32 * j] = db[j];
    }
    block_partials(part, sh, nw, C);
}

/* ---- partial sums over slices of rows ---- */

constexpr int kReduceSlices = 16;

/* out[i] (+)= sum over s < S of part[s][i], i < n: the second half of the
 * LayerNorm and bias gradients, whose first kernels leave one partial per
 * block (a slice of rows) in the context's split buffer.  A block takes 32
 * columns; lane y of a column adds slices y, y + 16, ... and the 16 lane
 * sums are added in lane order: a fixed order, the same bits every run,
 * with S / 16 loads a thread instead of S (S is some hundreds: one thread
 * a column left 1536 threads each waiting on 512 loads in turn).  Columns
 * below split go to lo[i], the rest to hi[i - split] (LayerNorm's dw and db
 * side by side; a bias gradient has split = n). */
__global__ void partials_reduce_kernel(float *lo, float *hi, int split, const float *part, int S, int n,
                                       int accumulate)
{
    __shared__ float sh[kReduceSlices][33];
    const int i = blockIdx.x * 32 + threadIdx.x;
    float s = 0.0f;
    if (i < n)
        for (int g = threadIdx.y; g < S; g += kReduceSlices)
            s += part[(size_t)g * n + i];
    sh[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && i < n) {
        float t = 0.0f;
        for (int y = 0; y < kReduceSlices; y++)
            t += sh[y][threadIdx.x];
        float *o = i < split ? lo + i : hi + (i - split);
        *o = accumulate ? *o + t : t;
    }
}

int partials_reduce(cudaStream_t s, float *lo, float *hi, int split, const float *part, int S, int n,
                    bool accumulate, const char *what)
{
    partials_reduce_kernel<<<(unsigned)((n + 31) / 32), dim3(32, kReduceSlices), 0, s>>>(lo, hi, split, part, S,
                                                                                        n, accumulate);
    return launched(what);
}

/* ---- bias gradient over many rows ---- */

/* db[j] (+)= sum_r dz[r, j] for GPT-2's 16-32K rows: act_cuda.cu's kernel
 * gives a block 32 columns and all the rows (24 blocks for 768 columns), so
 * here the rows are cut in S slices too: block (column tile, slice) sums its
 * slice with 8 row lanes, the partials [S][n] go to the context's split
 * buffer, and a second kernel adds them in slice order (fixed order).
 * A row lane takes four rows a turn, all four loads issued before the adds:
 * one 2-byte load in flight a thread ran the 768-wide sums at 1.1 TB/s
 * (44 us for 50 MB, CUPTI on the H200). */
template <typename T> __global__ void bias_grad_part_kernel(float *part, const T *dz, int N, int n, int rows)
{
    __shared__ float sh[8][33];
    const int j = blockIdx.x * 32 + threadIdx.x, r0 = blockIdx.y * rows, r1 = min(N, r0 + rows);
    float s = 0.0f;
    if (j < n) {
        int r = r0 + threadIdx.y;
        for (; r + 24 < r1; r += 32) {
            const float a = load(dz, (size_t)r * n + j), b = load(dz, (size_t)(r + 8) * n + j),
                        c = load(dz, (size_t)(r + 16) * n + j), d = load(dz, (size_t)(r + 24) * n + j);
            s += (a + b) + (c + d);
        }
        for (; r < r1; r += 8)
            s += load(dz, (size_t)r * n + j);
    }
    sh[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && j < n) {
        float t = 0.0f;
        for (int i = 0; i < 8; i++)
            t += sh[i][threadIdx.x];
        part[(size_t)blockIdx.y * n + j] = t;
    }
}

} // namespace

/* ---- embedding ---- */

extern "C" int dt_cuda_embed_forward(struct dt_cuda_ctx *k, float *out, const int32_t *tok, const float *wte,
                                     const float *wpe, int B, int T, int C)
{
    if (B <= 0 || T <= 0 || C <= 0)
        return dt_error_set(DT_EINVAL, "dt_cuda_embed_forward: shape %dx%dx%d must be positive", B, T, C);
    size_t n = (size_t)B * T * C;
    embed_forward_kernel<<<blocks_for(n, 132 * 32), kThreads, 0, k->stream>>>(out, tok, wte, wpe, T, C, n);
    return launched("embedding forward kernel launch");
}

/* Scratch: sort keys and values in and out (N int32 each), then CUB's
 * temporary storage, each at a 256-byte boundary (the first found inside
 * the caller's buffer, whatever its alignment: 256 bytes spare). */
extern "C" size_t dt_cuda_embed_scratch_bytes(int N)
{
    if (N <= 0)
        return 0;
    size_t temp = sort_temp_bytes(N);
    if (temp == 0) /* the query failed: room CUB's onesweep never needs at this size */
        temp = (size_t)N * 16 + (16u << 20);
    return 256 + 4 * align256((size_t)N * 4) + align256(temp);
}

extern "C" int dt_cuda_embed_backward(struct dt_cuda_ctx *k, float *dwte, float *dwpe, const float *dout,
                                      const int32_t *tok, int B, int T, int C, bool accumulate, void *scratch)
{
    if (B <= 0 || T <= 0 || C <= 0)
        return dt_error_set(DT_EINVAL, "dt_cuda_embed_backward: shape %dx%dx%d must be positive", B, T, C);
    const int N = B * T;
    cudaStream_t s = k->stream;
    embed_pos_grad_kernel<<<blocks_for((size_t)T * C, 132 * 16), kThreads, 0, s>>>(dwpe, dout, B, T, C,
                                                                                   accumulate);
    int rc = launched("position embedding gradient kernel launch");
    if (rc < 0)
        return rc;
    char *base = (char *)align256((size_t)(uintptr_t)scratch);
    const size_t arr = align256((size_t)N * 4);
    uint32_t *keys_in = (uint32_t *)base, *keys = (uint32_t *)(base + arr);
    int32_t *pos_in = (int32_t *)(base + 2 * arr), *pos = (int32_t *)(base + 3 * arr);
    void *temp = base + 4 * arr;
    size_t temp_bytes = sort_temp_bytes(N);
    if (temp_bytes == 0)
        return dt_error_set(DT_EIO, "cuda: CUB could not size the sort of %d token ids", N);
    embed_keys_kernel<<<blocks_for((size_t)N, 132 * 8), kThreads, 0, s>>>(keys_in, pos_in, tok, N);
    if ((rc = launched("embedding sort keys kernel launch")) < 0)
        return rc;
    cudaError_t e =
        cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys, pos_in, pos, N, 0, 32, s);
    if (e != cudaSuccess)
        return dt_cuda_err(e, "cub::DeviceRadixSort::SortPairs (token ids of the embedding gradient)");
    const unsigned tb = C < kThreads ? 32u * (unsigned)((C + 31) / 32) : (unsigned)kThreads;
    embed_token_grad_kernel<<<(unsigned)N, tb, 0, s>>>(dwte, dout, keys, pos, N, C);
    return launched("token embedding gradient kernel launch");
}

/* ---- LayerNorm ---- */

/* Which register-resident form serves C channels: NV = C / 128 when that is
 * 1..8 and every row pointer is aligned for its vector width; 0 for the
 * scalar kernels. */
static int ln_vec_width(int C, size_t t_size, const void *t0, const void *t1, const float *f0, const float *f1,
                        const float *f2, const float *f3)
{
    const uintptr_t f_mis = (uintptr_t)f0 | (uintptr_t)f1 | (uintptr_t)f2 | (uintptr_t)f3;
    const uintptr_t t_mis = (uintptr_t)t0 | (uintptr_t)t1;
    if (C % 128 != 0 || C / 128 > 8 || (f_mis & 15u) != 0 || (t_mis & (4 * t_size - 1)) != 0)
        return 0;
    return C / 128;
}

/* Instantiates launch<T, NV> for NV = nv (1..8). */
#define LN_VEC_DISPATCH(nv, call)                                                                            \
    switch (nv) {                                                                                            \
    case 1: call(1); break;                                                                                  \
    case 2: call(2); break;                                                                                  \
    case 3: call(3); break;                                                                                  \
    case 4: call(4); break;                                                                                  \
    case 5: call(5); break;                                                                                  \
    case 6: call(6); break;                                                                                  \
    case 7: call(7); break;                                                                                  \
    default: call(8); break;                                                                                 \
    }

template <typename T>
static void ln_forward_launch(cudaStream_t s, int nv, void *out, float *mean, float *rstd, const float *inp,
                              const float *w, const float *b, int N, int C)
{
    const int rows = kThreads / 32;
    const unsigned grid = (unsigned)((N + rows - 1) / rows);
    T *o = (T *)out;
#define LN_FWD(NV) ln_forward_vec_kernel<T, NV><<<grid, kThreads, 0, s>>>(o, mean, rstd, inp, w, b, N)
    if (nv)
        LN_VEC_DISPATCH(nv, LN_FWD)
    else
        ln_forward_kernel<<<grid, kThreads, 0, s>>>(o, mean, rstd, inp, w, b, N, C);
#undef LN_FWD
}

extern "C" int dt_cuda_layernorm_forward(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, void *out, float *mean,
                                         float *rstd, const float *inp, const float *w, const float *b, int N,
                                         int C)
{
    if (N <= 0 || C <= 0)
        return dt_error_set(DT_EINVAL, "dt_cuda_layernorm_forward: shape %dx%d must be positive", N, C);
    const int nv = ln_vec_width(C, dt_cuda_dtype_size(t), out, NULL, inp, w, b, NULL);
    if (t == DT_CUDA_BF16)
        ln_forward_launch<__nv_bfloat16>(k->stream, nv, out, mean, rstd, inp, w, b, N, C);
    else if (t == DT_CUDA_F16)
        ln_forward_launch<__half>(k->stream, nv, out, mean, rstd, inp, w, b, N, C);
    else
        ln_forward_launch<float>(k->stream, nv, out, mean, rstd, inp, w, b, N, C);
    return launched("LayerNorm forward kernel launch");
}

/* Blocks of a kernel an SM holds at a block size and shared memory: the
 * occupancy calculator, asked once per kernel and shape, so the query stays
 * out of the steps (and of a graph capture, which only meets shapes the
 * warm-up step ran). */
static int blocks_per_sm(const void *kernel, int threads, size_t smem)
{
    static struct {
        const void *kernel;
        int threads;
        size_t smem;
        int n;
    } seen[32];
    static int n_seen;
    for (int i = 0; i < n_seen; i++)
        if (seen[i].kernel == kernel && seen[i].threads == threads && seen[i].smem == smem)
            return seen[i].n;
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem) != cudaSuccess || n < 1) {
        cudaGetLastError();
        n = 1;
    }
    if (n_seen < 32)
        seen[n_seen++] = {kernel, threads, smem, n};
    return n;
}

/* The grid of a backward: G blocks of whole rows, no more than one wave of
 * the kernel (more would only add partials) and no more partials than the
 * context's split buffer holds; returns the rows a block takes. */
static int ln_backward_grid(const struct dt_cuda_ctx *k, int per_sm, int nw, int N, int C, int *G_out)
{
    int G = (N + nw - 1) / nw;
    const int wave = per_sm * k->sms;
    G = G > wave ? wave : G;
    while (G > 1 && (size_t)G * 2 * C > k->split_floats)
        G--;
    const int rows = (N + G - 1) / G;
    *G_out = (N + rows - 1) / rows;
    return rows;
}

template <typename T>
static int ln_backward_launch(struct dt_cuda_ctx *k, int nv, float *dinp, void *dinp_t, const void *dout,
                              const float *inp, const float *w, const float *mean, const float *rstd, int N, int C,
                              int *G)
{
    cudaStream_t s = k->stream;
    T *dt = (T *)dinp_t;
    const T *d = (const T *)dout;
    if (nv) {
        const size_t smem = (size_t)(kLnBwdThreads / 32) * 2 * C * sizeof(float); /* <= 32 KiB at NV 8 */
        int rows = 0;
#define LN_BWD(NV)                                                                                           \
    do {                                                                                                     \
        const int per_sm = blocks_per_sm((const void *)ln_backward_vec_kernel<T, NV>, kLnBwdThreads, smem);  \
        rows = ln_backward_grid(k, per_sm, kLnBwdThreads / 32, N, C, G);                                     \
        ln_backward_vec_kernel<T, NV><<<*G, kLnBwdThreads, smem, s>>>(dinp, dt, k->split, d, inp, w, mean,   \
                                                                      rstd, N, rows);                        \
    } while (0)
        LN_VEC_DISPATCH(nv, LN_BWD)
#undef LN_BWD
        return launched("LayerNorm backward kernel launch");
    }
    /* Warps per block as shared memory allows (48 KiB without opting in). */
    int nw = 8;
    while (nw > 1 && (size_t)nw * 2 * C * sizeof(float) > 48 * 1024)
        nw /= 2;
    const size_t smem = (size_t)nw * 2 * C * sizeof(float);
    if (smem > 48 * 1024 || (size_t)2 * C > k->split_floats)
        return dt_error_set(DT_EINVAL, "dt_cuda_layernorm_backward: %d channels are more than it handles", C);
    const int rows = ln_backward_grid(k, blocks_per_sm((const void *)ln_backward_kernel<T>, nw * 32, smem), nw, N,
                                      C, G);
    ln_backward_kernel<<<*G, nw * 32, smem, s>>>(dinp, dt, k->split, d, inp, w, mean, rstd, N, C, rows);
    return launched("LayerNorm backward kernel launch");
}

extern "C" int dt_cuda_layernorm_backward(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, float *dinp,
                                          void *dinp_t, float *dw, float *db, const void *dout,
                                          const float *inp, const float *w, const float *mean,
                                          const float *rstd, int N, int C, bool accumulate)
{
    if (N <= 0 || C <= 0)
        return dt_error_set(DT_EINVAL, "dt_cuda_layernorm_backward: shape %dx%d must be positive", N, C);
    const int nv = ln_vec_width(C, dt_cuda_dtype_size(t), dout, dinp_t, dinp, inp, w, NULL);
    int G = 0, rc;
    if (t == DT_CUDA_BF16)
        rc = ln_backward_launch<__nv_bfloat16>(k, nv, dinp, dinp_t, dout, inp, w, mean, rstd, N, C, &G);
    else if (t == DT_CUDA_F16)
        rc = ln_backward_launch<__half>(k, nv, dinp, dinp_t, dout, inp, w, mean, rstd, N, C, &G);
    else
        rc = ln_backward_launch<float>(k, nv, dinp, dinp_t, dout, inp, w, mean, rstd, N, C, &G);
    if (rc < 0)
        return rc;
    return partials_reduce(k->stream, dw, db, C, k->split, G, 2 * C, accumulate,
                           "LayerNorm parameter gradient reduction launch");
}

/* ---- bias gradient ---- */

extern "C" int dt_cuda__launch_bias_grad_rows(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, float *db,
                                              const void *dz, int N, int n, bool accumulate)
{
    if ((size_t)n > k->split_floats) /* one slice's partials would not fit: one pass over the rows */
        return dt_cuda__launch_bias_grad(k->stream, t, db, dz, N, n, accumulate);
    const int tiles = (n + 31) / 32;
    /* about four waves of 8 blocks on each SM, slices of 8 rows at least */
    int S = (k->sms * 8 * 4 + tiles - 1) / tiles;
    S = S > (N + 7) / 8 ? (N + 7) / 8 : S;
    while (S > 1 && (size_t)S * n > k->split_floats)
        S--;
    const int rows = (N + S - 1) / S;
    S = (N + rows - 1) / rows;
    dim3 grid((unsigned)tiles, (unsigned)S), block(32, 8);
    cudaStream_t s = k->stream;
    if (t == DT_CUDA_BF16)
        bias_grad_part_kernel<<<grid, block, 0, s>>>(k->split, (const __nv_bfloat16 *)dz, N, n, rows);
    else if (t == DT_CUDA_F16)
        bias_grad_part_kernel<<<grid, block, 0, s>>>(k->split, (const __half *)dz, N, n, rows);
    else
        bias_grad_part_kernel<<<grid, block, 0, s>>>(k->split, (const float *)dz, N, n, rows);
    int rc = launched("bias gradient partials kernel launch");
    if (rc < 0)
        return rc;
    return partials_reduce(s, db, nullptr, n, k->split, S, n, accumulate, "bias gradient reduction launch");
}

/* ---- elementwise ---- */

extern "C" int dt_cuda_gelu_tanh_forward(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, void *out,
                                         const void *inp, size_t n)
{
    return dt_cuda__launch_act_forward(k->stream, t, out, inp, n, DT_CUDA_ACT_GELU_TANH);
}
