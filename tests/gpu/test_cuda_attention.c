/* test_cuda_attention.c - GPT-2's causal self-attention on the GPU
 * (worker/cuda/attention_cuda.cu) against a naive CPU reference in double:
 * out, lse and dqkv, in fp32 and bf16, on the paths (the general one for
 * any head size, the tensor-core one for bf16 with hd 64, and that one with
 * dq summed by fp32 atomics from 64- or 128-key tiles; cuDNN's, in bf16 and
 * fp16, deterministic and with atomic dq), with T below, at and
 * past a multiple of the 64-row and 128-key tiles.  Also: two backward runs give
 * the same bits (within tolerance for the atomic dq), bad shapes are refused, and a timing line for GPT-2 124M's
 * shape (a comment, not an assertion).
 *
 * Tolerances: fp32 1e-4 absolute plus 1e-4 relative.  bf16: the reference
 * reads the same bf16-rounded inputs, so what is left is the rounding of the
 * bf16 outputs and, on the tensor-core path, of P and dS before their
 * products: 1e-2 of the largest reference value plus 1e-2 relative (lse,
 * fp32 from exact products: 1e-3).
 */
#include <stdbool.h>

#include "tests/gpu/gpu_buffers.h"
#include "worker/cuda/cuda_internal.h"
#include "worker/cuda/transformer_cuda.h"

struct shape {
    int B, T, C, H;
};

/* ---- the reference: naive causal attention and its backward, in double ---- */

struct ref {
    double *out, *lse, *dqkv;
};

static double dotd(const float *a, const float *b, int n)
{
    double s = 0;
    for (int d = 0; d < n; d++)
        s += (double)a[d] * b[d];
    return s;
}

/* One (b, h): P [T,T] (row i over keys j <= i) into p, then out and lse. */
static void ref_forward_head(const float *qkv, struct shape s, int b, int h, double *p, struct ref *r)
{
    int T = s.T, C = s.C, hd = C / s.H;
    size_t ld = 3 * (size_t)C;
    double scale = 1 / sqrt((double)hd);
    const float *base = qkv + (size_t)b * T * ld + (size_t)h * hd;
    for (int i = 0; i < T; i++) {
        double *pi = p + (size_t)i * T, m = -INFINITY, sum = 0;
        for (int j = 0; j <= i; j++) {
            pi[j] = scale * dotd(base + i * ld, base + j * ld + C, hd);
            m = pi[j] > m ? pi[j] : m;
        }
        for (int j = 0; j <= i; j++)
            sum += exp(pi[j] - m);
        r->lse[((size_t)b * s.H + h) * T + i] = m + log(sum);
        for (int j = 0; j <= i; j++)
            pi[j] = exp(pi[j] - m) / sum;
        double *o = r->out + ((size_t)b * T + i) * C + (size_t)h * hd;
        for (int d = 0; d < hd; d++) {
            double a = 0;
            for (int j = 0; j <= i; j++)
                a += pi[j] * base[j * ld + 2 * C + d];
            o[d] = a;
        }
    }
}

/* dS_ij = P_ij (do_i . v_j - do_i . o_i); dq_i = c sum_j dS_ij k_j,
 * dk_j = c sum_i dS_ij q_i, dv_j = sum_i P_ij do_i. */
static void ref_backward_head(const float *qkv, const float *dout, struct shape s, int b, int h,
                              const double *p, struct ref *r)
{
    int T = s.T, C = s.C, hd = C / s.H;
    size_t ld = 3 * (size_t)C;
    double scale = 1 / sqrt((double)hd);
    const float *base = qkv + (size_t)b * T * ld + (size_t)h * hd;
    double *dbase = r->dqkv + (size_t)b * T * ld + (size_t)h * hd;
    for (int i = 0; i < T; i++) {
        const float *doi = dout + ((size_t)b * T + i) * C + (size_t)h * hd;
        const double *oi = r->out + ((size_t)b * T + i) * C + (size_t)h * hd;
        double D = 0;
        for (int d = 0; d < hd; d++)
            D += doi[d] * oi[d];
        for (int j = 0; j <= i; j++) {
            double pij = p[(size_t)i * T + j];
            double ds = pij * (dotd(doi, base + j * ld + 2 * C, hd) - D) * scale;
            for (int d = 0; d < hd; d++) {
                dbase[i * ld + d] += ds * base[j * ld + C + d];
                dbase[j * ld + C + d] += ds * base[i * ld + d];
                dbase[j * ld + 2 * C + d] += pij * doi[d];
            }
        }
    }
}

