/* local.c - the local adapter: the whole job on this machine.
 *
 * plan (`dtrain launch` of a scheduler: local job): the launcher is the
 * job's parent and node 0 of one: the plan asks it to host node 0 (adapter.h),
 * so it makes the run directory and the job token, hosts the coordinator bound
 * to loopback (port 0 by default, so the kernel picks a free port and two jobs
 * never race for one), runs one agent for this machine, writes summary.json,
 * and exits with the job's status: 0, the failing rank's exit code, or 128 +
 * signal.
 *
 * discover: node 0 of 1, coordinator on 127.0.0.1 (`dtrain agent` of a local
 * job without flags is the same one-node run).
 *
 * status, cancel (`dtrain status/cancel RUN`): the launcher is the job, so
 * its pid (launch.json, run_record.h) says whether it runs, and SIGTERM to
 * it stops the ranks as Ctrl-C would.
 *
 * Not for several machines: the other adapters, or `dtrain agent` with
 * manual placement flags, start one agent per node.
 */
#include "scheduler-adapters/adapter.h"

#include "scheduler-adapters/run_record.h"

#include "base/error.h"

#include <stdio.h>
#include <string.h>

/* A spec of several nodes is still good for `dtrain agent` with placement
 * flags on each node; only `dtrain launch` of it cannot place them. */
static int check(const struct dt_job *job)
{
    if (job->nodes_min != job->nodes)
        return dt_error_set(DT_EUNSUPPORTED,
                            "%s: nodes: %d:%d is an elastic job, and `dtrain launch` with scheduler: local runs "
                            "one machine; start one `dtrain agent --nnodes %d:%d` per node, node 0's with "
                            "--node-rank 0 (docs/elastic.md)",
                            job->path, job->nodes_min, job->nodes, job->nodes_min, job->nodes);
    if (job->nodes != 1)
        return dt_error_set(DT_EUNSUPPORTED,
                            "%s: nodes: %d with scheduler: local; a local job runs on this one machine "
                            "(nodes: 1), or start one `dtrain agent` per node (docs/launch.md)",
                            job->path, job->nodes);
    return 0;
}

static int plan(const struct dt_job *job, const struct dt_adapter_launch *o, struct dt_adapter_plan *out)
{
    (void)o;
    int rc = check(job);
    if (rc < 0)
        return rc;
    /* Loopback only: every rank of a local job is on this machine. */
    out->host_node0 = true;
    out->host = (struct dt_adapter_host){.nnodes = 1, .bind = "127.0.0.1", .advertise = "127.0.0.1"};
    return 0;
}

static int discover(const struct dt_job *job, char *const *env, struct dt_adapter_node *out)
{
    (void)env;
    memset(out, 0, sizeof *out);
    out->node_rank = 0;
    out->nnodes = 1;
    snprintf(out->coord_host, sizeof out->coord_host, "127.0.0.1");
    out->coord_port = job->rendezvous.port;
    return 0;
}

static int status(const struct dt_run_record *rec, struct dt_adapter_state *out)
{
    dt_run_record_launcher_state(rec, out);
    return 0;
}

const struct dt_adapter dt_adapter_local = {
    .name = "local",
    .scheduler = DT_SCHED_LOCAL,
    .render = NULL,
    .check = check,
    .plan = plan,
    .discover = discover,
    .status = status,
    .cancel = dt_run_record_stop_launcher,
};
