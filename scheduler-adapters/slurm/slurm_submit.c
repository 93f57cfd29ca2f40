/* slurm_submit.c - `dtrain launch job.yaml` with scheduler: slurm: sbatch,
 * then follow the job to its end through Slurm's client commands.
 *
 * The plan.  The job's sbatch script, for the launcher to write into the
 * log directory; the job token; and `sbatch --parsable` to run with the
 * token, the dtrain binary (DTRAIN), the log directory (DTRAIN_LOG_DIR) and --grace-period
 * (DTRAIN_GRACE_PERIOD, which the script hands to each agent) and with
 * --resume the run id to continue (DTRAIN_SLURM_RUN_ID, slurm.h) in sbatch's
 * environment, which Slurm passes to the batch script and srun to every
 * agent (sbatch's default --export=ALL): the token is never on a command
 * line.  The job's --output/--error files go to the log directory.  The
 * script carries the spec's text, which the job writes into its run
 * directory and runs (slurm_render.c), so the job runs what was submitted.
 *
 * Slurm's commands (sbatch, scontrol, sacct, scancel) run as helpers
 * (base/proc.h): output captured, stdin /dev/null, killed when they do not
 * finish in time (a slurmctld that does not answer must not hang `dtrain
 * launch`).  `scontrol show job -o ID` prints one line of Key=Value fields
 * (while the job is known to slurmctld, MinJobAge after it ends); `sacct -n
 * -X -P -o State,ExitCode,NodeList -j ID` prints "STATE|N:S|nodes" where
 * accounting is configured.  ExitCode=N:S is the batch script's exit code N,
 * or the signal S that ended it; the launcher exits with N, or 128 + S.
 *
 * Follow (the plan's finish, once sbatch has said the job's id).  Every
 * 0.25 s the job's --output and --error files are read from where the last
 * read stopped and their complete lines copied to the console
 * (stdout lines "[rank N] ..." of ranks not asked for with --ranks are left
 * out); every poll interval (0.25 s for the first 10 s, then 1 s: slurmctld
 * serves everyone) `scontrol show job` (or sacct once slurmctld forgot the
 * job) says its state, printed when it changes, with the node list.  The
 * output files are on a file system the submit host shares with the batch
 * host, as Slurm's own output files always are where users read them.
 * Ctrl-C (or SIGTERM, SIGHUP) runs `scancel` and keeps following until the
 * job has ended, so its last lines still show; a second one stops waiting.
 *
 * Not for the agents' side (slurm.c) or the script's text (slurm_render.c);
 * not for rank processes (only the agent forks those).
 */
#include "scheduler-adapters/slurm/slurm.h"
#include "base/args.h"
#include "base/clock.h"
#include "base/error.h"
#include "base/fs.h"
#include "base/json.h"
#include "base/lines.h"
#include "base/log.h"
#include "base/proc.h"
#include "base/run_dir.h"
#include "scheduler-adapters/run_record.h"
#include "spec/jobspec_yaml.h"
#include "spec/placement.h"
#include "spec/token.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* --- Slurm's client commands --------------------------------------------- */

static void copy_out(char *to, size_t size, const char *from)
{
    if (size > 0)
        snprintf(to, size, "%s", from ? from : "");
}

/* A helper that could not run or did not answer: the sentence for it. */
static int cmd_failed(const char *prog, int rc, double timeout_s)
{
    if (rc == DT_ETIMEDOUT)
        return dt_error_set(DT_ETIMEDOUT, "%s did not answer within %g s (is slurmctld up?)", prog,
                            timeout_s);
    if (rc == DT_ENOTFOUND)
        return dt_error_set(DT_ENOTFOUND,
                            "%s was not found on PATH: `dtrain launch` of a scheduler: slurm job "
                            "runs where Slurm's client commands are installed (Debian: slurm-client)",
                            prog);
    return rc;
}

int dt_slurm_cmd(char *const argv[], char *const envp[], double timeout_s, char *out, size_t out_size,
                 char *err, size_t err_size)
{
    struct dt_proc_run r = {
        .argv = argv, .envp = envp, .io = {DT_PROC_CAPTURE, DT_PROC_CAPTURE}, .timeout_s = timeout_s};
    int rc = dt_proc_run(&r);
    copy_out(out, out_size, r.captured[0]);
    copy_out(err, err_size, r.captured[1]);
    free(r.captured[0]);
    free(r.captured[1]);
    return rc < 0 ? cmd_failed(argv[0], rc, timeout_s) : rc;
}

