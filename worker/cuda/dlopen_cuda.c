/* dlopen_cuda.c - the libraries the GPU code loads at run time instead of
 * linking them, each found like a linked one (the binary's RUNPATH, the CUDA
 * lib64 it was built against, LD_LIBRARY_PATH, the loader cache):
 *   - cuBLASLt (cublaslt_dl.h), at the first kernel context: linked, it cost
 *     every dtrain process, the launcher and CPU ranks too, about 200 MB of
 *     resident memory at start-up;
 *   - NVML, for GPU utilisation and memory in use in the metrics, so the
 *     binary starts (and the figures read NAN) where libnvidia-ml is missing.
 *     NVML numbers GPUs its own way, so the device is found by its PCI bus
 *     id, which CUDA and NVML share.  The few NVML declarations are written
 *     out here (the CUDA toolkit on the build machine need not ship nvml.h);
 *     they are the stable v2 ABI.
 * cudart and NCCL are linked (they are light).  Not for anything that changes
 * the GPU's settings.
 */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/error.h"
#define DT_CUBLASLT_DL_IMPL /* this file fills dt_cuda__lt: no redirection of cublasLt* here */
#include "worker/cuda/cublaslt_dl.h"
#include "worker/cuda/engine_internal.h"

/* ---- cuBLASLt ---- */

struct dt_cublaslt_api dt_cuda__lt;

static pthread_once_t lt_once = PTHREAD_ONCE_INIT;
static char lt_why[512]; /* why cuBLASLt could not be loaded; empty when it was */

static void load_cublaslt(void)
{
    char name[32];
    snprintf(name, sizeof name, "libcublasLt.so.%d", CUBLAS_VER_MAJOR);
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        lib = dlopen("libcublasLt.so", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(lt_why, sizeof lt_why, "cannot load %s (the CUDA toolkit's cuBLASLt): %s", name, dlerror());
        return;
    }
#define DT_LT_SYM(f)                                                                                         \
    if (!lt_why[0] && !(*(void **)&dt_cuda__lt.f = dlsym(lib, #f)))                                          \
        snprintf(lt_why, sizeof lt_why,                                                                      \
                 "%s has no %s (an older cuBLASLt than the one dtrain was built with?)", name, #f);
    DT_LT_FUNCTIONS(DT_LT_SYM)
#undef DT_LT_SYM
}

int dt_cuda__cublaslt_load(void)
{
    pthread_once(&lt_once, load_cublaslt);
    return lt_why[0] ? dt_error_set(DT_EUNSUPPORTED, "cuda: %s", lt_why) : 0;
}

/* ---- NVML ---- */

typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct {
    unsigned int gpu, memory;
} nvmlUtilization_t;
typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

struct dt_nvml {
    void *lib;
    nvmlDevice_t dev;
    int (*util)(nvmlDevice_t, nvmlUtilization_t *);
    int (*mem)(nvmlDevice_t, nvmlMemory_t *);
    int (*shutdown)(void);
};

struct dt_nvml *dt_engine__nvml_open(int cuda_device)
{
    char bus[64];
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, cuda_device) != cudaSuccess)
        return NULL;
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return NULL;
    int (*init)(void) = (int (*)(void))dlsym(lib, "nvmlInit_v2");
    int (*by_bus)(const char *, nvmlDevice_t *) =
        (int (*)(const char *, nvmlDevice_t *))dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2");
    struct dt_nvml *n = calloc(1, sizeof *n);
    if (n) {
        n->lib = lib;
        n->util = (int (*)(nvmlDevice_t, nvmlUtilization_t *))dlsym(lib, "nvmlDeviceGetUtilizationRates");
        n->mem = (int (*)(nvmlDevice_t, nvmlMemory_t *))dlsym(lib, "nvmlDeviceGetMemoryInfo");
        n->shutdown = (int (*)(void))dlsym(lib, "nvmlShutdown");
    }
    /* NVML_SUCCESS is 0 */
    if (!n || !init || !by_bus || !n->util || !n->mem || init() != 0) {
        free(n);
        dlclose(lib);
        return NULL;
    }
    if (by_bus(bus, &n->dev) != 0) {
        dt_engine__nvml_close(n);
        return NULL;
    }
    return n;
}

void dt_engine__nvml_sample(struct dt_nvml *n, double *util_pct, double *mem_mib)
{
    *util_pct = *mem_mib = NAN;
    if (!n)
        return;
    nvmlUtilization_t u;
    nvmlMemory_t m;
    if (n->util(n->dev, &u) == 0)
        *util_pct = u.gpu;
    if (n->mem(n->dev, &m) == 0)
        *mem_mib = (double)m.used / (1024.0 * 1024.0);
}

void dt_engine__nvml_close(struct dt_nvml *n)
{
    if (!n)
        return;
    if (n->shutdown)
        n->shutdown();
    dlclose(n->lib);
    free(n);
}
