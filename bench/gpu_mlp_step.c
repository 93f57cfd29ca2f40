/* gpu_mlp_step.c - time one whole training step of the MLP
 * (784-1024-1024-10, ReLU, softmax cross-entropy, AdamW) built from
 * worker/cuda/ kernels, eagerly and as one replayed CUDA graph.
 *
 *   gpu_mlp_step --batch 256 --dtype fp32|bf16 [--steps 200] [--profile 1] [--autotune 0]
 *
 * Prints one line per variant: "dtrain <dtype> B=<batch> <eager|graph>: <us>
 * us/step", then the loss after the timed steps (the same fixed batch every
 * step, so it must fall: a quick sign that forward, backward and AdamW agree).
 * --profile 1 adds the GPU time of each kind of op (events between them, eager
 * steps); --autotune 0 keeps cuBLASLt's first heuristic answer per GEMM.
 * bench/gpu_mlp_step_torch.py times PyTorch on the same step; bench/gpu_bench.sh
 * runs both and prints the ratios.  Not a test (tests/gpu/ checks the kernels).
 *
 * Step (as llm.c lays it out: forward layer by layer, then backward in reverse):
 *   h0 = relu(x W0^T + b0)   h1 = relu(h0 W1^T + b1)   logits = h1 W2^T + b2
 *   loss, dlogits = xent(logits, y) / B
 *   dW2, db2 = dlogits^T h1;  dz1 = dlogits W2 * [h1 > 0]
 *   dW1, db1 = dz1^T h0;      dz0 = dz1 W1 * [h0 > 0]
 *   dW0, db0 = dz0^T x;       AdamW over the whole flat arena (and its bf16 copy)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "base/error.h"
#include "worker/cuda/kernels_cuda.h"

#define NL 3
static const int dims[NL + 1] = {784, 1024, 1024, 10};

struct net {
    enum dt_cuda_dtype t;
    int B;
    size_t n, woff[NL], boff[NL];
    float *p, *g, *m, *v;   /* fp32 arenas */
    void *plow;             /* bf16 copy of p (bf16 runs) */
    void *x, *h[NL], *aux[NL], *dz[NL];
    int32_t *y;
    float *loss;
    int *correct;
    int64_t *step;
};

static void die(int rc, const char *what)
{
    if (rc < 0) {
        fprintf(stderr, "gpu_mlp_step: %s: %s\n", what, dt_error_last());
        exit(1);
    }
}

static void *dalloc(size_t bytes)
{
    void *p = NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess || cudaMemset(p, 0, bytes) != cudaSuccess) {
        fprintf(stderr, "gpu_mlp_step: cudaMalloc of %zu bytes failed\n", bytes);
        exit(1);
    }
    return p;
}

static float frand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) / 16777216.0);
}

/* Arena in PyTorch's order w0 b0 w1 b1 w2 b2, nn.Linear's U(-1/sqrt(in), 1/sqrt(in)). */
static void net_init(struct net *N, struct dt_cuda_ctx *k)
{
    size_t es = dt_cuda_dtype_size(N->t);
    N->n = 0;
    for (int l = 0; l < NL; l++) {
        N->woff[l] = N->n;
        N->n += (size_t)dims[l + 1] * dims[l];
        N->boff[l] = N->n;
        N->n += (size_t)dims[l + 1];
    }
    float *hp = malloc(N->n * 4);
    uint64_t s = 42;
    for (int l = 0; l < NL; l++) {
        float r = 1.0f / sqrtf((float)dims[l]);
        for (size_t i = N->woff[l]; i < N->boff[l] + (size_t)dims[l + 1]; i++)
            hp[i] = (2 * frand(&s) - 1) * r;
    }
    N->p = dalloc(N->n * 4), N->g = dalloc(N->n * 4), N->m = dalloc(N->n * 4), N->v = dalloc(N->n * 4);
    cudaMemcpy(N->p, hp, N->n * 4, cudaMemcpyHostToDevice);
    N->plow = N->t == DT_CUDA_BF16 ? dalloc(N->n * 2) : NULL;
    if (N->plow)
        die(dt_cuda_cast(k, DT_CUDA_BF16, N->plow, DT_CUDA_F32, N->p, N->n), "cast params");
    size_t nx = (size_t)N->B * dims[0];
    float *hx = malloc(nx * 4);
    for (size_t i = 0; i < nx; i++)
        hx[i] = frand(&s);
    float *dx32 = dalloc(nx * 4);
    cudaMemcpy(dx32, hx, nx * 4, cudaMemcpyHostToDevice);
    N->x = dalloc(nx * es);
    die(dt_cuda_cast(k, N->t, N->x, DT_CUDA_F32, dx32, nx), "cast input");
    int32_t *hy = malloc(sizeof *hy * N->B);
    for (int i = 0; i < N->B; i++)
        hy[i] = (int32_t)(frand(&s) * 10) % 10;
    N->y = dalloc(sizeof *hy * N->B);
    cudaMemcpy(N->y, hy, sizeof *hy * N->B, cudaMemcpyHostToDevice);
    for (int l = 0; l < NL; l++) {
        N->h[l] = dalloc((size_t)N->B * dims[l + 1] * es);
        N->dz[l] = dalloc((size_t)N->B * dims[l + 1] * es);
        N->aux[l] = dalloc(dt_cuda_aux_bytes(N->t, DT_CUDA_ACT_RELU, N->B, dims[l + 1]) + 256);
    }
    N->loss = dalloc(4), N->correct = dalloc(4), N->step = dalloc(8);
    die(dt_cuda_sync(k), "init");
    free(hp), free(hx), free(hy);
    cudaFree(dx32);
}

