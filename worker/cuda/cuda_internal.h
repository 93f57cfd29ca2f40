/* cuda_internal.h - the CUDA context and the launchers shared by worker/cuda/
 * files only: the cuBLASLt plan cache (gemm_cuda.c) and the own kernels
 * (*.cu, C-callable launchers).  Not for the trainer: see kernels_cuda.h.
 */
#ifndef DT_CUDA_INTERNAL_H
#define DT_CUDA_INTERNAL_H

#include <cublasLt.h>

#include "worker/cuda/kernels_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DT_CUDA_PLANS 64
#define DT_CUDA_WORKSPACE (32u << 20)
#define DT_CUDA_MAX_BLOCKS 256
#define DT_GEMM_CANDIDATES 16 /* heuristic answers timed per plan */
#define DT_CUDA_SPLIT_FLOATS (1u << 20) /* partials of the narrow weight gradient */
#define DT_CUDA_CHOICES 64 /* grid of the fixed-order reductions */

/* One GEMM in cuBLASLt's column-major terms: D[m,n] = op(A) op(B) (+ beta C),
 * C = c (same type and layout as D: the fused residual add) or, when c is
 * NULL, D itself (accumulation). */
struct dt_gemm {
    cublasOperation_t ta, tb;
    int m, n, k, lda, ldb, ldd;
    cudaDataType_t ab_type, d_type;
    cublasLtEpilogue_t epi;
    const void *a, *b;
    void *d;
    const void *c;
    float beta;
    const void *bias;   /* bias (forward) or bias gradient output (BGRAD*) */
    void *aux;          /* ReLU mask / GELU input */
    int64_t aux_ld;
};

struct dt_gemm_plan {
    bool used;
    uint64_t key[5];
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
};

struct dt_cuda_ctx {
    int device;
    int sms;             /* the device's multiprocessors: grids of one wave */
    cudaStream_t stream;
    bool own_stream;
    cublasLtHandle_t lt;
    void *workspace;
    int fallbacks;
    bool autotune;       /* time the heuristic's candidates per plan */
    bool tf32;           /* fp32-input GEMMs compute in TF32 (dt_cuda_set_tf32) */
    int tuned;           /* plans chosen by timing */
    bool relu_mask_bad;  /* a forward could not write the ReLU mask */
    /* Fixed-order reductions (loss, hits, sum of squares): one partial per
     * block, then the last block to finish sums them; `ticket` counts the
     * finished blocks and is reset by the last one, so replays need no reset. */
    float *split;        /* DT_CUDA_SPLIT_FLOATS partial sums (narrow layers) */
    size_t split_floats;
    enum dt_cuda_fusion fusion;
    /* Which way each backward op of a shape runs, found by timing once. */
    struct dt_cuda_choice {
        int kind, act, t, B, in, out, variant;
    } choice[DT_CUDA_CHOICES];
    int n_choices;
    float *part_f;
    int *part_i;
    unsigned *ticket;
    struct dt_gemm_plan plans[DT_CUDA_PLANS];
    void *cudnn;         /* attention_cudnn.cpp's handle, graphs and workspace; NULL until used */
};

/* Runs g through a cached plan; DT_EUNSUPPORTED when cuBLASLt has no
 * algorithm for that epilogue here (the caller then falls back). */
int dt_cuda__gemm_run(struct dt_cuda_ctx *k, const struct dt_gemm *g);

/* attention_cuda.cu's paths, as DTRAIN_CUDA_ATTN names them: the general one
 * (simple), the tensor-core one (fast, the default) and the tensor-core one
 * with an atomic dq from 64-key tiles (atomic) or 128-key tiles (wide);
 * cuDNN's fused attention, deterministic (cudnn) or not (cudnn-atomic);
 * auto: cudnn where cuDNN loads and takes the shape, else fast.
 * force_path makes one run whatever the environment says (ENV: back to the
 * environment's choice), so the test compares them in one process; returns
 * the previous setting. */
