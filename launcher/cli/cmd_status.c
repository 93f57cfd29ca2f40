/* cmd_status.c - `dtrain status RUN`: how one run stands, from another terminal.
 *
 * RUN is a run directory, or a handle looked up in the log directory (a
 * Slurm job id, a Kubernetes Job name, a run id, the job's name: run_info.h).
 * Prints one "key: value" line each: the run, the job and its scheduler, the
 * state (pending, running, succeeded, failed, interrupted, cancelled, lost,
 * unknown), the newest attempt, the step of metrics.jsonl, the ranks and
 * nodes, where it runs (the launcher's pid and host, the Slurm job and its
 * nodes, the Kubernetes Job and namespace, mpirun's pid), and once it ended
 * its exit status.  The exit status is 0 when the run could be read.
 *
 * Not for the run's curves or findings (`dtrain report`).
 */
#include "launcher/cli/cli.h"
#include "launcher/cli/run_info.h"

#include "base/error.h"

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void usage(FILE *out)
{
    fprintf(out, "Usage: dtrain status RUN [--log-dir DIR]\n\n"
                 "Says how a run stands: its state (pending, running, succeeded, failed, interrupted,\n"
                 "cancelled, lost: the launcher or scheduler job ended without summary.json), the\n"
                 "newest attempt, the training step, the ranks and nodes, and where it runs (the\n"
                 "`dtrain launch` pid, the Slurm job id and nodes, the Kubernetes Job, mpirun's pid).\n\n"
                 "RUN is a run directory, or in the log directory a run's directory name, run id,\n"
                 "Slurm job id, Kubernetes Job name, or job name (its newest run).\n\n"
                 "Options:\n"
                 "  --log-dir DIR   where to look RUN up (default: runs)\n"
                 "  -h, --help      show this help\n\n"
                 "Exit status: 0 when the run was read, 1 when RUN names none, 2 on a usage error.\n");
}

static void print_started(double unix_s)
{
    time_t t = (time_t)unix_s;
    struct tm tm;
    char buf[32];
    gmtime_r(&t, &tm);
    strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    printf("started:   %s\n", buf);
}

/* Every string below may come from a file someone planted: printed through
 * dt_run_info_shown, never raw. */
#define SHOWN(s) dt_run_info_shown((s), (char[3 * PATH_MAX]){0}, 3 * PATH_MAX)

static void print_info(const struct dt_run_info *in)
{
    const struct dt_run_record *r = &in->rec;
    printf("run:       %s\n", SHOWN(in->have_record ? r->run_dir : in->dir));
    /* A spec given with ${VAR}, --set or by `dtrain run` ran from a copy
     * that is gone once the job ends; the run's own job.yaml is what ran. */
    if (in->have_record) {
        bool kept = access(r->spec, R_OK) == 0;
        printf("job:       %s (scheduler: %s, spec %s%s)\n", SHOWN(r->name), SHOWN(r->scheduler),
               SHOWN(kept ? r->spec : r->run_dir), kept ? "" : "/job.yaml");
        if (!r->trusted)
            printf("warning:   launch.json is not only yours (%s): what it says is shown, not acted on\n",
                   SHOWN(r->distrust));
    }
    printf("state:     %s", SHOWN(in->state));
    if (in->asked && in->sched.state[0] && strcmp(in->sched.state, "running") &&
        strcmp(in->sched.state, "ended"))
        printf(" (%s)", SHOWN(in->sched.state));
    printf("\n");
    if (in->attempt >= 0)
        printf("attempt:   %d\n", in->attempt);
    if (in->step >= 0 && in->total_steps >= 0)
        printf("step:      %lld/%lld\n", in->step, in->total_steps);
    else if (in->step >= 0)
        printf("step:      %lld\n", in->step);
    if (in->world_size > 0)
        printf("ranks:     %d\nnodes:     %d\n", in->world_size, in->nnodes);
    else if (in->have_record)
        printf("ranks:     %d node%s x gpu\n", r->nodes, r->nodes == 1 ? "" : "s");
    if (in->asked && in->sched.where[0])
        printf("where:     %s\n", SHOWN(in->sched.where));
    if (in->have_record)
        print_started(r->started_unix);
    if (in->have_summary && !dt_run_info_active(in))
        printf("exit:      %d\n", in->exit_status);
}

static int parse_args(int argc, char **argv, const char **handle, const char **log_dir)
{
    static const struct option own[] = {{"log-dir", required_argument, NULL, DT_CLI_OPT_LOG_DIR}, {0}};
    static const struct option *const tables[] = {own, NULL};
    struct dt_cli_opts s;
    dt_cli_opts_init(&s, "status", "", false, tables);
    const char *v;
    for (int ch; (ch = dt_cli_opts_next(&s, argc, argv, &v)) != -1;) {
        if (ch == DT_CLI_OPT_ERROR)
            return DT_EXIT_REFUSED;
        if (ch == DT_CLI_OPT_LOG_DIR)
            *log_dir = v;
        else if (*handle)
            return dt_cli_usage_error("status", "one run at a time (got '%s' and '%s')", *handle, v);
        else
            *handle = v;
    }
    return 0;
}

static int run(int argc, char **argv)
{
    const char *handle = NULL, *log_dir = NULL;
    int prc = parse_args(argc, argv, &handle, &log_dir);
    if (prc)
        return prc;
    if (!handle)
        return dt_cli_usage_error("status", "which run? Give its run directory (or job id, or name)");
    char dir[4096];
    struct dt_run_info in;
    if (dt_run_info_find(handle, log_dir, dir, sizeof dir) < 0 || dt_run_info_load(dir, true, &in) < 0) {
        fprintf(stderr, "dtrain status: %s\n", dt_run_info_shown(dt_error_last(), (char[4096]){0}, 4096));
        return 1;
    }
    print_info(&in);
    return 0;
}

const struct dt_cli_command dt_cli_status = {
    .name = "status",
    .summary = "how a run stands: state, attempt, step, ranks, where it runs",
    .run = run,
    .usage = usage,
};
