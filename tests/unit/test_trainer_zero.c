/* test_trainer_zero.c - ZeRO stage 1 (ddp.zero: 1, worker/zero.h) on forked
 * ranks over tcp and shm: 2 and 3 ranks end with the bits of zero 0, in
 * the parameters and in the checkpoint's whole moments (clipping every step,
 * also under fp16 loss scaling); each rank allocates the moments of its
 * shard only; a checkpoint saved under zero 1 resumes under zero 0 and one
 * saved under zero 0 resumes under zero 1 (other shards than the writer's),
 * bit for bit; device: cuda with zero 1 is no longer refused; the checkpoint writer
 * refuses a shard, and a shard reads its part of a whole file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "test_comm_harness.h"
#include "trainer_fixture.h"
#include "worker/trainer_internal.h"

struct job {
    struct dt_trainer_spec spec;
    const char *backend;
    char dir[64];
    int64_t stop_after; /* 0: run to the end */
    bool keep_dir;      /* leave the run directory for a resume */
    int resumed_check;  /* > 0: the run must have resumed from this step */
};

/* Under zero 1 the optimizer holds its shard's moments: at most a shard of
 * whole norm blocks, 1/W of the arena rounded up to a block. */
static int check_shard(const struct dt_trainer *t, int rank, int world)
{
    size_t n = t->model->n_params, B = DT_GRAD_NORM_BLOCK, blocks = (n + B - 1) / B;
    size_t most = (blocks + (size_t)world - 1) / (size_t)world * B;
    if (!t->opt.own || t->opt.base != t->zero.lo || t->opt.n != t->zero.hi - t->zero.lo || t->opt.n > most ||
        t->zero.lo != ((size_t)rank * most < n ? (size_t)rank * most : n))
        return dt_error_set(DT_EINTERNAL, "rank %d: moments for [%zu, +%zu) of %zu floats, a shard is <= %zu",
                            rank, t->opt.base, t->opt.n, n, most);
    return 0;
}

/* Set-up decided where the averaged gradients live (trainer_update.c):
 * ZeRO-1's shard with zero 1; with zero 0 the host's one copy over shm (with
 * share_state), else the rank's own arena; AMP unscales exactly that part. */
static int check_home(const struct dt_trainer *t, const struct job *j)
{
    bool host = !j->spec.ddp.zero && j->spec.ddp.share_state && !strcmp(j->backend, "shm");
    const char *want = j->spec.ddp.zero ? "zero1" : host ? "host" : "own";
    const float *part = j->spec.ddp.zero ? t->model->grads + t->zero.lo
                        : host           ? t->hs.avg + t->hs.lo
                                         : t->model->grads;
    size_t n = j->spec.ddp.zero ? t->zero.hi - t->zero.lo : host ? t->hs.hi - t->hs.lo : t->model->n_params;
    if (strcmp(t->home->name, want) || t->avg_part != part || t->avg_n != n || (host && !t->hs.avg))
        return dt_error_set(DT_EINTERNAL,
                            "%s with zero %d: the averages live in \"%s\" (%zu floats), want \"%s\" (%zu)",
                            j->backend, j->spec.ddp.zero, t->home->name, t->avg_n, want, n);
    return 0;
}

static int rank_body(struct dt_comm *c, int rank, int world, void *arg)
{
    struct job *j = arg;
    struct dt_trainer_options o = {
        .comm = c, .run_dir = j->dir, .threads = 1, .quiet = true, .stop_after = j->stop_after};
    struct dt_trainer *t;
    int rc = dt_trainer_create(&j->spec, &o, &t);
    if (!rc && j->spec.ddp.zero)
        rc = check_shard(t, rank, world);
    if (!rc)
        rc = check_home(t, j);
    if (!rc)
        rc = dt_trainer_run(t, NULL);
    dt_trainer_destroy(t);
    return rc;
}