/* The value of " key=" (or key= at the start) up to the next space. */
static int field(const char *text, const char *key, char *out, size_t size)
{
    size_t k = strlen(key);
    for (const char *p = text; (p = strstr(p, key)) != NULL; p += k) {
        if (p != text && p[-1] != ' ' && p[-1] != '\n')
            continue;
        if (p[k] != '=')
            continue;
        const char *v = p + k + 1;
        size_t n = strcspn(v, " \n");
        if (n >= size)
            n = size - 1;
        memcpy(out, v, n);
        out[n] = 0;
        return 0;
    }
    return -1;
}

/* "N:S" -> N, or 128 + S when a signal ended it. */
static int exit_status(const char *v)
{
    char *end;
    long n = strtol(v, &end, 10);
    if (end == v || *end != ':')
        return -1;
    long s = strtol(end + 1, NULL, 10);
    if (n == 0 && s > 0 && s < 128)
        return 128 + (int)s;
    return n >= 0 && n < 256 ? (int)n : -1;
}

static void parse_sacct(const char *text, struct dt_slurm_job_info *info)
{
    /* STATE|N:S|nodes; "CANCELLED by 0" carries its cause after a space */
    char line[1200];
    snprintf(line, sizeof line, "%s", text);
    line[strcspn(line, "\n")] = 0;
    char *bar1 = strchr(line, '|'), *bar2 = bar1 ? strchr(bar1 + 1, '|') : NULL;
    if (!bar1 || !bar2)
        return;
    *bar1 = *bar2 = 0;
    size_t n = strcspn(line, " ");
    if (n >= sizeof info->state)
        n = sizeof info->state - 1;
    memcpy(info->state, line, n);
    info->state[n] = 0;
    info->exit_status = exit_status(bar1 + 1);
    snprintf(info->nodes, sizeof info->nodes, "%s", bar2 + 1);
}

void dt_slurm_parse_job_info(const char *text, struct dt_slurm_job_info *info)
{
    char v[1024];
    if (!strstr(text, "JobState=")) {
        parse_sacct(text, info);
        return;
    }
    field(text, "JobState", info->state, sizeof info->state);
    field(text, "Reason", info->reason, sizeof info->reason);
    if (field(text, "NodeList", v, sizeof v) == 0 && strcmp(v, "(null)") != 0)
        snprintf(info->nodes, sizeof info->nodes, "%s", v);
    if (field(text, "ExitCode", v, sizeof v) == 0)
        info->exit_status = exit_status(v);
    if (field(text, "Restarts", v, sizeof v) == 0)
        info->restarts = atoi(v);
}

bool dt_slurm_state_final(const char *state)
{
    static const char *const final[] = {"COMPLETED",     "FAILED",       "CANCELLED", "TIMEOUT",
                                        "NODE_FAIL",     "PREEMPTED",    "BOOT_FAIL", "DEADLINE",
                                        "OUT_OF_MEMORY", "SPECIAL_EXIT", "REVOKED",   NULL};
    for (int i = 0; final[i]; i++)
        if (strcmp(state, final[i]) == 0)
            return true;
    return false;
}

/* --- following a submitted job ------------------------------------------- */

/* A submitted job followed until it ends: state changes, its output files
 * streamed to the console (stdout lines of ranks not in show are left out;
 * NULL shows all), Ctrl-C cancels it. */
struct follow {
    const char *job_id;
    const char *name;
    const char *out_path, *err_path; /* the job's --output and --error files */
    const char *run_dir;             /* where the agents write logs and summary.json */
    const unsigned char *show;       /* per global rank, or NULL */
    int world;                       /* entries of show */
    double start_mono;
};

#define TICK_S 0.25
#define FAST_POLL_S 10.0 /* poll the state every tick this long, then every second */
#define LOST_S 60.0      /* Slurm has not known the job this long: give up */
#define CMD_TIMEOUT_S 30.0

