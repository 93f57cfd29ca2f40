/* kernels_device.c - which accelerator tables this build has (kernels.h).
 *
 * The CUDA table exists only when nvcc built worker/cuda/; without it a
 * trainer.device: cuda job gets a sentence, not a link error.  Not for the
 * tables themselves.
 */
#include "worker/kernels.h"

#include <string.h>

#ifdef DT_HAVE_CUDA
extern const struct dt_device_kernels dt_device_kernels_cuda;
#endif

const struct dt_device_kernels *dt_device_kernels_find(const char *device)
{
#ifdef DT_HAVE_CUDA
    if (device && !strcmp(device, "cuda"))
        return &dt_device_kernels_cuda;
#else
    (void)device;
#endif
    return NULL;
}
