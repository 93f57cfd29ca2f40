/* cmd_agent.c - `dtrain agent job.yaml`: runs one node's ranks of a job.
 *
 * Where this node stands (its node rank, the node count, the coordinator's
 * host:port, the run id) comes from the flags, a "manual" placement like
 * torchrun's --node_rank/--master_addr, or else from the job's scheduler
 * adapter (adapter->discover reads SLURM_*, JOB_COMPLETION_INDEX, OMPI_*...).
 * The job token comes from DTRAIN_JOB_TOKEN or the file DTRAIN_JOB_TOKEN_FILE
 * names (a Kubernetes Secret), never from the command line, where `ps` shows
 * it to every user.  The run itself is agent_node.c's: node 0's agent hosts
 * the coordinator on all interfaces; every agent joins it, waits for the
 * others, and runs its ranks in restart rounds with them (agent_rounds.c).
 * Every agent exits with the job's status; node 0 writes summary.json.
 *
 * Not for starting agents on nodes (the adapters and the schedulers do), nor
 * for the run (agent_node.c).
 */
#include "launcher/agent/agent.h"
#include "launcher/cli/cli.h"
#include "scheduler-adapters/adapter.h"
#include "spec/jobspec.h"
#include "spec/token.h"

#include "base/args.h"
#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

struct agent_opts {
    const char *job_path, *coordinator, *run_id, *log_dir, *ranks;
    int node_rank, nnodes; /* -1: not given */
    int nnodes_min;        /* --nnodes MIN:MAX's MIN (nnodes holds MAX); -1: not given */
    double grace_s, start_mono;
};

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: dtrain agent JOB.yaml [--node-rank N --nnodes M --coordinator HOST:PORT] [options]\n\n"
            "Runs this node's ranks of a job, one agent per node.  Node 0's agent hosts the\n"
            "coordinator (on all interfaces, at PORT); the others connect to HOST:PORT, retrying\n"
            "until rendezvous.timeout.  Global rank = node_rank x nproc_per_node + local rank.\n"
            "When any node's rank fails, every node stops its ranks and all restart together,\n"
            "up to max_restarts; each agent exits with the job's status.\n\n"
            "Without the placement flags the job's scheduler adapter reads them from the\n"
            "environment the scheduler set (Slurm, Kubernetes, mpirun).\n\n"
            "Options:\n"
            "  --node-rank N           this node, 0 .. M-1 (an elastic job: 0 on the coordinator's\n"
            "                          node, left out on the others)\n"
            "  --nnodes M|MIN:MAX      the number of nodes (default: the spec's nodes); a range makes\n"
            "                          an elastic job (docs/elastic.md)\n"
            "  --coordinator HOST:PORT where node 0's agent is reached (PORT default: rendezvous.port)\n"
            "  --run-id ID             the same on every node (default: node 0 makes one)\n"
            "  --log-dir DIR           where run directories go (default: the spec's log_dir)\n"
            "  --ranks LIST            show the output of these global ranks only\n"
            "  --grace-period SECS     between SIGTERM and SIGKILL when stopping ranks (default:\n"
            "                          the spec's grace_period, 30s)\n"
            "  --quiet, --verbose      less or more of dtrain's own messages\n\n"
            "The job token (rendezvous.auth: token) comes from DTRAIN_JOB_TOKEN, or from the file\n"
            "named by DTRAIN_JOB_TOKEN_FILE; it must be the same on every node.\n");
}

