/* cmd_launch.c - `dtrain launch job.yaml`: runs a job.
 *
 * For scheduler: local the launcher is the whole job's parent: it makes the
 * run directory and the job token, hosts the coordinator on a thread (port 0
 * by default, so the kernel picks a free port and two jobs never race for
 * one), runs one agent for this machine, and writes summary.json.  Its exit
 * status is the job's: 0, the failing rank's exit code, or 128 + signal.
 *
 * Not for other schedulers: their adapters (scheduler-adapters/) come with
 * their own issues; until then they are refused here with exit status 2.
 */
#include "launcher/agent.h"
#include "launcher/cli.h"
#include "launcher/coordinator.h"
#include "launcher/jobspec.h"
#include "launcher/run_dir.h"

#include "comm/error.h"
#include "comm/log.h"
#include "worker/trace.h"

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct launch_opts {
    const char *job_path;
    const char *log_dir;
    const char *ranks;
    double grace_s;
    double start_mono; /* the summary's times count from here */
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
            "  --grace-period SECS   between SIGTERM and SIGKILL when stopping ranks (default %g)\n"
            "  --trace[=STEPS]       trainer jobs without a trace: window: a Chrome trace per rank of\n"
            "                        these steps (default 10-20), see docs/observability.md\n"
            "  --quiet               only dtrain's warnings and errors (rank output still shows)\n"
            "  --verbose             also dtrain's debug messages\n"
            "  -h, --help            show this help\n\n"
            "Ctrl-C (SIGINT) or SIGTERM stops every process of the job within the grace period;\n"
            "a second Ctrl-C kills them at once.  See docs/launch.md for the rank environment.\n",
            DT_AGENT_DEFAULT_GRACE_S);
}

