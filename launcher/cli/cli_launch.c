/* cli_launch.c - the one path a job takes from the command line to its scheduler, for launch and run.
 *
 * `dtrain launch job.yaml` and `dtrain run ... -- PROGRAM` differ only in
 * where the spec comes from; from a loaded struct dt_job on they share these
 * options (--log-dir, --ranks, --grace-period, --trace, --detach,
 * --dry-run, --resume, --quiet, --verbose) and dt_cli_launch_job: the dry run, the
 * copy of a derived spec for the nodes and ranks (cli_spec.c), and the plan
 * of the spec's scheduler's adapter (scheduler-adapters/adapter.h), which
 * cli_plan.c carries out; or, for `dtrain run` of scheduler: local, the node
 * its flags place (run_rdzv.h), run as `dtrain agent` runs one.
 *
 * Not for parsing a spec (cli_spec.c) or running ranks (the agent).
 */
#include "launcher/agent/agent.h"
#include "launcher/cli/cli.h"

#include "launcher/cli/launch_resume.h"
#include "scheduler-adapters/adapter.h"
#include "spec/jobspec.h"

#include "base/args.h"
#include "base/error.h"
#include "base/fs.h"
#include "base/log.h"
#include "worker/trace.h"

#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void dt_cli_launch_usage(FILE *out)
{
    fprintf(out,
            "  --dry-run             print what would run (ranks per node, each rank's environment\n"
            "                        and argv, the rendered sbatch script, manifests or mpirun line)\n"
            "                        and exit 0, starting nothing\n"
            "  --ranks LIST          show the output (stdout and stderr) of these ranks only, e.g.\n"
            "                        0 or 0,2-3; every rank's log files still get all of it\n"
            "  --log-dir DIR         where run directories go (default: the spec's log_dir, \"runs\")\n"
            "  --grace-period SECS   between SIGTERM and SIGKILL when stopping ranks (default:\n"
            "                        the spec's grace_period, 30s)\n"
            "  --trace[=STEPS]       trainer jobs without a trace: window: a Chrome trace per rank of\n"
            "                        these steps (default 10-20), see docs/observability.md\n"
            "  --resume RUN_DIR      continue that run in its directory from its newest checkpoint\n"
            "                        (checkpoint.resume: auto); refused when the spec's model or\n"
            "                        data differ from the run's (RUN_DIR/job.yaml)\n"
            "  --detach              scheduler: kubernetes: apply the manifests and return, leaving\n"
            "                        the Job running (without it, Ctrl-C deletes the Job)\n"
            "  --quiet               only dtrain's warnings and errors (rank output still shows)\n"
            "  --verbose             also dtrain's debug messages\n");
}

const struct option dt_cli_launch_options[] = {
    {"quiet", no_argument, NULL, 'q'},
    {"verbose", no_argument, NULL, 'v'},
    {"trace", optional_argument, NULL, DT_CLI_OPT_TRACE},
    {"detach", no_argument, NULL, DT_CLI_OPT_DETACH},
    {"dry-run", no_argument, NULL, DT_CLI_OPT_DRY_RUN},
    {"resume", required_argument, NULL, DT_CLI_OPT_RESUME},
    {"ranks", required_argument, NULL, DT_CLI_OPT_RANKS},
    {"log-dir", required_argument, NULL, DT_CLI_OPT_LOG_DIR},
    {"log_dir", required_argument, NULL, DT_CLI_OPT_LOG_DIR}, /* torchrun's spelling */
    {"grace-period", required_argument, NULL, DT_CLI_OPT_GRACE},
    {0},
};

int dt_cli_launch_opt(struct dt_cli_launch *o, const char *cmd, int id, const char *v)
{
    switch (id) {
    case 'q':
        dt_log_set_level(DT_LOG_WARN);
        break;
    case 'v':
        dt_log_set_level(DT_LOG_DEBUG);
        break;
    case DT_CLI_OPT_TRACE: {
        struct dt_trace_spec w; /* ranks inherit it; dtrain worker reads it (worker/rank.c) */
        const char *steps = v ? v : "10-20";
        if (dt_trace_parse_steps(steps, &w) || setenv("DTRAIN_TRACE", steps, 1))
            return dt_cli_usage_error(cmd, "--trace=%s: expected steps like 10-20 or 15", steps);
        o->trace = true;
        break;
    }
    case DT_CLI_OPT_DETACH:
        o->detach = true;
        break;
    case DT_CLI_OPT_DRY_RUN:
        o->dry_run = true;
        break;
    case DT_CLI_OPT_RESUME:
        o->resume = v;
        break;
    case DT_CLI_OPT_RANKS:
        o->ranks = v;
        break;
    case DT_CLI_OPT_LOG_DIR:
        o->log_dir = v;
        break;
    case DT_CLI_OPT_GRACE:
        if (dt_args_seconds(v, &o->grace_s) < 0)
            return dt_cli_usage_error(cmd, "--grace-period '%s': expected seconds, e.g. 3 or 0.5s", v);
        break;
    default:
        return 0;
    }
    return 1;
}