/* Weights as the GEMMs read them: the bf16 copy, or the fp32 masters. */
static const void *W(const struct net *N, size_t off)
{
    return N->t == DT_CUDA_BF16 ? (const void *)((const uint16_t *)N->plow + off) : (const void *)(N->p + off);
}

/* Per-op GPU time when profiling: an event after each op, its time charged to
 * the op's kind. */
enum { P_FWD, P_XENT, P_BWD_W, P_BWD_X, P_ADAMW, P_KINDS };
static const char *const kind_name[P_KINDS] = {"forward GEMMs", "softmax xent", "weight-grad GEMMs",
                                                "input-grad GEMMs", "AdamW"};
static struct {
    bool on;
    cudaEvent_t ev[16];
    int kind[16], n;
    double us[P_KINDS];
} prof;

static void mark(struct dt_cuda_ctx *k, int kind)
{
    if (!prof.on || prof.n >= 16)
        return;
    cudaEventRecord(prof.ev[prof.n], dt_cuda_stream(k));
    prof.kind[prof.n++] = kind;
}

static void prof_collect(void)
{
    cudaEventSynchronize(prof.ev[prof.n - 1]);
    for (int i = 1; i < prof.n; i++) {
        float ms = 0;
        cudaEventElapsedTime(&ms, prof.ev[i - 1], prof.ev[i]);
        prof.us[prof.kind[i]] += ms * 1e3;
    }
    prof.n = 0;
}

static int step(struct net *N, struct dt_cuda_ctx *k)
{
    int rc = 0;
    mark(k, P_FWD);
    enum dt_cuda_dtype t = N->t;
    for (int l = 0; l < NL && rc == 0; l++) {
        enum dt_cuda_act act = l < NL - 1 ? DT_CUDA_ACT_RELU : DT_CUDA_ACT_NONE;
        rc = dt_cuda_linear_forward(k, t, N->h[l], N->aux[l], l ? N->h[l - 1] : N->x, W(N, N->woff[l]),
                                    W(N, N->boff[l]), N->B, dims[l], dims[l + 1], act);
        mark(k, P_FWD);
    }
    if (rc == 0)
        rc = dt_cuda_xent(k, t, N->dz[NL - 1], N->loss, N->correct, N->h[NL - 1], N->y, N->B, dims[NL],
                          1.0f / N->B, NULL);
    mark(k, P_XENT);
    for (int l = NL - 1; l >= 0 && rc == 0; l--) {
        const void *in = l ? N->h[l - 1] : N->x;
        rc = dt_cuda_linear_backward_w(k, t, N->g + N->woff[l], N->g + N->boff[l], N->dz[l], in, N->B, dims[l],
                                       dims[l + 1], false);
        mark(k, P_BWD_W);
        if (rc == 0 && l > 0)
            rc = dt_cuda_linear_backward_x(k, t, N->dz[l - 1], N->dz[l], W(N, N->woff[l]), N->aux[l - 1], in, N->B,
                                           dims[l], dims[l + 1], DT_CUDA_ACT_RELU);
        if (l > 0)
            mark(k, P_BWD_X);
    }
    struct dt_cuda_adamw_args a = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 1e-2,
                                   .grad_scale = 1};
    if (rc == 0)
        rc = dt_cuda_adamw(k, N->p, N->g, N->m, N->v, N->plow, N->n, &a, N->step, NULL, NULL);
    mark(k, P_ADAMW);
    return rc;
}

