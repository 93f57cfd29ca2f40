/* test_cuda_optim.c - the CUDA kernels after the GEMMs against CPU
 * references: fused softmax cross-entropy (fp32 and bf16 logits, few and many
 * classes, a bad label, the AMP scale, bit-identical reruns), AdamW (torch's
 * reference vector from docs/reference, a large odd-sized arena, the skipped
 * step on found_inf, the bf16 copy), the AMP unscale/inf check and scale
 * update (torch's GradScaler rules), and the sum of squares.
 */
#include "tests/gpu/gpu_buffers.h"

static void test_xent(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, int B, int C)
{
    size_t n = (size_t)B * C;
    float *x = gt_random(n, -4, 4);
    int32_t *y = malloc(sizeof *y * B);
    for (int r = 0; r < B; r++)
        y[r] = (int32_t)(gt_uniform(0, 1) * C) % C;
    y[3] = -1; /* a bad label: no loss, no gradient, not a hit */
    void *dx = gt_up(x, n, t);
    int32_t *dy = gt_alloc(sizeof *dy * B);
    cudaMemcpy(dy, y, sizeof *y * B, cudaMemcpyHostToDevice);
    float scale = 4.0f, dscale = 1.0f / B;
    float *dscale_amp = gt_alloc(4), *dloss = gt_alloc(4);
    int *dcorrect = gt_alloc(4);
    cudaMemcpy(dscale_amp, &scale, 4, cudaMemcpyHostToDevice);
    void *ddl = gt_alloc(n * dt_cuda_dtype_size(t));
    int rc = dt_cuda_xent(k, t, ddl, dloss, dcorrect, dx, dy, B, C, dscale, dscale_amp);
    if (rc < 0)
        gt_result(0, "xent: %s", dt_error_last());
    double loss = 0, *dlr = malloc(n * sizeof *dlr);
    int correct = 0;
    for (int r = 0; r < B; r++) {
        const float *xr = x + (size_t)r * C;
        int am = 0;
        for (int j = 1; j < C; j++)
            if (xr[j] > xr[am])
                am = j;
        double m = xr[am], s = 0;
        for (int j = 0; j < C; j++)
            s += exp(xr[j] - m);
        bool ok = y[r] >= 0 && y[r] < C;
        if (ok) {
            loss += log(s) - (xr[y[r]] - m);
            correct += am == y[r];
        }
        for (int j = 0; j < C; j++)
            dlr[(size_t)r * C + j] = ok ? (exp(xr[j] - m) / s - (j == y[r])) * dscale * scale : 0;
    }
    float gl;
    int gc;
    gt_down(&gl, dloss, 1, DT_CUDA_F32);
    cudaMemcpy(&gc, dcorrect, 4, cudaMemcpyDeviceToHost);
    gt_result(fabs(gl - loss) <= 1e-5 * fabs(loss) + 1e-4, "xent %s B=%d C=%d: loss sum %.7g (reference %.7g)",
              gt_tname(t), B, C, (double)gl, loss);
    gt_result(gc == correct, "xent %s B=%d C=%d: %d hits (reference %d)", gt_tname(t), B, C, gc, correct);
    float *dl = malloc(n * 4);
    gt_down(dl, ddl, n, t);
    char name[96];
    snprintf(name, sizeof name, "xent %s B=%d C=%d: dlogits", gt_tname(t), B, C);
    double tol = t == DT_CUDA_BF16 ? 1e-2 : 1e-5;
    gt_check_close(name, dl, dlr, n, tol * scale * dscale, tol);
    /* The reduction order is fixed: the same input gives the same bits. */
    float gl2;
    dt_cuda_xent(k, t, NULL, dloss, dcorrect, dx, dy, B, C, dscale, NULL);
    gt_down(&gl2, dloss, 1, DT_CUDA_F32);
    gt_result(!memcmp(&gl, &gl2, 4), "xent %s B=%d C=%d: a rerun gives the same loss bits", gt_tname(t), B, C);
    free(x), free(y), free(dlr), free(dl);
    cudaFree(dx), cudaFree(dy), cudaFree(dscale_amp), cudaFree(dloss), cudaFree(dcorrect), cudaFree(ddl);
}

