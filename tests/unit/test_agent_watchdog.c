/* test_agent_watchdog.c - the watchdog's rule on made-up observations (each
 * way to be hung, and the look-alikes that are not), then the agent with real
 * processes: a rank that SIGSTOPs itself (alone, or as the child of a shell) is
 * declared hung within heartbeat_timeout plus a period, its report is written,
 * the group restarts and succeeds; restart_policy.on_exit makes a code final
 * or retried, and a listed status is the first failure even when a peer's
 * exit is reaped first, as is a rank killed by someone else's signal; an
 * unreachable coordinator ends the job after rendezvous.timeout, without
 * restarts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "launcher/agent/agent.h"
#include "spec/jobspec.h"
#include "tests/unit/agent_fixture.h"

/* --- the rule --------------------------------------------------------------- */

static const struct dt_agent_watch_limits hb = {
    .hb_timeout = 3, .first_hb_s = 63, .heartbeats = true, .first_rank = 4};

/* Four healthy ranks at step 10 at t = 100, spawned at t = 0. */
static void healthy(struct dt_agent_watch w[4])
{
    for (int i = 0; i < 4; i++)
        w[i] = (struct dt_agent_watch){.spawn_s = 0,
                                       .has_hb = true,
                                       .step = 10,
                                       .hb_age_s = 0.5,
                                       .step_since_s = 99,
                                       .state = 0,
                                       .state_since_s = 0};
}

static void judge_healthy_and_look_alikes(void **state)
{
    (void)state;
    struct dt_agent_watch w[4];
    char why[256];
    healthy(w);
    assert_int_equal(dt_agent_watch_judge(w, 4, 100, &hb, why, sizeof why), -1);
    /* All at one step for long: a long step (or a stuck collective), not one rank's fault. */
    for (int i = 0; i < 4; i++)
        w[i].step_since_s = 10;
    assert_int_equal(dt_agent_watch_judge(w, 4, 100, &hb, why, sizeof why), -1);
    /* One sample behind for a moment: heartbeats are samples. */
    healthy(w);
    w[2].step = 9;
    w[2].step_since_s = 90;
    w[2].behind_since_s = 99.5;
    assert_int_equal(dt_agent_watch_judge(w, 4, 100, &hb, why, sizeof why), -1);
    /* D with heartbeats coming: busy in the kernel, and the heartbeat says it lives. */
    healthy(w);
    w[1].state = 'D';
    w[1].state_since_s = 50;
    assert_int_equal(dt_agent_watch_judge(w, 4, 100, &hb, why, sizeof why), -1);
    /* Starting up without a heartbeat yet, inside rendezvous.timeout + heartbeat_timeout. */
    healthy(w);
    w[3].has_hb = false;
    assert_int_equal(dt_agent_watch_judge(w, 4, 60, &hb, why, sizeof why), -1);
}

static void judge_each_way_to_hang(void **state)
{
    (void)state;
    struct dt_agent_watch w[4];
    char why[256];
    healthy(w);
    w[2].state = 'T';
    w[2].state_since_s = 96.5;
    assert_int_equal(dt_agent_watch_judge(w, 4, 100, &hb, why, sizeof why), 2);
    assert_non_null(strstr(why, "process state T"));
    healthy(w);
    w[1].hb_age_s = 3.2;
    assert_int_equal(dt_agent_watch_judge(w, 4, 100, &hb, why, sizeof why), 1);
    assert_non_null(strstr(why, "silent for 3.2 s"));
    assert_non_null(strstr(why, "last step 10"));
    healthy(w);
    w[3].has_hb = false;
    assert_int_equal(dt_agent_watch_judge(w, 4, 64, &hb, why, sizeof why), 3);
    assert_non_null(strstr(why, "without a heartbeat"));
    healthy(w);
    w[0].step = 7;
    w[0].step_since_s = 80;
    w[0].behind_since_s = 95;
    assert_int_equal(dt_agent_watch_judge(w, 4, 100, &hb, why, sizeof why), 0);
    assert_non_null(strstr(why, "stuck at step 7 for 20.0 s while rank 5 reached step 10"));
    /* Without heartbeats (command: jobs) only /proc counts, D included. */
    struct dt_agent_watch_limits none = hb;
    none.heartbeats = false;
    healthy(w);
    w[1].hb_age_s = 50; /* ignored */
    assert_int_equal(dt_agent_watch_judge(w, 4, 100, &none, why, sizeof why), -1);
    w[1].state = 'D';
    w[1].state_since_s = 97;
    assert_int_equal(dt_agent_watch_judge(w, 4, 100, &none, why, sizeof why), 1);
    assert_non_null(strstr(why, "uninterruptible sleep"));
    w[1].state_since_s = 98; /* not yet heartbeat_timeout */
    assert_int_equal(dt_agent_watch_judge(w, 4, 100, &none, why, sizeof why), -1);
}

