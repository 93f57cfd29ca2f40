/* model.h - the model interface: what the trainer, checkpoints and the
 * reducer know of a model, and the table of models by trainer.model.type.
 *
 * A model is an ops table (struct dt_model_ops, one file under worker/models/
 * each) and instances (struct dt_model).  An instance's parameters are one
 * flat fp32 arena and its gradients another of the same layout (llm.c's single
 * allocation, PyTorch's gradient_as_bucket_view): AdamW runs over the whole
 * arena at once, the reducer's buckets are ranges of the gradient arena, and a
 * checkpoint writes views into the parameter arena.  The model describes its
 * arena as named tensors in PyTorch's state_dict order; checkpoints
 * (worker/ckpt.h) and the gradient segments the reducer cuts into buckets
 * (dt_model_grad_segments) are derived from that list alone, so neither knows
 * what a layer is.
 *
 * Backward reports each gradient range as soon as it holds the micro-batch's
 * final values ("gradient of [lo, hi) ready"), so its all-reduce can start
 * while backward goes on.  Activations are allocated at creation for the
 * largest batch; train and eval batches allocate nothing.
 *
 * Adding a model: worker/models/<name>.c defines
 * `const struct dt_model_ops dt_model__<name>` and gets one line in model.c's
 * table (and its keys in spec/jobspec_trainer.c).  Its GPU half, if any, is
 * worker/models/<name>_cuda.c behind .cuda (worker/cuda/model_cuda.h).
 *
 * Not for the step loop (worker/trainer.h), the optimizer (worker/optim/) or
 * data (worker/data/).
 */
#ifndef DT_MODEL_H
#define DT_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spec/trainer_spec.h"
#include "worker/data/batch.h"
#include "worker/kernels.h"

#define DT_MODEL_TENSOR_DIMS 4

/* One named tensor: a view into the parameter arena, and at the same offset
 * into the gradient arena. */
struct dt_model_tensor {
    char name[64];                       /* PyTorch's state_dict name, e.g. "layers.0.weight" */
    int ndim;                            /* 1..DT_MODEL_TENSOR_DIMS */
    int64_t shape[DT_MODEL_TENSOR_DIMS]; /* C order */
    size_t offset;                       /* in floats, from the start of the arena */
    bool decay;                          /* AdamW's weight decay applies to it */
    bool row_chunks;                     /* backward may write its gradient in row chunks
                                          * (dt_model_chunk_rows) and reports each one */
};

/* Called by backward when grads[lo, hi) hold this micro-batch's final values. */
typedef void (*dt_model_ready_fn)(void *ctx, size_t lo, size_t hi);

/* What a model is made from. */
struct dt_model_config {
    const struct dt_model_spec *spec; /* trainer.model: its type picks the ops */
    const struct dt_kernels *k;       /* the CPU kernel table its arithmetic goes through */
    struct dt_batch_shape data;       /* the data set's shape (must be the kind ops->input names) */
    int max_batch;                    /* most rows of a train or eval batch */
    uint64_t seed;                    /* initial parameters */
    enum dt_recompute recompute;      /* trainer.recompute (gpt2; the MLP keeps everything) */
};

struct dt_model;
struct dt_model_cuda_ops; /* worker/cuda/model_cuda.h */

struct dt_model_ops {
    const char *name;         /* trainer.model.type */
    enum dt_batch_kind input; /* the batches it reads */
    /* A model with parameters initialised from c->seed: fills every field of
     * struct dt_model but grad_chunk and spec (ops: this table; the arenas by
     * dt_model__alloc_arenas, model_internal.h), and on failure frees what it
     * made.  dt_model_create checks the tensor list after it. */
    int (*create)(const struct dt_model_config *c, struct dt_model **out);
    /* Frees what create made besides the arenas. */
    void (*destroy)(struct dt_model *m);
    /* Autocast: DT_KPREC_BF16 or F16 computes as torch.autocast would on
     * this model (fp32 master weights in the arena, parameter gradients
     * accumulated in fp32); F32 turns it off. */
    int (*set_precision)(struct dt_model *m, enum dt_kprec p);
    /* Forward and backward of one micro-batch: dloss/dlogits is scaled by
     * dscale (1 / dt_batch_terms for a mean, 1 / (terms * accum) under
     * accumulation, times the AMP loss scale); gradients overwrite the arena,
     * or are added to it when `accumulate`; each range is reported to `ready`
     * (may be NULL) once final.  Sets m->backward_start_ns.  Returns the
     * summed (not averaged) loss. */
    double (*train_batch)(struct dt_model *m, const struct dt_batch *b, float dscale, bool accumulate,
                          dt_model_ready_fn ready, void *ctx);
    /* Forward only: the summed loss; *correct gets the argmax hits added
     * (gpt2: targets may be NULL when only the logits are wanted; loss 0). */
    double (*eval_batch)(struct dt_model *m, const struct dt_batch *b, int64_t *correct);
    /* The logits of the last forward, inside the model: rows of logits_stride
     * floats of which the first logits_cols count ([n, classes] for the MLP,
     * [n*T, padded vocab] for gpt2, whose train batch turns them into their
     * gradient: read them after an eval batch). */
    const float *(*logits)(const struct dt_model *m);
    /* The model on a GPU (trainer.device: cuda); NULL: CPU only. */
    const struct dt_model_cuda_ops *cuda;
};

