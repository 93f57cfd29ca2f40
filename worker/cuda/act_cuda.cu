/* act_cuda.cu - the elementwise kernels around the GEMMs: activations where
 * cuBLASLt cannot fuse them (torch's exact erf GELU, and fallbacks), the bias
 * gradient when it cannot come from the epilogue, casts, rounding, a residual
 * add and zeroing.
 *
 * The activations and their derivatives are in device_common.cuh.
 * Arithmetic is fp32; bf16 only on load and store.
 *
 * Also the narrow-layer kernels: a layer with few outputs (the 10 classes)
 * has leading dimensions of 10 elements, which no tensor-core GEMM accepts
 * (they need 16-byte multiples), and cuBLASLt then falls to a SIMT kernel that
 * took 277 us for the 4096x1024x10 weight gradient on an H200.  These do it
 * directly:
 *   dW[o,i] (+)= sum_r dz[r,o] x[r,i]  rows split in S slices, partials summed
 *                                       in slice order (fixed order)
 *   dx[r,i]  = sum_o dz[r,o] W[o,i] * act'(src[r,i])
 *
 * Not for the GEMMs (linear_cuda.c) or the optimizer (optim_cuda.cu).
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

extern "C" {
#include "base/error.h" /* a C header without C++ guards */
}
#include "worker/cuda/device_common.cuh"

namespace {

template <typename T> __global__ void act_forward_kernel(T *h, const T *z, size_t n, int act)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        store(h, i, act_f(load(z, i), act));
}

template <typename T> __global__ void act_backward_kernel(T *dz, const T *src, size_t n, int act)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        store(dz, i, load(dz, i) * act_grad(load(src, i), act));
}

/* db[j] (+)= sum_r dz[r, j]: 32 columns per block, 16 row lanes each summing
 * a strided set of rows, then the 16 partials added in a fixed order. */
template <typename T> __global__ void bias_grad_kernel(float *db, const T *dz, int B, int n, int accumulate)
{
    __shared__ float part[16][33];
    int j = blockIdx.x * 32 + threadIdx.x;
    float s = 0.0f;
    if (j < n)
        for (int r = threadIdx.y; r < B; r += 16)
            s += load(dz, (size_t)r * n + j);
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && j < n) {
        float t = 0.0f;
        for (int i = 0; i < 16; i++)
            t += part[i][threadIdx.x];
        db[j] = accumulate ? db[j] + t : t;
    }
}

template <typename D, typename S> __global__ void cast_kernel(D *dst, const S *src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        store(dst, i, load(src, i));
}

/* out = res + x: an fp32 residual plus a T branch. */
template <typename T> __global__ void add_residual_kernel(float *out, const float *res, const T *x, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = res[i] + load(x, i);
}

/* x = x rounded to T's precision (to nearest even), kept in fp32. */
template <typename T> __global__ void round_kernel(float *x, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        T v;
        store(&v, 0, x[i]);
        x[i] = load(&v, 0);
    }
}

/* One thread per input column i, all outputs in registers; block (i-tile,
 * slice) sums its slice's rows, 32 at a time through shared memory.  The x
 * loads of a chunk do not wait on one another: a row past the slice reads
 * row r1-1 (a valid address) times d = 0, so no branch holds a load back.
 * Slices are 16 rows (B=256: 128 blocks for 1024 inputs), so a slice's one
 * chunk is half such rows, which hit L1.  Measured on an H200 with the
 * first layer's weight gradient moved onto the compute stream
 * (engine_step.c): the fp32 B=256 trainer step 148.4-151.2 us against
 * 158.8-162.4 with 64-row slices and a loop that stopped at each row. */