static struct ref ref_run(const float *qkv, const float *dout, struct shape s)
{
    size_t nq = (size_t)s.B * s.T * 3 * s.C;
    struct ref r = {calloc((size_t)s.B * s.T * s.C, sizeof(double)),
                    calloc((size_t)s.B * s.H * s.T, sizeof(double)), calloc(nq, sizeof(double))};
    double *p = malloc((size_t)s.T * s.T * sizeof *p);
    for (int b = 0; b < s.B; b++)
        for (int h = 0; h < s.H; h++) {
            ref_forward_head(qkv, s, b, h, p, &r);
            ref_backward_head(qkv, dout, s, b, h, p, &r);
        }
    free(p);
    return r;
}

static void ref_free(struct ref *r)
{
    free(r->out), free(r->lse), free(r->dqkv);
}

/* ---- the GPU side ---- */

struct gpu {
    void *qkv, *dout, *out, *dqkv, *scratch;
    float *lse;
};

static struct gpu gpu_make(float *qkv, float *dout, struct shape s, enum dt_cuda_dtype t)
{
    size_t nq = (size_t)s.B * s.T * 3 * s.C, no = (size_t)s.B * s.T * s.C, es = dt_cuda_dtype_size(t);
    struct gpu g = {gt_up(qkv, nq, t),
                    gt_up(dout, no, t),
                    gt_alloc(no * es),
                    gt_alloc(nq * es),
                    gt_alloc(dt_cuda_attention_scratch_bytes(s.B, s.T, s.H)),
                    gt_alloc((size_t)s.B * s.H * s.T * sizeof(float))};
    return g;
}

static void gpu_free(struct gpu *g)
{
    cudaFree(g->qkv), cudaFree(g->dout), cudaFree(g->out), cudaFree(g->dqkv), cudaFree(g->scratch);
    cudaFree(g->lse);
}

static int gpu_run(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, struct gpu *g, struct shape s)
{
    int rc = dt_cuda_attention_forward(k, t, g->out, g->lse, g->qkv, s.B, s.T, s.C, s.H);
    if (rc == 0)
        rc = dt_cuda_attention_backward(k, t, g->dqkv, g->dout, g->qkv, g->out, g->lse, s.B, s.T, s.C, s.H,
                                        g->scratch);
    if (rc == 0)
        rc = dt_cuda_sync(k);
    return rc;
}

/* What the GPU computed, as floats. */
struct got {
    float *out, *lse, *dqkv;
};

static struct got got_read(const struct gpu *g, struct shape s, enum dt_cuda_dtype t)
{
    size_t nq = (size_t)s.B * s.T * 3 * s.C, no = (size_t)s.B * s.T * s.C, nl = (size_t)s.B * s.H * s.T;
    struct got r = {malloc(no * 4), malloc(nl * 4), malloc(nq * 4)};
    gt_down(r.out, g->out, no, t);
    gt_down(r.lse, g->lse, nl, DT_CUDA_F32);
    gt_down(r.dqkv, g->dqkv, nq, t);
    return r;
}

static void got_free(struct got *r)
{
    free(r->out), free(r->lse), free(r->dqkv);
}

static double max_abs(const double *v, size_t n)
{
    double m = 1e-30;
    for (size_t i = 0; i < n; i++)
        m = fabs(v[i]) > m ? fabs(v[i]) : m;
    return m;
}

static void check(const char *what, const char *label, enum dt_cuda_dtype t, bool is_lse, const float *got,
                  const double *want, size_t n)
{
    char name[200];
    snprintf(name, sizeof name, "attention %s: %s", label, what);
    if (t == DT_CUDA_F32)
        gt_check_close(name, got, want, n, 1e-4, 1e-4);
    else if (is_lse)
        gt_check_close(name, got, want, n, 1e-3, 1e-3);
    else
        gt_check_close(name, got, want, n, 1e-2 * max_abs(want, n), 1e-2);
}

