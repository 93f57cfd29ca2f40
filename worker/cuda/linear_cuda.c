/* linear_cuda.c - a Linear layer's forward and backward on the GPU: row-major
 * math mapped onto cuBLASLt's column-major GEMMs, with bias and activation in
 * the epilogue, and an own kernel whenever cuBLASLt cannot fuse.
 *
 * Row-major X[B,in] is column-major X^T with leading dimension in, so:
 *   forward     Z^T[out,B]  = W[out,in] (A = W^T col-major, op T) * X^T[in,B]
 *               epilogue RELU_AUX_BIAS / GELU_AUX_BIAS / BIAS: bias over rows (out)
 *   weight grad dW^T[in,out] = X^T[in,B] * dZ[B,out] (B = dZ^T col-major, op T)
 *               epilogue BGRADB: the bias gradient is the sum over op(B)'s rows
 *               (the batch), a vector of length out = sum_rows dz
 *   input grad  dX^T[in,B]  = W^T[in,out] * dZ^T[out,B]
 *               epilogue DRELU / DGELU with the previous layer's aux: the
 *               result is multiplied by act'(z_prev), i.e. it is dz_prev.
 * Weight gradients go out in fp32 whatever the input type (D type 32F with
 * bf16 A/B), so they land straight in the fp32 gradient arena.
 *
 * Not for the own kernels (act_cuda.cu) or planning GEMMs (gemm_cuda.c).
 */
#include "comm/error.h"
#include "worker/cuda/cuda_internal.h"

static cudaDataType_t cuda_type(enum dt_cuda_dtype t) { return t == DT_CUDA_BF16 ? CUDA_R_16BF : CUDA_R_32F; }

size_t dt_cuda_dtype_size(enum dt_cuda_dtype t) { return t == DT_CUDA_BF16 ? 2 : 4; }

static int64_t mask_ld(int rows) { return ((int64_t)rows + 127) / 128 * 128; }

size_t dt_cuda_aux_bytes(enum dt_cuda_dtype t, enum dt_cuda_act act, int B, int out)
{
    switch (act) {
    case DT_CUDA_ACT_RELU: return (size_t)(mask_ld(out) / 8) * (size_t)B;
    case DT_CUDA_ACT_GELU:
    case DT_CUDA_ACT_GELU_TANH: return (size_t)B * (size_t)out * dt_cuda_dtype_size(t);
    default: return 0;
    }
}

static struct dt_gemm forward_gemm(enum dt_cuda_dtype t, void *d, const void *x, const void *w, const void *b,
                                   int B, int in, int out)
{
    struct dt_gemm g = {.ta = CUBLAS_OP_T, .tb = CUBLAS_OP_N, .m = out, .n = B, .k = in, .lda = in, .ldb = in,
                        .ldd = out, .ab_type = cuda_type(t), .d_type = cuda_type(t), .epi = CUBLASLT_EPILOGUE_BIAS,
                        .a = w, .b = x, .d = d, .beta = 0.0f, .bias = b};
    return g;
}

/* Unfused forward: GEMM + bias into `zdst`, then h = act(z) by an own kernel. */
static int forward_unfused(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, void *h, void *zdst, const void *x,
                           const void *w, const void *b, int B, int in, int out, enum dt_cuda_act act)
{
    struct dt_gemm g = forward_gemm(t, zdst, x, w, b, B, in, out);
    int rc = dt_gemm_run(k, &g); /* the BIAS epilogue exists for every type we use */
    if (rc < 0 || act == DT_CUDA_ACT_NONE)
        return rc;
    return dt_cuda_launch_act_forward(k->stream, t, h, zdst, (size_t)B * out, act);
}

