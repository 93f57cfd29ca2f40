/* test_agent_requeue.c - SIGUSR1 to the agent (a scheduler's time limit is near): when every
 * rank catches it, it is passed on without stopping any; ranks that then exit with 75 stopped
 * to be requeued (no failure, no restart, the agent's status is 75), while a rank that fails
 * still fails, and 75 without the signal is an ordinary failure.  When a rank would die of it
 * (no handler), no rank gets it: all are stopped and the job ends with 75 all the same.
 * SIGUSR2 listed in signals_to_handle is handled the same way. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "launcher/agent/agent.h"
#include "spec/jobspec.h"
#include "tests/unit/agent_fixture.h"

struct fixture {
    struct agent_fixture a;
    char script[512];
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    *state = f;
    return f ? agent_fixture_open(&f->a, "requeue") : -1;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    int rc = agent_fixture_close(&f->a);
    free(f);
    return rc;
}

/* Two ranks of `script` (in which %d is the agent's pid), max_restarts 2. */
static void run(struct fixture *f, const char *script)
{
    snprintf(f->script, sizeof f->script, script, (int)getpid());
    agent_fixture_run(&f->a, 2, 2, f->script);
}

/* Rank 1 stops at once; rank 0 takes its time (a checkpoint being written) and
 * must not be stopped because rank 1 exited first. */
static void usr1_is_passed_on_and_75_ends_the_job(void **state)
{
    struct fixture *f = *state;
    run(f, "if [ $RANK = 0 ]; then trap 'sleep 0.5; echo saved; exit 75' USR1; (sleep 0.3; kill -USR1 %d) & "
           "else trap 'exit 75' USR1; fi; sleep 30 & wait");
    assert_int_equal(f->a.res.status, DT_AGENT_INTERRUPTED);
    assert_int_equal(f->a.res.exit_status, DT_AGENT_EXIT_REQUEUE);
    assert_int_equal(f->a.res.interrupt_signal, SIGUSR1);
    assert_int_equal(f->a.res.n_attempts, 1); /* no restart: the job is to be requeued */
    for (int r = 0; r < 2; r++) {
        const struct dt_agent_rank_result *rr = &f->a.res.attempts[0].ranks[r];
        assert_true(WIFEXITED(rr->wstatus) && WEXITSTATUS(rr->wstatus) == 75);
        assert_false(rr->stopped_by_agent);
    }
    assert_int_equal(f->a.res.attempts[0].first_failed, -1);
    assert_string_equal(agent_fixture_read(&f->a, "attempt_0/rank_0.out"), "saved\n");
}

static void a_failure_after_usr1_still_fails(void **state)
{
    struct fixture *f = *state;
    run(f, "if [ $RANK = 0 ]; then trap 'exit 75' USR1; (sleep 0.3; kill -USR1 %d) & "
           "else trap 'exit 3' USR1; fi; sleep 30 & wait");
    assert_int_equal(f->a.res.status, DT_AGENT_FAILED);
    assert_int_equal(f->a.res.exit_status, 3);
    assert_int_equal(f->a.res.first_failure.rank, 1);
}

static void exit_75_without_usr1_is_a_failure(void **state)
{
    struct fixture *f = *state;
    run(f, "[ $RANK = 1 ] && exit 75; sleep 30 & wait");
    assert_int_equal(f->a.res.status, DT_AGENT_FAILED);
    assert_int_equal(f->a.res.exit_status, 75);
    assert_int_equal(f->a.res.n_attempts, 3); /* restarted like any failure */
}

/* The job ended on SIGUSR1 to be requeued (75) in its first attempt, no rank's exit its failure. */
static void assert_stopped_for_requeue(const struct fixture *f)
{
    assert_int_equal(f->a.res.status, DT_AGENT_INTERRUPTED);
    assert_int_equal(f->a.res.exit_status, DT_AGENT_EXIT_REQUEUE);
    assert_int_equal(f->a.res.interrupt_signal, SIGUSR1);
    assert_true(f->a.res.requeue_stopped);
    assert_int_equal(f->a.res.n_attempts, 1);
    assert_int_equal(f->a.res.attempts[0].first_failed, -1);
}

/* Rank 1 has no handler: the signal would kill it (138).  No rank gets it (rank 0's trap
 * would exit 75); every rank is stopped, and the job ends to be requeued, not failed. */
static void a_rank_without_a_handler_is_stopped_for_a_requeue(void **state)
{
    struct fixture *f = *state;
    run(f, "if [ $RANK = 0 ]; then trap 'exit 75' USR1; (sleep 0.3; kill -USR1 %d) & fi; sleep 30 & wait");
    assert_stopped_for_requeue(f);
    for (int r = 0; r < 2; r++) {
        const struct dt_agent_rank_result *rr = &f->a.res.attempts[0].ranks[r];
        assert_true(WIFSIGNALED(rr->wstatus) && WTERMSIG(rr->wstatus) == SIGTERM);
        assert_true(rr->stopped_by_agent);
    }
}

/* SIGUSR1 sent to a rank directly (Slurm's --signal without B:) kills it: the job stops to be
 * requeued, not failed with 138. */
static void a_rank_killed_by_usr1_directly_is_a_requeue(void **state)
{
    struct fixture *f = *state;
    run(f, "[ $RANK = 1 ] && { sleep 0.3; kill -USR1 $$; }; sleep 30 & wait");
    assert_stopped_for_requeue(f);
    const struct dt_agent_rank_result *r0 = &f->a.res.attempts[0].ranks[0];
    assert_true(r0->stopped_by_agent && WIFSIGNALED(r0->wstatus) && WTERMSIG(r0->wstatus) == SIGTERM);
}

/* signals_to_handle: SIGUSR2 is a time-limit warning like SIGUSR1. */
static void a_listed_usr2_is_passed_on_like_usr1(void **state)
{
    struct fixture *f = *state;
    f->a.job.signals_to_handle = 1ull << SIGTERM | 1ull << SIGUSR2;
    run(f, "trap 'exit 75' USR2; [ $RANK = 0 ] && (sleep 0.3; kill -USR2 %d) & sleep 30 & wait");
    assert_int_equal(f->a.res.status, DT_AGENT_INTERRUPTED);
    assert_int_equal(f->a.res.exit_status, DT_AGENT_EXIT_REQUEUE);
    assert_int_equal(f->a.res.interrupt_signal, SIGUSR2);
    assert_false(f->a.res.requeue_stopped);
    for (int r = 0; r < 2; r++)
        assert_false(f->a.res.attempts[0].ranks[r].stopped_by_agent);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(usr1_is_passed_on_and_75_ends_the_job, setup, teardown),
        cmocka_unit_test_setup_teardown(a_failure_after_usr1_still_fails, setup, teardown),
        cmocka_unit_test_setup_teardown(exit_75_without_usr1_is_a_failure, setup, teardown),
        cmocka_unit_test_setup_teardown(a_rank_without_a_handler_is_stopped_for_a_requeue, setup, teardown),
        cmocka_unit_test_setup_teardown(a_listed_usr2_is_passed_on_like_usr1, setup, teardown),
        cmocka_unit_test_setup_teardown(a_rank_killed_by_usr1_directly_is_a_requeue, setup, teardown),
    };
    return cmocka_run_group_tests_name("agent_requeue", tests, NULL, NULL);
}