static void check_all(const struct got *g, const struct ref *r, struct shape s, enum dt_cuda_dtype t,
                      const char *label)
{
    size_t nq = (size_t)s.B * s.T * 3 * s.C, no = (size_t)s.B * s.T * s.C, nl = (size_t)s.B * s.H * s.T;
    check("out", label, t, false, g->out, r->out, no);
    check("lse", label, t, true, g->lse, r->lse, nl);
    check("dqkv", label, t, false, g->dqkv, r->dqkv, nq);
}

static void label_of(char *buf, size_t len, struct shape s, enum dt_cuda_dtype t, const char *path)
{
    snprintf(buf, len, "%s %s B=%d T=%d C=%d H=%d (hd %d)", gt_tname(t), path, s.B, s.T, s.C, s.H, s.C / s.H);
}

static float *random_qkv(struct shape s, float amp)
{
    return gt_random((size_t)s.B * s.T * 3 * s.C, -amp, amp);
}

static bool cudnn_path(int path)
{
    return path == DT_CUDA__ATTN_CUDNN || path == DT_CUDA__ATTN_CUDNN_ATOMIC;
}

/* The path that runs for s and t when `path` is asked for (attention_cuda.cu's dispatch). */
static const char *path_name(struct shape s, enum dt_cuda_dtype t, int path)
{
    int hd = s.C / s.H;
    if (cudnn_path(path))
        return t == DT_CUDA_F32 || hd % 8 || s.T < 2 ? "general"
               : path == DT_CUDA__ATTN_CUDNN ? "cuDNN"
                                             : "cuDNN, atomic dq";
    if (path == DT_CUDA__ATTN_SIMPLE || t != DT_CUDA_BF16 || hd != 64)
        return "general";
    return path == DT_CUDA__ATTN_ATOMIC ? "tensor cores, atomic dq"
           : path == DT_CUDA__ATTN_WIDE ? "tensor cores, atomic dq, 128-key tiles"
                                        : "tensor cores";
}

/* One shape and type on the default path (tensor cores where they apply),
 * on the tensor cores' atomic-dq path (DT_CUDA__ATTN_ATOMIC or _WIDE) or
 * through cuDNN (DT_CUDA__ATTN_CUDNN or _CUDNN_ATOMIC). */
static void test_shape(struct dt_cuda_ctx *k, struct shape s, enum dt_cuda_dtype t, float amp, int path)
{
    float *qkv = random_qkv(s, amp), *dout = gt_random((size_t)s.B * s.T * s.C, -1, 1);
    struct gpu g = gpu_make(qkv, dout, s, t); /* rounds qkv and dout to t */
    char label[160];
    const char *name = path_name(s, t, path);
    label_of(label, sizeof label, s, t, name);
    dt_cuda__attention_force_path(path);
    int rc = gpu_run(k, t, &g, s);
    gt_result(rc == 0, "attention %s: runs%s%s", label, rc ? ": " : "", rc ? dt_error_last() : "");
    if (rc == 0) {
        struct ref r = ref_run(qkv, dout, s);
        struct got got = got_read(&g, s, t);
        check_all(&got, &r, s, t, label);
        /* Evaluation (lse NULL): the same output, bit for bit (cuDNN: its
         * inference plan may be another kernel, so within the tolerance). */
        size_t no = (size_t)s.B * s.T * s.C;
        float *again = malloc(no * 4);
        rc = dt_cuda_attention_forward(k, t, g.dqkv, NULL, g.qkv, s.B, s.T, s.C, s.H);
        gt_down(again, g.dqkv, no, t);
        if (strncmp(name, "cuDNN", 5) == 0) {
            double *first = malloc(no * sizeof(double));
            for (size_t i = 0; i < no; i++)
                first[i] = got.out[i];
            check(rc == 0 ? "forward without lse, out as with it" : "forward without lse runs", label, t, false,
                  again, first, rc == 0 ? no : 0);
            if (rc)
                gt_result(0, "attention %s: forward without lse: %s", label, dt_error_last());
            free(first);
        } else {
            gt_result(rc == 0 && memcmp(again, got.out, no * 4) == 0,
                      "attention %s: forward without lse, same out", label);
        }
        free(again);
        got_free(&got);
        ref_free(&r);
    }
    dt_cuda__attention_force_path(DT_CUDA__ATTN_ENV);
    gpu_free(&g);
    free(qkv), free(dout);
}

