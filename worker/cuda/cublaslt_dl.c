/* cublaslt_dl.c - loads libcublasLt at run time (see cublaslt_dl.h).
 * The library is found like a linked one: the binary's RUNPATH (the CUDA
 * lib64 it was built against), LD_LIBRARY_PATH, the loader cache.  Not for
 * anything else of CUDA: cudart and NCCL are linked (they are light).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include "base/error.h"
#define DT_CUBLASLT_DL_IMPL
#include "worker/cuda/cublaslt_dl.h"

struct dt_cublaslt_api dt_lt;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char why[512];

static void load(void)
{
    char name[32];
    snprintf(name, sizeof name, "libcublasLt.so.%d", CUBLAS_VER_MAJOR);
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        lib = dlopen("libcublasLt.so", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(why, sizeof why, "cannot load %s (the CUDA toolkit's cuBLASLt): %s", name, dlerror());
        return;
    }
#define DT_LT_SYM(f)                                                                                         \
    if (!why[0] && !(*(void **)&dt_lt.f = dlsym(lib, #f)))                                                   \
        snprintf(why, sizeof why, "%s has no %s (an older cuBLASLt than the one dtrain was built with?)",    \
                 name, #f);
    DT_LT_FUNCTIONS(DT_LT_SYM)
#undef DT_LT_SYM
}

int dt_cublaslt_load(void)
{
    pthread_once(&once, load);
    return why[0] ? dt_error_set(DT_EUNSUPPORTED, "cuda: %s", why) : 0;
}
