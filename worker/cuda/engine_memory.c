/* engine_memory.c - what the CUDA engine asks of the GPU before it takes
 * anything: whether the run fits in the device's free memory, and, when it
 * does not, a sentence with the memory asked and available and the settings
 * that would fit (a smaller trainer.data.batch_size, trainer.recompute,
 * ddp.grad_accum to keep the global batch) instead of a CUDA error code
 * from the middle of set-up; and the GPU's peak FLOP/s for the metrics' MFU.
 *
 * The estimate is what engine_cuda.c and the model's GPU half allocate: four
 * fp32 arenas (parameters, gradients, AdamW's m and v: under ZeRO-1 this
 * rank's shard of them), the 16-bit copy of
 * the parameters, the batch and its pinned slots' device twins, the image
 * data set, the model's activations (its ops' act_bytes for the rows and
 * precision of the run), and the kernel contexts' cuBLASLt workspaces and
 * reduction partials; plus a reserve for what nobody sizes up front (CUDA
 * graphs, cuBLASLt's and the runtime's own).
 * Not for allocating (engine_cuda.c) or the step (engine_step.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "worker/cuda/cuda_internal.h"
#include "worker/cuda/engine_internal.h"
#include "worker/data/idx.h"
#include "worker/models/model.h"

#define RESERVE ((size_t)256 << 20) /* graphs, cuBLASLt's and the runtime's own */
#define GIB(b) ((double)(b) / (1024.0 * 1024.0 * 1024.0))

/* What a run of training batch `batch` and trainer.recompute `recompute`
 * takes on the device, in parts. */
struct need {
    size_t state; /* arenas and the 16-bit parameters */
    size_t act;   /* the model's activations */
    size_t rest;  /* batch, slots, data set, workspaces, reserve */
    bool act_known;
};

static size_t total(const struct need *n)
{
    return n->state + n->act + n->rest;
}

/* Rows the model's activations are sized for: the training batch, or the
 * evaluation batch when that is larger (images: 1000 rows). */
static int rows_for(const struct dt_dev_model *d, int batch)
{
    int eval = d->c.max_batch > d->c.batch ? d->c.max_batch : 0;
    return batch > eval ? batch : eval;
}

static struct need need_for(const struct dt_dev_model *d, int batch, int recompute)
{
    struct need n = {0};
    size_t rows = (size_t)rows_for(d, batch), es = dt_cuda_dtype_size(d->t);
    n.state = (2 * d->stride + 2 * d->mlen) * sizeof(float) +
              (d->t == DT_CUDA_F32 ? 0 : (d->zero ? d->stride : d->n) * 2);
    if (d->mo->act_bytes) {
        n.act = d->mo->act_bytes(d->c.model, (int)rows, d->t, recompute);
        n.act_known = true;
    }
    size_t x =
        d->T ? 2 * rows * (size_t)d->T * sizeof(int32_t) : rows * ((size_t)d->px * es + sizeof(int32_t));
    size_t slots = DT_ENGINE_SLOTS *
                   (2 * sizeof(double) + dt_engine__slot_ints(d, d->T ? batch : (int)rows) * sizeof(int32_t));
    size_t data =
        d->T ? 0 : (size_t)(d->c.train->n + d->c.test->n) * ((size_t)d->px + 1) + 256 * sizeof(float);
    const char *env = getenv("DTRAIN_CUDA_WGRAD_STREAM");
    size_t ctxs = env && !strcmp(env, "0") ? 1 : 2;
    size_t ws = ctxs * (DT_CUDA_WORKSPACE + DT_CUDA_SPLIT_FLOATS * sizeof(float));
    n.rest = x + slots + data + ws + RESERVE;
    return n;
}

/* The largest training batch below `batch` whose run fits in `avail`
 * (0: none); with `divides`, only a divisor of `global` (so grad_accum
 * global / b keeps the global batch). */
static int largest_fit(const struct dt_dev_model *d, int batch, size_t avail, bool divides, int global)
{
    int lo = 0, hi = batch - 1; /* lo fits (0: nothing yet), search (lo, hi] */
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        struct need n = need_for(d, mid, d->c.recompute);
        if (total(&n) <= avail)
            lo = mid;
        else
            hi = mid - 1;
    }
    while (divides && lo > 0 && global % lo != 0)
        lo--;
    return lo;
}

