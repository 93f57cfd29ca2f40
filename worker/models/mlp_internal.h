/* mlp_internal.h - the MLP's layout, shared by its CPU half (mlp.c) and its
 * GPU half (mlp_cuda.c).  Not for the trainer: it sees model.h only.
 *
 * Arena layout (PyTorch's parameter order): w0 [h0,in], b0 [h0],
 * w1 [h1,h0], b1, ..., w_last [classes, h_last], b_last.
 */
#ifndef DT_MLP_INTERNAL_H
#define DT_MLP_INTERNAL_H

#include "worker/models/model_internal.h"

struct dt_mlp_layer {
    int in, out;
    size_t w, b;      /* offsets of the weight and the bias in the arenas */
    enum dt_kact act; /* activation after this layer (NONE for the last) */
    float *z, *h;     /* pre-activation (GELU only) and output, [max_batch, out] */
};

struct dt_mlp {
    struct dt_model m; /* first: a struct dt_model * of this model is a struct dt_mlp * */
    int n_layers, in, classes, max_batch;
    struct dt_mlp_layer *layer;
    struct dt_model_tensor *tensors; /* layers.2l.weight, layers.2l.bias per layer l */
    float *acts;                     /* every layer's z and h, the backward scratch and dlogits */
    float *scratch[2];               /* backward ping-pong, [max_batch, widest] */
    float *dlogits;
    /* Autocast: GEMM inputs and outputs, activations and their gradients
     * rounded to m.prec; NULL buffers while prec is F32. */
    float *params_lp;   /* the parameters rounded, refreshed every forward */
    float *x_lp;        /* the input batch rounded, [max_batch, in] */
    float *wtmp, *btmp; /* one layer's weight and bias gradient before rounding */
    float *zeros;       /* [widest]: a zero bias */
};

static inline const struct dt_mlp *dt_mlp__of(const struct dt_model *m)
{
    return (const struct dt_mlp *)m;
}

#endif
