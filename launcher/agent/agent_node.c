/* agent_node.c - one node's whole run of a job: what `dtrain agent` does on
 * any node, and what `dtrain launch` does as node 0 of a local job or of an
 * mpirun job with backend: mpi (an adapter's plan with host_node0, adapter.h).
 *
 *   checks      nproc_per_node (gpu resolved here), the command exists here,
 *               --ranks; a problem is the user's to fix: exit status 2
 *   rendezvous  the job token (given, or node 0 makes one), node 0's
 *               coordinator, the restart rounds with the other nodes
 *               (agent_rounds.c), the node's store endpoint for a command's
 *               ranks (agent_endpoint.h), the run id and run directory; a
 *               failure here: exit status 1
 *   the run     dt_agent_run with the hooks: on node 0 the refusal watch (a
 *               PyTorch client turned away for want of the token ends the job
 *               at once with the setting to change, instead of hanging until
 *               its 30-minute timeout), the rounds' restart decisions; a
 *               fresh coordinator before each restart when this agent is the
 *               whole job; summary.json on node 0; the closing lines.  The
 *               exit status is the job's.
 *
 * Not for where a node stands (cmd_agent.c's flags or an adapter's
 * discover), nor for the ranks themselves (agent_supervise.c).
 */
#include "launcher/exit_status.h"
#include "launcher/agent/agent_endpoint.h"
#include "launcher/agent/agent_internal.h"
#include "launcher/agent/agent_rounds.h"

#include "base/error.h"
#include "base/fs.h"
#include "base/args.h"
#include "base/clock.h"
#include "base/log.h"
#include "launcher/coordinator/coordinator.h"
#include "base/run_dir.h"
#include "spec/jobspec.h"
#include "spec/placement.h"
#include "spec/token.h"

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What one node's run holds from start to end. */
struct node {
    const struct dt_agent_node *n;
    int nproc;
    unsigned char *show;
    char token[DT_TOKEN_LEN + 1];
    struct dt_coord *coord; /* node 0 */
    struct dt_coord_config cc;
    struct dt_agent_endpoint *endpoint; /* the ranks' store: a command's, with auth: token */
    struct dt_agent__round *round; /* several agents */
    struct dt_agent_hooks round_hooks;
    unsigned long refusals;
    char run_id[64], run_dir[PATH_MAX];
};

/* --- checks -------------------------------------------------------------- */

static int check(struct node *nd)
{
    const struct dt_agent_node *n = nd->n;
    nd->nproc = n->nproc;
    int rc = nd->nproc > 0 ? 0 : dt_agent__plan_nproc(n->job, &nd->nproc);
    /* A group's program runs where its launcher puts it, not necessarily here. */
    if (rc == 0 && !n->group)
        rc = dt_agent__plan_check_command(n->job);
    if (rc == 0 && n->ranks) {
        int world = n->nnodes * nd->nproc;
        nd->show = malloc((size_t)world);
        rc = nd->show ? dt_args_ranks(n->ranks, world, nd->show) : dt_error_set(DT_ENOMEM, "out of memory");
    }
    return rc;
}

/* --- rendezvous ---------------------------------------------------------- */

/* How long a node's host may stay silent before the others give up on it:
 * rendezvous.heartbeat_timeout, as for a rank (rendezvous.timeout with the
 * watchdog off). */
static double liveness(const struct dt_job *job)
{
    double t = job->rendezvous.heartbeat_timeout_s;
    return t > 0 ? t : job->rendezvous.timeout_s > 0 ? job->rendezvous.timeout_s : 60;
}

/* How long another node's agent may send nothing before node 0 takes it for
 * lost (stopped by SIGSTOP, hung: its host still acknowledges, so liveness
 * cannot tell).  An agent calls every 0.1 s in every phase; the floor keeps
 * a loaded host's scheduling stalls, which a short heartbeat_timeout would
 * catch, from ending a job. */
