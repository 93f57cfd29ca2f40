/* cmd_trace.c - `dtrain trace merge`: its command line, defaults and messages.
 *
 * The merge itself is dt_trace_merge (trace_merge.c), so it runs without a
 * process of its own.  Not for recording spans (worker/trace.c) or for reading
 * JSON (base/json.h).
 */
#include "launcher/cli/cli.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "launcher/report/trace_merge.h"

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: dtrain trace merge RUN_DIR | TRACE.json... [-o MERGED.json]\n\n"
            "Combines the per-rank Chrome traces of a run (trace_rank<N>.json, written when the\n"
            "job runs with --trace or trace: {steps: \"10-20\"}) into one file that chrome://tracing\n"
            "and https://ui.perfetto.dev open: one process row per rank, with its launch, compute,\n"
            "communication and data tracks, plus a \"dtrain launch\" row (attempts, each rank's\n"
            "spawn to exit) when RUN_DIR holds summary.json.  Prints each rank's time per step\n"
            "and names a straggler: a rank whose work per step is 10%% over the median rank's.\n\n"
            "Options:\n"
            "  -o FILE     where to write (default: RUN_DIR/trace_merged.json; required for files)\n"
            "  -h, --help  show this help\n\n"
            "Exit status: 0 on success, 1 when an input is missing or not a trace, 2 on a usage error.\n");
}

static int run(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "merge") != 0)
        return dt_cli_usage_error("trace", argc < 2 ? "needs a subcommand: merge" : "unknown subcommand '%s'",
                                  argc < 2 ? "" : argv[1]);
    const char *run_dir = NULL, *out = NULL;
    char *names[256], out_default[4200];
    int n_names = 0, merged = 0;
    static const struct option own[] = {{"output", required_argument, NULL, 'o'}, {0}};
    static const struct option *const tables[] = {own, NULL};
    struct dt_cli_opts s;
    dt_cli_opts_init(&s, "trace", "o:", false, tables);
    const char *v;
    for (int ch; (ch = dt_cli_opts_next(&s, argc - 1, argv + 1, &v)) != -1;) { /* after "merge" */
        if (ch == DT_CLI_OPT_ERROR)
            return DT_EXIT_REFUSED;
        if (ch == 'o')
            out = v;
        else if (n_names < 256)
            names[n_names++] = (char *)v;
        else
            return dt_cli_usage_error("trace", "more than 256 inputs; give the run directory instead");
    }
    if (n_names == 0)
        return dt_cli_usage_error("trace", "merge needs a run directory or trace files");
    struct stat st;
    bool exists = stat(names[0], &st) == 0;
    if (n_names == 1 && !out && !exists) {
        fprintf(stderr, "dtrain trace merge: cannot open the run directory %s: %s\n", names[0], strerror(errno));
        return 1;
    }
    if (n_names == 1 && exists && S_ISDIR(st.st_mode)) {
        run_dir = names[0];
        snprintf(out_default, sizeof out_default, "%s/trace_merged.json", names[0]);
        out = out ? out : out_default;
    }
    if (!out)
        return dt_cli_usage_error("trace", "-o MERGED.json is needed when merging files");
    if (dt_trace_merge(names, n_names, run_dir, out, stdout, &merged)) {
        fprintf(stderr, "dtrain trace merge: %s\n", dt_error_last());
        return 1;
    }
    printf("merged %d rank trace%s into %s\n", merged, merged == 1 ? "" : "s", out);
    return 0;
}

const struct dt_cli_command dt_cli_trace = {
    .name = "trace",
    .summary = "merge the per-rank Chrome traces of a run into one file",
    .run = run,
    .usage = usage,
};
