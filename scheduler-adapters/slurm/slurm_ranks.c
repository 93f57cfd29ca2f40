/* slurm_ranks.c - slurm.tasks: per_rank: Slurm starts every rank.
 *
 * Sites that account and bind per task want one Slurm task per rank
 * (`srun --ntasks-per-node=<nproc_per_node> --cpu-bind=... --gpu-bind=...`),
 * not one agent per node that forks its ranks.  So with per_rank:
 *   - the batch script runs `dtrain agent job.yaml` itself, on the batch host
 *     (node 0 of the allocation): it hosts the coordinator and makes the run
 *     directory, as node 0's agent always does;
 *   - instead of forking ranks the agent runs one srun step for all of them,
 *     as the one process that stands for every rank (adapter.h's group, as
 *     mpirun's for backend: mpi): it restarts the step after a failure
 *     (max_restarts), stops it, files each of its lines under its rank
 *     (srun --label's "N: "), and writes summary.json;
 *   - each task runs `dtrain mpirank -- PROGRAM`: RANK, LOCAL_RANK,
 *     WORLD_SIZE, ... from SLURM_PROCID, SLURM_LOCALID, SLURM_STEP_NUM_TASKS
 *     and SLURM_NODEID (mpirun_rank.c, which reads Open MPI's the same way),
 *     the coordinator at SLURM_LAUNCH_NODE_IPADDR (srun's host: the agent's),
 *     and how the rank ended in attempt_<k>/rank_<r>.exit, read back here
 *     with dt_mpirun_rank_ends.
 * The line srun runs is built once here, for the agent and for the comment
 * in the rendered script, so what a user reads is what runs.
 *
 * Not for the sbatch script (slurm_render.c) or per_node's agents (slurm.c).
 */
#include "scheduler-adapters/slurm/slurm_internal.h"

#include "base/error.h"
#include "base/fs.h"
#include "scheduler-adapters/mpirun/mpirun.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* --- the step's command line --------------------------------------------- */

#define FLAG_MAX 160

int dt_slurm__ranks_argv(const struct dt_job *job, const struct dt_placement *pl, const char *dtrain,
                         const char *job_path, struct dt_slurm__argv *out)
{
    const struct dt_slurm_spec *s = job->slurm;
    if (pl->nproc <= 0)
        return dt_error_set(DT_EINVAL,
                            "%s: slurm.tasks: per_rank needs the ranks per node before the job starts: "
                            "nproc_per_node as a number, or slurm.gpus_per_node with nproc_per_node: gpu",
                            job->path);
    size_t max = 16 + (size_t)(job->command ? job->command_argc : 3);
    out->argv = calloc(max, sizeof *out->argv);
    out->flags = malloc(6 * FLAG_MAX);
    if (!out->argv || !out->flags) {
        dt_slurm__argv_free(out);
        return dt_error_set(DT_ENOMEM, "out of memory building the srun line");
    }
    int n = 0, f = 0;
    char *flag = out->flags;
#define FLAG(...) (snprintf(flag + f * FLAG_MAX, FLAG_MAX, __VA_ARGS__), out->argv[n++] = flag + FLAG_MAX * f++)
    out->argv[n++] = "srun";
    out->argv[n++] = "--kill-on-bad-exit=1";
    out->argv[n++] = "--label"; /* "N: text": whose line it is */
    FLAG("--nodes=%d", job->nodes);
    FLAG("--ntasks=%d", pl->world);
    FLAG("--ntasks-per-node=%d", pl->nproc);
    if (s && s->cpus_per_task > 0)
        FLAG("--cpus-per-task=%d", s->cpus_per_task);
    if (s && s->cpu_bind)
        FLAG("--cpu-bind=%s", s->cpu_bind);
    if (s && s->gpu_bind)
        FLAG("--gpu-bind=%s", s->gpu_bind);
#undef FLAG
    out->argv[n++] = dtrain;
    out->argv[n++] = "mpirank";
    out->argv[n++] = "--";
    if (job->command) {
        for (int i = 0; i < job->command_argc; i++)
            out->argv[n++] = job->command[i];
    } else {
        out->argv[n++] = dtrain;
        out->argv[n++] = "worker";
        out->argv[n++] = job_path;
    }
    out->argv[n] = NULL;
    return 0;
}

