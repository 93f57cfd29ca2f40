/* model.h - the MLP: parameters in one flat arena, gradients in another of the same layout.
 *
 * Layout (PyTorch's parameter order): w0 [h0,in], b0 [h0], w1 [h1,h0], b1, ...,
 * w_last [classes, h_last], b_last.  One allocation holds every parameter and
 * one every gradient (llm.c style), so the reducer's buckets are plain ranges
 * of the gradient arena and a checkpoint is a handful of memcpy-free writes.
 * Activations for the largest batch are allocated once at creation; forward and
 * backward allocate nothing.
 *
 * Backward reports each layer's gradient range as soon as it is written, so
 * the reducer can start its all-reduce while earlier layers are still going.
 * Not for optimisation or data: see adamw.h, loader.h.
 */
#ifndef DT_MODEL_H
#define DT_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "worker/kernels.h"
#include "base/clock.h"

#define DT_MODEL_MAX_LAYERS 17

struct dt_model_layer {
    int in, out;
    size_t w, b;        /* offsets of the weight and the bias in the arenas */
    enum dt_kact act;   /* activation after this layer (NONE for the last) */
    float *z, *h;       /* pre-activation (GELU only) and output, [max_batch, out] */
};

/* Called by backward when grads[lo, hi) hold this micro-batch's final values. */
typedef void (*dt_model_ready_fn)(void *ctx, size_t lo, size_t hi);

struct dt_model {
    const struct dt_kernels *k;
    int n_layers, in, classes, max_batch;
    struct dt_model_layer layer[DT_MODEL_MAX_LAYERS];
    size_t n_params;
    float *params, *grads;   /* the two arenas, n_params floats each */
    float *grads_own;        /* the model's own gradient arena; NULL after dt_model_use_grads */
    float *params_own;       /* the model's own parameter arena; NULL after dt_model_use_params */
    float *acts;             /* every layer's z and h */
    float *scratch[2];       /* backward ping-pong, [max_batch, widest] */
    float *dlogits;
    int64_t backward_start_ns; /* dt_clock_ns() when the last train_batch's backward began (traces) */
    /* Autocast (model_amp.c): GEMM inputs and outputs, activations and their
     * gradients rounded to prec; NULL buffers while prec is F32. */
    enum dt_kprec prec;
    float *params_lp;        /* the parameters rounded to prec, refreshed every forward */
    float *x_lp;             /* the input batch rounded, [max_batch, in] */
    float *wtmp, *btmp;      /* one layer's weight and bias gradient before rounding */
    float *zeros;            /* [widest]: a zero bias */
    size_t grad_chunk;       /* floats (dt_model_set_grad_chunk); 0: weight gradients written whole */
};

/* An MLP in -> hidden[0..n_hidden) -> classes with `act` between layers.
 * Parameters get PyTorch's nn.Linear default initialisation
 * (U(-1/sqrt(in), 1/sqrt(in)) for weight and bias) from an MT19937 seeded with `seed`. */
int dt_model_create_mlp(const struct dt_kernels *k, int in, const int *hidden, int n_hidden, int classes,
                        enum dt_kact act, int max_batch, uint64_t seed, struct dt_model **out);
void dt_model_destroy(struct dt_model *m);

/* Gradients go to `grads` (n_params zeroed floats that the caller owns and
 * keeps until dt_model_destroy) from now on: memory the communicator shares
 * with the other ranks (dt_comm_alloc_shared), which the reducer's all-reduce
 * then reads in place.  The model's own gradient arena is freed. */
void dt_model_use_grads(struct dt_model *m, float *grads);

/* Parameters live in `params` (n_params floats, owned by the caller and kept
 * until dt_model_destroy) from now on, with their current values copied there
 * first unless `copy` is false: one copy for the ranks of a host
 * (host_state.h).  The model's own parameter arena is freed. */
void dt_model_use_params(struct dt_model *m, float *params, bool copy);

/* Autocast as PyTorch's for this model (fp32 master weights stay in params):
 * DT_KPREC_BF16 or F16 make Linear layers compute in that type with fp32
 * accumulation, and keep activations and gradients in it; loss and softmax
 * stay fp32; parameter gradients are accumulated in fp32.  F32 turns it off. */
int dt_model_set_precision(struct dt_model *m, enum dt_kprec p);

/* Forward for B rows of x [B, in]; returns the logits [B, classes] (inside the model). */
const float *dt_model_forward(struct dt_model *m, const float *x, int B);

/* Loss and gradients of one micro-batch: runs forward, then backward with
 * dloss/dlogits scaled by `dscale` (1/B for a mean over the batch, 1/(B*accum)
 * under accumulation).  Gradients are added to the arena when `accumulate`,
 * else overwrite it.  Returns the summed (not averaged) loss; *correct, when not
 * NULL, gets the number of argmax hits added. */
double dt_model_train_batch(struct dt_model *m, const float *x, const int32_t *y, int B, float dscale,
                            int accumulate, dt_model_ready_fn ready, void *ctx, int64_t *correct);

/* Summed loss and hits of B rows, forward only. */
double dt_model_eval_batch(struct dt_model *m, const float *x, const int32_t *y, int B, int64_t *correct);

/* Backward writes a weight gradient of more than `floats` elements in row
 * (output-feature) chunks of at most that size, from the last rows to the
 * first, and reports each chunk as ready once written, so its all-reduce can
 * run while the next chunk is computed.  Chunks start at rows 0, 64, 64 + R,
 * 64 + 2R, ... (R a multiple of 64): the first rows, written last, are the
 * smallest chunk.  Each element of dW sums over the batch in the same order as
 * in a whole GEMM, and with one BLAS thread the bits are the same; with more,
 * OpenBLAS splits a whole GEMM among its threads differently and the last bit
 * may differ.  So chunking is a property of the model, not of the run: 1 MiB
 * (DT_MODEL_GRAD_CHUNK) by default whatever the ranks, buckets or overlap, so
 * that those settings never change a gradient.  0 writes whole tensors.  F32
 * only: autocast writes whole tensors. */
#define DT_MODEL_GRAD_CHUNK ((size_t)1 << 18)
void dt_model_set_grad_chunk(struct dt_model *m, size_t floats);

/* Rows per chunk of layer l's weight gradient (out when not chunked). */
int dt_model_chunk_rows(const struct dt_model *m, int l);

/* The gradient arena cut into the ranges backward reports: each weight chunk
 * and each bias, ascending.  Returns their count n; when bounds is not NULL
 * fills bounds[0..n] (bounds[n] = n_params) and, when cut is not NULL, cut[i]
 * = true where segment i is one chunk of a chunked weight (a bucket must start
 * there for the chunk's all-reduce to start on time). */
int dt_model_grad_segments(const struct dt_model *m, size_t *bounds, bool *cut);

/* Names as PyTorch's nn.Sequential would give them ("layers.0.weight"); used in checkpoints. */
void dt_model_param_name(const struct dt_model *m, int layer, int is_bias, char *buf, size_t len);

#endif
