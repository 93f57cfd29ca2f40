/* engine_kernels.cu - the trainer engine's own kernel: a batch made on the
 * device from the uploaded data set.
 *
 * Batch: x[i, j] = lut[images[idx_i * px + j]], y[i] = labels[idx_i], with
 * idx_i = idx[i] (the sampler's order) or first + i (evaluation, in order).
 * lut is the loader's ToTensor + Normalize table (worker/data/loader.c), computed on the
 * host with the same float expression, so a device batch has the very bits
 * of the loader's.  Four pixels per thread (px = 784 is a multiple of 4; the
 * images are one allocation, so example rows of 784 bytes stay 4-aligned).
 *
 * Not for model math (act_cuda.cu, optim_cuda.cu, linear_cuda.c).
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

extern "C" {
#include "base/error.h" /* a C header without C++ guards */
}
#include "worker/cuda/cuda_internal.h"
#include "worker/cuda/engine_internal.h"

namespace {

__device__ __forceinline__ void put4(float *x, size_t q, const float *v)
{
    ((float4 *)x)[q] = make_float4(v[0], v[1], v[2], v[3]);
}
__device__ __forceinline__ void put4(__nv_bfloat16 *x, size_t q, const float *v)
{
    ((__nv_bfloat162 *)x)[2 * q] = __floats2bfloat162_rn(v[0], v[1]);
    ((__nv_bfloat162 *)x)[2 * q + 1] = __floats2bfloat162_rn(v[2], v[3]);
}

__device__ __forceinline__ void put4(__half *x, size_t q, const float *v)
{
    ((__half2 *)x)[2 * q] = __floats2half2_rn(v[0], v[1]);
    ((__half2 *)x)[2 * q + 1] = __floats2half2_rn(v[2], v[3]);
}

/* One thread per 4 pixels (px4 = px / 4 groups a row): 32-bit index math,
 * 4-byte loads and 16- or 8-byte stores. */
template <typename T>
__global__ void gather_kernel(T *x, int32_t *y, const uint8_t *images, const uint8_t *labels, const int32_t *idx,
                              int64_t first, int B, int px4, const float *lut_g)
{
    __shared__ float lut[256];
    for (int i = threadIdx.x; i < 256; i += blockDim.x)
        lut[i] = lut_g[i];
    __syncthreads();
    const unsigned total = (unsigned)B * (unsigned)px4, stride = gridDim.x * blockDim.x;
    for (unsigned e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
        const unsigned r = e / (unsigned)px4, j = e - r * (unsigned)px4;
        const int64_t src = idx ? (int64_t)idx[r] : first + (int64_t)r;
        const uchar4 p = ((const uchar4 *)images)[(size_t)src * px4 + j];
        const float v[4] = {lut[p.x], lut[p.y], lut[p.z], lut[p.w]};
        put4(x, e, v);
        if (j == 0)
            y[r] = labels[src];
    }
}

int launched(const char *what)
{
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : dt_cuda_err(e, what);
}

} // namespace

extern "C" int dt_engine__gather(cudaStream_t s, enum dt_cuda_dtype t, void *x, int32_t *y,
                                 const uint8_t *images, const uint8_t *labels, const int32_t *idx,
                                 int64_t first, int B, int px, const float *lut)
{
    if (px % 4 != 0 || (size_t)B * px >= (1ull << 32))
        return dt_error_set(DT_EINVAL, "batch gather: %d pixels per example (need a multiple of 4), %d rows", px, B);
    size_t total = (size_t)B * (px / 4);
    unsigned grid = (unsigned)((total + 255) / 256 < 132 * 8 ? (total + 255) / 256 : 132 * 8);
    if (grid < 1)
        grid = 1;
    if (t == DT_CUDA_BF16)
        gather_kernel<<<grid, 256, 0, s>>>((__nv_bfloat16 *)x, y, images, labels, idx, first, B, px / 4, lut);
    else if (t == DT_CUDA_F16)
        gather_kernel<<<grid, 256, 0, s>>>((__half *)x, y, images, labels, idx, first, B, px / 4, lut);
    else
        gather_kernel<<<grid, 256, 0, s>>>((float *)x, y, images, labels, idx, first, B, px / 4, lut);
    return launched("batch gather kernel launch");
}