/* GPT-2 124M's head shape at T = 1024 in bf16: the four paths against the
 * reference and the general path; the same bits from two backward runs
 * where the path promises them (not the atomic dq: there, within bf16's
 * tolerance of the first run). */
static void test_paths(struct dt_cuda_ctx *k)
{
    static const struct {
        int path;
        const char *name;
    } paths[] = {{DT_CUDA__ATTN_SIMPLE, "general"},
                 {DT_CUDA__ATTN_FAST, "tensor cores"},
                 {DT_CUDA__ATTN_ATOMIC, "tensor cores, atomic dq"},
                 {DT_CUDA__ATTN_WIDE, "tensor cores, atomic dq, 128-key tiles"},
                 {DT_CUDA__ATTN_CUDNN, "cuDNN"},
                 {DT_CUDA__ATTN_CUDNN_ATOMIC, "cuDNN, atomic dq"},
                 {DT_CUDA__ATTN_AUTO, "auto (cuDNN with atomic dq where it loads, else tensor cores)"}};
    enum { NP = sizeof paths / sizeof paths[0] };
    struct shape s = {1, 1024, 768, 12};
    enum dt_cuda_dtype t = DT_CUDA_BF16;
    float *qkv = random_qkv(s, 2), *dout = gt_random((size_t)s.B * s.T * s.C, -1, 1);
    struct gpu g = gpu_make(qkv, dout, s, t);
    struct ref r = ref_run(qkv, dout, s);
    struct got got[NP];
    size_t nq = (size_t)s.B * s.T * 3 * s.C;
    struct ref general = {malloc(s.B * s.T * s.C * sizeof(double)), malloc(s.B * s.H * s.T * sizeof(double)),
                          malloc(nq * sizeof(double))};
    for (int p = 0; p < NP; p++) {
        char label[160];
        label_of(label, sizeof label, s, t, paths[p].name);
        dt_cuda__attention_force_path(paths[p].path);
        int rc = gpu_run(k, t, &g, s);
        gt_result(rc == 0, "attention %s: runs%s%s", label, rc ? ": " : "", rc ? dt_error_last() : "");
        got[p] = got_read(&g, s, t);
        check_all(&got[p], &r, s, t, label);
        /* Backward again over a poisoned dqkv: every element rewritten. */
        gt_die_cuda(cudaMemset(g.dqkv, 0x7f, nq * 2), "cudaMemset");
        rc = dt_cuda_attention_backward(k, t, g.dqkv, g.dout, g.qkv, g.out, g.lse, s.B, s.T, s.C, s.H,
                                        g.scratch);
        float *again = malloc(nq * 4);
        gt_down(again, g.dqkv, nq, t);
        if (paths[p].path != DT_CUDA__ATTN_ATOMIC && paths[p].path != DT_CUDA__ATTN_WIDE &&
            paths[p].path != DT_CUDA__ATTN_CUDNN_ATOMIC && paths[p].path != DT_CUDA__ATTN_AUTO) {
            gt_result(rc == 0 && memcmp(again, got[p].dqkv, nq * 4) == 0,
                      "attention %s: a second backward gives the same bits", label);
        } else {
            double worst = 0;
            for (size_t i = 0; i < nq; i++) {
                double d = fabs((double)again[i] - got[p].dqkv[i]) / (fabs(got[p].dqkv[i]) + 1e-2);
                worst = d > worst || d != d ? d : worst;
            }
            gt_result(rc == 0 && worst <= 2e-2, "attention %s: a second backward agrees to %.2g (<= 2e-2)",
                      label, worst);
        }
        free(again);
        if (paths[p].path == DT_CUDA__ATTN_SIMPLE) { /* the reference of the tensor-core paths */
            for (size_t i = 0; i < (size_t)s.B * s.T * s.C; i++)
                general.out[i] = got[p].out[i];
            for (size_t i = 0; i < (size_t)s.B * s.H * s.T; i++)
                general.lse[i] = got[p].lse[i];
            for (size_t i = 0; i < nq; i++)
                general.dqkv[i] = got[p].dqkv[i];
        } else {
            char against[200];
            snprintf(against, sizeof against, "bf16 B=1 T=1024 %s against the general path", paths[p].name);
            check_all(&got[p], &general, s, t, against);
        }
    }
    dt_cuda__attention_force_path(DT_CUDA__ATTN_ENV);
    ref_free(&general);
    for (int p = 0; p < NP; p++)
        got_free(&got[p]);
    ref_free(&r);
    gpu_free(&g);
    free(qkv), free(dout);
}

