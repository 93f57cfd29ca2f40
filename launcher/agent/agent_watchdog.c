/* agent_watchdog.c - looking at ranks from outside: the agent's hang
 * detection (which rank is stuck, and what it looked like), and whether the
 * kernel's out-of-memory killer was at work.
 *
 * Every DT_AGENT__WATCH_PERIOD_S (0.5 s) the supervision loop asks the watchdog to
 * look at the running ranks.  Two sources, as torchrun has neither:
 *  - /proc: the state of every process in the rank's process group (a rank
 *    is a session leader, so its pgrp is its pid and a `sh -c` wrapper's
 *    children are seen too).  T (stopped by SIGSTOP or a debugger) for
 *    heartbeat_timeout means hung for any job; D (uninterruptible sleep:
 *    a hung file system or device) too, for jobs without heartbeats, when
 *    the group used no CPU time meanwhile (I/O-bound work passes through D).
 *  - heartbeats (trainer: jobs; worker/heartbeat.h): silence for
 *    heartbeat_timeout, none since the start for rendezvous.timeout +
 *    heartbeat_timeout, or a step below another rank's that has not moved
 *    for heartbeat_timeout.
 *  - progress rows (command: jobs that write them, agent_progress.c): the
 *    same rules, except that a rank which has written none is not judged
 *    by them (its script may not report at all) and a pause row stops the
 *    judging until its next row.
 * What the watchdog cannot see: a command: rank without progress rows that
 * is wedged but neither stopped nor in D (a deadlock in a futex, a lost
 * collective) looks like a rank waiting for its peers; its own
 * communicator's timeout must end it.
 * A trainer rank whose compute thread is stuck freezes its peers at the same
 * step in the all-reduce, so no step is "behind": the communicator's
 * deadline (rendezvous.timeout) ends that round and names the stalled peer.
 *
 * On a verdict the capture writes attempt_<k>/hang_rank_<n>.txt before any
 * signal is sent, so the states and stacks are those of the hang: the
 * verdict, then for every rank of the node (the hung one first: a hang is
 * often a peer waiting on it) the state, wchan and kernel stack of each
 * process in its group and each of their threads, and the last lines of its
 * stdout and stderr logs.  Then, for Python ranks, where each of their
 * threads is: every process that catches DT_AGENT_TRACEBACK_SIGNAL (Python's
 * faulthandler.register, docs/progress.md) and whose parent does not (a
 * DataLoader worker inherits its parent's handler) gets the signal;
 * faulthandler writes every thread's stack from its signal handler, without
 * the GIL, so a thread stuck in C code still answers.  The agent waits up to
 * TRACEBACK_WAIT_S for the dumps, then appends them to the report.  /proc/<pid>/stack needs CAP_SYS_ADMIN (root) on
 * most kernels, and wchan shows 0 when kallsyms are hidden; the file says so
 * instead of leaving a silent gap.  A py-spy or gdb stack needs the user's
 * tools: the report names the pids to aim them at.
 *
 * The OOM killer.  A rank killed by SIGKILL that dtrain did not kill was
 * most often killed by it, but a person should not have to guess or read
 * dmesg: the memory cgroup counts OOM kills (cgroup v2 memory.events, v1
 * memory.oom_control, both "oom_kill N").  The agent reads the counter when
 * an attempt starts and again when a rank dies of SIGKILL.
 *
 * Not for acting on the verdict: agent_supervise.c stops the group and
 * restarts it as it does after any failure.  Not for limiting memory or
 * moving ranks between cgroups.
 */
#include "launcher/agent/agent_internal.h"
#include "base/clock.h"
#include "base/error.h"
#include "base/proc.h"
#include "base/run_dir.h"
#include "spec/jobspec.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* --- the rule and the look ----------------------------------------------- */

static const char *state_words(char s)
{
    switch (s) {
    case 'T':
        return "stopped: SIGSTOP, SIGTSTP or job control";
    case 't':
        return "stopped by a debugger (tracing stop)";
    case 'D':
        return "uninterruptible sleep: waiting on the kernel, e.g. a hung file system or device";
    case 'R':
        return "running";
    case 'S':
        return "sleeping";
    case 'Z':
        return "zombie";
    default:
        return "?";
    }
}

