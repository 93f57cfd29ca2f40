/* cli_dry_run.c - `dtrain launch --dry-run` and `dtrain run --dry-run`: what would run, nothing started.
 *
 * Prints the placement (nodes, ranks per node, world size), each rank's
 * program and the environment the agent would give it (built by the agent's
 * own dt_agent_env_build, so it cannot drift from what a real launch does;
 * values known only at start, such as the run id, the coordinator's port and
 * the job token, are shown as <placeholders>), and for a scheduler with
 * something to submit what launch would submit: the adapter's dry_run (the
 * sbatch script with the spec it carries, the manifests under the launch's
 * names and in its order) or its rendering (the mpirun line).
 *
 * Not for starting anything (cmd_launch.c, cmd_run.c).
 */
#include "launcher/cli/cli.h"

#include "launcher/agent/agent.h"
#include "scheduler-adapters/adapter.h"
#include "spec/jobspec.h"
#include "spec/placement.h"

#include "base/error.h"
#include "base/fs.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

/* Ranks shown in full; a larger node shows its first and last. */
#define SHOWN_RANKS 4

static void put_argv(const char *const *argv, FILE *out)
{
    for (size_t i = 0; argv[i]; i++)
        fprintf(out, "%s'%s'", i ? " " : "", argv[i]); /* display only */
    fputc('\n', out);
}

static int put_rank(const struct dt_agent_config *cfg, const struct dt_placement *pl, int local, FILE *out)
{
    char *const none[] = {NULL};
    char **env = NULL;
    int rc = dt_agent_env_build(cfg, local, 0, none, &env);
    if (rc < 0)
        return rc;
    fprintf(out, "  rank %d (node %d, local rank %d):\n", dt_placement_rank(pl, cfg->node_rank, local),
            cfg->node_rank, local);
    for (size_t i = 0; env[i]; i++)
        fprintf(out, "    %s\n", env[i]);
    dt_agent_env_free(env);
    return 0;
}

int dt_cli_dry_run(const struct dt_job *job, const char *log_dir, FILE *out)
{
    char self[PATH_MAX], run_dir[PATH_MAX + 64];
    dt_fs_self_path(self, sizeof self);
    const char *worker[] = {self, "worker", job->path, NULL};
    /* "gpu" is counted on each node at start: shown for one rank per node. */
    struct dt_placement pl;
    dt_placement_resolve(job, DT_PLACE_SPEC, &pl);
    bool gpu = pl.source == DT_NPROC_PER_NODE;
    if (gpu)
        pl.world = pl.nnodes * (pl.nproc = 1);
    int nproc = pl.nproc;
    snprintf(run_dir, sizeof run_dir, "%s/%s-<run id>", log_dir ? log_dir : job->log_dir, job->name);
    struct dt_agent_config cfg = {.job = job,
                                  .argv = job->command ? (const char *const *)job->command : worker,
                                  .nnodes = pl.nnodes,
                                  .nproc = nproc,
                                  .run_id = "<run id>",
                                  .run_dir = run_dir,
                                  .master_addr = job->scheduler == DT_SCHED_LOCAL ? "127.0.0.1" : "<node 0>",
                                  .master_port = job->rendezvous.port,
                                  .token = job->rendezvous.auth == DT_AUTH_NONE ? NULL : "<the job token>"};
    fprintf(out, "# dtrain --dry-run: nothing was started.\n# job %s, scheduler: %s, %d node%s x ", job->name,
            dt_scheduler_name(job->scheduler), job->nodes, job->nodes == 1 ? "" : "s");
    if (gpu)
        fprintf(out, "one rank per GPU (counted at start; shown for 1)\n");
    else
        fprintf(out, "%d rank%s per node = world size %d\n", nproc, nproc == 1 ? "" : "s", pl.world);
    if (!job->rendezvous.port)
        fprintf(out, "# MASTER_PORT 0 here: the coordinator takes a free port at start\n");
    fprintf(out, "argv: ");
    put_argv(cfg.argv, out);
    fprintf(out, "environment (besides the launcher's own, which every rank inherits):\n");
    for (int node = 0; node < job->nodes; node++) {
        if (job->nodes > 2 && node == 1) {
            fprintf(out, "  ... nodes 1 to %d alike ...\n", job->nodes - 2);
            node = job->nodes - 1;
        }
        cfg.node_rank = node;
        for (int l = 0; l < nproc; l++) {
            if (nproc > SHOWN_RANKS && l == SHOWN_RANKS / 2) {
                fprintf(out, "  ... local ranks %d to %d alike ...\n", l, nproc - 2);
                l = nproc - 1;
            }
            int rc = put_rank(&cfg, &pl, l, out);
            if (rc < 0)
                return rc;
        }
    }
    const struct dt_adapter *ad = dt_adapter_for(job->scheduler);
    if (ad && ad->dry_run) {
        struct dt_adapter_launch lo = {.log_dir = log_dir};
        fprintf(out, "---- what launch would submit (as `dtrain render %s` writes it, under the launch's names) ----\n",
                ad->name);
        return ad->dry_run(job, &lo, out);
    }
    if (!ad || !ad->render)
        return 0;
    fprintf(out, "---- what `dtrain render %s` writes, which launch would submit ----\n", ad->name);
    return ad->render(job, job->path, out);
}