/* Progress rows (command: jobs, docs/progress.md) are optional heartbeats: a
 * rank that wrote none, or paused, is judged by /proc alone, D included;
 * one that wrote rows and fell silent is hung, said in rows' words. */
static void judge_progress_rows(void **state)
{
    (void)state;
    struct dt_agent_watch w[4];
    char why[256];
    struct dt_agent_watch_limits rows = hb;
    rows.from_rows = true;
    healthy(w);
    w[3].has_hb = false; /* never wrote a row, long after the start */
    assert_int_equal(dt_agent_watch_judge(w, 4, 1000, &rows, why, sizeof why), -1);
    w[2].hb_age_s = 3.5;
    assert_int_equal(dt_agent_watch_judge(w, 4, 100, &rows, why, sizeof why), 2);
    assert_non_null(strstr(why, "silent for 3.5 s: no progress row (heartbeat_timeout 3 s); last step 10"));
    healthy(w);
    w[0].has_hb = false;
    w[0].state = 'D';
    w[0].state_since_s = 96;
    assert_int_equal(dt_agent_watch_judge(w, 4, 100, &rows, why, sizeof why), 0);
    assert_non_null(strstr(why, "uninterruptible sleep"));
}

/* --- the agent with real processes -------------------------------------------- */

struct fixture {
    struct agent_fixture a;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    *state = f;
    if (!f || agent_fixture_open(&f->a, "watchdog") < 0)
        return -1;
    f->a.job.rendezvous.heartbeat_timeout_s = 1;
    f->a.job.rendezvous.timeout_s = 10;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    free(f->a.job.restart_policy.on_exit);
    int rc = agent_fixture_close(&f->a);
    free(f);
    return rc;
}

static void run(struct fixture *f, int nproc, int max_restarts, const char *script)
{
    agent_fixture_run(&f->a, nproc, max_restarts, script);
}

static void check_stopped_rank_recovers(struct fixture *f, const char *script)
{
    run(f, 3, 1, script);
    assert_int_equal(f->a.res.status, DT_AGENT_SUCCEEDED);
    assert_int_equal(f->a.res.n_attempts, 2);
    struct dt_agent_attempt *at = &f->a.res.attempts[0];
    assert_int_equal(at->hung, 1);
    assert_int_equal(at->first_failed, 1);
    /* The stop comes right after the start; the verdict within heartbeat_timeout (1 s) + 5 s. */
    double took = at->end_s - at->start_s;
    printf("# attempt 0 with a stopped rank lasted %.2f s\n", took);
    assert_true(took >= 1.0 && took < 6.0);
    assert_true(f->a.res.have_failure && f->a.res.first_failure.hung);
    assert_int_equal(f->a.res.first_failure.rank, 1);
    assert_int_equal(f->a.res.first_failure.hung_step, -1);
    assert_non_null(strstr(f->a.res.first_failure.hang_reason, "process state T"));
    char path[256];
    snprintf(path, sizeof path, "%s/attempt_0/hang_rank_1.txt", f->a.dir);
    assert_string_equal(f->a.res.first_failure.hang_report, path);
    char *report = agent_fixture_read(&f->a, path);
    assert_non_null(report);
    assert_non_null(strstr(report, "rank 1 (pid "));
    assert_non_null(strstr(report, "state T"));
    assert_non_null(strstr(report, "about to stop"));           /* its last stderr line */
    assert_non_null(strstr(report, "== rank 0 (local 0, pid")); /* the others too */
    FILE *sf = tmpfile();
    assert_int_equal(dt_agent_write_summary_to(sf, &f->a.cfg, &f->a.res), 0);
    rewind(sf);
    char json[1 << 15];
    json[fread(json, 1, sizeof json - 1, sf)] = 0;
    fclose(sf);
    assert_non_null(strstr(json, "\"hang\": {\"rank\": 1, \"step\": null, \"detected_s\": "));
    assert_non_null(strstr(json, "\"hung_rank\": 1,"));
}

