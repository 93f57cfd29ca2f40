/* mpirun_agents.c - `dtrain launch` for scheduler: mpirun with agents (every
 * backend but mpi): settle what the agents must agree on, run mpirun, follow it.
 *
 * Before any agent starts, every agent must know the run id (it names the run
 * directory on each node), the job token and where node 0's coordinator will
 * listen.  The launcher picks them and hands them over as -x NAME: a port from
 * rendezvous.port, else a free one on this machine when node 0 is this
 * machine, else one derived from the run id (29500-29999) that the agents'
 * rendezvous deadline guards.  The agents supervise and restart their ranks,
 * and prefix and log their lines; the launcher only runs mpirun as a helper
 * (base/proc.h: SIGINT/SIGTERM/SIGHUP/SIGQUIT become SIGTERM to mpirun, which
 * stops the agents, and SIGKILL to its process group after the grace period),
 * takes mpirun's --tag-output tags off the agents' lines, and exits with
 * mpirun's status, which is the first failed agent's.
 *
 * Not for backend: mpi (mpirun_submit.c: the launcher's agent supervises the
 * ranks there).
 */
#include "scheduler-adapters/mpirun_internal.h"

#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/args.h"
#include "base/clock.h"
#include "base/error.h"
#include "base/lines.h"
#include "base/log.h"
#include "base/proc.h"
#include "base/run_dir.h"
#include "spec/token.h"


/* A port the kernel calls free now (the agent binds it moments later). */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t len = sizeof sa;
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        port = ntohs(sa.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static int settle(const struct dt_job *job, char run_id[DT_RUN_ID_MAX], char token[65], char host[256], int *port)
{
    int rc = dt_run_dir_make_id(run_id, DT_RUN_ID_MAX);
    if (rc == 0 && job->rendezvous.auth != DT_AUTH_NONE)
        rc = dt_token_make(token);
    if (rc == 0)
        rc = dt_mpirun_first_host(job->mpirun, host, 256);
    if (rc)
        return rc;
    if (!host[0])
        gethostname(host, 255); /* mpirun maps rank 0 to the first node of the allocation: this one */
    *port = job->rendezvous.port;
    if (*port <= 0 && dt_mpirun__is_here(host))
        *port = free_port();
    if (*port <= 0) {
        unsigned h = 2166136261u;
        for (const char *p = run_id; *p; p++)
            h = (h ^ (unsigned char)*p) * 16777619u;
        *port = 29500 + (int)(h % 500);
        dt_log_info("rendezvous.port is 0 and node 0 (%s) is another host: the coordinator will listen on port %d "
                    "there (set rendezvous.port to choose)", host, *port);
    }
    return 0;
}

/* mpirun's lines as they come: an agent's without mpirun's tag (the agents
 * prefix their ranks' lines themselves), mpirun's own ones on stderr and into
 * its verdict (which agent ended first). */
struct follow {
    struct dt_mpirun_verdict verdict;
    char scratch[DT_LINES_MAX + 1];
    char line[DT_LINES_MAX + 2];
};

static void on_line(void *ctx, int stream, const char *line, size_t len, bool complete)
{
    (void)stream;
    (void)complete;
    struct follow *f = ctx;
    int node;
    bool err = true;
    const char *text = line;
    size_t n = len;
    if (!dt_mpirun__untag(line, len, f->scratch, &node, &err, &text, &n))
        dt_mpirun_verdict_feed(&f->verdict, line, len);
    memcpy(f->line, text, n);
    f->line[n] = '\n';
    fwrite(f->line, 1, n + 1, err ? stderr : stdout);
    fflush(err ? stderr : stdout);
}

/* The launcher's options that the agents apply, after `dtrain agent job.yaml`. */
static void agent_args(const struct dt_adapter_launch *opts, char grace[32], const char *args[8])
{
    snprintf(grace, 32, "%g", opts->grace_s > 0 ? opts->grace_s : DT_ARGS_GRACE_DEFAULT_S);
    int n = 0;
    args[n++] = "--grace-period";
    args[n++] = grace;
    if (opts->log_dir) {
        args[n++] = "--log-dir";
        args[n++] = opts->log_dir;
    }
    if (opts->ranks) {
        args[n++] = "--ranks";
        args[n++] = opts->ranks;
    }
    args[n] = NULL;
}

static int say_end(const struct dt_job *job, const struct dt_proc_run *r, const struct follow *f, int status,
                   double start)
{
    if (r->signal)
        return 128 + r->signal;
    if (status && f->verdict.rank >= 0)
        dt_log_error("job %s failed: mpirun exited with status %d; the agent of node %d ended first", job->name,
                     status, f->verdict.rank);
    else if (status)
        dt_log_error("job %s failed: mpirun exited with status %d", job->name, status);
    else
        dt_log_info("job %s succeeded in %.2f s", job->name, dt_clock_s() - start);
    return status;
}

int dt_mpirun__run_agents(const struct dt_job *job, const struct dt_adapter_launch *opts)
{
    char run_id[DT_RUN_ID_MAX], token[65] = "", host[256] = "", portbuf[16], grace[32];
    int port = 0;
    int rc = settle(job, run_id, token, host, &port);
    snprintf(portbuf, sizeof portbuf, "%d", port);
    if (rc == 0 && ((token[0] && setenv("DTRAIN_JOB_TOKEN", token, 1)) || setenv("DTRAIN_COORD_HOST", host, 1) ||
                    setenv("DTRAIN_COORD_PORT", portbuf, 1) || setenv("DTRAIN_RUN_ID", run_id, 1)))
        rc = dt_error_set(DT_ENOMEM, "cannot set the agents' environment");
    memset(token, 0, sizeof token);
    struct dt_mpirun_line line = {0};
    const char *args[8];
    agent_args(opts, grace, args);
    struct dt_mpirun_call call = {.dtrain = opts->dtrain_path ? opts->dtrain_path : "dtrain",
                                  .job_path = job->path, .export_names = dt_mpirun__agent_exports(job),
                                  .tag_output = true, .agent_args = args};
    if (rc == 0)
        rc = dt_mpirun_build(job, job->nproc_per_node, &call, &line);
    if (rc) {
        fprintf(stderr, "dtrain launch: %s\n", dt_error_last());
        return 2;
    }
    dt_log_info("job %s: %d agent%s through %s, coordinator %s:%d (node 0), run id %s", job->name, job->nodes,
                job->nodes == 1 ? "" : "s", line.argv[0], host, port, run_id);
    struct follow *f = calloc(1, sizeof *f);
    if (f)
        f->verdict.rank = -1;
    struct dt_proc_run r = {.argv = line.argv, .io = {DT_PROC_LINES, DT_PROC_LINES}, .on_line = on_line,
                            .ctx = f, .grace_s = opts->grace_s > 0 ? opts->grace_s : DT_ARGS_GRACE_DEFAULT_S};
    double start = opts->start_mono;
    rc = f ? dt_proc_run(&r) : dt_error_set(DT_ENOMEM, "out of memory");
    dt_mpirun_line_free(&line);
    if (rc < 0) {
        fprintf(stderr, "dtrain launch: %s\n", dt_error_last());
        free(f);
        return 1;
    }
    int status = say_end(job, &r, f, rc, start);
    free(f);
    return status;
}