static const char *const recompute_names[] = {"none", "gelu", "block"};

/* The settings that would fit, appended to buf. */
static void advise(const struct dt_dev_model *d, size_t avail, char *buf, size_t len)
{
    size_t at = strlen(buf);
    int B = d->c.batch, accum = d->c.grad_accum > 0 ? d->c.grad_accum : 1;
    for (int r = d->c.recompute + 1; r <= DT_RECOMPUTE_BLOCK && d->T; r++) {
        struct need n = need_for(d, B, r);
        if (total(&n) <= avail && at < len) {
            at += (size_t)snprintf(buf + at, len - at,
                                   "; trainer.recompute: %s fits at batch_size %d (%.1f GiB)",
                                   recompute_names[r], B, GIB(total(&n)));
            break;
        }
    }
    int fit = largest_fit(d, B, avail, false, 0), even = largest_fit(d, B, avail, true, B * accum);
    if (fit > 0 && at < len)
        at += (size_t)snprintf(buf + at, len - at, "; batch_size %d fits", fit);
    if (even > 0 && at < len)
        at += (size_t)snprintf(
            buf + at, len - at,
            "; batch_size %d with ddp.grad_accum %d keeps the global batch of %d rows per rank", even,
            B * accum / even, B * accum);
    if (fit == 0 && at < len)
        snprintf(
            buf + at, len - at,
            "; not even batch_size 1 fits: the parameters, gradients and AdamW's state alone take %.2f GiB "
            "(a smaller model, or more GPUs with ddp.zero: 1)",
            GIB(need_for(d, 1, d->c.recompute).state));
}

int dt_engine__check_memory(struct dt_dev_model *d)
{
    cudaError_t e = cudaSetDevice(d->c.device);
    size_t free_b = 0, total_b = 0;
    if (e == cudaSuccess)
        e = cudaMemGetInfo(&free_b, &total_b);
    if (e != cudaSuccess)
        return dt_cuda_err(e, "cudaMemGetInfo (the GPU's free memory)");
    d->free0 = free_b;
    struct need n = need_for(d, d->c.batch, d->c.recompute);
    if (total(&n) <= free_b)
        return 0;
    struct cudaDeviceProp p;
    const char *name = cudaGetDeviceProperties(&p, d->c.device) == cudaSuccess ? p.name : "?";
    char act[96] = "activations: not known", advice[768] = "";
    if (n.act_known)
        snprintf(act, sizeof act, "activations for batch_size %d with recompute %s %.2f GiB", d->c.batch,
                 recompute_names[d->c.recompute], GIB(n.act));
    advise(d, free_b, advice, sizeof advice);
    return dt_error_set(DT_ENOMEM,
                        "out of GPU memory: this run needs %.1f GiB (parameters, gradients and AdamW's state "
                        "%.2f GiB, %s, batches and workspaces %.2f GiB) but GPU %d (%s) has %.1f GiB free of "
                        "%.1f GiB%s",
                        GIB(total(&n)), GIB(n.state), act, GIB(n.rest), d->c.device, name, GIB(free_b),
                        GIB(total_b), advice);
}

/* Dense tensor-core peaks as NVIDIA's data sheets give them (llm.c's
 * llmc/mfu.h): H100 SXM and H200 989.4 TFLOP/s bf16/fp16, 494.7 tf32; A100
 * 312 and 156.  Plain fp32 GEMMs run off the tensor cores, and other GPUs
 * (an H100 PCIe or NVL has other clocks) are not known: NAN, never a guess. */
double dt_engine__peak_flops(int device, bool lowp, bool tf32)
{
    struct cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, device) != cudaSuccess) {
        cudaGetLastError();
        return NAN;
    }
    double lo = NAN, tf = NAN;
    if (strstr(p.name, "H200") ||
        (strstr(p.name, "H100") && (strstr(p.name, "SXM") || strstr(p.name, "HBM3"))))
        lo = 989.4e12, tf = 494.7e12;
    else if (strstr(p.name, "A100"))
        lo = 312e12, tf = 156e12;
    return lowp ? lo : tf32 ? tf : NAN;
}
