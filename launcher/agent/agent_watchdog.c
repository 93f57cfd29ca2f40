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
 * What the watchdog cannot see: a command: rank that is wedged but neither
 * stopped nor in D (a deadlock in a futex, a lost collective) looks like a
 * rank waiting for its peers; its own communicator's timeout must end it.
 * A trainer rank whose compute thread is stuck freezes its peers at the same
 * step in the all-reduce, so no step is "behind": the communicator's
 * deadline (rendezvous.timeout) ends that round and names the stalled peer.
 *
 * On a verdict the capture writes attempt_<k>/hang_rank_<n>.txt before any
 * signal is sent, so the states and stacks are those of the hang: the
 * verdict, then for every rank of the node (the hung one first: a hang is
 * often a peer waiting on it) the state, wchan and kernel stack of each
 * process in its group and each of their threads, and the last lines of its
 * stdout and stderr logs.  /proc/<pid>/stack needs CAP_SYS_ADMIN (root) on
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
        if ((st == 'T' || st == 't' || (st == 'D' && !l->heartbeats)) && in_state >= l->hb_timeout) {
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
            snprintf(why, size, "silent for %.1f s: no heartbeat (heartbeat_timeout %g s); last step %lld",
                     w[i].hb_age_s, l->hb_timeout, (long long)w[i].step);
            return i;
        }
        if (!w[i].has_hb && now - w[i].spawn_s >= l->first_hb_s) {
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
    return a->cfg->heartbeat && a->cfg->job->trainer;
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
        if (a->cfg->heartbeat && !err && (l.heartbeats ? a->procs[i].running : i == 0))
            err = read_heartbeat(a, i, now, attempt_start, l.heartbeats);
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
        fprintf(f, "  heartbeat: step %lld, %.1f s ago\n", (long long)w->step, w->hb_age_s);
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
    fprintf(f, "User-space stacks need a tool such as py-spy or gdb; dtrain kills the group right after "
               "writing this.\n");
    write_rank(f, a, hung, dir, true);
    for (int i = 0; i < a->nproc; i++)
        if (i != hung)
            write_rank(f, a, i, dir, false);
    int rc = ferror(f) ? dt_error_set(DT_EIO, "writing the hang report %s failed", path) : 0;
    if (fclose(f) != 0 && rc == 0)
        rc = dt_error_set_errno(DT_EIO, errno, "cannot write the hang report %s", path);
    return rc;
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
