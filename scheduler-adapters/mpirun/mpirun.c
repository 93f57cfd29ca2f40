/* mpirun.c - the mpirun adapter: `scheduler: mpirun` behind struct dt_adapter.
 *
 * render prints the mpirun line (mpirun_argv.c) with the variables it passes
 * on; submit is mpirun_submit.c; discover, here, tells an agent started by
 * mpirun (or by srun --mpi=pmix) its node from the MPI launcher's variables
 * and the coordinator from what the launcher settled (DTRAIN_COORD_HOST,
 * DTRAIN_COORD_PORT, DTRAIN_RUN_ID), falling back to the spec: the first
 * host of the job and rendezvous.port.
 *
 * Not for running anything.
 */
#include "scheduler-adapters/mpirun/mpirun_internal.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "scheduler-adapters/adapter.h"

/* What the agents are told by `dtrain launch`, as -x NAME. */
static const char *const agent_names[] = {"DTRAIN_JOB_TOKEN", "DTRAIN_COORD_HOST", "DTRAIN_COORD_PORT",
                                          "DTRAIN_RUN_ID", NULL};

const char *const *dt_mpirun__agent_exports(const struct dt_job *job)
{
    return job->rendezvous.auth == DT_AUTH_NONE ? agent_names + 1 : agent_names;
}

static int render(const struct dt_job *job, const char *job_path, FILE *out)
{
    bool mpi = dt_mpirun_ranks_are_mpi(job);
    int nproc = job->nproc_per_node;
    if (mpi && nproc < 1)
        return dt_error_set(DT_EINVAL, "%s: nproc_per_node: gpu with backend: mpi; mpirun needs a number of ranks "
                                       "per node", job_path);
    const char *none[] = {NULL};
    struct dt_mpirun_call call = {.dtrain = "dtrain", .job_path = job_path,
                                  .export_names = mpi ? none : dt_mpirun__agent_exports(job),
                                  .rank_wrapper = true};
    struct dt_mpirun_line l;
    int rc = dt_mpirun_build(job, nproc, &call, &l);
    if (rc)
        return rc;
    fprintf(out, "# dtrain render mpirun: job %s, %d node%s\n", job->name, job->nodes, job->nodes == 1 ? "" : "s");
    if (mpi) {
        fprintf(out, "# backend: mpi: mpirun starts all %d ranks itself.  Run it with `dtrain launch %s`, which\n"
                     "# hosts the coordinator, adds --tag-output and passes the ranks' environment (the job\n"
                     "# token included) as -x NAME; by hand the ranks have no coordinator to report to.\n",
                job->nodes * nproc, job_path);
    } else {
        fprintf(out, "# One `dtrain agent` per node; node 0's agent hosts the coordinator.  mpirun passes these\n"
                     "# on with -x NAME (the token never appears on a command line):\n");
        if (job->rendezvous.auth != DT_AUTH_NONE)
            fprintf(out, "#   export DTRAIN_JOB_TOKEN=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \\n')\n");
        char host[256];
        if (dt_mpirun_first_host(job->mpirun, host, sizeof host) < 0)
            snprintf(host, sizeof host, "<first host>");
        fprintf(out, "#   export DTRAIN_COORD_HOST=%s   # node 0, as every node reaches it\n",
                host[0] ? host : "$(hostname)");
        if (job->rendezvous.port > 0)
            fprintf(out, "#   export DTRAIN_COORD_PORT=%d\n", job->rendezvous.port);
        else
            fprintf(out, "#   export DTRAIN_COORD_PORT=29500   # a free port on that host\n");
        fprintf(out, "#   export DTRAIN_RUN_ID=$(date -u +%%Y%%m%%d-%%H%%M%%S)-manual\n");
    }
    dt_mpirun__print_line(out, l.argv);
    dt_mpirun_line_free(&l);
    return 0;
}

/* The first host of a Slurm node list: "gpu[07-09,12],cpu1" -> "gpu07". */
static void slurm_first_host(const char *list, char *out, size_t size)
{
    size_t pre = strcspn(list, ",[");
    if (list[pre] != '[') {
        snprintf(out, size, "%.*s", (int)pre, list);
        return;
    }
    const char *r = list + pre + 1;
    snprintf(out, size, "%.*s%.*s", (int)pre, list, (int)strcspn(r, "-,]"), r);
}