template <typename T, int OUTMAX>
__global__ void wgrad_partial_kernel(float *part, const T *dz, const T *x, int B, int in, int out, int rows)
{
    constexpr int CHUNK = 32;
    __shared__ float d[CHUNK][OUTMAX];
    const int i = blockIdx.x * 128 + threadIdx.x, s = blockIdx.y;
    const int r0 = s * rows, r1 = min(B, r0 + rows);
    float acc[OUTMAX];
#pragma unroll
    for (int o = 0; o < OUTMAX; o++)
        acc[o] = 0.0f;
    for (int rt = r0; rt < r1; rt += CHUNK) {
        for (int e = threadIdx.x; e < CHUNK * OUTMAX; e += 128) {
            int rr = e / OUTMAX, o = e % OUTMAX;
            d[rr][o] = rt + rr < r1 && o < out ? load(dz, (size_t)(rt + rr) * out + o) : 0.0f;
        }
        __syncthreads();
        if (i < in) {
#pragma unroll 8
            for (int rr = 0; rr < CHUNK; rr++) {
                float xv = load(x, (size_t)min(rt + rr, r1 - 1) * in + i);
#pragma unroll
                for (int o = 0; o < OUTMAX; o++)
                    acc[o] += d[rr][o] * xv;
            }
        }
        __syncthreads();
    }
    if (i < in)
        for (int o = 0; o < out; o++)
            part[((size_t)s * out + o) * in + i] = acc[o];
}

__global__ void wgrad_reduce_kernel(float *dw, const float *part, int S, int in, int out, int accumulate)
{
    size_t n = (size_t)in * out;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
        float t = 0.0f;
        for (int s = 0; s < S; s++)
            t += part[(size_t)s * n + e];
        dw[e] = accumulate ? dw[e] + t : t;
    }
}

/* W's column i stays in registers while the block walks its rows. */
template <typename T, int OUTMAX>
__global__ void xgrad_narrow_kernel(T *dzp, const T *dz, const T *w, const T *src, int B, int in, int out, int act)
{
    __shared__ float d[OUTMAX];
    const int i = blockIdx.x * 128 + threadIdx.x;
    float wc[OUTMAX];
#pragma unroll
    for (int o = 0; o < OUTMAX; o++)
        wc[o] = i < in && o < out ? load(w, (size_t)o * in + i) : 0.0f;
    for (int r = blockIdx.y; r < B; r += gridDim.y) {
        if (threadIdx.x < OUTMAX)
            d[threadIdx.x] = threadIdx.x < out ? load(dz, (size_t)r * out + threadIdx.x) : 0.0f;
        __syncthreads();
        if (i < in) {
            float s = 0.0f;
#pragma unroll
            for (int o = 0; o < OUTMAX; o++)
                s += d[o] * wc[o];
            if (act != DT_CUDA_ACT_NONE)
                s *= act_grad(load(src, (size_t)r * in + i), act);
            store(dzp, (size_t)r * in + i, s);
        }
        __syncthreads();
    }
}

unsigned grid_for(size_t n)
{
    size_t g = (n + 255) / 256;
    return (unsigned)(g < 1 ? 1 : g > 4096 ? 4096 : g);
}

} // namespace

extern "C" int dt_cuda__launch_act_forward(cudaStream_t s, enum dt_cuda_dtype t, void *h, const void *z,
                                           size_t n, enum dt_cuda_act act)
{
    if (t == DT_CUDA_BF16)
        act_forward_kernel<<<grid_for(n), 256, 0, s>>>((__nv_bfloat16 *)h, (const __nv_bfloat16 *)z, n, (int)act);
    else if (t == DT_CUDA_F16)
        act_forward_kernel<<<grid_for(n), 256, 0, s>>>((__half *)h, (const __half *)z, n, (int)act);
    else
        act_forward_kernel<<<grid_for(n), 256, 0, s>>>((float *)h, (const float *)z, n, (int)act);
    return launched("activation forward kernel launch");
}

extern "C" int dt_cuda__launch_act_backward(cudaStream_t s, enum dt_cuda_dtype t, void *dz, const void *src,
                                            size_t n, enum dt_cuda_act act)
{
    if (t == DT_CUDA_BF16)
        act_backward_kernel<<<grid_for(n), 256, 0, s>>>((__nv_bfloat16 *)dz, (const __nv_bfloat16 *)src, n,
                                                        (int)act);
    else if (t == DT_CUDA_F16)
        act_backward_kernel<<<grid_for(n), 256, 0, s>>>((__half *)dz, (const __half *)src, n, (int)act);
    else
        act_backward_kernel<<<grid_for(n), 256, 0, s>>>((float *)dz, (const float *)src, n, (int)act);
    return launched("activation backward kernel launch");
}