/* docs/reference trainer.md 4: torch's AdamW, 6 params x 5 steps, fp64 values. */
static void test_adamw_reference(struct dt_cuda_ctx *k)
{
    float p[6] = {1, -2, 0.5f, 0, 3e-3f, -7.5f}, zero[6] = {0};
    const float base[6] = {0.1f, -0.2f, 0.3f, -0.4f, 1e-4f, 2.0f}, s[5] = {3, 1, 0.5f, 0.2f, 0.1f};
    const double want[6] = {0.997582859792446,    -1.99753286073735,    0.497607859219005,
                            0.00236714129017046, 0.000632818848463755, -7.50199214881213};
    float *dp = gt_up(p, 6, DT_CUDA_F32), *dm = gt_up(zero, 6, DT_CUDA_F32), *dv = gt_up(zero, 6, DT_CUDA_F32);
    float *dg = gt_alloc(24);
    int64_t *dstep = gt_alloc(8);
    struct dt_cuda_adamw_args a = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 1e-2,
                                   .grad_scale = 1};
    for (int t = 0; t < 5; t++) {
        float g[6];
        for (int i = 0; i < 6; i++)
            g[i] = base[i] * s[t] * (t % 2 ? -1.0f : 1.0f);
        cudaMemcpy(dg, g, 24, cudaMemcpyHostToDevice);
        if (dt_cuda_adamw(k, dp, dg, dm, dv, NULL, 6, &a, dstep, NULL, NULL) < 0)
            gt_result(0, "adamw: %s", dt_error_last());
    }
    float got[6];
    int64_t step = 0;
    gt_down(got, dp, 6, DT_CUDA_F32);
    cudaMemcpy(&step, dstep, 8, cudaMemcpyDeviceToHost);
    gt_check_close("adamw fp32: torch's 5-step reference vector", got, want, 6, 2e-7, 2e-6);
    gt_result(step == 5, "adamw: the device step count is %lld after 5 steps", (long long)step);
    cudaFree(dp), cudaFree(dm), cudaFree(dv), cudaFree(dg), cudaFree(dstep);
}

/* A large, odd-sized arena with clipping, AMP unscaling, found_inf and the bf16 copy. */
static void test_adamw_arena(struct dt_cuda_ctx *k)
{
    const size_t n = 1000003;
    const float amp = 8.0f, clip = 0.5f;
    float *p = gt_random(n, -1, 1), *g = gt_random(n, -1, 1), *z = calloc(n, 4);
    double *pr = malloc(n * 8), *mr = calloc(n, 8), *vr = calloc(n, 8);
    for (size_t i = 0; i < n; i++)
        pr[i] = p[i];
    float *dp = gt_up(p, n, DT_CUDA_F32), *dm = gt_up(z, n, DT_CUDA_F32), *dv = gt_up(z, n, DT_CUDA_F32);
    for (size_t i = 0; i < n; i++)
        g[i] *= amp; /* gradients of a scaled loss */
    float *dg = gt_up(g, n, DT_CUDA_F32), *dscale = gt_alloc(4), *dinf = gt_alloc(4);
    cudaMemcpy(dscale, &amp, 4, cudaMemcpyHostToDevice);
    void *dlow = gt_alloc(n * 2);
    int64_t *dstep = gt_alloc(8);
    struct dt_cuda_adamw_args a = {.lr = 3e-3, .beta1 = 0.85, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1,
                                   .grad_scale = clip};
    for (int t = 1; t <= 3; t++) {
        dt_cuda_adamw(k, dp, dg, dm, dv, dlow, n, &a, dstep, dinf, dscale);
        double bc1 = 1 - pow(a.beta1, t), bc2 = 1 - pow(a.beta2, t);
        for (size_t i = 0; i < n; i++) {
            double gi = (double)g[i] / amp * clip;
            pr[i] *= 1 - a.lr * a.weight_decay;
            mr[i] += (1 - a.beta1) * (gi - mr[i]);
            vr[i] = a.beta2 * vr[i] + (1 - a.beta2) * gi * gi;
            pr[i] -= a.lr / bc1 * mr[i] / (sqrt(vr[i]) / sqrt(bc2) + a.eps);
        }
    }
    float *got = malloc(n * 4);
    gt_down(got, dp, n, DT_CUDA_F32);
    gt_check_close("adamw fp32 arena of 1000003 (clip, AMP unscale) after 3 steps", got, pr, n, 1e-6, 1e-5);
    float *low = malloc(n * 4);
    gt_down(low, dlow, n, DT_CUDA_BF16);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += low[i] != gt_from_bf16(gt_to_bf16(got[i]));
    gt_result(bad == 0, "adamw: the bf16 copy is bf16(p) everywhere (%zu differ)", bad);
    /* found_inf set: nothing moves, the step count stays. */
    float one = 1.0f;
    cudaMemcpy(dinf, &one, 4, cudaMemcpyHostToDevice);
    dt_cuda_adamw(k, dp, dg, dm, dv, dlow, n, &a, dstep, dinf, dscale);
    float *after = malloc(n * 4);
    int64_t step = 0;
    gt_down(after, dp, n, DT_CUDA_F32);
    cudaMemcpy(&step, dstep, 8, cudaMemcpyDeviceToHost);
    gt_result(!memcmp(after, got, n * 4) && step == 3, "adamw: a step with found_inf changes nothing (step %lld)",
              (long long)step);
    free(p), free(g), free(z), free(pr), free(mr), free(vr), free(got), free(low), free(after);
    cudaFree(dp), cudaFree(dm), cudaFree(dv), cudaFree(dg), cudaFree(dscale), cudaFree(dinf), cudaFree(dlow);
    cudaFree(dstep);
}