static void run_ranks(struct job *j, int world)
{
    if (!j->dir[0])
        scratch_dir(j->dir, sizeof j->dir, "zero");
    assert_int_equal(harness_run(world, j->backend, 60, rank_body, j), 0);
}

/* The tensor `name` of run dir's checkpoint at `step`, copied. */
static float *ckpt_tensor(const char *dir, int64_t step, const char *name, size_t *n)
{
    char path[160];
    snprintf(path, sizeof path, "%s/checkpoints/step_%08lld.safetensors", dir, (long long)step);
    struct dt_safetensors f;
    if (dt_safetensors_read(path, &f))
        fail_msg("%s", dt_error_last());
    const struct dt_st_tensor *t = dt_safetensors_find(&f, name);
    if (!t)
        fail_msg("%s: no %s", path, name);
    *n = (t->end - t->begin) / 4;
    float *out = malloc(t->end - t->begin);
    memcpy(out, t->data, t->end - t->begin);
    dt_safetensors_release(&f);
    return out;
}

/* Runs a and b at their final step have the same parameters and moments, bit for bit. */
static void assert_same_state(const struct job *a, const struct job *b, const char *what)
{
    size_t n = assert_same_params(a->dir, b->dir, (int)a->spec.steps);
    static const char *const moments[] = {"optimizer.exp_avg", "optimizer.exp_avg_sq"};
    for (int k = 0; k < 2; k++) {
        size_t na, nb;
        float *ma = ckpt_tensor(a->dir, a->spec.steps, moments[k], &na);
        float *mb = ckpt_tensor(b->dir, b->spec.steps, moments[k], &nb);
        assert_true(na == nb && na >= n);
        if (memcmp(ma, mb, na * sizeof *ma) != 0)
            fail_msg("%s: %s differs between zero 0 and zero 1", what, moments[k]);
        free(ma);
        free(mb);
    }
}

static void zero1_equals_zero0(void **state)
{
    const char *backend = *state;
    static const struct {
        int world;
        enum dt_amp_dtype amp;
    } cases[] = {{2, DT_AMP_OFF}, {3, DT_AMP_OFF}, {3, DT_AMP_FP16}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        struct job a = {.backend = backend}, b = {.backend = backend};
        small_spec(&a.spec, 6, 32);
        a.spec.model.hidden[0] = 200;      /* 40 norm blocks: shards of 20, or 14, 14 and 12 */
        a.spec.optimizer.grad_clip = 0.05; /* active every step */
        a.spec.amp.dtype = cases[k].amp;
        a.spec.log_every_steps = 2;
        b.spec = a.spec;
        b.spec.ddp.zero = 1;
        run_ranks(&a, cases[k].world);
        run_ranks(&b, cases[k].world);
        char what[64];
        snprintf(what, sizeof what, "%s, %d ranks%s", backend, cases[k].world,
                 cases[k].amp == DT_AMP_FP16 ? ", fp16" : "");
        assert_same_state(&a, &b, what);
        rm_rf(a.dir);
        rm_rf(b.dir);
    }
}

/* Stopped after a checkpoint under one setting and resumed under the other:
 * the bits of a run that never stopped.  The world size stays (the data
 * order's rule); the shards differ between writer and reader. */
static void resume_across_zero(void **state)
{
    const char *backend = *state;
    for (int from = 0; from <= 1; from++) {
        int world = from ? 2 : 3;
        struct job whole = {.backend = backend}, b = {.backend = backend};
        small_spec(&whole.spec, 8, 32);
        whole.spec.checkpoint.every_steps = 4;
        whole.spec.checkpoint.resume = DT_RESUME_AUTO;
        b.spec = whole.spec;
        b.spec.ddp.zero = from;
        b.stop_after = 6; /* the newest checkpoint is step 4 */
        run_ranks(&whole, world);
        run_ranks(&b, world);
        b.spec.ddp.zero = !from;
        b.stop_after = 0;
        run_ranks(&b, world);
        char path[128], buf[4096] = "";
        snprintf(path, sizeof path, "%s/trainer_summary.json", b.dir);
        FILE *f = fopen(path, "r");
        size_t got = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
        buf[got] = 0;
        if (f)
            fclose(f);
        if (!strstr(buf, "\"resumed_from_step\": 4,"))
            fail_msg("%s: did not resume from step 4:\n%s", path, buf);
        char what[64];
        snprintf(what, sizeof what, "%s, %d ranks, saved with zero %d", backend, world, from);
        assert_same_state(&whole, &b, what);
        rm_rf(whole.dir);
        rm_rf(b.dir);
    }
}