static int parse_int(const char *s, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

enum { NODE_RANK = DT_CLI_OPT_OWN, NNODES, COORDINATOR, RUN_ID, TOKEN };

static int parse_value(int ch, const char *v, struct agent_opts *o)
{
    if (ch == NODE_RANK && parse_int(v, 0, 1 << 20, &o->node_rank) < 0)
        return dt_cli_usage_error("agent", "--node-rank '%s': expected a number from 0", v);
    if (ch == NNODES && dt_job_parse_nodes(v, &o->nnodes_min, &o->nnodes) < 0)
        return dt_cli_usage_error("agent", "--nnodes: %s", dt_error_last());
    if (ch == DT_CLI_OPT_GRACE && dt_args_seconds(v, &o->grace_s) < 0)
        return dt_cli_usage_error("agent", "--grace-period '%s': expected seconds, e.g. 3 or 0.5s", v);
    if (ch == COORDINATOR)
        o->coordinator = v;
    else if (ch == RUN_ID)
        o->run_id = v;
    else if (ch == DT_CLI_OPT_LOG_DIR)
        o->log_dir = v;
    else if (ch == DT_CLI_OPT_RANKS)
        o->ranks = v;
    return 0;
}

static int parse_args(int argc, char **argv, struct agent_opts *o)
{
    static const struct option own[] = {{"node-rank", required_argument, NULL, NODE_RANK},
                                        {"nnodes", required_argument, NULL, NNODES},
                                        {"coordinator", required_argument, NULL, COORDINATOR},
                                        {"run-id", required_argument, NULL, RUN_ID},
                                        {"log-dir", required_argument, NULL, DT_CLI_OPT_LOG_DIR},
                                        {"ranks", required_argument, NULL, DT_CLI_OPT_RANKS},
                                        {"grace-period", required_argument, NULL, DT_CLI_OPT_GRACE},
                                        {"quiet", no_argument, NULL, 'q'},
                                        {"verbose", no_argument, NULL, 'v'},
                                        {"token", optional_argument, NULL, TOKEN},
                                        {0}};
    static const struct option *const tables[] = {own, NULL};
    struct dt_cli_opts s;
    dt_cli_opts_init(&s, "agent", "qv", false, tables);
    const char *v;
    for (int ch; (ch = dt_cli_opts_next(&s, argc, argv, &v)) != -1;) {
        int rc = ch == DT_CLI_OPT_ERROR ? DT_EXIT_REFUSED : parse_value(ch, v, o);
        if (rc)
            return rc;
        if (ch == 'q' || ch == 'v') {
            dt_log_set_level(ch == 'q' ? DT_LOG_WARN : DT_LOG_DEBUG);
        } else if (ch == TOKEN) {
            return dt_cli_usage_error("agent", "the job token is not taken on the command line (others could "
                                               "read it): set DTRAIN_JOB_TOKEN or DTRAIN_JOB_TOKEN_FILE");
        } else if (ch == DT_CLI_OPT_OPERAND && o->job_path) {
            return dt_cli_usage_error("agent", "one job file at a time (got '%s' and '%s')", o->job_path, v);
        } else if (ch == DT_CLI_OPT_OPERAND) {
            o->job_path = v;
        }
    }
    if (!o->job_path)
        return dt_cli_usage_error("agent", "which job? Give the path of a job spec (YAML)");
    return 0;
}

/* "host:port", "[v6]:port" or "host" (port from the spec). */
static int parse_coordinator(const char *s, const struct dt_job *job, struct dt_adapter_node *n)
{
    const char *colon = strrchr(s, ':');
    const char *close = strchr(s, ']');
    if (colon && close && colon < close)
        colon = NULL;
    size_t hlen = colon ? (size_t)(colon - s) : strlen(s);
    if (s[0] == '[' && hlen >= 2 && s[hlen - 1] == ']') {
        s++;
        hlen -= 2;
    }
    if (hlen == 0 || hlen >= sizeof n->coord_host)
        return dt_error_set(DT_EINVAL, "--coordinator '%s': expected HOST:PORT", s);
    memcpy(n->coord_host, s, hlen);
    n->coord_host[hlen] = 0;
    n->coord_port = job->rendezvous.port;
    if (colon && parse_int(colon + 1, 1, 65535, &n->coord_port) < 0)
        return dt_error_set(DT_EINVAL, "--coordinator '%s': the port must be 1..65535", s);
    return 0;
}

/* An elastic job's node: node 0 (it hosts the coordinator) or, without
 * --node-rank, one the rounds place (node rank -1). */
static int elastic_placement(const struct agent_opts *o, const struct dt_job *job, struct dt_adapter_node *n)
{
    if (n->node_rank > 0) {
        dt_log_warn("--node-rank %d: in an elastic job only node 0 (the coordinator's host) is named; this "
                    "agent gets its node rank from each round",
                    n->node_rank);
        n->node_rank = -1;
    }
    if (!o->coordinator)
        return dt_error_set(DT_EINVAL, "--coordinator HOST:PORT is needed for an elastic job: it says where "
                                       "node 0's agent hosts the coordinator");
    return parse_coordinator(o->coordinator, job, n);
}

/* The flags, or the adapter's discover when none is given. */
static int placement(const struct agent_opts *o, const struct dt_job *job, struct dt_adapter_node *n,
                     int *nnodes_min)
{
    memset(n, 0, sizeof *n);
    *nnodes_min = job->nodes_min;
    bool manual = o->node_rank >= 0 || o->nnodes > 0 || o->coordinator;
    if (!manual) {
        const struct dt_adapter *ad = dt_adapter_for(job->scheduler);
        if (!ad || !ad->discover)
            return dt_error_set(
                DT_EUNSUPPORTED,
                "%s: scheduler: %s has no adapter built into this dtrain to tell this node its "
                "place: give --node-rank, --nnodes and --coordinator",
                job->path, dt_scheduler_name(job->scheduler));
        return ad->discover(job, environ, n);
    }
    n->nnodes = o->nnodes > 0 ? o->nnodes : job->nodes;
    *nnodes_min = o->nnodes > 0 ? o->nnodes_min : job->nodes_min;
    n->node_rank = o->node_rank;
    if (*nnodes_min < n->nnodes) /* elastic: the rounds number the nodes */
        return elastic_placement(o, job, n);
    if (n->node_rank < 0)
        return dt_error_set(DT_EINVAL, "--node-rank is needed with --nnodes or --coordinator");
    if (n->node_rank >= n->nnodes)
        return dt_error_set(DT_EINVAL, "--node-rank %d is out of range for %d node%s (0..%d)", n->node_rank,
                            n->nnodes, n->nnodes == 1 ? "" : "s", n->nnodes - 1);
    int rc = parse_coordinator(o->coordinator ? o->coordinator : "127.0.0.1", job, n);
    if (rc == 0 && !o->coordinator && n->nnodes > 1)
        rc = dt_error_set(DT_EINVAL,
                          "--coordinator HOST:PORT is needed for %d nodes: it says where node 0's "
                          "agent hosts the coordinator",
                          n->nnodes);
    return rc;
}

/* The job token every node shares, never from the command line; a job that
 * is this one node may go without (node 0 then makes one). */
static int read_token(const struct dt_job *job, int nnodes, char token[DT_TOKEN_LEN + 1])
{
    token[0] = 0;
    if (job->rendezvous.auth == DT_AUTH_NONE)
        return 0;
    bool found;
    int rc = dt_token_from_env(token, &found);
    if (rc < 0 || found || nnodes == 1)
        return rc;
    return dt_error_set(DT_EINVAL,
                        "%s: rendezvous.auth is token, but neither DTRAIN_JOB_TOKEN nor "
                        "DTRAIN_JOB_TOKEN_FILE is set: every node needs the same 64-hex-char token "
                        "(e.g. from `openssl rand -hex 32`)",
                        job->path);
}

static int run(int argc, char **argv)
{
    struct agent_opts o = {.node_rank = -1, .nnodes = -1, .nnodes_min = -1, .start_mono = dt_clock_s()};
    int rc = parse_args(argc, argv, &o);
    if (rc != 0)
        return rc;
    struct dt_job *job = NULL;
    if (dt_job_load(o.job_path, &job) < 0) {
        fprintf(stderr, "dtrain agent: %s\n", dt_error_last());
        return 2;
    }
    struct dt_adapter_node place;
    char token[DT_TOKEN_LEN + 1] = "";
    int status = 2;
    int nnodes_min = 0;
    if (placement(&o, job, &place, &nnodes_min) < 0 || read_token(job, place.nnodes, token) < 0) {
        fprintf(stderr, "dtrain agent: %s\n", dt_error_last());
    } else {
        /* Node 0 hosts the coordinator on every interface: the other nodes reach it. */
        struct dt_agent_node n = {.job = job,
                                  .who = "dtrain agent",
                                  .node_rank = place.node_rank,
                                  .nnodes = place.nnodes,
                                  .nnodes_min = nnodes_min,
                                  .coord_bind = "0.0.0.0",
                                  .coord_host = place.coord_host,
                                  .coord_port = place.coord_port,
                                  .token = token[0] ? token : NULL,
                                  .run_id = o.run_id ? o.run_id : place.run_id,
                                  .log_dir = o.log_dir,
                                  .ranks = o.ranks,
                                  .grace_s = o.grace_s,
                                  .start_mono = o.start_mono,
                                  .nproc = place.group ? place.group->world / place.nnodes : 0,
                                  .group = place.group};
        status = dt_agent_node_run(&n);
    }
    memset(token, 0, sizeof token);
    dt_job_free(job);
    return status;
}

const struct dt_cli_command dt_cli_agent = {
    .name = "agent",
    .summary = "run one node's ranks of a job (one agent per node; node 0 hosts the coordinator)",
    .run = run,
    .usage = usage,
};