#define AGENT_SILENCE_MIN_S 5.0

static double agent_silence(const struct dt_job *job)
{
    double t = liveness(job);
    return t > AGENT_SILENCE_MIN_S ? t : AGENT_SILENCE_MIN_S;
}

static bool several_agents(const struct dt_agent_node *n);

/* A command's ranks (a PyTorch script's TCPStore client has no token) reach
 * the store through this node's endpoint, which admits the job's processes
 * only and presents the token for them (agent_endpoint.h).  The bundled
 * trainer's ranks present the token themselves; a group's ranks are not all
 * this agent's descendants; with auth: none there is nothing to present. */
static bool uses_endpoint(const struct node *nd)
{
    return nd->n->job->command && nd->token[0] && !nd->n->group;
}

/* The port a job run by this agent alone was given (rendezvous.port,
 * torchrun's --master-port) is the one its ranks see: the endpoint's then,
 * and the coordinator takes any free one. */
static int coordinator_port(const struct node *nd)
{
    return uses_endpoint(nd) && !several_agents(nd->n) ? 0 : nd->n->coord_port;
}

static int host_coordinator(struct node *nd)
{
    const struct dt_agent_node *n = nd->n;
    nd->cc = (struct dt_coord_config){.bind_host = n->coord_bind,
                                      .port = coordinator_port(nd),
                                      .token = nd->token[0] ? nd->token : NULL,
                                      .member_liveness_s = liveness(n->job),
                                      .member_silence_s = agent_silence(n->job)};
    if (dt_coord_start(&nd->cc, &nd->coord) < 0)
        return dt_error_prefix("node 0: cannot start the coordinator on %s port %d", n->coord_bind,
                               nd->cc.port);
    if (!nd->token[0])
        dt_log_warn(
            "rendezvous.auth is none: the coordinator on %s:%d serves any client that reaches it without a "
            "job token (what PyTorch scripts need)",
            n->coord_bind, dt_coord_port(nd->coord));
    return 0;
}

static bool several_agents(const struct dt_agent_node *n)
{
    return n->nnodes > 1 && !n->group;
}

/* nodes: MIN:MAX (agent_elastic.c): rounds form as agents come and go. */
static bool elastic(const struct dt_agent_node *n)
{
    return several_agents(n) && n->nnodes_min > 0 && n->nnodes_min < n->nnodes;
}

/* Membership with the other nodes' agents and the run id they share. */
static int join_round(struct node *nd)
{
    const struct dt_agent_node *n = nd->n;
    const struct dt_job *job = n->job;
    double timeout = job->rendezvous.timeout_s > 0 ? job->rendezvous.timeout_s : 60;
    struct dt_agent__round_config rc_cfg = {.job = job,
                                            .node_rank = n->node_rank,
                                            .nnodes = n->nnodes,
                                            .nproc = nd->nproc,
                                            .coord_host = nd->coord ? "127.0.0.1" : n->coord_host,
                                            .coord_port = n->coord_port,
                                            .token = nd->token[0] ? nd->token : NULL,
                                            .timeout_s = timeout,
                                            .liveness_s = liveness(job),
                                            .grace_s = n->grace_s > 0 ? n->grace_s : job->grace_period_s,
                                            .coord = nd->coord,
                                            .nnodes_min = n->nnodes_min};
    int rc = dt_agent__round_open(&rc_cfg, &nd->round);
    if (rc == 0)
        rc = dt_agent__round_run_id(nd->round, nd->run_id, sizeof nd->run_id);
    if (rc == 0)
        rc = dt_agent__round_wait_all(nd->round);
    if (rc == 0)
        dt_agent__round_hooks(nd->round, &nd->round_hooks);
    return rc;
}

/* The ranks' store endpoint, once the coordinator is known (node 0's, or
 * the one the rounds reached). */