static void stopped_rank_is_hung_and_the_group_recovers(void **state)
{
    check_stopped_rank_recovers(*state, "if [ $RANK = 1 ] && [ $DTRAIN_RESTART_COUNT = 0 ]; then "
                                        "echo about to stop >&2; kill -STOP $$; fi; sleep 0.2");
}

/* The process in T is a child of the rank's shell: the watchdog looks at the whole group. */
static void stopped_child_of_a_shell_is_seen(void **state)
{
    check_stopped_rank_recovers(*state, "if [ $RANK = 1 ] && [ $DTRAIN_RESTART_COUNT = 0 ]; then "
                                        "echo about to stop >&2; sh -c 'kill -STOP $$'; fi; sleep 0.2");
}

static void set_policy(struct fixture *f, int code, enum dt_exit_action action, enum dt_exit_action otherwise)
{
    f->a.job.restart_policy.on_exit = calloc(1, sizeof *f->a.job.restart_policy.on_exit);
    f->a.job.restart_policy.on_exit[0] = (struct dt_exit_rule){code, action};
    f->a.job.restart_policy.n_on_exit = 1;
    f->a.job.restart_policy.otherwise = otherwise;
}

static void on_exit_fail_is_final(void **state)
{
    struct fixture *f = *state;
    set_policy(f, 42, DT_EXIT_FAIL, DT_EXIT_RETRY);
    run(f, 2, 3, "[ $RANK = 1 ] && exit 42; sleep 5");
    assert_int_equal(f->a.res.status, DT_AGENT_FAILED);
    assert_int_equal(f->a.res.exit_status, 42);
    assert_int_equal(f->a.res.n_attempts, 1);
    assert_true(f->a.res.first_failure.final);
}

static void other_codes_are_retried(void **state)
{
    struct fixture *f = *state;
    set_policy(f, 42, DT_EXIT_FAIL, DT_EXIT_RETRY);
    run(f, 2, 2, "[ $RANK = 1 ] && exit 3; true");
    assert_int_equal(f->a.res.status, DT_AGENT_FAILED);
    assert_int_equal(f->a.res.exit_status, 3);
    assert_int_equal(f->a.res.n_attempts, 3);
    assert_false(f->a.res.first_failure.final);
}

/* default: fail makes unlisted codes final, and a listed retry still retries. */
static void default_fail_with_a_retry_code(void **state)
{
    struct fixture *f = *state;
    set_policy(f, 75, DT_EXIT_RETRY, DT_EXIT_FAIL);
    run(f, 2, 2, "[ $RANK = 0 ] && [ $DTRAIN_RESTART_COUNT = 0 ] && exit 75; [ $RANK = 0 ] && exit 9; true");
    assert_int_equal(f->a.res.n_attempts, 2); /* 75 retried once, then 9 is final */
    assert_int_equal(f->a.res.exit_status, 9);
    assert_true(f->a.res.first_failure.final);
}

/* A PyTorch rank that exits 42 tears down for a while; its peer, told "connection
 * closed by peer", exits 1 and is reaped first (test_fault.sh met this in CI).  The
 * other rank's 42, which on_exit lists, is still seen (SIGTERM waits for it) and
 * is the first failure: no restart. */
static void a_listed_status_outranks_a_peer_reaped_first(void **state)
{
    struct fixture *f = *state;
    set_policy(f, 42, DT_EXIT_FAIL, DT_EXIT_RETRY);
    run(f, 2, 3,
        "if [ $RANK = 1 ]; then touch $DTRAIN_RUN_DIR/failing.$DTRAIN_RESTART_COUNT; sleep 0.2; exit 42; fi; "
        "while [ ! -e $DTRAIN_RUN_DIR/failing.$DTRAIN_RESTART_COUNT ]; do sleep 0.01; done; exit 1");
    assert_int_equal(f->a.res.n_attempts, 1);
    assert_int_equal(f->a.res.exit_status, 42);
    assert_int_equal(f->a.res.first_failure.rank, 1);
    assert_true(f->a.res.first_failure.final);
    assert_int_equal(f->a.res.attempts[0].ranks[0].wstatus >> 8, 1); /* rank 0 was reaped first */
    assert_true(f->a.res.attempts[0].ranks[0].exit_s < f->a.res.attempts[0].ranks[1].exit_s);
}

/* The same race the other way: default fail, a listed retry.  The rank that
 * exits 75 is the first failure, so the group restarts and then succeeds. */