/* Stopped or in D: what /proc says, for any job. */
static int judge_state(const struct dt_agent_watch *w, int n, double now,
                       const struct dt_agent_watch_limits *l, char *why, size_t size)
{
    for (int i = 0; i < n; i++) {
        char st = w[i].state;
        double in_state = now - w[i].state_since_s;
        bool d_counts = !l->heartbeats || l->from_rows;
        if ((st == 'T' || st == 't' || (st == 'D' && d_counts)) && in_state >= l->hb_timeout) {
            snprintf(why, size, "in process state %c (%s) for %.1f s (heartbeat_timeout %g s)", st,
                     state_words(st), in_state, l->hb_timeout);
            return i;
        }
    }
    return -1;
}

/* Silence: no heartbeat for hb_timeout, or none at all since the start. */
static int judge_silence(const struct dt_agent_watch *w, int n, double now,
                         const struct dt_agent_watch_limits *l, char *why, size_t size)
{
    for (int i = 0; i < n; i++) {
        if (w[i].has_hb && w[i].hb_age_s >= l->hb_timeout) {
            snprintf(why, size, "silent for %.1f s: no %s (heartbeat_timeout %g s); last step %lld",
                     w[i].hb_age_s, l->from_rows ? "progress row" : "heartbeat", l->hb_timeout,
                     (long long)w[i].step);
            return i;
        }
        if (!w[i].has_hb && !l->from_rows && now - w[i].spawn_s >= l->first_hb_s) {
            snprintf(
                why, size,
                "without a heartbeat in the %.1f s since it started (rendezvous.timeout + heartbeat_timeout)",
                now - w[i].spawn_s);
            return i;
        }
    }
    return -1;
}

/* A step that stays below another rank's while it does not move. */
static int judge_stall(const struct dt_agent_watch *w, int n, double now,
                       const struct dt_agent_watch_limits *l, char *why, size_t size)
{
    int ahead = -1;
    for (int i = 0; i < n; i++)
        if (w[i].has_hb && (ahead < 0 || w[i].step > w[ahead].step))
            ahead = i;
    for (int i = 0; ahead >= 0 && i < n; i++) {
        if (!w[i].has_hb || w[i].step >= w[ahead].step || w[i].behind_since_s <= 0 ||
            now - w[i].behind_since_s < l->hb_timeout || now - w[i].step_since_s < l->hb_timeout)
            continue;
        snprintf(why, size,
                 "stuck at step %lld for %.1f s while rank %d reached step %lld (heartbeat_timeout %g s)",
                 (long long)w[i].step, now - w[i].step_since_s, l->first_rank + ahead,
                 (long long)w[ahead].step, l->hb_timeout);
        return i;
    }
    return -1;
}

int dt_agent_watch_judge(const struct dt_agent_watch *w, int n, double now,
                         const struct dt_agent_watch_limits *l, char *why, size_t size)
{
    int i = judge_state(w, n, now, l, why, size);
    if (i < 0 && l->heartbeats)
        i = judge_silence(w, n, now, l, why, size);
    if (i < 0 && l->heartbeats)
        i = judge_stall(w, n, now, l, why, size);
    return i;
}

/* T or t outrank D; anything else counts as nothing to report. */
static int badness(char s)
{
    return s == 'T' || s == 't' ? 2 : s == 'D' ? 1 : 0;
}

/* One pass over /proc: the worst state in each running rank's process group,
 * and the CPU time the group has used (clock ticks). */
static void scan_states(struct dt_agent *a, char *worst, long long *ticks)
{
    for (int i = 0; i < a->nproc; i++) {
        worst[i] = 0;
        ticks[i] = 0;
    }
    DIR *d = opendir("/proc");
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!isdigit((unsigned char)de->d_name[0]))
            continue;
        struct dt_proc_stat ps;
        if (dt_proc_stat_read(de->d_name, &ps) != 0)
            continue;
        for (int i = 0; i < a->nproc; i++) {
            if (!a->procs[i].running || a->procs[i].pid != ps.pgrp)
                continue;
            ticks[i] += ps.cpu_ticks;
            if (badness(ps.state) > badness(worst[i]))
                worst[i] = ps.state;
        }
    }
    closedir(d);
}

