/* test_cuda_linear.c - the CUDA Linear layer (cuBLASLt with fused epilogues)
 * against a CPU reference in double, for fp32 and bf16 and every activation:
 * forward (h and aux), the input gradient with the previous layer's act'
 * fused, the weight gradient with the bias gradient from BGRADB, and
 * accumulation.  Shapes include sizes that are not multiples of 8 or 128
 * (the ReLU mask pads columns to 128 bits) and MNIST's 784 -> 10 head.
 *
 * Tolerances: fp32 2e-5 of the largest reference value (plus 2e-5 relative);
 * bf16 1e-2 of it (plus 1e-2 relative): inputs are the same rounded values on
 * both sides, so what is left is fp32 accumulation order and the rounding of
 * the bf16 output.
 */
#include "tests/gpu/gpu_buffers.h"

static double act_ref(double z, enum dt_cuda_act a)
{
    switch (a) {
    case DT_CUDA_ACT_RELU: return z > 0 ? z : 0;
    case DT_CUDA_ACT_GELU: return 0.5 * z * (1 + erf(z / sqrt(2.0)));
    case DT_CUDA_ACT_GELU_TANH: return 0.5 * z * (1 + tanh(sqrt(2 / M_PI) * (z + 0.044715 * z * z * z)));
    default: return z;
    }
}

/* act'(z) (for ReLU from h, whose sign is z's). */
static double act_grad_ref(double src, enum dt_cuda_act a)
{
    switch (a) {
    case DT_CUDA_ACT_RELU: return src > 0 ? 1 : 0;
    case DT_CUDA_ACT_GELU: return 0.5 * (1 + erf(src / sqrt(2.0))) + src * exp(-0.5 * src * src) / sqrt(2 * M_PI);
    case DT_CUDA_ACT_GELU_TANH: {
        double k0 = sqrt(2 / M_PI), th = tanh(k0 * (src + 0.044715 * src * src * src));
        return 0.5 * (1 + th) + 0.5 * src * (1 - th * th) * k0 * (1 + 3 * 0.044715 * src * src);
    }
    default: return 1;
    }
}

static const char *act_name(enum dt_cuda_act a)
{
    static const char *const n[] = {"none", "relu", "gelu", "gelu_tanh"};
    return n[a];
}

static double max_abs(const double *v, size_t n)
{
    double m = 1e-30;
    for (size_t i = 0; i < n; i++)
        m = fabs(v[i]) > m ? fabs(v[i]) : m;
    return m;
}

static void check(const char *what, enum dt_cuda_dtype t, const float *got, const double *want, size_t n)
{
    double tol = t == DT_CUDA_BF16 ? 1e-2 : 2e-5;
    gt_check_close(what, got, want, n, tol * max_abs(want, n), tol);
}

struct layer {
    int B, in, out;
    float *x, *w, *b;     /* host copies, rounded to the type */
    void *dx, *dw, *db;   /* device */
};

static void layer_make(struct layer *L, enum dt_cuda_dtype t, int B, int in, int out)
{
    L->B = B, L->in = in, L->out = out;
    float r = 1.0f / sqrtf((float)in);
    L->x = gt_random((size_t)B * in, -2, 2);
    L->w = gt_random((size_t)out * in, -r, r);
    L->b = gt_random((size_t)out, -r, r);
    L->dx = gt_up(L->x, (size_t)B * in, t);
    L->dw = gt_up(L->w, (size_t)out * in, t);
    L->db = gt_up(L->b, (size_t)out, t);
}

static void layer_free(struct layer *L)
{
    free(L->x), free(L->w), free(L->b);
    cudaFree(L->dx), cudaFree(L->dw), cudaFree(L->db);
}

/* z = x W^T + b in double. */
static double *ref_z(const struct layer *L)
{
    double *z = malloc(sizeof *z * (size_t)L->B * L->out);
    for (int r = 0; r < L->B; r++)
        for (int o = 0; o < L->out; o++) {
            double s = L->b[o];
            for (int i = 0; i < L->in; i++)
                s += (double)L->x[(size_t)r * L->in + i] * L->w[(size_t)o * L->in + i];
            z[(size_t)r * L->out + o] = s;
        }
    return z;
}