enum {
    DT_CUDA__ATTN_ENV,
    DT_CUDA__ATTN_SIMPLE,
    DT_CUDA__ATTN_FAST,
    DT_CUDA__ATTN_ATOMIC,
    DT_CUDA__ATTN_WIDE,
    DT_CUDA__ATTN_CUDNN,
    DT_CUDA__ATTN_CUDNN_ATOMIC,
    DT_CUDA__ATTN_AUTO
};
int dt_cuda__attention_force_path(int path);
/* attention_mma_cuda.cu: the tensor-core path (bf16, hd 64) behind
 * attention_cuda.cu's dispatch, which checks shapes and alignment first.
 * backward: D (rowsum dO o) already in D; dq by query tiles (deterministic),
 * or by fp32 atomics from 64- or 128-key tiles into dq32, [B,H,T,64] fp32
 * scratch (else unused). */
enum { DT_CUDA__DQ_TILES, DT_CUDA__DQ_ATOMIC, DT_CUDA__DQ_ATOMIC_WIDE };
int dt_cuda__attention_mma_forward(cudaStream_t st, void *out, float *lse, const void *qkv, int B, int T, int C,
                                   int H, float scale);
int dt_cuda__attention_mma_backward(cudaStream_t st, int dq_way, void *dqkv, const void *dout, const void *qkv,
                                    const float *lse, const float *D, float *dq32, int B, int T, int C, int H,
                                    float scale);

/* attention_cudnn.cpp: cuDNN's fused attention (bf16 or fp16, head size a
 * multiple of 8 up to 128, 16-byte aligned buffers: attention_cuda.cu checks);
 * DT_EUNSUPPORTED with the reason when cuDNN is not built in or not loadable.
 * The first call of a shape builds its plan (not inside a capture).  The
 * backward's workspace is the caller's scratch when it is large enough. */
int dt_cuda__attention_cudnn_forward(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, void *out, float *lse,
                                     const void *qkv, int B, int T, int C, int H, float scale);
int dt_cuda__attention_cudnn_backward(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, bool atomic, void *dqkv,
                                      const void *dout, const void *qkv, const void *out, const float *lse, int B,
                                      int T, int C, int H, float scale, void *scratch, size_t scratch_bytes);
void dt_cuda__cudnn_release(struct dt_cuda_ctx *k);
/* Loads cuDNN and checks that it takes the forward and backward graphs of
 * this shape (with and without lse, deterministic and atomic dq) for compute
 * capability sm (90: Hopper), with no GPU needed: the graphs' description
 * against the installed cuDNN, as far as it can be checked without building
 * a plan. */
int dt_cuda__attention_cudnn_validate(int sm, enum dt_cuda_dtype t, int B, int T, int C, int H);

/* classifier_cuda.cu's kernels (dt_cuda_xent_rows): auto (two passes over
 * the row), two-pass, or through shared memory where two rows fit (smem; else
 * two-pass); force_kernel makes one run whatever DTRAIN_CUDA_XENT says, for
 * the tests; returns the previous. */
enum { DT_CUDA__XENT_AUTO, DT_CUDA__XENT_TWO_PASS, DT_CUDA__XENT_SMEM };
int dt_cuda__xent_force_kernel(int way);

/* Own kernels (act_cuda.cu); all enqueue on `s`. */
int dt_cuda__launch_act_forward(cudaStream_t s, enum dt_cuda_dtype t, void *h, const void *z, size_t n,
                                enum dt_cuda_act act);
int dt_cuda__launch_act_backward(cudaStream_t s, enum dt_cuda_dtype t, void *dz, const void *z_or_h, size_t n,
                                 enum dt_cuda_act act);
/* Layers with at most 32 outputs (act_cuda.cu); see there. */
int dt_cuda__launch_wgrad_narrow(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, float *dw, const void *dz,
                                 const void *x, int B, int in, int out, bool accumulate);
int dt_cuda__launch_xgrad_narrow(cudaStream_t s, enum dt_cuda_dtype t, void *dzp, const void *dz,
                                 const void *w, const void *src, int B, int in, int out,
                                 enum dt_cuda_act act);
/* db[n] (+)= sum over B rows of dz[B,n] (fp32 out, fixed order). */
int dt_cuda__launch_bias_grad(cudaStream_t s, enum dt_cuda_dtype t, float *db, const void *dz, int B, int n,
                              bool accumulate);

/* The same over GPT-2's many rows, the rows cut in slices whose partials go
 * to k->split and are added in slice order (transformer_cuda.cu). */
int dt_cuda__launch_bias_grad_rows(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, float *db, const void *dz, int N,
                                   int n, bool accumulate);

#ifdef __cplusplus
}
#endif

#endif