static int parse_seconds(const char *s, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || v <= 0 || v > 3600 || (*end && strcmp(end, "s") != 0))
        return -1;
    *out = v;
    return 0;
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
        } else if (strcmp(a, "--ranks") == 0 && has_value) {
            o->ranks = argv[++i];
        } else if (strcmp(a, "--log-dir") == 0 && has_value) {
            o->log_dir = argv[++i];
        } else if (strcmp(a, "--grace-period") == 0 && has_value) {
            if (parse_seconds(argv[++i], &o->grace_s) < 0)
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

/* nproc_per_node: gpu — the GPUs this process may use, as CUDA would count them. */
static int count_gpus(void)
{
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    if (cvd) {
        int n = 0;
        for (const char *p = cvd; *p; p++)
            if (*p != ',' && (p == cvd || p[-1] == ','))
                n++;
        return n;
    }
    DIR *d = opendir("/dev");
    if (!d)
        return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (strncmp(de->d_name, "nvidia", 6) == 0 && de->d_name[6] >= '0' && de->d_name[6] <= '9')
            n++;
    closedir(d);
    return n;
}

/* The generated table of subcommands (main.c). */
extern const struct dt_cli_command *const dt_cli_commands[];

static bool has_command(const char *name)
{
    for (size_t i = 0; dt_cli_commands[i]; i++)
        if (strcmp(dt_cli_commands[i]->name, name) == 0)
            return true;
    return false;
}

/* The spec names a program that is not there: say so now, not four times
 * over from four ranks, and not after a restart loop. */
static int check_program(const char *prog)
{
    if (strchr(prog, '/'))
        return access(prog, X_OK) == 0 ? 0 : -1;
    const char *path = getenv("PATH");
    if (!path)
        path = "/usr/local/bin:/usr/bin:/bin";
    char buf[PATH_MAX];
    for (const char *p = path; *p;) {
        const char *colon = strchr(p, ':');
        size_t n = colon ? (size_t)(colon - p) : strlen(p);
        snprintf(buf, sizeof buf, "%.*s/%s", (int)n, n ? p : ".", prog);
        if (access(buf, X_OK) == 0)
            return 0;
        p += n + (colon ? 1 : 0);
    }
    return -1;
}

static void say_environment_defaults(const struct dt_job *job, int nproc)
{
    bool omp = getenv("OMP_NUM_THREADS") != NULL;
    for (int i = 0; i < job->n_env; i++) {
        if (strcmp(job->env[i].name, "OMP_NUM_THREADS") == 0)
            omp = true;
        if (dt_agent_env_is_reserved(job->env[i].name))
            dt_log_warn("%s: env: %s is set by dtrain for each rank; the value in the spec is ignored",
                        job->path, job->env[i].name);
    }
    if (!omp && nproc > 1)
        dt_log_info("OMP_NUM_THREADS is not set: each rank gets OMP_NUM_THREADS=1, as under torchrun "
                    "(set it under env: to change that)");
}

static void print_outcome(const struct dt_agent_config *cfg, const struct dt_agent_result *res)
{
    char tmp[32], attempts[48] = "";
    if (res->n_attempts > 1)
        snprintf(attempts, sizeof attempts, " (%d attempts)", res->n_attempts);
    if (res->status == DT_AGENT_SUCCEEDED)
        dt_log_info("job %s succeeded in %.2f s%s; logs and summary.json in %s", cfg->job->name, res->wall_s,
                    attempts, cfg->run_dir);
    else if (res->status == DT_AGENT_INTERRUPTED)
        dt_log_warn("job %s interrupted by %s after %.2f s; logs and summary.json in %s", cfg->job->name,
                    dt_agent_signal_name(res->interrupt_signal, tmp, sizeof tmp), res->wall_s, cfg->run_dir);
    else
        dt_log_error("job %s failed with exit status %d after %.2f s%s; logs and summary.json in %s",
                     cfg->job->name, res->exit_status, res->wall_s, attempts, cfg->run_dir);
}

/* Everything that must be settled before a coordinator or a process starts;
 * a problem here is the user's to fix, so it exits 2. */
static int prepare(const struct launch_opts *o, const struct dt_job *job, int *nproc, unsigned char **show)
{
    if (job->scheduler != DT_SCHED_LOCAL) {
        dt_error_set(
            DT_EUNSUPPORTED,
            "%s: scheduler: %s is not built into this version of dtrain (%s); only scheduler: local is",
            job->path, dt_scheduler_name(job->scheduler), dt_version);
        return 2;
    }
    if (job->nodes != 1) {
        dt_error_set(DT_EUNSUPPORTED,
                     "%s: nodes: %d with scheduler: local; a local job runs on this one machine "
                     "(nodes: 1)",
                     job->path, job->nodes);
        return 2;
    }
    *nproc = job->nproc_per_node;
    if (*nproc == DT_NPROC_GPU) {
        *nproc = count_gpus();
        if (*nproc == 0) {
            dt_error_set(DT_EINVAL,
                         "%s: nproc_per_node: gpu, but this machine shows no GPU "
                         "(no /dev/nvidia<N>, or CUDA_VISIBLE_DEVICES is empty)",
                         job->path);
            return 2;
        }
    }
    if (!job->command && !has_command("worker")) {
        dt_error_set(DT_EUNSUPPORTED,
                     "%s: trainer: this dtrain (%s) has no bundled trainer yet (`dtrain worker`); "
                     "use command: to run a program",
                     job->path, dt_version);
        return 2;
    }
    if (job->command && check_program(job->command[0]) != 0) {
        dt_error_set(DT_ENOTFOUND, "%s: command: '%s' %s", job->path, job->command[0],
                     strchr(job->command[0], '/') ? "does not exist or is not executable"
                                                  : "was not found on PATH");
        return 2;
    }
    if (o->ranks) {
        *show = malloc((size_t)*nproc);
        if (!*show || dt_agent_parse_ranks(o->ranks, *nproc, *show) < 0)
            return 2;
    }
    return 0;
}

static int start_coordinator(const struct dt_job *job, char token[65], struct dt_coord **coord,
                             struct dt_coord_config *used)
{
    bool auth = job->rendezvous.auth != DT_AUTH_NONE;
    if (auth) {
        int rc = dt_coord_make_token(token);
        if (rc < 0)
            return rc;
    }
    /* Loopback only: every rank of a local job is on this machine. */
    struct dt_coord_config cc = {
        .bind_host = "127.0.0.1", .port = job->rendezvous.port, .token = auth ? token : NULL};
    *used = cc;
    int rc = dt_coord_start(&cc, coord);
    if (rc < 0)
        return dt_error_prefix("cannot start the coordinator on port %d", job->rendezvous.port);
    if (!auth)
        dt_log_warn(
            "rendezvous.auth is none: the coordinator on 127.0.0.1:%d serves any local client without "
            "a job token (what PyTorch scripts need)",
            dt_coord_port(*coord));
    return 0;
}

/* The coordinator as the agent's hooks see it: replaced at each restart. */
struct coord_slot {
    struct dt_coord *coord;
    struct dt_coord_config cc;
};

/* The watchdog's view of the heartbeats: the coordinator runs in this process,
 * on the same CLOCK_MONOTONIC as the agent. */
static int coord_heartbeat(void *ctx, int rank, int64_t *step, double *age_s)
{
    double when;
    int rc = dt_coord_heartbeat(((struct coord_slot *)ctx)->coord, rank, step, &when);
    if (rc == 0)
        *age_s = dt_agent_now() - when;
    return rc;
}

/* A fresh coordinator on the same port for each restart (agent.h: new_round). */
static int coord_new_round(void *ctx, int attempt)
{
    struct coord_slot *slot = ctx;
    slot->cc.port = dt_coord_port(slot->coord);
    dt_coord_stop(slot->coord);
    slot->coord = NULL;
    int rc = dt_coord_start(&slot->cc, &slot->coord);
    if (rc < 0)
        return dt_error_prefix("attempt %d: cannot start a fresh coordinator on port %d", attempt, slot->cc.port);
    return 0;
}

static int run_local(const struct launch_opts *o, const struct dt_job *job)
{
    int nproc = 0;
    unsigned char *show = NULL;
    int status = prepare(o, job, &nproc, &show);
    if (status != 0) {
        fprintf(stderr, "dtrain launch: %s\n", dt_error_last());
        free(show);
        return status;
    }
    char self[PATH_MAX] = "dtrain";
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0)
        self[n] = 0;
    const char *worker_argv[] = {self, "worker", job->path, NULL};
    char run_id[DT_RUN_ID_MAX], run_dir[PATH_MAX], token[65] = "";
    struct dt_coord *coord = NULL;
    const char *log_dir = o->log_dir ? o->log_dir : job->log_dir ? job->log_dir : "runs";
    /* The coordinator first: a busy fixed port must not leave an empty run directory. */
    struct coord_slot slot = {0};
    int rc = start_coordinator(job, token, &coord, &slot.cc);
    slot.coord = coord;
    if (rc == 0) {
        rc = dt_run_dir_create(log_dir, job->name, run_id, sizeof run_id, run_dir, sizeof run_dir);
        if (rc < 0)
            dt_coord_stop(coord);
    }
    if (rc < 0) {
        free(show);
        fprintf(stderr, "dtrain launch: %s\n", dt_error_last());
        return 1;
    }
    struct dt_agent_config cfg = {
        .job = job,
        .argv = job->command ? (const char *const *)job->command : worker_argv,
        .node_rank = 0,
        .nnodes = 1,
        .nproc = nproc,
        .run_id = run_id,
        .run_dir = run_dir,
        .master_addr = "127.0.0.1",
        .master_port = dt_coord_port(coord),
        .token = token[0] ? token : NULL,
        .grace_s = o->grace_s,
        .console_stdout = show,
        .start_mono = o->start_mono,
        .progress = job->trainer && dt_log_get_level() <= DT_LOG_INFO,
        .heartbeat = coord_heartbeat,
        .heartbeat_ctx = &slot,
        .new_round = coord_new_round,
        .new_round_ctx = &slot,
    };
    dt_log_info("job %s: %d rank%s of '%s', coordinator 127.0.0.1:%d, run %s", job->name, nproc,
                nproc == 1 ? "" : "s", cfg.argv[0], cfg.master_port, run_dir);
    say_environment_defaults(job, nproc);
    struct dt_agent_result res;
    rc = dt_agent_run(&cfg, &res);
    dt_coord_stop(slot.coord);
    if (rc < 0)
        dt_log_error("%s", dt_error_last());
    char summary[PATH_MAX + 16];
    snprintf(summary, sizeof summary, "%s/summary.json", run_dir);
    if (dt_agent_write_summary(&cfg, &res, summary) < 0)
        dt_log_error("%s", dt_error_last());
    print_outcome(&cfg, &res);
    status = res.exit_status;
    dt_agent_result_free(&res);
    free(show);
    return status;
}

static int run(int argc, char **argv)
{
    struct launch_opts o = {.start_mono = dt_agent_now()};
    int rc = parse_args(argc, argv, &o);
    if (rc != 0)
        return rc;
    struct dt_job *job = NULL;
    if (dt_job_load(o.job_path, &job) < 0) {
        fprintf(stderr, "dtrain launch: %s\n", dt_error_last());
        return 2;
    }
    int status = run_local(&o, job);
    dt_job_free(job);
    return status;
}

const struct dt_cli_command dt_cli_launch = {
    .name = "launch",
    .summary = "run a job (scheduler: local runs it on this machine)",
    .run = run,
    .usage = usage,
};
