/* local.c - the local adapter: the whole job on this machine.
 *
 * submit (`dtrain launch` of a scheduler: local job): the launcher is the
 * job's parent.  It makes the run directory and the job token, hosts the
 * coordinator on a thread bound to loopback (port 0 by default, so the
 * kernel picks a free port and two jobs never race for one), runs one agent
 * for this machine, writes summary.json, and returns the job's exit status:
 * 0, the failing rank's exit code, or 128 + signal.  With auth: token it
 * watches the coordinator for refused PyTorch clients and ends the job at
 * once with the setting to change, instead of hanging until their timeout.
 *
 * discover: node 0 of 1, coordinator on 127.0.0.1 (`dtrain agent` of a local
 * job without flags is the same one-node run).
 *
 * Not for several machines: the other adapters, or `dtrain agent` with
 * manual placement flags, start one agent per node.
 */
#include "scheduler-adapters/adapter.h"

#include "base/args.h"
#include "base/error.h"
#include "base/log.h"
#include "launcher/agent.h"
#include "launcher/coordinator.h"
#include "launcher/run_dir.h"
#include "spec/token.h"
#include "base/clock.h"
#include "base/fs.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Everything that must be settled before a coordinator or a process starts;
 * a problem here is the user's to fix (exit status 2). */
static int prepare(const struct dt_job *job, const struct dt_adapter_launch *o, int *nproc, unsigned char **show)
{
    if (job->nodes != 1)
        return dt_error_set(DT_EUNSUPPORTED,
                            "%s: nodes: %d with scheduler: local; a local job runs on this one machine "
                            "(nodes: 1), or start one `dtrain agent` per node (docs/launch.md)",
                            job->path, job->nodes);
    int rc = dt_agent_plan_nproc(job, nproc);
    if (rc == 0)
        rc = dt_agent_plan_check_command(job);
    if (rc == 0 && o->ranks) {
        *show = malloc((size_t)*nproc);
        if (!*show)
            return dt_error_set(DT_ENOMEM, "out of memory");
        rc = dt_args_ranks(o->ranks, *nproc, *show);
    }
    return rc;
}

static int start_coordinator(const struct dt_job *job, char token[65], struct dt_coord **coord,
                             struct dt_coord_config *used)
{
    bool auth = job->rendezvous.auth != DT_AUTH_NONE;
    if (auth) {
        int rc = dt_token_make(token);
        if (rc < 0)
            return rc;
    }
    /* Loopback only: every rank of a local job is on this machine. */
    struct dt_coord_config cc = {
        .bind_host = "127.0.0.1", .port = job->rendezvous.port, .token = auth ? token : NULL};
    *used = cc;
    int rc = dt_coord_start(&cc, coord);
    if (rc < 0)
        return dt_error_prefix("cannot start the coordinator on port %d", job->rendezvous.port);
    if (!auth)
        dt_log_warn(
            "rendezvous.auth is none: the coordinator on 127.0.0.1:%d serves any local client without "
            "a job token (what PyTorch scripts need)",
            dt_coord_port(*coord));
    return 0;
}

/* The coordinator as the agent's callbacks see it: each restart replaces it
 * with a fresh one on the same port (new_round below). */
struct refusal_watch {
    struct dt_coord *coord;
    struct dt_coord_config cc;
    const struct dt_job *job;
    unsigned long seen;
};

/* The watchdog's view of the heartbeats (docs/faults.md): the coordinator
 * runs in this process, on the same CLOCK_MONOTONIC as the agent. */
static int heartbeat(void *ctx, int rank, int64_t *step, double *age_s)
{
    double when;
    int rc = dt_coord_heartbeat(((struct refusal_watch *)ctx)->coord, rank, step, &when);
    if (rc == 0)
        *age_s = dt_clock_s() - when;
    return rc;
}

/* A fresh coordinator on the same port for each restart (agent.h: new_round):
 * PyTorch's env:// rendezvous must not read the last attempt's keys. */