/* Runs the forward of L; returns h and (GELU) z as the GPU computed them. */
static void forward(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, struct layer *L, enum dt_cuda_act act, float *h,
                    float *zgot, void **aux_out, void **h_out)
{
    size_t n = (size_t)L->B * L->out;
    void *dh = gt_alloc(n * dt_cuda_dtype_size(t));
    void *aux = gt_alloc(dt_cuda_aux_bytes(t, act, L->B, L->out) + 16);
    int rc = dt_cuda_linear_forward(k, t, dh, aux, L->dx, L->dw, L->db, L->B, L->in, L->out, act);
    if (rc < 0)
        gt_result(0, "linear forward %s %s: %s", gt_tname(t), act_name(act), dt_error_last());
    gt_down(h, dh, n, t);
    if (zgot && (act == DT_CUDA_ACT_GELU || act == DT_CUDA_ACT_GELU_TANH))
        gt_down(zgot, aux, n, t);
    *aux_out = aux;
    *h_out = dh;
}

static void test_forward(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, enum dt_cuda_act act, int B, int in, int out)
{
    struct layer L;
    layer_make(&L, t, B, in, out);
    size_t n = (size_t)B * out;
    float *h = malloc(n * 4), *z = malloc(n * 4);
    void *aux, *dh;
    forward(k, t, &L, act, h, z, &aux, &dh);
    double *zr = ref_z(&L), *hr = malloc(n * sizeof *hr);
    for (size_t i = 0; i < n; i++)
        hr[i] = act_ref(zr[i], act);
    char name[128];
    snprintf(name, sizeof name, "linear forward %s %s %dx%d->%d: h", gt_tname(t), act_name(act), B, in, out);
    check(name, t, h, hr, n);
    if (act == DT_CUDA_ACT_GELU || act == DT_CUDA_ACT_GELU_TANH) {
        snprintf(name, sizeof name, "linear forward %s %s %dx%d->%d: aux = z", gt_tname(t), act_name(act), B, in,
                 out);
        check(name, t, z, zr, n);
    }
    free(h), free(z), free(zr), free(hr);
    cudaFree(aux), cudaFree(dh);
    layer_free(&L);
}

/* Layer 0 (in0 -> in, act_prev) feeds layer 1 (in -> out); checks layer 1's
 * backward: dz0 = (dz1 W1) * act_prev'(z0), dW1 = dz1^T h0, db1 = sum dz1. */
static void test_backward(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, enum dt_cuda_act act_prev, int B, int in0,
                          int in, int out)
{
    struct layer L0, L1;
    layer_make(&L0, t, B, in0, in);
    layer_make(&L1, t, B, in, out);
    size_t nh = (size_t)B * in, nd = (size_t)B * out;
    float *h0 = malloc(nh * 4), *z0 = malloc(nh * 4);
    void *aux0, *dh0;
    forward(k, t, &L0, act_prev, h0, z0, &aux0, &dh0);
    float *dz1 = gt_random(nd, -1, 1);
    void *ddz1 = gt_up(dz1, nd, t);
    void *ddz0 = gt_alloc(nh * dt_cuda_dtype_size(t));
    float *ddw = gt_alloc((size_t)out * in * 4), *ddb = gt_alloc((size_t)out * 4);
    int rc = dt_cuda_linear_backward_x(k, t, ddz0, ddz1, L1.dw, aux0, dh0, B, in, out, act_prev);
    if (rc == 0)
        rc = dt_cuda_linear_backward_w(k, t, ddw, ddb, ddz1, dh0, B, in, out, false);
    if (rc < 0)
        gt_result(0, "linear backward %s %s: %s", gt_tname(t), act_name(act_prev), dt_error_last());
    double *dz0r = malloc(nh * sizeof(double)), *dwr = calloc((size_t)out * in, sizeof(double));
    double *dbr = calloc((size_t)out, sizeof(double));
    for (int r = 0; r < B; r++)
        for (int i = 0; i < in; i++) {
            double s = 0;
            for (int o = 0; o < out; o++)
                s += (double)dz1[(size_t)r * out + o] * L1.w[(size_t)o * in + i];
            double src = act_prev == DT_CUDA_ACT_RELU ? h0[(size_t)r * in + i] : z0[(size_t)r * in + i];
            dz0r[(size_t)r * in + i] = s * act_grad_ref(src, act_prev);
        }
    for (int r = 0; r < B; r++)
        for (int o = 0; o < out; o++) {
            double g = dz1[(size_t)r * out + o];
            dbr[o] += g;
            for (int i = 0; i < in; i++)
                dwr[(size_t)o * in + i] += g * h0[(size_t)r * in + i];
        }
    float *got = malloc(((size_t)out * in > nh ? (size_t)out * in : nh) * 4);
    char name[160];
    snprintf(name, sizeof name, "linear backward_x %s act_prev=%s %d->%d: dz_prev", gt_tname(t), act_name(act_prev),
             in, out);
    gt_down(got, ddz0, nh, t);
    check(name, t, got, dz0r, nh);
    snprintf(name, sizeof name, "linear backward_w %s %dx%d: dW", gt_tname(t), out, in);
    gt_down(got, ddw, (size_t)out * in, DT_CUDA_F32);
    check(name, t, got, dwr, (size_t)out * in);
    snprintf(name, sizeof name, "linear backward_w %s %dx%d: db (BGRADB)", gt_tname(t), out, in);
    gt_down(got, ddb, (size_t)out, DT_CUDA_F32);
    check(name, t, got, dbr, (size_t)out);
    /* Accumulation doubles both. */
    rc = dt_cuda_linear_backward_w(k, t, ddw, ddb, ddz1, dh0, B, in, out, true);
    for (size_t i = 0; i < (size_t)out * in; i++)
        dwr[i] *= 2;
    for (int o = 0; o < out; o++)
        dbr[o] *= 2;
    snprintf(name, sizeof name, "linear backward_w %s %dx%d accumulate: dW and db", gt_tname(t), out, in);
    gt_down(got, ddw, (size_t)out * in, DT_CUDA_F32);
    check(name, t, got, dwr, (size_t)out * in);
    gt_down(got, ddb, (size_t)out, DT_CUDA_F32);
    check(name, t, got, dbr, (size_t)out);
    free(h0), free(z0), free(dz1), free(dz0r), free(dwr), free(dbr), free(got);
    cudaFree(aux0), cudaFree(dh0), cudaFree(ddz1), cudaFree(ddz0), cudaFree(ddw), cudaFree(ddb);
    layer_free(&L0), layer_free(&L1);
}

