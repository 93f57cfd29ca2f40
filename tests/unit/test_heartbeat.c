/* test_heartbeat.c - the worker's heartbeat thread against a real coordinator:
 * the published step reaches the coordinator's table within a few intervals,
 * a stuck publisher leaves the step frozen while reports keep coming, and the
 * coordinator's death calls on_lost with a sentence naming it, within the
 * lost-after bound; DTRAIN_FAULT parses and refuses what it should. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "comm/store.h"
#include "launcher/coordinator/coordinator.h"
#include "worker/heartbeat.h"
#include "worker/heartbeat_fault.h"
#include "base/clock.h"

struct lost {
    _Atomic int calls;
    double when;
    char why[1024];
};

static void on_lost(void *ctx, const char *why)
{
    struct lost *l = ctx;
    snprintf(l->why, sizeof l->why, "%s", why);
    l->when = dt_clock_s();
    atomic_fetch_add(&l->calls, 1);
}

static struct dt_store *connect_to(struct dt_coord *c)
{
    struct dt_store_options o = {.host = "127.0.0.1", .port = dt_coord_port(c), .timeout_s = 5};
    struct dt_store *s;
    assert_int_equal(dt_store_connect(&o, &s), 0);
    return s;
}

/* Waits up to `limit` s for rank 3's reported step to equal want. */
static bool step_arrives(struct dt_coord *c, int64_t want, double limit)
{
    for (double end = dt_clock_s() + limit; dt_clock_s() < end; usleep(10000)) {
        int64_t step;
        double when;
        if (dt_coord_heartbeat(c, 3, &step, &when) == 0 && step == want)
            return true;
    }
    return false;
}

static void steps_reach_the_coordinator_and_its_death_is_noticed(void **state)
{
    (void)state;
    struct dt_coord_config cc = {.bind_host = "127.0.0.1"};
    struct dt_coord *c;
    assert_int_equal(dt_coord_start(&cc, &c), 0);
    struct lost l = {0};
    struct dt_heartbeat_options o = {
        .rank = 3, .interval_s = 0.05, .lost_after_s = 0.8, .first_step = 5, .on_lost = on_lost, .ctx = &l};
    struct dt_heartbeat *h;
    assert_int_equal(dt_heartbeat_start(&o, connect_to(c), &h), 0);
    assert_true(step_arrives(c, 5, 2.0));
    dt_heartbeat_step(h, 17);
    assert_true(step_arrives(c, 17, 2.0));
    /* A frozen step still comes with fresh reports: that is how a stuck
     * compute thread differs from a stopped process. */
    int64_t sent = dt_heartbeat_sent(h);
    usleep(300000);
    assert_true(dt_heartbeat_sent(h) >= sent + 3);
    int64_t step;
    double when;
    assert_int_equal(dt_coord_heartbeat(c, 3, &step, &when), 0);
    assert_int_equal(step, 17);
    assert_true(dt_clock_s() - when < 0.3);
    double stopped = dt_clock_s();
    dt_coord_stop(c);
    while (atomic_load(&l.calls) == 0 && dt_clock_s() - stopped < 5)
        usleep(10000);
    assert_int_equal(atomic_load(&l.calls), 1);
    printf("# on_lost %.2f s after the coordinator stopped: %s\n", l.when - stopped, l.why);
    assert_true(l.when - stopped >= 0.7 && l.when - stopped < 2.0);
    assert_non_null(strstr(l.why, "rank 3: lost the coordinator 127.0.0.1:"));
    assert_non_null(strstr(l.why, "no heartbeat answered for"));
    dt_heartbeat_stop(h);
}

static void bad_options_are_refused(void **state)
{
    (void)state;
    struct dt_heartbeat_options o = {.rank = 0, .interval_s = 0, .lost_after_s = 1};
    struct dt_heartbeat *h;
    assert_int_equal(dt_heartbeat_start(&o, NULL, &h), DT_EINVAL);
    assert_null(h);
    dt_heartbeat_step(NULL, 3); /* harmless without a heartbeat */
    dt_heartbeat_stop(NULL);
}

static void fault_syntax(void **state)
{
    (void)state;
    struct dt_heartbeat_fault f;
    assert_int_equal(dt_heartbeat_fault_parse("kill:2:17:5", &f), 0);
    assert_int_equal(f.action, DT_FAULT_KILL);
    assert_int_equal(f.rank, 2);
    assert_int_equal(f.step, 17);
    assert_int_equal(f.delay_ms, 5);
    assert_int_equal(dt_heartbeat_fault_parse("stop:0:1", &f), 0);
    assert_int_equal(f.action, DT_FAULT_STOP);
    assert_int_equal(dt_heartbeat_fault_parse("hang:1:3", &f), 0);
    assert_int_equal(f.action, DT_FAULT_HANG);
    const char *bad[] = {"kill:2",     "kill:-1:3",  "kill:1:0",  "nap:1:3",
                         "stop:1:3:9", "kill:1:3:x", "kill:1:3x", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(dt_heartbeat_fault_parse(bad[i], &f), DT_EINVAL);
        assert_non_null(strstr(dt_error_last(), "DTRAIN_FAULT"));
    }
    setenv("DTRAIN_FAULT", "kill:1:4", 1);
    assert_int_equal(dt_heartbeat_fault_from_env(1, 0, &f), 0);
    assert_int_equal(f.action, DT_FAULT_KILL);
    assert_int_equal(dt_heartbeat_fault_from_env(0, 0, &f), 0);
    assert_int_equal(f.action, DT_FAULT_NONE); /* another rank */
    assert_int_equal(dt_heartbeat_fault_from_env(1, 1, &f), 0);
    assert_int_equal(f.action, DT_FAULT_NONE); /* a restart runs clean */
    unsetenv("DTRAIN_FAULT");
    assert_int_equal(dt_heartbeat_fault_from_env(1, 0, &f), 0);
    assert_int_equal(f.action, DT_FAULT_NONE);
    dt_heartbeat_fault_after_step(&f, 4); /* no fault: nothing happens */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(steps_reach_the_coordinator_and_its_death_is_noticed),
        cmocka_unit_test(bad_options_are_refused),
        cmocka_unit_test(fault_syntax),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
