/* cmd_agent.c - `dtrain agent job.yaml`: runs one node's ranks of a job.
 *
 * Where this node stands (its node rank, the node count, the coordinator's
 * host:port, the run id) comes from the flags, a "manual" placement like
 * torchrun's --node_rank/--master_addr, or else from the job's scheduler
 * adapter (adapter->discover reads SLURM_*, JOB_COMPLETION_INDEX, OMPI_*...).
 * Node 0's agent hosts the coordinator on all interfaces; every agent joins
 * it, waits for the others, and runs its ranks in restart rounds with them
 * (agent_round.c).  The job token comes from DTRAIN_JOB_TOKEN or the file
 * DTRAIN_JOB_TOKEN_FILE names (a Kubernetes Secret), never from the command
 * line, where `ps` shows it to every user.  Every agent exits with the job's
 * status; node 0 writes the run's summary.json.
 *
 * Not for starting agents on nodes (the adapters and the schedulers do).
 */
#include "launcher/agent.h"
#include "launcher/cli.h"
#include "launcher/coordinator.h"
#include "spec/jobspec.h"
#include "launcher/run_dir.h"
#include "scheduler-adapters/adapter.h"
#include "spec/token.h"

#include "base/args.h"
#include "base/error.h"
#include "base/log.h"
#include "base/clock.h"
#include "base/fs.h"

#include <ctype.h>
#include <signal.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

struct agent_opts {
    const char *job_path, *coordinator, *run_id, *log_dir, *ranks;
    int node_rank, nnodes; /* -1: not given */
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
            "  --node-rank N           this node, 0 .. M-1\n"
            "  --nnodes M              the number of nodes (default: the spec's nodes)\n"
            "  --coordinator HOST:PORT where node 0's agent is reached (PORT default: rendezvous.port)\n"
            "  --run-id ID             the same on every node (default: node 0 makes one)\n"
            "  --log-dir DIR           where run directories go (default: the spec's log_dir)\n"
            "  --ranks LIST            show stdout only of these global ranks\n"
            "  --grace-period SECS     between SIGTERM and SIGKILL when stopping ranks (default %g)\n"
            "  --quiet, --verbose      less or more of dtrain's own messages\n\n"
            "The job token (rendezvous.auth: token) comes from DTRAIN_JOB_TOKEN, or from the file\n"
            "named by DTRAIN_JOB_TOKEN_FILE; it must be the same on every node.\n",
            DT_AGENT_DEFAULT_GRACE_S);
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

static int parse_value(const char *a, const char *v, struct agent_opts *o)
{
    if (strcmp(a, "--node-rank") == 0 && parse_int(v, 0, 1 << 20, &o->node_rank) < 0)
        return dt_cli_usage_error("agent", "--node-rank '%s': expected a number from 0", v);
    if (strcmp(a, "--nnodes") == 0 && parse_int(v, 1, 1 << 20, &o->nnodes) < 0)
        return dt_cli_usage_error("agent", "--nnodes '%s': expected a number from 1", v);
    if (strcmp(a, "--grace-period") == 0 && dt_args_seconds(v, &o->grace_s) < 0)
        return dt_cli_usage_error("agent", "--grace-period '%s': expected seconds, e.g. 3 or 0.5s", v);
    if (strcmp(a, "--coordinator") == 0)
        o->coordinator = v;
    else if (strcmp(a, "--run-id") == 0)
        o->run_id = v;
    else if (strcmp(a, "--log-dir") == 0)
        o->log_dir = v;
    else if (strcmp(a, "--ranks") == 0)
        o->ranks = v;
    return 0;
}

