/* test_agent_run.c - the agent with real processes: `sh -c` ranks that
 * succeed, fail, crash, restart, leave children behind, ignore SIGTERM, or
 * signal the agent; each test checks the result, the logs and the console. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "launcher/agent/agent.h"
#include "spec/jobspec.h"
#include "tests/unit/agent_fixture.h"

struct fixture {
    struct agent_fixture a;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    *state = f;
    return f ? agent_fixture_open(&f->a, "agent") : -1;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    int rc = agent_fixture_close(&f->a);
    free(f);
    return rc;
}

/* Seconds the run took. */
static double run(struct fixture *f, int nproc, int max_restarts, const char *script)
{
    double t = dt_clock_s();
    agent_fixture_run(&f->a, nproc, max_restarts, script);
    return dt_clock_s() - t;
}

static void ranks_succeed_with_logs_and_prefixes(void **state)
{
    struct fixture *f = *state;
    run(f, 3, 0, "echo out $RANK; printf 'err %s' $RANK >&2");
    assert_int_equal(f->a.res.status, DT_AGENT_SUCCEEDED);
    assert_int_equal(f->a.res.exit_status, 0);
    assert_int_equal(f->a.res.n_attempts, 1);
    assert_string_equal(agent_fixture_read(&f->a, "attempt_0/rank_2.out"), "out 2\n");
    assert_string_equal(agent_fixture_read(&f->a, "attempt_0/rank_1.err"), "err 1"); /* bytes as written */
    char *out = agent_fixture_read(&f->a, "console.out");
    assert_non_null(strstr(out, "[rank 0] out 0\n"));
    assert_non_null(strstr(out, "[rank 2] out 2\n"));
    /* The unfinished last line still reaches the console, ended. */
    assert_non_null(strstr(agent_fixture_read(&f->a, "console.err"), "[rank 1] err 1\n"));
    for (int i = 0; i < 3; i++) {
        assert_true(f->a.res.attempts[0].ranks[i].exited);
        assert_true(f->a.res.attempts[0].ranks[i].pid > 0);
        assert_true(f->a.res.attempts[0].ranks[i].exit_s >= f->a.res.attempts[0].ranks[i].spawn_s);
    }
}

/* A requeued Slurm job runs again in the same run directory: both runs' output stays. */
static void rerun_appends_to_the_logs(void **state)
{
    struct fixture *f = *state;
    run(f, 1, 0, "echo first run; printf 'no newline' >&2");
    dt_agent_result_free(&f->a.res);
    run(f, 1, 0, "echo second run");
    assert_int_equal(f->a.res.status, DT_AGENT_SUCCEEDED);
    assert_string_equal(agent_fixture_read(&f->a, "attempt_0/rank_0.out"),
                        "first run\n" DT_AGENT_LOG_RERUN_MARK "\nsecond run\n");
    /* The mark starts a line of its own even after an unfinished one. */
    assert_string_equal(agent_fixture_read(&f->a, "attempt_0/rank_0.err"), "no newline\n" DT_AGENT_LOG_RERUN_MARK "\n");
}

static void first_failure_stops_the_others(void **state)
{
    struct fixture *f = *state;
    double t =
        run(f, 3, 0,
            "if [ $RANK = 1 ]; then sleep 0.2; for i in 1 2 3 4 5 6 7 8 9 10 11 12; do echo e$i >&2; done;"
            " exit 3; fi; exec sleep 30");
    assert_true(t < 5.0);
    assert_int_equal(f->a.res.status, DT_AGENT_FAILED);
    assert_int_equal(f->a.res.exit_status, 3);
    assert_true(f->a.res.have_failure);
    assert_int_equal(f->a.res.first_failure.rank, 1);
    assert_int_equal(f->a.res.first_failure.n_tail, DT_AGENT_TAIL_LINES);
    assert_string_equal(f->a.res.first_failure.tail[DT_AGENT_TAIL_LINES - 1], "e12");
    assert_int_equal(f->a.res.attempts[0].first_failed, 1);
    assert_true(f->a.res.attempts[0].ranks[0].stopped_by_agent);
    assert_true(WIFSIGNALED(f->a.res.attempts[0].ranks[0].wstatus));
    assert_int_equal(WTERMSIG(f->a.res.attempts[0].ranks[2].wstatus), SIGTERM);
    char *err = agent_fixture_read(&f->a, "console.err");
    assert_non_null(strstr(err, "rank 1 failed first"));
    assert_non_null(strstr(err, "exited with code 3"));
    assert_non_null(strstr(err, "  | e12"));
}

static void crash_by_signal(void **state)
{
    struct fixture *f = *state;
    run(f, 2, 0, "[ $RANK = 0 ] && kill -SEGV $$; exec sleep 30");
    assert_int_equal(f->a.res.status, DT_AGENT_FAILED);
    assert_int_equal(f->a.res.exit_status, 128 + SIGSEGV);
    assert_non_null(strstr(agent_fixture_read(&f->a, "console.err"), "killed by SIGSEGV"));
}

