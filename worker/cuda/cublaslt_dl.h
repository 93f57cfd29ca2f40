/* cublaslt_dl.h - cuBLASLt loaded with dlopen at the first kernel context,
 * not linked: loading libcublasLt costs a process about 200 MB of resident
 * memory at start-up, and every dtrain process (the launcher, the agent, a
 * CPU rank) would pay it.  gemm_cuda.c includes this after <cublasLt.h>;
 * each cublasLt* call it makes then goes through dt_cuda__lt, which
 * dlopen_cuda.c fills.  Not for the GEMM logic (gemm_cuda.c).
 */
#ifndef DT_CUBLASLT_DL_H
#define DT_CUBLASLT_DL_H

#include <cublasLt.h>

#define DT_LT_FUNCTIONS(X)                                                                                   \
    X(cublasLtCreate)                                                                                        \
    X(cublasLtDestroy)                                                                                       \
    X(cublasLtGetStatusString)                                                                               \
    X(cublasLtMatmul)                                                                                        \
    X(cublasLtMatmulAlgoGetHeuristic)                                                                        \
    X(cublasLtMatmulDescCreate)                                                                              \
    X(cublasLtMatmulDescDestroy)                                                                             \
    X(cublasLtMatmulDescSetAttribute)                                                                        \
    X(cublasLtMatmulPreferenceCreate)                                                                        \
    X(cublasLtMatmulPreferenceDestroy)                                                                       \
    X(cublasLtMatmulPreferenceSetAttribute)                                                                  \
    X(cublasLtMatrixLayoutCreate)                                                                            \
    X(cublasLtMatrixLayoutDestroy)

struct dt_cublaslt_api {
#define DT_LT_MEMBER(f) __typeof__(&f) f;
    DT_LT_FUNCTIONS(DT_LT_MEMBER)
#undef DT_LT_MEMBER
};

extern struct dt_cublaslt_api dt_cuda__lt;

/* Loads libcublasLt once (thread-safe); 0, or DT_EUNSUPPORTED with a
 * sentence naming the library when it or a function is missing. */
int dt_cuda__cublaslt_load(void);

/* From here on a cublasLt call in the including file goes through dt_cuda__lt
 * (dlopen_cuda.c, which fills dt_cuda__lt, defines DT_CUBLASLT_DL_IMPL first). */
#ifndef DT_CUBLASLT_DL_IMPL
#define cublasLtCreate dt_cuda__lt.cublasLtCreate
#define cublasLtDestroy dt_cuda__lt.cublasLtDestroy
#define cublasLtGetStatusString dt_cuda__lt.cublasLtGetStatusString
#define cublasLtMatmul dt_cuda__lt.cublasLtMatmul
#define cublasLtMatmulAlgoGetHeuristic dt_cuda__lt.cublasLtMatmulAlgoGetHeuristic
#define cublasLtMatmulDescCreate dt_cuda__lt.cublasLtMatmulDescCreate
#define cublasLtMatmulDescDestroy dt_cuda__lt.cublasLtMatmulDescDestroy
#define cublasLtMatmulDescSetAttribute dt_cuda__lt.cublasLtMatmulDescSetAttribute
#define cublasLtMatmulPreferenceCreate dt_cuda__lt.cublasLtMatmulPreferenceCreate
#define cublasLtMatmulPreferenceDestroy dt_cuda__lt.cublasLtMatmulPreferenceDestroy
#define cublasLtMatmulPreferenceSetAttribute dt_cuda__lt.cublasLtMatmulPreferenceSetAttribute
#define cublasLtMatrixLayoutCreate dt_cuda__lt.cublasLtMatrixLayoutCreate
#define cublasLtMatrixLayoutDestroy dt_cuda__lt.cublasLtMatrixLayoutDestroy
#endif

#endif
