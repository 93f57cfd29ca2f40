/* gpt2_cpu_step.c - time whole GPT-2 training steps of the bundled trainer's
 * model on CPU: forward, backward, the gradient norm and clipping, AdamW
 * (nanoGPT's groups: decay on tensors of 2+ dimensions), from the model and
 * optimizer directly, without the trainer loop (data comes from a fixed
 * random batch: the loader is not what is measured).
 *
 *   gpt2_cpu_step [--layers 6] [--embd 384] [--heads 6] [--vocab 50257] [--seq 256] [--batch 8]
 *                 [--threads N] [--warmup 2] [--steps 10] [--recompute none|gelu|block]
 *
 * Prints "dtrain tokens/s: X" (B T steps / seconds of the timed steps), the
 * CPU seconds per step (all threads) and the last loss; bench/gpt2_cpu_torch.py times PyTorch on the same step and
 * bench/gpt2_cpu.sh runs both.  Not a test (tests/unit/test_gpt2.c is).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "worker/models/model.h"
#include "worker/optim/adamw.h"

struct opts {
    int layers, embd, heads, vocab, seq, batch, threads, warmup, steps;
    enum dt_recompute recompute;
};

static int parse(int argc, char **argv, struct opts *o)
{
    static const char *const names[] = {"--layers", "--embd",    "--heads",  "--vocab", "--seq",
                                        "--batch",  "--threads", "--warmup", "--steps"};
    int *vals[] = {&o->layers, &o->embd,    &o->heads,  &o->vocab, &o->seq,
                   &o->batch,  &o->threads, &o->warmup, &o->steps};
    for (int i = 1; i + 1 < argc; i += 2) {
        int k = 0;
        if (!strcmp(argv[i], "--recompute")) {
            const char *r = argv[i + 1];
            o->recompute = !strcmp(r, "gelu")    ? DT_RECOMPUTE_GELU
                           : !strcmp(r, "block") ? DT_RECOMPUTE_BLOCK
                                                 : DT_RECOMPUTE_NONE;
            continue;
        }
        while (k < 9 && strcmp(argv[i], names[k]))
            k++;
        if (k == 9) {
            fprintf(stderr, "gpt2_cpu_step: unknown option %s\n", argv[i]);
            return 2;
        }
        *vals[k] = atoi(argv[i + 1]);
    }
    return 0;
}

/* One optimizer step: clip by the global norm (1.0), AdamW per tensor with
 * nanoGPT's groups; the step count advances once. */
static void optimizer_step(struct dt_adamw *a, struct dt_model *m, double *blocks, double lr)
{
    const size_t block = 4096;
    size_t nb = (m->n_params + block - 1) / block;
    m->k->sumsq_blocks(blocks, m->grads, m->n_params, block);
    double ss = 0;
    for (size_t i = 0; i < nb; i++)
        ss += blocks[i];
    float coef = dt_adamw_clip_coef(sqrt(ss), 1.0);
    int64_t step = a->step;
    for (int i = 0; i < m->n_tensors; i++) {
        const struct dt_model_tensor *t = &m->tensors[i];
        a->step = step;
        a->weight_decay = t->decay ? 0.1 : 0.0;
        dt_adamw_step_range(a, m->params, m->grads, t->offset, t->offset + dt_model_tensor_numel(t), lr, 0.9,
                            coef);
    }
}

/* CPU seconds of the whole process (all threads): on a shared host the
 * work a step costs, which other load does not inflate as it does the wall
 * clock (spinning BLAS threads count too). */
static double cpu_s(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + (double)u.ru_stime.tv_sec +
           1e-6 * (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

int main(int argc, char **argv)
{
    struct opts o = {6, 384, 6, 50257, 256, 8, 1, 2, 10, DT_RECOMPUTE_NONE};
    if (parse(argc, argv, &o))
        return 2;
    /* the kernels the trainer's ranks run (worker/rank.c does the same) */
    const char *core = dt_kernels_cpu_blas_coretype();
    if (core) {
        setenv("OPENBLAS_CORETYPE", core, 1);
        execv("/proc/self/exe", argv);
    }
    dt_kernels_cpu.set_threads(o.threads);
    struct dt_model_spec s = {.type = "gpt2",
                              .n_layer = o.layers,
                              .n_head = o.heads,
                              .n_embd = o.embd,
                              .vocab_size = o.vocab,
                              .block_size = o.seq};
    struct dt_model_config c = {.spec = &s,
                                .k = &dt_kernels_cpu,
                                .max_batch = o.batch,
                                .seed = 1,
                                .recompute = o.recompute,
                                .data = {.kind = DT_BATCH_TOKENS, .seq_len = o.seq, .vocab = o.vocab}};
    struct dt_model *m;
    struct dt_adamw a;
    if (dt_model_create(&c, &m) || dt_adamw_init(&a, m->k, m->n_params, 0.95, 1e-8, 0.1)) {
        fprintf(stderr, "gpt2_cpu_step: %s\n", dt_error_last());
        return 1;
    }
    size_t n = (size_t)o.batch * (size_t)o.seq;
    int32_t *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    double *blocks = malloc((m->n_params / 4096 + 1) * sizeof *blocks);
    uint64_t r = 88172645463325252ull;
    for (size_t i = 0; i < n; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        x[i] = (int32_t)(r % (uint64_t)o.vocab);
    }
    for (size_t i = 0; i < n; i++)
        y[i] = i + 1 < n ? x[i + 1] : x[0];
    struct dt_batch b = {.kind = DT_BATCH_TOKENS, .n = o.batch, .T = o.seq, .inputs = x, .targets = y};
    double loss = 0, t0 = 0, c0 = 0;
    for (int step = 0; step < o.warmup + o.steps; step++) {
        if (step == o.warmup) {
            t0 = dt_clock_s();
            c0 = cpu_s();
        }
        loss = dt_model_train_batch(m, &b, 1.0f / (float)n, false, NULL, NULL) / (double)n;
        optimizer_step(&a, m, blocks, 6e-4);
    }
    double dt = dt_clock_s() - t0, dc = cpu_s() - c0;
    printf("dtrain params: %zu (padded vocab %d)\n", m->n_params, m->logits_stride);
    printf("dtrain step: %.1f ms\n", 1e3 * dt / o.steps);
    printf("dtrain tokens/s: %.1f\n", (double)n * o.steps / dt);
    printf("dtrain cpu-s/step: %.2f\n", dc / o.steps);
    printf("dtrain loss: %.6f\n", loss);
    free(x);
    free(y);
    free(blocks);
    dt_adamw_release(&a);
    dt_model_destroy(m);
    return 0;
}