static volatile sig_atomic_t got_signal, n_signals;

static void on_signal(int sig)
{
    got_signal = sig;
    n_signals++;
}

struct stream {
    const char *path;
    int fd;
    FILE *to;
    bool filter;
    const struct follow *f;
    struct dt_lines lb;
    bool mid_line; /* the last piece shown did not end its line: the next one goes on with it */
    bool showing;  /* the line being shown passed the rank filter */
};

/* A "[rank N] " line of a rank not asked for is left out. */
static bool shown(const struct follow *f, const char *line, size_t len)
{
    if (!f->show || len < 8 || strncmp(line, "[rank ", 6) != 0)
        return true;
    char *end;
    long r = strtol(line + 6, &end, 10);
    if (end == line + 6 || *end != ']' || r < 0 || r >= f->world)
        return true;
    return f->show[r] != 0;
}

/* Pieces as the agents wrote them: a line to its newline, a progress bar's
 * redraw to its \r (passed on, so the terminal redraws it too), and what came
 * of a line that stalls a tick (shown now, its rest when it comes).  The
 * first piece of a line decides for all of it: only that one carries the
 * agent's "[rank N] " prefix. */
static void on_line(void *ctx, const char *line, size_t len, bool complete)
{
    struct stream *s = ctx;
    (void)complete;
    if (!s->mid_line)
        s->showing = !s->filter || shown(s->f, line, len);
    char end = s->lb.end;
    s->mid_line = end == DT_LINES_OPEN || end == DT_LINES_CUT;
    if (!s->showing)
        return;
    fwrite(line, 1, len, s->to);
    if (end == '\r' || end == '\n' || end == DT_LINES_CUT)
        fputc(end == '\r' ? '\r' : '\n', s->to);
    fflush(s->to);
}

static void pump(struct stream *s)
{
    /* Not there until the job starts; a FIFO or link under its name is
     * refused each time (base/fs.h), never waited on. */
    if (s->fd < 0 && (s->fd = dt_fs_open_read(AT_FDCWD, s->path, DT_FS_NOFOLLOW, NULL)) < 0) {
        dt_error_clear();
        return;
    }
    char buf[16384];
    ssize_t n;
    bool got = false;
    while ((n = read(s->fd, buf, sizeof buf)) > 0) {
        dt_lines_feed(&s->lb, buf, (size_t)n, on_line, s);
        got = true;
    }
    /* Nothing new for a tick (TICK_S): a line left open (a prompt, a bar
     * before its first \r) is shown as far as it came. */
    if (!got)
        dt_lines_take(&s->lb, on_line, s);
}

static int query(const char *id, struct dt_slurm_job_info *info)
{
    char out[8192], err[1024];
    if (!dt_run_record_slurm_id_ok(id))
        return -1;
    /* After "--": the id is never taken for an option, whatever a record said. */
    char *sc[] = {"scontrol", "show", "job", "-o", "--", (char *)id, NULL};
    int rc = dt_slurm_cmd(sc, NULL, CMD_TIMEOUT_S, out, sizeof out, err, sizeof err);
    if (rc == 0 && strstr(out, "JobState=")) {
        dt_slurm_parse_job_info(out, info);
        return 0;
    }
    char *sa[] = {"sacct", "-n", "-X", "-P", "-o", "State,ExitCode,NodeList", "-j", (char *)id, NULL};
    rc = dt_slurm_cmd(sa, NULL, CMD_TIMEOUT_S, out, sizeof out, err, sizeof err);
    if (rc == 0 && strchr(out, '|')) {
        dt_slurm_parse_job_info(out, info);
        return 0;
    }
    return -1;
}

static void cancel(const char *id, bool kill_now)
{
    char out[256], err[512];
    if (!dt_run_record_slurm_id_ok(id)) {
        dt_log_error("scancel: '%s' is not a Slurm job id; nothing cancelled", id);
        return;
    }
    char *argv[] = {"scancel", kill_now ? "--signal=KILL" : "--quiet", "--", (char *)id, NULL};
    int rc = dt_slurm_cmd(argv, NULL, CMD_TIMEOUT_S, out, sizeof out, err, sizeof err);
    if (rc != 0)
        dt_log_error("scancel %s failed: %s", id, rc < 0 ? dt_error_last() : err);
}

