/* mlp_cuda.c - the MLP on a GPU: its half of worker/cuda/model_cuda.h, built
 * only with CUDA.  Same layers as mlp.c, through the fused Linear kernels of
 * kernels_cuda.h (bias and activation in the GEMM's epilogue; backward's
 * activation derivative fused into the input-gradient GEMM), same arena
 * layout, so the engine's arenas are the host model's.
 *
 * Per layer l (kernels_cuda.h has the math):
 *   forward   h[l] = act(h[l-1] W^T + b), aux[l] the ReLU mask or GELU input
 *   backward  dW, db from dz[l] and the layer input; dz[l-1] = (dz[l] W) * act'
 * dz[last] is the loss's dlogits.  Not for the engine's step, data or
 * optimizer (worker/cuda/engine_*.c).
 */
#include <stdlib.h>

#include "base/error.h"
#include "worker/cuda/model_cuda.h"
#include "worker/models/mlp_internal.h"

struct mlp_dev {
    struct dt_model_cuda_env e;
    const struct dt_mlp *n;                 /* the host model: layer shapes and arena offsets */
    enum dt_cuda_act act;                   /* between hidden layers */
    void **h, **aux, **dz;                  /* per layer, [max_batch, out] in e.t (aux: dt_cuda_aux_bytes) */
    cudaEvent_t dz_ready_ev, wgrad_done_ev; /* with e.kw: the two streams of backward */
};

static int call(cudaError_t e, const char *what)
{
    return e == cudaSuccess ? 0 : dt_cuda_err(e, what);
}

/* The weights the GEMMs read: the 16-bit copy, or the fp32 masters. */
static const void *W(const struct mlp_dev *d, size_t off)
{
    return d->e.plow ? (const void *)((const uint16_t *)d->e.plow + off) : (const void *)(d->e.p + off);
}

static enum dt_cuda_act layer_act(const struct mlp_dev *d, int l)
{
    return l < d->n->n_layers - 1 ? d->act : DT_CUDA_ACT_NONE;
}

static void mlp_cuda_destroy(void *state)
{
    struct mlp_dev *d = state;
    if (!d)
        return;
    for (int l = 0; d->h && l < d->n->n_layers; l++)
        cudaFree(d->h[l]), cudaFree(d->dz[l]), cudaFree(d->aux[l]);
    free(d->h);
    if (d->wgrad_done_ev)
        cudaEventDestroy(d->wgrad_done_ev);
    if (d->dz_ready_ev)
        cudaEventDestroy(d->dz_ready_ev);
    free(d);
}

static int alloc_layers(struct mlp_dev *d)
{
    int nl = d->n->n_layers;
    size_t es = dt_cuda_dtype_size(d->e.t), B = (size_t)d->e.max_batch;
    d->h = calloc(3 * (size_t)nl, sizeof *d->h);
    if (!d->h)
        return dt_error_set(DT_ENOMEM, "cuda mlp: no memory for %d layers", nl);
    d->aux = d->h + nl, d->dz = d->aux + nl;
    int rc = 0;
    for (int l = 0; l < nl && !rc; l++) {
        int out = d->n->layer[l].out;
        if (!(rc = dt_cuda_alloc(&d->h[l], B * (size_t)out * es, "a layer's output")) &&
            !(rc = dt_cuda_alloc(&d->dz[l], B * (size_t)out * es, "a layer's gradient")))
            rc = dt_cuda_alloc(&d->aux[l], dt_cuda_aux_bytes(d->e.t, layer_act(d, l), (int)B, out) + 256,
                               "a layer's aux");
    }
    return rc;
}

static int mlp_cuda_create(const struct dt_model *m, const struct dt_model_cuda_env *env, void **state)
{
    *state = NULL;
    struct mlp_dev *d = calloc(1, sizeof *d);
    if (!d)
        return dt_error_set(DT_ENOMEM, "cuda mlp: no memory");
    d->e = *env;
    d->n = dt_mlp__of(m);
    enum dt_kact a = d->n->layer[0].act; /* NONE when layer 0 is the head */
    d->act = a == DT_KACT_GELU ? DT_CUDA_ACT_GELU : a == DT_KACT_RELU ? DT_CUDA_ACT_RELU : DT_CUDA_ACT_NONE;
    int rc = alloc_layers(d);
    if (!rc && d->e.kw) {
        rc = call(cudaEventCreateWithFlags(&d->dz_ready_ev, cudaEventDisableTiming),
                  "cudaEventCreate (weight-gradient stream)");
        if (!rc)
            rc = call(cudaEventCreateWithFlags(&d->wgrad_done_ev, cudaEventDisableTiming),
                      "cudaEventCreate (weight-gradient stream)");
    }
    if (rc) {
        mlp_cuda_destroy(d);
        return rc;
    }
    *state = d;
    return 0;
}