static int new_round(void *ctx, int attempt)
{
    struct refusal_watch *w = ctx;
    w->cc.port = dt_coord_port(w->coord);
    dt_coord_stop(w->coord);
    w->coord = NULL;
    w->seen = 0;
    if (dt_coord_start(&w->cc, &w->coord) < 0)
        return dt_error_prefix("attempt %d: cannot start a fresh coordinator on port %d", attempt, w->cc.port);
    return 0;
}

static enum dt_agent_verdict watch(void *ctx, const struct dt_agent_result *res, int attempt, int *status)
{
    (void)res;
    (void)attempt;
    struct refusal_watch *w = ctx;
    return dt_agent_watch_refusals(w->coord, w->job, &w->seen, status);
}

static int run(const struct dt_job *job, const struct dt_adapter_launch *o, int nproc, const unsigned char *show)
{
    char self[PATH_MAX];
    dt_fs_self_path(self, sizeof self);
    const char *worker_argv[] = {o->dtrain_path ? o->dtrain_path : self, "worker", job->path, NULL};
    char run_id[DT_RUN_ID_MAX], run_dir[PATH_MAX], token[65] = "";
    struct dt_coord *coord = NULL;
    const char *log_dir = o->log_dir ? o->log_dir : job->log_dir;
    /* The coordinator first: a busy fixed port must not leave an empty run directory. */
    struct refusal_watch w = {.job = job};
    int rc = start_coordinator(job, token, &coord, &w.cc);
    if (rc == 0) {
        rc = dt_run_dir_create(log_dir, job->name, run_id, sizeof run_id, run_dir, sizeof run_dir);
        if (rc < 0)
            dt_coord_stop(coord);
    }
    if (rc < 0) {
        fprintf(stderr, "dtrain launch: %s\n", dt_error_last());
        return 1;
    }
    w.coord = coord;
    struct dt_agent_hooks hooks = {.ctx = &w, .period_s = 0.2, .poll = watch};
    struct dt_agent_config cfg = {
        .job = job,
        .argv = job->command ? (const char *const *)job->command : worker_argv,
        .node_rank = 0,
        .nnodes = 1,
        .nproc = nproc,
        .run_id = run_id,
        .run_dir = run_dir,
        .master_addr = "127.0.0.1",
        .master_port = dt_coord_port(coord),
        .token = token[0] ? token : NULL,
        .grace_s = o->grace_s,
        .console_stdout = show,
        .start_mono = o->start_mono,
        .progress = job->trainer && dt_log_get_level() <= DT_LOG_INFO,
        .hooks = token[0] ? &hooks : NULL,
        .heartbeat = heartbeat,
        .heartbeat_ctx = &w,
        .new_round = new_round,
        .new_round_ctx = &w,
    };
    dt_log_info("job %s: %d rank%s of '%s', coordinator 127.0.0.1:%d, run %s", job->name, nproc,
                nproc == 1 ? "" : "s", cfg.argv[0], cfg.master_port, run_dir);
    dt_agent_plan_say_env(job, nproc);
    struct dt_agent_result res;
    rc = dt_agent_run(&cfg, &res);
    dt_coord_stop(w.coord);
    if (rc < 0)
        dt_log_error("%s", dt_error_last());
    char summary[PATH_MAX + 16];
    snprintf(summary, sizeof summary, "%s/summary.json", run_dir);
    if (dt_agent_write_summary(&cfg, &res, summary) < 0)
        dt_log_error("%s", dt_error_last());
    dt_agent_print_outcome(&cfg, &res);
    int status = res.exit_status;
    dt_agent_result_free(&res);
    return status;
}

static int submit(const struct dt_job *job, const struct dt_adapter_launch *o)
{
    int nproc = 0;
    unsigned char *show = NULL;
    if (prepare(job, o, &nproc, &show) < 0) {
        fprintf(stderr, "dtrain launch: %s\n", dt_error_last());
        free(show);
        return 2;
    }
    int status = run(job, o, nproc, show);
    free(show);
    return status;
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

const struct dt_adapter dt_adapter_local = {
    .name = "local",
    .scheduler = DT_SCHED_LOCAL,
    .render = NULL,
    .submit = submit,
    .discover = discover,
};