/* Pending reasons that no amount of waiting cures (squeue(1), JOB REASON CODES). */
static bool hopeless(const char *reason)
{
    static const char *const never[] = {"PartitionConfig",
                                        "PartitionNodeLimit",
                                        "PartitionTimeLimit",
                                        "BadConstraints",
                                        "InvalidAccount",
                                        "InvalidQOS",
                                        NULL};
    for (int i = 0; never[i]; i++)
        if (strcmp(reason, never[i]) == 0)
            return true;
    return false;
}

static void say_state(const struct follow *f, const struct dt_slurm_job_info *now,
                      const struct dt_slurm_job_info *before)
{
    if (now->restarts > before->restarts)
        dt_log_warn("Slurm job %s was requeued (restart %d); its output continues below", f->job_id,
                    now->restarts);
    if (strcmp(now->state, before->state) == 0 && strcmp(now->reason, before->reason) == 0)
        return;
    if (strcmp(now->state, "PENDING") == 0 && hopeless(now->reason))
        dt_log_warn("Slurm job %s is pending (%s): it cannot start as the partition is configured (too many "
                    "nodes, a time limit or constraint it cannot meet, an account or QOS it does not know); "
                    "Ctrl-C cancels it",
                    f->job_id, now->reason);
    else if (strcmp(now->state, "PENDING") == 0)
        dt_log_info("Slurm job %s is pending (%s)", f->job_id,
                    now->reason[0] && strcmp(now->reason, "None") ? now->reason : "queued");
    else if (strcmp(now->state, "RUNNING") == 0)
        dt_log_info("Slurm job %s is running on %s", f->job_id, now->nodes[0] ? now->nodes : "its nodes");
    else if (!dt_slurm_state_final(now->state))
        dt_log_info("Slurm job %s is %s", f->job_id, now->state);
}

/* The launcher's exit status for a job that ended in `info`. */
static int outcome(const struct follow *f, const struct dt_slurm_job_info *info, int cancelled_by)
{
    double wall = dt_clock_s() - f->start_mono;
    int st = info->exit_status;
    if (strcmp(info->state, "COMPLETED") == 0 && st <= 0) {
        /* Node 0's agent said so already, in the output followed above: one line per job. */
        char summary[PATH_MAX + 160];
        snprintf(summary, sizeof summary, "%s/summary.json", f->run_dir);
        dt_log(access(summary, R_OK) == 0 ? DT_LOG_DEBUG : DT_LOG_INFO,
               "job %s (Slurm job %s) succeeded in %.2f s on %s; logs and summary.json in %s", f->name,
               f->job_id, wall, info->nodes, f->run_dir);
        return 0;
    }
    if (cancelled_by) {
        char tmp[32];
        dt_log_warn("job %s (Slurm job %s) cancelled on %s after %.2f s; logs in %s", f->name, f->job_id,
                    dt_proc_signal_name(cancelled_by, tmp, sizeof tmp), wall, f->run_dir);
        return 128 + cancelled_by;
    }
    if (st <= 0)
        st = strcmp(info->state, "CANCELLED") == 0 ? 128 + SIGTERM : 1;
    dt_log_error(
        "job %s (Slurm job %s) ended %s with exit status %d after %.2f s; logs and summary.json in %s "
        "(batch output: %s, %s)",
        f->name, f->job_id, info->state, st, wall, f->run_dir, f->out_path, f->err_path);
    return st;
}

static void drain_all(struct stream s[2])
{
    for (int i = 0; i < 2; i++) {
        pump(&s[i]);
        dt_lines_flush(&s[i].lb, on_line, &s[i]);
    }
}

static void sleep_tick(void)
{
    struct timespec ts = {0, (long)(TICK_S * 1e9)};
    nanosleep(&ts, NULL); /* a signal cuts it short, which is what we want */
}