static int open_endpoint(struct node *nd)
{
    const struct dt_agent_node *n = nd->n;
    char name[300];
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    snprintf(name, sizeof name, "node %d (%s)", n->node_rank, host);
    struct dt_agent_endpoint_config ec = {
        .coord_host = nd->coord ? "127.0.0.1" : n->coord_host,
        .coord_port = nd->coord ? dt_coord_port(nd->coord) : n->coord_port,
        .token = nd->token,
        .port = several_agents(n) ? 0 : n->coord_port,
        .name = name,
        .connect_timeout_s = n->job->rendezvous.timeout_s > 0 ? n->job->rendezvous.timeout_s : 60,
        .liveness_s = nd->coord ? 0 : liveness(n->job),
        .coordinator_here = nd->coord != NULL,
    };
    return dt_agent_endpoint_start(&ec, &nd->endpoint);
}

/* Token, coordinator, membership, the ranks' store endpoint, the shared run
 * id and run directory.  The coordinator first: a busy fixed port must not
 * leave an empty run directory. */
static int rendezvous(struct node *nd)
{
    const struct dt_agent_node *n = nd->n;
    const struct dt_job *job = n->job;
    if (several_agents(n) && n->coord_port <= 0)
        return dt_error_set(DT_EINVAL,
                            "%s: a job of %d nodes needs a fixed coordinator port every node knows: "
                            "give --coordinator HOST:PORT or set rendezvous.port",
                            job->path, n->nnodes);
    snprintf(nd->token, sizeof nd->token, "%s", n->token ? n->token : "");
    int rc = 0;
    if (!nd->token[0] && job->rendezvous.auth != DT_AUTH_NONE && n->node_rank == 0)
        rc = dt_token_make(nd->token);
    if (rc == 0 && n->node_rank == 0)
        rc = host_coordinator(nd);
    snprintf(nd->run_id, sizeof nd->run_id, "%s", n->run_id ? n->run_id : "");
    if (rc == 0 && several_agents(n))
        rc = join_round(nd);
    if (rc == 0 && uses_endpoint(nd))
        rc = open_endpoint(nd);
    const char *log_dir = n->log_dir ? n->log_dir : job->log_dir;
    if (rc == 0 && nd->run_id[0])
        rc = dt_run_dir_open(log_dir, job->name, nd->run_id, nd->run_dir, sizeof nd->run_dir);
    else if (rc == 0)
        rc = dt_run_dir_create(log_dir, job->name, nd->run_id, sizeof nd->run_id, nd->run_dir,
                               sizeof nd->run_dir);
    return rc;
}

/* --- the hooks ----------------------------------------------------------- */

/* With auth: token, PyTorch's TCPStore client (which cannot present dtrain's
 * token) is turned away and retries for as long as its timeout, so the job
 * would look hung.  The coordinator counts such refusals; the first ends the
 * job, everywhere, with the setting to change.  A refusal for a wrong token
 * is not PyTorch's and only logged by the coordinator. */
static enum dt_agent_verdict watch_refusals(struct node *nd, int *status)
{
    char last[512];
    unsigned long n = dt_coord_refusals(nd->coord, last, sizeof last);
    if (n == nd->refusals)
        return DT_AGENT_GO_ON;
    nd->refusals = n;
    if (!strstr(last, "PyTorch"))
        return DT_AGENT_GO_ON;
    const struct dt_job *job = nd->n->job;
    char file_key[4400];
    snprintf(file_key, sizeof file_key, "set `rendezvous: {auth: none}` in %s", job->path);
    const char *off = nd->n->auth_off ? nd->n->auth_off : file_key;
    if (nd->endpoint)
        dt_log_error("job %s: a rank connected to the coordinator itself without the job token and was "
                     "refused: it looks like PyTorch's TCPStore client, which would retry until its timeout. "
                     "The ranks' store is MASTER_ADDR:MASTER_PORT (127.0.0.1:%d, this node's endpoint, which "
                     "needs no token); for a script that connects elsewhere, %s. Stopping the job.",
                     job->name, dt_agent_endpoint_port(nd->endpoint), off);
    else
        dt_log_error("job %s: a rank connected to the coordinator without the job token and was refused: it "
                     "looks like PyTorch's TCPStore client, which cannot present dtrain's token and would "
                     "retry until its timeout. To run PyTorch scripts, %s. Stopping the job.",
                     job->name, off);
    *status = 1;
    char why[600];
    snprintf(why, sizeof why, "PyTorch ranks were refused for lack of the job token: %s",
             nd->n->auth_off ? nd->n->auth_off : "set `rendezvous: {auth: none}` in the job spec");
    if (nd->round)
        dt_agent__round_abort(nd->round, *status, why);
    return DT_AGENT_ABORT;
}

