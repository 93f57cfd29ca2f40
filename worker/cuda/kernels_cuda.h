/* kernels_cuda.h - the CUDA kernel library of the trainer: fused linear
 * layers through cuBLASLt, softmax cross-entropy, AdamW over the flat arena,
 * and the AMP scaler, in fp32 and bf16, for the engine (engine_*.c) and the
 * models' GPU halves (worker/models/<name>_cuda.c).
 *
 * Shapes and layouts are the CPU table's (worker/kernels.h): activations are
 * row-major [B, features], a Linear weight is [out, in], y = x W^T + b, and
 * parameters and gradients are flat fp32 arenas in PyTorch's order.  With
 * bf16 (or fp16) the GEMMs read 16-bit activations and a 16-bit copy of the
 * parameters (written by the AdamW kernel) and accumulate in fp32; gradients,
 * the master weights and the optimizer state stay fp32.
 *
 * Everything is enqueued on the context's stream and returns at once; nothing
 * here synchronises with the host (loss, hit count and found-inf stay on the
 * device), so a whole step can be captured in a CUDA graph.  Errors of the
 * enqueue are returned; errors of the kernels surface at dt_cuda_sync().
 *
 * Layer math (as in llm.c, one layer l with input x [B,in]):
 *   forward   z = x W^T + b             h = act(z)
 *   backward  dz = dh * act'(z)         dW (+)= dz^T x      db (+)= sum_rows dz
 *             dx = dz W                 (dx is the previous layer's dh)
 * linear_backward_x fuses the previous layer's act' into the dx GEMM
 * (cuBLASLt DRELU / DGELU epilogues), so it yields the previous layer's dz.
 *
 * Not for allocation policy or the training loop: callers own every buffer.
 */
#ifndef DT_KERNELS_CUDA_H
#define DT_KERNELS_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* F16 is IEEE half (AMP fp16: the loss must be scaled, see dt_cuda_unscale_check). */
enum dt_cuda_dtype { DT_CUDA_F32, DT_CUDA_BF16, DT_CUDA_F16 };

/* GELU is torch's exact erf form (approximate='none': what the CPU table
 * computes; its GEMM fuses the bias, an own kernel applies erf); GELU_TANH is
 * approximate='tanh', which cuBLASLt fuses whole into the epilogue. */
enum dt_cuda_act { DT_CUDA_ACT_NONE, DT_CUDA_ACT_RELU, DT_CUDA_ACT_GELU, DT_CUDA_ACT_GELU_TANH };

struct dt_cuda_ctx;

/* A context on `device` whose work goes to `stream` (0: a new non-blocking
 * stream owned by the context).  Allocates the cuBLASLt workspace once. */
int dt_cuda_ctx_create(int device, cudaStream_t stream, struct dt_cuda_ctx **out);
void dt_cuda_ctx_destroy(struct dt_cuda_ctx *k);
cudaStream_t dt_cuda_stream(const struct dt_cuda_ctx *k);
/* Waits for the stream and reports any kernel error as a sentence. */
int dt_cuda_sync(struct dt_cuda_ctx *k);
/* Each new GEMM shape times cuBLASLt's candidate algorithms once and keeps
 * the fastest, and AUTO fusion times the backward ways (default on).  Off:
 * the heuristic's first answer and a fixed backward way (own kernels for
 * narrow layers, else GEMM + own kernel), so two runs give the same bits;
 * timing may pick differently from run to run. */
void dt_cuda_set_autotune(struct dt_cuda_ctx *k, bool on);
/* How backward ops are done.  AUTO (default) times, once per shape, the
 * cuBLASLt epilogue (DRELU/DGELU, BGRADB), a plain GEMM followed by an own
 * kernel, and for layers of at most 32 outputs an own kernel alone, and keeps
 * the fastest: an epilogue is not always the fast way (cuBLASLt may run it as
 * a second pass), and narrow layers defeat the tensor cores.  The others force
 * one way (tests cover each). */