static void a_listed_retry_outranks_a_default_fail(void **state)
{
    struct fixture *f = *state;
    set_policy(f, 75, DT_EXIT_RETRY, DT_EXIT_FAIL);
    run(f, 2, 2,
        "[ $DTRAIN_RESTART_COUNT = 1 ] && exit 0; "
        "if [ $RANK = 1 ]; then touch $DTRAIN_RUN_DIR/failing; sleep 0.2; exit 75; fi; "
        "while [ ! -e $DTRAIN_RUN_DIR/failing ]; do sleep 0.01; done; exit 1");
    assert_int_equal(f->a.res.n_attempts, 2);
    assert_int_equal(f->a.res.status, DT_AGENT_SUCCEEDED);
    assert_int_equal(f->a.res.attempts[0].ranks[f->a.res.attempts[0].first_failed].rank, 1);
}

/* A rank SIGKILLed by something else is the root cause even when a peer's
 * "peer died" exit is reaped first (the order the kill-point test met). */
static void signal_death_outranks_a_peer_exit(void **state)
{
    struct fixture *f = *state;
    /* Rank 1 exits once rank 0 ignores SIGTERM (its sleep inherits that), so
     * rank 0 outlives the agent's SIGTERM and dies by its own SIGKILL. */
    run(f, 2, 0,
        "if [ $RANK = 1 ]; then while [ ! -e $DTRAIN_RUN_DIR/ready ]; do sleep 0.01; done; exit 1; fi; "
        "trap '' TERM; touch $DTRAIN_RUN_DIR/ready; sleep 0.1; kill -KILL $$");
    assert_int_equal(f->a.res.status, DT_AGENT_FAILED);
    assert_int_equal(f->a.res.first_failure.rank, 0);
    assert_true(WIFSIGNALED(f->a.res.first_failure.wstatus) &&
                WTERMSIG(f->a.res.first_failure.wstatus) == SIGKILL);
    assert_int_equal(f->a.res.exit_status, 137);
}

/* A heartbeat source that says the coordinator is gone. */
static int gone(void *ctx, int rank, int64_t *step, double *age_s)
{
    (void)ctx, (void)rank, (void)step, (void)age_s;
    return dt_error_set(DT_ECONN, "cannot connect to 127.0.0.1:1: Connection refused");
}

static void unreachable_coordinator_ends_the_job(void **state)
{
    struct fixture *f = *state;
    f->a.job.rendezvous.timeout_s = 1;
    f->a.cfg.heartbeat = gone;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    run(f, 2, 3, "sleep 30");
    clock_gettime(CLOCK_MONOTONIC, &b);
    double took = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
    assert_int_equal(f->a.res.status, DT_AGENT_FAILED);
    assert_int_equal(f->a.res.exit_status, 1);
    assert_int_equal(f->a.res.n_attempts, 1); /* no restart against a dead coordinator */
    assert_non_null(strstr(f->a.res.coordinator_lost, "the coordinator 127.0.0.1:1 has not answered for"));
    assert_non_null(strstr(f->a.res.coordinator_lost, "Connection refused"));
    assert_true(took >= 1.0 && took < 4.0);
    for (int i = 0; i < 2; i++)
        assert_true(f->a.res.attempts[0].ranks[i].exited && f->a.res.attempts[0].ranks[i].stopped_by_agent);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(judge_healthy_and_look_alikes),
        cmocka_unit_test(judge_each_way_to_hang),
        cmocka_unit_test(judge_progress_rows),
        cmocka_unit_test_setup_teardown(stopped_rank_is_hung_and_the_group_recovers, setup, teardown),
        cmocka_unit_test_setup_teardown(stopped_child_of_a_shell_is_seen, setup, teardown),
        cmocka_unit_test_setup_teardown(on_exit_fail_is_final, setup, teardown),
        cmocka_unit_test_setup_teardown(other_codes_are_retried, setup, teardown),
        cmocka_unit_test_setup_teardown(default_fail_with_a_retry_code, setup, teardown),
        cmocka_unit_test_setup_teardown(a_listed_status_outranks_a_peer_reaped_first, setup, teardown),
        cmocka_unit_test_setup_teardown(a_listed_retry_outranks_a_default_fail, setup, teardown),
        cmocka_unit_test_setup_teardown(signal_death_outranks_a_peer_exit, setup, teardown),
        cmocka_unit_test_setup_teardown(unreachable_coordinator_ends_the_job, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
