/* kernels.h - the per-device kernel table the model and the optimizer call.
 *
 * One table per device (CPU: kernels_cpu.c over OpenBLAS), so the model, the
 * optimizer and the training loop are written once.  An accelerator instead
 * fills struct dt_device_kernels below: there the whole model, its optimizer
 * state and the training data live on the device, and the loop hands it whole
 * steps (a GPU step is too short to cross PCIe per op).  Pointers
 * passed to a table's functions live on that table's device.  Layouts follow
 * PyTorch: activations are row-major [batch, features], a Linear weight is
 * [out, in] and y = x W^T + b.
 *
 * Not for allocation or scheduling: callers own every buffer.
 */
#ifndef DT_KERNELS_H
#define DT_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum dt_kact { DT_KACT_NONE, DT_KACT_RELU, DT_KACT_GELU };
/* The precision a value is rounded to (AMP keeps low-precision values in float arrays). */
enum dt_kprec { DT_KPREC_F32, DT_KPREC_BF16, DT_KPREC_F16 };

/* Scalars of one AdamW step, computed in double by worker/optim/adamw.c as
 * torch does. */
struct dt_adamw_scalars {
    float decay;       /* 1 - lr * weight_decay */
    float w1;          /* 1 - beta1: the lerp weight */
    float beta2, w2;   /* beta2, 1 - beta2 */
    float bc2_sqrt;    /* sqrt(1 - beta2^t) */
    float eps;
    float neg_step;    /* -lr / (1 - beta1^t) */
    float grad_scale;  /* gradient clipping coefficient (1 when not clipping) */
};

struct dt_kernels {
    const char *name;
    /* The GEMMs give the same bits whatever the threads (set_threads): on
     * CPU each is cut into tiles chosen from its shape alone. */
    /* y[B,out] = x[B,in] W[out,in]^T */
    void (*matmul_forward)(float *y, const float *x, const float *w, int B, int in, int out);
    /* dw[out,in] (+)= dy[B,out]^T x[B,in]  (accumulate: add to dw instead of overwriting) */
    void (*matmul_backward_w)(float *dw, const float *dy, const float *x, int B, int in, int out,
                              bool accumulate);
    /* Rows [r0, r0+rows) of the above: dw points at row r0 of dW, dy is the whole [B,out].
     * With r0 a multiple of DT_KERNELS_W_ROWS the rows have the same bits as
     * the whole matmul_backward_w gives them. */
    void (*matmul_backward_w_rows)(float *dw, const float *dy, const float *x, int B, int in, int out, int r0,
                                   int rows, bool accumulate);
    /* dx[B,in] = dy[B,out] W[out,in] */
    void (*matmul_backward_x)(float *dx, const float *dy, const float *w, int B, int in, int out);
    /* C[M,N] = op(A) op(B) + beta C, row-major; op transposes A [K,M] (ta) or B [N,K] (tb) */
    void (*gemm)(bool ta, bool tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                 float beta, float *C, int ldc);
    /* z = y + b (row broadcast), h = act(z); z may be NULL when act needs only h to go back */
    void (*bias_act_forward)(float *z, float *h, const float *y, const float *b, int B, int n,
                             enum dt_kact act);
    /* dz = dh * act'(z or h), db (+)= sum_rows dz; dz may alias dh */
    void (*act_bias_backward)(float *dz, float *db, const float *dh, const float *z, const float *h, int B,
                              int n, enum dt_kact act, bool accumulate);
    /* Softmax cross-entropy of logits[B,C] against labels y.  Returns the summed
     * loss; counts argmax hits into *correct; when dlogits is not NULL writes
     * (softmax - onehot) * dscale into it. */
    double (*xent)(float *dlogits, const float *logits, const int32_t *y, int B, int C, float dscale,
                   int64_t *correct);
    /* out[b] = sum of x^2 over x[b block, min((b+1) block, n)), in double; each
     * block's sum has the same bits whatever the threads
     * (worker/optim/grad_norm.h) */
    void (*sumsq_blocks)(double *out, const float *x, size_t n, size_t block);
    void (*adamw)(float *p, const float *g, float *m, float *v, size_t n, const struct dt_adamw_scalars *s);
    /* 64-bit hash of the bytes of x (desync detection); equal data, equal hash */
    uint64_t (*hash)(const float *x, size_t n);
    /* g *= inv_scale; returns true when an element was inf or NaN before
     * (torch's _amp_foreach_non_finite_check_and_unscale_). */
    bool (*unscale)(float *g, size_t n, float inv_scale);
    /* dst (+)= src rounded to the nearest value of precision p, ties to even
     * (fp16: beyond 65504 rounds to inf, below 2^-14 to multiples of 2^-24;
     * bf16: float's range, 8 bits).  dst may be src when not accumulating. */
    void (*round_lowp)(float *dst, const float *src, size_t n, enum dt_kprec p, bool accumulate);
    /* Sets the threads the kernels use: the CPU pool's (worker/cpu_pool.h),
     * which runs every parallel loop, the GEMMs' tiles included.  BLAS itself
     * runs each call on its caller's thread. */
    void (*set_threads)(int n);
};