void dt_agent__watchdog_begin(struct dt_agent *a)
{
    double hbt = a->cfg->job->rendezvous.heartbeat_timeout_s;
    a->wd.next = hbt > 0 && !a->group ? dt_clock_s() + DT_AGENT__WATCH_PERIOD_S : 0;
    for (int i = 0; i < a->nproc; i++) {
        struct dt_agent_watch *w = &a->procs[i].watch;
        memset(w, 0, sizeof *w);
        w->spawn_s = a->t0 + a->res->attempts[a->attempt].ranks[i].spawn_s;
        w->step_since_s = w->spawn_s;
    }
}

static bool heartbeats(const struct dt_agent *a)
{
    return a->cfg->job->trainer ? a->cfg->heartbeat != NULL : a->rows != NULL;
}

/* A command rank's last progress row stands for its heartbeat. */
static void read_row(struct dt_agent *a, int i, double now)
{
    struct dt_agent_watch *w = &a->procs[i].watch;
    int64_t step;
    double last_s;
    if (dt_agent__rows_heartbeat(a, i, &step, &last_s) != 0) {
        w->has_hb = false; /* none yet, or paused */
        return;
    }
    if (!w->has_hb || step != w->step)
        w->step_since_s = now;
    w->has_hb = true;
    w->step = step;
    w->hb_age_s = now - last_s;
}

/* A heartbeat counts when it came during this attempt: older ones are the
 * previous round's, still in the coordinator's table.  Returns the source's
 * error other than "none yet" (the coordinator cannot be reached), or 0. */
static int read_heartbeat(struct dt_agent *a, int i, double now, double attempt_start, bool use)
{
    struct dt_agent_watch *w = &a->procs[i].watch;
    int64_t step;
    double age;
    int rc = a->cfg->heartbeat(a->cfg->heartbeat_ctx, a->procs[i].rank, &step, &age);
    if (rc != 0)
        return rc == DT_ENOTFOUND ? 0 : rc;
    if (!use || age >= now - attempt_start)
        return 0;
    if (!w->has_hb || step != w->step)
        w->step_since_s = now;
    w->has_hb = true;
    w->step = step;
    w->hb_age_s = age;
    return 0;
}

/* The coordinator is unreachable once its heartbeat source has failed for
 * rendezvous.timeout: the ranks' own clients give up after as long. */
static int coordinator_check(struct dt_agent *a, int err, double now, char *why, size_t size)
{
    if (err == 0) {
        a->wd.coord_down_since = 0;
        return -1;
    }
    if (a->wd.coord_down_since <= 0)
        a->wd.coord_down_since = now;
    double down = now - a->wd.coord_down_since, limit = a->cfg->job->rendezvous.timeout_s;
    if (down < limit)
        return -1;
    snprintf(why, size, "the coordinator %s:%d has not answered for %.1f s (rendezvous.timeout %g s): %s",
             a->cfg->master_addr, a->cfg->master_port, down, limit, dt_error_last());
    return DT_AGENT__COORD_LOST;
}

/* An exited rank must not look "ahead"; the others get behind_since_s. */
static void mark_behind(struct dt_agent *a, struct dt_agent_watch *w, double now)
{
    int64_t max = INT64_MIN;
    for (int i = 0; i < a->nproc; i++) {
        if (!a->procs[i].running)
            w[i].has_hb = false;
        if (w[i].has_hb && w[i].step > max)
            max = w[i].step;
    }
    for (int i = 0; i < a->nproc; i++) {
        struct dt_agent_watch *pw = &a->procs[i].watch;
        if (!w[i].has_hb || w[i].step >= max)
            pw->behind_since_s = 0;
        else if (pw->behind_since_s <= 0)
            pw->behind_since_s = now;
        w[i].behind_since_s = pw->behind_since_s;
    }
}