enum dt_cuda_fusion { DT_CUDA_FUSE_AUTO, DT_CUDA_FUSE_EPILOGUE, DT_CUDA_FUSE_SEPARATE, DT_CUDA_FUSE_OWN };
void dt_cuda_set_fusion(struct dt_cuda_ctx *k, enum dt_cuda_fusion f);
/* trainer.tf32: fp32 GEMMs on the tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32,
 * torch.backends.cuda.matmul.allow_tf32); off by default, as PyTorch.  Only
 * GEMMs whose inputs are fp32 change; bf16 and fp16 ones are unaffected. */
void dt_cuda_set_tf32(struct dt_cuda_ctx *k, bool on);
/* How many GEMMs fell back from a fused cuBLASLt epilogue to an own kernel
 * (0 on a GPU whose cuBLASLt fuses everything asked of it). */
int dt_cuda_fallbacks(const struct dt_cuda_ctx *k);

size_t dt_cuda_dtype_size(enum dt_cuda_dtype t);

/* A CUDA runtime error as dtrain's: DT_EIO with a sentence naming the call. */
int dt_cuda_err(cudaError_t e, const char *call);
/* Work queued on `waiter` from now on runs after everything queued on
 * `producer` so far: ev is recorded on producer and waited for on waiter (in a
 * stream capture, an edge of the graph; ev may be recorded again afterwards,
 * the wait keeps this point).  `what` names the point in an error. */
int dt_cuda_stream_after(cudaStream_t waiter, cudaStream_t producer, cudaEvent_t ev, const char *what);
/* cudaMalloc of `bytes` (16 when 0) into *p; DT_ENOMEM naming `what` when it fails. */
int dt_cuda_alloc(void **p, size_t bytes, const char *what);

/* Bytes of a layer's `aux` buffer: ReLU: the bit mask cuBLASLt writes
 * (columns padded to 128 bits); GELU: z itself [B,out] in dtype t; NONE: 0. */
size_t dt_cuda_aux_bytes(enum dt_cuda_dtype t, enum dt_cuda_act act, int B, int out);

/* h[B,out] = act(x[B,in] W[out,in]^T + b[out]); aux as above.  x, W, b, h in t. */
int dt_cuda_linear_forward(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, void *h, void *aux, const void *x,
                           const void *w, const void *b, int B, int in, int out, enum dt_cuda_act act);

/* dw[out,in] (+)= dz[B,out]^T x[B,in] and db[out] (+)= sum_rows dz, both fp32
 * (+= when accumulate; the bias gradient comes from the epilogue BGRADB). */
int dt_cuda_linear_backward_w(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, float *dw, float *db, const void *dz,
                              const void *x, int B, int in, int out, bool accumulate);

/* dzp[B,in] = (dz[B,out] W[out,in]) * act_prev'(z_prev): the previous layer's
 * dz.  aux_prev is the previous layer's forward aux, x is this layer's input
 * (= the previous layer's h; used when ReLU cannot go through the mask). */
int dt_cuda_linear_backward_x(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, void *dzp, const void *dz,
                              const void *w, const void *aux_prev, const void *x, int B, int in, int out,
                              enum dt_cuda_act act_prev);

/* Softmax cross-entropy of logits[B,C] against y, forward and backward in one
 * pass, in fp32 whatever t is:
 *   loss_i = logsumexp(x_i) - x_i[y_i]     dlogits_ij = (softmax_ij - [j == y_i]) * dscale * S
 * with S = *loss_scale when loss_scale is not NULL (the AMP scale), else 1.
 * *loss_sum gets sum_i loss_i and *correct the argmax hits (overwritten; a
 * fixed-order reduction, so the same batch gives the same bits).  dlogits may
 * be NULL (evaluation).  Labels outside [0,C) count as a wrong prediction with
 * loss 0 and zero gradient. */
int dt_cuda_xent(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, void *dlogits, float *loss_sum, int *correct,
                 const void *logits, const int32_t *y, int B, int C, float dscale, const float *loss_scale);
/* The same, also adding the loss sum to *loss_acc (a double on the device:
 * the trainer's running total, read back only at metrics rows). */
int dt_cuda_xent_acc(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, void *dlogits, float *loss_sum, int *correct,
                     const void *logits, const int32_t *y, int B, int C, float dscale, const float *loss_scale,
                     double *loss_acc);