extern "C" int dt_cuda__launch_bias_grad(cudaStream_t s, enum dt_cuda_dtype t, float *db, const void *dz,
                                         int B, int n, bool accumulate)
{
    dim3 block(32, 16), grid((unsigned)(n + 31) / 32);
    if (t == DT_CUDA_BF16)
        bias_grad_kernel<<<grid, block, 0, s>>>(db, (const __nv_bfloat16 *)dz, B, n, accumulate);
    else if (t == DT_CUDA_F16)
        bias_grad_kernel<<<grid, block, 0, s>>>(db, (const __half *)dz, B, n, accumulate);
    else
        bias_grad_kernel<<<grid, block, 0, s>>>(db, (const float *)dz, B, n, accumulate);
    return launched("bias gradient kernel launch");
}

extern "C" int dt_cuda_cast(struct dt_cuda_ctx *k, enum dt_cuda_dtype dt, void *dst, enum dt_cuda_dtype st,
                            const void *src, size_t n)
{
    cudaStream_t s = k->stream;
    if (dt == st) {
        cudaError_t e = cudaMemcpyAsync(dst, src, n * dt_cuda_dtype_size(dt), cudaMemcpyDeviceToDevice, s);
        return e == cudaSuccess ? 0 : dt_cuda_err(e, "cudaMemcpyAsync (cast to the same type)");
    }
    if (dt != DT_CUDA_F32 && st != DT_CUDA_F32)
        return dt_error_set(DT_EINVAL, "dt_cuda_cast: bf16 <-> fp16 is not a cast this library does");
    if (dt == DT_CUDA_BF16)
        cast_kernel<<<grid_for(n), 256, 0, s>>>((__nv_bfloat16 *)dst, (const float *)src, n);
    else if (dt == DT_CUDA_F16)
        cast_kernel<<<grid_for(n), 256, 0, s>>>((__half *)dst, (const float *)src, n);
    else if (st == DT_CUDA_F16)
        cast_kernel<<<grid_for(n), 256, 0, s>>>((float *)dst, (const __half *)src, n);
    else
        cast_kernel<<<grid_for(n), 256, 0, s>>>((float *)dst, (const __nv_bfloat16 *)src, n);
    return launched("cast kernel launch");
}

extern "C" int dt_cuda_round(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, float *x, size_t n)
{
    if (t == DT_CUDA_F32 || n == 0)
        return 0;
    if (t == DT_CUDA_BF16)
        round_kernel<__nv_bfloat16><<<grid_for(n), 256, 0, k->stream>>>(x, n);
    else
        round_kernel<__half><<<grid_for(n), 256, 0, k->stream>>>(x, n);
    return launched("rounding kernel launch");
}

extern "C" int dt_cuda_add_residual(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, float *out, const float *res,
                                    const void *x, size_t n)
{
    if (n == 0)
        return 0;
    if (t == DT_CUDA_BF16)
        add_residual_kernel<<<grid_for(n), 256, 0, k->stream>>>(out, res, (const __nv_bfloat16 *)x, n);
    else if (t == DT_CUDA_F16)
        add_residual_kernel<<<grid_for(n), 256, 0, k->stream>>>(out, res, (const __half *)x, n);
    else
        add_residual_kernel<<<grid_for(n), 256, 0, k->stream>>>(out, res, (const float *)x, n);
    return launched("residual add kernel launch");
}

extern "C" int dt_cuda_zero(struct dt_cuda_ctx *k, void *p, size_t bytes)
{
    cudaError_t e = cudaMemsetAsync(p, 0, bytes, k->stream);
    return e == cudaSuccess ? 0 : dt_cuda_err(e, "cudaMemsetAsync");
}

