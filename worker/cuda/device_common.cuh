/* device_common.cuh - device helpers shared by the CUDA kernel files:
 * typed loads and stores (fp32 arithmetic, bf16/fp16 only in memory), the
 * activations and their derivatives, the block size and warp sum of the
 * reduction kernels, the fixed-order grid reduction and cp.async (global to
 * shared memory in the background).
 *
 * Math (z the pre-activation, h = act(z)):
 *   relu(z) = max(z, 0)                    relu'(z) = [z > 0] = [h > 0]
 *   gelu(z) = z Phi(z) = z/2 (1 + erf(z/sqrt2))
 *   gelu'(z) = Phi(z) + z phi(z),  phi(z) = exp(-z^2/2) / sqrt(2 pi)
 *   gelu_tanh(z) = z/2 (1 + tanh(u)),  u = sqrt(2/pi) (z + 0.044715 z^3)
 *   gelu_tanh'(z) = (1 + tanh u)/2 + z/2 (1 - tanh^2 u) sqrt(2/pi) (1 + 3 0.044715 z^2)
 *
 * Everything here sits in an anonymous namespace: each .cu file that
 * includes it gets its own internal copy.  Needs base/error.h included
 * first (inside extern "C": it has no C++ guards).
 */
#ifndef DT_WORKER_CUDA_DEVICE_COMMON_CUH
#define DT_WORKER_CUDA_DEVICE_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "worker/cuda/cuda_internal.h"

namespace {

__device__ __forceinline__ float load(const float *p, size_t i) { return p[i]; }
__device__ __forceinline__ float load(const __nv_bfloat16 *p, size_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ float load(const __half *p, size_t i) { return __half2float(p[i]); }
__device__ __forceinline__ void store(float *p, size_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store(__nv_bfloat16 *p, size_t i, float v) { p[i] = __float2bfloat16(v); }
__device__ __forceinline__ void store(__half *p, size_t i, float v) { p[i] = __float2half_rn(v); }

/* Four consecutive values at p[4 i4 .. 4 i4 + 3] in one access (16 bytes of
 * fp32, 8 of bf16/fp16): p must be aligned to that size.  Pair<T> is the
 * 16-bit type's two-value vector and its conversions. */
template <typename T> struct Pair;
template <> struct Pair<__nv_bfloat16> {
    typedef __nv_bfloat162 v;
    static __device__ __forceinline__ float2 get(v x) { return __bfloat1622float2(x); }
    static __device__ __forceinline__ v put(float a, float b) { return __floats2bfloat162_rn(a, b); }
};
template <> struct Pair<__half> {
    typedef __half2 v;
    static __device__ __forceinline__ float2 get(v x) { return __half22float2(x); }
    static __device__ __forceinline__ v put(float a, float b) { return __floats2half2_rn(a, b); }
};

__device__ __forceinline__ float4 load4(const float *p, size_t i4) { return ((const float4 *)p)[i4]; }
__device__ __forceinline__ void store4(float *p, size_t i4, float4 v) { ((float4 *)p)[i4] = v; }
template <typename T> __device__ __forceinline__ float4 load4(const T *p, size_t i4)
{
    typedef typename Pair<T>::v V2;
    const uint2 u = ((const uint2 *)p)[i4]; /* one 8-byte load for both pairs */
    const float2 a = Pair<T>::get(*(const V2 *)&u.x), b = Pair<T>::get(*(const V2 *)&u.y);
    return make_float4(a.x, a.y, b.x, b.y);
}
template <typename T> __device__ __forceinline__ void store4(T *p, size_t i4, float4 v)
{
    const typename Pair<T>::v a = Pair<T>::put(v.x, v.y), b = Pair<T>::put(v.z, v.w);
    uint2 u;
    u.x = *(const uint32_t *)&a;
    u.y = *(const uint32_t *)&b;
    ((uint2 *)p)[i4] = u;
}

__device__ __forceinline__ float act_f(float z, int act)
{
    const float k0 = 0.7978845608028654f; /* sqrt(2/pi) */
    switch (act) {
    case DT_CUDA_ACT_RELU: return z > 0.0f ? z : 0.0f;
    case DT_CUDA_ACT_GELU: return 0.5f * z * (1.0f + erff(z * 0.70710678118654752f));
    case DT_CUDA_ACT_GELU_TANH: return 0.5f * z * (1.0f + tanhf(k0 * (z + 0.044715f * z * z * z)));
    default: return z;
    }
}

/* The elementwise and reduction kernels' block: 256 threads; a grid of
 * blocks_for(work) blocks covers work items one a thread, at most cap. */
constexpr int kThreads = 256;

inline unsigned blocks_for(size_t work, unsigned cap)
{
    size_t b = (work + kThreads - 1) / kThreads;
    return (unsigned)(b < 1 ? 1 : b > cap ? cap : b);
}

/* Sum over the 32 lanes; the butterfly gives every lane the same bits (each
 * stage adds the same two values on both lanes of a pair). */
__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

/* src is h for ReLU (its sign is z's), z for the GELUs. */
__device__ __forceinline__ float act_grad(float src, int act)
{
    const float k0 = 0.7978845608028654f;
    switch (act) {
    case DT_CUDA_ACT_RELU: return src > 0.0f ? 1.0f : 0.0f;
    case DT_CUDA_ACT_GELU: {
        float cdf = 0.5f * (1.0f + erff(src * 0.70710678118654752f));
        float pdf = 0.3989422804014327f * expf(-0.5f * src * src);
        return cdf + src * pdf;
    }
    case DT_CUDA_ACT_GELU_TANH: {
        float th = tanhf(k0 * (src + 0.044715f * src * src * src));
        return 0.5f * (1.0f + th) + 0.5f * src * (1.0f - th * th) * k0 * (1.0f + 3.0f * 0.044715f * src * src);
    }
    default: return 1.0f;
    }
}

struct Partials {
    float *f;
    int *i;
    unsigned *ticket;
};

/* ---- cp.async: global to shared memory without a register round trip ---- */

__device__ __forceinline__ uint32_t smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* n (16 or 4) bytes, in the background until cp_async_wait_all;
 * zero-filled where !valid (src is then not read, but must still be a valid
 * address). */
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(valid ? 16 : 0)
                 : "memory");
}

__device__ __forceinline__ void cp_async4(void *dst, const void *src, bool valid)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(valid ? 4 : 0)
                 : "memory");
}