int main(void)
{
    if (gt_need_gpu("test_cuda_linear") < 0)
        return 0;
    struct dt_cuda_ctx *k = NULL;
    if (dt_cuda_ctx_create(0, 0, &k) < 0) {
        printf("not ok - dt_cuda_ctx_create: %s\n", dt_error_last());
        return 1;
    }
    const enum dt_cuda_dtype types[] = {DT_CUDA_F32, DT_CUDA_BF16};
    for (int ti = 0; ti < 2; ti++) {
        enum dt_cuda_dtype t = types[ti];
        for (int a = DT_CUDA_ACT_NONE; a <= DT_CUDA_ACT_GELU_TANH; a++) {
            test_forward(k, t, (enum dt_cuda_act)a, 64, 96, 80);
            test_forward(k, t, (enum dt_cuda_act)a, 33, 784, 200);
        }
        test_forward(k, t, DT_CUDA_ACT_NONE, 256, 1024, 10);
    }
    /* Backward in each way it can run: timed choice, epilogue, GEMM + own
     * kernel, own kernel (narrow layers), on wide and narrow layers. */
    static const char *const ways[] = {"auto", "epilogue", "separate", "own"};
    for (int f = DT_CUDA_FUSE_AUTO; f <= DT_CUDA_FUSE_OWN; f++) {
        dt_cuda_set_fusion(k, (enum dt_cuda_fusion)f);
        printf("# backward: %s\n", ways[f]);
        for (int ti = 0; ti < 2; ti++)
            for (int a = DT_CUDA_ACT_NONE; a <= DT_CUDA_ACT_GELU_TANH; a++) {
                test_backward(k, types[ti], (enum dt_cuda_act)a, 64, 40, 96, 80);
                test_backward(k, types[ti], (enum dt_cuda_act)a, 37, 24, 200, 10);
                test_backward(k, types[ti], (enum dt_cuda_act)a, 300, 16, 72, 20);
            }
        test_backward(k, DT_CUDA_BF16, DT_CUDA_ACT_RELU, 4096, 64, 1024, 10);
        /* The MLP (784-1024-1024-10) at batch 256. */
        test_backward(k, DT_CUDA_BF16, DT_CUDA_ACT_RELU, 256, 784, 1024, 1024);
        test_backward(k, DT_CUDA_BF16, DT_CUDA_ACT_RELU, 256, 1024, 1024, 10);
        test_backward(k, DT_CUDA_F32, DT_CUDA_ACT_RELU, 256, 1024, 1024, 10);
    }
    int fb = dt_cuda_fallbacks(k);
    printf("# cuBLASLt epilogue fallbacks to own kernels: %d\n", fb);
    dt_cuda_ctx_destroy(k);
    return gt_finish();
}