/* This host by name, loopback, or one of its IPv4 addresses (hosts named by address). */
bool dt_mpirun__is_here(const char *h)
{
    char me[256] = "";
    gethostname(me, sizeof me - 1);
    if (!strcmp(h, "localhost") || !strncmp(h, "127.", 4) || !strcmp(h, me))
        return true;
    struct in_addr want;
    struct ifaddrs *ifs = NULL;
    if (inet_pton(AF_INET, h, &want) != 1 || getifaddrs(&ifs) != 0)
        return false;
    bool found = false;
    for (struct ifaddrs *i = ifs; i && !found; i = i->ifa_next)
        found = i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
                ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr == want.s_addr;
    freeifaddrs(ifs);
    return found;
}

static int coordinator(const struct dt_job *job, char *const *env, int nnodes, struct dt_adapter_node *out)
{
    const char *h = dt_adapter_getenv(env, "DTRAIN_COORD_HOST"), *list = dt_adapter_getenv(env, "SLURM_JOB_NODELIST");
    int rc = 0;
    if (h && *h)
        snprintf(out->coord_host, sizeof out->coord_host, "%s", h);
    else if ((rc = dt_mpirun_first_host(job->mpirun, out->coord_host, sizeof out->coord_host)) < 0)
        return rc;
    if (!out->coord_host[0] && list && *list)
        slurm_first_host(list, out->coord_host, sizeof out->coord_host);
    if (!out->coord_host[0] && nnodes == 1)
        snprintf(out->coord_host, sizeof out->coord_host, "127.0.0.1");
    if (!out->coord_host[0])
        return dt_error_set(DT_ENOTFOUND, "%s: which host runs the coordinator?  DTRAIN_COORD_HOST is not set, "
                                          "and neither mpirun.hosts, mpirun.hostfile nor SLURM_JOB_NODELIST names "
                                          "the first host (start the job with dtrain launch, which sets it)",
                            job->path);
    const char *p = dt_adapter_getenv(env, "DTRAIN_COORD_PORT");
    if (p && *p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (*end || v < 1 || v > 65535)
            return dt_error_set(DT_EINVAL, "DTRAIN_COORD_PORT=%s is not a port (1-65535)", p);
        out->coord_port = (int)v;
    } else if (job->rendezvous.port > 0) {
        out->coord_port = job->rendezvous.port;
    } else {
        return dt_error_set(DT_ENOTFOUND, "%s: rendezvous.port is 0 (pick one) and DTRAIN_COORD_PORT is not set: "
                                          "agents started by an MPI launcher must agree on the coordinator's port "
                                          "before any starts (dtrain launch sets it)",
                            job->path);
    }
    return 0;
}

static int discover(const struct dt_job *job, char *const *env, struct dt_adapter_node *out)
{
    struct dt_mpirun_place p;
    memset(out, 0, sizeof *out);
    int rc = dt_mpirun_read_place(env, &p);
    if (rc)
        return dt_error_prefix("dtrain agent under mpirun");
    if (p.size != job->nodes)
        return dt_error_set(DT_EINVAL, "%s: the MPI launcher started %d agents but the spec says nodes: %d (mpirun "
                                       "needs -np %d --map-by ppr:1:node; see dtrain render mpirun)",
                            job->path, p.size, job->nodes, job->nodes);
    out->node_rank = p.rank;
    out->nnodes = p.size;
    if ((rc = coordinator(job, env, p.size, out)) < 0)
        return rc;
    const char *jid = dt_adapter_getenv(env, "OMPI_MCA_ess_base_jobid");
    if (!jid)
        jid = dt_adapter_getenv(env, "SLURM_JOB_ID");
    snprintf(out->job_id, sizeof out->job_id, "%s", jid ? jid : "");
    const char *run = dt_adapter_getenv(env, "DTRAIN_RUN_ID");
    if (run && *run)
        snprintf(out->run_id, sizeof out->run_id, "%s", run);
    else if (jid && *jid)
        snprintf(out->run_id, sizeof out->run_id, "mpi-%s", jid);
    else
        return dt_error_set(DT_ENOTFOUND, "neither DTRAIN_RUN_ID nor the launcher's job id (OMPI_MCA_ess_base_jobid, "
                                          "SLURM_JOB_ID) is set: the agents cannot agree on a run directory");
    return 0;
}

const struct dt_adapter dt_adapter_mpirun = {
    .name = "mpirun",
    .scheduler = DT_SCHED_MPIRUN,
    .render = render,
    .submit = dt_mpirun__submit,
    .discover = discover,
};
