/* mpirun_agents.c - `dtrain launch` for scheduler: mpirun with agents (every
 * backend but mpi): settle what the agents must agree on, run mpirun, follow it.
 *
 * Before any agent starts, every agent must know the run id (it names the run
 * directory on each node), the job token and where node 0's coordinator will
 * listen.  The launcher picks them and hands them over as -x NAME: a port from
 * rendezvous.port, else a free one on this machine when node 0 is this
 * machine, else one derived from the run id (29500-29999) that the agents'
 * rendezvous deadline guards.  The agents supervise and restart their ranks;
 * the launcher's exit status is mpirun's, which is the first failed agent's.
 *
 * Not for backend: mpi (mpirun_submit.c starts the ranks themselves there).
 */
#include "scheduler-adapters/mpirun_internal.h"

#include <limits.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"
#include "launcher/coordinator/coordinator.h"
#include "launcher/run_dir.h"
#include "spec/token.h"

extern char **environ;

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

static bool is_here(const char *h)
{
    char me[256] = "";
    gethostname(me, sizeof me - 1);
    return !strcmp(h, "localhost") || !strncmp(h, "127.", 4) || !strcmp(h, me);
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
    if (*port <= 0 && is_here(host))
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

int dt_mpirun_run_agents(const struct dt_job *job, const struct dt_adapter_launch *opts)
{
    char run_id[DT_RUN_ID_MAX], token[65] = "", host[256] = "", portbuf[16];
    int port = 0;
    int rc = settle(job, run_id, token, host, &port);
    snprintf(portbuf, sizeof portbuf, "%d", port);
    if (rc == 0 && ((token[0] && setenv("DTRAIN_JOB_TOKEN", token, 1)) || setenv("DTRAIN_COORD_HOST", host, 1) ||
                    setenv("DTRAIN_COORD_PORT", portbuf, 1) || setenv("DTRAIN_RUN_ID", run_id, 1)))
        rc = dt_error_set(DT_ENOMEM, "cannot set the agents' environment");
    struct dt_mpirun_line line = {0};
    /* The launcher's options that the agents apply. */
    char grace[32];
    snprintf(grace, sizeof grace, "%g", opts->grace_s > 0 ? opts->grace_s : DT_AGENT_DEFAULT_GRACE_S);
    const char *args[8] = {"--grace-period", grace};
    int n = 2;
    if (opts->log_dir) {
        args[n++] = "--log-dir";
        args[n++] = opts->log_dir;
    }
    if (opts->ranks) {
        args[n++] = "--ranks";
        args[n++] = opts->ranks;
    }
    struct dt_mpirun_call call = {.dtrain = opts->dtrain_path ? opts->dtrain_path : "dtrain",
                                  .job_path = job->path, .export_names = dt_mpirun_agent_exports(job),
                                  .tag_output = true, .agent_args = args};
    if (rc == 0)
        rc = dt_mpirun_build(job, job->nproc_per_node, &call, &line);
    if (rc) {
        fprintf(stderr, "dtrain launch: %s\n", dt_error_last());
        return 2;
    }
    dt_log_info("job %s: %d agent%s through %s, coordinator %s:%d (node 0), run id %s", job->name, job->nodes,
                job->nodes == 1 ? "" : "s", line.argv[0], host, port, run_id);
    /* Agents prefix their ranks' lines themselves: only mpirun's tag goes. */
    struct dt_mpirun_attempt a = {.argv = line.argv, .envp = environ, .world = job->nodes,
                                  .grace_s = opts->grace_s > 0 ? opts->grace_s : DT_AGENT_DEFAULT_GRACE_S,
                                  .t0 = opts->start_mono};
    rc = dt_mpirun_run_attempt(&a);
    free(a.tails);
    dt_mpirun_line_free(&line);
    if (rc) {
        fprintf(stderr, "dtrain launch: %s\n", dt_error_last());
        return 1;
    }
    if (a.interrupt_signal)
        return 128 + a.interrupt_signal;
    if (a.status && a.verdict.rank >= 0)
        dt_log_error("job %s failed: mpirun exited with status %d; the agent of node %d ended first", job->name,
                     a.status, a.verdict.rank);
    else if (a.status)
        dt_log_error("job %s failed: mpirun exited with status %d", job->name, a.status);
    else
        dt_log_info("job %s succeeded in %.2f s", job->name, a.end_s);
    return a.status;
}
