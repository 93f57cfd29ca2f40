/* transformer_cuda.h - the CUDA kernel library's transformer layers, for
 * GPT-2's GPU half (worker/models/gpt2_cuda.c): GEMMs in GPT-2's weight
 * layouts with fused epilogues, the embedding, LayerNorm, causal
 * self-attention and the row-wise softmax cross-entropy of the classifier.
 *
 * Precision, as PyTorch's bf16 autocast: t (enum dt_cuda_dtype, F32 or BF16)
 * is the type of GEMM inputs and of the activations between layers; the
 * residual stream, its gradient, LayerNorm's statistics and parameters,
 * softmax, the loss, every accumulation and every parameter gradient are
 * fp32.  With t = F32 everything is fp32 (the path tested against the CPU
 * model to 1e-4).
 *
 * Shapes: N = B*T rows (token positions), row-major; C channels; H heads of
 * hd = C/H.  As kernels_cuda.h: everything is enqueued on the context's
 * stream and returns at once (capturable in a CUDA graph); enqueue errors are
 * returned as dtrain errors, kernel errors surface at dt_cuda_sync().
 *
 * Not for allocation (callers own every buffer) or the order of the layers
 * (the model's GPU half).
 */
#ifndef DT_TRANSFORMER_CUDA_H
#define DT_TRANSFORMER_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "worker/cuda/kernels_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- GEMMs (cuBLASLt, through gemm_cuda.c's plan cache) ---- */

/* A weight's layout: Conv1D [in, out] with y = x W (GPT-2's blocks), or
 * nn.Linear [out, in] with y = x W^T (the head tied to wte [Vp, C]). */
enum dt_cuda_wlayout { DT_CUDA_W_IN_OUT, DT_CUDA_W_OUT_IN };

/* out[N,oc] = act(inp[N,ic] W + bias) (+ res_in).
 *   inp and w in t.  act is NONE or GELU_TANH; with GELU_TANH pre_act[N,oc]
 *   (in t) gets the GEMM's output before the activation (backward's input).
 *   res_in NULL: out and bias (may be NULL) in t.
 *   res_in given: out[N,oc] and bias[oc] are fp32 and out = res_in + inp W + bias, the
 *   residual add fused in the GEMM (D = A B + C with C = res_in; out may not be res_in:
 *   backward needs both); act must be NONE. */
int dt_cuda_mm_forward(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, void *out, void *pre_act, const void *inp,
                       const void *w, enum dt_cuda_wlayout wl, const void *bias, const float *res_in, int N,
                       int ic, int oc, enum dt_cuda_act act);

/* dinp[N,ic] (t) = (dout[N,oc] (t) W^T) * act'(pre_act), i.e. the input gradient with the
 * previous layer's activation derivative fused (cuBLASLt DGELU epilogue) when pre_act is
 * given (GELU_TANH's input, [N,ic] in t), plain when NULL. */
int dt_cuda_mm_backward_x(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, void *dinp, const void *dout,
                          const void *w, enum dt_cuda_wlayout wl, const void *pre_act, int N, int ic, int oc);

/* dw (fp32, layout wl) (+)= inp^T dout (IN_OUT: [ic,oc]; OUT_IN: dout^T inp, [oc,ic]);
 * db[oc] (fp32, may be NULL) (+)= sum over rows of dout; += when accumulate.
 * dout and inp in t; accumulation in fp32, in a fixed order (same bits each run). */
int dt_cuda_mm_backward_w(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, float *dw, float *db, const void *dout,
                          const void *inp, enum dt_cuda_wlayout wl, int N, int ic, int oc, bool accumulate);

/* ---- embedding ---- */

/* out[b,t,:] = wte[tok[b,t]] + wpe[t] (fp32 tables, fp32 out [N,C]).  Token ids
 * must lie in [0, V): the host loader refuses a shard holding any other, with
 * the file and byte (worker/data/tokens.c), before a batch reaches the device;
 * the kernel, which is not told V, only keeps a negative id inside the table
 * (row 0). */
int dt_cuda_embed_forward(struct dt_cuda_ctx *k, float *out, const int32_t *tok, const float *wte,
                          const float *wpe, int B, int T, int C);

/* dwte[tok[b,t],:] += dout[b,t,:] (always adds: the tied head wrote dwte first);
 * dwpe[t,:] (+)= sum_b dout[b,t,:].  dout fp32 [N,C].  Deterministic: the rows of
 * one token are summed in position order (no floating-point atomics).  scratch:
 * dt_cuda_embed_scratch_bytes(B*T) bytes of device memory, owned by the caller. */
