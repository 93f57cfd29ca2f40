/* cmd_launch.c - `dtrain launch job.yaml`: runs a job through its scheduler's adapter.
 *
 * Parses the options, loads the spec and hands both to the adapter of the
 * spec's scheduler (scheduler-adapters/adapter.h), with host_node0: the
 * launcher's way to run node 0 of the job here (agent_node.c), which the
 * local adapter and mpirun's MPI ranks use; the others submit the job and
 * follow it.  Its exit status is the
 * job's: 0, the failing rank's exit code, or 128 + signal; 2 for a problem
 * the user must fix, such as a scheduler whose adapter is not built in.
 *
 * Not for running ranks (the agent) or for what a scheduler needs (its adapter).
 */
#include "launcher/agent/agent.h"
#include "launcher/cli.h"
#include "launcher/launch_resume.h"
#include "spec/jobspec.h"
#include "scheduler-adapters/adapter.h"

#include "base/args.h"
#include "base/error.h"
#include "base/log.h"
#include "worker/trace.h"
#include "base/clock.h"
#include "base/fs.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct launch_opts {
    const char *job_path;
    const char *log_dir;
    const char *ranks;
    double grace_s;
    double start_mono; /* the summary's times count from here */
    bool detach;
    const char *resume; /* --resume RUN_DIR */
    bool trace;
};

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: dtrain launch JOB.yaml [options]\n\n"
            "Runs the job described by JOB.yaml (scheduler: local runs it on this machine).\n"
            "Each rank's output appears on the console prefixed \"[rank N]\" and in full under\n"
            "<log_dir>/<name>-<run id>/attempt_<k>/rank_<n>.{out,err}; summary.json there says how\n"
            "the run ended.  The exit status is the job's: 0, the first failing rank's exit code,\n"
            "or 128 + the signal number that killed it.\n\n"
            "Options:\n"
            "  --ranks LIST          show stdout only of these ranks, e.g. 0 or 0,2-3 (stderr of\n"
            "                        every rank is always shown)\n"
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
            "  --verbose             also dtrain's debug messages\n"
            "  -h, --help            show this help\n\n"
            "Ctrl-C (SIGINT) or SIGTERM stops every process of the job within the grace period;\n"
            "a second Ctrl-C kills them at once.  See docs/launch.md for the rank environment.\n");
}

static int parse_args(int argc, char **argv, struct launch_opts *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_value = i + 1 < argc;
        if (strcmp(a, "--quiet") == 0 || strcmp(a, "-q") == 0) {
            dt_log_set_level(DT_LOG_WARN);
        } else if (strcmp(a, "--verbose") == 0 || strcmp(a, "-v") == 0) {
            dt_log_set_level(DT_LOG_DEBUG);
        } else if (strcmp(a, "--trace") == 0 || strncmp(a, "--trace=", 8) == 0) {
            struct dt_trace_spec w; /* ranks inherit it; dtrain worker reads it (cmd_worker.c) */
            const char *steps = a[7] == '=' ? a + 8 : "10-20";
            if (dt_trace_parse_steps(steps, &w) || setenv("DTRAIN_TRACE", steps, 1))
                return dt_cli_usage_error("launch", "--trace=%s: expected steps like 10-20 or 15", steps);
            o->trace = true;
        } else if (strcmp(a, "--detach") == 0) {
            o->detach = true;
        } else if (strcmp(a, "--resume") == 0 && has_value) {
            o->resume = argv[++i];
        } else if (strcmp(a, "--ranks") == 0 && has_value) {
            o->ranks = argv[++i];
        } else if (strcmp(a, "--log-dir") == 0 && has_value) {
            o->log_dir = argv[++i];
        } else if (strcmp(a, "--grace-period") == 0 && has_value) {
            if (dt_args_seconds(argv[++i], &o->grace_s) < 0)
                return dt_cli_usage_error("launch", "--grace-period '%s': expected seconds, e.g. 3 or 0.5s",
                                          argv[i]);
        } else if (a[0] == '-' && a[1]) {
            return dt_cli_usage_error("launch", "unknown option '%s'%s", a,
                                      has_value ? "" : " (or it needs a value)");
        } else if (o->job_path) {
            return dt_cli_usage_error("launch", "one job file at a time (got '%s' and '%s')", o->job_path, a);
        } else {
            o->job_path = a;
        }
    }
    if (!o->job_path)
        return dt_cli_usage_error("launch", "which job? Give the path of a job spec (YAML)");
    return 0;
}