int dt_cuda_linear_forward(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, void *h, void *aux, const void *x,
                           const void *w, const void *b, int B, int in, int out, enum dt_cuda_act act)
{
    struct dt_gemm g = forward_gemm(t, h, x, w, b, B, in, out);
    switch (act) {
    case DT_CUDA_ACT_NONE: return dt_gemm_run(k, &g);
    case DT_CUDA_ACT_GELU: /* exact erf GELU: z into aux by the GEMM, h by our kernel */
        return forward_unfused(k, t, h, aux, x, w, b, B, in, out, act);
    case DT_CUDA_ACT_RELU:
        g.epi = CUBLASLT_EPILOGUE_RELU_AUX_BIAS;
        g.aux = aux;
        g.aux_ld = mask_ld(out);
        break;
    case DT_CUDA_ACT_GELU_TANH:
        g.epi = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
        g.aux = aux;
        g.aux_ld = out;
        break;
    }
    int rc = dt_gemm_run(k, &g);
    if (rc != DT_EUNSUPPORTED)
        return rc;
    k->fallbacks++;
    if (act == DT_CUDA_ACT_RELU) {
        k->relu_mask_bad = true; /* backward then reads relu'(z) = [h > 0] from h */
        return forward_unfused(k, t, h, h, x, w, b, B, in, out, act);
    }
    return forward_unfused(k, t, h, aux, x, w, b, B, in, out, act);
}

int dt_cuda_linear_backward_w(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, float *dw, float *db, const void *dz,
                              const void *x, int B, int in, int out, bool accumulate)
{
    struct dt_gemm g = {.ta = CUBLAS_OP_N, .tb = CUBLAS_OP_T, .m = in, .n = out, .k = B, .lda = in, .ldb = out,
                        .ldd = in, .ab_type = cuda_type(t), .d_type = CUDA_R_32F, .epi = CUBLASLT_EPILOGUE_DEFAULT,
                        .a = x, .b = dz, .d = dw, .beta = accumulate ? 1.0f : 0.0f};
    /* BGRADB overwrites the bias gradient, so accumulation sums it by hand. */
    if (db && !accumulate) {
        g.epi = CUBLASLT_EPILOGUE_BGRADB;
        g.bias = db;
        int rc = dt_gemm_run(k, &g);
        if (rc != DT_EUNSUPPORTED)
            return rc;
        k->fallbacks++;
        g.epi = CUBLASLT_EPILOGUE_DEFAULT;
        g.bias = NULL;
    }
    int rc = dt_gemm_run(k, &g);
    if (rc < 0 || !db)
        return rc;
    return dt_cuda_launch_bias_grad(k->stream, t, db, dz, B, out, accumulate);
}

int dt_cuda_linear_backward_x(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, void *dzp, const void *dz,
                              const void *w, const void *aux_prev, const void *x, int B, int in, int out,
                              enum dt_cuda_act act_prev)
{
    struct dt_gemm g = {.ta = CUBLAS_OP_N, .tb = CUBLAS_OP_N, .m = in, .n = B, .k = out, .lda = in, .ldb = out,
                        .ldd = in, .ab_type = cuda_type(t), .d_type = cuda_type(t), .epi = CUBLASLT_EPILOGUE_DEFAULT,
                        .a = w, .b = dz, .d = dzp, .beta = 0.0f};
    bool fused = false;
    if (act_prev == DT_CUDA_ACT_RELU && !k->relu_mask_bad) {
        g.epi = CUBLASLT_EPILOGUE_DRELU;
        g.aux = (void *)aux_prev;
        g.aux_ld = mask_ld(in);
        fused = true;
    } else if (act_prev == DT_CUDA_ACT_GELU_TANH) {
        g.epi = CUBLASLT_EPILOGUE_DGELU;
        g.aux = (void *)aux_prev;
        g.aux_ld = in;
        fused = true;
    }
    int rc = dt_gemm_run(k, &g);
    if (rc == 0 && (fused || act_prev == DT_CUDA_ACT_NONE))
        return 0;
    if (rc < 0 && !(rc == DT_EUNSUPPORTED && fused))
        return rc;
    if (fused) {
        k->fallbacks++;
        g.epi = CUBLASLT_EPILOGUE_DEFAULT;
        g.aux = NULL;
        if ((rc = dt_gemm_run(k, &g)) < 0)
            return rc;
    }
    /* ReLU reads [h > 0] from this layer's input; GELU reads z from aux. */
    const void *src = act_prev == DT_CUDA_ACT_RELU ? x : aux_prev;
    return dt_cuda_launch_act_backward(k->stream, t, dzp, src, (size_t)B * in, act_prev);
}