static enum dt_agent_verdict poll_hook(void *ctx, const struct dt_agent_result *res, int attempt, int *status)
{
    struct node *nd = ctx;
    if (nd->coord && nd->token[0] && watch_refusals(nd, status) == DT_AGENT_ABORT)
        return DT_AGENT_ABORT;
    if (!nd->round)
        return DT_AGENT_GO_ON;
    return nd->round_hooks.poll(nd->round_hooks.ctx, res, attempt, status);
}

static int attempt_end(void *ctx, struct dt_agent_result *res, int attempt, int sig_fd, bool *restart,
                       int *status)
{
    struct node *nd = ctx;
    return nd->round_hooks.attempt_end(nd->round_hooks.ctx, res, attempt, sig_fd, restart, status);
}

static int begin_attempt(void *ctx, int *attempt, int sig_fd, struct dt_agent_place *place, int *status)
{
    struct node *nd = ctx;
    return nd->round_hooks.begin_attempt(nd->round_hooks.ctx, attempt, sig_fd, place, status);
}

static void interrupted(void *ctx, int sig)
{
    struct node *nd = ctx;
    nd->round_hooks.interrupted(nd->round_hooks.ctx, sig);
}

/* The watchdog's heartbeats: node 0 reads the coordinator it hosts (on the
 * same CLOCK_MONOTONIC), the others what node 0 relays through the store. */
static int heartbeat(void *ctx, int rank, int64_t *step, double *age_s)
{
    struct node *nd = ctx;
    if (nd->coord) {
        double when;
        int rc = dt_coord_heartbeat(nd->coord, rank, step, &when);
        if (rc == 0)
            *age_s = dt_clock_s() - when;
        return rc;
    }
    return dt_agent__round_heartbeat(nd->round, rank, step, age_s);
}

/* A fresh coordinator on the same port for each restart of a job this agent
 * runs alone: PyTorch's env:// rendezvous must not read the last attempt's
 * keys.  (Several agents keep theirs: it holds the rounds.) */
static int new_round(void *ctx, int attempt)
{
    struct node *nd = ctx;
    nd->cc.port = dt_coord_port(nd->coord);
    dt_coord_stop(nd->coord);
    nd->coord = NULL;
    nd->refusals = 0;
    if (dt_coord_start(&nd->cc, &nd->coord) < 0)
        return dt_error_prefix("attempt %d: cannot start a fresh coordinator on port %d", attempt,
                               nd->cc.port);
    /* The ranks' endpoint stays where it is; it carries them to the fresh store. */
    if (nd->endpoint && dt_agent_endpoint_reconnect(nd->endpoint, 10) < 0)
        return dt_error_prefix("attempt %d", attempt);
    return 0;
}

/* --- the run ------------------------------------------------------------- */

/* "coordinator H:P", and the ranks' store when it is this node's endpoint. */
static const char *where(const struct dt_agent_config *cfg, char *buf, size_t n)
{
    if (cfg->endpoint)
        snprintf(buf, n, "coordinator %s:%d, the ranks' store 127.0.0.1:%d (this job's processes only)",
                 cfg->master_addr, cfg->master_port, cfg->store_port);
    else
        snprintf(buf, n, "coordinator %s:%d", cfg->master_addr, cfg->master_port);
    return buf;
}