int dt_agent__watchdog_tick(struct dt_agent *a, char *why, size_t size)
{
    double now = dt_clock_s();
    if (a->wd.next <= 0 || now < a->wd.next)
        return -1;
    a->wd.next = now + DT_AGENT__WATCH_PERIOD_S;
    char worst[a->nproc];
    long long ticks[a->nproc];
    scan_states(a, worst, ticks);
    struct dt_agent_watch w[a->nproc];
    double attempt_start = a->t0 + a->res->attempts[a->attempt].start_s;
    const struct dt_rendezvous_spec *rv = &a->cfg->job->rendezvous;
    struct dt_agent_watch_limits l = {.hb_timeout = rv->heartbeat_timeout_s,
                                      .first_hb_s = rv->timeout_s + rv->heartbeat_timeout_s,
                                      .heartbeats = heartbeats(a),
                                      .from_rows = !a->cfg->job->trainer,
                                      .first_rank = a->procs[0].rank};
    int err = 0;
    for (int i = 0; i < a->nproc; i++) {
        struct dt_agent_watch *pw = &a->procs[i].watch;
        /* D counts only while the group makes no progress: I/O-bound work
         * passes through D all the time, and still uses some CPU. */
        if (worst[i] != pw->state || (worst[i] == 'D' && ticks[i] != a->procs[i].cpu_ticks))
            pw->state_since_s = now;
        a->procs[i].cpu_ticks = ticks[i];
        pw->state = worst[i];
        /* Command ranks send no heartbeat: one read still tells whether the coordinator answers. */
        bool trainer = a->cfg->job->trainer != NULL;
        if (a->cfg->heartbeat && !err && (trainer ? a->procs[i].running : i == 0))
            err = read_heartbeat(a, i, now, attempt_start, trainer);
        if (!trainer && a->rows && a->procs[i].running)
            read_row(a, i, now);
        w[i] = *pw;
        if (!a->procs[i].running) /* exited ones are the supervision loop's business */
            w[i] = (struct dt_agent_watch){.spawn_s = now, .step_since_s = now, .state_since_s = now};
    }
    if (coordinator_check(a, err, now, why, size) == DT_AGENT__COORD_LOST)
        return DT_AGENT__COORD_LOST;
    if (l.heartbeats)
        mark_behind(a, w, now);
    return dt_agent_watch_judge(w, a->nproc, now, &l, why, size);
}

/* --- the hang report ----------------------------------------------------- */

#define LOG_TAIL_BYTES 8192
#define LOG_TAIL_LINES 10

/* Reads a small /proc file into buf (NUL-terminated, trailing newline cut);
 * on failure buf holds the reason. */
static int read_small(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd < 0 ? -1 : read(fd, buf, size - 1);
    int err = errno;
    if (fd >= 0)
        close(fd);
    if (n < 0) {
        snprintf(buf, size, "(not readable: %s%s)", strerror(err),
                 err == EACCES || err == EPERM ? "; needs root or CAP_SYS_ADMIN" : "");
        return -1;
    }
    buf[n] = 0;
    while (n > 0 && buf[n - 1] == '\n')
        buf[--n] = 0;
    return 0;
}

static void write_task(FILE *f, const char *dir, const char *indent)
{
    char path[600], wchan[128], stack[4096];
    struct dt_proc_stat ps = {.state = '?', .comm = "?"};
    dt_proc_stat_read(dir + strlen("/proc/"), &ps);
    snprintf(path, sizeof path, "%s/wchan", dir);
    if (read_small(path, wchan, sizeof wchan) == 0 && (!wchan[0] || strcmp(wchan, "0") == 0))
        snprintf(wchan, sizeof wchan, "0 (kernel symbols hidden, or running)");
    fprintf(f, "%s%s [%s] state %c  wchan %s\n", indent, strrchr(dir, '/') + 1, ps.comm, ps.state, wchan);
    snprintf(path, sizeof path, "%s/stack", dir);
    read_small(path, stack, sizeof stack);
    for (char *line = stack; *line;) {
        size_t n = strcspn(line, "\n");
        fprintf(f, "%s    | %.*s\n", indent, (int)n, line);
        line += n + (line[n] == '\n');
    }
}

