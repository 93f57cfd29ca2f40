/* engine_internal.h - the CUDA trainer engine's state (the table of
 * kernels.h's struct dt_device_kernels), shared by worker/cuda/engine_*.c
 * and engine_kernels.cu only.  Not for the trainer: it sees kernels.h.
 *
 * Streams: `s` (the kernel context's) computes; `copy` moves each batch's
 * indices (images) or tokens host -> device; `cs` (the NCCL communicator's)
 * all-reduces buckets.
 * Events order them on the device; the host waits only where kernels.h says.
 */
#ifndef DT_ENGINE_INTERNAL_H
#define DT_ENGINE_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "worker/cuda/kernels_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The launcher of engine_kernels.cu (enqueues on s). */
int dt_engine__gather(cudaStream_t s, enum dt_cuda_dtype t, void *x, int32_t *y, const uint8_t *images,
                      const uint8_t *labels, const int32_t *idx, int64_t first, int B, int px,
                      const float *lut);

#ifdef __cplusplus
}
#endif

#ifndef __CUDACC__
#include "worker/cuda/model_cuda.h"
#include "worker/buckets.h"
#include "worker/kernels.h"
#include "worker/data/sampler.h"

#define DT_ENGINE_SLOTS 2 /* double buffering of the per-step host -> device inputs */
#define DT_ENGINE_MAX_BUCKETS 64

/* Device scalars of a step (one allocation, read back in one copy). */
struct dt_engine_scalars {
    double loss_acc;   /* training loss summed since creation */
    int64_t adam_step; /* AdamW's step count (torch's state['step']) */
    float loss;        /* the last micro-batch's summed loss */
    float sumsq;       /* the last step's sum of squared gradients */
    float eval_loss;
    int correct, eval_correct;
    float scale;        /* fp16: the loss scale (GradScaler's) */
    float found_inf;    /* fp16: this step's gradients held an inf or NaN (the step is skipped) */
    int growth_tracker; /* fp16: clean steps since the scale last changed */
};

/* A slot holds one step's inputs: lr and beta1 (doubles), then the batch as
 * int32: images: the examples' indices [rows]; tokens: the inputs [rows, T]
 * then the targets [rows, T] (the step copies them into the fixed env.x and
 * env.y on the device, so a graph reads fixed pointers); pinned on the host
 * and twinned on the device, so a graph step needs one copy. */
struct dt_engine_slot {
    double *h_buf, *d_buf;  /* [lr, beta1, int32 batch...] */
    int32_t *h_idx, *d_idx; /* views into h_buf, d_buf: the batch */
    cudaEvent_t copied;     /* on `copy`: h_idx is free again, d_idx holds the batch */
    cudaEvent_t consumed;   /* on `s`: the step reading d_idx is past its gather */
    cudaGraphExec_t graph;  /* the whole step reading this slot's d_idx */
    cudaGraphExec_t timed;  /* the same step with the phase marks (phase_ev below) */
};

enum { DT_ENGINE_PHASES = 5 }; /* data, forward, backward, comm wait, optimizer */

