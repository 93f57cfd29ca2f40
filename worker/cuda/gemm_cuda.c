/* gemm_cuda.c - the CUDA context and cuBLASLt GEMMs through a plan cache.
 *
 * A cuBLASLt matmul needs a descriptor, three layouts and an algorithm from
 * the heuristic; building them is host work (and allocation), so each
 * distinct GEMM (shape, types, epilogue, compute type, pointer alignment) is
 * planned once and kept: a steady-state step only sets the pointers and
 * launches.  The heuristic is told the real alignment of A, B, C and D,
 * because offsets into a flat arena are not always 16-byte aligned and an
 * algorithm that assumes more than it gets reads the wrong bytes.  C is D
 * (accumulation) or, for GPT-2's fused residual add, another buffer.
 *
 * Not for the layer math (linear_cuda.c) or own kernels (*.cu).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "worker/cuda/cublaslt_dl.h"
#include "worker/cuda/cuda_internal.h"

int dt_cuda_err(cudaError_t e, const char *call)
{
    return dt_error_set(DT_EIO, "cuda: %s failed: %s (%s)", call, cudaGetErrorString(e), cudaGetErrorName(e));
}

int dt_cuda_stream_after(cudaStream_t waiter, cudaStream_t producer, cudaEvent_t ev, const char *what)
{
    cudaError_t e = cudaEventRecord(ev, producer);
    if (e == cudaSuccess)
        e = cudaStreamWaitEvent(waiter, ev, 0);
    return e == cudaSuccess ? 0 : dt_cuda_err(e, what);
}

int dt_cuda_alloc(void **p, size_t bytes, const char *what)
{
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 16);
    if (e == cudaSuccess)
        return 0;
    *p = NULL;
    return dt_error_set(DT_ENOMEM, "cuda: cudaMalloc of %zu bytes for %s failed: %s", bytes, what,
                        cudaGetErrorString(e));
}

static int cublas_err(cublasStatus_t s, const char *call)
{
    return dt_error_set(s == CUBLAS_STATUS_NOT_SUPPORTED ? DT_EUNSUPPORTED : DT_EIO, "cublasLt: %s failed: %s (%d)",
                        call, cublasLtGetStatusString(s), (int)s);
}

int dt_cuda_ctx_create(int device, cudaStream_t stream, struct dt_cuda_ctx **out)
{
    *out = NULL;
    struct dt_cuda_ctx *k = calloc(1, sizeof *k);
    if (!k)
        return dt_error_set(DT_ENOMEM, "cuda: out of memory for the kernel context");
    k->device = device;
    k->autotune = true;
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess) {
        free(k);
        return dt_cuda_err(e, "cudaSetDevice");
    }
    if ((e = cudaDeviceGetAttribute(&k->sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess) {
        free(k);
        return dt_cuda_err(e, "cudaDeviceGetAttribute (multiprocessor count)");
    }
    k->stream = stream;
    if (!stream) {
        if ((e = cudaStreamCreateWithFlags(&k->stream, cudaStreamNonBlocking)) != cudaSuccess) {
            free(k);
            return dt_cuda_err(e, "cudaStreamCreateWithFlags (compute stream)");
        }
        k->own_stream = true;
    }
    int rc = dt_cuda__cublaslt_load();
    if (rc) {
        if (k->own_stream)
            cudaStreamDestroy(k->stream);
        free(k);
        return rc;
    }
    cublasStatus_t s = cublasLtCreate(&k->lt);
    if (s != CUBLAS_STATUS_SUCCESS)
        rc = cublas_err(s, "cublasLtCreate");
    else if ((e = cudaMalloc(&k->workspace, DT_CUDA_WORKSPACE)) != cudaSuccess)
        rc = dt_cuda_err(e, "cudaMalloc (cuBLASLt workspace)");
    else if ((e = cudaMalloc((void **)&k->part_f, DT_CUDA_MAX_BLOCKS * (sizeof(float) + sizeof(int)) + 64)) !=
             cudaSuccess)
        rc = dt_cuda_err(e, "cudaMalloc (reduction partials)");
    else if ((e = cudaMalloc((void **)&k->split, DT_CUDA_SPLIT_FLOATS * sizeof(float))) != cudaSuccess)
        rc = dt_cuda_err(e, "cudaMalloc (narrow-layer partials)");
    else {
        k->split_floats = DT_CUDA_SPLIT_FLOATS;
        k->part_i = (int *)(k->part_f + DT_CUDA_MAX_BLOCKS);
        k->ticket = (unsigned *)(k->part_i + DT_CUDA_MAX_BLOCKS);
        if ((e = cudaMemset(k->ticket, 0, sizeof *k->ticket)) != cudaSuccess)
            rc = dt_cuda_err(e, "cudaMemset (reduction ticket)");
    }
    if (rc < 0) {
        dt_cuda_ctx_destroy(k);
        return rc;
    }
    *out = k;
    return 0;
}

static void plans_release(struct dt_cuda_ctx *k);

void dt_cuda_ctx_destroy(struct dt_cuda_ctx *k)
{
    if (!k)
        return;
    cudaSetDevice(k->device);
    if (k->stream)
        cudaStreamSynchronize(k->stream);
    plans_release(k);
    dt_cuda__cudnn_release(k);
    if (k->lt)
        cublasLtDestroy(k->lt);
    if (k->workspace)
        cudaFree(k->workspace);
    if (k->part_f)
        cudaFree(k->part_f);
    if (k->split)
        cudaFree(k->split);
    if (k->own_stream)
        cudaStreamDestroy(k->stream);
    free(k);
}

cudaStream_t dt_cuda_stream(const struct dt_cuda_ctx *k) { return k->stream; }
void dt_cuda_set_autotune(struct dt_cuda_ctx *k, bool on) { k->autotune = on; }
void dt_cuda_set_fusion(struct dt_cuda_ctx *k, enum dt_cuda_fusion f)
{
    k->fusion = f;
    k->n_choices = 0;
}
void dt_cuda_set_tf32(struct dt_cuda_ctx *k, bool on) { k->tf32 = on; }
int dt_cuda_fallbacks(const struct dt_cuda_ctx *k) { return k->fallbacks; }

int dt_cuda_sync(struct dt_cuda_ctx *k)
{
    cudaError_t e = cudaStreamSynchronize(k->stream);
    if (e == cudaSuccess)
        e = cudaGetLastError();
    return e == cudaSuccess ? 0 : dt_cuda_err(e, "a kernel on the compute stream (seen at cudaStreamSynchronize)");
}

static unsigned align_of(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    unsigned al = 256;
    while (al > 1 && (a & (al - 1)))
        al >>= 1;
    return al;
}

/* TF32 changes only GEMMs that read fp32 (torch's allow_tf32 likewise). */
static cublasComputeType_t compute_type(const struct dt_cuda_ctx *k, const struct dt_gemm *g)
{
    return k->tf32 && g->ab_type == CUDA_R_32F ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

/* Everything a plan depends on: shape, types, epilogue, whether C is read and
 * from where (its alignment), the compute type. */
static void plan_key(const struct dt_cuda_ctx *k, const struct dt_gemm *g, uint64_t key[5])
{
    key[0] = (uint64_t)g->m | (uint64_t)g->n << 32;
    key[1] = (uint64_t)g->k | (uint64_t)g->lda << 32;
    key[2] = (uint64_t)g->ldb | (uint64_t)g->ldd << 32;
    key[3] = (uint64_t)g->ta | (uint64_t)g->tb << 2 | (uint64_t)g->ab_type << 4 | (uint64_t)g->d_type << 12 |
             (uint64_t)g->epi << 20 | (uint64_t)(g->beta != 0) << 32 | (uint64_t)align_of(g->a) << 33 |
             (uint64_t)align_of(g->b) << 42 | (uint64_t)align_of(g->d) << 51;
    key[4] = (uint64_t)(g->c ? align_of(g->c) : 0) | (uint64_t)compute_type(k, g) << 16;
}

static void plan_release(struct dt_gemm_plan *p)
{
    if (p->desc)
        cublasLtMatmulDescDestroy(p->desc);
    if (p->la)
        cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb)
        cublasLtMatrixLayoutDestroy(p->lb);
    if (p->ld)
        cublasLtMatrixLayoutDestroy(p->ld);
    memset(p, 0, sizeof *p);
}