static int follow_loop(const struct follow *f, struct stream s[2])
{
    struct dt_slurm_job_info info = {.exit_status = -1}, last = {.exit_status = -1};
    double t0 = dt_clock_s(), next_poll = 0, known_at = t0;
    int cancelled_by = 0, handled = 0;
    for (;;) {
        if (n_signals > handled) {
            handled = n_signals;
            if (!cancelled_by) {
                cancelled_by = got_signal;
                dt_log_warn(
                    "cancelling Slurm job %s (scancel); waiting for it to end (again to stop waiting)",
                    f->job_id);
                cancel(f->job_id, false);
            } else {
                dt_log_warn("not waiting for Slurm job %s any longer", f->job_id);
                cancel(f->job_id, true);
                drain_all(s);
                return 128 + cancelled_by;
            }
        }
        pump(&s[0]);
        pump(&s[1]);
        double now = dt_clock_s();
        if (now >= next_poll) {
            next_poll = now + (now - t0 < FAST_POLL_S ? TICK_S : 1.0);
            if (query(f->job_id, &info) == 0) {
                known_at = now;
                say_state(f, &info, &last);
                last = info;
                if (dt_slurm_state_final(info.state)) {
                    drain_all(s);
                    return outcome(f, &info, cancelled_by);
                }
            } else if (now - known_at > LOST_S) {
                drain_all(s);
                dt_log_error(
                    "Slurm does not know job %s any more (scontrol and sacct); its output is in %s and %s",
                    f->job_id, f->out_path, f->err_path);
                return 1;
            }
        }
        sleep_tick();
    }
}

static int follow_job(const struct follow *f)
{
    struct stream s[2] = {{.path = f->out_path, .fd = -1, .to = stdout, .filter = true, .f = f},
                          {.path = f->err_path, .fd = -1, .to = stderr, .filter = false, .f = f}};
    for (int i = 0; i < 2; i++) {
        if (dt_lines_init(&s[i].lb, DT_LINES_MAX) < 0)
            return 1;
        s[i].lb.cr = true;
    }
    struct sigaction sa = {.sa_handler = on_signal}, old[3];
    static const int sigs[3] = {SIGINT, SIGTERM, SIGHUP};
    got_signal = n_signals = 0;
    for (int i = 0; i < 3; i++)
        sigaction(sigs[i], &sa, &old[i]);
    int status = follow_loop(f, s);
    for (int i = 0; i < 3; i++)
        sigaction(sigs[i], &old[i], NULL);
    for (int i = 0; i < 2; i++) {
        if (s[i].fd >= 0)
            close(s[i].fd);
        dt_lines_free(&s[i].lb);
    }
    return status;
}

/* --- dtrain status and cancel -------------------------------------------- */

int dt_slurm_status(const struct dt_run_record *rec, struct dt_adapter_state *out)
{
    memset(out, 0, sizeof *out);
    struct dt_slurm_job_info info = {.exit_status = -1};
    if (query(rec->job_id, &info) < 0)
        return dt_error_set(DT_ENOTFOUND, "Slurm knows no job %s (scontrol, sacct)", rec->job_id);
    out->known = true;
    out->active = !dt_slurm_state_final(info.state);
    snprintf(out->state, sizeof out->state, "%s", info.state);
    snprintf(out->where, sizeof out->where, "Slurm job %.100s%s%.300s", rec->job_id,
             info.nodes[0] ? " on " : "", info.nodes);
    return 0;
}

/* scancel, then the job's state until it is final (slurmctld signals the
 * batch step and every srun step; the agents stop their ranks as for Ctrl-C). */
int dt_slurm_cancel(const struct dt_run_record *rec, double wait_s)
{
    if (!dt_run_record_slurm_id_ok(rec->job_id))
        return dt_error_set(DT_EINVAL, "'%s' is not a Slurm job id: nothing cancelled", rec->job_id);
    cancel(rec->job_id, false);
    struct dt_slurm_job_info info = {.exit_status = -1};
    for (double t0 = dt_clock_s(); dt_clock_s() - t0 < wait_s; sleep_tick())
        if (query(rec->job_id, &info) == 0 && dt_slurm_state_final(info.state))
            return 0;
    return dt_error_set(DT_ETIMEDOUT, "Slurm job %s is still %s %g s after scancel", rec->job_id,
                        info.state[0] ? info.state : "known", wait_s);
}

/* --- the launch's plan: the script, sbatch, then follow ------------------- */

