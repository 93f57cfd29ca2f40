/* agent_fixture.h - the set-up the agent's unit tests with real `sh -c` ranks
 * share (test_agent_hooks, test_agent_requeue, test_agent_run,
 * test_agent_watchdog): a scratch run directory with the console in
 * console.out/console.err, a one-node job, and a config that runs argv.
 * Each test's own fixture holds a `struct agent_fixture a` plus what it adds.
 * Header-only so each test stays one file; not a test itself; include it
 * after cmocka.h. */
#ifndef DT_TEST_AGENT_FIXTURE_H
#define DT_TEST_AGENT_FIXTURE_H

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "launcher/agent/agent.h"
#include "spec/jobspec.h"
#include "base/clock.h"

struct agent_fixture {
    char dir[64];
    char *argv[4]; /* sh -c <script> */
    struct dt_job job;
    struct dt_agent_config cfg;
    struct dt_agent_result res;
    int out_fd, err_fd;
};

/* `name` tells the scratch directories of the tests apart in /tmp. */
static inline int agent_fixture_open(struct agent_fixture *a, const char *name)
{
    snprintf(a->dir, sizeof a->dir, "/tmp/dtrain-%s-test.XXXXXX", name);
    if (!mkdtemp(a->dir))
        return -1;
    char path[128];
    snprintf(path, sizeof path, "%s/console.out", a->dir);
    a->out_fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    snprintf(path, sizeof path, "%s/console.err", a->dir);
    a->err_fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (a->out_fd < 0 || a->err_fd < 0)
        return -1;
    a->job.name = "unit";
    a->job.nodes = 1;
    a->argv[0] = "sh";
    a->argv[1] = "-c";
    a->cfg = (struct dt_agent_config){.job = &a->job,
                                      .argv = (const char *const *)a->argv,
                                      .nnodes = 1,
                                      .run_id = "RID",
                                      .run_dir = a->dir,
                                      .master_addr = "127.0.0.1",
                                      .master_port = 1,
                                      .grace_s = 1.0,
                                      .out_fd = a->out_fd,
                                      .err_fd = a->err_fd};
    return 0;
}

static inline int agent_fixture_close(struct agent_fixture *a)
{
    dt_agent_result_free(&a->res);
    close(a->out_fd);
    close(a->err_fd);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", a->dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* nproc ranks of `script` with max_restarts; the agent itself must work. */
static inline void agent_fixture_run(struct agent_fixture *a, int nproc, int max_restarts, const char *script)
{
    a->argv[2] = (char *)script;
    a->job.max_restarts = max_restarts;
    a->job.nproc_per_node = nproc;
    a->cfg.nproc = nproc;
    assert_int_equal(dt_agent_run(&a->cfg, &a->res), 0);
}

/* A file of the run directory (or, with a leading '/', any file), NULL when
 * missing; the buffer is reused by the next call. */
static inline char *agent_fixture_read(const struct agent_fixture *a, const char *name)
{
    static char buf[1 << 16];
    char path[512];
    if (name[0] == '/')
        snprintf(path, sizeof path, "%s", name);
    else
        snprintf(path, sizeof path, "%s/%s", a->dir, name);
    FILE *fp = fopen(path, "r");
    if (!fp)
        return NULL;
    size_t n = fread(buf, 1, sizeof buf - 1, fp);
    fclose(fp);
    buf[n] = 0;
    return buf;
}

#endif