struct dt_model {
    const struct dt_model_ops *ops;
    const struct dt_kernels *k;
    size_t n_params;
    float *params, *grads; /* the two arenas, n_params floats each */
    float *params_own;     /* the model's own parameter arena; NULL after dt_model_use_params */
    float *grads_own;      /* the model's own gradient arena; NULL after dt_model_use_grads */
    /* n_tensors, PyTorch's order; disjoint, inside [0, n_params), one at 0;
     * floats between tensors (padding) go with the tensor below them */
    const struct dt_model_tensor *tensors;
    int n_tensors;
    int seq_len; /* DT_BATCH_TOKENS: the longest sequence a batch may have (c->data.seq_len), set by dt_model_create */
    enum dt_kprec prec;        /* dt_model_set_precision */
    size_t grad_chunk;         /* floats (dt_model_set_grad_chunk) */
    int64_t backward_start_ns; /* dt_clock_ns() when the last train batch's backward began (traces) */
    int logits_cols, logits_stride; /* dt_model_logits' row: values that count, floats between rows */
    struct dt_model_spec spec;      /* what it was made from (a copy, set by dt_model_create) */
};

/* The model c->spec->type names, from the table in model.c; an unknown type
 * is DT_EUNSUPPORTED naming the known ones, a data set of another kind than
 * the model reads DT_EINVAL. */
int dt_model_create(const struct dt_model_config *c, struct dt_model **out);
void dt_model_destroy(struct dt_model *m);

int dt_model_set_precision(struct dt_model *m, enum dt_kprec p);
double dt_model_train_batch(struct dt_model *m, const struct dt_batch *b, float dscale, bool accumulate,
                            dt_model_ready_fn ready, void *ctx);
double dt_model_eval_batch(struct dt_model *m, const struct dt_batch *b, int64_t *correct);
const float *dt_model_logits(const struct dt_model *m);

/* Gradients go to `grads` (n_params zeroed floats that the caller owns and
 * keeps until dt_model_destroy) from now on: memory the communicator shares
 * with the other ranks (dt_comm_alloc_shared), which the reducer's all-reduce
 * then reads in place.  The model's own gradient arena is freed. */
void dt_model_use_grads(struct dt_model *m, float *grads);

/* Parameters live in `params` (n_params floats, owned by the caller and kept
 * until dt_model_destroy) from now on, with their current values copied there
 * first unless `copy` is false: one copy for the ranks of a host
 * (worker/host_state.h).  The model's own parameter arena is freed. */
void dt_model_use_params(struct dt_model *m, float *params, bool copy);

/* The tensor called `name`, NULL when the model has none. */
const struct dt_model_tensor *dt_model_find_tensor(const struct dt_model *m, const char *name);
size_t dt_model_tensor_numel(const struct dt_model_tensor *t);

/* Backward writes the gradient of a row_chunks tensor of more than `floats`
 * elements in row chunks of at most that size, from the last rows to the
 * first, and reports each chunk as ready once written, so its all-reduce can
 * run while the next chunk is computed.  Chunks start at rows 0, 64, 64 + R,
 * 64 + 2R, ... (R a multiple of 64 = DT_KERNELS_W_ROWS): the first rows,
 * written last, are the smallest chunk.  The kernels compute a weight
 * gradient in tiles of DT_KERNELS_W_ROWS rows from row 0 (worker/kernels.h),
 * so a chunk is the very calls the whole GEMM would make for its rows and
 * has its bits, on any CPU and with any threads.  Chunking is a property of
 * the model, not of the run: 1 MiB (DT_MODEL_GRAD_CHUNK, set by
 * dt_model_create) whatever the ranks, buckets or overlap, so the buckets
 * those settings make are cut at the same rows.  0 writes whole tensors.
 * Autocast writes whole tensors. */
#define DT_MODEL_GRAD_CHUNK ((size_t)1 << 18)
void dt_model_set_grad_chunk(struct dt_model *m, size_t floats);

/* Rows per gradient chunk of tensor t (t->shape[0] when it is written whole). */
int dt_model_chunk_rows(const struct dt_model *m, const struct dt_model_tensor *t);

/* The gradient arena cut into the ranges backward reports: each tensor, or
 * each row chunk of a chunked one, in arena order.  A row_chunks tensor is
 * cut at its chunk starts 0, 64, 64 + R, ... even when R is all its rows
 * (written whole, it is reported as one range; the cut at row 64 only places
 * bucket boundaries where they have been since chunking came in, so every
 * bucket, and every bit of an all-reduce, stays where it was).  Returns n;
 * when bounds is not NULL fills bounds[0..n] (bounds[0] = 0, bounds[n] =
 * n_params) and, when cut is not NULL, cut[i] = true where segment i is one
 * chunk of a chunked tensor (a bucket must start there for the chunk's
 * all-reduce to start on time). */
int dt_model_grad_segments(const struct dt_model *m, size_t *bounds, bool *cut);

#endif