#define SBATCH_TIMEOUT_S 60.0

/* What the plan keeps from sbatch's start to the job's end. */
struct submission {
    const struct dt_job *job;
    const char *resume_id; /* --resume's run, or NULL */
    double start_mono;
    char log_dir[PATH_MAX], job_abs[PATH_MAX], script[PATH_MAX + 128];
    char out_pat[PATH_MAX + 128], err_pat[PATH_MAX + 128], out_arg[PATH_MAX + 144], err_arg[PATH_MAX + 144];
    char *argv[6];
    char **envp;
    char *text; /* the script */
    size_t len;
    unsigned char *show; /* --ranks, per global rank, or NULL */
    int world;           /* entries of show */
};

/* The log directory, absolute: the batch script runs in the submit directory, but say what we mean. */
static int log_dir_abs(const struct dt_job *job, const struct dt_adapter_launch *o, char *out, size_t size)
{
    const char *d = o->log_dir ? o->log_dir : job->log_dir;
    int rc = dt_fs_mkdir_p(d, 0755, "log directory");
    if (rc < 0)
        return rc;
    if (!realpath(d, out) || strlen(out) >= size)
        return dt_error_set_errno(DT_EIO, errno, "cannot find the absolute path of the log directory %s", d);
    return 0;
}

/* The script's text, with the spec as it is now in it.  The spec is read
 * once: the script's #SBATCH lines and the spec it carries come from the same bytes. */
static int render_script(struct submission *sub)
{
    char *spec = NULL;
    size_t len = 0;
    struct dt_job *submitted = NULL;
    FILE *m = open_memstream(&sub->text, &sub->len);
    if (!m)
        return dt_error_set(DT_ENOMEM, "out of memory");
    int rc = dt_json_read_file(sub->job->path, DT_YAML_MAX_BYTES, &spec, &len);
    if (rc == 0 && strlen(spec) != len)
        rc = dt_error_set(DT_EINVAL, "%s: a NUL byte in the job spec", sub->job->path);
    if (rc == 0)
        rc = dt_job_load_string(spec, len, sub->job->path, &submitted);
    if (rc == 0)
        rc = dt_slurm_render_script(submitted, sub->job_abs, spec, m);
    dt_job_free(submitted);
    free(spec);
    if (fclose(m) != 0 && rc == 0)
        rc = dt_error_set(DT_ENOMEM, "out of memory");
    return rc;
}

/* Our environment with DTRAIN, DTRAIN_LOG_DIR, DTRAIN_JOB_TOKEN, DTRAIN_GRACE_PERIOD,
 * DTRAIN_SLURM_RUN_ID (--resume's run, else none: never one inherited) and (so the
 * agents are as quiet or talkative as the launcher) DTRAIN_LOG replaced. */
static char **sbatch_env(const char *dtrain, const char *log_dir, const char *token, double grace_s,
                         const char *run_id)
{
    static const char *const levels[] = {"debug", "info", "warn", "error", "error"};
    static char v[6][PATH_MAX + 32];
    snprintf(v[0], sizeof v[0], "DTRAIN=%s", dtrain);
    snprintf(v[1], sizeof v[1], "DTRAIN_LOG_DIR=%s", log_dir);
    snprintf(v[2], sizeof v[2], "DTRAIN_LOG=%s", levels[dt_log_get_level()]);
    snprintf(v[3], sizeof v[3], "DTRAIN_JOB_TOKEN%s%s", token ? "=" : "", token ? token : "");
    if (grace_s > 0)
        snprintf(v[4], sizeof v[4], "DTRAIN_GRACE_PERIOD=%g", grace_s);
    else
        snprintf(v[4], sizeof v[4], "DTRAIN_GRACE_PERIOD");
    snprintf(v[5], sizeof v[5], DT_SLURM_RUN_ID_ENV "%s%s", run_id ? "=" : "", run_id ? run_id : "");
    char *set[] = {v[0], v[1], v[2], v[3], v[4], v[5], NULL};
    char **env = dt_adapter_env_with(environ, set);
    memset(v[3], 0, sizeof v[3]);
    return env;
}

