/* cmd_version.c - `dtrain version`: the version and what this build can do.
 *
 * Prints which optional parts were compiled in (CUDA with the NCCL library it
 * loads, MPI), so a user on a cluster can tell at once whether a binary can
 * run GPU jobs or backend: mpi jobs.
 */
#include "launcher/cli/cli.h"

#ifdef DT_HAVE_CUDA
#include "comm/nccl/nccl_comm.h"
#endif

#include <stdio.h>

static void usage(FILE *out)
{
    fprintf(out, "Usage: dtrain version\n\n"
                 "Prints the version of dtrain and the optional parts built into this binary.\n");
}

static int run(int argc, char **argv)
{
    static const struct option *const tables[] = {NULL};
    struct dt_cli_opts s;
    dt_cli_opts_init(&s, "version", "", false, tables);
    const char *v;
    int ch = dt_cli_opts_next(&s, argc, argv, &v);
    if (ch == DT_CLI_OPT_ERROR)
        return DT_EXIT_REFUSED;
    if (ch != -1)
        return dt_cli_usage_error("version", "takes no arguments");
    printf("dtrain %s\n", dt_version);
#ifdef DT_HAVE_CUDA
    /* NCCL's code is major*10000 + minor*100 + patch since 2.9 (22809: 2.28.9). */
    int nccl = dt_nccl_version();
    if (nccl > 0)
        printf("cuda: yes (NCCL %d.%d.%d backend and CUDA trainer built in)\n", nccl / 10000, nccl / 100 % 100,
               nccl % 100);
    else
        printf("cuda: yes (NCCL backend and CUDA trainer built in; the NCCL library did not load)\n");
#else
    printf("cuda: no (built without nvcc; CPU backends only)\n");
#endif
#ifdef DT_HAVE_MPI
    printf("mpi: yes (backend: mpi built in)\n");
#else
    printf("mpi: no (built without mpicc)\n");
#endif
    return 0;
}

const struct dt_cli_command dt_cli_version = {
    .name = "version",
    .summary = "print the version and the optional parts built in",
    .run = run,
    .usage = usage,
};
