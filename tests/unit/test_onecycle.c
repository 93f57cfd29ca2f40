/* test_onecycle.c - OneCycleLR lr and beta1 at every step, bit-exact in double
 * against torch (tests/fixtures/onecycle.safetensors), and its refusals. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>

#include "worker/optim/lr_schedule.h"
#include "fixture.h"

/* The fixture's config is a JSON object written by json.dumps; read the few keys we need. */
static double jnum_or(const char *json, const char *key, double dflt)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *p = strstr(json, pat);
    if (!p)
        return dflt;
    p += strlen(pat);
    if (strncmp(p, "true", 4) == 0)
        return 1;
    if (strncmp(p, "false", 5) == 0)
        return 0;
    if (*p == '"')
        return strncmp(p + 1, "linear", 6) == 0 ? 1 : 0;
    return strtod(p, NULL);
}

static void spec_from_json(const char *json, struct dt_scheduler_spec *s, int64_t *total)
{
    struct dt_trainer_spec t;
    dt_trainer_spec_defaults(&t);
    *s = t.scheduler;
    s->type = DT_SCHED_ONECYCLE;
    *total = (int64_t)jnum_or(json, "total_steps", 0);
    s->max_lr = jnum_or(json, "max_lr", 0);
    s->pct_start = jnum_or(json, "pct_start", 0.3);
    s->anneal = jnum_or(json, "anneal_strategy", 0) ? DT_ANNEAL_LINEAR : DT_ANNEAL_COS;
    s->div_factor = jnum_or(json, "div_factor", 25);
    s->final_div_factor = jnum_or(json, "final_div_factor", 1e4);
    s->three_phase = jnum_or(json, "three_phase", 0) != 0;
    s->cycle_momentum = jnum_or(json, "cycle_momentum", 1) != 0;
    s->base_momentum = jnum_or(json, "base_momentum", 0.85);
    s->max_momentum = jnum_or(json, "max_momentum", 0.95);
}

static void bit_exact_against_torch(void **state)
{
    (void)state;
    struct dt_safetensors f;
    fixture_open("onecycle.safetensors", &f);
    int count = atoi(dt_safetensors_meta(&f, "count"));
    assert_true(count >= 6);
    for (int c = 0; c < count; c++) {
        char key[32], lrk[32], b1k[32];
        snprintf(key, sizeof key, "c%d", c);
        snprintf(lrk, sizeof lrk, "c%d.lr", c);
        snprintf(b1k, sizeof b1k, "c%d.beta1", c);
        struct dt_scheduler_spec spec;
        int64_t T;
        spec_from_json(dt_safetensors_meta(&f, key), &spec, &T);
        const double *lr = fixture_tensor(&f, lrk, "F64")->data, *b1 = fixture_tensor(&f, b1k, "F64")->data;
        struct dt_lr_schedule s;
        assert_int_equal(dt_lr_schedule_init(&s, &spec, T, 1.0, 0.9), 0);
        for (int64_t t = 0; t <= T; t++) {
            if (s.lr != lr[t] || s.beta1 != b1[t])
                fail_msg("config %d step %lld: lr %.17g beta1 %.17g, torch %.17g %.17g", c, (long long)t, s.lr,
                         s.beta1, lr[t], b1[t]);
            if (t < T)
                assert_int_equal(dt_lr_schedule_step(&s), 0);
        }
        /* torch: the (total_steps+1)-th step() raises. */
        assert_int_equal(dt_lr_schedule_step(&s), DT_EINVAL);
        assert_non_null(strstr(dt_error_last(), "Tried to step"));
    }
    dt_safetensors_release(&f);
}

static void reference_values(void **state)
{
    (void)state;
    /* torch.optim.lr_scheduler.OneCycleLR(total_steps=100, max_lr=0.01), defaults otherwise */
    struct dt_trainer_spec t;
    dt_trainer_spec_defaults(&t);
    t.scheduler.type = DT_SCHED_ONECYCLE;
    t.scheduler.max_lr = 0.01;
    struct dt_lr_schedule s;
    assert_int_equal(dt_lr_schedule_init(&s, &t.scheduler, 100, 1e-3, 0.9), 0);
    assert_true(s.lr == 0.00039999999999999931);
    assert_true(s.beta1 == 0.95);
    assert_int_equal(dt_lr_schedule_seek(&s, 29), 0);
    assert_true(s.lr == 0.01 && s.beta1 == 0.85);
    assert_int_equal(dt_lr_schedule_seek(&s, 99), 0);
    assert_true(s.lr == 4.0000000000000001e-08);
}

static void validation_and_constant(void **state)
{
    (void)state;
    struct dt_trainer_spec t;
    dt_trainer_spec_defaults(&t);
    t.scheduler.type = DT_SCHED_ONECYCLE;
    t.scheduler.max_lr = 0.01;
    struct dt_lr_schedule s;
    assert_int_equal(dt_lr_schedule_init(&s, &t.scheduler, 0, 1e-3, 0.9), DT_EINVAL);
    t.scheduler.pct_start = 1.5;
    assert_int_equal(dt_lr_schedule_init(&s, &t.scheduler, 10, 1e-3, 0.9), DT_EINVAL);
    t.scheduler.type = DT_SCHED_CONSTANT;
    assert_int_equal(dt_lr_schedule_init(&s, &t.scheduler, 5, 1e-3, 0.9), 0);
    for (int i = 0; i < 10; i++) {
        assert_true(s.lr == 1e-3 && s.beta1 == 0.9);
        assert_int_equal(dt_lr_schedule_step(&s), 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bit_exact_against_torch),
        cmocka_unit_test(reference_values),
        cmocka_unit_test(validation_and_constant),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
