/* test_cuda_trainer.c - the trainer on the GPU (trainer.device: cuda)
 * against the CPU trainer and against itself, end to end through
 * dt_trainer_create/run on Fashion-MNIST (DTRAIN_FMNIST, default
 * /usr/share/datasets/fashion-mnist):
 *   - fp32 on the GPU follows the CPU trainer (loss, parameters after 30
 *     steps of OneCycle + clipping; AdamW's sign-like first steps amplify
 *     rounding, so parameters get a tolerance on the fraction that differ);
 *   - CUDA graph on and off give identical bits, across an epoch's short last
 *     batch (which runs eagerly) and with gradient accumulation;
 *   - a run stopped at a checkpoint and resumed equals the straight run, bit
 *     for bit (both with DTRAIN_CUDA_TUNE=0: kernels chosen by timing may
 *     differ from run to run in the last bits);
 *   - bf16 and fp16 (fp32 master weights; fp16 with GradScaler's dynamic loss
 *     scale on the device) learn like fp32: test accuracy within 2 points
 *     after 125 steps;
 *   - fp16 overflow: a fixed loss scale of 1e30 makes every step skip
 *     (parameters after 5 and 10 steps are the same bits), and a dynamic scale
 *     starting at 2^40 backs off on its own and still learns.
 */
#include "tests/gpu/gpu_buffers.h"

#include <unistd.h>

#include "base/error.h"
#include "worker/models/model.h"
#include "worker/trainer.h"

struct run {
    float *p;
    size_t n;
    struct dt_metrics_summary s;
};

static char *data_dir(void)
{
    const char *d = getenv("DTRAIN_FMNIST");
    return (char *)(d && *d ? d : "/usr/share/datasets/fashion-mnist");
}

static void spec_for(struct dt_trainer_spec *s, enum dt_device dev, int64_t steps, int batch)
{
    dt_trainer_spec_defaults(s);
    s->model.hidden[0] = 256;
    s->model.hidden[1] = 128;
    s->model.n_hidden = 2;
    s->data.batch_size = batch;
    s->data.workers = 2;
    s->data.path = data_dir();
    s->epochs = 0;
    s->steps = steps;
    s->optimizer.grad_clip = 1.0;
    s->scheduler.type = DT_SCHED_ONECYCLE;
    s->scheduler.max_lr = 3e-3;
    s->checkpoint.every_steps = 0;
    s->checkpoint.resume = DT_RESUME_NEVER;
    s->eval_every_epochs = 0;
    s->log_every_steps = 10;
    s->device = dev;
    s->cuda_graph = false;
}

/* Trains in run_dir (made when NULL) and keeps the final parameters. */
static int train(const struct dt_trainer_spec *s, const char *dir, int64_t stop_after, struct run *r)
{
    char tmp[64] = "/tmp/dtrain-gpu-XXXXXX";
    if (!dir && !(dir = mkdtemp(tmp)))
        return -1;
    struct dt_trainer_options o = {.run_dir = dir, .threads = 4, .quiet = true, .stop_after = stop_after};
    struct dt_trainer *t = NULL;
    int rc = dt_trainer_create(s, &o, &t);
    if (!rc)
        rc = dt_trainer_run(t, &r->s);
    if (!rc) {
        struct dt_model *m = dt_trainer_model(t);
        r->n = m->n_params;
        r->p = malloc(r->n * sizeof *r->p);
        memcpy(r->p, m->params, r->n * sizeof *r->p);
    } else {
        printf("# %s\n", dt_error_last());
    }
    dt_trainer_destroy(t);
    if (dir == tmp) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
        if (system(cmd) != 0)
            printf("# could not remove %s\n", tmp);
    }
    return rc;
}

static bool same_bits(const struct run *a, const struct run *b)
{
    return a->p && b->p && a->n == b->n && memcmp(a->p, b->p, a->n * sizeof *a->p) == 0;
}

/* Fraction of parameters differing by more than tol, and the largest difference. */
static double frac_off(const struct run *a, const struct run *b, double tol, double *worst)
{
    size_t off = 0;
    *worst = 0;
    for (size_t i = 0; i < a->n; i++) {
        double d = fabs((double)a->p[i] - (double)b->p[i]);
        off += !(d <= tol);
        if (!(d <= *worst))
            *worst = d;
    }
    return (double)off / (double)a->n;
}

static void test_cpu_vs_cuda(void)
{
    struct dt_trainer_spec s;
    struct run cpu = {0}, gpu = {0};
    spec_for(&s, DT_DEVICE_CPU, 30, 128);
    int rc = train(&s, NULL, 0, &cpu);
    spec_for(&s, DT_DEVICE_CUDA, 30, 128);
    rc = rc ? rc : train(&s, NULL, 0, &gpu);
    if (rc) {
        gt_result(0, "fp32 cuda vs cpu: a run failed");
        return;
    }
    double rel = fabs(gpu.s.final_loss - cpu.s.final_loss) / fabs(cpu.s.final_loss);
    gt_result(rel < 2e-3, "fp32 cuda vs cpu, 30 steps: final loss %.6f vs %.6f (relative %.1e)",
              gpu.s.final_loss, cpu.s.final_loss, rel);
    double worst, f = frac_off(&gpu, &cpu, 1e-4, &worst);
    gt_result(f < 0.01 && worst < 0.05,
              "fp32 cuda vs cpu, 30 steps: %.4f%% of %zu parameters differ by more than 1e-4 (largest %.2e)",
              100 * f, gpu.n, worst);
    gt_result(fabs(gpu.s.test_accuracy - cpu.s.test_accuracy) < 0.01,
              "fp32 cuda vs cpu: test accuracy %.4f vs %.4f", gpu.s.test_accuracy, cpu.s.test_accuracy);
    free(cpu.p), free(gpu.p);
}