void dt_slurm__argv_free(struct dt_slurm__argv *a)
{
    free(a->argv);
    free(a->flags);
    a->argv = NULL;
    a->flags = NULL;
}

/* --- the group ------------------------------------------------------------ */

/* One agent per batch script, so one group per process. */
static struct ranks {
    const struct dt_job *job;
    struct dt_placement pl;
    char dtrain[PATH_MAX];
    struct dt_slurm__argv line;
    int world;
    int failed_rank, failed_code; /* srun's own word on the first failure, -1 until it says */
} the_ranks;

static int ranks_env(void *ctx, char *const *rank_env, char ***out)
{
    (void)ctx;
    return dt_mpirun_group_env(rank_env, DT_MPIRUN_COORD_AT_LAUNCH_NODE "=1", out);
}

static int ranks_argv(void *ctx, char *const *env, char *const **argv)
{
    (void)env;
    struct ranks *r = ctx;
    int rc = r->line.argv ? 0 : dt_slurm__ranks_argv(r->job, &r->pl, r->dtrain, r->job->path, &r->line);
    *argv = (char *const *)r->line.argv;
    return rc;
}

/* "3: text" (srun pads the number to the width of the largest). */
static int ranks_route(void *ctx, const char *line, size_t len, const char **text, size_t *text_len,
                       bool *is_err)
{
    (void)is_err; /* the stream the line came on says it */
    struct ranks *r = ctx;
    size_t i = 0;
    while (i < len && line[i] == ' ')
        i++;
    size_t d = i;
    int rank = 0;
    while (i < len && line[i] >= '0' && line[i] <= '9' && rank < 1 << 24)
        rank = rank * 10 + (line[i++] - '0');
    if (i > d && i < len && line[i] == ':' && rank < r->world) {
        i += i + 1 < len && line[i + 1] == ' ' ? 2 : 1;
        *text = line + i;
        *text_len = len - i;
        return rank;
    }
    /* srun: error: n2: task 3: Exited with exit code 3 */
    int q, code;
    const char *t = memmem(line, len, "task ", 5);
    if (r->failed_rank < 0 && t && sscanf(t, "task %d: Exited with exit code %d", &q, &code) == 2 && q >= 0 &&
        q < r->world) {
        r->failed_rank = q;
        r->failed_code = code;
    }
    return -1;
}

static int ranks_collect(void *ctx, const char *attempt_dir, int status, bool interrupted,
                         struct dt_adapter_rank_end *ends)
{
    struct ranks *r = ctx;
    int q = dt_mpirun_rank_ends(attempt_dir, r->world, status, ends);
    int said = r->failed_rank, code = r->failed_code;
    r->failed_rank = -1; /* the next attempt's report is its own */
    if (q >= 0 || status == 0 || interrupted || said < 0)
        return q;
    /* No record (a run directory the node does not share): srun's word. */
    ends[said].exited = true;
    ends[said].wstatus = (code & 0xff) << 8;
    return said;
}

static struct dt_adapter_group the_group = {
    .log_name = "srun.err",
    .ctx = &the_ranks,
    .env = ranks_env,
    .argv = ranks_argv,
    .route = ranks_route,
    .collect = ranks_collect,
};

const struct dt_adapter_group *dt_slurm__ranks_group(const struct dt_job *job)
{
    the_ranks.job = job;
    the_ranks.failed_rank = -1;
    dt_fs_self_path(the_ranks.dtrain, sizeof the_ranks.dtrain); /* the nodes share it, as $DTRAIN */
    dt_placement_resolve(job, DT_PLACE_SCHEDULER, &the_ranks.pl); /* fails only on a host's GPUs */
    the_group.world = the_ranks.world = the_ranks.pl.world;
    return &the_group;
}
