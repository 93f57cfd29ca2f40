/* cmd_mpirank.c - `dtrain mpirank -- PROGRAM ...`: one rank of a backend: mpi
 * job, as mpirun starts it (scheduler-adapters/mpirun/mpirun_rank.c does the work).
 *
 * Not for running by hand: `dtrain launch` puts it on the mpirun line.
 */
#include <stdio.h>
#include <string.h>

#include "launcher/cli/cli.h"
#include "scheduler-adapters/mpirun/mpirun.h"

static void usage(FILE *out)
{
    fprintf(out, "Usage: dtrain mpirank -- PROGRAM [ARGS...]\n\n"
                 "What mpirun runs for each rank of a `backend: mpi` job (dtrain launch writes the line):\n"
                 "sets RANK, LOCAL_RANK, WORLD_SIZE, ... from mpirun's OMPI_COMM_WORLD_* (or PMIX_RANK),\n"
                 "runs PROGRAM, passes on mpirun's signals, and records how PROGRAM ended in\n"
                 "$DTRAIN_RUN_DIR/attempt_<k>/rank_<r>.exit for the launcher's summary.\n");
}

static int run(int argc, char **argv)
{
    static const struct option *const tables[] = {NULL};
    struct dt_cli_opts s;
    dt_cli_opts_init(&s, "mpirank", "", true, tables); /* options end at PROGRAM (or --) */
    const char *v;
    if (dt_cli_opts_next(&s, argc, argv, &v) != -1)
        return DT_EXIT_REFUSED;
    int first = optind;
    if (first >= argc)
        return dt_cli_usage_error("mpirank", "which program? dtrain mpirank -- PROGRAM [ARGS...]");
    return dt_mpirun_rank_main(argv + first);
}

const struct dt_cli_command dt_cli_mpirank = {
    .name = "mpirank",
    .summary = "run one rank of a backend: mpi job under mpirun (started by launch)",
    .run = run,
    .usage = usage,
};