static void test_amp(struct dt_cuda_ctx *k)
{
    const size_t n = 4099;
    float *g = gt_random(n, -100, 100);
    float scale = 1024.0f, zero = 0;
    float *dg = gt_up(g, n, DT_CUDA_F32), *ds = gt_alloc(4), *dinf = gt_alloc(4);
    int *dtrack = gt_alloc(4);
    cudaMemcpy(ds, &scale, 4, cudaMemcpyHostToDevice);
    dt_cuda_unscale_check(k, dg, n, ds, dinf);
    float *got = malloc(n * 4), found = -1;
    double *want = malloc(n * 8);
    for (size_t i = 0; i < n; i++)
        want[i] = (double)g[i] * (float)(1.0 / 1024.0);
    gt_down(got, dg, n, DT_CUDA_F32);
    gt_down(&found, dinf, 1, DT_CUDA_F32);
    gt_check_close("amp unscale: g / scale", got, want, n, 0, 1e-7);
    gt_result(found == 0.0f, "amp: finite gradients leave found_inf at 0");
    float inf = INFINITY;
    cudaMemcpy(dg + 77, &inf, 4, cudaMemcpyHostToDevice);
    dt_cuda_unscale_check(k, dg, n, ds, dinf);
    gt_down(&found, dinf, 1, DT_CUDA_F32);
    gt_result(found == 1.0f, "amp: one inf raises found_inf");
    /* GradScaler.update: inf -> scale * 0.5, tracker 0; 2 clean steps with interval 2 -> * 2. */
    dt_cuda_scaler_update(k, ds, dtrack, dinf, 2.0f, 0.5f, 2);
    float s1;
    gt_down(&s1, ds, 1, DT_CUDA_F32);
    cudaMemcpy(dinf, &zero, 4, cudaMemcpyHostToDevice);
    dt_cuda_scaler_update(k, ds, dtrack, dinf, 2.0f, 0.5f, 2);
    float s2;
    gt_down(&s2, ds, 1, DT_CUDA_F32);
    dt_cuda_scaler_update(k, ds, dtrack, dinf, 2.0f, 0.5f, 2);
    float s3;
    gt_down(&s3, ds, 1, DT_CUDA_F32);
    gt_result(s1 == 512.0f && s2 == 512.0f && s3 == 1024.0f,
              "amp scale update: backoff on inf, growth after the interval (%g %g %g)", (double)s1, (double)s2,
              (double)s3);
    free(g), free(got), free(want);
    cudaFree(dg), cudaFree(ds), cudaFree(dinf), cudaFree(dtrack);
}