static void say_start(const struct node *nd, const struct dt_agent_config *cfg)
{
    const struct dt_agent_node *n = nd->n;
    const char *job = n->job->name;
    int world = n->nnodes * nd->nproc;
    char at[640];
    where(cfg, at, sizeof at);
    if (elastic(n))
        dt_log_info("job %s: elastic, %d to %d nodes of %d rank%s of '%s', %s, run %s", job,
                    n->nnodes_min, n->nnodes, nd->nproc, nd->nproc == 1 ? "" : "s", cfg->argv[0],
                    at, nd->run_dir);
    else if (n->group)
        dt_log_info("job %s: %d rank%s (%d node%s x %d) through %s, %s, run %s", job, world,
                    world == 1 ? "" : "s", n->nnodes, n->nnodes == 1 ? "" : "s", nd->nproc, cfg->argv[0],
                    at, nd->run_dir);
    else if (n->nnodes > 1)
        dt_log_info(
            "job %s: node %d of %d, %d rank%s of '%s' (global ranks %d-%d), %s, run %s", job,
            n->node_rank, n->nnodes, nd->nproc, nd->nproc == 1 ? "" : "s", cfg->argv[0],
            dt_placement_rank_of(nd->nproc, n->node_rank, 0),
            dt_placement_rank_of(nd->nproc, n->node_rank, nd->nproc - 1), at, nd->run_dir);
    else
        dt_log_info("job %s: %d rank%s of '%s', %s, run %s", job, nd->nproc,
                    nd->nproc == 1 ? "" : "s", cfg->argv[0], at, nd->run_dir);
}

/* A group's command line, from the environment of a rank of attempt 0 (what
 * it passes on to the ranks depends on what that holds). */
static int group_command(const struct dt_adapter_group *g, struct dt_agent_config *cfg)
{
    char **rank_env = NULL, **env = NULL;
    char *const *argv = NULL;
    int rc = dt_agent_env_build(cfg, 0, 0, environ, &rank_env);
    if (rc == 0)
        rc = g->env(g->ctx, rank_env, &env);
    if (rc == 0)
        rc = g->argv(g->ctx, env, &argv);
    dt_agent_env_free(rank_env);
    dt_agent_env_free(env);
    cfg->argv = (const char *const *)argv;
    cfg->group = g;
    return rc;
}

/* summary.json is the run's record: when it cannot be written (a full
 * disk), the run is not reported as a success. */
static void write_summary(const struct node *nd, const struct dt_agent_config *cfg,
                          struct dt_agent_result *res)
{
    char summary[PATH_MAX + 16];
    snprintf(summary, sizeof summary, "%s/summary.json", nd->run_dir);
    if (dt_agent__write_summary(cfg, res, summary) == 0)
        return;
    dt_log_error("cannot write %s: %s", summary, dt_error_last());
    if (!res->write_error[0])
        snprintf(res->write_error, sizeof res->write_error, "cannot write %s", summary);
    if (res->exit_status == 0) {
        res->status = DT_AGENT_FAILED;
        res->exit_status = 1;
    }
}

