/* cublaslt_dl.h - cuBLASLt loaded with dlopen at the first kernel context,
 * not linked: loading libcublasLt costs a process about 200 MB of resident
 * memory at start-up, and every dtrain process (the launcher, the agent, a
 * CPU rank) would pay it.  gemm_cuda.c includes this after <cublasLt.h>;
 * each cublasLt* call it makes then goes through dt_lt.  Not for the GEMM
 * logic (gemm_cuda.c).
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

extern struct dt_cublaslt_api dt_lt;

/* Loads libcublasLt once (thread-safe); 0, or DT_EUNSUPPORTED with a
 * sentence naming the library when it or a function is missing. */
int dt_cublaslt_load(void);

/* From here on a cublasLt call in the including file goes through dt_lt
 * (cublaslt_dl.c itself, which fills dt_lt, defines DT_CUBLASLT_DL_IMPL). */
#ifndef DT_CUBLASLT_DL_IMPL
#define cublasLtCreate dt_lt.cublasLtCreate
#define cublasLtDestroy dt_lt.cublasLtDestroy
#define cublasLtGetStatusString dt_lt.cublasLtGetStatusString
#define cublasLtMatmul dt_lt.cublasLtMatmul
#define cublasLtMatmulAlgoGetHeuristic dt_lt.cublasLtMatmulAlgoGetHeuristic
#define cublasLtMatmulDescCreate dt_lt.cublasLtMatmulDescCreate
#define cublasLtMatmulDescDestroy dt_lt.cublasLtMatmulDescDestroy
#define cublasLtMatmulDescSetAttribute dt_lt.cublasLtMatmulDescSetAttribute
#define cublasLtMatmulPreferenceCreate dt_lt.cublasLtMatmulPreferenceCreate
#define cublasLtMatmulPreferenceDestroy dt_lt.cublasLtMatmulPreferenceDestroy
#define cublasLtMatmulPreferenceSetAttribute dt_lt.cublasLtMatmulPreferenceSetAttribute
#define cublasLtMatrixLayoutCreate dt_lt.cublasLtMatrixLayoutCreate
#define cublasLtMatrixLayoutDestroy dt_lt.cublasLtMatrixLayoutDestroy
#endif

#endif