/* 60000 / 512: 117 full batches and a short one, so 125 steps cross an epoch. */
static void test_graph_identical(int accum)
{
    struct dt_trainer_spec s;
    struct run eager = {0}, graph = {0};
    spec_for(&s, DT_DEVICE_CUDA, accum > 1 ? 40 : 125, 512);
    s.ddp.grad_accum = accum;
    int rc = train(&s, NULL, 0, &eager);
    s.cuda_graph = true;
    rc = rc ? rc : train(&s, NULL, 0, &graph);
    gt_result(
        !rc && same_bits(&eager, &graph) && eager.s.final_loss == graph.s.final_loss,
        "cuda graph on and off (grad_accum %d, across an epoch's short batch): identical parameters, loss "
        "%.6f and %.6f",
        accum, eager.s.final_loss, graph.s.final_loss);
    free(eager.p), free(graph.p);
}

static void test_resume(void)
{
    struct dt_trainer_spec s;
    struct run straight = {0}, first = {0}, resumed = {0};
    spec_for(&s, DT_DEVICE_CUDA, 40, 256);
    s.cuda_graph = true;
    int rc = train(&s, NULL, 0, &straight);
    char dir[64] = "/tmp/dtrain-gpu-resume-XXXXXX";
    if (rc || !mkdtemp(dir)) {
        gt_result(0, "resume: the straight run failed");
        return;
    }
    s.checkpoint.every_steps = 20;
    s.checkpoint.resume = DT_RESUME_AUTO;
    rc = train(&s, dir, 20, &first);
    rc = rc ? rc : train(&s, dir, 0, &resumed);
    gt_result(!rc && resumed.s.resumed_from == 20 && same_bits(&straight, &resumed),
              "cuda: stopped at step 20, resumed from its checkpoint (step %lld): the same bits as the "
              "straight run",
              (long long)resumed.s.resumed_from);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        printf("# could not remove %s\n", dir);
    free(straight.p), free(first.p), free(resumed.p);
}

static void test_amp(void)
{
    struct dt_trainer_spec s;
    struct run f32 = {0}, b16 = {0}, f16 = {0};
    spec_for(&s, DT_DEVICE_CUDA, 125, 512);
    s.cuda_graph = true;
    int rc = train(&s, NULL, 0, &f32);
    s.amp.dtype = DT_AMP_BF16;
    int rb = rc ? rc : train(&s, NULL, 0, &b16);
    s.amp.dtype = DT_AMP_FP16;
    int rh = rc ? rc : train(&s, NULL, 0, &f16);
    gt_result(!rb && fabs(b16.s.test_accuracy - f32.s.test_accuracy) < 0.02 && b16.s.test_accuracy > 0.8,
              "bf16 (fp32 master weights) vs fp32 on cuda, 125 steps: test accuracy %.4f vs %.4f, loss %.4f "
              "vs %.4f",
              b16.s.test_accuracy, f32.s.test_accuracy, b16.s.final_loss, f32.s.final_loss);
    gt_result(
        !rh && fabs(f16.s.test_accuracy - f32.s.test_accuracy) < 0.02 && f16.s.test_accuracy > 0.8,
        "fp16 (dynamic loss scale on the device) vs fp32 on cuda, 125 steps: test accuracy %.4f vs %.4f, "
        "loss %.4f vs %.4f",
        f16.s.test_accuracy, f32.s.test_accuracy, f16.s.final_loss, f32.s.final_loss);
    free(f32.p), free(b16.p), free(f16.p);
}

static void test_fp16_overflow(void)
{
    struct dt_trainer_spec s;
    struct run five = {0}, ten = {0}, dyn = {0};
    spec_for(&s, DT_DEVICE_CUDA, 5, 256);
    s.cuda_graph = true;
    s.amp.dtype = DT_AMP_FP16;
    s.amp.dynamic = false;
    s.amp.loss_scale = 1e30;
    int rc = train(&s, NULL, 0, &five);
    s.steps = 10;
    rc = rc ? rc : train(&s, NULL, 0, &ten);
    gt_result(
        !rc && same_bits(&five, &ten) && five.s.test_accuracy < 0.3,
        "fp16 with a fixed loss scale of 1e30: every step overflows and is skipped (same parameters after 5 "
        "and 10 steps, test accuracy %.4f)",
        five.s.test_accuracy);
    s.amp.dynamic = true;
    s.amp.init_scale = 1099511627776.0; /* 2^40: the first ~26 steps overflow */
    s.steps = 125;
    s.data.batch_size = 512;
    rc = train(&s, NULL, 0, &dyn);
    gt_result(
        !rc && dyn.s.test_accuracy > 0.75,
        "fp16 with a dynamic scale from 2^40: it backs off and learns (test accuracy %.4f after 125 steps)",
        dyn.s.test_accuracy);
    free(five.p), free(ten.p), free(dyn.p);
}

int main(void)
{
    if (gt_need_gpu("test_cuda_trainer") < 0)
        return 0;
    if (access(data_dir(), R_OK) != 0) {
        printf("not ok - Fashion-MNIST not found at %s (set DTRAIN_FMNIST)\n1 passed, 1 failed\n",
               data_dir());
        return 1;
    }
    test_cpu_vs_cuda();
    setenv("DTRAIN_CUDA_TUNE", "0", 1);
    test_graph_identical(1);
    test_graph_identical(2);
    test_resume();
    unsetenv("DTRAIN_CUDA_TUNE");
    test_amp();
    test_fp16_overflow();
    return gt_finish();
}