extern const struct dt_kernels dt_kernels_cpu;

/* The weight gradient's rows are computed in tiles of this many rows from
 * row 0 (matmul_backward_w_rows): a model that writes a weight gradient in
 * row chunks starting on multiples of it gets the bits of the whole one. */
#define DT_KERNELS_W_ROWS 64

/* Debian 12's OpenBLAS (0.3.21, DYNAMIC_ARCH) does not know CPUs newer than
 * itself (Sapphire and Emerald Rapids) and falls back to its Prescott (SSE3)
 * kernels: sgemm runs 4-5x slower than its SkylakeX kernels on the same core
 * (measured on the H200 host's Xeon, family 6 model 207).  OpenBLAS picks
 * its kernels when the library loads, so the only cure is to run the
 * program again with OPENBLAS_CORETYPE naming the family the CPU supports.
 * Returns that family ("SkylakeX", "Haswell") when OpenBLAS fell back to
 * Prescott on a CPU with AVX-512 or AVX2 and OPENBLAS_CORETYPE is unset;
 * NULL otherwise.  The caller sets the variable and execs itself. */
const char *dt_kernels_cpu_blas_coretype(void);

/* ---- Accelerator entries (CUDA: worker/cuda/engine_*.c) -------------------
 *
 * The trainer loop stays one loop: at each point where it would call the CPU
 * model (a micro-batch, the optimizer step, evaluation, a checkpoint) it calls
 * these instead when trainer.device is not cpu.  Nothing here waits for the
 * device except read_stats, eval_batch, eval_tokens, get_state and sample; a
 * step enqueues and returns, so the host runs ahead and the device never
 * idles.  Images: the data set is uploaded once (bytes) and each batch
 * crosses PCIe as its indices only; tokens: each batch's inputs and targets
 * (int32) cross, from the host's loader; both through pinned double buffers
 * on a copy stream.  The engine knows no
 * model: it is given the host model and runs its device half through the
 * model's ops (CUDA: worker/cuda/model_cuda.h).
 */
struct dt_batch;
struct dt_buckets;
struct dt_comm;
struct dt_dataset;
struct dt_dev_model;
struct dt_model;

struct dt_dev_config {
    int device;                     /* CUDA device index */
    /* The host model (worker/models/model.h): its layout, initial (or
     * resumed) parameters, and through its ops its device half */
    const struct dt_model *model;
    int batch, max_batch;           /* training batch (graphs are captured for it); most rows at once */
    bool bf16, fp16;                /* GEMMs in bf16 / fp16 with fp32 master weights (trainer.amp.dtype) */
    /* fp16's loss scaling (torch.amp.GradScaler's rules, run on the device)
     * from the host scaler's state (worker/optim/grad_scaler.h; resumed from a
     * checkpoint) */
    bool dynamic_scale;
    float scale;
    int growth_tracker;
    double growth_factor, backoff_factor;
    int growth_interval;
    bool cuda_graph;                /* capture the whole step once and replay it */
    bool tf32;                      /* trainer.tf32: fp32 GEMMs on the tensor cores */
    int recompute;                  /* trainer.recompute (enum dt_recompute), for the memory estimate */
    int grad_accum;                 /* ddp.grad_accum, for the out-of-memory advice */
    /* Token runs: tokens per row (trainer.data.seq_len); each batch comes
     * from the host's loader (train_batch's b, eval_tokens).  0: images,
     * made on the device from train and test */
    int seq_len;
    double beta2, eps, weight_decay, grad_clip;
    const struct dt_dataset *train, *test;
    int rank, world;                /* this rank's share of each epoch (DistributedSampler) */
    bool shuffle, drop_last;
    uint64_t seed;
    struct dt_comm *comm;           /* NULL or world 1: nothing to reduce; else an NCCL communicator */
    /* ddp.zero 1: with world > 1 each rank keeps AdamW's moments for its
     * 1/world shard of the arena only and the updated parameters are
     * all-gathered; get_state of m, v is then a collective every rank calls */
    bool zero;
    const struct dt_buckets *buckets; /* the reducer's gradient buckets (buckets.h), copied by create */
    /* AdamW's initial state (host, n_params floats each; NULL: zeros) and step */
    const float *m, *v;
    int64_t adam_step;
};

