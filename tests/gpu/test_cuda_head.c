/* test_cuda_head.c - the fused head (head_cuda.cu: last layer, softmax
 * cross-entropy and input gradient in one kernel) against the three kernels
 * it replaces (GEMM with bias, dt_cuda_xent, the input-gradient GEMM with
 * act'), which test_cuda_linear.c and test_cuda_optim.c check against CPU
 * references: logits, loss sum, hits, dlogits and dx, for fp32 and bf16,
 * ReLU and GELU, 10 and 32 classes, rows and widths that are not multiples
 * of the block or the warp, a bad label, the AMP scale; a rerun gives the
 * same bits; bad arguments are refused.
 */
#include "tests/gpu/gpu_buffers.h"

struct head_case {
    enum dt_cuda_dtype t;
    enum dt_cuda_act act;
    int B, K, C;
};

static void to_double(double *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = src[i];
}

static double max_abs(const float *v, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fabs(v[i]) > m ? fabs(v[i]) : m;
    return m;
}

/* got against the separate kernels' values, tolerance relative to the largest */
static void compare(const char *what, const struct head_case *c, const void *dgot, const void *dwant, size_t n,
                    double rel)
{
    float *got = malloc(n * 4), *want = malloc(n * 4);
    double *wd = malloc(n * sizeof *wd);
    gt_down(got, dgot, n, c->t);
    gt_down(want, dwant, n, c->t);
    to_double(wd, want, n);
    char name[128];
    snprintf(name, sizeof name, "head %s %s B=%d K=%d C=%d: %s", gt_tname(c->t),
             c->act == DT_CUDA_ACT_RELU ? "relu" : "gelu", c->B, c->K, c->C, what);
    gt_check_close(name, got, wd, n, rel * max_abs(want, n) + 1e-30, 0);
    free(got), free(want), free(wd);
}

static void test_head(struct dt_cuda_ctx *k, struct head_case c)
{
    size_t nx = (size_t)c.B * c.K, nw = (size_t)c.C * c.K, nl = (size_t)c.B * c.C;
    float *hx = gt_random(nx, -1, 1), *hz = gt_random(nx, -3, 3), *hw = gt_random(nw, -0.1f, 0.1f),
          *hb = gt_random((size_t)c.C, -0.5f, 0.5f);
    int32_t *hy = malloc(sizeof *hy * c.B);
    for (int r = 0; r < c.B; r++)
        hy[r] = (int32_t)(gt_uniform(0, 1) * c.C) % c.C;
    hy[1] = c.C; /* a bad label: no loss, no hit, zero gradient */
    void *x = gt_up(hx, nx, c.t), *z = gt_up(hz, nx, c.t), *w = gt_up(hw, nw, c.t), *b = gt_up(hb, c.C, c.t);
    int32_t *y = gt_alloc(sizeof *y * c.B);
    cudaMemcpy(y, hy, sizeof *hy * c.B, cudaMemcpyHostToDevice);
    size_t es = dt_cuda_dtype_size(c.t);
    void *lg1 = gt_alloc(nl * es), *dl1 = gt_alloc(nl * es), *dx1 = gt_alloc(nx * es);
    void *lg2 = gt_alloc(nl * es), *dl2 = gt_alloc(nl * es), *dx2 = gt_alloc(nx * es);
    float *sc = gt_alloc(16), *loss = gt_alloc(16);
    int *hits = gt_alloc(16);
    double *acc = gt_alloc(16);
    float amp = 8.0f, dscale = 1.0f / (float)c.B;
    cudaMemcpy(sc, &amp, 4, cudaMemcpyHostToDevice);
    const void *src = c.act == DT_CUDA_ACT_RELU ? x : z;

    /* the separate kernels */
    int rc = dt_cuda_linear_forward(k, c.t, lg1, NULL, x, w, b, c.B, c.K, c.C, DT_CUDA_ACT_NONE);
    if (rc == 0)
        rc = dt_cuda_xent(k, c.t, dl1, loss + 1, hits + 1, lg1, y, c.B, c.C, dscale, sc);
    if (rc == 0)
        rc = dt_cuda_linear_backward_x(k, c.t, dx1, dl1, w, z, x, c.B, c.K, c.C, c.act);
    /* the fused one */
    struct dt_cuda_head a = {.t = c.t, .B = c.B, .K = c.K, .C = c.C, .x = x, .w = w, .b = b, .src = src, .y = y,
                             .act = c.act, .dscale = dscale, .loss_scale = sc, .logits = lg2, .dl = dl2, .dx = dx2,
                             .loss_sum = loss, .correct = hits, .loss_acc = acc};
    if (rc == 0)
        rc = dt_cuda_head_fused(k, &a);
    if (rc < 0 || dt_cuda_sync(k) < 0) {
        gt_result(0, "head %s B=%d: %s", gt_tname(c.t), c.B, dt_error_last());
        return;
    }
    bool bf = c.t == DT_CUDA_BF16;
    compare("logits", &c, lg2, lg1, nl, bf ? 1e-2 : 1e-5);
    compare("dlogits", &c, dl2, dl1, nl, bf ? 2e-2 : 1e-5);
    compare("dx", &c, dx2, dx1, nx, bf ? 3e-2 : 1e-5);
    float l[2];
    int h[2];
    double ac;
    cudaMemcpy(l, loss, 8, cudaMemcpyDeviceToHost);
    cudaMemcpy(h, hits, 8, cudaMemcpyDeviceToHost);
    cudaMemcpy(&ac, acc, 8, cudaMemcpyDeviceToHost);
    gt_result(fabs(l[0] - l[1]) <= (bf ? 1e-2 : 1e-5) * fabs(l[1]), "head %s B=%d C=%d: loss sum %.7g (separate %.7g)",
              gt_tname(c.t), c.B, c.C, (double)l[0], (double)l[1]);
    gt_result(abs(h[0] - h[1]) <= (bf ? c.B / 50 + 1 : 0), "head %s B=%d C=%d: %d hits (separate %d)", gt_tname(c.t),
              c.B, c.C, h[0], h[1]);
    gt_result(ac == (double)l[0], "head %s B=%d C=%d: the running total got the loss sum", gt_tname(c.t), c.B, c.C);
    float *dlr = malloc(nl * 4);
    gt_down(dlr, dl2, nl, c.t);
    bool zero = true;
    for (int j = 0; j < c.C; j++)
        zero = zero && dlr[(size_t)1 * c.C + j] == 0.0f;
    gt_result(zero, "head %s B=%d C=%d: the row with a bad label has no gradient", gt_tname(c.t), c.B, c.C);
    /* fixed-order sums: the same inputs give the same bits */
    float l2;
    a.loss_acc = NULL;
    a.logits = lg1, a.dl = dl1, a.dx = dx1;
    rc = dt_cuda_head_fused(k, &a);
    gt_down(&l2, loss, 1, DT_CUDA_F32);
    float *dx_a = malloc(nx * 4), *dx_b = malloc(nx * 4);
    gt_down(dx_a, dx1, nx, c.t);
    gt_down(dx_b, dx2, nx, c.t);
    gt_result(rc == 0 && !memcmp(&l2, l, 4) && !memcmp(dx_a, dx_b, nx * 4),
              "head %s B=%d C=%d: a rerun gives the same loss and dx bits", gt_tname(c.t), c.B, c.C);
    free(hx), free(hz), free(hw), free(hb), free(hy), free(dlr), free(dx_a), free(dx_b);
    void *dev[] = {x, z, w, b, y, lg1, dl1, dx1, lg2, dl2, dx2, sc, loss, hits, acc};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
        cudaFree(dev[i]);
}