struct dt_dev_model {
    struct dt_dev_config c;
    struct dt_cuda_ctx *k;
    cudaStream_t s, copy, cs;
    /* The model's weight gradients run on a stream of their own, context kw
     * (its own cuBLASLt workspace and reduction partials, so the two streams
     * never share scratch), beside the input-gradient chain on s: the model's
     * GPU half says how (worker/models/mlp_cuda.c).  NULL when DTRAIN_CUDA_WGRAD_STREAM=0
     * (everything on s, for comparison). */
    struct dt_cuda_ctx *kw;
    /* The model's GPU half (model_cuda.h) and its state: activations,
     * forward, loss, backward. */
    const struct dt_model_cuda_ops *mo;
    void *ms;
    /* Phase marks on s: before the gather, after it, after the loss, after
     * backward (weight gradients joined), after the comm join, after the
     * optimizer.  Only one step per metrics row carries them: as event nodes
     * in a graph (cudaEventRecordExternal) six marks cost an H200 step about
     * 25 us of 156 (fp32, B=256), measured; so each slot has a second,
     * `timed` graph, launched for the step after each read_split. */
    cudaEvent_t phase_ev[DT_ENGINE_PHASES + 1];
    bool marking;   /* the step being issued or captured records the marks */
    bool time_next; /* read_split asked for a timed step */
    bool timed_any; /* a timed step has been issued */
    enum dt_cuda_dtype t;
    int px;           /* values per example (images) */
    int T;            /* tokens per row (token runs), 0 for images */
    size_t n, stride; /* parameters; arena stride (n rounded up to 256 bytes, or world * zper) */
    size_t mlen;      /* floats of m and of v: stride, or zper under ZeRO-1 */
    float *p, *g, *m, *v;
    /* ddp.zero 1 with world > 1 (ZeRO-1, as llm.c's -z 1 and the CPU's
     * worker/zero.h): AdamW runs over this rank's shard [zlo, zlo + zn) of
     * the arena (zper floats a rank, the last shard short), m and v hold that
     * shard only, and after AdamW the parameters and their 16-bit copy are
     * all-gathered in place on cs (zero_ev orders s -> cs -> s). */
    bool zero;
    size_t zper, zlo, zn;
    cudaEvent_t zero_ev[2];
    void *plow; /* 16-bit copy of p (bf16 and fp16 runs) */
    void *x;    /* the batch: images [max_batch, px] in t; tokens input ids [max_batch, T] int32 */
    int32_t *y; /* labels [max_batch], or target ids [max_batch, T] */
    /* AdamW's ranges without weight decay (kernels_cuda.h), device uint64 pairs */
    uint64_t *nodecay;
    int n_nodecay;
    uint8_t *train_img, *train_lbl, *test_img, *test_lbl;
    float *lut;
    struct dt_engine_scalars *sc;
    double *d_hyper;                  /* lr, beta1 of the next update */
    double *h_hyper[DT_ENGINE_SLOTS]; /* pinned */
    cudaEvent_t hyper_copied[DT_ENGINE_SLOTS];
    int next_hyper;
    struct dt_engine_slot slot[DT_ENGINE_SLOTS];
    int next_slot;
    /* this rank's order of the current epoch */
    struct dt_sampler sampler;
    int64_t *order, order_epoch;
    /* a whole step waiting for update() to launch it (one micro-batch of the training batch, graphs on) */
    bool pending;
    int pending_slot, pending_rows;
    float pending_dscale;
    bool warmed;
    /* buckets (worker/buckets.h, the reducer's own): all-reduced on cs as backward writes them */
    struct dt_buckets buckets;
    int next_bucket;
    cudaEvent_t bucket_ev[DT_ENGINE_MAX_BUCKETS], join_ev;
    double loss_read; /* loss_acc at the last read_stats */
    struct dt_nvml *nvml;
    /* Free device memory before the engine allocated (cudaMemGetInfo), and
     * the most it has taken since: the metrics' gpu_alloc_mib */
    size_t free0, taken_peak;
    double peak_flops; /* dense FLOP/s of this run's GEMMs on this GPU, NAN unknown */
};

/* engine_step.c */
int dt_engine__train_batch(struct dt_dev_model *d, const struct dt_batch *b, int64_t epoch, int64_t batch,
                           int k, bool accumulate, bool last, int *rows);
/* int32 values a slot holds after lr and beta1 for a batch of `rows` */
size_t dt_engine__slot_ints(const struct dt_dev_model *d, int rows);
int dt_engine__update(struct dt_dev_model *d, double lr, double beta1);
int dt_engine__read_split(struct dt_dev_model *d, double split_s[DT_ENGINE_PHASES]);
/* Waits for everything queued on s; with NCCL, bounded and abortable. */
int dt_engine__wait(struct dt_dev_model *d, const char *what);
/* profile_cuda.c: DTRAIN_CUDA_PROFILE's per-kernel table (docs/gpu.md); each a no-op without it */
void dt_engine__profile_start(const struct dt_dev_model *d);
void dt_engine__profile_step(struct dt_dev_model *d);
/* Around work that is not a training step (evaluation, the state copied out):
 * its records are left out of the table.  Waits for the device when profiling. */
void dt_engine__profile_aside(struct dt_dev_model *d, bool begin);
void dt_engine__profile_finish(const struct dt_dev_model *d);

/* dlopen_cuda.c: NVML loaded with dlopen at first use; absent -> NAN. */
struct dt_nvml;
struct dt_nvml *dt_engine__nvml_open(int cuda_device);
void dt_engine__nvml_sample(struct dt_nvml *n, double *util_pct, double *mem_mib);
void dt_engine__nvml_close(struct dt_nvml *n);

/* engine_memory.c: whether the run fits in the GPU's free memory, asked
 * before anything is allocated (a sentence with the settings that would fit
 * when not), and the GPU's peak FLOP/s for MFU */
int dt_engine__check_memory(struct dt_dev_model *d);
double dt_engine__peak_flops(int device, bool lowp, bool tf32);
#endif

#endif