size_t dt_cuda_embed_scratch_bytes(int N);
int dt_cuda_embed_backward(struct dt_cuda_ctx *k, float *dwte, float *dwpe, const float *dout,
                           const int32_t *tok, int B, int T, int C, bool accumulate, void *scratch);

/* ---- LayerNorm (eps 1e-5, statistics in fp32) ---- */

/* out[N,C] (t) = (inp - mean) * rstd * w + b; mean, rstd [N] fp32 kept for backward
 * (may be NULL in evaluation); inp, w, b fp32. */
int dt_cuda_layernorm_forward(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, void *out, float *mean, float *rstd,
                              const float *inp, const float *w, const float *b, int N, int C);

/* With xhat = (inp - mean) * rstd and g = dout * w (dout [N,C] in t):
 *   dinp += rstd * (g - mean_c(g) - xhat * mean_c(g * xhat))      (fp32 [N,C], always adds)
 *   dw (+)= sum_rows dout * xhat;  db (+)= sum_rows dout             (fp32 [C], fixed order)
 * dinp_t (may be NULL) gets dinp after the add, in t: the residual gradient the
 * GEMMs below read. */
int dt_cuda_layernorm_backward(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, float *dinp, void *dinp_t, float *dw,
                               float *db, const void *dout, const float *inp, const float *w, const float *mean,
                               const float *rstd, int N, int C, bool accumulate);

/* ---- causal self-attention (attention_cuda.cu; its paths attention_mma_cuda.cu, attention_cudnn.cpp) ---- */

/* qkv [B,T,3C] in t (q, k, v side by side, each [H, hd] per position, as GPT-2's
 * c_attn output splits); out [B,T,C] in t (the heads side by side);
 * lse [B,H,T] fp32: each query row's log-sum-exp of its scaled scores, kept for
 * backward (may be NULL in evaluation).  Flash-style: softmax(q k^T / sqrt(hd))
 * over keys <= the query's position, never materialising T x T. */
int dt_cuda_attention_forward(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, void *out, float *lse,
                              const void *qkv, int B, int T, int C, int H);

/* dqkv [B,T,3C] in t from dout [B,T,C] (t), given the forward's qkv, out and lse.
 * Recomputes the probabilities; deterministic (no floating-point atomics)
 * unless DTRAIN_CUDA_ATTN=atomic asks for the faster fp32-atomic dq.
 * scratch: dt_cuda_attention_scratch_bytes(B, T, H) bytes, owned by the caller. */
size_t dt_cuda_attention_scratch_bytes(int B, int T, int H);
int dt_cuda_attention_backward(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, void *dqkv, const void *dout,
                               const void *qkv, const void *out, const float *lse, int B, int T, int C, int H,
                               void *scratch);

/* ---- classifier: softmax cross-entropy over rows (classifier_cuda.cu) ---- */

/* For rows i of logits[N, stride] (t; the first V columns are the vocabulary,
 * the rest padding), in fp32:
 *   row_loss[i] = logsumexp(x_i) - x_i[y_i];  row_hit[i] = argmax(x_i) == y_i   (row_hit may be NULL)
 * and when grad: logits become, in place, the gradient (softmax_i - onehot(y_i)) * dscale * S
 * (S = *loss_scale, or 1 when NULL), padding columns 0.  A target outside [0,V) gives loss 0,
 * no hit and a zero gradient row. */
int dt_cuda_xent_rows(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, void *logits, float *row_loss, int *row_hit,
                      const int32_t *y, int N, int V, int stride, float dscale, const float *loss_scale,
                      bool grad);

/* *loss_sum = sum of row_loss[0..N), *correct = sum of row_hit (row_hit may be NULL: 0),
 * in a fixed order; *loss_acc += *loss_sum when loss_acc is not NULL. */
int dt_cuda_sum_rows(struct dt_cuda_ctx *k, float *loss_sum, int *correct, double *loss_acc,
                     const float *row_loss, const int *row_hit, int N);

/* ---- elementwise ---- */

/* out = gelu_tanh(inp), n values in t (trainer.recompute: gelu, in backward). */
int dt_cuda_gelu_tanh_forward(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, void *out, const void *inp, size_t n);

#ifdef __cplusplus
}
#endif

#endif