static int prepare(const struct dt_job *job, const struct dt_adapter_launch *o, struct submission *sub)
{
    if (!realpath(job->path, sub->job_abs))
        return dt_error_set_errno(DT_EIO, errno, "cannot find the absolute path of %s", job->path);
    int rc = log_dir_abs(job, o, sub->log_dir, sizeof sub->log_dir);
    if (rc < 0)
        return rc;
    struct dt_placement pl;
    dt_placement_resolve(job, DT_PLACE_SCHEDULER, &pl);     /* fails only on a host's GPUs */
    sub->world = pl.world > 0 ? pl.world : job->nodes * 64; /* --ranks' bound when only the nodes know */
    if (o->ranks) {
        if (!(sub->show = malloc((size_t)sub->world)))
            return dt_error_set(DT_ENOMEM, "out of memory");
        if ((rc = dt_args_ranks(o->ranks, sub->world, sub->show)) < 0)
            return rc;
    }
    snprintf(sub->out_pat, sizeof sub->out_pat, "%s/%s-%%j.out", sub->log_dir, job->name);
    snprintf(sub->err_pat, sizeof sub->err_pat, "%s/%s-%%j.err", sub->log_dir, job->name);
    /* Renamed <name>-<job id>.sbatch once sbatch has said the id. */
    snprintf(sub->script, sizeof sub->script, "%s/%s-submit-%ld.sbatch", sub->log_dir, job->name,
             (long)getpid());
    return render_script(sub);
}

/* sbatch --parsable said "<id>" or "<id>;<cluster>". */
static int sbatch_id(const struct dt_adapter_ran *ran, char *id, size_t size)
{
    if (ran->status < 0)
        return cmd_failed("sbatch", ran->status, SBATCH_TIMEOUT_S);
    char out[512], err[2048];
    copy_out(out, sizeof out, ran->out);
    copy_out(err, sizeof err, ran->err);
    err[strcspn(err, "\n")] = 0;
    if (ran->status != 0)
        return dt_error_set(DT_EIO, "sbatch refused the job (exit status %d): %s", ran->status,
                            err[0] ? err : "(no message)");
    out[strcspn(out, ";\n")] = 0;
    if (!out[0] || strspn(out, "0123456789_") != strlen(out) || strlen(out) >= size)
        return dt_error_set(DT_EPROTO, "sbatch --parsable printed '%s', not a job id", out);
    snprintf(id, size, "%s", out);
    return 0;
}

/* After sbatch: the script named by the job, the launch's record, then the job followed to its end. */
static int submitted(void *ctx, const struct dt_adapter_ran *ran)
{
    struct submission *sub = ctx;
    const struct dt_job *job = sub->job;
    char id[64];
    int rc = sbatch_id(ran, id, sizeof id);
    if (rc < 0) {
        fprintf(stderr, "dtrain launch: %s (script: %s)\n", dt_error_last(), sub->script);
        return rc == DT_ENOTFOUND ? 2 : 1;
    }
    char script[PATH_MAX + 160], out[PATH_MAX + 160], err[PATH_MAX + 160], run_dir[PATH_MAX + 160];
    snprintf(script, sizeof script, "%s/%s-%s.sbatch", sub->log_dir, job->name, id);
    if (rename(sub->script, script) != 0)
        snprintf(script, sizeof script, "%s", sub->script);
    snprintf(out, sizeof out, "%s/%s-%s.out", sub->log_dir, job->name, id);
    snprintf(err, sizeof err, "%s/%s-%s.err", sub->log_dir, job->name, id);
    /* The run directory: this job's, or with --resume the run's it continues,
     * whose launch.json then names this job (status and cancel ask about it). */
    const char *run_id = sub->resume_id ? sub->resume_id : id;
    if (dt_run_dir_path(sub->log_dir, job->name, run_id, run_dir, sizeof run_dir) < 0)
        snprintf(run_dir, sizeof run_dir, "%s", sub->log_dir);
    struct dt_run_record rec; /* dtrain status/logs/cancel find the job by it */
    if (dt_run_record_begin(job, sub->log_dir, run_id, id, &rec) < 0)
        dt_log_warn("no launch record for Slurm job %s (dtrain status cannot name it): %s", id,
                    dt_error_last());
    dt_log_info("job %s submitted as Slurm job %s (%d node%s; script %s); Ctrl-C cancels it", job->name, id,
                job->nodes, job->nodes == 1 ? "" : "s", script);
    struct follow f = {.job_id = id,
                       .name = job->name,
                       .out_path = out,
                       .err_path = err,
                       .run_dir = run_dir,
                       .show = sub->show,
                       .world = sub->world,
                       .start_mono = sub->start_mono};
    return follow_job(&f);
}