/* The CUDA engine shards AdamW's state too (worker/cuda/engine_internal.h):
 * zero 1 on cuda is not refused; without a GPU here the trainer stops for
 * the GPU's sake, not ZeRO's. */
static void accepted_on_cuda(void **state)
{
    (void)state;
    struct dt_trainer_spec spec;
    small_spec(&spec, 2, 32);
    spec.device = DT_DEVICE_CUDA;
    spec.ddp.zero = 1;
    struct dt_trainer_options o = {.run_dir = "/nonexistent", .threads = 1, .quiet = true};
    struct dt_trainer *t = NULL;
    int rc = dt_trainer_create(&spec, &o, &t);
    if (rc == 0) { /* a machine with a GPU */
        dt_trainer_destroy(t);
        return;
    }
    assert_null(t);
    assert_null(strstr(dt_error_last(), "zero"));
    assert_non_null(strstr(dt_error_last(), "cuda"));
}

/* The writer takes whole moments only: a shard handed to it is refused,
 * and nothing is written; a shard of a whole file takes its part. */
static void shard_is_gathered_before_saving(void **state)
{
    (void)state;
    struct dt_model_spec s = {.type = "mlp", .n_hidden = 1, .hidden = {8}};
    struct dt_model_config c = {.spec = &s,
                                .k = &dt_kernels_cpu,
                                .max_batch = 2,
                                .data = {.kind = DT_BATCH_IMAGES, .features = 4, .classes = 3}};
    struct dt_model *m = NULL;
    assert_int_equal(dt_model_create(&c, &m), 0);
    size_t n = m->n_params; /* 4*8+8 + 8*3+3 = 67 */
    struct dt_adamw whole, shard;
    assert_int_equal(dt_adamw_init(&whole, &dt_kernels_cpu, n, 0.999, 1e-8, 0.01), 0);
    for (size_t i = 0; i < n; i++)
        whole.m[i] = (float)i, whole.v[i] = (float)(2 * i);
    assert_int_equal(dt_adamw_init(&shard, &dt_kernels_cpu, 20, 0.999, 1e-8, 0.01), 0);
    shard.base = 30;
    char dir[64];
    scratch_dir(dir, sizeof dir, "zshard");
    struct dt_ckpt_state st = {.step = 1, .world = 2, .batch_size = 4};
    char path[128];
    snprintf(path, sizeof path, "%s/step_00000001.safetensors", dir);
    assert_int_equal(dt_ckpt_save(dir, m, &shard, &st, 0), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "gather them first"));
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(dt_ckpt_save(dir, m, &whole, &st, 0), 0);
    struct dt_ckpt_state back = {.world = 2, .batch_size = 4};
    assert_int_equal(dt_ckpt_load(path, m, &shard, &back), 0);
    for (size_t i = 0; i < 20; i++)
        assert_true(shard.m[i] == (float)(30 + i) && shard.v[i] == (float)(60 + 2 * i));
    rm_rf(dir);
    dt_adamw_release(&whole);
    dt_adamw_release(&shard);
    dt_model_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate(zero1_equals_zero0, "tcp"),
        cmocka_unit_test_prestate(zero1_equals_zero0, "shm"),
        cmocka_unit_test_prestate(resume_across_zero, "tcp"),
        cmocka_unit_test_prestate(resume_across_zero, "shm"),
        cmocka_unit_test(accepted_on_cuda),
        cmocka_unit_test(shard_is_gathered_before_saving),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