/* cuDNN's path runs at all here (built in, libcudnn loadable, a plan for
 * GPT-2's shape): one line that says why not, instead of one per shape. */
static bool cudnn_loads(struct dt_cuda_ctx *k)
{
    struct shape s = {1, 64, 768, 12};
    float *qkv = random_qkv(s, 1), *dout = gt_random((size_t)s.B * s.T * s.C, -1, 1);
    struct gpu g = gpu_make(qkv, dout, s, DT_CUDA_BF16);
    dt_cuda__attention_force_path(DT_CUDA__ATTN_CUDNN);
    int rc = gpu_run(k, DT_CUDA_BF16, &g, s);
    dt_cuda__attention_force_path(DT_CUDA__ATTN_ENV);
    gt_result(rc == 0, "attention through cuDNN: builds and runs GPT-2's head shape%s%s", rc ? ": " : "",
              rc ? dt_error_last() : "");
    gpu_free(&g);
    free(qkv), free(dout);
    return rc == 0;
}

static void test_bad_shapes(struct dt_cuda_ctx *k)
{
    static const struct shape bad[] = {{1, 8, 30, 4}, {1, 8, 258, 1}, {0, 8, 64, 1}, {1, 0, 64, 1}};
    void *buf = gt_alloc(1 << 16);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct shape s = bad[i];
        int rf = dt_cuda_attention_forward(k, DT_CUDA_F32, buf, buf, buf, s.B, s.T, s.C, s.H);
        int rb = dt_cuda_attention_backward(k, DT_CUDA_F32, buf, buf, buf, buf, buf, s.B, s.T, s.C, s.H, buf);
        gt_result(rf == DT_EINVAL && rb == DT_EINVAL, "attention B=%d T=%d C=%d H=%d is refused (%s)", s.B,
                  s.T, s.C, s.H, dt_error_last());
    }
    cudaFree(buf);
}

/* ms per forward (ms[0]) and per backward (ms[1]), the means of n of each
 * back to back after one warm-up run. */
static int time_ms(struct dt_cuda_ctx *k, struct gpu *g, struct shape s, int n, double ms[2])
{
    cudaStream_t st = dt_cuda_stream(k);
    cudaEvent_t e[3];
    for (int i = 0; i < 3; i++)
        gt_die_cuda(cudaEventCreate(&e[i]), "cudaEventCreate");
    int rc = gpu_run(k, DT_CUDA_BF16, g, s);
    cudaEventRecord(e[0], st);
    for (int i = 0; i < n && rc == 0; i++)
        rc = dt_cuda_attention_forward(k, DT_CUDA_BF16, g->out, g->lse, g->qkv, s.B, s.T, s.C, s.H);
    cudaEventRecord(e[1], st);
    for (int i = 0; i < n && rc == 0; i++)
        rc = dt_cuda_attention_backward(k, DT_CUDA_BF16, g->dqkv, g->dout, g->qkv, g->out, g->lse, s.B, s.T,
                                        s.C, s.H, g->scratch);
    cudaEventRecord(e[2], st);
    gt_die_cuda(cudaEventSynchronize(e[2]), "cudaEventSynchronize");
    for (int i = 0; i < 2; i++) {
        float t = 0;
        cudaEventElapsedTime(&t, e[i], e[i + 1]);
        ms[i] = rc == 0 ? t / n : -1;
    }
    for (int i = 0; i < 3; i++)
        cudaEventDestroy(e[i]);
    return rc;
}

