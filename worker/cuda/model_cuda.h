/* model_cuda.h - a model's GPU half, as the CUDA engine (engine_*.c) drives
 * it: what a model's ops table points .cuda at (worker/models/model.h).
 *
 * The engine owns the device and everything a step shares: the streams, the
 * fp32 parameter, gradient and AdamW arenas in the host model's layout (so
 * checkpoints are plain copies), the bf16/fp16 copy of the parameters, the
 * data set and the batch made on the device, the optimizer, the buckets and
 * their all-reduces, the phase marks and the CUDA graph.  The model owns its
 * activations and its forward, loss and backward, which it enqueues on the
 * streams it is lent and never synchronises with the host, so the engine can
 * capture a whole step.
 *
 * One micro-batch, as the engine runs it:
 *   gather the batch into env.x/env.y | forward_loss | backward, reporting
 *   each gradient range as it is written | (the engine) join the all-reduces,
 *   clip, AdamW.
 *
 * Not for the kernels themselves (kernels_cuda.h) or the engine's own state
 * (engine_internal.h).
 */
#ifndef DT_MODEL_CUDA_H
#define DT_MODEL_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "worker/cuda/kernels_cuda.h"

struct dt_model;

/* What the engine lends a model, all fixed for the engine's life (pointers
 * are device memory). */
struct dt_model_cuda_env {
    struct dt_cuda_ctx *k;  /* the compute stream's context: forward, loss, backward's input gradients */
    struct dt_cuda_ctx *kw; /* a second stream's context for weight gradients; NULL: all on k
                             * (DTRAIN_CUDA_WGRAD_STREAM=0) */
    enum dt_cuda_dtype t;   /* GEMM inputs and activations; accumulation, gradients and masters are fp32 */
    int max_batch;          /* most rows of a train or eval batch */
    const float *p;         /* fp32 parameters, the host model's arena layout */
    const void *plow;       /* their copy in t (written by AdamW), NULL when t is fp32 */
    float *g;               /* the gradient arena, same layout */
    /* The batch.  Images: x [rows, features] in t, y labels [rows].
     * Tokens (seq_len > 0): x input ids, y target ids, both int32 [rows, seq_len]
     * (a target outside the vocabulary adds nothing to the loss). */
    const void *x;
    const int32_t *y;
    int seq_len; /* tokens per row of a token batch; 0 for images */
};

/* Where the loss of one forward goes; device pointers, overwritten. */
struct dt_model_cuda_loss {
    bool backward;           /* keep dloss/dlogits for the backward that follows */
    bool accumulate;         /* with backward: gradients a forward may already write (a head fused
                              * with its loss) are added to env.g, as backward's accumulate says */
    float dscale;            /* dlogits = (softmax - onehot) * dscale (* *loss_scale) */
    const float *loss_scale; /* fp16's GradScaler scale, or NULL */
    float *loss_sum;         /* summed loss of the rows */
    int *correct;            /* argmax hits */
    double *loss_acc;        /* NULL, or a running total loss_sum is added to */
};

/* Backward reports that gradients [lo, end of arena) are final once the work
 * queued on stream `on` so far has run (the engine starts the buckets inside
 * them there); 0 or an error. */
typedef int (*dt_model_cuda_ready_fn)(void *ctx, size_t lo, cudaStream_t on);

struct dt_model_cuda_ops {
    /* The model's device state for host model m (its layout and arenas'
     * offsets): activations for env->max_batch rows; env is copied. */
    int (*create)(const struct dt_model *m, const struct dt_model_cuda_env *env, void **state);
    void (*destroy)(void *state);
    /* Forward of the first B rows of env.x/env.y and the loss. */
    int (*forward_loss)(void *state, int B, const struct dt_model_cuda_loss *l);
    /* Backward of the last forward_loss (with backward set), gradients
     * written (or, when accumulate, added) into env.g, each range reported
     * to ready (may be NULL) as soon as its last write is queued; when it
     * returns, everything it queued on kw's stream is joined back into k's. */
    int (*backward)(void *state, int B, bool accumulate, dt_model_cuda_ready_fn ready, void *ctx);
    /* Device bytes create() would allocate for `rows` rows in type t with
     * trainer.recompute `recompute` (enum dt_recompute; the host model's own
     * setting is m's): lets the engine say, before allocating, whether a
     * batch fits and which settings would (NULL: not known). */
    size_t (*act_bytes)(const struct dt_model *m, int rows, enum dt_cuda_dtype t, int recompute);
};

#endif
