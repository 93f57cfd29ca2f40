/* slurm_follow.c - `dtrain launch` after sbatch: follow the job to its end.
 *
 * Every 0.25 s the job's --output and --error files are read from where the
 * last read stopped and their complete lines copied to the console (stdout
 * lines "[rank N] ..." of ranks not asked for with --ranks are left out);
 * every poll interval (0.25 s for the first 10 s, then 1 s: slurmctld serves
 * everyone) `scontrol show job` (or sacct once slurmctld forgot the job) says
 * its state, printed when it changes, with the node list.  The output files
 * are on a file system the submit host shares with the batch host, as Slurm's
 * own output files always are where users read them.
 *
 * Ctrl-C (or SIGTERM, SIGHUP) runs `scancel` and keeps following until the
 * job has ended, so its last lines still show; a second one stops waiting.
 *
 * Not for submitting (slurm_submit.c).
 */
#include "scheduler-adapters/slurm.h"

#include "base/error.h"
#include "base/log.h"
#include "base/lines.h"
#include "base/proc.h"
#include "base/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
    const struct dt_slurm_follow *f;
    struct dt_lines lb;
};

/* A "[rank N] " line of a rank not asked for is left out. */
static bool shown(const struct dt_slurm_follow *f, const char *line, size_t len)
{
    if (!f->show || len < 8 || strncmp(line, "[rank ", 6) != 0)
        return true;
    char *end;
    long r = strtol(line + 6, &end, 10);
    if (end == line + 6 || *end != ']' || r < 0 || r >= f->world)
        return true;
    return f->show[r] != 0;
}

static void on_line(void *ctx, const char *line, size_t len, bool complete)
{
    struct stream *s = ctx;
    if (s->filter && !shown(s->f, line, len))
        return;
    fwrite(line, 1, len, s->to);
    if (complete || len)
        fputc('\n', s->to);
    fflush(s->to);
}

static void pump(struct stream *s)
{
    if (s->fd < 0 && (s->fd = open(s->path, O_RDONLY | O_CLOEXEC)) < 0)
        return; /* not there until the job starts */
    char buf[16384];
    ssize_t n;
    while ((n = read(s->fd, buf, sizeof buf)) > 0)
        dt_lines_feed(&s->lb, buf, (size_t)n, on_line, s);
}

static int query(const char *id, struct dt_slurm_job_info *info)
{
    char out[8192], err[1024];
    char *sc[] = {"scontrol", "show", "job", "-o", (char *)id, NULL};
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
    char *argv[] = {"scancel", kill_now ? "--signal=KILL" : "--quiet", (char *)id, NULL};
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

static void say_state(const struct dt_slurm_follow *f, const struct dt_slurm_job_info *now,
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
static int outcome(const struct dt_slurm_follow *f, const struct dt_slurm_job_info *info, int cancelled_by)
{
    double wall = dt_clock_s() - f->start_mono;
    int st = info->exit_status;
    if (strcmp(info->state, "COMPLETED") == 0 && st <= 0) {
        dt_log_info("job %s (Slurm job %s) succeeded in %.2f s on %s; logs and summary.json in %s", f->name,
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

static int follow_loop(const struct dt_slurm_follow *f, struct stream s[2])
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

int dt_slurm_follow(const struct dt_slurm_follow *f)
{
    struct stream s[2] = {{f->out_path, -1, stdout, true, f, {0}}, {f->err_path, -1, stderr, false, f, {0}}};
    for (int i = 0; i < 2; i++)
        if (dt_lines_init(&s[i].lb, DT_LINES_MAX) < 0)
            return 1;
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