/* AdamW (torch.optim.AdamW, decoupled decay applied first) over n fp32
 * elements in one kernel, t = *step + 1:
 *   g = g * grad_scale * inv_scale;   p *= 1 - lr wd;   m = lerp(m, g, 1 - b1);
 *   v = b2 v + (1 - b2) g^2;   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
 * found_inf (may be NULL): when *found_inf != 0 the step is skipped entirely
 * and *step does not advance (torch's fused AdamW under GradScaler).
 * inv_from_scale (may be NULL): the AMP scale; gradients are divided by it.
 * p_lowp (may be NULL): receives bf16(p) (fp16(p) with a->lowp_f16) for the next forward. */
struct dt_cuda_adamw_args {
    double lr, beta1, beta2, eps, weight_decay; /* doubles, as torch's param group holds them */
    float grad_scale;                          /* clipping coefficient, 1 for none */
    bool lowp_f16;                             /* p_lowp is fp16 (else bf16) */
    /* Elements that do not decay (biases, LayerNorm: nanoGPT's second param
     * group, worker/optim/adamw.h): n_nodecay ranges [lo, hi) of element
     * indices, ascending and disjoint, in device memory as uint64 pairs;
     * NULL or 0: every element decays.  Indices are the arena's, counted
     * from p, so a call over a sub-range passes ranges of that sub-range. */
    const uint64_t *nodecay;
    int n_nodecay;
};
int dt_cuda_adamw(struct dt_cuda_ctx *k, float *p, const float *g, float *m, float *v, void *p_lowp, size_t n,
                  const struct dt_cuda_adamw_args *a, int64_t *step, const float *found_inf,
                  const float *inv_from_scale);

/* The same step with the inputs a replayed CUDA graph cannot bake in: lr and
 * beta1 read from lr_beta1[0..1] (device doubles, written before each replay;
 * a->lr and a->beta1 are ignored), and, when max_norm > 0, the clipping
 * coefficient min(max_norm / (sqrt(*sumsq) + 1e-6), 1) from the device's sum
 * of squares (dt_cuda_sumsq) instead of a->grad_scale. */
int dt_cuda_adamw_dev(struct dt_cuda_ctx *k, float *p, const float *g, float *m, float *v, void *p_lowp, size_t n,
                      const struct dt_cuda_adamw_args *a, const double *lr_beta1, const float *sumsq,
                      float max_norm, int64_t *step, const float *found_inf, const float *inv_from_scale);

/* AMP: g *= 1 / *scale and *found_inf = 1 if any g is inf or nan (torch's
 * _amp_foreach_non_finite_check_and_unscale_; found_inf is only ever raised,
 * so zero it once per step with dt_cuda_zero). */
int dt_cuda_unscale_check(struct dt_cuda_ctx *k, float *g, size_t n, const float *scale, float *found_inf);
/* torch's _amp_update_scale_: backoff on inf, grow after `interval` clean steps. */
int dt_cuda_scaler_update(struct dt_cuda_ctx *k, float *scale, int *growth_tracker, const float *found_inf,
                          float growth, float backoff, int interval);

/* sum of g^2 into *out (fp32, fixed order): the gradient norm for clipping. */
int dt_cuda_sumsq(struct dt_cuda_ctx *k, float *out, const float *g, size_t n);
/* dst = src converted (f32 <-> bf16, or a copy when the types match). */
int dt_cuda_cast(struct dt_cuda_ctx *k, enum dt_cuda_dtype dt, void *dst, enum dt_cuda_dtype st, const void *src,
                 size_t n);
/* out[i] = res[i] + x[i] (x in t, out and res fp32; out may be res). */
int dt_cuda_add_residual(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, float *out, const float *res, const void *x,
                         size_t n);
/* x[0..n) rounded to t's precision in place (nearest even; fp32: nothing). */
int dt_cuda_round(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, float *x, size_t n);
int dt_cuda_zero(struct dt_cuda_ctx *k, void *p, size_t bytes);

#ifdef __cplusplus
}
#endif

#endif