static int run(struct node *nd)
{
    const struct dt_agent_node *n = nd->n;
    const struct dt_job *job = n->job;
    char self[PATH_MAX];
    dt_fs_self_path(self, sizeof self);
    const char *worker_argv[] = {n->dtrain ? n->dtrain : self, "worker",
                                 n->rank_spec ? n->rank_spec : job->path, NULL};
    struct dt_agent_hooks hooks = {.ctx = nd, .period_s = 0.2, .poll = poll_hook};
    if (nd->round) {
        hooks.period_s = nd->round_hooks.period_s;
        hooks.attempt_end = attempt_end;
        hooks.begin_attempt = nd->round_hooks.begin_attempt ? begin_attempt : NULL;
        hooks.interrupted = interrupted;
    }
    struct dt_agent_config cfg = {
        .job = job,
        .argv = job->command ? (const char *const *)job->command : worker_argv,
        .node_rank = n->node_rank, /* -1: an elastic round places this node */
        .nnodes = n->nnodes,
        .elastic = elastic(n),
        .nnodes_max = n->nnodes,
        .nproc = nd->nproc,
        .run_id = nd->run_id,
        .run_dir = nd->run_dir,
        .master_addr = n->coord_host,
        .master_port = nd->coord ? dt_coord_port(nd->coord) : n->coord_port,
        .token = nd->token[0] ? nd->token : NULL,
        .endpoint = nd->endpoint != NULL,
        .store_port = nd->endpoint ? dt_agent_endpoint_port(nd->endpoint) : 0,
        .grace_s = n->grace_s,
        .console_ranks = nd->show,
        .start_mono = n->start_mono,
        .progress = n->node_rank == 0 && dt_log_get_level() <= DT_LOG_INFO, /* a command: job's too: docs/progress.md */
        .hooks = nd->round || (nd->coord && nd->token[0]) ? &hooks : NULL,
        .heartbeat = nd->coord || nd->round ? heartbeat : NULL,
        .heartbeat_ctx = nd,
        .new_round = nd->coord && !nd->round ? new_round : NULL,
        .new_round_ctx = nd,
    };
    if (n->group && group_command(n->group, &cfg) < 0) {
        fprintf(stderr, "%s: %s\n", n->who, dt_error_last());
        return 1;
    }
    say_start(nd, &cfg);
    dt_agent__plan_say_env(job, nd->nproc);
    struct dt_agent_result res;
    /* Ignored outside dt_agent_run, which handles it while ranks run (and resets it for
     * them): once the job has ended, a SIGTERM (srun --kill-on-bad-exit sends one when
     * another node's agent exited first) must neither turn this node's exit status into
     * 143 nor cut summary.json short. */
    signal(SIGTERM, SIG_IGN);
    int rc = dt_agent_run(&cfg, &res);
    if (rc < 0)
        dt_log_error("%s", dt_error_last());
    if (nd->round)
        dt_agent__round_finish(nd->round, &res);
    if (n->node_rank == 0)
        write_summary(nd, &cfg, &res);
    dt_agent__print_outcome(&cfg, &res);
    /* Only node 0 says the job succeeded (print_outcome). A node of `dtrain run` started by hand, as
     * torchrun's are, has a terminal of its own that would otherwise end without a word. */
    if (res.status == DT_AGENT_SUCCEEDED && cfg.node_rank != 0 && n->own_terminal)
        dt_log_info("node %d: its %d rank%s succeeded in %.2f s; node 0 reports the job (summary.json in "
                    "its run directory)",
                    cfg.node_rank, cfg.nproc, cfg.nproc == 1 ? "" : "s", res.wall_s);
    /* summary.json keeps the rank's own status; the exit status must not read as a refusal (docs/cli.md). */
    int status = dt_cli_job_exit(res.exit_status);
    dt_agent_result_free(&res);
    return status;
}

int dt_agent_node_run(const struct dt_agent_node *n)
{
    struct node nd = {.n = n};
    int status = 2;
    if (check(&nd) < 0) {
        fprintf(stderr, "%s: %s\n", n->who, dt_error_last());
    } else if (rendezvous(&nd) < 0) {
        fprintf(stderr, "%s: %s\n", n->who, dt_error_last());
        status = 1;
    } else {
        status = run(&nd);
    }
    dt_agent__round_close(nd.round);
    dt_agent_endpoint_stop(nd.endpoint);
    dt_coord_stop(nd.coord);
    free(nd.show);
    memset(nd.token, 0, sizeof nd.token);
    return status;
}
