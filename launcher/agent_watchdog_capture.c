/* agent_watchdog_capture.c - what the agent writes about a hung rank before it kills the group.
 *
 * attempt_<k>/hang_rank_<n>.txt: the verdict, then for every rank of the node
 * (the hung one first: a hang is often a peer waiting on it) the state, wchan
 * and kernel stack of each process in its group and each of their threads,
 * and the last lines of its stdout and stderr logs.  /proc/<pid>/stack needs
 * CAP_SYS_ADMIN (root) on most kernels, and wchan shows 0 when kallsyms are
 * hidden; the file says so instead of leaving a silent gap.  A py-spy or
 * gdb stack needs the user's tools: the report names the pids to aim them at.
 *
 * Not for the verdict (agent_watchdog.c) or for stopping anything.
 */
#include "launcher/agent_internal.h"

#include "base/error.h"
#include "base/proc.h"
#include "spec/jobspec.h"
#include "base/clock.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
    struct dt_agent_proc *p = &a->procs[i];
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

int dt_agent_watchdog_capture(struct dt_agent *a, int hung, const char *why, char *path, size_t size)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/attempt_%d", a->cfg->run_dir, a->attempt);
    snprintf(path, size, "%s/hang_rank_%d.txt", dir, a->procs[hung].rank);
    FILE *f = fopen(path, "we");
    if (!f) {
        int rc = dt_error_set_errno(DT_EIO, errno, "cannot write the hang report %s", path);
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
