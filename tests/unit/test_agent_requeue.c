/* test_agent_requeue.c - SIGUSR1 to the agent (a scheduler's time limit is near): it is
 * passed on to every rank without stopping any; ranks that then exit with 75 stopped to be
 * requeued (no failure, no restart, the agent's status is 75), while a rank that fails still
 * fails, and 75 without the signal is an ordinary failure. */
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

#include "launcher/agent.h"
#include "launcher/jobspec.h"

struct fixture {
    char dir[64];
    char *argv[4];
    char script[512];
    struct dt_job job;
    struct dt_agent_config cfg;
    struct dt_agent_result res;
    int err_fd;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    strcpy(f->dir, "/tmp/dtrain-requeue-test.XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    char path[128];
    snprintf(path, sizeof path, "%s/console.err", f->dir);
    f->err_fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    f->job.name = "unit";
    f->job.nodes = 1;
    f->argv[0] = "sh";
    f->argv[1] = "-c";
    f->argv[2] = f->script;
    f->cfg = (struct dt_agent_config){.job = &f->job, .argv = (const char *const *)f->argv, .nnodes = 1,
                                      .run_id = "RID", .run_dir = f->dir, .master_addr = "127.0.0.1",
                                      .master_port = 1, .grace_s = 1.0, .out_fd = f->err_fd, .err_fd = f->err_fd};
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    dt_agent_result_free(&f->res);
    close(f->err_fd);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", f->dir);
    if (system(cmd) != 0)
        return -1;
    free(f);
    return 0;
}

/* Two ranks of `script` (in which %d is the agent's pid), max_restarts 2. */
static void run(struct fixture *f, const char *script)
{
    snprintf(f->script, sizeof f->script, script, (int)getpid());
    f->job.max_restarts = 2;
    f->job.nproc_per_node = f->cfg.nproc = 2;
    assert_int_equal(dt_agent_run(&f->cfg, &f->res), 0);
}

static const char *file(struct fixture *f, const char *name)
{
    static char buf[8192];
    char path[256];
    snprintf(path, sizeof path, "%s/%s", f->dir, name);
    FILE *fp = fopen(path, "r");
    size_t n = fp ? fread(buf, 1, sizeof buf - 1, fp) : 0;
    if (fp)
        fclose(fp);
    buf[n] = 0;
    return buf;
}

/* Rank 1 stops at once; rank 0 takes its time (a checkpoint being written) and
 * must not be stopped because rank 1 exited first. */
static void usr1_is_passed_on_and_75_ends_the_job(void **state)
{
    struct fixture *f = *state;
    run(f, "if [ $RANK = 0 ]; then trap 'sleep 0.5; echo saved; exit 75' USR1; (sleep 0.3; kill -USR1 %d) & "
           "else trap 'exit 75' USR1; fi; sleep 30 & wait");
    assert_int_equal(f->res.status, DT_AGENT_INTERRUPTED);
    assert_int_equal(f->res.exit_status, DT_AGENT_EXIT_REQUEUE);
    assert_int_equal(f->res.interrupt_signal, SIGUSR1);
    assert_int_equal(f->res.n_attempts, 1); /* no restart: the job is to be requeued */
    for (int r = 0; r < 2; r++) {
        const struct dt_agent_rank_result *rr = &f->res.attempts[0].ranks[r];
        assert_true(WIFEXITED(rr->wstatus) && WEXITSTATUS(rr->wstatus) == 75);
        assert_false(rr->stopped_by_agent);
    }
    assert_int_equal(f->res.attempts[0].first_failed, -1);
    assert_string_equal(file(f, "attempt_0/rank_0.out"), "saved\n");
}

static void a_failure_after_usr1_still_fails(void **state)
{
    struct fixture *f = *state;
    run(f, "if [ $RANK = 0 ]; then trap 'exit 75' USR1; (sleep 0.3; kill -USR1 %d) & "
           "else trap 'exit 3' USR1; fi; sleep 30 & wait");
    assert_int_equal(f->res.status, DT_AGENT_FAILED);
    assert_int_equal(f->res.exit_status, 3);
    assert_int_equal(f->res.first_failure.rank, 1);
}

static void exit_75_without_usr1_is_a_failure(void **state)
{
    struct fixture *f = *state;
    run(f, "[ $RANK = 1 ] && exit 75; sleep 30 & wait");
    assert_int_equal(f->res.status, DT_AGENT_FAILED);
    assert_int_equal(f->res.exit_status, 75);
    assert_int_equal(f->res.n_attempts, 3); /* restarted like any failure */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(usr1_is_passed_on_and_75_ends_the_job, setup, teardown),
        cmocka_unit_test_setup_teardown(a_failure_after_usr1_still_fails, setup, teardown),
        cmocka_unit_test_setup_teardown(exit_75_without_usr1_is_a_failure, setup, teardown),
    };
    return cmocka_run_group_tests_name("agent_requeue", tests, NULL, NULL);
}
