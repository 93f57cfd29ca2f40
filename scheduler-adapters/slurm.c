/* slurm.c - the Slurm adapter: `scheduler: slurm` (adapter.h's contract).
 *
 *   dtrain render slurm job.yaml   the sbatch script (slurm_render.c)
 *   dtrain launch job.yaml         sbatch it and follow it (slurm_submit.c, slurm_follow.c)
 *   dtrain agent job.yaml          under srun: this node's place (slurm_discover.c)
 *
 * Not for anything but the table entry: each part lives in its own file.
 */
#include "scheduler-adapters/slurm.h"

const struct dt_adapter dt_adapter_slurm = {
    .name = "slurm",
    .scheduler = DT_SCHED_SLURM,
    .render = dt_slurm_render,
    .submit = dt_slurm_submit,
    .discover = dt_slurm_discover,
};
