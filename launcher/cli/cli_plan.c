/* cli_plan.c - an adapter's plan for `dtrain launch`, carried out (scheduler-adapters/adapter.h).
 *
 * An adapter says what launching a job takes; this file does it, so what
 * `dtrain launch` does for a scheduler reads in its adapter's plan and here:
 *  - node 0 hosted in this process (local jobs; mpirun with backend: mpi,
 *    whose one process stands for every rank): the run directory with
 *    launch.json first (launch_resume.h), then the agent's dt_agent_node_run,
 *    the same path as `dtrain agent` (launcher/agent/agent.h);
 *  - or the plan's files written (the sbatch script), its program run to its
 *    end (mpirun in front of one agent per node, sbatch, kubectl apply) with
 *    its output where the plan says, then the plan's finish, which follows
 *    the job the program submitted.
 *
 * Not for the options of launch and run (cli_launch.c) or for what any
 * scheduler needs (the adapters).
 */
#include "launcher/cli/cli.h"

#include "launcher/agent/agent.h"
#include "launcher/cli/launch_resume.h"
#include "scheduler-adapters/adapter.h"
#include "scheduler-adapters/run_record.h"
#include "spec/jobspec.h"

#include "base/clock.h"
#include "base/error.h"
#include "base/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* What this node's ranks get as MASTER_ADDR:MASTER_PORT (and DTRAIN_COORD_ADDR),
 * chosen here for every job launch and run host or join: the coordinator
 * itself, which is both the agents' rendezvous and the ranks' store
 * (TORCHELASTIC_USE_AGENT_STORE).  An agent-local store endpoint (each node's
 * agent serving its own ranks and forwarding to the coordinator over its
 * authenticated link, so PyTorch's token-less client needs no auth: none)
 * slots in here: ranks would get its address while the agents keep the
 * coordinator's. */
static void rank_store(const struct dt_cli_node *p, struct dt_agent_node *n)
{
    n->coord_host = p->host;
    n->coord_port = p->port;
}

int dt_cli_node_run(const struct dt_job *job, const struct dt_adapter_launch *o, const struct dt_cli_node *p,
                    const struct dt_adapter_group *group)
{
    /* Node 0's run directory first, with launch.json and the spec in it, so
     * that `dtrain status` finds the job while it runs (launch_resume.h). */
    char run_id[64], run_dir[PATH_MAX], rank_spec[PATH_MAX + 16] = "";
    snprintf(run_id, sizeof run_id, "%s", o->run_id ? o->run_id : p->run_id ? p->run_id : "");
    if (p->node_rank == 0 &&
        dt_launch_run_dir(job, o->log_dir ? o->log_dir : job->log_dir, run_id, sizeof run_id, run_dir) < 0) {
        fprintf(stderr, "%s: %s\n", p->who, dt_error_last());
        return DT_EXIT_FAILED;
    }
    /* The ranks read the spec as this launch loaded it, from the private run
     * directory: not the user's file (which may change while the job runs),
     * nor a copy anyone else could replace between two restarts.  The other
     * nodes of `dtrain run` have no record: theirs read the launch's private
     * copy (job->path), which lives as long as the launch. */
    if (p->node_rank == 0)
        snprintf(rank_spec, sizeof rank_spec, "%s/%s", run_dir, DT_RUN_RECORD_SPEC);
    struct dt_agent_node n = {.job = job,
                              .who = p->who,
                              .node_rank = p->node_rank,
                              .nnodes = p->nnodes,
                              .nnodes_min = p->nnodes_min,
                              .nproc = p->nproc,
                              .coord_bind = p->bind,
                              .token = p->token,
                              .auth_off = p->auth_off,
                              .log_dir = o->log_dir,
                              .ranks = o->ranks,
                              .grace_s = o->grace_s,
                              .start_mono = o->start_mono,
                              .run_id = run_id,
                              .dtrain = o->dtrain_path,
                              .rank_spec = rank_spec[0] ? rank_spec : NULL,
                              .group = group,
                              .own_terminal = p->own_terminal};
    rank_store(p, &n);
    return dt_agent_node_run(&n);
}

/* A plan's host_node0: node 0 of the job, run in this process (the local
 * adapter's whole job; mpirun's MPI ranks, through their one process). */
static int host_node0(const struct dt_job *job, const struct dt_adapter_launch *o,
                      const struct dt_adapter_host *h)
{
    struct dt_cli_node p = {.who = "dtrain launch",
                            .node_rank = 0,
                            .nnodes = h->nnodes,
                            .nnodes_min = h->nnodes,
                            .nproc = h->nproc,
                            .bind = h->bind,
                            .host = h->advertise,
                            .port = job->rendezvous.port};
    return dt_cli_node_run(job, o, &p, h->group);
}

/* --- a plan's program ------------------------------------------------------ */

/* Created with its mode (never wider for a moment) and not through a symlink planted at its name. */
static int write_file(const struct dt_adapter_file *f)
{
    int fd = open(f->path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, (mode_t)f->mode);
    if (fd < 0)
        return dt_error_set_errno(DT_EIO, errno, "cannot create %s", f->path);
    bool ok = fchmod(fd, (mode_t)f->mode) == 0;
    for (size_t done = 0; ok && done < f->len;) {
        ssize_t n = write(fd, f->text + done, f->len - done);
        if (n < 0 && errno == EINTR)
            continue;
        ok = n > 0;
        done += ok ? (size_t)n : 0;
    }
    int err = errno;
    if (close(fd) != 0 && ok) {
        ok = false;
        err = errno;
    }
    return ok ? 0 : dt_error_set_errno(DT_EIO, err, "cannot write %s", f->path);
}

static int write_files(const struct dt_adapter_plan *p)
{
    for (int i = 0; i < p->n_files; i++)
        if (write_file(&p->files[i]) < 0)
            return -1;
    return 0;
}

struct carry {
    const struct dt_adapter_plan *p;
    struct dt_proc_run *r;
};

static void on_line(void *ctx, int stream, const char *line, size_t len, bool complete)
{
    (void)complete;
    struct carry *c = ctx;
    double stop = c->p->line(c->p->ctx, stream, line, len);
    if (stop > 0 && c->r->stop_at <= 0)
        c->r->stop_at = dt_clock_s() + stop;
}

/* The plan's files, then its program to its end, then its finish. */
static int run_plan(const struct dt_adapter_plan *p)
{
    static const enum dt_proc_io io[] = {[DT_PLAN_INHERIT] = DT_PROC_INHERIT,
                                         [DT_PLAN_CAPTURE] = DT_PROC_CAPTURE,
                                         [DT_PLAN_LINES] = DT_PROC_LINES};
    if (write_files(p) < 0) { /* in the log directory the user chose */
        fprintf(stderr, "dtrain launch: %s\n", dt_error_last());
        return DT_EXIT_REFUSED;
    }
    struct dt_proc_run r = {.argv = p->argv,
                            .envp = p->envp,
                            .in = p->in,
                            .in_len = p->in_len,
                            .io = {io[p->io[0]], io[p->io[1]]},
                            .timeout_s = p->timeout_s,
                            .grace_s = p->grace_s};
    struct carry c = {.p = p, .r = &r};
    if (p->line) {
        r.on_line = on_line;
        r.ctx = &c;
    }
    struct dt_adapter_ran ran = {.status = dt_proc_run(&r), .signal = r.signal};
    ran.stopped = r.stop_at > 0 && dt_clock_s() >= r.stop_at;
    ran.out = r.captured[0];
    ran.err = r.captured[1];
    int status = p->finish ? p->finish(p->ctx, &ran) : ran.status < 0 ? DT_EXIT_FAILED : ran.status;
    free(r.captured[0]);
    free(r.captured[1]);
    return status;
}

int dt_cli_launch_plan(const struct dt_job *job, const struct dt_adapter *ad,
                       const struct dt_adapter_launch *lo)
{
    struct dt_adapter_plan p = {0};
    int rc = ad->plan(job, lo, &p), status;
    if (rc < 0) {
        fprintf(stderr, "dtrain launch: %s\n", dt_error_last());
        status = rc == DT_ENOMEM ? DT_EXIT_FAILED : DT_EXIT_REFUSED;
    } else {
        status = p.host_node0 ? host_node0(job, lo, &p.host) : run_plan(&p);
    }
    if (p.release)
        p.release(p.ctx);
    return status;
}