static void write_process(FILE *f, int pid)
{
    char dir[64], tasks[80];
    snprintf(dir, sizeof dir, "/proc/%d", pid);
    fprintf(f, "  process ");
    write_task(f, dir, "");
    snprintf(tasks, sizeof tasks, "%s/task", dir);
    DIR *d = opendir(tasks);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!isdigit((unsigned char)de->d_name[0]) || atoi(de->d_name) == pid)
            continue;
        char t[400];
        snprintf(t, sizeof t, "%s/%s", tasks, de->d_name);
        fprintf(f, "    thread ");
        write_task(f, t, "    ");
    }
    closedir(d);
}

/* Every process of the group led by `leader` (the rank and what it started). */
static void write_group(FILE *f, int leader)
{
    write_process(f, leader);
    DIR *d = opendir("/proc");
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!isdigit((unsigned char)de->d_name[0]) || atoi(de->d_name) == leader)
            continue;
        struct dt_proc_stat ps;
        if (dt_proc_stat_read(de->d_name, &ps) == 0 && ps.pgrp == leader)
            write_process(f, atoi(de->d_name));
    }
    closedir(d);
}

static void write_log_tail(FILE *f, const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fprintf(f, "  %s: (not readable: %s)\n", path, strerror(errno));
        return;
    }
    char buf[LOG_TAIL_BYTES + 1];
    off_t end = lseek(fd, 0, SEEK_END), from = end > LOG_TAIL_BYTES ? end - LOG_TAIL_BYTES : 0;
    ssize_t n = pread(fd, buf, LOG_TAIL_BYTES, from);
    close(fd);
    if (n <= 0) {
        fprintf(f, "  %s: (empty)\n", path);
        return;
    }
    buf[n] = 0;
    int lines = 0;
    char *start = buf + n;
    while (start > buf && lines <= LOG_TAIL_LINES)
        if (*--start == '\n' && start + 1 < buf + n)
            lines++;
    if (lines > LOG_TAIL_LINES)
        start++;
    fprintf(f, "  last lines of %s:\n", path);
    for (char *line = start; *line;) {
        size_t k = strcspn(line, "\n");
        fprintf(f, "    | %.*s\n", (int)k, line);
        line += k + (line[k] == '\n');
    }
}

static void write_rank(FILE *f, struct dt_agent *a, int i, const char *attempt_dir, bool hung)
{
    struct dt_agent__proc *p = &a->procs[i];
    const struct dt_agent_watch *w = &p->watch;
    fprintf(f, "\n== rank %d (local %d, pid %d)%s ==\n", p->rank, i, (int)p->pid, hung ? " - HUNG" : "");
    if (w->has_hb)
        fprintf(f, "  %s: step %lld, %.1f s ago\n", a->cfg->job->trainer ? "heartbeat" : "last progress row",
                (long long)w->step, w->hb_age_s);
    else if (a->cfg->heartbeat && a->cfg->job->trainer)
        fprintf(f, "  heartbeat: none in this attempt\n");
    if (!p->running) {
        fprintf(f, "  (exited)\n");
        return;
    }
    write_group(f, p->pid);
    char path[4400];
    snprintf(path, sizeof path, "%s/rank_%d.out", attempt_dir, p->rank);
    write_log_tail(f, path);
    snprintf(path, sizeof path, "%s/rank_%d.err", attempt_dir, p->rank);
    write_log_tail(f, path);
}

