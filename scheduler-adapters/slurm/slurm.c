/* slurm.c - the Slurm adapter (`scheduler: slurm`, adapter.h's contract):
 * the table entry, and discover: `dtrain agent` under srun learns this
 * node's place from SLURM_* variables.
 *
 *   dtrain render slurm job.yaml   the sbatch script (slurm_render.c)
 *   dtrain launch job.yaml         sbatch it and follow it (slurm_submit.c)
 *   dtrain agent job.yaml          under srun: this node's place (here)
 *
 *   node rank   SLURM_NODEID (one agent per node, so also SLURM_PROCID)
 *   nodes       SLURM_STEP_NUM_NODES, else SLURM_NNODES; must equal the spec's nodes:
 *               (an elastic job's nodes: MIN:MAX: any count in the range, which
 *               Slurm chose from --nodes=MIN-MAX; its agents other than node 0
 *               get node rank -1, a place the rounds give them)
 *   node 0      the first host of SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST),
 *               expanded by dtrain's own hostlist parser (no scontrol in the job)
 *   coordinator in a batch job (ENVIRONMENT=BATCH) srun runs on the batch host,
 *               which Slurm makes the first node of the allocation, i.e. node 0;
 *               SLURM_LAUNCH_NODE_IPADDR is its address, which works where node
 *               names do not resolve.  Outside one (salloc + srun from a login
 *               node) node 0's name is resolved to an address here.
 *   port        rendezvous.port, or DT_SLURM_PORT_BASE + job id % DT_SLURM_PORT_SPAN;
 *               node 0 checks that it is free and says what to change if not.
 *   run id      the job id: the same on every node and after a requeue (so a
 *               requeued job resumes from its own run directory's checkpoints);
 *               DTRAIN_SLURM_RUN_ID instead when `dtrain launch --resume` set it
 *               in the job's environment: an earlier run's id (slurm.h).
 *
 * With slurm.tasks: per_rank the one agent runs in the batch script, not
 * under srun: it is node 0, hosts the coordinator and starts every rank with
 * one srun step (slurm_ranks.c); the ranks find the coordinator at
 * SLURM_LAUNCH_NODE_IPADDR, their srun's host.
 *
 * Not for starting agents (the batch script's srun does) or the coordinator.
 */
#include "scheduler-adapters/slurm/slurm_internal.h"

#include "base/error.h"
#include "scheduler-adapters/hostlist.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int env_int(char *const *env, const char *name, int lo, int hi, int *out)
{
    const char *v = dt_adapter_getenv(env, name);
    if (!v)
        return DT_ENOTFOUND;
    char *end;
    long x = strtol(v, &end, 10);
    if (end == v || *end || x < lo || x > hi)
        return dt_error_set(DT_EINVAL, "%s='%s': expected a whole number from %d to %d", name, v, lo, hi);
    *out = (int)x;
    return 0;
}

/* The first of several names that is set. */
static const char *env_first(char *const *env, const char *a, const char *b, const char **which)
{
    const char *v = dt_adapter_getenv(env, a);
    *which = a;
    if (!v) {
        v = dt_adapter_getenv(env, b);
        *which = b;
    }
    return v;
}

int dt_slurm_port(const struct dt_job *job, const char *job_id, int *port)
{
    if (job->rendezvous.port > 0) {
        *port = job->rendezvous.port;
        return 0;
    }
    char *end;
    unsigned long long id = strtoull(job_id, &end, 10);
    if (end == job_id || (*end && *end != '_'))
        return dt_error_set(DT_EINVAL, "SLURM_JOB_ID='%s': expected a job number", job_id);
    *port = DT_SLURM_PORT_BASE + (int)(id % DT_SLURM_PORT_SPAN);
    return 0;
}

/* Node 0 only: a port in use now would fail the coordinator later, with less to say. */
static int check_port_free(int port, const char *how)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return dt_error_set_errno(DT_EIO, errno, "cannot open a socket to check port %d", port);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one); /* as the coordinator binds */
    struct sockaddr_in a = {
        .sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = htonl(INADDR_ANY)};
    int rc = bind(fd, (struct sockaddr *)&a, sizeof a) == 0 ? 0 : errno;
    close(fd);
    if (rc == EADDRINUSE)
        return dt_error_set(DT_EIO,
                            "the coordinator's port %d (%s) is already in use on node 0; set rendezvous.port "
                            "to a free port in the job spec",
                            port, how);
    if (rc)
        return dt_error_set_errno(DT_EIO, rc, "cannot bind the coordinator's port %d (%s) on node 0", port,
                                  how);
    return 0;
}

