/* nvml_cuda.c - GPU utilisation and memory in use for the metrics, read
 * through NVML loaded with dlopen at run time, so the binary starts (and the
 * figures read NAN) where libnvidia-ml is missing.  NVML numbers GPUs its own
 * way, so the device is found by its PCI bus id, which CUDA and NVML share.
 *
 * The few NVML declarations are written out here (the CUDA toolkit on the
 * build machine need not ship nvml.h); they are the stable v2 ABI.
 * Not for anything that changes the GPU's settings.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>

#include "worker/cuda/engine_internal.h"

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

struct dt_nvml *dt_nvml_open(int cuda_device)
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
        dt_nvml_close(n);
        return NULL;
    }
    return n;
}

void dt_nvml_sample(struct dt_nvml *n, double *util_pct, double *mem_mib)
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

void dt_nvml_close(struct dt_nvml *n)
{
    if (!n)
        return;
    if (n->shutdown)
        n->shutdown();
    dlclose(n->lib);
    free(n);
}