static void plans_release(struct dt_cuda_ctx *k)
{
    for (int i = 0; i < DT_CUDA_PLANS; i++)
        plan_release(&k->plans[i]);
}

#define LT(call)                                                                                             \
    do {                                                                                                     \
        cublasStatus_t s_ = (call);                                                                          \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                                   \
            rc = cublas_err(s_, #call);                                                                      \
            goto fail;                                                                                       \
        }                                                                                                    \
    } while (0)

static int set_pref_alignment(cublasLtMatmulPreference_t pref, const struct dt_gemm *g)
{
    uint32_t a = align_of(g->a), b = align_of(g->b), d = align_of(g->d), c = g->c ? align_of(g->c) : d;
    uint64_t ws = DT_CUDA_WORKSPACE;
    int rc = 0;
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &a, sizeof a));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &b, sizeof b));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &c, sizeof c));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &d, sizeof d));
fail:
    return rc;
}

/* C: the residual when given, else D (read only when beta != 0). */
static const void *c_of(const struct dt_gemm *g) { return g->c ? g->c : g->d; }

/* Bytes of D (m x n of d_type) and of the epilogue's aux output. */
static size_t d_bytes(const struct dt_gemm *g)
{
    return (size_t)g->ldd * (size_t)g->n * (g->d_type == CUDA_R_32F ? 4u : 2u);
}