/* adapter.h's host_node0: node 0 of the job, run in this process (the local
 * adapter's whole job; mpirun's MPI ranks, through their one process). */
static int host_node0(const struct dt_job *job, const struct dt_adapter_launch *o,
                      const struct dt_adapter_host *h)
{
    /* The run directory first, with launch.json and the spec in it, so that
     * `dtrain status` finds the job while it runs (launch_resume.h). */
    char run_id[64];
    snprintf(run_id, sizeof run_id, "%s", o->run_id ? o->run_id : "");
    if (dt_launch_run_dir(job, o->log_dir ? o->log_dir : job->log_dir, run_id, sizeof run_id) < 0) {
        fprintf(stderr, "dtrain launch: %s\n", dt_error_last());
        return 1;
    }
    struct dt_agent_node n = {.job = job,
                              .who = "dtrain launch",
                              .node_rank = 0,
                              .nnodes = h->nnodes,
                              .nproc = h->nproc,
                              .coord_bind = h->bind,
                              .coord_host = h->advertise,
                              .coord_port = job->rendezvous.port,
                              .log_dir = o->log_dir,
                              .ranks = o->ranks,
                              .grace_s = o->grace_s,
                              .start_mono = o->start_mono,
                              .run_id = run_id,
                              .dtrain = o->dtrain_path,
                              .group = h->group};
    return dt_agent_node_run(&n);
}

/* --resume RUN_DIR: the log directory and run id that name it again. */
static int resume_run(const struct dt_job *job, const struct dt_adapter *ad, const char *run_dir,
                      char log_dir[PATH_MAX], char run_id[64])
{
    int rc = ad->resumable ? dt_launch_resume_check(job, run_dir, log_dir, PATH_MAX, run_id, 64)
                           : dt_error_set(DT_EUNSUPPORTED,
                                          "--resume: scheduler: %s names each run directory by its own new job, "
                                          "so a run cannot continue in its old one; give the trainer an absolute "
                                          "checkpoint.dir to resume from across launches",
                                          ad->name);
    if (rc < 0)
        fprintf(stderr, "dtrain launch: %s\n", dt_error_last());
    else
        dt_log_info("resuming run %s/%s-%s", log_dir, job->name, run_id);
    return rc;
}

static int run(int argc, char **argv)
{
    struct launch_opts o = {.start_mono = dt_clock_s()};
    int rc = parse_args(argc, argv, &o);
    if (rc != 0)
        return rc;
    struct dt_job *job = NULL;
    if (dt_job_load(o.job_path, &job) < 0) {
        fprintf(stderr, "dtrain launch: %s\n", dt_error_last());
        return 2;
    }
    const struct dt_adapter *ad = dt_adapter_for(job->scheduler);
    if (!ad || !ad->submit) {
        fprintf(stderr, "dtrain launch: %s: scheduler: %s is not built into this version of dtrain (%s)\n",
                job->path, dt_scheduler_name(job->scheduler), dt_version);
        dt_job_free(job);
        return 2;
    }
    if (o.trace && job->command)
        dt_log_warn("--trace applies to the bundled trainer only: %s runs `%s`, which dtrain cannot trace "
                    "(its ranks still get DTRAIN_TRACE)",
                    job->path, job->command[0]);
    char resume_log_dir[PATH_MAX], resume_id[64];
    if (o.resume && resume_run(job, ad, o.resume, resume_log_dir, resume_id) < 0) {
        dt_job_free(job);
        return 2;
    }
    char self[PATH_MAX];
    dt_fs_self_path(self, sizeof self);
    struct dt_adapter_launch lo = {.log_dir = o.resume ? resume_log_dir : o.log_dir,
                                   .ranks = o.ranks,
                                   .grace_s = o.grace_s,
                                   .start_mono = o.start_mono,
                                   .dtrain_path = self,
                                   .detach = o.detach,
                                   .run_id = o.resume ? resume_id : NULL,
                                   .host_node0 = host_node0};
    int status = ad->submit(job, &lo);
    dt_job_free(job);
    return status;
}

const struct dt_cli_command dt_cli_launch = {
    .name = "launch",
    .summary = "run a job through its scheduler (scheduler: local runs it on this machine)",
    .run = run,
    .usage = usage,
};
