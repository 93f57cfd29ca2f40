/* test_agent_hooks.c - the agent's hooks (agent.h) with real `sh -c` ranks: a
 * poll that aborts ends the job with its status at once; a poll that stops
 * the attempt and an attempt_end that restarts run a second round; an
 * attempt_end that decides "done" sets the job's status whatever the ranks did. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "launcher/agent/agent.h"
#include "spec/jobspec.h"
#include "tests/unit/agent_fixture.h"

struct fixture {
    struct agent_fixture a;
    struct dt_agent_hooks hooks;
    /* what the hooks saw and do */
    int polls, abort_after, stop_in_attempt, ends, done_status;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    *state = f;
    if (!f || agent_fixture_open(&f->a, "hooks") < 0)
        return -1;
    f->hooks.ctx = f;
    f->hooks.period_s = 0.02;
    f->abort_after = -1;
    f->stop_in_attempt = -1;
    f->a.cfg.nproc = 2;
    f->a.cfg.hooks = &f->hooks;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    int rc = agent_fixture_close(&f->a);
    free(f);
    return rc;
}

static enum dt_agent_verdict poll_hook(void *ctx, const struct dt_agent_result *res, int attempt, int *status)
{
    (void)res;
    struct fixture *f = ctx;
    f->polls++;
    if (f->abort_after >= 0 && f->polls > f->abort_after) {
        *status = 7;
        return DT_AGENT_ABORT;
    }
    return attempt == f->stop_in_attempt ? DT_AGENT_STOP_ATTEMPT : DT_AGENT_GO_ON;
}

static int end_hook(void *ctx, struct dt_agent_result *res, int attempt, int sig_fd, bool *restart, int *status)
{
    (void)res;
    (void)sig_fd;
    struct fixture *f = ctx;
    f->ends++;
    *restart = attempt == f->stop_in_attempt;
    *status = f->done_status;
    return 0;
}

static void poll_abort_ends_the_job_with_its_status(void **state)
{
    struct fixture *f = *state;
    f->a.argv[2] = "sleep 20";
    f->hooks.poll = poll_hook;
    f->abort_after = 3;
    double t0 = dt_clock_s();
    assert_int_equal(dt_agent_run(&f->a.cfg, &f->a.res), 0);
    assert_true(dt_clock_s() - t0 < 5); /* SIGTERM went out at once, not after 20 s */
    assert_int_equal(f->a.res.status, DT_AGENT_FAILED);
    assert_int_equal(f->a.res.exit_status, 7);
    assert_int_equal(f->a.res.n_attempts, 1);
    assert_true(f->a.res.attempts[0].ranks[0].stopped_by_agent);
}

static void stop_then_restart_runs_a_second_round(void **state)
{
    struct fixture *f = *state;
    f->a.job.max_restarts = 1;
    f->a.argv[2] = "if [ $TORCHELASTIC_RESTART_COUNT = 0 ]; then sleep 20; fi; exit 0";
    f->hooks.poll = poll_hook;
    f->hooks.attempt_end = end_hook;
    f->stop_in_attempt = 0;
    f->done_status = 0;
    double t0 = dt_clock_s();
    assert_int_equal(dt_agent_run(&f->a.cfg, &f->a.res), 0);
    assert_true(dt_clock_s() - t0 < 5);
    assert_int_equal(f->ends, 2);
    assert_int_equal(f->a.res.n_attempts, 2);
    assert_int_equal(f->a.res.status, DT_AGENT_SUCCEEDED);
    assert_int_equal(f->a.res.attempts[0].first_failed, -1); /* stopped for another node, not failed here */
    assert_true(f->a.res.attempts[1].ranks[1].exited);
}

static void attempt_end_decides_the_status(void **state)
{
    struct fixture *f = *state;
    f->a.argv[2] = "exit 0";
    f->hooks.attempt_end = end_hook;
    f->done_status = 5; /* another node's rank failed with 5 */
    assert_int_equal(dt_agent_run(&f->a.cfg, &f->a.res), 0);
    assert_int_equal(f->ends, 1);
    assert_int_equal(f->a.res.status, DT_AGENT_FAILED);
    assert_int_equal(f->a.res.exit_status, 5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(poll_abort_ends_the_job_with_its_status, setup, teardown),
        cmocka_unit_test_setup_teardown(stop_then_restart_runs_a_second_round, setup, teardown),
        cmocka_unit_test_setup_teardown(attempt_end_decides_the_status, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
