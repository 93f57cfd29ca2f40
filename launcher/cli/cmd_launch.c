/* cmd_launch.c - `dtrain launch job.yaml`: runs a job through its scheduler's adapter.
 *
 * Parses the options, reads the spec as validate and render read it
 * (cli_spec.c: --set, every problem, the adapter's check) and hands the job
 * to the launch path every job takes (cli_launch.c), which `dtrain run`
 * shares.  Its exit status is the job's (docs/cli.md, Exit statuses).
 *
 * Not for running ranks (the agent), the options launch shares with run
 * (cli_launch.c), or for what a scheduler needs (its adapter).
 */
#include "launcher/cli/cli.h"
#include "spec/jobspec.h"

#include "base/clock.h"

#include <stdio.h>
#include <string.h>

struct launch_opts {
    const char *job_path;
    struct dt_cli_spec spec;
    struct dt_cli_launch run;
};

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: dtrain launch JOB.yaml [options]\n\n"
            "Runs the job described by JOB.yaml (scheduler: local runs it on this machine).\n"
            "Each rank's output appears on the console prefixed \"[rank N]\" and in full under\n"
            "<log_dir>/<name>-<run id>/attempt_<k>/rank_<n>.{out,err}; summary.json there says how\n"
            "the run ended.  The exit status is the job's: 0, the first failing rank's exit code\n"
            "(1 when that is 2, which means dtrain refused), or 128 + the signal number that killed\n"
            "it; 2 when dtrain refused before starting (see docs/cli.md, Exit statuses).\n\n"
            "Options:\n"
            "  --set KEY.PATH=VALUE  override a key of JOB.yaml as if the file said it (repeatable),\n"
            "                        e.g. --set trainer.steps=100 --set env.OMP_NUM_THREADS=4\n");
    dt_cli_launch_usage(out);
    fprintf(out,
            "  -h, --help            show this help\n\n"
            "Ctrl-C (SIGINT) or SIGTERM stops every process of the job within the grace period;\n"
            "a second Ctrl-C kills them at once.  See docs/launch.md for the rank environment.\n");
}

static int parse_args(int argc, char **argv, struct launch_opts *o)
{
    static const struct option *const tables[] = {dt_cli_spec_options, dt_cli_launch_options, NULL};
    struct dt_cli_opts s;
    dt_cli_opts_init(&s, "launch", DT_CLI_LAUNCH_SHORTS, false, tables);
    const char *v;
    for (int ch; (ch = dt_cli_opts_next(&s, argc, argv, &v)) != -1;) {
        int taken = ch == DT_CLI_OPT_ERROR ? DT_EXIT_REFUSED : dt_cli_spec_opt(&o->spec, ch, v);
        if (!taken)
            taken = dt_cli_launch_opt(&o->run, "launch", ch, v);
        if (taken == DT_EXIT_REFUSED)
            return taken;
        if (ch != DT_CLI_OPT_OPERAND)
            continue;
        if (o->job_path)
            return dt_cli_usage_error("launch", "one job file at a time (got '%s' and '%s')", o->job_path, v);
        o->job_path = v;
    }
    if (!o->job_path)
        return dt_cli_usage_error("launch", "which job? Give the path of a job spec (YAML)");
    return 0;
}

static int run(int argc, char **argv)
{
    struct launch_opts o = {.spec = {.cmd = "launch"}, .run = {.start_mono = dt_clock_s()}};
    int rc = parse_args(argc, argv, &o);
    if (rc != 0)
        return rc;
    struct dt_job *job = NULL;
    rc = dt_cli_spec_load(&o.spec, o.job_path, NULL, NULL, &job);
    if (rc)
        return rc;
    int status = dt_cli_launch_job(job, &o.run, "launch");
    dt_job_free(job);
    return status;
}

const struct dt_cli_command dt_cli_launch = {
    .name = "launch",
    .summary = "run a job through its scheduler (scheduler: local runs it on this machine)",
    .run = run,
    .usage = usage,
};
