/* gpu_buffers.h - moving test data between the host (fp32 arrays) and the
 * device (fp32 or bf16), for the kernel tests.  Uploading rounds the host copy
 * to the device type first, so a CPU reference sees exactly the GPU's inputs.
 * Not for the library: worker/cuda/ owns real allocation.
 */
#ifndef DT_GPU_BUFFERS_H
#define DT_GPU_BUFFERS_H

#include <cuda_runtime_api.h>

#include "base/error.h"
#include "tests/gpu/gpu_test.h"
#include "worker/cuda/kernels_cuda.h"

static inline void gt_die_cuda(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        printf("not ok - %s: %s\nBail out!\n", what, cudaGetErrorString(e));
        exit(1);
    }
}

/* Rounds h[0..n) to type t in place and returns a device copy. */
static inline void *gt_up(float *h, size_t n, enum dt_cuda_dtype t)
{
    void *d = NULL;
    gt_die_cuda(cudaMalloc(&d, n * dt_cuda_dtype_size(t) + 16), "cudaMalloc");
    if (t == DT_CUDA_BF16) {
        uint16_t *tmp = malloc(n * 2 + 2);
        for (size_t i = 0; i < n; i++) {
            tmp[i] = gt_to_bf16(h[i]);
            h[i] = gt_from_bf16(tmp[i]);
        }
        gt_die_cuda(cudaMemcpy(d, tmp, n * 2, cudaMemcpyHostToDevice), "cudaMemcpy up");
        free(tmp);
    } else if (t == DT_CUDA_F16) { /* GCC's _Float16 rounds to nearest even, as __float2half */
        _Float16 *tmp = malloc(n * 2 + 2);
        for (size_t i = 0; i < n; i++) {
            tmp[i] = (_Float16)h[i];
            h[i] = (float)tmp[i];
        }
        gt_die_cuda(cudaMemcpy(d, tmp, n * 2, cudaMemcpyHostToDevice), "cudaMemcpy up");
        free(tmp);
    } else {
        gt_die_cuda(cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice), "cudaMemcpy up");
    }
    return d;
}

static inline void *gt_alloc(size_t bytes)
{
    void *d = NULL;
    gt_die_cuda(cudaMalloc(&d, bytes + 16), "cudaMalloc");
    gt_die_cuda(cudaMemset(d, 0, bytes + 16), "cudaMemset");
    return d;
}

static inline void gt_down(float *h, const void *d, size_t n, enum dt_cuda_dtype t)
{
    gt_die_cuda(cudaDeviceSynchronize(), "a kernel before the copy back");
    if (t == DT_CUDA_BF16) {
        uint16_t *tmp = malloc(n * 2 + 2);
        gt_die_cuda(cudaMemcpy(tmp, d, n * 2, cudaMemcpyDeviceToHost), "cudaMemcpy down");
        for (size_t i = 0; i < n; i++)
            h[i] = gt_from_bf16(tmp[i]);
        free(tmp);
    } else if (t == DT_CUDA_F16) {
        _Float16 *tmp = malloc(n * 2 + 2);
        gt_die_cuda(cudaMemcpy(tmp, d, n * 2, cudaMemcpyDeviceToHost), "cudaMemcpy down");
        for (size_t i = 0; i < n; i++)
            h[i] = (float)tmp[i];
        free(tmp);
    } else {
        gt_die_cuda(cudaMemcpy(h, d, n * 4, cudaMemcpyDeviceToHost), "cudaMemcpy down");
    }
}

static inline float *gt_random(size_t n, float lo, float hi)
{
    float *h = malloc(n * sizeof *h + 4);
    for (size_t i = 0; i < n; i++)
        h[i] = gt_uniform(lo, hi);
    return h;
}

static inline const char *gt_tname(enum dt_cuda_dtype t)
{
    return t == DT_CUDA_BF16 ? "bf16" : t == DT_CUDA_F16 ? "fp16" : "fp32";
}

/* 0 when a CUDA device is there; otherwise prints the SKIP line. */
static inline int gt_need_gpu(const char *suite)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("ok - # SKIP %s: no CUDA device here\n0 passed, 0 failed\n", suite);
        return -1;
    }
    return 0;
}

#endif