struct dt_device_kernels {
    const char *name;
    int (*create)(const struct dt_dev_config *c, struct dt_dev_model **out);
    void (*destroy)(struct dt_dev_model *d);
    /* One micro-batch of a step of k: images: batch `batch` of `epoch` (this
     * rank's order, made on the device; b NULL); tokens: the host batch b
     * (the loader's, copied before the call returns).  Forward, backward with
     * dloss/dlogits scaled by 1/(terms * k), terms the batch's rows (images)
     * or target tokens (rows * seq_len), so the step's gradient is the mean
     * over its micro-batches; accumulate adds to the gradients.  `last`: the
     * step's final micro-batch, whose buckets are all-reduced (averaged) on
     * the communication stream as backward writes them.  *rows gets the
     * batch's rows (the last one of an epoch may be short). */
    int (*train_batch)(struct dt_dev_model *d, const struct dt_batch *b, int64_t epoch, int64_t batch, int k,
                       bool accumulate, bool last, int *rows);
    /* Gradient norm, clipping, AdamW with this step's lr and beta1. */
    int (*update)(struct dt_dev_model *d, double lr, double beta1);
    /* Waits for the device: the summed training loss since the last call
     * (over examples, or over target tokens), and the gradient norm of the
     * last step. */
    int (*read_stats)(struct dt_dev_model *d, double *loss_sum, double *grad_norm);
    /* Summed loss and hits of test examples [first, first + n). */
    int (*eval_batch)(struct dt_dev_model *d, int64_t first, int n, double *loss_sum, int64_t *hits);
    /* Token runs: the summed loss and argmax hits over the target tokens of
     * host batch b (the validation loader's).  Waits. */
    int (*eval_tokens)(struct dt_dev_model *d, const struct dt_batch *b, double *loss_sum, int64_t *hits);
    /* fp16: the loss scale and its growth tracker as the device has them, and
     * AdamW's step count (steps taken; the others were skipped).  Waits. */
    int (*read_scaler)(struct dt_dev_model *d, float *scale, int *growth_tracker, int64_t *adam_step);
    /* Parameters, moments and AdamW's step to the host (checkpoints, desync
     * checks, samples); NULL leaves one out.  Under ZeRO-1 (zero, world > 1)
     * asking for m or v gathers the shards: every rank must call it then. */
    int (*get_state)(struct dt_dev_model *d, float *params, float *m, float *v, int64_t *step);
    /* Utilisation (percent) and memory in use (MiB) of this rank's device
     * (NVML: the whole GPU, every process and the CUDA context included), and
     * the most memory (MiB) the engine and the model's device half have held,
     * allocations only; NAN when unknown. */
    void (*sample)(struct dt_dev_model *d, double *util_pct, double *mem_mib, double *alloc_mib);
    /* The device's peak dense FLOP/s for this run's GEMMs (bf16/fp16, or
     * fp32 on tf32 tensor cores, or plain fp32), for MFU; NAN when the GPU
     * is not one whose figure is known (no made-up number). */
    double (*peak_flops)(struct dt_dev_model *d);
    /* The device's own step-time split of the last finished step, in seconds:
     * data (the batch gather), forward (with the loss), backward, comm wait (for
     * the last bucket's all-reduce) and optimizer, as metrics.h names them.  The
     * host's clock cannot see these: it runs ahead of the device.  Waits for
     * the device; NAN where unknown.  NULL: the engine cannot tell. */
    int (*read_split)(struct dt_dev_model *d, double split_s[5]);
};

#endif