__device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/* This thread's copies have landed; a __syncthreads after it publishes
 * everyone's. */
__device__ __forceinline__ void cp_async_wait_all()
{
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

/* Sums (f, i) over the grid in a fixed order into out_f/out_i (either may be
 * NULL), and adds the float sum to *acc_f when acc_f is not NULL (a running
 * total kept on the device).  Every thread of every block must call it;
 * NT is the block size.  Each block's tree sum goes to its partial, then the
 * last block to take a ticket adds the partials in block order, so equal
 * inputs give equal bits whatever order the blocks ran in. */
template <int NT>
__device__ void grid_sum(float f, int i, Partials part, float *out_f, int *out_i, double *acc_f = nullptr)
{
    __shared__ float sf[NT];
    __shared__ int si[NT];
    __shared__ bool last;
    sf[threadIdx.x] = f;
    si[threadIdx.x] = i;
    __syncthreads();
    for (int w = NT / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) {
            sf[threadIdx.x] += sf[threadIdx.x + w];
            si[threadIdx.x] += si[threadIdx.x + w];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        part.f[blockIdx.x] = sf[0];
        part.i[blockIdx.x] = si[0];
        __threadfence();
        last = atomicAdd(part.ticket, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (last && threadIdx.x == 0) {
        float tf = 0.0f;
        int ti = 0;
        for (unsigned b = 0; b < gridDim.x; b++) {
            tf += ((volatile float *)part.f)[b];
            ti += ((volatile int *)part.i)[b];
        }
        if (out_f)
            *out_f = tf;
        if (out_i)
            *out_i = ti;
        if (acc_f)
            *acc_f += (double)tf;
        *part.ticket = 0; /* ready for the next launch (or graph replay) */
    }
}

inline int launched(const char *what)
{
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : dt_cuda_err(e, what);
}

} // namespace

#endif