static void print_timing(struct dt_cuda_ctx *k)
{
    struct shape s = {32, 1024, 768, 12};
    float *qkv = random_qkv(s, 2), *dout = gt_random((size_t)s.B * s.T * s.C, -1, 1);
    struct gpu g = gpu_make(qkv, dout, s, DT_CUDA_BF16);
    double fast[2], atomic[2], wide[2], simple[2], cudnn[2] = {-1, -1}, cudnn_atomic[2] = {-1, -1};
    dt_cuda__attention_force_path(DT_CUDA__ATTN_FAST);
    time_ms(k, &g, s, 20, fast);
    dt_cuda__attention_force_path(DT_CUDA__ATTN_ATOMIC);
    time_ms(k, &g, s, 20, atomic);
    dt_cuda__attention_force_path(DT_CUDA__ATTN_WIDE);
    time_ms(k, &g, s, 20, wide);
    dt_cuda__attention_force_path(DT_CUDA__ATTN_SIMPLE);
    time_ms(k, &g, s, 2, simple);
    dt_cuda__attention_force_path(DT_CUDA__ATTN_CUDNN);
    time_ms(k, &g, s, 20, cudnn);
    dt_cuda__attention_force_path(DT_CUDA__ATTN_CUDNN_ATOMIC);
    time_ms(k, &g, s, 20, cudnn_atomic);
    dt_cuda__attention_force_path(DT_CUDA__ATTN_ENV);
    printf("# attention B=32 T=1024: fwd %.3f ms, bwd %.3f ms (fast); bwd %.3f ms (atomic dq); "
           "bwd %.3f ms (atomic dq, 128-key tiles); fwd+bwd %.3f ms simple; "
           "cuDNN fwd %.3f ms, bwd %.3f ms, bwd %.3f ms (atomic dq) (-1: did not run)\n",
           fast[0], fast[1], atomic[1], wide[1], simple[0] + simple[1], cudnn[0], cudnn[1], cudnn_atomic[1]);
    gpu_free(&g);
    free(qkv), free(dout);
}

int main(void)
{
    if (gt_need_gpu("test_cuda_attention") < 0)
        return 0;
    struct dt_cuda_ctx *k = NULL;
    if (dt_cuda_ctx_create(0, 0, &k) < 0) {
        printf("not ok - dt_cuda_ctx_create: %s\n", dt_error_last());
        return 1;
    }
    static const struct shape shapes[] = {
        {3, 8, 32, 2},    /* hd 16, the CPU fixtures' */
        {2, 32, 48, 4},   /* hd 12 */
        {2, 40, 256, 2},  /* hd 128, the largest */
        {1, 1, 64, 1},    /* one position */
        {2, 64, 128, 2},  /* hd 64, one whole tile */
        {2, 65, 128, 2},  /* one row past it */
        {2, 100, 768, 12}, /* GPT-2's heads, T not a tile multiple */
        {2, 128, 128, 2},  /* one whole 128-key tile */
        {1, 257, 128, 2}   /* two and one row past */
    };
    /* fp32, bf16, bf16 with the atomic dq from 64- and from 128-key tiles */
    static const int paths[] = {DT_CUDA__ATTN_ENV, DT_CUDA__ATTN_ENV, DT_CUDA__ATTN_ATOMIC, DT_CUDA__ATTN_WIDE};
    for (int ti = 0; ti < 4; ti++) {
        enum dt_cuda_dtype t = ti ? DT_CUDA_BF16 : DT_CUDA_F32;
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            test_shape(k, shapes[i], t, 2, paths[ti]);
        /* Peaked softmax: the running max moves across tiles by large steps. */
        test_shape(k, (struct shape){2, 200, 128, 2}, t, 4, paths[ti]);
    }
    /* cuDNN's fused attention in bf16 on every shape but hd 12 (the general
     * path's), fp16 and the atomic dq on a few: each shape is a plan to build. */
    if (cudnn_loads(k)) {
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            if ((shapes[i].C / shapes[i].H) % 8 == 0)
                test_shape(k, shapes[i], DT_CUDA_BF16, 2, DT_CUDA__ATTN_CUDNN);
        test_shape(k, shapes[6], DT_CUDA_F16, 2, DT_CUDA__ATTN_CUDNN);
        test_shape(k, shapes[2], DT_CUDA_F16, 2, DT_CUDA__ATTN_CUDNN);
        test_shape(k, shapes[6], DT_CUDA_BF16, 2, DT_CUDA__ATTN_CUDNN_ATOMIC);
        test_shape(k, shapes[8], DT_CUDA_BF16, 2, DT_CUDA__ATTN_CUDNN_ATOMIC);
    }
    test_paths(k);
    test_bad_shapes(k);
    print_timing(k);
    dt_cuda_ctx_destroy(k);
    return gt_finish();
}