static size_t aux_bytes(const struct dt_gemm *g)
{
    if (!g->aux)
        return 0;
    if (g->epi == CUBLASLT_EPILOGUE_RELU_AUX_BIAS) /* one bit per row, aux_ld rows per column */
        return (size_t)(g->aux_ld / 8) * (size_t)g->n;
    return (size_t)g->aux_ld * (size_t)g->n * (g->d_type == CUDA_R_32F ? 4u : 2u);
}

/* A fused forward epilogue (ReLU or GELU with aux) is timed only with a
 * check: each candidate's D and aux are compared with the heuristic's first
 * answer, D within a relative 1e-5 of its largest value (another split of
 * the sum over k rounds differently) and the aux output (the ReLU bit mask,
 * GELU's input) exactly; a candidate that differs more is not used.  On an
 * H200 (CUDA 13.0) a DRELU backward GEMM was seen giving wrong gradients
 * with some algorithms, so epilogues are not trusted unchecked. */
struct tune_check {
    void *host_ref, *host_got; /* D, then aux */
    size_t d, aux;
};

static bool check_same(const struct dt_gemm *g, struct tune_check *c, bool first)
{
    char *dst = first ? c->host_ref : c->host_got;
    if (cudaMemcpy(dst, g->d, c->d, cudaMemcpyDeviceToHost) != cudaSuccess ||
        (c->aux && cudaMemcpy(dst + c->d, g->aux, c->aux, cudaMemcpyDeviceToHost) != cudaSuccess))
        return false;
    if (first)
        return true;
    if (c->aux && memcmp((char *)c->host_ref + c->d, (char *)c->host_got + c->d, c->aux) != 0)
        return false;
    if (g->d_type != CUDA_R_32F) /* low-precision D: the aux check stands alone */
        return true;
    const float *r = c->host_ref, *x = c->host_got;
    size_t n = c->d / sizeof(float);
    float big = 0, diff = 0;
    for (size_t i = 0; i < n; i++) {
        big = fmaxf(big, fabsf(r[i]));
        diff = fmaxf(diff, fabsf(r[i] - x[i]));
    }
    return diff <= 1e-5f * big;
}

