/* cmd_cancel.c - `dtrain cancel RUN`: stops a run from another terminal.
 *
 * The adapter of the run's scheduler does it (its cancel op, adapter.h):
 * SIGTERM to the `dtrain launch` that hosts a local or mpirun job (which
 * stops every rank as Ctrl-C would, SIGKILL after the grace period),
 * scancel for Slurm, `kubectl delete` of the Job and its objects for
 * Kubernetes.  It then waits for the run to end, up to --wait seconds.
 *
 * Not for a run's own restarts (max_restarts) or for deleting run directories.
 */
#include "launcher/cli/cli.h"
#include "launcher/cli/run_info.h"

#include "base/args.h"
#include "base/error.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *out)
{
    fprintf(out, "Usage: dtrain cancel RUN [--wait SECS] [--log-dir DIR]\n\n"
                 "Stops a run and everything it started: a local or mpirun job's launcher gets SIGTERM\n"
                 "(its ranks are stopped as by Ctrl-C, killed after the grace period), a Slurm job is\n"
                 "scancelled, a Kubernetes Job is deleted with its Service, ConfigMap and Secret.\n"
                 "RUN is named as for `dtrain status`.\n\n"
                 "Options:\n"
                 "  --wait SECS     how long to wait for the run to end (default: the spec's\n"
                 "                  grace_period plus 10 s)\n"
                 "  --log-dir DIR   where to look RUN up (default: runs)\n"
                 "  -h, --help      show this help\n\n"
                 "Exit status: 0 when the run has ended (or had already), 1 when it could not be\n"
                 "stopped or RUN names none, 2 on a usage error.\n");
}

/* The spec's grace period, as the snapshot of the run records it; 30 s when unknown. */
static double grace_of(const struct dt_run_info *in)
{
    struct dt_job *job = NULL;
    double g = dt_run_record_load_spec(in->dir, &job) == 0 ? job->grace_period_s : 30;
    dt_job_free(job);
    dt_error_clear();
    return g;
}

static int cancel(const struct dt_run_info *in, double wait_s)
{
    const struct dt_adapter *ad = dt_run_info_adapter(in);
    if (!ad)
        return -1;
    if (!ad->cancel)
        return dt_error_set(DT_EUNSUPPORTED, "scheduler %s has no way to cancel a run", ad->name);
    char dir[3 * 4096], where[3 * 512], state[128];
    dt_run_info_shown(in->dir, dir, sizeof dir);
    /* A record someone else could have written is a claim about their run, or
     * a trap: it names which job or process to stop, so it is not acted on. */
    if (!in->rec.trusted)
        return dt_error_set(DT_EAUTH, "%s: %s, so it could name any job or process: not cancelled", dir,
                            dt_run_info_shown(in->rec.distrust, where, sizeof where));
    dt_run_info_shown(in->rec.run_dir, dir, sizeof dir);
    if (!dt_run_info_active(in)) {
        printf("run %s is not running (%s); nothing to cancel\n", dir,
               dt_run_info_shown(in->state, state, sizeof state));
        return 0;
    }
    int rc = ad->cancel(&in->rec, wait_s > 0 ? wait_s : grace_of(in) + 10);
    if (rc == 0)
        printf("cancelled run %s (%s%s%s)\n", dir, in->rec.scheduler, in->sched.where[0] ? ": " : "",
               dt_run_info_shown(in->sched.where, where, sizeof where));
    return rc;
}

static int parse_args(int argc, char **argv, const char **handle, const char **log_dir, double *wait_s)
{
    enum { WAIT = DT_CLI_OPT_OWN };
    static const struct option own[] = {
        {"log-dir", required_argument, NULL, DT_CLI_OPT_LOG_DIR}, {"wait", required_argument, NULL, WAIT}, {0}};
    static const struct option *const tables[] = {own, NULL};
    struct dt_cli_opts s;
    dt_cli_opts_init(&s, "cancel", "", false, tables);
    const char *v;
    for (int ch; (ch = dt_cli_opts_next(&s, argc, argv, &v)) != -1;) {
        if (ch == DT_CLI_OPT_ERROR)
            return DT_EXIT_REFUSED;
        if (ch == DT_CLI_OPT_LOG_DIR)
            *log_dir = v;
        else if (ch == WAIT && dt_args_seconds(v, wait_s) < 0)
            return dt_cli_usage_error("cancel", "--wait '%s': expected seconds, e.g. 30", v);
        else if (ch == DT_CLI_OPT_OPERAND && *handle)
            return dt_cli_usage_error("cancel", "one run at a time (got '%s' and '%s')", *handle, v);
        else if (ch == DT_CLI_OPT_OPERAND)
            *handle = v;
    }
    return 0;
}

static int run(int argc, char **argv)
{
    const char *handle = NULL, *log_dir = NULL;
    double wait_s = 0;
    int prc = parse_args(argc, argv, &handle, &log_dir, &wait_s);
    if (prc)
        return prc;
    if (!handle)
        return dt_cli_usage_error("cancel", "which run? Give its run directory (or job id, or name)");
    char dir[4096];
    struct dt_run_info in;
    if (dt_run_info_find(handle, log_dir, dir, sizeof dir) < 0 || dt_run_info_load(dir, true, &in) < 0 ||
        cancel(&in, wait_s) < 0) {
        char why[4096];
        fprintf(stderr, "dtrain cancel: %s\n", dt_run_info_shown(dt_error_last(), why, sizeof why));
        return 1;
    }
    return 0;
}

const struct dt_cli_command dt_cli_cancel = {
    .name = "cancel",
    .summary = "stop a run, the scheduler's job included",
    .run = run,
    .usage = usage,
};
