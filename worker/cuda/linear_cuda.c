/* linear_cuda.c - a Linear layer's forward and backward on the GPU (the MLP's
 * dt_cuda_linear_*, and GPT-2's dt_cuda_mm_* in both weight layouts with the
 * residual add fused): row-major math mapped onto cuBLASLt's column-major
 * GEMMs, with bias and activation in the epilogue, and an own kernel whenever
 * cuBLASLt cannot fuse.
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
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "worker/cuda/cuda_internal.h"
#include "worker/cuda/transformer_cuda.h"

static cudaDataType_t cuda_type(enum dt_cuda_dtype t)
{
    return t == DT_CUDA_BF16 ? CUDA_R_16BF : t == DT_CUDA_F16 ? CUDA_R_16F : CUDA_R_32F;
}

size_t dt_cuda_dtype_size(enum dt_cuda_dtype t) { return t == DT_CUDA_F32 ? 4 : 2; }

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
    int rc = dt_cuda__gemm_run(k, &g); /* the BIAS epilogue exists for every type we use */
    if (rc < 0 || act == DT_CUDA_ACT_NONE)
        return rc;
    return dt_cuda__launch_act_forward(k->stream, t, h, zdst, (size_t)B * out, act);
}

int dt_cuda_linear_forward(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, void *h, void *aux, const void *x,
                           const void *w, const void *b, int B, int in, int out, enum dt_cuda_act act)
{
    struct dt_gemm g = forward_gemm(t, h, x, w, b, B, in, out);
    switch (act) {
    case DT_CUDA_ACT_NONE:
        return dt_cuda__gemm_run(k, &g);
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
    int rc = dt_cuda__gemm_run(k, &g);
    if (rc != DT_EUNSUPPORTED)
        return rc;
    k->fallbacks++;
    if (act == DT_CUDA_ACT_RELU) {
        k->relu_mask_bad = true; /* backward then reads relu'(z) = [h > 0] from h */
        return forward_unfused(k, t, h, h, x, w, b, B, in, out, act);
    }
    return forward_unfused(k, t, h, aux, x, w, b, B, in, out, act);
}

/* The ways a backward op can run (enum dt_cuda_fusion without AUTO). */
enum { V_EPILOGUE, V_SEPARATE, V_OWN, V_COUNT };
enum { OP_WGRAD, OP_XGRAD };

struct bwd {
    int op;
    enum dt_cuda_dtype t;
    int B, in, out;
    bool accumulate;
    enum dt_cuda_act act;
    float *dw, *db;
    void *dzp;
    const void *dz, *x, *w, *aux;
};

static int run_wgrad(struct dt_cuda_ctx *k, const struct bwd *a, int v)
{
    if (v == V_OWN) {
        int rc =
            dt_cuda__launch_wgrad_narrow(k, a->t, a->dw, a->dz, a->x, a->B, a->in, a->out, a->accumulate);
        return rc < 0 || !a->db
                   ? rc
                   : dt_cuda__launch_bias_grad(k->stream, a->t, a->db, a->dz, a->B, a->out, a->accumulate);
    }
    struct dt_gemm g = {.ta = CUBLAS_OP_N, .tb = CUBLAS_OP_T, .m = a->in, .n = a->out, .k = a->B, .lda = a->in,
                        .ldb = a->out, .ldd = a->in, .ab_type = cuda_type(a->t), .d_type = CUDA_R_32F,
                        .epi = CUBLASLT_EPILOGUE_DEFAULT, .a = a->x, .b = a->dz, .d = a->dw,
                        .beta = a->accumulate ? 1.0f : 0.0f};
    /* BGRADB overwrites the bias gradient, so accumulation sums it by hand. */
    if (v == V_EPILOGUE && a->db && !a->accumulate) {
        g.epi = CUBLASLT_EPILOGUE_BGRADB;
        g.bias = a->db;
        return dt_cuda__gemm_run(k, &g);
    }
    int rc = dt_cuda__gemm_run(k, &g);
    if (rc < 0 || !a->db)
        return rc;
    return dt_cuda__launch_bias_grad(k->stream, a->t, a->db, a->dz, a->B, a->out, a->accumulate);
}

static int run_xgrad(struct dt_cuda_ctx *k, const struct bwd *a, int v)
{
    /* ReLU reads [h > 0] from this layer's input; the GELUs read z from aux. */
    const void *src = a->act == DT_CUDA_ACT_RELU ? a->x : a->aux;
    if (v == V_OWN)
        return dt_cuda__launch_xgrad_narrow(k->stream, a->t, a->dzp, a->dz, a->w, src, a->B, a->in, a->out,
                                            a->act);
    struct dt_gemm g = {.ta = CUBLAS_OP_N, .tb = CUBLAS_OP_N, .m = a->in, .n = a->B, .k = a->out, .lda = a->in,
                        .ldb = a->out, .ldd = a->in, .ab_type = cuda_type(a->t), .d_type = cuda_type(a->t),
                        .epi = CUBLASLT_EPILOGUE_DEFAULT, .a = a->w, .b = a->dz, .d = a->dzp, .beta = 0.0f};
    /* A dz whose rows are not 16-byte multiples (the 10 classes) sends
     * cuBLASLt to SIMT kernels, where the DRELU epilogue was seen to give
     * wrong values (H200, CUDA 13.0): the act' is then our own kernel. */
    bool aligned = (size_t)a->out * dt_cuda_dtype_size(a->t) % 16 == 0;
    if (v == V_EPILOGUE && aligned && a->act == DT_CUDA_ACT_RELU && !k->relu_mask_bad) {
        g.epi = CUBLASLT_EPILOGUE_DRELU;
        g.aux = (void *)a->aux;
        g.aux_ld = mask_ld(a->in);
        return dt_cuda__gemm_run(k, &g);
    }
    if (v == V_EPILOGUE && aligned && a->act == DT_CUDA_ACT_GELU_TANH) {
        g.epi = CUBLASLT_EPILOGUE_DGELU;
        g.aux = (void *)a->aux;
        g.aux_ld = a->in;
        return dt_cuda__gemm_run(k, &g);
    }
    int rc = dt_cuda__gemm_run(k, &g);
    if (rc < 0 || a->act == DT_CUDA_ACT_NONE)
        return rc;
    return dt_cuda__launch_act_backward(k->stream, a->t, a->dzp, src, (size_t)a->B * a->in, a->act);
}

static int run_variant(struct dt_cuda_ctx *k, const struct bwd *a, int v)
{
    return a->op == OP_WGRAD ? run_wgrad(k, a, v) : run_xgrad(k, a, v);
}

static struct dt_cuda_choice *find_choice(struct dt_cuda_ctx *k, const struct bwd *a)
{
    for (int i = 0; i < k->n_choices; i++) {
        struct dt_cuda_choice *c = &k->choice[i];
        if (c->kind == a->op && c->act == (int)a->act && c->t == (int)a->t && c->B == a->B && c->in == a->in &&
            c->out == a->out)
            return c;
    }
    return NULL;
}

/* Times each way (one warm run, then five) on the real operands; only when
 * the outputs are overwritten anyway and no graph is being captured. */
static int time_variants(struct dt_cuda_ctx *k, const struct bwd *a, int nv)
{
    cudaEvent_t e0, e1;
    if (cudaEventCreate(&e0) != cudaSuccess)
        return V_SEPARATE;
    cudaEventCreate(&e1);
    int best = V_SEPARATE;
    float best_ms = 1e30f;
    for (int v = 0; v < nv; v++) {
        int rc = run_variant(k, a, v);
        cudaEventRecord(e0, k->stream);
        for (int rep = 0; rep < 5 && rc == 0; rep++)
            rc = run_variant(k, a, v);
        cudaEventRecord(e1, k->stream);
        float ms = 0;
        if (rc == 0 && cudaEventSynchronize(e1) == cudaSuccess && cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess &&
            ms < best_ms) {
            best_ms = ms;
            best = v;
        }
        if (rc == DT_EUNSUPPORTED && v == V_EPILOGUE)
            k->fallbacks++;
        dt_error_clear();
    }
    cudaGetLastError();
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return best;
}

static int run_best(struct dt_cuda_ctx *k, const struct bwd *a)
{
    int nv = a->out <= 32 ? V_COUNT : V_OWN; /* own kernels exist for narrow layers only */
    if (k->fusion != DT_CUDA_FUSE_AUTO) {
        int v = (int)k->fusion - 1;
        v = v < nv ? v : V_SEPARATE;
        int rc = run_variant(k, a, v);
        if (rc != DT_EUNSUPPORTED || v != V_EPILOGUE)
            return rc;
        k->fallbacks++;
        return run_variant(k, a, V_SEPARATE);
    }
    struct dt_cuda_choice *c = find_choice(k, a);
    if (!c) {
        enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
        bool can_time = k->autotune && !a->accumulate && k->n_choices < DT_CUDA_CHOICES &&
                        cudaStreamIsCapturing(k->stream, &cap) == cudaSuccess && cap == cudaStreamCaptureStatusNone;
        if (!can_time) /* no tuning, accumulating or capturing: a safe way, not timed */
            return run_variant(k, a, nv == V_COUNT ? V_OWN : V_SEPARATE);
        c = &k->choice[k->n_choices++];
        *c = (struct dt_cuda_choice){.kind = a->op, .act = (int)a->act, .t = (int)a->t, .B = a->B, .in = a->in,
                                     .out = a->out, .variant = time_variants(k, a, nv)};
    }
    /* The epilogue cannot accumulate a bias gradient: then its GEMM runs plain. */
    return run_variant(k, a, c->variant == V_EPILOGUE && a->accumulate ? V_SEPARATE : c->variant);
}

int dt_cuda_linear_backward_w(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, float *dw, float *db, const void *dz,
                              const void *x, int B, int in, int out, bool accumulate)
{
    struct bwd a = {.op = OP_WGRAD, .t = t, .B = B, .in = in, .out = out, .accumulate = accumulate,
                    .act = DT_CUDA_ACT_NONE, .dw = dw, .db = db, .dz = dz, .x = x};
    return run_best(k, &a);
}

int dt_cuda_linear_backward_x(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, void *dzp, const void *dz,
                              const void *w, const void *aux_prev, const void *x, int B, int in, int out,
                              enum dt_cuda_act act_prev)
{
    struct bwd a = {.op = OP_XGRAD, .t = t, .B = B, .in = in, .out = out, .act = act_prev, .dzp = dzp, .dz = dz,
                    .w = w, .aux = aux_prev, .x = x};
    return run_best(k, &a);
}

/* ---- GPT-2's layouts (transformer_cuda.h) ----
 *
 * Row-major X[N,ic] is column-major X^T [ic,N] (ld ic).  A Conv1D weight
 * (IN_OUT) W[ic,oc] row-major is column-major W^T [oc,ic] (ld oc); a Linear
 * weight (OUT_IN) W[oc,ic] is column-major W^T [ic,oc] (ld ic).  So:
 *   forward    Y^T[oc,N]  = op(w) X^T      IN_OUT: op N, lda oc    OUT_IN: op T, lda ic
 *   input grad dX^T[ic,N] = op(w) dY^T     IN_OUT: op T, lda oc    OUT_IN: op N, lda ic
 *   weight grad IN_OUT: dW^T[oc,ic] = dY^T[oc,N] X[N,ic] (A = dy, B = x^T): the bias
 *                       gradient sums A over k (BGRADA, length m = oc)
 *               OUT_IN: dW^T[ic,oc] = X^T[ic,N] dY[N,oc] (A = x, B = dy^T): BGRADB (length n = oc)
 * The forward epilogue's bias runs over D's rows (oc); GELU's aux is [N,oc]
 * row-major = column-major [oc,N], ld oc, like D. */

static bool fused_ok(const struct dt_cuda_ctx *k)
{
    return k->fusion == DT_CUDA_FUSE_AUTO || k->fusion == DT_CUDA_FUSE_EPILOGUE;
}

static int check_shape(const char *fn, int N, int ic, int oc)
{
    if (N > 0 && ic > 0 && oc > 0)
        return 0;
    return dt_error_set(DT_EINVAL, "%s: shape %dx%d->%d must be positive", fn, N, ic, oc);
}

int dt_cuda_mm_forward(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, void *out, void *pre_act, const void *inp,
                       const void *w, enum dt_cuda_wlayout wl, const void *bias, const float *res_in, int N,
                       int ic, int oc, enum dt_cuda_act act)
{
    int rc = check_shape("dt_cuda_mm_forward", N, ic, oc);
    if (rc < 0)
        return rc;
    bool gelu = act == DT_CUDA_ACT_GELU_TANH;
    if ((act != DT_CUDA_ACT_NONE && !gelu) || (gelu && (res_in || !pre_act)) || (res_in && (void *)res_in == out))
        return dt_error_set(DT_EINVAL, "dt_cuda_mm_forward: activation %d needs pre_act and no residual, and out "
                                       "may not be res_in",
                            (int)act);
    bool io = wl == DT_CUDA_W_IN_OUT;
    struct dt_gemm g = {.ta = io ? CUBLAS_OP_N : CUBLAS_OP_T, .tb = CUBLAS_OP_N, .m = oc, .n = N, .k = ic,
                        .lda = io ? oc : ic, .ldb = ic, .ldd = oc, .ab_type = cuda_type(t), .d_type = cuda_type(t),
                        .epi = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, .a = w, .b = inp,
                        .d = out, .beta = 0.0f, .bias = bias};
    if (res_in) { /* D (fp32) = A B + bias + C, C = the residual stream */
        g.d_type = CUDA_R_32F;
        g.c = res_in;
        g.beta = 1.0f;
        return dt_cuda__gemm_run(k, &g);
    }
    if (!gelu)
        return dt_cuda__gemm_run(k, &g);
    if (fused_ok(k)) {
        struct dt_gemm f = g;
        f.epi = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
        f.aux = pre_act;
        f.aux_ld = oc;
        if ((rc = dt_cuda__gemm_run(k, &f)) != DT_EUNSUPPORTED)
            return rc;
        dt_error_clear();
        k->fallbacks++;
    }
    g.d = pre_act; /* GEMM (+ bias) into pre_act, then out = gelu(pre_act) by our kernel */
    if ((rc = dt_cuda__gemm_run(k, &g)) < 0)
        return rc;
    return dt_cuda__launch_act_forward(k->stream, t, out, pre_act, (size_t)N * oc, act);
}

/* The backward GEMMs' two ways each: the fused epilogue (DGELU for the input
 * gradient, BGRADA/B writing db for the weight gradient), or the plain GEMM
 * and our kernel (gelu' multiplied in; the row-sliced bias gradient).  AUTO
 * runs both once per shape, keeps the epilogue only when its results match
 * the other way's (gemm_cuda.c saw a fused epilogue give wrong values with
 * some algorithms) and it is faster (it can be a slow second pass), as
 * run_best does for the MLP; untimed (autotune off, accumulating, inside a
 * graph capture) it is the plain GEMM and our kernel. */
enum { OP_MM_WGRAD = 2, OP_MM_XGRAD = 3 }; /* choice kinds beside OP_WGRAD and OP_XGRAD */

struct mm_bwd {
    int op;
    struct dt_gemm g; /* the plain GEMM */
    enum dt_cuda_dtype t;
    bool io, accumulate;
    float *db;           /* OP_MM_WGRAD: the bias gradient (may be NULL) */
    const void *dout;    /* OP_MM_WGRAD: its rows */
    const void *pre_act; /* OP_MM_XGRAD: GELU's input */
    int N, ic, oc;
};

static int mm_bwd_run(struct dt_cuda_ctx *k, const struct mm_bwd *a, int v)
{
    struct dt_gemm f = a->g;
    if (v == V_EPILOGUE && a->op == OP_MM_WGRAD) {
        f.epi = a->io ? CUBLASLT_EPILOGUE_BGRADA : CUBLASLT_EPILOGUE_BGRADB;
        f.bias = a->db;
        return dt_cuda__gemm_run(k, &f);
    }
    if (v == V_EPILOGUE) {
        f.epi = CUBLASLT_EPILOGUE_DGELU;
        f.aux = (void *)a->pre_act;
        f.aux_ld = a->ic;
        return dt_cuda__gemm_run(k, &f);
    }
    int rc = dt_cuda__gemm_run(k, &a->g);
    if (rc < 0)
        return rc;
    if (a->op == OP_MM_XGRAD)
        return dt_cuda__launch_act_backward(k->stream, a->t, a->g.d, a->pre_act, (size_t)a->N * a->ic,
                                            DT_CUDA_ACT_GELU_TANH);
    return a->db ? dt_cuda__launch_bias_grad_rows(k, a->t, a->db, a->dout, a->N, a->oc, a->accumulate) : 0;
}

/* What a way writes, as floats: dW then db (fp32), or dinp (in t). */
static size_t mm_bwd_count(const struct mm_bwd *a)
{
    return a->op == OP_MM_WGRAD ? (size_t)a->ic * a->oc + (size_t)a->oc : (size_t)a->N * a->ic;
}

static bool mm_bwd_fetch(const struct mm_bwd *a, float *host)
{
    if (a->op == OP_MM_WGRAD) {
        size_t nw = (size_t)a->ic * a->oc;
        return cudaMemcpy(host, a->g.d, nw * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess &&
               cudaMemcpy(host + nw, a->db, (size_t)a->oc * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess;
    }
    size_t n = mm_bwd_count(a);
    if (a->t == DT_CUDA_F32)
        return cudaMemcpy(host, a->g.d, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess;
    if (a->t != DT_CUDA_BF16)
        return false; /* fp16 is not checked: the epilogue is not used for it */
    uint16_t *h16 = (uint16_t *)(host + n / 2); /* the upper half, read before it is overwritten */
    if (cudaMemcpy(h16, a->g.d, n * 2, cudaMemcpyDeviceToHost) != cudaSuccess)
        return false;
    for (size_t i = 0; i < n; i++) { /* bf16 is an fp32's upper half */
        uint32_t u = (uint32_t)h16[i] << 16;
        memcpy(&host[i], &u, sizeof u);
    }
    return true;
}

/* Milliseconds of five runs after a warm one, the results fetched into host
 * (when not NULL); negative when the way fails. */
static float mm_bwd_time(struct dt_cuda_ctx *k, const struct mm_bwd *a, int v, cudaEvent_t e0, cudaEvent_t e1,
                         float *host)
{
    int rc = mm_bwd_run(k, a, v);
    cudaEventRecord(e0, k->stream);
    for (int rep = 0; rep < 5 && rc == 0; rep++)
        rc = mm_bwd_run(k, a, v);
    cudaEventRecord(e1, k->stream);
    float ms = -1.0f;
    if (rc < 0 || cudaEventSynchronize(e1) != cudaSuccess || cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess ||
        (host && !mm_bwd_fetch(a, host)))
        ms = -1.0f;
    dt_error_clear();
    return ms;
}

/* Whether got is within tol of want's largest value (another algorithm or
 * order rounds differently; a wrong epilogue differs by far more). */
static bool mm_close(const float *got, const float *want, size_t n, float tol)
{
    float big = 0.0f, diff = 0.0f;
    for (size_t i = 0; i < n; i++) {
        big = fmaxf(big, fabsf(want[i]));
        diff = fmaxf(diff, fabsf(got[i] - want[i]));
    }
    return diff <= tol * big;
}

static bool mm_bwd_same(const struct mm_bwd *a, const float *epi, const float *sep)
{
    size_t n = mm_bwd_count(a);
    if (a->op == OP_MM_XGRAD) /* bf16: the plain way rounds the GEMM's output before gelu' */
        return mm_close(epi, sep, n, a->t == DT_CUDA_F32 ? 1e-4f : 2e-2f);
    size_t nw = n - (size_t)a->oc;
    return mm_close(epi, sep, nw, 1e-4f) && mm_close(epi + nw, sep + nw, (size_t)a->oc, 1e-4f);
}

static int mm_bwd_way(struct dt_cuda_ctx *k, const struct mm_bwd *a)
{
    if (a->accumulate || !fused_ok(k))
        return V_SEPARATE;
    if (k->fusion == DT_CUDA_FUSE_EPILOGUE)
        return V_EPILOGUE;
    for (int i = 0; i < k->n_choices; i++) {
        const struct dt_cuda_choice *c = &k->choice[i];
        if (c->kind == a->op && c->act == (int)a->io && c->t == (int)a->t && c->B == a->N && c->in == a->ic &&
            c->out == a->oc)
            return c->variant;
    }
    enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    cudaEvent_t e0, e1;
    if (!k->autotune || k->n_choices >= DT_CUDA_CHOICES || cudaStreamIsCapturing(k->stream, &cap) != cudaSuccess ||
        cap != cudaStreamCaptureStatusNone || cudaEventCreate(&e0) != cudaSuccess)
        return V_SEPARATE;
    if (cudaEventCreate(&e1) != cudaSuccess) {
        cudaEventDestroy(e0);
        return V_SEPARATE;
    }
    size_t n = mm_bwd_count(a);
    float *host = malloc(2 * n * sizeof(float));
    float epi = host ? mm_bwd_time(k, a, V_EPILOGUE, e0, e1, host) : -1.0f;
    float sep = mm_bwd_time(k, a, V_SEPARATE, e0, e1, host ? host + n : NULL);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaGetLastError();
    if (epi >= 0 && !(sep >= 0 && mm_bwd_same(a, host, host + n)))
        epi = -1.0f; /* wrong, or nothing to check it against */
    free(host);
    if (epi < 0)
        k->fallbacks++;
    int v = epi >= 0 && (sep < 0 || epi < sep) ? V_EPILOGUE : V_SEPARATE;
    k->choice[k->n_choices++] = (struct dt_cuda_choice){
        .kind = a->op, .act = (int)a->io, .t = (int)a->t, .B = a->N, .in = a->ic, .out = a->oc, .variant = v};
    return v;
}

/* The chosen way; a refused epilogue (DT_EUNSUPPORTED) falls back to the other. */
static int mm_bwd(struct dt_cuda_ctx *k, const struct mm_bwd *a)
{
    int v = mm_bwd_way(k, a), rc = mm_bwd_run(k, a, v);
    if (rc != DT_EUNSUPPORTED || v != V_EPILOGUE)
        return rc;
    dt_error_clear();
    k->fallbacks++;
    return mm_bwd_run(k, a, V_SEPARATE);
}

int dt_cuda_mm_backward_x(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, void *dinp, const void *dout,
                          const void *w, enum dt_cuda_wlayout wl, const void *pre_act, int N, int ic, int oc)
{
    int rc = check_shape("dt_cuda_mm_backward_x", N, ic, oc);
    if (rc < 0)
        return rc;
    bool io = wl == DT_CUDA_W_IN_OUT;
    struct mm_bwd a = {
        .op = OP_MM_XGRAD,
        .g = {.ta = io ? CUBLAS_OP_T : CUBLAS_OP_N, .tb = CUBLAS_OP_N, .m = ic, .n = N, .k = oc,
              .lda = io ? oc : ic, .ldb = oc, .ldd = ic, .ab_type = cuda_type(t), .d_type = cuda_type(t),
              .epi = CUBLASLT_EPILOGUE_DEFAULT, .a = w, .b = dout, .d = dinp, .beta = 0.0f},
        .t = t, .io = io, .pre_act = pre_act, .N = N, .ic = ic, .oc = oc};
    if (!pre_act)
        return dt_cuda__gemm_run(k, &a.g);
    /* As run_xgrad: rows that are not 16-byte multiples send cuBLASLt to SIMT
     * kernels, whose act' epilogues were seen wrong; fp16 is not checked. */
    size_t es = dt_cuda_dtype_size(t);
    if ((size_t)oc * es % 16 != 0 || (size_t)ic * es % 16 != 0 || t == DT_CUDA_F16)
        return mm_bwd_run(k, &a, V_SEPARATE);
    return mm_bwd(k, &a);
}

int dt_cuda_mm_backward_w(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, float *dw, float *db, const void *dout,
                          const void *inp, enum dt_cuda_wlayout wl, int N, int ic, int oc, bool accumulate)
{
    int rc = check_shape("dt_cuda_mm_backward_w", N, ic, oc);
    if (rc < 0)
        return rc;
    bool io = wl == DT_CUDA_W_IN_OUT;
    struct mm_bwd a = {
        .op = OP_MM_WGRAD,
        .g = {.ta = CUBLAS_OP_N, .tb = CUBLAS_OP_T, .m = io ? oc : ic, .n = io ? ic : oc, .k = N,
              .lda = io ? oc : ic, .ldb = io ? ic : oc, .ldd = io ? oc : ic, .ab_type = cuda_type(t),
              .d_type = CUDA_R_32F, .epi = CUBLASLT_EPILOGUE_DEFAULT, .a = io ? dout : inp, .b = io ? inp : dout,
              .d = dw, .beta = accumulate ? 1.0f : 0.0f},
        .t = t, .io = io, .accumulate = accumulate, .db = db, .dout = dout, .N = N, .ic = ic, .oc = oc};
    if (!db) /* nothing to fuse */
        return dt_cuda__gemm_run(k, &a.g);
    return mm_bwd(k, &a);
}