static void test_sumsq_cast(struct dt_cuda_ctx *k)
{
    const size_t n = 777777;
    float *g = gt_random(n, -1, 1);
    float *dg = gt_up(g, n, DT_CUDA_F32), *dout = gt_alloc(4);
    dt_cuda_sumsq(k, dout, dg, n);
    double want = 0;
    for (size_t i = 0; i < n; i++)
        want += (double)g[i] * g[i];
    float got;
    gt_down(&got, dout, 1, DT_CUDA_F32);
    gt_check_close("sumsq of 777777 values", &got, &want, 1, 0, 1e-5);
    /* From a 4-byte offset (the scalar path; 16-byte loads need alignment), and the same bits again. */
    dt_cuda_sumsq(k, dout, dg + 1, n - 1);
    float off, again;
    gt_down(&off, dout, 1, DT_CUDA_F32);
    want -= (double)g[0] * g[0];
    gt_check_close("sumsq of 777776 values at a 4-byte offset", &off, &want, 1, 0, 1e-5);
    dt_cuda_sumsq(k, dout, dg, n);
    gt_down(&again, dout, 1, DT_CUDA_F32);
    gt_result(again == got, "sumsq: the same bits twice (%.9g %.9g)", (double)got, (double)again);
    void *dlow = gt_alloc(n * 2);
    float *back = gt_alloc(n * 4), *h = malloc(n * 4);
    dt_cuda_cast(k, DT_CUDA_BF16, dlow, DT_CUDA_F32, dg, n);
    dt_cuda_cast(k, DT_CUDA_F32, back, DT_CUDA_BF16, dlow, n);
    gt_down(h, back, n, DT_CUDA_F32);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += h[i] != gt_from_bf16(gt_to_bf16(g[i]));
    gt_result(bad == 0, "cast fp32 -> bf16 -> fp32 rounds to nearest even (%zu differ)", bad);
    /* In place, as DTRAIN_CUDA_ROUNDING=autocast rounds gpt2's weight gradients: bf16 and fp16 (GCC's
     * _Float16 rounds to nearest even too), fp32 untouched; g[0..3] are a tie, huge and tiny values. */
    g[0] = 1.0f + 1.0f / 256, g[1] = 3e38f, g[2] = 1e-30f, g[3] = -0.0f;
    const enum dt_cuda_dtype rt[] = {DT_CUDA_BF16, DT_CUDA_F16, DT_CUDA_F32};
    for (int r = 0; r < 3; r++) {
        gt_die_cuda(cudaMemcpy(back, g, n * 4, cudaMemcpyHostToDevice), "cudaMemcpy up");
        int rc = dt_cuda_round(k, rt[r], back, n);
        gt_down(h, back, n, DT_CUDA_F32);
        bad = 0;
        for (size_t i = 0; i < n; i++) {
            float want1 = rt[r] == DT_CUDA_BF16  ? gt_from_bf16(gt_to_bf16(g[i]))
                          : rt[r] == DT_CUDA_F16 ? (float)(_Float16)g[i]
                                                 : g[i];
            bad += memcmp(&h[i], &want1, 4) != 0;
        }
        gt_result(rc == 0 && bad == 0, "dt_cuda_round to %s in place, to nearest even (%zu differ)",
                  gt_tname(rt[r]), bad);
    }
    /* out = res + a bf16 branch (the unfused residual add of autocast rounding), in place on res. */
    float *xr = malloc(n * 4), *res = gt_random(n, -1, 1);
    memcpy(xr, g, n * 4);
    void *dx = gt_up(xr, n, DT_CUDA_BF16); /* xr: the bf16 values, as floats */
    gt_die_cuda(cudaMemcpy(back, res, n * 4, cudaMemcpyHostToDevice), "cudaMemcpy up");
    int rc = dt_cuda_add_residual(k, DT_CUDA_BF16, back, back, dx, n);
    gt_down(h, back, n, DT_CUDA_F32);
    bad = 0;
    for (size_t i = 0; i < n; i++) {
        float want1 = res[i] + xr[i];
        bad += memcmp(&h[i], &want1, 4) != 0;
    }
    gt_result(rc == 0 && bad == 0, "dt_cuda_add_residual: fp32 residual + bf16 branch, in place (%zu differ)", bad);
    free(xr), free(res);
    cudaFree(dx);
    free(g), free(h);
    cudaFree(dg), cudaFree(dout), cudaFree(dlow), cudaFree(back);
}

int main(void)
{
    if (gt_need_gpu("test_cuda_optim") < 0)
        return 0;
    struct dt_cuda_ctx *k = NULL;
    if (dt_cuda_ctx_create(0, 0, &k) < 0) {
        printf("not ok - dt_cuda_ctx_create: %s\n", dt_error_last());
        return 1;
    }
    const enum dt_cuda_dtype types[] = {DT_CUDA_F32, DT_CUDA_BF16};
    for (int i = 0; i < 2; i++) {
        test_xent(k, types[i], 300, 10);
        test_xent(k, types[i], 4096, 10);
        test_xent(k, types[i], 67, 1000);
    }
    test_adamw_reference(k);
    test_adamw_arena(k);
    test_amp(k);
    test_sumsq_cast(k);
    if (dt_cuda_sync(k) < 0)
        gt_result(0, "no kernel error at the end: %s", dt_error_last());
    dt_cuda_ctx_destroy(k);
    return gt_finish();
}
