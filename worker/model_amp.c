/* model_amp.c - the MLP under autocast (bf16 or fp16), as torch.autocast runs it.
 *
 * PyTorch's policy for these ops: a Linear casts its input, weight and bias to
 * the low type and runs the GEMM there with fp32 accumulation, its output is
 * low precision; ReLU/GELU run in the type they are given; cross_entropy
 * casts the logits to fp32.  Backward mirrors it: the gradient entering the
 * logits' cast is rounded to the low type, every layer's dz, dW, db and dx
 * come out of low-precision GEMMs/reductions, and each parameter gradient is
 * cast back to fp32 and accumulated there (the .grad of an fp32 master weight).
 *
 * Low-precision values are kept in float arrays holding exactly
 * representable values: a product of two bf16 (8-bit) or fp16 (11-bit)
 * significands is exact in float, so sgemm over rounded inputs is a
 * low-precision GEMM with fp32 accumulation (OpenBLAS has sbgemm, but
 * Debian's 0.3.21 build leaves it out).  This costs a rounding pass per
 * tensor, not memory savings; on CPU AMP is for testing what CUDA runs fast.
 *
 * Not for the loss scale (grad_scaler.c scales dloss and unscales gradients).
 */
#include "worker/model_amp.h"

#include <stdlib.h>

#include "base/error.h"

int dt_model_set_precision(struct dt_model *m, enum dt_kprec p)
{
    free(m->params_lp);
    m->params_lp = m->x_lp = m->wtmp = m->btmp = m->zeros = NULL;
    m->prec = p;
    if (p == DT_KPREC_F32)
        return 0;
    size_t wmax = 0, widest = 0;
    for (int l = 0; l < m->n_layers; l++) {
        size_t w = (size_t)m->layer[l].out * (size_t)m->layer[l].in;
        wmax = w > wmax ? w : wmax;
        widest = (size_t)m->layer[l].out > widest ? (size_t)m->layer[l].out : widest;
    }
    size_t xin = (size_t)m->max_batch * (size_t)m->in;
    m->params_lp = calloc(m->n_params + xin + wmax + 2 * widest, sizeof(float));
    if (!m->params_lp) {
        m->prec = DT_KPREC_F32;
        return dt_error_set(DT_ENOMEM, "model: no memory for the autocast copies (%zu parameters)", m->n_params);
    }
    m->x_lp = m->params_lp + m->n_params;
    m->wtmp = m->x_lp + xin;
    m->btmp = m->wtmp + wmax;
    m->zeros = m->btmp + widest;
    return 0;
}

/* Layer l:  h = round(act(round(x_lp W_lp^T + b_lp)))  (the GEMM accumulates in
 * fp32; the Linear's output is rounded once, the activation's again; for ReLU
 * the second rounding is exact).  GELU keeps its rounded input z for backward. */
const float *dt_model_amp_forward(struct dt_model *m, const float *x, int B)
{
    const struct dt_kernels *k = m->k;
    enum dt_kprec p = m->prec;
    k->round_lowp(m->params_lp, m->params, m->n_params, p, false);
    k->round_lowp(m->x_lp, x, (size_t)B * (size_t)m->in, p, false);
    const float *in = m->x_lp;
    for (int l = 0; l < m->n_layers; l++) {
        struct dt_model_layer *L = &m->layer[l];
        size_t n = (size_t)B * (size_t)L->out;
        const float *b = m->params_lp + L->b;
        k->matmul_forward(L->h, in, m->params_lp + L->w, B, L->in, L->out);
        if (L->act == DT_KACT_GELU) {
            k->bias_act_forward(NULL, L->z, L->h, b, B, L->out, DT_KACT_NONE);
            k->round_lowp(L->z, L->z, n, p, false);
            k->bias_act_forward(L->z, L->h, L->z, m->zeros, B, L->out, DT_KACT_GELU);
        } else {
            k->bias_act_forward(NULL, L->h, L->h, b, B, L->out, L->act);
        }
        k->round_lowp(L->h, L->h, n, p, false);
        in = L->h;
    }
    return m->layer[m->n_layers - 1].h;
}

/* dz = round(dh * act'(z)), db = round(sum_rows dz), dW = round(dz^T x_lp),
 * dx = round(dz W_lp); db and dW go (+)= into the fp32 gradient arena. */
static void layer_backward(struct dt_model *m, int l, float *dz, int B, int accumulate)
{
    const struct dt_kernels *k = m->k;
    struct dt_model_layer *L = &m->layer[l];
    const float *x = l > 0 ? m->layer[l - 1].h : m->x_lp;
    k->act_bias_backward(dz, m->btmp, dz, L->z, L->h, B, L->out, L->act, false);
    if (L->act == DT_KACT_GELU) { /* gelu' is not exact in the low type: round dz, then sum it again */
        k->round_lowp(dz, dz, (size_t)B * (size_t)L->out, m->prec, false);
        k->act_bias_backward(dz, m->btmp, dz, NULL, NULL, B, L->out, DT_KACT_NONE, false);
    }
    k->round_lowp(m->grads + L->b, m->btmp, (size_t)L->out, m->prec, accumulate);
    k->matmul_backward_w(m->wtmp, dz, x, B, L->in, L->out, false);
    k->round_lowp(m->grads + L->w, m->wtmp, (size_t)L->out * (size_t)L->in, m->prec, accumulate);
}

void dt_model_amp_backward(struct dt_model *m, int B, int accumulate, dt_model_ready_fn ready, void *ctx)
{
    const struct dt_kernels *k = m->k;
    float *dh = m->dlogits;
    k->round_lowp(dh, dh, (size_t)B * (size_t)m->classes, m->prec, false);
    int buf = 0;
    for (int l = m->n_layers - 1; l >= 0; l--) {
        struct dt_model_layer *L = &m->layer[l];
        layer_backward(m, l, dh, B, accumulate);
        if (ready)
            ready(ctx, L->w, L->b + (size_t)L->out);
        if (l > 0) {
            float *dx = m->scratch[buf];
            buf ^= 1;
            k->matmul_backward_x(dx, dh, m->params_lp + L->w, B, L->in, L->out);
            k->round_lowp(dx, dx, (size_t)B * (size_t)L->in, m->prec, false);
            dh = dx;
        }
    }
}
