/* test_trainer.c - the training loop on one process: resuming from a
 * checkpoint gives the same parameters bit for bit as never stopping (across
 * an epoch boundary) and reads the checkpoint once, gradient accumulation equals one big batch, the
 * clipping norm summed behind backward equals one pass after it, the bucket
 * layout, metrics files, and the spec checks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <dlfcn.h>
#include <stdatomic.h>

#include "worker/reducer.h"
#include "trainer_fixture.h"

/* The binary puts its own fopen in front of the C library's to count opens
 * of checkpoint files (the safetensors reader's way in): resuming read the
 * newest file twice, once to find an intact one and once to load it. */
static atomic_int ckpt_opens;

FILE *fopen(const char *path, const char *mode)
{
    static FILE *(*_Atomic next)(const char *, const char *);
    if (!next)
        next = (FILE * (*)(const char *, const char *)) dlsym(RTLD_NEXT, "fopen");
    if (strstr(path, "/checkpoints/step_"))
        atomic_fetch_add(&ckpt_opens, 1);
    return next(path, mode);
}

static void train(const struct dt_trainer_spec *s, const char *dir, int64_t stop_after,
                  struct dt_metrics_summary *res)
{
    struct dt_trainer_options o = {.run_dir = dir, .threads = 1, .stop_after = stop_after, .quiet = true};
    struct dt_trainer *t;
    if (dt_trainer_create(s, &o, &t))
        fail_msg("create: %s", dt_error_last());
    if (dt_trainer_run(t, res))
        fail_msg("run: %s", dt_error_last());
    dt_trainer_destroy(t);
}

static int count_files(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    if (d)
        closedir(d);
    return n;
}

static void resume_equals_uninterrupted(void **state)
{
    (void)state;
    /* batch 512: 118 batches per epoch, so steps 100..130 cross into epoch 1. */
    struct dt_trainer_spec s;
    small_spec(&s, 130, 512);
    s.checkpoint.every_steps = 50;
    s.checkpoint.keep = 2;
    s.checkpoint.resume = DT_RESUME_AUTO;
    s.log_every_steps = 10; /* loss windows line up with the resume point */
    char a[64], b[64];
    scratch_dir(a, sizeof a, "resume-a");
    scratch_dir(b, sizeof b, "resume-b");
    struct dt_metrics_summary ra, rb;
    train(&s, a, 0, &ra);
    train(&s, b, 110, &rb);   /* "killed" at 110: the newest checkpoint is step 100 */
    assert_int_equal(rb.steps, 110);
    atomic_store(&ckpt_opens, 0);
    train(&s, b, 0, &rb);     /* resumes from 100 */
    assert_int_equal(rb.resumed_from, 100);
    assert_int_equal(atomic_load(&ckpt_opens), 1);
    assert_int_equal(rb.steps, 130);
    assert_true(assert_same_params(a, b, 130) > 50000);
    assert_true(ra.final_loss == rb.final_loss);
    /* keep: 2 -> steps 100 and 130 remain. */
    char ck[96];
    snprintf(ck, sizeof ck, "%s/checkpoints", b);
    assert_int_equal(count_files(ck, "step_"), 2);
    rm_rf(a);
    rm_rf(b);
}

static void accumulation_equals_big_batch(void **state)
{
    (void)state;
    struct dt_trainer_spec s;
    small_spec(&s, 6, 256);
    char a[64], b[64], pa[128], pb[128];
    scratch_dir(a, sizeof a, "accum-a");
    scratch_dir(b, sizeof b, "accum-b");
    train(&s, a, 0, NULL);
    s.data.batch_size = 64;
    s.ddp.grad_accum = 4;
    train(&s, b, 0, NULL);
    snprintf(pa, sizeof pa, "%s/checkpoints/step_00000006.safetensors", a);
    snprintf(pb, sizeof pb, "%s/checkpoints/step_00000006.safetensors", b);
    size_t n;
    float *xa = ckpt_params(pa, &n), *xb = ckpt_params(pb, &n);
    double worst = 0, differ = 0;
    for (size_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs((double)xa[i] - xb[i]));
        differ += xa[i] != xb[i];
    }
    /* Same samples, different summation order: AdamW moves each parameter by
     * at most ~lr per step, so agreement far below lr means the same gradients. */
    if (worst > 1e-5)
        fail_msg("accumulated and big-batch parameters differ by %.3g", worst);
    free(xa);
    free(xb);
    rm_rf(a);
    rm_rf(b);
}

static void leave_alone(void *ctx, struct dt_model *m, int64_t step)
{
    (void)ctx, (void)m, (void)step;
}

/* One rank sums the clipping norm behind backward, block by block; a hook
 * after the (absent) all-reduce makes it one pass after backward instead.
 * The two must train the same parameters bit for bit (grad_norm.h). */
static void norm_behind_backward_same_bits(void **state)
{
    (void)state;
    struct dt_trainer_spec s;
    small_spec(&s, 8, 128);
    s.optimizer.grad_clip = 0.05; /* clips every step: the norm's bits reach the parameters */
    char a[64], b[64];
    scratch_dir(a, sizeof a, "norm-a");
    scratch_dir(b, sizeof b, "norm-b");
    train(&s, a, 0, NULL);
    struct dt_trainer_options o = {.run_dir = b, .threads = 1, .quiet = true, .after_reduce = leave_alone};
    struct dt_trainer *t;
    if (dt_trainer_create(&s, &o, &t) || dt_trainer_run(t, NULL))
        fail_msg("%s", dt_error_last());
    dt_trainer_destroy(t);
    assert_same_params(a, b, 8);
    rm_rf(a);
    rm_rf(b);
}