int dt_agent__watchdog_capture(struct dt_agent *a, int hung, const char *why, char *path, size_t size)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/attempt_%d", a->cfg->run_dir, a->attempt);
    snprintf(path, size, "%s/hang_rank_%d.txt", dir, a->procs[hung].rank);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, DT_RUN_DIR_FILE_MODE);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        int rc = dt_error_set_errno(DT_EIO, errno, "cannot write the hang report %s", path);
        if (fd >= 0)
            close(fd);
        path[0] = 0;
        return rc;
    }
    time_t now = time(NULL);
    struct tm tm;
    char when[32] = "";
    if (gmtime_r(&now, &tm))
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    fprintf(f, "dtrain watchdog: rank %d (pid %d) is hung: %s\n", a->procs[hung].rank,
            (int)a->procs[hung].pid, why);
    fprintf(f, "attempt %d, %.2f s after the start, %s\n", a->attempt, dt_clock_s() - a->t0, when);
    fprintf(f, "User-space stacks need a tool such as py-spy or gdb, except a Python rank's: where its threads "
               "were follows at the end when it registered faulthandler (docs/progress.md). dtrain kills the "
               "group right after writing this.\n");
    write_rank(f, a, hung, dir, true);
    for (int i = 0; i < a->nproc; i++)
        if (i != hung)
            write_rank(f, a, i, dir, false);
    int rc = ferror(f) ? dt_error_set(DT_EIO, "writing the hang report %s failed", path) : 0;
    if (fclose(f) != 0 && rc == 0)
        rc = dt_error_set_errno(DT_EIO, errno, "cannot write the hang report %s", path);
    return rc;
}

/* --- Python's tracebacks ------------------------------------------------- */

#define TRACEBACK_WAIT_S 2.0    /* for every dump to come */
#define TRACEBACK_QUIET_S 0.2   /* a dump that grew no more for this long is whole */
#define TRACEBACK_MAX_BYTES 65536
#define TRACEBACK_TARGETS 8     /* processes of one rank signalled at most */

/* Whether the process has a handler for sig (SigCgt in /proc/<pid>/status:
 * the kernel's mask of caught signals, bit sig - 1, in hex). */
static bool catches(int pid, int sig)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    FILE *f = fopen(path, "re");
    unsigned long long mask = 0;
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f))
        found = sscanf(line, "SigCgt: %llx", &mask) == 1;
    if (f)
        fclose(f);
    return found && (mask >> (sig - 1) & 1);
}

/* The processes of leader's group that catch sig while their parent does
 * not: the rank's Python, under a wrapper shell or not, without the
 * children that inherited its handler. */
static int traceback_targets(int leader, int sig, int *out, int max)
{
    int n = 0;
    DIR *d = opendir("/proc");
    for (struct dirent *de; d && n < max && (de = readdir(d)) != NULL;) {
        struct dt_proc_stat ps;
        if (!isdigit((unsigned char)de->d_name[0]) || dt_proc_stat_read(de->d_name, &ps) != 0 ||
            ps.pgrp != leader)
            continue;
        int pid = atoi(de->d_name);
        struct dt_proc_stat parent;
        char ppid[16];
        snprintf(ppid, sizeof ppid, "%d", (int)ps.ppid);
        bool parent_catches = dt_proc_stat_read(ppid, &parent) == 0 && parent.pgrp == leader &&
                              catches((int)ps.ppid, sig);
        if (catches(pid, sig) && !parent_catches)
            out[n++] = pid;
    }
    if (d)
        closedir(d);
    return n;
}

static off_t file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) ? st.st_size : 0;
}

