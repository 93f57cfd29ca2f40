/* gpt2_internal.h - GPT-2's layout and its layer kernels, shared by the
 * model (gpt2.c: parameters, activations, the network, the ops) and the
 * layers (gpt2_layers.c: each layer's forward and backward).  Not for the
 * trainer: it sees model.h only.
 *
 * Arena layout (Hugging Face GPT2LMHeadModel's state_dict order, Conv1D
 * weights [in, out] so that y = x W + b): wte [V, C], the padding rows
 * [Vp - V, C] (zero, never in the tensor list), wpe [block, C], then per
 * block ln_1.w, ln_1.b, c_attn.w [C, 3C], c_attn.b, attn.c_proj.w [C, C],
 * attn.c_proj.b, ln_2.w, ln_2.b, c_fc.w [C, 4C], c_fc.b, mlp.c_proj.w
 * [4C, C], mlp.c_proj.b, and last ln_f.w, ln_f.b.
 */
#ifndef DT_GPT2_INTERNAL_H
#define DT_GPT2_INTERNAL_H

#include "worker/models/model_internal.h"

/* Offsets in the arenas of one block's 12 tensors, in arena order. */
enum {
    G_LN1W,
    G_LN1B,
    G_QKVW,
    G_QKVB,
    G_ATTPW,
    G_ATTPB,
    G_LN2W,
    G_LN2B,
    G_FCW,
    G_FCB,
    G_FCPW,
    G_FCPB,
    G_PER_BLOCK
};

/* One block's activations for N = B*T rows.  With trainer.recompute some
 * pointers of different blocks are the same memory (gpt2.c, alloc_acts). */
struct dt_gpt2_acts {
    float *ln1, *ln1_mean, *ln1_rstd; /* ln_1(x) [N,C] and its row statistics [N] */
    float *qkv;                       /* [N,3C] */
    float *att;                       /* [B,H,T,T] causal softmax probabilities (rows t, columns <= t) */
    float *atty;                      /* [N,C] the heads' outputs side by side */
    float *res2;                      /* [N,C] x + attn(ln_1(x)) */
    float *ln2, *ln2_mean, *ln2_rstd; /* ln_2(res2) */
    float *fch;                       /* [N,4C] before GELU */
    float *fch_gelu;                  /* [N,4C] after GELU */
    float *res3;                      /* [N,C] the block's output */
};

struct dt_gpt2 {
    struct dt_model m; /* first: a struct dt_model * of this model is a struct dt_gpt2 * */
    int L, H, C, V, Vp, block, max_batch, seq_len;
    enum dt_recompute recompute;
    size_t wte, wpe, lnfw, lnfb;             /* offsets of the tensors outside the blocks */
    size_t *blk;                             /* [L][G_PER_BLOCK] offsets */
    struct dt_model_tensor *tensors;         /* 2 + 12 L + 2, arena order */
    struct dt_gpt2_acts *acts;               /* [L] */
    float *act_mem;                          /* everything below in one allocation */
    float *encoded;                          /* [N,C] wte[x] + wpe[t], block 0's input */
    float *lnf, *lnf_mean, *lnf_rstd;        /* ln_f of the last block's output */
    float *logits;                           /* [N,Vp]; backward turns it into dlogits in place */
    float *losses;                           /* [2N] per-token loss and hit, summed in order */
    float *proj;                             /* [N,C] a projection's output before its residual add */
    float *dres, *dln, *datty, *dqkv, *dfch; /* backward scratch: [N,C] x3, [N,3C], [N,4C] */
    float *datt;                             /* [B,H,T,T]: the attention gradient, a (b, h) per thread */
    /* Autocast (m.prec != F32): the parameters rounded, refreshed every
     * forward, and one weight gradient before it is rounded and added. */
    float *params_lp, *wtmp;
};

/* ---- the layers (gpt2_layers.c); N = B*T rows, p = the autocast precision ---- */

/* out[b,t] = wte[inp[b,t]] + wpe[t] */
void dt_gpt2__encoder_forward(float *out, const int32_t *inp, const float *wte, const float *wpe, int B,
                              int T, int C);
/* dwte[inp[b,t]] += dout[b,t]; dwpe[t] (+)= sum_b dout[b,t] */
void dt_gpt2__encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int B, int T,
                               int C, bool accumulate);
void dt_gpt2__layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                                const float *b, int N, int C);
/* dinp += the input gradient; dw, db (+)= the parameter gradients */
void dt_gpt2__layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                 const float *w, const float *mean, const float *rstd, int N, int C,
                                 bool accumulate);
/* out[N,oc] = inp[N,ic] W[ic,oc] + b; with b NULL (the tied head) out = inp W^T, W [oc,ic]; rounded to p */
void dt_gpt2__matmul_forward(const struct dt_kernels *k, float *out, const float *inp, const float *w,
                             const float *b, int N, int ic, int oc, enum dt_kprec p);
/* dinp = dout W^T (NULL: not wanted), dW (+)= inp^T dout, db (+)= sum_rows dout (db NULL: the head's
 * layout, as above); under autocast each is rounded to p first (wtmp: room for dW) and added in fp32 */
void dt_gpt2__matmul_backward(const struct dt_kernels *k, float *dinp, float *dw, float *db,
                              const float *dout, const float *inp, const float *w, int N, int ic, int oc,
                              bool accumulate, enum dt_kprec p, float *wtmp);
void dt_gpt2__attention_forward(const struct dt_kernels *k, float *out, float *att, const float *qkv, int B,
                                int T, int C, int H, enum dt_kprec p);
/* dqkv = the gradient of qkv; att is overwritten, datt is [T,T] scratch */
void dt_gpt2__attention_backward(const struct dt_kernels *k, float *dqkv, float *att, float *datt,
                                 const float *dout, const float *qkv, int B, int T, int C, int H,
                                 enum dt_kprec p);
void dt_gpt2__gelu_forward(const struct dt_kernels *k, float *out, const float *inp, size_t n,
                           enum dt_kprec p);
/* dinp = dout * gelu'(inp); dinp may be dout */
void dt_gpt2__gelu_backward(const struct dt_kernels *k, float *dinp, const float *inp, const float *dout,
                            size_t n, enum dt_kprec p);
void dt_gpt2__residual_forward(float *out, const float *a, const float *b, size_t n);
/* Softmax cross-entropy of rows logits[N, stride] over their first V columns against targets; losses
 * ([2N]) gets each row's loss and argmax hit and the sum is returned.  When grad each row becomes its
 * gradient (softmax - onehot) * dscale in place, the columns V.. zero.  *correct (may be NULL) += argmax
 * hits. */
double dt_gpt2__xent(float *logits, float *losses, const int32_t *targets, int N, int V, int stride,
                     float dscale, bool grad, int64_t *correct);

#endif
