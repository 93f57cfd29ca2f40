/* cmd_version.c - `dtrain version`: the version and what this build can do.
 *
 * Prints which optional parts were compiled in (CUDA/NCCL), so a user on a
 * cluster can tell at once whether a binary can run GPU jobs.
 */
#include "launcher/cli.h"

#include <stdio.h>

static void usage(FILE *out)
{
    fprintf(out, "Usage: dtrain version\n\n"
                 "Prints the version of dtrain and the optional parts built into this binary.\n");
}

static int run(int argc, char **argv)
{
    (void)argv;
    if (argc > 1)
        return dt_cli_usage_error("version", "takes no arguments");
    printf("dtrain %s\n", dt_version);
#ifdef DT_HAVE_CUDA
    printf("cuda: yes (NCCL backend and CUDA trainer built in)\n");
#else
    printf("cuda: no (built without nvcc; CPU backends only)\n");
#endif
    return 0;
}

const struct dt_cli_command dt_cli_version = {
    .name = "version",
    .summary = "print the version and the optional parts built in",
    .run = run,
    .usage = usage,
};
