/* test_trainer_ddp.c - data parallelism on forked ranks over the tcp and shm
 * communicators: 4 ranks x batch 64 train like 1 rank x batch 256; bucketed
 * and unbucketed reduction give the same bits, also with a weight written and
 * reduced in row chunks; one copy of the parameters and moments per host
 * (shm) gives the bits of a copy per rank and resumes bit for bit; parameters stay bitwise
 * identical on every rank every step (desync check at every step); a rank
 * whose parameters drift is named in the error. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "test_comm_harness.h"
#include "trainer_fixture.h"

struct job {
    struct dt_trainer_spec spec;
    const char *backend;
    char dir[64];
    int perturb_rank;      /* -1: none */
    int64_t stop_after;    /* 0: run to the end */
    bool keep_dir;         /* run_ranks leaves the run directory (a resume follows) */
    int resumed_check;     /* > 0: the run must have resumed from this step */
    const char *shm_cap;   /* DTRAIN_SHM_MAX_BYTES for rank 1 (no room for its shared buffers) */
    char expect[64];       /* when set, the run must fail with this in the message */
};

static void perturb(void *ctx, struct dt_model *m, int64_t step)
{
    const struct job *j = ctx;
    (void)j;
    if (step == 3)
        m->params[7] += 1e-3f;
}

static int rank_body(struct dt_comm *c, int rank, int world, void *arg)
{
    struct job *j = arg;
    (void)world;
    struct dt_trainer_options o = {.comm = c, .run_dir = j->dir, .threads = 1, .quiet = true,
                                   .stop_after = j->stop_after};
    if (rank == j->perturb_rank)
        o.after_step = perturb, o.ctx = j;
    if (j->shm_cap && rank == 1)
        setenv("DTRAIN_SHM_MAX_BYTES", j->shm_cap, 1);
    struct dt_trainer *t;
    int rc = dt_trainer_create(&j->spec, &o, &t);
    if (!rc)
        rc = dt_trainer_run(t, NULL);
    dt_trainer_destroy(t);
    if (j->expect[0]) {
        if (rc && strstr(dt_error_last(), j->expect))
            return 0;
        fprintf(stderr, "rank %d: expected an error with '%s', got %d: %s\n", rank, j->expect, rc,
                dt_error_last());
        return DT_EINTERNAL;
    }
    return rc;
}

static float *run_ranks(struct job *j, int world, size_t *n)
{
    if (!j->dir[0])
        scratch_dir(j->dir, sizeof j->dir, "ddp");
    if (world == 1) {
        if (rank_body(NULL, 0, 1, j))
            fail_msg("1 rank: %s", dt_error_last());
    } else {
        assert_int_equal(harness_run(world, j->backend ? j->backend : "tcp", 60, rank_body, j), 0);
    }
    if (j->expect[0]) {
        rm_rf(j->dir);
        return NULL;
    }
    if (j->keep_dir) { /* stopped early, to be resumed: nothing to read yet */
        j->keep_dir = false;
        return NULL;
    }
    char path[128];
    if (j->resumed_check) {
        char want[64];
        snprintf(path, sizeof path, "%s/trainer_summary.json", j->dir);
        snprintf(want, sizeof want, "\"resumed_from_step\": %d,", j->resumed_check);
        FILE *f = fopen(path, "r");
        char buf[4096] = "";
        size_t got = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
        buf[got] = 0;
        if (f)
            fclose(f);
        if (!strstr(buf, want))
            fail_msg("%s: no %s in:\n%s", path, want, buf);
    }
    snprintf(path, sizeof path, "%s/checkpoints/step_%08lld.safetensors", j->dir, (long long)j->spec.steps);
    float *p = ckpt_params(path, n);
    rm_rf(j->dir);
    return p;
}