static int resolve(const char *host, char *out, size_t size)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0)
        return dt_error_set(DT_ENOTFOUND,
                            "cannot resolve node 0's name '%s' (%s); start the agents from a batch script "
                            "(sbatch), where Slurm gives node 0's address",
                            host, gai_strerror(rc));
    rc = getnameinfo(res->ai_addr, res->ai_addrlen, out, (socklen_t)size, NULL, 0, NI_NUMERICHOST);
    freeaddrinfo(res);
    return rc == 0 ? 0 : dt_error_set(DT_EINTERNAL, "cannot print the address of '%s'", host);
}

/* Node count and rank, checked against the spec and against one agent per node. */
static int place(const struct dt_job *job, char *const *env, struct dt_adapter_node *out)
{
    int rc = env_int(env, "SLURM_NODEID", 0, 1 << 20, &out->node_rank);
    if (rc == DT_ENOTFOUND)
        rc = env_int(env, "SLURM_PROCID", 0, 1 << 20, &out->node_rank);
    if (rc == DT_ENOTFOUND)
        return dt_error_set(DT_ENOTFOUND, "SLURM_NODEID is not set: run `dtrain agent` under srun");
    const char *nn_name = "SLURM_STEP_NUM_NODES";
    if (!rc && (rc = env_int(env, nn_name, 1, 1 << 20, &out->nnodes)) == DT_ENOTFOUND)
        rc = env_int(env, nn_name = "SLURM_NNODES", 1, 1 << 20, &out->nnodes);
    if (rc == DT_ENOTFOUND)
        return dt_error_set(DT_ENOTFOUND, "neither SLURM_STEP_NUM_NODES nor SLURM_NNODES is set");
    if (rc)
        return rc;
    if (dt_job_elastic(job) && (out->nnodes < job->nodes_min || out->nnodes > job->nodes))
        return dt_error_set(DT_EINVAL,
                            "%s: nodes: %d:%d, but this Slurm step runs on %d node%s (%s); "
                            "allocate %d to %d (sbatch --nodes=%d-%d, as `dtrain render slurm` writes)",
                            job->path, job->nodes_min, job->nodes, out->nnodes, out->nnodes == 1 ? "" : "s",
                            nn_name, job->nodes_min, job->nodes, job->nodes_min, job->nodes);
    if (!dt_job_elastic(job) && out->nnodes != job->nodes)
        return dt_error_set(DT_EINVAL,
                            "%s: nodes: %d, but this Slurm step runs on %d node%s (%s); "
                            "allocate %d (sbatch --nodes=%d, as `dtrain render slurm` writes)",
                            job->path, job->nodes, out->nnodes, out->nnodes == 1 ? "" : "s", nn_name,
                            job->nodes, job->nodes);
    int tasks = 0;
    rc = env_int(env, "SLURM_STEP_NUM_TASKS", 1, 1 << 24, &tasks);
    if (rc == 0 && tasks != out->nnodes)
        return dt_error_set(DT_EINVAL,
                            "srun started %d tasks on %d node%s; dtrain needs exactly one agent "
                            "per node (srun --ntasks-per-node=1, as `dtrain render slurm` writes)",
                            tasks, out->nnodes, out->nnodes == 1 ? "" : "s");
    if (rc && rc != DT_ENOTFOUND)
        return rc;
    if (out->node_rank >= out->nnodes)
        return dt_error_set(DT_EINVAL, "SLURM_NODEID=%d, but the step has only %d nodes", out->node_rank,
                            out->nnodes);
    return 0;
}

/* Node 0's name from the node list; the coordinator's address. */
static int coordinator(char *const *env, struct dt_adapter_node *out)
{
    const char *which, *list = env_first(env, "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", &which);
    if (!list)
        return dt_error_set(DT_ENOTFOUND, "neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST is set");
    struct dt_hostlist hl;
    int rc = dt_hostlist_expand(list, &hl);
    if (rc < 0)
        return dt_error_prefix("%s", which);
    char node0[DT_ADAPTER_HOST_MAX];
    snprintf(node0, sizeof node0, "%s", hl.hosts[0]);
    int n = hl.n;
    dt_hostlist_free(&hl);
    if (n != out->nnodes)
        return dt_error_set(DT_EINVAL, "%s='%s' names %d host%s, but the step has %d nodes", which, list, n,
                            n == 1 ? "" : "s", out->nnodes);
    const char *batch = dt_adapter_getenv(env, "ENVIRONMENT");
    const char *launch = dt_adapter_getenv(env, "SLURM_LAUNCH_NODE_IPADDR");
    if (batch && strcmp(batch, "BATCH") == 0 && launch && *launch) {
        /* The batch host is node 0: say so loudly on node 0 if a site's Slurm does otherwise. */
        const char *me = dt_adapter_getenv(env, "SLURMD_NODENAME");
        if (out->node_rank == 0 && me && strcmp(me, node0) != 0)
            return dt_error_set(DT_EINVAL,
                                "node 0 is %s by %s, but srun runs on %s (SLURMD_NODENAME): the "
                                "batch script must run on the first node of the allocation",
                                node0, which, me);
        if (strlen(launch) >= sizeof out->coord_host)
            return dt_error_set(DT_EINVAL, "SLURM_LAUNCH_NODE_IPADDR is too long");
        snprintf(out->coord_host, sizeof out->coord_host, "%s", launch);
        return 0;
    }
    return resolve(node0, out->coord_host, sizeof out->coord_host);
}