/* The heuristic's first answer is not always the fastest; so each plan
 * times the candidates on its real operands and keeps the best (once, at
 * warm-up, never while a graph is being captured).  Where D feeds itself
 * (accumulation: beta != 0 with C = D, as the tied head's dwte over its
 * chunks or any weight gradient under gradient accumulation) the timing
 * writes a zeroed scratch D instead, so the sums already in D stay as they
 * are.  The plain and bias epilogues are timed as they are; the fused
 * forward ones with the check above; the backward epilogues (DRELU, DGELU,
 * BGRADB) keep the first answer (linear_cuda.c times those against
 * separate kernels instead). */
static int fastest(struct dt_cuda_ctx *k, const struct dt_gemm *g, struct dt_gemm_plan *p,
                   const cublasLtMatmulHeuristicResult_t *res, int found)
{
    enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    bool plain = g->epi == CUBLASLT_EPILOGUE_DEFAULT || g->epi == CUBLASLT_EPILOGUE_BIAS;
    bool fused_fwd = g->epi == CUBLASLT_EPILOGUE_RELU_AUX_BIAS || g->epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    bool d_rewritten = g->beta == 0.0f || (g->c && g->c != g->d);
    if (!k->autotune || found < 2 || !(plain || fused_fwd) || (!d_rewritten && !plain) ||
        cudaStreamIsCapturing(k->stream, &cap) != cudaSuccess || cap != cudaStreamCaptureStatusNone)
        return 0;
    struct dt_gemm tg = *g; /* what is timed: g, or g on a scratch D */
    void *scratch = NULL;
    if (!d_rewritten) {
        if (cudaMalloc(&scratch, d_bytes(g)) != cudaSuccess ||
            cudaMemsetAsync(scratch, 0, d_bytes(g), k->stream) != cudaSuccess) {
            cudaFree(scratch);
            cudaGetLastError();
            return 0;
        }
        tg.d = scratch;
        tg.c = NULL;
    }
    struct tune_check c = {.d = d_bytes(g), .aux = aux_bytes(g)};
    cudaEvent_t e0 = NULL, e1 = NULL;
    if (fused_fwd) {
        c.host_ref = malloc(2 * (c.d + c.aux));
        c.host_got = c.host_ref ? (char *)c.host_ref + c.d + c.aux : NULL;
    }
    if ((fused_fwd && !c.host_ref) || cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) {
        if (e0)
            cudaEventDestroy(e0);
        free(c.host_ref);
        cudaFree(scratch);
        cudaGetLastError();
        return 0;
    }
    const float alpha = 1.0f;
    int best = 0;
    float best_ms = 1e30f;
    for (int i = 0; i < found; i++) {
        cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
        for (int rep = 0; rep < 6 && st == CUBLAS_STATUS_SUCCESS; rep++) {
            if (rep == 1) /* the first run warms caches and loads the kernel */
                cudaEventRecord(e0, k->stream);
            st = cublasLtMatmul(k->lt, p->desc, &alpha, tg.a, p->la, tg.b, p->lb, &tg.beta, c_of(&tg), p->ld,
                                tg.d, p->ld, &res[i].algo, k->workspace, DT_CUDA_WORKSPACE, k->stream);
        }
        cudaEventRecord(e1, k->stream);
        float ms = 0;
        bool ok = st == CUBLAS_STATUS_SUCCESS && cudaEventSynchronize(e1) == cudaSuccess &&
                  cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess;
        if (ok && fused_fwd)
            ok = check_same(g, &c, i == 0);
        if (!ok && i == 0 && fused_fwd)
            break; /* no reference: keep the first answer */
        if (ok && ms < best_ms) {
            best_ms = ms;
            best = i;
        }
    }
    cudaGetLastError();
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    free(c.host_ref);
    cudaFree(scratch);
    k->tuned++;
    return best;
}