static void four_ranks_equal_one_big_batch(void **state)
{
    const char *backend = *state;
    struct job a = {.perturb_rank = -1}, b = {.perturb_rank = -1, .backend = backend};
    small_spec(&a.spec, 8, 256);
    small_spec(&b.spec, 8, 64);
    size_t na, nb;
    float *pa = run_ranks(&a, 1, &na), *pb = run_ranks(&b, 4, &nb);
    assert_int_equal(na, nb);
    double worst = 0;
    for (size_t i = 0; i < na; i++)
        worst = fmax(worst, fabs((double)pa[i] - pb[i]));
    /* The same 256 samples per step, summed in another order (fp32): far below one AdamW step (lr ~1e-3). */
    if (worst > 1e-5)
        fail_msg("%s: 4x64 and 1x256 parameters differ by %.3g after 8 steps", backend, worst);
    free(pa);
    free(pb);
}

static void bucketed_equals_unbucketed(void **state)
{
    const char *backend = *state;
    for (int world = 2; world <= 4; world += 2) {
        struct job a = {.perturb_rank = -1, .backend = backend}, b = {.perturb_rank = -1, .backend = backend};
        small_spec(&a.spec, 5, 32);
        small_spec(&b.spec, 5, 32);
        b.spec.ddp.first_bucket_mb = b.spec.ddp.bucket_cap_mb = 1e6; /* one bucket: the whole arena */
        b.spec.ddp.overlap = false;
        size_t na, nb;
        float *pa = run_ranks(&a, world, &na), *pb = run_ranks(&b, world, &nb);
        assert_int_equal(na, nb);
        if (memcmp(pa, pb, na * sizeof(float)) != 0)
            fail_msg("%s, world %d: bucketed and unbucketed all-reduce gave different parameters", backend, world);
        free(pa);
        free(pb);
    }
}

/* A first layer of 784x400 floats (> 1 MiB) is written in three row chunks,
 * each its own bucket started during backward; one bucket at the end must
 * give the same bits over shm, whose sums run in rank order for every element.
 * tcp's ring sums an element starting at a rank that depends on where it falls
 * in its bucket, so with four ranks a different bucket layout changes the
 * last bit (as Gloo's and NCCL's rings do; the same holds with chunking off):
 * there the parameters must agree to fp32 rounding, and every rank still holds
 * the same bits (desync check at every step). */
static void chunked_buckets_equal_unbucketed(void **state)
{
    const char *backend = *state;
    struct job a = {.perturb_rank = -1, .backend = backend}, b = {.perturb_rank = -1, .backend = backend};
    small_spec(&a.spec, 4, 32);
    a.spec.model.hidden[0] = 400;
    b.spec = a.spec;
    b.spec.ddp.first_bucket_mb = b.spec.ddp.bucket_cap_mb = 1e6;
    b.spec.ddp.overlap = false;
    size_t na, nb;
    float *pa = run_ranks(&a, 4, &na), *pb = run_ranks(&b, 4, &nb);
    assert_int_equal(na, nb);
    if (strcmp(backend, "shm") == 0 && memcmp(pa, pb, na * sizeof(float)) != 0)
        fail_msg("%s: chunked buckets and one bucket gave different parameters", backend);
    for (size_t i = 0; i < na; i++)
        if (fabs((double)pa[i] - pb[i]) > 1e-6)
            fail_msg("%s: parameter %zu is %.9g with chunked buckets, %.9g with one", backend, i, pa[i], pb[i]);
    free(pa);
    free(pb);
}

/* On one host the parameters and AdamW moments are one copy and each rank
 * steps its slice (ddp.share_state, host_state.h): the bits of every rank
 * holding a copy and stepping all of it, with clipping active every step. */