static void metrics_and_summary(void **state)
{
    (void)state;
    struct dt_trainer_spec s;
    small_spec(&s, 20, 128);
    s.log_every_steps = 5;
    char d[64], path[128], line[512];
    scratch_dir(d, sizeof d, "metrics");
    struct dt_metrics_summary r;
    train(&s, d, 0, &r);
    snprintf(path, sizeof path, "%s/metrics.jsonl", d);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    int rows = 0, evals = 0;
    while (fgets(line, sizeof line, f)) {
        if (strstr(line, "\"test_accuracy\""))
            evals++;
        else if (strstr(line, "\"loss\"") && strstr(line, "\"lr\"") && strstr(line, "\"beta1\"") &&
                 strstr(line, "\"grad_norm\"") && strstr(line, "\"samples_per_s\""))
            rows++;
    }
    fclose(f);
    assert_int_equal(rows, 4);
    assert_int_equal(evals, 1);
    snprintf(path, sizeof path, "%s/trainer_summary.json", d);
    assert_int_equal(access(path, R_OK), 0);
    assert_true(r.test_accuracy > 0.5 && r.test_accuracy <= 1);
    assert_true(r.final_loss > 0 && r.final_loss < 2.3);
    assert_true(r.samples_per_s > 0);
    rm_rf(d);
}

static void buckets_first_small_then_cap(void **state)
{
    (void)state;
    /* Tensors of 300k, 1k, 300k, 1k, 10k, 10 floats (like a 2-layer MLP). */
    size_t sizes[6] = {300000, 1000, 300000, 1000, 10000, 10}, bounds[7] = {0};
    for (int i = 0; i < 6; i++)
        bounds[i + 1] = bounds[i] + sizes[i];
    float *g = calloc(bounds[6], sizeof *g);
    struct dt_reducer r;
    /* first bucket 1 MiB = 262144 floats: closes after the 300k tensor (reverse order). */
    assert_int_equal(dt_reducer_init(&r, NULL, g, bounds, NULL, 6, 1 << 20, 25 << 20, true), 0);
    assert_int_equal(r.nb, 2);
    assert_int_equal(r.b[0].hi, bounds[6]);
    assert_int_equal(r.b[0].lo, bounds[2]);
    assert_int_equal(r.b[1].hi, bounds[2]);
    assert_int_equal(r.b[1].lo, 0);
    dt_reducer_release(&r);
    /* Tiny limits: every tensor its own bucket, last first. */
    assert_int_equal(dt_reducer_init(&r, NULL, g, bounds, NULL, 6, 4, 4, true), 0);
    assert_int_equal(r.nb, 6);
    for (int i = 0; i < 6; i++)
        assert_int_equal(r.b[i].lo, bounds[5 - i]);
    dt_reducer_release(&r);
    /* A cut starts a bucket whatever its size: the 300k tensor in two chunks. */
    size_t cb[8] = {0, 100000, 300000, 301000, 601000, 602000, 612000, 612010};
    bool cut[8] = {true, true, false, false, false, false, false, false};
    assert_int_equal(dt_reducer_init(&r, NULL, g, cb, cut, 7, 1 << 20, 25 << 20, true), 0);
    assert_int_equal(r.nb, 3);
    assert_int_equal(r.b[0].lo, cb[3]);
    assert_int_equal(r.b[1].lo, cb[1]);
    assert_int_equal(r.b[1].hi, cb[3]);
    assert_int_equal(r.b[2].lo, 0);
    assert_int_equal(r.b[2].hi, cb[1]);
    /* One process: begin/ready/finish send nothing and succeed. */
    dt_reducer_begin(&r, true);
    dt_reducer_ready(&r, 0, bounds[6]);
    assert_int_equal(dt_reducer_finish(&r), 0);
    dt_reducer_release(&r);
    free(g);
}

static void bad_specs_refused(void **state)
{
    (void)state;
    struct dt_trainer_spec s;
    struct dt_trainer *t;
    struct dt_trainer_options o = {.run_dir = "/tmp", .threads = 1, .quiet = true};
    small_spec(&s, 5, 64);
    s.device = DT_DEVICE_CUDA;
    assert_int_equal(dt_trainer_create(&s, &o, &t), DT_EUNSUPPORTED);
    small_spec(&s, 5, 64);
    s.epochs = 2;
    assert_int_equal(dt_trainer_create(&s, &o, &t), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "exactly one of epochs and steps"));
    small_spec(&s, 5, 64);
    s.data.path = "/nonexistent-data";
    assert_int_equal(dt_trainer_create(&s, &o, &t), DT_ENOTFOUND);
    assert_non_null(strstr(dt_error_last(), "/nonexistent-data/train-images-idx3-ubyte.gz"));
    s.data.path = NULL;
    small_spec(&s, 5, 64);
    s.scheduler.max_lr = 0;
    assert_int_equal(dt_trainer_create(&s, &o, &t), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "max_lr"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(buckets_first_small_then_cap),
        cmocka_unit_test(bad_specs_refused),
        cmocka_unit_test(metrics_and_summary),
        cmocka_unit_test(accumulation_equals_big_batch),
        cmocka_unit_test(norm_behind_backward_same_bits),
        cmocka_unit_test(resume_equals_uninterrupted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