static double time_steps(struct net *N, struct dt_cuda_ctx *k, cudaGraphExec_t exec, int steps)
{
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0), cudaEventCreate(&e1);
    cudaStream_t s = dt_cuda_stream(k);
    cudaEventRecord(e0, s);
    for (int i = 0; i < steps; i++) {
        if (exec)
            cudaGraphLaunch(exec, s);
        else
            die(step(N, k), "step");
    }
    cudaEventRecord(e1, s);
    die(dt_cuda_sync(k), "timed steps");
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    return ms * 1e3 / steps;
}

int main(int argc, char **argv)
{
    struct net N = {.t = DT_CUDA_F32, .B = 256};
    int steps = 200, profile = 0, autotune = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--batch"))
            N.B = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--dtype"))
            N.t = !strcmp(argv[i + 1], "bf16") ? DT_CUDA_BF16 : DT_CUDA_F32;
        else if (!strcmp(argv[i], "--steps"))
            steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--profile"))
            profile = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--autotune"))
            autotune = atoi(argv[i + 1]);
    }
    struct dt_cuda_ctx *k = NULL;
    die(dt_cuda_ctx_create(0, 0, &k), "context");
    dt_cuda_set_autotune(k, autotune != 0);
    net_init(&N, k);
    const char *tn = N.t == DT_CUDA_BF16 ? "bf16" : "fp32";
    for (int i = 0; i < 20; i++) /* warm-up: plans, clocks */
        die(step(&N, k), "warm-up step");
    die(dt_cuda_sync(k), "warm-up");
    float loss0 = 0;
    cudaMemcpy(&loss0, N.loss, 4, cudaMemcpyDeviceToHost);
    double eager = time_steps(&N, k, NULL, steps);
    printf("dtrain %s B=%d eager: %.1f us/step%s\n", tn, N.B, eager, autotune ? "" : " (no autotune)");
    if (profile) {
        prof.on = true;
        for (int i = 0; i < 16; i++)
            cudaEventCreate(&prof.ev[i]);
        for (int i = 0; i < 50; i++) {
            die(step(&N, k), "profiled step");
            prof_collect();
        }
        prof.on = false;
        printf("# dtrain %s B=%d per step:", tn, N.B);
        for (int i = 0; i < P_KINDS; i++)
            printf(" %s %.1f us%s", kind_name[i], prof.us[i] / 50, i + 1 < P_KINDS ? "," : "\n");
    }
    cudaGraph_t g;
    cudaGraphExec_t exec;
    cudaStream_t s = dt_cuda_stream(k);
    if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess)
        die(DT_EIO, "cudaStreamBeginCapture");
    die(step(&N, k), "captured step");
    if (cudaStreamEndCapture(s, &g) != cudaSuccess || cudaGraphInstantiate(&exec, g, 0) != cudaSuccess) {
        fprintf(stderr, "gpu_mlp_step: capturing the step in a CUDA graph failed\n");
        return 1;
    }
    for (int i = 0; i < 10; i++)
        cudaGraphLaunch(exec, s);
    double graph = time_steps(&N, k, exec, steps);
    printf("dtrain %s B=%d graph: %.1f us/step%s\n", tn, N.B, graph, autotune ? "" : " (no autotune)");
    float loss1 = 0;
    int correct = 0;
    cudaMemcpy(&loss1, N.loss, 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(&correct, N.correct, 4, cudaMemcpyDeviceToHost);
    printf("# dtrain %s B=%d: mean loss %.4f after warm-up, %.4f after %d more steps (%d/%d right); "
           "epilogue fallbacks %d\n",
           tn, N.B, loss0 / N.B, loss1 / N.B, 2 * steps + 10, correct, N.B, dt_cuda_fallbacks(k));
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);
    dt_cuda_ctx_destroy(k);
    return loss1 < loss0 ? 0 : 1;
}