static void submission_free(void *ctx)
{
    struct submission *sub = ctx;
    dt_adapter_env_free(sub->envp);
    free(sub->text);
    free(sub->show);
    free(sub);
}

int dt_slurm_dry_run(const struct dt_job *job, const struct dt_adapter_launch *o, FILE *out)
{
    char *spec = NULL, abs[PATH_MAX];
    size_t len = 0;
    int rc = 0;
    if (job->derived) { /* as the launch hands it on: dt_job_print's copy */
        FILE *m = open_memstream(&spec, &len);
        if (!m)
            return dt_error_set(DT_ENOMEM, "out of memory");
        dt_job_print(job, m);
        rc = fclose(m) ? dt_error_set(DT_ENOMEM, "out of memory") : 0;
    } else {
        rc = dt_json_read_file(job->path, DT_YAML_MAX_BYTES, &spec, &len);
    }
    if (!realpath(job->path, abs))
        snprintf(abs, sizeof abs, "%s", job->path);
    const char *log_dir = o->log_dir ? o->log_dir : job->log_dir;
    fputs("# sbatch --parsable --output=", out);
    dt_adapter_put_comment(out, log_dir);
    fprintf(out, "/%s-%%j.out --error=", job->name);
    dt_adapter_put_comment(out, log_dir);
    fprintf(out, "/%s-%%j.err %s-submit-<pid>.sbatch\n"
                 "# (DTRAIN, DTRAIN_LOG_DIR, DTRAIN_LOG, DTRAIN_GRACE_PERIOD%s%s in its environment):\n",
            job->name, job->name, o->run_id ? ", " DT_SLURM_RUN_ID_ENV : "",
            job->rendezvous.auth == DT_AUTH_NONE ? "" : ", DTRAIN_JOB_TOKEN (made at launch)");
    if (rc == 0)
        rc = dt_slurm_render_script(job, abs, spec, out);
    free(spec);
    return rc;
}

int dt_slurm_plan(const struct dt_job *job, const struct dt_adapter_launch *o, struct dt_adapter_plan *out)
{
    struct submission *sub = calloc(1, sizeof *sub);
    if (!sub)
        return dt_error_set(DT_ENOMEM, "out of memory");
    *sub = (struct submission){.job = job, .resume_id = o->run_id, .start_mono = o->start_mono};
    out->ctx = sub;
    out->release = submission_free;
    int rc = prepare(job, o, sub);
    char self[PATH_MAX], token[65] = "";
    dt_fs_self_path(self, sizeof self);
    if (rc == 0 && job->rendezvous.auth != DT_AUTH_NONE)
        rc = dt_token_make(token);
    if (rc == 0 && !(sub->envp = sbatch_env(o->dtrain_path ? o->dtrain_path : self, sub->log_dir,
                                            token[0] ? token : NULL, o->grace_s, o->run_id)))
        rc = DT_ENOMEM;
    memset(token, 0, sizeof token);
    if (rc < 0)
        return rc;
    snprintf(sub->out_arg, sizeof sub->out_arg, "--output=%s", sub->out_pat);
    snprintf(sub->err_arg, sizeof sub->err_arg, "--error=%s", sub->err_pat);
    char *argv[] = {"sbatch", "--parsable", sub->out_arg, sub->err_arg, sub->script, NULL};
    memcpy(sub->argv, argv, sizeof argv);
    out->files[out->n_files++] =
        (struct dt_adapter_file){.path = sub->script, .text = sub->text, .len = sub->len, .mode = 0600};
    out->argv = sub->argv;
    out->envp = sub->envp;
    out->io[0] = out->io[1] = DT_PLAN_CAPTURE;
    out->timeout_s = SBATCH_TIMEOUT_S;
    out->finish = submitted;
    return 0;
}