/* --resume RUN_DIR: the log directory and run id that name it again. */
static int resume_run(const struct dt_job *job, const struct dt_adapter *ad, const char *run_dir,
                      char log_dir[PATH_MAX], char run_id[64])
{
    int rc = ad->resume_check ? ad->resume_check(job) : 0;
    if (rc < 0)
        dt_error_prefix("--resume %s", run_dir);
    else
        rc = dt_launch_resume_check(job, run_dir, log_dir, PATH_MAX, run_id, 64);
    if (rc < 0)
        fprintf(stderr, "dtrain launch: %s\n", dt_error_last());
    else
        dt_log_info("resuming run %s/%s-%s", log_dir, job->name, run_id);
    return rc;
}

/* requeue: true with a command job: what SIGUSR1 will do to the user's
 * script, said before it is submitted (launcher/agent/agent_supervise.c). */
static void say_requeue(const struct dt_job *job, const struct dt_cli_launch *o)
{
    if (!job->slurm || !job->slurm->requeue || !job->command)
        return;
    double grace = o->grace_s > 0                ? o->grace_s
                   : job->grace_period_s > 0 ? job->grace_period_s
                                             : DT_JOB_GRACE_DEFAULT_S;
    dt_log_info("requeue: SIGUSR1 comes %g s before the time limit: if every rank catches it, they get it (one that "
                "saves its state and exits %d is requeued), else every rank is stopped (SIGTERM, SIGKILL after %g "
                "s) and the job is requeued",
                job->slurm->signal_lead_s, DT_AGENT_EXIT_REQUEUE, grace);
}

/* The keys of torchrun's flags that this dtrain reads but does not apply yet
 * (spec/jobspec_torchrun.c): said once, so nobody counts on them. */
static void say_not_applied(const struct dt_job *job)
{
    const uint64_t stop_signals = 1ull << SIGHUP | 1ull << SIGINT | 1ull << SIGQUIT | 1ull << SIGTERM;
    if ((job->signals_to_handle & stop_signals) != stop_signals)
        dt_log_warn("signals_to_handle (--signals-to-handle) leaves out a stop signal: SIGHUP, SIGINT, SIGQUIT and "
                    "SIGTERM stop the job all the same (passed on to the ranks, SIGKILL after the grace period)");
}

int dt_cli_launch_job(struct dt_job *job, const struct dt_cli_launch *o, const char *cmd)
{
    say_not_applied(job);
    say_requeue(job, o);
    if (o->trace && job->command)
        dt_log_warn("--trace applies to the bundled trainer (trainer:); job %s runs a command, which "
                    "gets DTRAIN_TRACE in its environment and may ignore it",
                    job->name);
    if (o->dry_run) {
        int rc = dt_cli_dry_run(job, o->log_dir, stdout);
        if (rc < 0 || fflush(stdout) != 0) {
            fprintf(stderr, "dtrain %s: %s\n", cmd, dt_error_last());
            return rc == DT_EINVAL ? DT_EXIT_REFUSED : DT_EXIT_FAILED;
        }
        return DT_EXIT_OK;
    }
    const struct dt_adapter *ad = dt_adapter_for(job->scheduler);
    if (!ad || !ad->plan) { /* dt_cli_spec_load has refused a scheduler not built in */
        fprintf(stderr, "dtrain %s: %s: scheduler: %s cannot be launched by this dtrain (%s)\n", cmd, job->path,
                dt_scheduler_name(job->scheduler), dt_version);
        return DT_EXIT_REFUSED;
    }
    char resume_log_dir[PATH_MAX], resume_id[64];
    if (o->resume && resume_run(job, ad, o->resume, resume_log_dir, resume_id) < 0)
        return DT_EXIT_REFUSED;
    char copy[PATH_MAX];
    if (dt_cli_spec_hand_on_private(job, copy, sizeof copy) < 0) {
        fprintf(stderr, "dtrain %s: %s\n", cmd, dt_error_last());
        return DT_EXIT_FAILED;
    }
    char self[PATH_MAX];
    dt_fs_self_path(self, sizeof self);
    struct dt_adapter_launch lo = {.log_dir = o->resume ? resume_log_dir : o->log_dir,
                                   .ranks = o->ranks,
                                   .grace_s = o->grace_s,
                                   .start_mono = o->start_mono,
                                   .dtrain_path = self,
                                   .detach = o->detach,
                                   .run_id = o->resume ? resume_id : NULL};
    int status = o->node ? dt_cli_node_run(job, &lo, o->node, NULL) : dt_cli_launch_plan(job, ad, &lo);
    /* Read at submission only (the script, the ConfigMap), and by the nodes of
     * `dtrain run` other than node 0, which have no run record: gone with the launch. */
    dt_cli_spec_hand_on_done(copy);
    return status;
}