static void one_copy_per_host(void **state)
{
    (void)state;
    /* fp16 with dynamic loss scaling: each rank unscales its slice, and skipped steps agree.  And with
     * no room for rank 1's shared gradients every rank falls back to a copy each (same bits, warnings). */
    static const struct { int world; enum dt_amp_dtype amp; const char *cap; } cases[] = {
        {2, DT_AMP_OFF, NULL}, {4, DT_AMP_OFF, NULL}, {4, DT_AMP_FP16, NULL}, {4, DT_AMP_OFF, "65536"}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        struct job a = {.perturb_rank = -1, .backend = "shm"}, b = {.perturb_rank = -1, .backend = "shm"};
        small_spec(&a.spec, 5, 32);
        a.spec.model.hidden[0] = 400;
        a.spec.optimizer.grad_clip = 0.05;
        a.spec.amp.dtype = cases[k].amp;
        a.shm_cap = cases[k].cap;
        b.spec = a.spec;
        b.spec.ddp.share_state = false;
        size_t na, nb;
        float *pa = run_ranks(&a, cases[k].world, &na), *pb = run_ranks(&b, cases[k].world, &nb);
        assert_int_equal(na, nb);
        if (memcmp(pa, pb, na * sizeof(float)) != 0)
            fail_msg("world %d%s: one copy per host and a copy per rank gave different parameters", cases[k].world,
                     cases[k].amp == DT_AMP_FP16 ? ", fp16" : "");
        free(pa);
        free(pb);
    }
}

/* Stopped at a checkpoint and resumed (rank 0's checkpoint into the host's
 * one copy), a 4-rank shm job ends with the bits of one that never stopped. */
static void one_copy_resumes(void **state)
{
    (void)state;
    struct job a = {.perturb_rank = -1, .backend = "shm"}, b = {.perturb_rank = -1, .backend = "shm"};
    small_spec(&a.spec, 8, 32);
    a.spec.checkpoint.every_steps = 4;
    a.spec.checkpoint.resume = DT_RESUME_AUTO;
    b.spec = a.spec;
    b.stop_after = 6; /* the newest checkpoint is step 4 */
    b.keep_dir = true;
    size_t na, nb;
    float *pa = run_ranks(&a, 4, &na), *pb;
    run_ranks(&b, 4, &nb);
    b.stop_after = 0;
    b.resumed_check = 4;
    pb = run_ranks(&b, 4, &nb);
    assert_int_equal(na, nb);
    if (memcmp(pa, pb, na * sizeof(float)) != 0)
        fail_msg("resumed from step 4, the parameters differ from a run that never stopped");
    free(pa);
    free(pb);
}

static void desync_names_the_rank(void **state)
{
    (void)state;
    struct job j = {.perturb_rank = 2};
    small_spec(&j.spec, 6, 32);
    snprintf(j.expect, sizeof j.expect, "rank(s) 2 differ from rank 0");
    size_t n;
    run_ranks(&j, 4, &n);
}

static void accumulation_with_ranks(void **state)
{
    (void)state;
    /* 2 ranks x 32 x accum 2 sees the same 128 samples per step as 2 ranks x 64. */
    struct job a = {.perturb_rank = -1}, b = {.perturb_rank = -1};
    small_spec(&a.spec, 5, 64);
    small_spec(&b.spec, 5, 32);
    b.spec.ddp.grad_accum = 2;
    size_t na, nb;
    float *pa = run_ranks(&a, 2, &na), *pb = run_ranks(&b, 2, &nb);
    double worst = 0;
    for (size_t i = 0; i < na; i++)
        worst = fmax(worst, fabs((double)pa[i] - pb[i]));
    if (worst > 1e-5)
        fail_msg("accumulated and plain 2-rank parameters differ by %.3g", worst);
    free(pa);
    free(pb);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate(four_ranks_equal_one_big_batch, "tcp"),
        cmocka_unit_test_prestate(four_ranks_equal_one_big_batch, "shm"),
        cmocka_unit_test_prestate(bucketed_equals_unbucketed, "tcp"),
        cmocka_unit_test_prestate(bucketed_equals_unbucketed, "shm"),
        cmocka_unit_test_prestate(chunked_buckets_equal_unbucketed, "tcp"),
        cmocka_unit_test_prestate(chunked_buckets_equal_unbucketed, "shm"),
        cmocka_unit_test(one_copy_per_host),
        cmocka_unit_test(one_copy_resumes),
        cmocka_unit_test(desync_names_the_rank),
        cmocka_unit_test(accumulation_with_ranks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