/* Waits until every asked rank's file grew and then rested, or the time is up. */
static void wait_dumps(const char (*path)[4200], const off_t *before, const bool *asked, int n)
{
    off_t last[n];
    double quiet_since[n], start = dt_clock_s();
    for (int i = 0; i < n; i++) {
        last[i] = before[i];
        quiet_since[i] = 0;
    }
    for (;;) {
        double now = dt_clock_s();
        bool all = true;
        for (int i = 0; i < n; i++) {
            if (!asked[i])
                continue;
            off_t size = file_size(path[i]);
            if (size != last[i])
                quiet_since[i] = now;
            last[i] = size;
            all &= size > before[i] && now - quiet_since[i] >= TRACEBACK_QUIET_S;
        }
        if (all || now - start >= TRACEBACK_WAIT_S)
            return;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* path's bytes from `from` (at most TRACEBACK_MAX_BYTES), NUL-terminated, malloc'd; NULL when none. */
static char *read_from(const char *path, off_t from)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    char *buf = fd >= 0 ? malloc(TRACEBACK_MAX_BYTES + 1) : NULL;
    ssize_t n = buf ? pread(fd, buf, TRACEBACK_MAX_BYTES, from) : -1;
    if (fd >= 0)
        close(fd);
    if (n <= 0) {
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    return buf;
}

/* The start of the dump, whole lines, in out. */
static void keep_start(const char *dump, char *out, size_t size)
{
    size_t n = strlen(dump);
    if (n >= size) {
        n = size - 1;
        while (n > 0 && dump[n - 1] != '\n')
            n--;
    }
    memcpy(out, dump, n);
    out[n] = 0;
    while (n > 0 && out[n - 1] == '\n')
        out[--n] = 0;
}

void dt_agent__watchdog_tracebacks(struct dt_agent *a, int hung, const char *report, char *out, size_t size)
{
    const int sig = DT_AGENT_TRACEBACK_SIGNAL;
    char(*path)[4200] = calloc((size_t)a->nproc, sizeof *path);
    off_t *before = calloc((size_t)a->nproc, sizeof *before);
    bool *asked = calloc((size_t)a->nproc, sizeof *asked), any = false;
    out[0] = 0;
    for (int i = 0; path && before && asked && i < a->nproc; i++) {
        int pids[TRACEBACK_TARGETS];
        int n = a->procs[i].running ? traceback_targets(a->procs[i].pid, sig, pids, TRACEBACK_TARGETS) : 0;
        dt_agent_traceback_path(a->cfg->run_dir, a->attempt, a->procs[i].rank, path[i], sizeof path[i]);
        before[i] = file_size(path[i]);
        for (int k = 0; k < n; k++)
            asked[i] |= kill(pids[k], sig) == 0;
        any |= asked[i];
    }
    FILE *f = any ? fopen(report, "ae") : NULL;
    if (f) {
        wait_dumps((const char(*)[4200])path, before, asked, a->nproc);
        for (int j = 0; j < a->nproc; j++) {
            int i = j == 0 ? hung : j == hung ? 0 : j; /* the hung rank first, as above */
            if (!asked[i])
                continue;
            char *dump = read_from(path[i], before[i]);
            fprintf(f, "\n== rank %d: where its Python threads were (faulthandler, on %s; %s) ==\n%s",
                    a->procs[i].rank, DT_AGENT_TRACEBACK_SIGNAL_NAME, path[i],
                    dump ? dump : "(no traceback came within 2 s: the process may be stopped)\n");
            if (dump && i == hung)
                keep_start(dump, out, size);
            free(dump);
        }
        fclose(f);
    }
    free(path);
    free(before);
    free(asked);
}

/* --- the OOM killer ------------------------------------------------------ */

int dt_agent_oom_parse(const char *text, long long *count)
{
    const char *p = text;
    while (p && *p) {
        if (strncmp(p, "oom_kill ", 9) == 0) {
            char *end;
            long long v = strtoll(p + 9, &end, 10);
            if (end == p + 9 || v < 0)
                break;
            *count = v;
            return 0;
        }
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    return dt_error_set(DT_ENOTFOUND, "no oom_kill counter in the memory cgroup's events");
}

static int read_counter(const char *path, long long *count)
{
    char buf[1024];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return DT_ENOTFOUND;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return DT_ENOTFOUND;
    buf[n] = 0;
    return dt_agent_oom_parse(buf, count);
}

int dt_agent__oom_count(long long *count)
{
    char line[1024], path[1400];
    FILE *f = fopen("/proc/self/cgroup", "re");
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c2 = 0;
        const char *controllers = c1 + 1, *cg = c2 + 1;
        if (strcmp(line, "0") == 0 && !*controllers)
            snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.events", cg);
        else if (strstr(controllers, "memory"))
            snprintf(path, sizeof path, "/sys/fs/cgroup/memory%s/memory.oom_control", cg);
        else
            continue;
        if (read_counter(path, count) == 0) {
            fclose(f);
            return 0;
        }
    }
    if (f)
        fclose(f);
    /* In a container the cgroup paths above are the host's; its own root is mounted instead. */
    if (read_counter("/sys/fs/cgroup/memory.events", count) == 0 ||
        read_counter("/sys/fs/cgroup/memory/memory.oom_control", count) == 0)
        return 0;
    return dt_error_set(DT_ENOTFOUND, "this machine's memory cgroup does not count OOM kills");
}
