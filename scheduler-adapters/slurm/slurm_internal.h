/* slurm_internal.h - shared by the Slurm adapter's files only: slurm.tasks:
 * per_rank's srun line and group (slurm_ranks.c), which render and discover use.
 *
 * Not for other adapters (adapter.h) or the tests' public entry points (slurm.h).
 */
#ifndef DT_SLURM_INTERNAL_H
#define DT_SLURM_INTERNAL_H

#include "scheduler-adapters/slurm/slurm.h"
#include "spec/placement.h"

/* The srun line that starts every rank: argv NULL-terminated; its strings
 * are the job's, the caller's, literals or in flags. */
struct dt_slurm__argv {
    const char **argv;
    char *flags;
};

/* `srun --kill-on-bad-exit=1 --label --nodes=N --ntasks=... --ntasks-per-node=K
 * [--cpus-per-task=C] [--cpu-bind=X] [--gpu-bind=Y] DTRAIN mpirank -- PROGRAM`
 * (PROGRAM: the spec's command, or `DTRAIN worker JOB_PATH`), for the job
 * placed as pl (spec/placement.h, DT_PLACE_SCHEDULER).  DT_EINVAL when the
 * ranks per node are not known before the job starts. */
int dt_slurm__ranks_argv(const struct dt_job *job, const struct dt_placement *pl, const char *dtrain,
                         const char *job_path, struct dt_slurm__argv *out);
void dt_slurm__argv_free(struct dt_slurm__argv *a);

/* The group that stands for every rank of a per_rank job, for the agent in
 * the batch script (one per process: it lives as long as the process). */
const struct dt_adapter_group *dt_slurm__ranks_group(const struct dt_job *job);

#endif