/* Forward through every layer, then softmax cross-entropy of the logits
 * (fp32 whatever e.t is) in one pass with its gradient when training. */
static int mlp_cuda_forward_loss(void *state, int B, const struct dt_model_cuda_loss *ls)
{
    struct mlp_dev *d = state;
    const struct dt_mlp *n = d->n;
    int rc = 0, last = n->n_layers - 1;
    for (int l = 0; l <= last && rc == 0; l++) {
        const struct dt_mlp_layer *L = &n->layer[l];
        rc = dt_cuda_linear_forward(d->e.k, d->e.t, d->h[l], d->aux[l], l ? d->h[l - 1] : d->e.x, W(d, L->w),
                                    W(d, L->b), B, L->in, L->out, layer_act(d, l));
    }
    if (!rc)
        rc = dt_cuda_xent_acc(d->e.k, d->e.t, ls->backward ? d->dz[last] : NULL, ls->loss_sum, ls->correct,
                              d->h[last], d->e.y, B, n->classes, ls->dscale, ls->loss_scale, ls->loss_acc);
    return rc;
}

/* Layer l backward: dW, db from dz[l] and the layer's input; dz[l-1] =
 * (dz[l] W) * act'(z[l-1]) in one fused call.
 * With a weight-gradient stream, k's stream runs the chain dz[L-1] ->
 * dz[L-2] -> ... and, for each layer, marks dz[l] ready; kw's stream waits
 * for that mark and writes dW, db (and the engine starts the buckets they
 * complete there) while k's goes on to dz[l-1].  Both only read dz[l] and the
 * layer input, and write disjoint buffers.  At B=256 a layer's input-gradient
 * GEMM has 256x1024 outputs, 16 tiles of 128x128 for 132 SMs: beside the
 * weight-gradient GEMMs the GPU is fuller, and backward's critical path is
 * the input-gradient chain alone.  The first layer's weight gradient runs on
 * k's stream itself, which has nothing else left to do by then, beside what
 * kw's still has queued (the head's and layer 1's); k's stream then waits for
 * kw's before layer 0's buckets start (they may hold gradients kw's wrote) and
 * before anything after backward (clipping, the optimizer, the next forward
 * overwriting the inputs). */
static int mlp_cuda_backward(void *state, int B, bool accumulate, dt_model_cuda_ready_fn ready, void *ctx)
{
    struct mlp_dev *d = state;
    const struct dt_mlp *n = d->n;
    cudaStream_t s = dt_cuda_stream(d->e.k);
    int rc = 0;
    for (int l = n->n_layers - 1; l >= 0 && rc == 0; l--) {
        const struct dt_mlp_layer *L = &n->layer[l];
        const void *in = l ? d->h[l - 1] : d->e.x;
        bool side = d->e.kw && l > 0;
        struct dt_cuda_ctx *kw = side ? d->e.kw : d->e.k;
        cudaStream_t sw = dt_cuda_stream(kw);
        if (side)
            rc = dt_cuda_stream_after(sw, s, d->dz_ready_ev, "ordering a weight gradient after its dz");
        if (!rc)
            rc = dt_cuda_linear_backward_w(kw, d->e.t, d->e.g + L->w, d->e.g + L->b, d->dz[l], in, B, L->in,
                                           L->out, accumulate);
        if (!rc && d->e.kw && l == 0) /* k's stream waits for everything queued on kw's so far */
            rc = dt_cuda_stream_after(s, dt_cuda_stream(d->e.kw), d->wgrad_done_ev,
                                      "joining the weight gradients' stream");
        if (!rc && ready)
            rc = ready(ctx, L->w, sw);
        if (!rc && l > 0)
            rc = dt_cuda_linear_backward_x(d->e.k, d->e.t, d->dz[l - 1], d->dz[l], W(d, L->w), d->aux[l - 1],
                                           in, B, L->in, L->out, d->act);
    }
    return rc;
}

const struct dt_model_cuda_ops dt_mlp__cuda = {
    .create = mlp_cuda_create,
    .destroy = mlp_cuda_destroy,
    .forward_loss = mlp_cuda_forward_loss,
    .backward = mlp_cuda_backward,
};