static void restart_then_success(void **state)
{
    struct fixture *f = *state;
    run(f, 2, 1, "echo attempt $TORCHELASTIC_RESTART_COUNT; [ $TORCHELASTIC_RESTART_COUNT = 1 ] || exit 4");
    assert_int_equal(f->a.res.status, DT_AGENT_SUCCEEDED);
    assert_int_equal(f->a.res.n_attempts, 2);
    assert_int_equal(f->a.res.attempts[0].first_failed >= 0, 1);
    assert_int_equal(f->a.res.attempts[1].first_failed, -1);
    assert_string_equal(agent_fixture_read(&f->a, "attempt_1/rank_1.out"), "attempt 1\n");
    char name[64];
    snprintf(name, sizeof name, "attempt_0/rank_%d.out", f->a.res.attempts[0].first_failed);
    assert_string_equal(agent_fixture_read(&f->a, name), "attempt 0\n");
}

static void restarts_run_out(void **state)
{
    struct fixture *f = *state;
    run(f, 1, 2, "exit 5");
    assert_int_equal(f->a.res.status, DT_AGENT_FAILED);
    assert_int_equal(f->a.res.n_attempts, 3);
    assert_int_equal(f->a.res.exit_status, 5);
    assert_int_equal(f->a.res.first_failure.attempt, 2);
}

static bool alive(pid_t pid)
{
    return kill(pid, 0) == 0;
}

static void leftovers_are_stopped(void **state)
{
    struct fixture *f = *state;
    char script[256];
    snprintf(script, sizeof script, "sleep 300 & echo $! > %s/child.$RANK; setsid sleep 301 & exit 0",
             f->a.dir);
    double t = run(f, 2, 0, script);
    assert_int_equal(f->a.res.status, DT_AGENT_SUCCEEDED);
    assert_true(f->a.res.attempts[0].leftovers >= 2);
    assert_true(t < 3.0);
    pid_t pid = (pid_t)atoi(agent_fixture_read(&f->a, "child.0"));
    assert_true(pid > 0);
    assert_false(alive(pid));
    /* Nothing of the job is left as our child either. */
    assert_int_equal(waitpid(-1, NULL, WNOHANG), -1);
    assert_int_equal(errno, ECHILD);
}

static void sigterm_ignored_gets_sigkill(void **state)
{
    struct fixture *f = *state;
    f->a.cfg.grace_s = 0.3;
    double t = run(f, 2, 0, "[ $RANK = 0 ] && sleep 0.2 && exit 1; trap '' TERM; sleep 30 & wait; sleep 30");
    assert_true(t < 3.0);
    assert_int_equal(f->a.res.status, DT_AGENT_FAILED);
    assert_int_equal(WTERMSIG(f->a.res.attempts[0].ranks[1].wstatus), SIGKILL);
}

static void signal_to_agent_is_forwarded(void **state)
{
    struct fixture *f = *state;
    char script[256];
    snprintf(script, sizeof script,
             "trap 'echo got INT; exit 9' INT; [ $RANK = 0 ] && sleep 0.2 && kill -INT %d; sleep 30 & wait",
             (int)getpid());
    double t = run(f, 2, 2, script);
    assert_true(t < 3.0);
    assert_int_equal(f->a.res.status, DT_AGENT_INTERRUPTED);
    assert_int_equal(f->a.res.exit_status, 128 + SIGINT);
    assert_int_equal(f->a.res.interrupt_signal, SIGINT);
    assert_int_equal(f->a.res.n_attempts, 1); /* no restart after an interrupt */
    assert_non_null(strstr(agent_fixture_read(&f->a, "attempt_0/rank_1.out"), "got INT"));
}

static void missing_program(void **state)
{
    struct fixture *f = *state;
    f->a.argv[0] = "/nonexistent/dtrain-test-program";
    f->a.argv[1] = NULL;
    f->a.job.nproc_per_node = f->a.cfg.nproc = 1;
    assert_int_equal(dt_agent_run(&f->a.cfg, &f->a.res), 0);
    assert_int_equal(f->a.res.exit_status, 127);
    assert_non_null(strstr(f->a.res.first_failure.tail[0], "cannot run '/nonexistent/dtrain-test-program'"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(ranks_succeed_with_logs_and_prefixes, setup, teardown),
        cmocka_unit_test_setup_teardown(rerun_appends_to_the_logs, setup, teardown),
        cmocka_unit_test_setup_teardown(first_failure_stops_the_others, setup, teardown),
        cmocka_unit_test_setup_teardown(crash_by_signal, setup, teardown),
        cmocka_unit_test_setup_teardown(restart_then_success, setup, teardown),
        cmocka_unit_test_setup_teardown(restarts_run_out, setup, teardown),
        cmocka_unit_test_setup_teardown(leftovers_are_stopped, setup, teardown),
        cmocka_unit_test_setup_teardown(sigterm_ignored_gets_sigkill, setup, teardown),
        cmocka_unit_test_setup_teardown(signal_to_agent_is_forwarded, setup, teardown),
        cmocka_unit_test_setup_teardown(missing_program, setup, teardown),
    };
    return cmocka_run_group_tests_name("agent_run", tests, NULL, NULL);
}
