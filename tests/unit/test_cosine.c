/* test_cosine.c - the cosine schedule with linear warmup (worker/optim/lr_schedule.h):
 * lr at every step bit-exact in double against the formula, llm.c's and
 * build-nanogpt's get_lr, and nanoGPT's train.py from the end of warmup on
 * (tests/fixtures/cosine.safetensors); seeking on resume; its refusals; its
 * keys (and ddp.zero's) read from a job spec. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>

#include "spec/jobspec.h"
#include "worker/optim/lr_schedule.h"
#include "fixture.h"

static struct dt_scheduler_spec cosine_spec(int64_t warmup, double min_lr)
{
    struct dt_trainer_spec t;
    dt_trainer_spec_defaults(&t);
    t.scheduler.type = DT_SCHED_COSINE;
    t.scheduler.warmup_steps = warmup;
    t.scheduler.min_lr = min_lr;
    return t.scheduler;
}

static void bit_exact_against_references(void **state)
{
    (void)state;
    struct dt_safetensors f;
    fixture_open("cosine.safetensors", &f);
    int count = atoi(dt_safetensors_meta(&f, "count"));
    assert_true(count >= 5);
    for (int c = 0; c < count; c++) {
        char key[32];
        snprintf(key, sizeof key, "c%d", c);
        const char *cfg = dt_safetensors_meta(&f, key);
        double lr = jnum(cfg, "lr"), min_lr = jnum(cfg, "min_lr");
        int64_t n = (int64_t)jnum(cfg, "warmup_steps"), total = (int64_t)jnum(cfg, "total_steps");
        const double *want[3];
        static const char *const refs[3] = {"lr", "build_nanogpt", "nanogpt"};
        for (int r = 0; r < 3; r++) {
            snprintf(key, sizeof key, "c%d.%s", c, refs[r]);
            want[r] = fixture_tensor(&f, key, "F64")->data;
        }
        struct dt_scheduler_spec spec = cosine_spec(n, min_lr);
        struct dt_lr_schedule s;
        assert_int_equal(dt_lr_schedule_init(&s, &spec, total, lr, 0.9), 0);
        for (int64_t t = 0; t <= total; t++) {
            if (s.lr != want[0][t] || s.lr != want[1][t] || (t >= n && s.lr != want[2][t]))
                fail_msg("config %d step %lld: lr %.17g; formula %.17g, build-nanogpt %.17g, nanoGPT %.17g",
                         c, (long long)t, s.lr, want[0][t], want[1][t], want[2][t]);
            assert_true(s.beta1 == 0.9);
            if (t < total)
                assert_int_equal(dt_lr_schedule_step(&s), 0);
        }
        /* nanoGPT's train.py warms up to N + 1, not N: it differs at step 0 */
        if (n > 0)
            assert_true(want[2][0] != want[0][0]);
        assert_int_equal(dt_lr_schedule_step(&s), DT_EINVAL);
    }
    dt_safetensors_release(&f);
}

/* A resume seeks to the checkpoint's step: the same lr as stepping there. */
static void seek_equals_stepping(void **state)
{
    (void)state;
    struct dt_scheduler_spec spec = cosine_spec(7, 1e-5);
    struct dt_lr_schedule a, b;
    assert_int_equal(dt_lr_schedule_init(&a, &spec, 40, 3e-4, 0.9), 0);
    for (int64_t k = 0; k <= 40; k++) {
        assert_int_equal(dt_lr_schedule_init(&b, &spec, 40, 3e-4, 0.9), 0);
        assert_int_equal(dt_lr_schedule_seek(&b, k), 0);
        assert_true(a.lr == b.lr && a.beta1 == b.beta1);
        if (k < 40)
            assert_int_equal(dt_lr_schedule_step(&a), 0);
    }
    assert_true(a.lr == 1e-5); /* the end of the cosine is min_lr */
}

/* N >= S warms up throughout; N == 0 starts at the peak. */
static void warmup_edges(void **state)
{
    (void)state;
    struct dt_scheduler_spec spec = cosine_spec(10, 0.0);
    struct dt_lr_schedule s;
    assert_int_equal(dt_lr_schedule_init(&s, &spec, 4, 1.0, 0.9), 0);
    for (int t = 0; t < 4; t++, dt_lr_schedule_step(&s))
        assert_true(s.lr == 1.0 * (t + 1) / 10);
    spec = cosine_spec(4, 0.0); /* N == S: the step after the last is the peak, not a cosine of 0/0 */
    assert_int_equal(dt_lr_schedule_init(&s, &spec, 4, 1.0, 0.9), 0);
    assert_int_equal(dt_lr_schedule_seek(&s, 4), 0);
    assert_true(s.lr == 1.0);
    spec = cosine_spec(0, 0.1);
    assert_int_equal(dt_lr_schedule_init(&s, &spec, 4, 1.0, 0.9), 0);
    assert_true(s.lr == 1.0);
}

static void refusals_name_the_key(void **state)
{
    (void)state;
    struct dt_lr_schedule s;
    struct dt_scheduler_spec spec = cosine_spec(-1, 0.0);
    assert_int_equal(dt_lr_schedule_init(&s, &spec, 10, 1e-3, 0.9), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "trainer.scheduler.warmup_steps"));
    spec = cosine_spec(2, 2e-3);
    assert_int_equal(dt_lr_schedule_init(&s, &spec, 10, 1e-3, 0.9), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "trainer.scheduler.min_lr"));
    spec = cosine_spec(2, -1e-9);
    assert_int_equal(dt_lr_schedule_init(&s, &spec, 10, 1e-3, 0.9), DT_EINVAL);
    spec = cosine_spec(2, 0.0);
    assert_int_equal(dt_lr_schedule_init(&s, &spec, 0, 1e-3, 0.9), DT_EINVAL);
    assert_int_equal(dt_lr_schedule_init(&s, &spec, 10, 1e-3, 0.9), 0);
    assert_int_equal(dt_lr_schedule_seek(&s, 11), DT_EINVAL);
}

/* The spec's keys: the scheduler's cosine pair and ddp.zero (defaults 0). */
static void keys_from_a_spec(void **state)
{
    (void)state;
    static const char yaml[] = "name: g\ntrainer:\n  optimizer: {lr: 6e-4}\n"
                               "  scheduler: {type: cosine, warmup_steps: 700, min_lr: 6e-5}\n  ddp: {zero: 1}\n";
    struct dt_job *job = NULL;
    if (dt_job_load_string(yaml, strlen(yaml), "g.yaml", &job))
        fail_msg("%s", dt_error_last());
    const struct dt_trainer_spec *t = job->trainer;
    assert_int_equal(t->scheduler.type, DT_SCHED_COSINE);
    assert_true(t->scheduler.warmup_steps == 700 && t->scheduler.min_lr == 6e-5 && t->ddp.zero == 1);
    dt_job_free(job);
    static const char plain[] = "name: g\ntrainer: {steps: 3}\n";
    assert_int_equal(dt_job_load_string(plain, strlen(plain), "p.yaml", &job), 0);
    assert_true(job->trainer->scheduler.warmup_steps == 0 && job->trainer->scheduler.min_lr == 0 &&
                job->trainer->ddp.zero == 0);
    dt_job_free(job);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bit_exact_against_references),
        cmocka_unit_test(seek_equals_stepping),
        cmocka_unit_test(warmup_edges),
        cmocka_unit_test(refusals_name_the_key),
        cmocka_unit_test(keys_from_a_spec),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
