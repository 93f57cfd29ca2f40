/* cublaslt_dlopen.c - cuBLASLt, loaded when the first GEMM handle is made, not when dtrain starts.
 *
 * Linking libcublasLt.so directly costs every dtrain process about 200 MB of
 * resident memory and a noticeable start-up delay: the loader processes the
 * library's relocations (its kernel tables) before main().  The launcher, the
 * agent and the coordinator never run a GEMM, and a launcher that needs 200 MB
 * is the process a memory cgroup's OOM killer picks instead of the rank that
 * ran away.  So the binary does not link cuBLASLt: these definitions stand in
 * for the dozen entry points the CUDA kernels use and forward to the real ones,
 * which dlopen() finds on first use (the binary's RUNPATH names the CUDA
 * library folder).  When the library cannot be loaded, every call returns
 * CUBLAS_STATUS_NOT_INITIALIZED and the reason is kept for
 * cublasLtGetStatusString, so the GEMM layer's usual error path reports it.
 *
 * Not for cuBLAS (unused) or the CUDA runtime (small, linked normally).
 */
#include <cublasLt.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#define DT_STR_(x) #x
#define DT_STR(x) DT_STR_(x)

static void *lib;
static char load_error[512];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void)
{
    lib = dlopen("libcublasLt.so." DT_STR(CUBLAS_VER_MAJOR), RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        lib = dlopen("libcublasLt.so", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        snprintf(load_error, sizeof load_error, "cannot load cuBLASLt (%s)", dlerror());
}

static void *sym(const char *name)
{
    pthread_once(&once, load);
    return lib ? dlsym(lib, name) : NULL;
}

/* One forwarding definition per entry point: resolve once, then call through. */
#define FORWARD(name, params, args)                                                                        \
    cublasStatus_t CUBLASWINAPI name params                                                                \
    {                                                                                                      \
        static cublasStatus_t(*fn) params;                                                                 \
        if (!fn)                                                                                           \
            *(void **)&fn = sym(#name);                                                                    \
        return fn ? fn args : CUBLAS_STATUS_NOT_INITIALIZED;                                               \
    }

FORWARD(cublasLtCreate, (cublasLtHandle_t * h), (h))
FORWARD(cublasLtDestroy, (cublasLtHandle_t h), (h))
FORWARD(cublasLtMatmul,
        (cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *A, cublasLtMatrixLayout_t Ad,
         const void *B, cublasLtMatrixLayout_t Bd, const void *beta, const void *C, cublasLtMatrixLayout_t Cd,
         void *D, cublasLtMatrixLayout_t Dd, const cublasLtMatmulAlgo_t *algo, void *ws, size_t ws_size,
         cudaStream_t stream),
        (h, d, alpha, A, Ad, B, Bd, beta, C, Cd, D, Dd, algo, ws, ws_size, stream))
FORWARD(cublasLtMatmulAlgoGetHeuristic,
        (cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t Ad, cublasLtMatrixLayout_t Bd,
         cublasLtMatrixLayout_t Cd, cublasLtMatrixLayout_t Dd, cublasLtMatmulPreference_t pref, int requested,
         cublasLtMatmulHeuristicResult_t results[], int *returned),
        (h, d, Ad, Bd, Cd, Dd, pref, requested, results, returned))
FORWARD(cublasLtMatmulDescCreate, (cublasLtMatmulDesc_t * d, cublasComputeType_t ct, cudaDataType_t st),
        (d, ct, st))
FORWARD(cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t d), (d))
FORWARD(cublasLtMatmulDescSetAttribute,
        (cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *buf, size_t n), (d, a, buf, n))
FORWARD(cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t * p), (p))
FORWARD(cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t p), (p))
FORWARD(cublasLtMatmulPreferenceSetAttribute,
        (cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a, const void *buf, size_t n),
        (p, a, buf, n))
FORWARD(cublasLtMatrixLayoutCreate, (cublasLtMatrixLayout_t * l, cudaDataType t, uint64_t r, uint64_t c, int64_t ld),
        (l, t, r, c, ld))
FORWARD(cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t l), (l))

const char *CUBLASWINAPI cublasLtGetStatusString(cublasStatus_t status)
{
    static const char *(*fn)(cublasStatus_t);
    if (!fn)
        *(void **)&fn = sym("cublasLtGetStatusString");
    if (fn)
        return fn(status);
    return load_error[0] ? load_error : "cuBLASLt status (library not loaded)";
}
