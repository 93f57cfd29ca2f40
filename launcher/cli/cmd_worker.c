/* cmd_worker.c - `dtrain worker job.yaml`: the command that starts one rank of the bundled trainer.
 *
 * `dtrain launch` runs it as every rank's command when the job has a
 * `trainer:` section.  The rank itself (its environment, the store, the
 * communicator, the heartbeat, the trainer, the error report) is
 * worker/rank.c; this command only parses its one argument, re-runs itself
 * for OpenBLAS (the command line is the command's), and under mpirun with
 * backend: mpi turns MPI's place into torchrun's variables (the mpirun
 * adapter's, a layer above worker/) before the rank reads them.
 *
 * Not for training logic: that lives in worker/.
 */
#include "launcher/cli/cli.h"

#include "base/log.h"
#include "scheduler-adapters/mpirun/mpirun.h"
#include "worker/rank.h"

#include <stdio.h>

static void usage(FILE *out)
{
    fprintf(out, "Usage: dtrain worker JOB.yaml\n\n"
                 "Runs one rank of the bundled trainer described by the job's trainer: section.\n"
                 "`dtrain launch` starts it on every rank; by hand (no WORLD_SIZE set) it trains as a\n"
                 "single process and writes metrics.jsonl, checkpoints/ and trainer_summary.json in\n"
                 "$DTRAIN_RUN_DIR or the current directory.\n");
}

static int run(int argc, char **argv)
{
    static const struct option *const tables[] = {NULL};
    struct dt_cli_opts s;
    dt_cli_opts_init(&s, "worker", "", false, tables);
    const char *v, *spec = NULL;
    int n = 0;
    for (int ch; (ch = dt_cli_opts_next(&s, argc, argv, &v)) != -1; n++) {
        if (ch == DT_CLI_OPT_ERROR)
            return DT_EXIT_REFUSED;
        spec = v;
    }
    if (n != 1)
        return dt_cli_usage_error("worker", "expects one argument, the job spec");
    dt_log_level_from_env();
    char *const again[] = {"dtrain", "worker", (char *)spec, NULL};
    dt_rank_fix_blas(again);
    /* Started by mpirun itself (backend: mpi): the rank is MPI's. */
    if (dt_mpirun_rank_env() < 0)
        return dt_rank_fail(0);
    return dt_rank_main(spec);
}

const struct dt_cli_command dt_cli_worker = {
    .name = "worker",
    .summary = "run one rank of the bundled trainer (started by launch)",
    .run = run,
    .usage = usage,
};
