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

#include "launcher/agent.h"
#include "launcher/jobspec.h"

struct fixture {
    char dir[64];
    char *argv[4];
    struct dt_job job;
    struct dt_agent_config cfg;
    struct dt_agent_result res;
    struct dt_agent_hooks hooks;
    int out_fd;
    /* what the hooks saw and do */
    int polls, abort_after, stop_in_attempt, ends, done_status;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    strcpy(f->dir, "/tmp/dtrain-hooks-test.XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    char path[128];
    snprintf(path, sizeof path, "%s/console", f->dir);
    f->out_fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    f->job.name = "unit";
    f->job.nodes = 1;
    f->argv[0] = "sh";
    f->argv[1] = "-c";
    f->hooks.ctx = f;
    f->hooks.period_s = 0.02;
    f->abort_after = -1;
    f->stop_in_attempt = -1;
    f->cfg = (struct dt_agent_config){.job = &f->job, .argv = (const char *const *)f->argv, .nnodes = 1,
                                      .nproc = 2, .run_id = "RID", .run_dir = f->dir, .master_addr = "127.0.0.1",
                                      .master_port = 1, .grace_s = 1.0, .out_fd = f->out_fd,
                                      .err_fd = f->out_fd, .hooks = &f->hooks};
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    dt_agent_result_free(&f->res);
    close(f->out_fd);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", f->dir);
    if (system(cmd) != 0)
        return -1;
    free(f);
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
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
    f->argv[2] = "sleep 20";
    f->hooks.poll = poll_hook;
    f->abort_after = 3;
    double t0 = now_s();
    assert_int_equal(dt_agent_run(&f->cfg, &f->res), 0);
    assert_true(now_s() - t0 < 5); /* SIGTERM went out at once, not after 20 s */
    assert_int_equal(f->res.status, DT_AGENT_FAILED);
    assert_int_equal(f->res.exit_status, 7);
    assert_int_equal(f->res.n_attempts, 1);
    assert_true(f->res.attempts[0].ranks[0].stopped_by_agent);
}

static void stop_then_restart_runs_a_second_round(void **state)
{
    struct fixture *f = *state;
    f->job.max_restarts = 1;
    f->argv[2] = "if [ $TORCHELASTIC_RESTART_COUNT = 0 ]; then sleep 20; fi; exit 0";
    f->hooks.poll = poll_hook;
    f->hooks.attempt_end = end_hook;
    f->stop_in_attempt = 0;
    f->done_status = 0;
    double t0 = now_s();
    assert_int_equal(dt_agent_run(&f->cfg, &f->res), 0);
    assert_true(now_s() - t0 < 5);
    assert_int_equal(f->ends, 2);
    assert_int_equal(f->res.n_attempts, 2);
    assert_int_equal(f->res.status, DT_AGENT_SUCCEEDED);
    assert_int_equal(f->res.attempts[0].first_failed, -1); /* stopped for another node, not failed here */
    assert_true(f->res.attempts[1].ranks[1].exited);
}

static void attempt_end_decides_the_status(void **state)
{
    struct fixture *f = *state;
    f->argv[2] = "exit 0";
    f->hooks.attempt_end = end_hook;
    f->done_status = 5; /* another node's rank failed with 5 */
    assert_int_equal(dt_agent_run(&f->cfg, &f->res), 0);
    assert_int_equal(f->ends, 1);
    assert_int_equal(f->res.status, DT_AGENT_FAILED);
    assert_int_equal(f->res.exit_status, 5);
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
