/* test_trainer_amp.c - the training loop under trainer.amp: an overflow on
 * one rank skips the step on every rank (parameters stay identical, AdamW's
 * step count does not advance); an fp16 run with a moving loss scale resumes
 * bit for bit (the scaler's state is in the checkpoint) and logs loss_scale
 * and skipped_steps (metrics.jsonl and TensorBoard); bf16 reaches fp32's Fashion-MNIST accuracy within half a
 * point after one epoch from the same seed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>

#include "test_comm_harness.h"
#include "trainer_fixture.h"

static long long ckpt_meta(const char *path, const char *key)
{
    struct dt_safetensors f;
    if (dt_safetensors_read(path, &f))
        fail_msg("%s", dt_error_last());
    const char *v = dt_safetensors_meta(&f, key);
    if (!v)
        fail_msg("%s: no metadata %s", path, key);
    long long x = atoll(v);
    dt_safetensors_release(&f);
    return x;
}

/* True when one of dir's TensorBoard event files holds the tag (tags are plain bytes in a record). */
static bool tb_has_tag(const char *dir, const char *tag)
{
    DIR *d = opendir(dir);
    bool found = false;
    for (struct dirent *e; d && !found && (e = readdir(d));) {
        if (strncmp(e->d_name, "events.out.tfevents.", 20))
            continue;
        char path[512], buf[1 << 16];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "rb");
        size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
        if (f)
            fclose(f);
        found = memmem(buf, n, tag, strlen(tag)) != NULL;
    }
    if (d)
        closedir(d);
    return found;
}

static int train(const struct dt_trainer_spec *s, struct dt_trainer_options *o, struct dt_metrics_summary *res)
{
    struct dt_trainer *t;
    int rc = dt_trainer_create(s, o, &t);
    if (!rc)
        rc = dt_trainer_run(t, res);
    dt_trainer_destroy(t);
    if (rc)
        fprintf(stderr, "train: %s\n", dt_error_last());
    return rc;
}

struct job {
    struct dt_trainer_spec spec;
    char dir[64];
};

static void overflow_on_rank2(void *ctx, struct dt_model *m, int64_t step)
{
    (void)ctx;
    if (step == 3)
        m->grads[m->n_params / 2] = INFINITY;
}

static int rank_body(struct dt_comm *c, int rank, int world, void *arg)
{
    (void)world;
    struct job *j = arg;
    struct dt_trainer_options o = {.comm = c, .run_dir = j->dir, .threads = 1, .quiet = true};
    if (rank == 2)
        o.after_reduce = overflow_on_rank2;
    return train(&j->spec, &o, NULL);
}

static void one_rank_overflow_skips_everywhere(void **state)
{
    (void)state;
    struct job j;
    small_spec(&j.spec, 6, 32);
    j.spec.amp.dtype = DT_AMP_FP16;
    scratch_dir(j.dir, sizeof j.dir, "amp-ddp");
    /* desync_check_every is 1: a rank that stepped alone would fail the run. */
    assert_int_equal(harness_run(4, "tcp", 60, rank_body, &j), 0);
    char path[128];
    snprintf(path, sizeof path, "%s/checkpoints/step_00000006.safetensors", j.dir);
    assert_int_equal(ckpt_meta(path, "adamw_step"), 5);
    assert_int_equal(ckpt_meta(path, "skipped_steps"), 1);
    rm_rf(j.dir);
}

static void fp16_resume_equals_uninterrupted(void **state)
{
    (void)state;
    struct dt_trainer_spec s;
    small_spec(&s, 40, 128);
    s.amp.dtype = DT_AMP_FP16;
    s.amp.init_scale = 0x1p30;    /* overflows at first: skips and backoffs before training proper */
    s.amp.growth_interval = 7;    /* and grows again within the run */
    s.checkpoint.every_steps = 20;
    s.checkpoint.resume = DT_RESUME_AUTO;
    s.log_every_steps = 10;
    char a[64], b[64], pa[128], pb[128], line[1024];
    scratch_dir(a, sizeof a, "amp-resume-a");
    scratch_dir(b, sizeof b, "amp-resume-b");
    struct dt_trainer_options o = {.run_dir = a, .threads = 1, .quiet = true};
    struct dt_metrics_summary ra, rb;
    assert_int_equal(train(&s, &o, &ra), 0);
    o.run_dir = b;
    o.stop_after = 30;
    assert_int_equal(train(&s, &o, &rb), 0);
    o.stop_after = 0;
    assert_int_equal(train(&s, &o, &rb), 0);
    assert_int_equal(rb.resumed_from, 20);
    snprintf(pa, sizeof pa, "%s/checkpoints/step_00000040.safetensors", a);
    snprintf(pb, sizeof pb, "%s/checkpoints/step_00000040.safetensors", b);
    assert_same_params(a, b, 40);
    long long skipped = ckpt_meta(pa, "skipped_steps");
    assert_true(skipped > 0);
    assert_int_equal(skipped, ckpt_meta(pb, "skipped_steps"));
    assert_int_equal(ckpt_meta(pa, "adamw_step"), 40 - skipped);
    assert_true(ra.final_loss == rb.final_loss && ra.final_loss < 2.0);
    /* metrics.jsonl rows carry the scale and the skip count. */
    snprintf(pa, sizeof pa, "%s/metrics.jsonl", a);
    FILE *f = fopen(pa, "r");
    assert_non_null(f);
    int rows = 0;
    while (fgets(line, sizeof line, f))
        rows += strstr(line, "\"loss_scale\": ") && strstr(line, "\"skipped_steps\": ");
    fclose(f);
    assert_int_equal(rows, 4);
    assert_true(tb_has_tag(a, "train/loss_scale") && tb_has_tag(a, "train/skipped_steps"));
    rm_rf(a);
    rm_rf(b);
}

static double one_epoch(enum dt_amp_dtype amp)
{
    struct dt_trainer_spec s;
    small_spec(&s, 0, 128);
    s.steps = 0;
    s.epochs = 1;
    s.model.hidden[0] = 256;
    s.model.hidden[1] = 128;
    s.amp.dtype = amp;
    s.ddp.desync_check_every = 0;
    char d[64];
    scratch_dir(d, sizeof d, "amp-acc");
    struct dt_trainer_options o = {.run_dir = d, .threads = 2, .quiet = true};
    struct dt_metrics_summary r;
    assert_int_equal(train(&s, &o, &r), 0);
    rm_rf(d);
    return r.test_accuracy;
}

static void bf16_accuracy_matches_fp32(void **state)
{
    (void)state;
    double fp32 = one_epoch(DT_AMP_OFF), bf16 = one_epoch(DT_AMP_BF16);
    printf("one epoch: fp32 %.4f, bf16 %.4f\n", fp32, bf16);
    if (!(fp32 > 0.8) || !(fabs(bf16 - fp32) <= 0.005))
        fail_msg("test accuracy after one epoch: fp32 %.4f, bf16 %.4f (must be within 0.005)", fp32, bf16);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(one_rank_overflow_skips_everywhere),
        cmocka_unit_test(fp16_resume_equals_uninterrupted),
        cmocka_unit_test(bf16_accuracy_matches_fp32),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