static int parse_args(int argc, char **argv, struct agent_opts *o)
{
    static const char *const with_value[] = {"--node-rank", "--nnodes", "--coordinator", "--run-id",
                                             "--log-dir", "--ranks", "--grace-period", NULL};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool takes = false;
        for (int k = 0; with_value[k]; k++)
            takes |= strcmp(a, with_value[k]) == 0;
        if (takes && i + 1 < argc) {
            int rc = parse_value(a, argv[++i], o);
            if (rc)
                return rc;
        } else if (strcmp(a, "--quiet") == 0 || strcmp(a, "-q") == 0) {
            dt_log_set_level(DT_LOG_WARN);
        } else if (strcmp(a, "--verbose") == 0 || strcmp(a, "-v") == 0) {
            dt_log_set_level(DT_LOG_DEBUG);
        } else if (strcmp(a, "--token") == 0 || strncmp(a, "--token=", 8) == 0) {
            return dt_cli_usage_error("agent", "the job token is not taken on the command line (others could "
                                               "read it): set DTRAIN_JOB_TOKEN or DTRAIN_JOB_TOKEN_FILE");
        } else if (a[0] == '-' && a[1]) {
            return dt_cli_usage_error("agent", "unknown option '%s'%s", a, takes ? " (it needs a value)" : "");
        } else if (o->job_path) {
            return dt_cli_usage_error("agent", "one job file at a time (got '%s' and '%s')", o->job_path, a);
        } else {
            o->job_path = a;
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

/* The flags, or the adapter's discover when none is given. */
static int placement(const struct agent_opts *o, const struct dt_job *job, struct dt_adapter_node *n)
{
    memset(n, 0, sizeof *n);
    bool manual = o->node_rank >= 0 || o->nnodes > 0 || o->coordinator;
    if (!manual) {
        const struct dt_adapter *ad = dt_adapter_for(job->scheduler);
        if (!ad || !ad->discover)
            return dt_error_set(DT_EUNSUPPORTED,
                                "%s: scheduler: %s has no adapter built into this dtrain to tell this node its "
                                "place: give --node-rank, --nnodes and --coordinator",
                                job->path, dt_scheduler_name(job->scheduler));
        return ad->discover(job, environ, n);
    }
    n->nnodes = o->nnodes > 0 ? o->nnodes : job->nodes;
    n->node_rank = o->node_rank;
    if (n->node_rank < 0)
        return dt_error_set(DT_EINVAL, "--node-rank is needed with --nnodes or --coordinator");
    if (n->node_rank >= n->nnodes)
        return dt_error_set(DT_EINVAL, "--node-rank %d is out of range for %d node%s (0..%d)", n->node_rank,
                            n->nnodes, n->nnodes == 1 ? "" : "s", n->nnodes - 1);
    int rc = parse_coordinator(o->coordinator ? o->coordinator : "127.0.0.1", job, n);
    if (rc == 0 && !o->coordinator && n->nnodes > 1)
        rc = dt_error_set(DT_EINVAL, "--coordinator HOST:PORT is needed for %d nodes: it says where node 0's "
                                     "agent hosts the coordinator", n->nnodes);
    return rc;
}

static int read_token(const struct dt_job *job, int nnodes, char token[DT_TOKEN_LEN + 1])
{
    token[0] = 0;
    if (job->rendezvous.auth == DT_AUTH_NONE)
        return 0;
    bool found;
    int rc = dt_token_from_env(token, &found);
    if (rc < 0 || found)
        return rc;
    if (nnodes == 1)
        return dt_token_make(token);
    return dt_error_set(DT_EINVAL,
                        "%s: rendezvous.auth is token, but neither DTRAIN_JOB_TOKEN nor "
                        "DTRAIN_JOB_TOKEN_FILE is set: every node needs the same 64-hex-char token "
                        "(e.g. from `openssl rand -hex 32`)",
                        job->path);
}

/* What one node's run holds from start to end. */
struct node_run {
    const struct dt_job *job;
    const struct agent_opts *o;
    struct dt_adapter_node n;
    char token[65];
    int nproc;
    unsigned char *show;
    struct dt_coord *coord; /* node 0 */
    struct dt_agent_round *round; /* several nodes */
    unsigned long refusals;
    char run_id[64], run_dir[PATH_MAX];
};

static enum dt_agent_verdict watch(void *ctx, const struct dt_agent_result *res, int attempt, int *status)
{
    (void)res;
    (void)attempt;
    struct node_run *nr = ctx;
    return dt_agent_watch_refusals(nr->coord, nr->job, &nr->refusals, status);
}

/* Node 0: the coordinator, on every interface at the agreed port. */
static int host_coordinator(struct node_run *nr)
{
    struct dt_coord_config cc = {.bind_host = "0.0.0.0", .port = nr->n.coord_port,
                                 .token = nr->token[0] ? nr->token : NULL};
    if (dt_coord_start(&cc, &nr->coord) < 0)
        return dt_error_prefix("node 0: cannot host the coordinator on port %d", nr->n.coord_port);
    nr->n.coord_port = dt_coord_port(nr->coord);
    if (!nr->token[0])
        dt_log_warn("rendezvous.auth is none: the coordinator on port %d serves any client that reaches it "
                    "without a job token (what PyTorch scripts need)",
                    nr->n.coord_port);
    return 0;
}

/* Coordinator, membership, the shared run id and run directory. */
static int rendezvous(struct node_run *nr)
{
    const struct dt_job *job = nr->job;
    if (nr->n.nnodes > 1 && nr->n.coord_port <= 0)
        return dt_error_set(DT_EINVAL, "%s: a job of %d nodes needs a fixed coordinator port every node knows: "
                                       "give --coordinator HOST:PORT or set rendezvous.port",
                            job->path, nr->n.nnodes);
    int rc = nr->n.node_rank == 0 ? host_coordinator(nr) : 0;
    snprintf(nr->run_id, sizeof nr->run_id, "%s", nr->o->run_id ? nr->o->run_id : nr->n.run_id);
    if (rc == 0 && nr->n.nnodes > 1) {
        double timeout = job->rendezvous.timeout_s > 0 ? job->rendezvous.timeout_s : 60;
        struct dt_agent_round_config rc_cfg = {
            .job = job, .node_rank = nr->n.node_rank, .nnodes = nr->n.nnodes, .nproc = nr->nproc,
            .coord_host = nr->n.node_rank == 0 ? "127.0.0.1" : nr->n.coord_host, .coord_port = nr->n.coord_port,
            .token = nr->token[0] ? nr->token : NULL, .timeout_s = timeout,
            .grace_s = nr->o->grace_s > 0 ? nr->o->grace_s : DT_AGENT_DEFAULT_GRACE_S, .coord = nr->coord};
        rc = dt_agent_round_open(&rc_cfg, &nr->round);
        if (rc == 0)
            rc = dt_agent_round_run_id(nr->round, nr->run_id, sizeof nr->run_id);
        if (rc == 0)
            rc = dt_agent_round_wait_all(nr->round);
    } else if (rc == 0 && !nr->run_id[0]) {
        rc = dt_run_dir_make_id(nr->run_id, sizeof nr->run_id);
    }
    const char *log_dir = nr->o->log_dir ? nr->o->log_dir : job->log_dir;
    if (rc == 0)
        rc = dt_run_dir_open(log_dir, job->name, nr->run_id, nr->run_dir, sizeof nr->run_dir);
    return rc;
}

/* The watchdog's heartbeats: node 0 reads the coordinator it hosts, the
 * others what node 0 relays through the store (agent_heartbeats.c). */
static int heartbeat(void *ctx, int rank, int64_t *step, double *age_s)
{
    struct node_run *nr = ctx;
    if (nr->coord) {
        double when;
        int rc = dt_coord_heartbeat(nr->coord, rank, step, &when);
        if (rc == 0)
            *age_s = dt_clock_s() - when;
        return rc;
    }
    return dt_agent_round_heartbeat(nr->round, rank, step, age_s);
}

static int run_ranks(struct node_run *nr)
{
    const struct dt_job *job = nr->job;
    char self[PATH_MAX];
    dt_fs_self_path(self, sizeof self);
    const char *worker_argv[] = {self, "worker", job->path, NULL};
    struct dt_agent_hooks hooks = {.ctx = nr, .period_s = 0.2, .poll = watch};
    if (nr->round)
        dt_agent_round_hooks(nr->round, &hooks);
    struct dt_agent_config cfg = {
        .job = job, .argv = job->command ? (const char *const *)job->command : worker_argv,
        .node_rank = nr->n.node_rank, .nnodes = nr->n.nnodes, .nproc = nr->nproc, .run_id = nr->run_id,
        .run_dir = nr->run_dir, .master_addr = nr->n.coord_host, .master_port = nr->n.coord_port,
        .token = nr->token[0] ? nr->token : NULL, .grace_s = nr->o->grace_s, .console_stdout = nr->show,
        .start_mono = nr->o->start_mono, .progress = job->trainer && nr->n.node_rank == 0 &&
                                                     dt_log_get_level() <= DT_LOG_INFO,
        .hooks = nr->round || nr->token[0] ? &hooks : NULL, .heartbeat = nr->coord || nr->round ? heartbeat : NULL,
        .heartbeat_ctx = nr};
    dt_log_info("job %s: node %d of %d, %d rank%s of '%s' (global ranks %d-%d), coordinator %s:%d, run %s",
                job->name, nr->n.node_rank, nr->n.nnodes, nr->nproc, nr->nproc == 1 ? "" : "s", cfg.argv[0],
                nr->n.node_rank * nr->nproc, (nr->n.node_rank + 1) * nr->nproc - 1, nr->n.coord_host,
                nr->n.coord_port, nr->run_dir);
    dt_agent_plan_say_env(job, nr->nproc);
    struct dt_agent_result res;
    /* Ignored outside dt_agent_run, which handles it while ranks run (and resets it for
     * them): once the job has ended, a SIGTERM (srun --kill-on-bad-exit sends one when
     * another node's agent exited first) must neither turn this node's exit status into
     * 143 nor cut summary.json short. */
    signal(SIGTERM, SIG_IGN);
    int rc = dt_agent_run(&cfg, &res);
    if (rc < 0)
        dt_log_error("%s", dt_error_last());
    if (nr->round)
        dt_agent_round_finish(nr->round, &res);
    if (nr->n.node_rank == 0) {
        char summary[PATH_MAX + 16];
        snprintf(summary, sizeof summary, "%s/summary.json", nr->run_dir);
        if (dt_agent_write_summary(&cfg, &res, summary) < 0)
            dt_log_error("%s", dt_error_last());
    }
    dt_agent_print_outcome(&cfg, &res);
    int status = res.exit_status;
    dt_agent_result_free(&res);
    return status;
}

static int prepare(struct node_run *nr)
{
    int rc = placement(nr->o, nr->job, &nr->n);
    if (rc == 0)
        rc = read_token(nr->job, nr->n.nnodes, nr->token);
    if (rc == 0)
        rc = dt_agent_plan_nproc(nr->job, &nr->nproc);
    if (rc == 0)
        rc = dt_agent_plan_check_command(nr->job);
    if (rc == 0 && nr->o->ranks) {
        int world = nr->n.nnodes * nr->nproc;
        nr->show = malloc((size_t)world);
        rc = nr->show ? dt_args_ranks(nr->o->ranks, world, nr->show) : DT_ENOMEM;
    }
    return rc;
}

static int run(int argc, char **argv)
{
    struct agent_opts o = {.node_rank = -1, .nnodes = -1, .start_mono = dt_clock_s()};
    int rc = parse_args(argc, argv, &o);
    if (rc != 0)
        return rc;
    struct dt_job *job = NULL;
    if (dt_job_load(o.job_path, &job) < 0) {
        fprintf(stderr, "dtrain agent: %s\n", dt_error_last());
        return 2;
    }
    struct node_run nr = {.job = job, .o = &o};
    int status = 2;
    if (prepare(&nr) < 0) {
        fprintf(stderr, "dtrain agent: %s\n", dt_error_last());
    } else if (rendezvous(&nr) < 0) {
        fprintf(stderr, "dtrain agent: %s\n", dt_error_last());
        status = 1;
    } else {
        status = run_ranks(&nr);
    }
    dt_agent_round_close(nr.round);
    dt_coord_stop(nr.coord);
    free(nr.show);
    memset(nr.token, 0, sizeof nr.token);
    dt_job_free(job);
    return status;
}

const struct dt_cli_command dt_cli_agent = {
    .name = "agent",
    .summary = "run one node's ranks of a job (one agent per node; node 0 hosts the coordinator)",
    .run = run,
    .usage = usage,
};