/* Descriptor and layouts; the pointers of bias/aux are set per call. */
static int plan_build(struct dt_cuda_ctx *k, const struct dt_gemm *g, struct dt_gemm_plan *p)
{
    int rc = 0;
    cublasLtMatmulPreference_t pref = NULL;
    int ar = g->ta == CUBLAS_OP_N ? g->m : g->k, ac = g->ta == CUBLAS_OP_N ? g->k : g->m;
    int br = g->tb == CUBLAS_OP_N ? g->k : g->n, bc = g->tb == CUBLAS_OP_N ? g->n : g->k;
    LT(cublasLtMatmulDescCreate(&p->desc, compute_type(k, g), CUDA_R_32F));
    LT(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &g->ta, sizeof g->ta));
    LT(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &g->tb, sizeof g->tb));
    LT(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &g->epi, sizeof g->epi));
    if (g->bias)
        LT(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias, sizeof g->bias));
    if (g->aux) {
        LT(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g->aux,
                                          sizeof g->aux));
        LT(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &g->aux_ld,
                                          sizeof g->aux_ld));
    }
    LT(cublasLtMatrixLayoutCreate(&p->la, g->ab_type, ar, ac, g->lda));
    LT(cublasLtMatrixLayoutCreate(&p->lb, g->ab_type, br, bc, g->ldb));
    LT(cublasLtMatrixLayoutCreate(&p->ld, g->d_type, g->m, g->n, g->ldd));
    LT(cublasLtMatmulPreferenceCreate(&pref));
    if ((rc = set_pref_alignment(pref, g)) < 0)
        goto fail;
    cublasLtMatmulHeuristicResult_t res[DT_GEMM_CANDIDATES];
    int found = 0;
    cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(k->lt, p->desc, p->la, p->lb, p->ld, p->ld, pref,
                                                      DT_GEMM_CANDIDATES, res, &found);
    if (s != CUBLAS_STATUS_SUCCESS || found == 0) {
        rc = dt_error_set(DT_EUNSUPPORTED, "cublasLt: no algorithm for a %dx%dx%d GEMM with epilogue %d", g->m,
                          g->n, g->k, (int)g->epi);
        goto fail;
    }
    p->algo = res[fastest(k, g, p, res, found)].algo;
    cublasLtMatmulPreferenceDestroy(pref);
    return 0;
fail:
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
    plan_release(p);
    return rc;
}

static struct dt_gemm_plan *plan_find(struct dt_cuda_ctx *k, const uint64_t key[5], bool *fresh)
{
    struct dt_gemm_plan *free_slot = NULL;
    for (int i = 0; i < DT_CUDA_PLANS; i++) {
        struct dt_gemm_plan *p = &k->plans[i];
        if (p->used && !memcmp(p->key, key, sizeof p->key)) {
            *fresh = false;
            return p;
        }
        if (!p->used && !free_slot)
            free_slot = p;
    }
    if (!free_slot) { /* full: a model with this many distinct GEMMs replans the first slot */
        free_slot = &k->plans[0];
        plan_release(free_slot);
    }
    *fresh = true;
    return free_slot;
}

int dt_cuda__gemm_run(struct dt_cuda_ctx *k, const struct dt_gemm *g)
{
    uint64_t key[5];
    plan_key(k, g, key);
    bool fresh = false;
    struct dt_gemm_plan *p = plan_find(k, key, &fresh);
    int rc = 0;
    if (fresh) {
        if ((rc = plan_build(k, g, p)) < 0)
            return rc;
        memcpy(p->key, key, sizeof key);
        p->used = true;
    } else {
        if (g->bias)
            LT(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias,
                                              sizeof g->bias));
        if (g->aux)
            LT(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g->aux,
                                              sizeof g->aux));
    }
    const float alpha = 1.0f;
    LT(cublasLtMatmul(k->lt, p->desc, &alpha, g->a, p->la, g->b, p->lb, &g->beta, c_of(g), p->ld, g->d, p->ld,
                      &p->algo, k->workspace, DT_CUDA_WORKSPACE, k->stream));
    return 0;
fail:
    return rc;
}