/* per_rank: the agent is the batch script's own process on node 0. */
static int batch_host(const struct dt_job *job, char *const *env, struct dt_adapter_node *out)
{
    const char *batch = dt_adapter_getenv(env, "ENVIRONMENT");
    if (dt_adapter_getenv(env, "SLURM_STEP_ID") || !batch || strcmp(batch, "BATCH") != 0)
        return dt_error_set(DT_EINVAL,
                            "%s: slurm.tasks: per_rank: `dtrain agent` runs in the batch script itself, "
                            "not under srun: it starts every rank with srun (see `dtrain render slurm`)",
                            job->path);
    int rc = env_int(env, "SLURM_NNODES", 1, 1 << 20, &out->nnodes);
    if (rc == DT_ENOTFOUND)
        return dt_error_set(DT_ENOTFOUND, "SLURM_NNODES is not set in the batch script");
    if (rc == 0 && out->nnodes != job->nodes)
        return dt_error_set(DT_EINVAL, "%s: nodes: %d, but the allocation has %d (SLURM_NNODES)", job->path,
                            job->nodes, out->nnodes);
    out->node_rank = 0;
    gethostname(out->coord_host, sizeof out->coord_host - 1); /* the ranks use srun's host's address */
    out->group = rc == 0 ? dt_slurm__ranks_group(job) : NULL;
    return rc;
}

int dt_slurm_discover(const struct dt_job *job, char *const *env, struct dt_adapter_node *out)
{
    memset(out, 0, sizeof *out);
    const char *id = dt_adapter_getenv(env, "SLURM_JOB_ID");
    if (!id || !*id)
        return dt_error_set(DT_ENOTFOUND,
                            "SLURM_JOB_ID is not set: this is not a Slurm job (submit it with "
                            "`dtrain launch` or sbatch, or give `dtrain agent` its placement flags)");
    if (strlen(id) >= sizeof out->job_id || strlen(id) >= sizeof out->run_id)
        return dt_error_set(DT_EINVAL, "SLURM_JOB_ID='%s' is too long", id);
    snprintf(out->job_id, sizeof out->job_id, "%s", id);
    const char *run = dt_adapter_getenv(env, DT_SLURM_RUN_ID_ENV);
    if (run && *run && strlen(run) >= sizeof out->run_id)
        return dt_error_set(DT_EINVAL, DT_SLURM_RUN_ID_ENV "='%.80s...' is too long", run);
    snprintf(out->run_id, sizeof out->run_id, "%s", run && *run ? run : id);
    bool per_rank = job->slurm && job->slurm->tasks == DT_SLURM_TASKS_PER_RANK;
    int rc = per_rank ? batch_host(job, env, out) : place(job, env, out);
    if (rc == 0 && !per_rank)
        rc = coordinator(env, out);
    if (rc == 0 && dt_job_elastic(job)) {
        /* The rounds number an elastic job's nodes: node 0 (the batch host's
         * agent, the coordinator's) is named, every other agent joins for a
         * place, up to the spec's most (docs/elastic.md). */
        out->nnodes = job->nodes;
        if (out->node_rank != 0)
            out->node_rank = -1;
    }
    if (rc == 0)
        rc = dt_slurm_port(job, id, &out->coord_port);
    if (rc == 0 && out->node_rank == 0) {
        char how[96];
        if (job->rendezvous.port > 0)
            snprintf(how, sizeof how, "rendezvous.port");
        else
            snprintf(how, sizeof how, "%d + SLURM_JOB_ID %s %% %d", DT_SLURM_PORT_BASE, id,
                     DT_SLURM_PORT_SPAN);
        rc = check_port_free(out->coord_port, how);
    }
    return rc < 0 ? dt_error_prefix("dtrain agent under Slurm (job %s)", id) : 0;
}

const struct dt_adapter dt_adapter_slurm = {
    .name = "slurm",
    .scheduler = DT_SCHED_SLURM,
    .render = dt_slurm_render,
    .check = dt_slurm_check,
    .plan = dt_slurm_plan,
    .dry_run = dt_slurm_dry_run,
    .discover = dt_slurm_discover,
    .status = dt_slurm_status,
    .cancel = dt_slurm_cancel,
};