extern "C" int dt_cuda__launch_wgrad_narrow(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, float *dw,
                                            const void *dz, const void *x, int B, int in, int out,
                                            bool accumulate)
{
    if (out > 32)
        return dt_error_set(DT_EINTERNAL, "narrow weight gradient: %d outputs (at most 32)", out);
    int S = (B + 15) / 16; /* 16 rows a slice (see the kernel) */
    S = S > 64 ? 64 : S;
    while (S > 1 && (size_t)S * out * in > k->split_floats)
        S--;
    int rows = (B + S - 1) / S;
    dim3 grid((unsigned)(in + 127) / 128, (unsigned)S);
    cudaStream_t s = k->stream;
    bool small = out <= 16;
    if (t == DT_CUDA_BF16) {
        auto *d = (const __nv_bfloat16 *)dz;
        auto *xx = (const __nv_bfloat16 *)x;
        if (small)
            wgrad_partial_kernel<__nv_bfloat16, 16><<<grid, 128, 0, s>>>(k->split, d, xx, B, in, out, rows);
        else
            wgrad_partial_kernel<__nv_bfloat16, 32><<<grid, 128, 0, s>>>(k->split, d, xx, B, in, out, rows);
    } else if (t == DT_CUDA_F16) {
        auto *d = (const __half *)dz;
        auto *xx = (const __half *)x;
        if (small)
            wgrad_partial_kernel<__half, 16><<<grid, 128, 0, s>>>(k->split, d, xx, B, in, out, rows);
        else
            wgrad_partial_kernel<__half, 32><<<grid, 128, 0, s>>>(k->split, d, xx, B, in, out, rows);
    } else {
        auto *d = (const float *)dz;
        auto *xx = (const float *)x;
        if (small)
            wgrad_partial_kernel<float, 16><<<grid, 128, 0, s>>>(k->split, d, xx, B, in, out, rows);
        else
            wgrad_partial_kernel<float, 32><<<grid, 128, 0, s>>>(k->split, d, xx, B, in, out, rows);
    }
    int rc = launched("narrow weight gradient kernel launch");
    if (rc == 0) {
        wgrad_reduce_kernel<<<grid_for((size_t)in * out), 256, 0, s>>>(dw, k->split, S, in, out, accumulate);
        rc = launched("narrow weight gradient reduction launch");
    }
    return rc;
}

extern "C" int dt_cuda__launch_xgrad_narrow(cudaStream_t s, enum dt_cuda_dtype t, void *dzp, const void *dz,
                                            const void *w, const void *src, int B, int in, int out,
                                            enum dt_cuda_act act)
{
    if (out > 32)
        return dt_error_set(DT_EINTERNAL, "narrow input gradient: %d outputs (at most 32)", out);
    dim3 grid((unsigned)(in + 127) / 128, (unsigned)(B < 1024 ? B : 1024));
    bool small = out <= 16;
    if (t == DT_CUDA_BF16) {
        auto *o = (__nv_bfloat16 *)dzp;
        auto *d = (const __nv_bfloat16 *)dz;
        auto *ww = (const __nv_bfloat16 *)w;
        auto *sr = (const __nv_bfloat16 *)src;
        if (small)
            xgrad_narrow_kernel<__nv_bfloat16, 16><<<grid, 128, 0, s>>>(o, d, ww, sr, B, in, out, (int)act);
        else
            xgrad_narrow_kernel<__nv_bfloat16, 32><<<grid, 128, 0, s>>>(o, d, ww, sr, B, in, out, (int)act);
    } else if (t == DT_CUDA_F16) {
        auto *o = (__half *)dzp;
        auto *d = (const __half *)dz;
        auto *ww = (const __half *)w;
        auto *sr = (const __half *)src;
        if (small)
            xgrad_narrow_kernel<__half, 16><<<grid, 128, 0, s>>>(o, d, ww, sr, B, in, out, (int)act);
        else
            xgrad_narrow_kernel<__half, 32><<<grid, 128, 0, s>>>(o, d, ww, sr, B, in, out, (int)act);
    } else {
        auto *o = (float *)dzp;
        auto *d = (const float *)dz;
        auto *ww = (const float *)w;
        auto *sr = (const float *)src;
        if (small)
            xgrad_narrow_kernel<float, 16><<<grid, 128, 0, s>>>(o, d, ww, sr, B, in, out, (int)act);
        else
            xgrad_narrow_kernel<float, 32><<<grid, 128, 0, s>>>(o, d, ww, sr, B, in, out, (int)act);
    }
    return launched("narrow input gradient kernel launch");
}