static void test_refusals(struct dt_cuda_ctx *k)
{
    struct dt_cuda_head a = {.t = DT_CUDA_F32, .B = 4, .K = 8, .C = DT_CUDA_HEAD_MAX_CLASSES + 1};
    gt_result(dt_cuda_head_fused(k, &a) == DT_EINVAL && strstr(dt_error_last(), "classes"),
              "head: more classes than the kernel holds is refused: %s", dt_error_last());
    a.C = 10;
    a.act = DT_CUDA_ACT_RELU;
    gt_result(dt_cuda_head_fused(k, &a) == DT_EINVAL && strstr(dt_error_last(), "source"),
              "head: an activation without its source is refused: %s", dt_error_last());
}

int main(void)
{
    if (gt_need_gpu("test_cuda_head") < 0)
        return 0;
    struct dt_cuda_ctx *k = NULL;
    if (dt_cuda_ctx_create(0, 0, &k) < 0) {
        printf("not ok - dt_cuda_ctx_create: %s\n", dt_error_last());
        return 1;
    }
    /* The separate input gradient as GEMM + act' kernel: the DRELU epilogue
     * would read a ReLU bit mask, which these random inputs do not have. */
    dt_cuda_set_fusion(k, DT_CUDA_FUSE_SEPARATE);
    const enum dt_cuda_dtype types[] = {DT_CUDA_F32, DT_CUDA_BF16};
    for (int i = 0; i < 2; i++) {
        test_head(k, (struct head_case){types[i], DT_CUDA_ACT_RELU, 256, 1024, 10});
        test_head(k, (struct head_case){types[i], DT_CUDA_ACT_RELU, 301, 100, 32});
        test_head(k, (struct head_case){types[i], DT_CUDA_ACT_GELU, 4099, 1024, 10});
        test_head(k, (struct head_case){types[i], DT_CUDA_ACT_GELU, 7, 37, 3});
    }
    test_refusals(k);
    if (dt_cuda_sync(k) < 0)
        gt_result(0, "no kernel error at the end: %s", dt_error_last());
    dt_cuda_ctx_destroy(k);
    return gt_finish();
}
