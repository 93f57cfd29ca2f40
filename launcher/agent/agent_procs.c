/* agent_procs.c - the agent's processes and their output: starting a rank
 * (or a group's one process) through its guard, signalling what the ranks
 * started, and moving their output from pipes to log files and the console.
 *
 * Each rank runs in a session and process group of its own, so one
 * kill(-pgid) reaches the rank and everything it started that stayed in its
 * group (DataLoader workers, `sleep &` in a shell script).  A session rather
 * than only a group, as torchrun does (start_new_session): with the kernel's
 * autogroup scheduling each session gets a fair share of the CPU, and ranks
 * crowded into the launcher's one session were measured 2.5x slower to import
 * torch on a busy machine.  Whatever leaves its group and outlives its parent
 * is re-parented to the rank's guard (agent_guard.c; or to the agent, a
 * child subreaper too, once the guard is gone) and found through /proc.  The
 * guard covers the last case, the agent itself killed with SIGKILL: it
 * outlives the agent and kills everything of its rank.
 *
 * Output.  Log files get the bytes exactly as the rank wrote them.  The
 * console gets each piece of a line as agent_console.c says (prefixed
 * "[rank N]", lines of different ranks never mixed; the streams the filter,
 * console.redirects and console.tee leave); a piece ends at \n or \r, or
 * where a line stalls for DT_AGENT__PARTIAL_S; the last stderr lines of each
 * rank are kept for the failure report.  A group's process
 * (mpirun) carries every rank's lines on its two pipes: the group's route
 * says whose each is, and it goes to that rank's log file (a line at a time:
 * the tags are gone) and the console the same way; the process's own lines
 * go to its log and stderr as they are.  Buffers are allocated once per run:
 * nothing is allocated per line.
 *
 * Not for the failure policy or the poll loop (agent_supervise.c).
 */
#include "launcher/agent/agent_internal.h"
#include "base/clock.h"
#include "base/error.h"
#include "base/fs.h"
#include "base/log.h"
#include "base/proc.h"
#include "base/run_dir.h"
#include "spec/jobspec.h"
#include "spec/placement.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* --- starting and signalling --------------------------------------------- */

/* A run directory is used again by a requeued Slurm job (its run id is the
 * job id) or a repeated --run-id: the log is appended to, after a line that
 * says where this run begins, so the earlier run's output is kept. */
static int open_log(const char *dir, int rank, const char *ext)
{
    char path[4300];
    snprintf(path, sizeof path, "%s/rank_%d.%s", dir, rank, ext);
    /* Read and written through one descriptor: its last byte is read from
     * the file that was opened, never from whatever the name holds by then.
     * O_NONBLOCK, then a regular file or nothing: a FIFO or a device planted
     * at the name would stall the agent's one loop at the first full write. */
    int fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, DT_RUN_DIR_FILE_MODE);
    if (fd < 0)
        return dt_error_set_errno(DT_EIO, errno, "cannot create the log file %s", path);
    struct stat st;
    int err = fstat(fd, &st) != 0 ? errno : 0;
    if (err || !S_ISREG(st.st_mode)) {
        close(fd);
        return err ? dt_error_set_errno(DT_EIO, err, "cannot read what the log file %s is", path)
                   : dt_error_set(DT_EIO, "the log file %s: not a regular file (%s); remove it", path,
                                  dt_fs_kind(st.st_mode));
    }
    char last = '\n';
    if (st.st_size > 0) {
        if (pread(fd, &last, 1, st.st_size - 1) != 1)
            last = '\n';
        dprintf(fd, "%s%s\n", last == '\n' ? "" : "\n", DT_AGENT_LOG_RERUN_MARK);
    }
    return fd;
}

/* "rank 3", or the group's program: for messages. */
static const char *proc_name(const struct dt_agent *a, const struct dt_agent__proc *p, char *buf, size_t size)
{
    if (p->rank < 0)
        return a->cfg->argv[0];
    snprintf(buf, size, "rank %d", p->rank);
    return buf;
}

static int pipe_error(const struct dt_agent *a, const struct dt_agent__proc *p, int e)
{
    char tmp[32];
    const char *what = proc_name(a, p, tmp, sizeof tmp);
    if (e == EMFILE || e == ENFILE)
        return dt_error_set_errno(DT_EIO, e,
                                  "cannot create a pipe for %s (%d ranks need about %d file "
                                  "descriptors: raise `ulimit -n`)",
                                  what, a->nranks, a->nranks * 5 + 64);
    return dt_error_set_errno(DT_EIO, e, "cannot create a pipe for %s", what);
}

int dt_agent__open_logs(struct dt_agent__sink *k, const char *attempt_dir)
{
    static const char *const ext[2] = {"out", "err"};
    for (int i = 0; i < 2; i++) {
        k->log_fd[i] = open_log(attempt_dir, k->rank, ext[i]);
        if (k->log_fd[i] < 0) {
            int rc = k->log_fd[i];
            k->log_fd[i] = -1;
            return rc;
        }
        k->continuing[i] = false;
    }
    memset(&k->tail, 0, sizeof k->tail);
    return 0;
}

static void stream_reset(struct dt_agent__stream *s, int fd)
{
    s->fd = fd;
    s->lb.len = 0;
}

static void close_pair(const int fds[2])
{
    for (int i = 0; i < 2; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

/* The guard writes the rank's pid first (agent_guard.c); nothing means it
 * could not start the rank, and it has exited. */
static pid_t read_rank_pid(int fd)
{
    pid_t rank = 0;
    ssize_t n;
    do
        n = read(fd, &rank, sizeof rank);
    while (n < 0 && errno == EINTR);
    return n == (ssize_t)sizeof rank && rank > 0 ? rank : -1;
}

int dt_agent__spawn(struct dt_agent *a, struct dt_agent__proc *p)
{
    /* O_CLOEXEC: a rank must not inherit the write end of another rank's
     * pipe, or that pipe would never reach end of file. */
    int po[2] = {-1, -1}, pe[2] = {-1, -1}, ps[2] = {-1, -1}; /* stdout, stderr, the guard's status */
    if (pipe2(po, O_CLOEXEC) != 0 || pipe2(pe, O_CLOEXEC) != 0 || pipe2(ps, O_CLOEXEC) != 0) {
        int e = errno;
        close_pair(po);
        close_pair(pe);
        return pipe_error(a, p, e);
    }
    /* Until the rank has reset the agent's handlers, a signal for it (the
     * group's SIGTERM) would run the agent's handler in the child and write
     * into the agent's own signal pipe: keep everything blocked across fork;
     * the guard keeps it so, the rank unblocks after the reset and then gets
     * what is pending. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t parent = getpid();
    pid_t guard = fork();
    if (guard == 0)
        dt_agent__guard_run(a, p, parent, po[1], pe[1], ps[1]);
    int fork_errno = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    close(po[1]);
    close(pe[1]);
    close(ps[1]);
    char tmp[32];
    pid_t rank = guard > 0 ? read_rank_pid(ps[0]) : -1;
    if (rank < 0) {
        close(po[0]);
        close(pe[0]);
        close(ps[0]);
        if (guard < 0)
            return dt_error_set_errno(DT_EIO, fork_errno, "cannot start %s",
                                      proc_name(a, p, tmp, sizeof tmp));
        while (waitpid(guard, NULL, 0) < 0 && errno == EINTR) {
        }
        return dt_error_set(DT_EIO, "cannot start %s: its guard process could not fork it",
                            proc_name(a, p, tmp, sizeof tmp));
    }
    fcntl(po[0], F_SETFL, O_NONBLOCK);
    fcntl(pe[0], F_SETFL, O_NONBLOCK);
    fcntl(ps[0], F_SETFL, O_NONBLOCK);
    stream_reset(&p->out, po[0]);
    stream_reset(&p->err, pe[0]);
    p->status_fd = ps[0];
    p->guard = guard;
    p->pid = rank;
    p->running = true;
    return 0;
}

int dt_agent__guard_status(struct dt_agent__proc *p, int *wstatus)
{
    if (p->status_fd < 0)
        return 0;
    int st;
    ssize_t n;
    do
        n = read(p->status_fd, &st, sizeof st);
    while (n < 0 && errno == EINTR);
    if (n == (ssize_t)sizeof st) {
        *wstatus = st;
        return 1;
    }
    if (n < 0 && errno == EAGAIN)
        return 0;
    close(p->status_fd); /* end of file: the guard is gone */
    p->status_fd = -1;
    return 0;
}

/* A group's process stops the job itself when it gets SIGTERM (mpirun passes
 * it on to every rank it started, on every host): it gets that once, and
 * only SIGKILL goes to its whole process group. */
static void signal_group_process(struct dt_agent *a, int sig)
{
    struct dt_agent__proc *p = &a->procs[0];
    if (p->pid <= 0)
        return;
    if (sig == SIGKILL) {
        if (kill(-p->pid, SIGKILL) != 0 && errno == ESRCH && p->running)
            kill(p->pid, SIGKILL);
    } else if (p->running && !a->group_stopped) {
        a->group_stopped = true;
        kill(p->pid, SIGTERM);
    }
}

void dt_agent__signal_groups(struct dt_agent *a, int sig)
{
    if (a->group) {
        signal_group_process(a, sig);
        return;
    }
    for (int i = 0; i < a->nproc; i++) {
        struct dt_agent__proc *p = &a->procs[i];
        if (p->pid <= 0)
            continue;
        if (p->running)
            a->res->attempts[a->attempt].ranks[p->index].stopped_by_agent = true;
        /* The group outlives its leader while anything it started is in it;
         * ESRCH means it is empty, or the rank has not reached setsid() yet
         * (the parent cannot make the session for it): then signal the rank,
         * which holds the signal blocked until it is ready for it. */
        if (kill(-p->pid, sig) != 0 && errno == ESRCH && p->running)
            kill(p->pid, sig);
    }
}

/* A running rank or a guard: not something the ranks left behind. */
static bool is_ours(const struct dt_agent *a, pid_t pid)
{
    for (int i = 0; i < a->nproc; i++)
        if ((a->procs[i].running && a->procs[i].pid == pid) ||
            (a->procs[i].guard > 0 && a->procs[i].guard == pid))
            return true;
    return false;
}

/* What a rank leaves is re-parented to its guard (or to the agent, the
 * subreaper above, once the guard is gone). */
static bool adopted(const struct dt_agent *a, pid_t ppid)
{
    if (ppid == getpid())
        return true;
    for (int i = 0; i < a->nproc; i++)
        if (a->procs[i].guard > 0 && a->procs[i].guard == ppid)
            return true;
    return false;
}

int dt_agent__signal_leftovers(struct dt_agent *a, int sig)
{
    DIR *d = opendir("/proc");
    if (!d)
        return 0;
    /* Collect first, signal after: a signalled group could otherwise die
     * before the scan reaches its other members, and the count would vary. */
    enum { MAX_FOUND = 512 }; /* more are caught by the next sweep */
    pid_t found[MAX_FOUND], groups[MAX_FOUND];
    int n = 0;
    struct dirent *de;
    while (n < MAX_FOUND && (de = readdir(d)) != NULL) {
        if (!isdigit((unsigned char)de->d_name[0]))
            continue;
        struct dt_proc_stat ps;
        if (dt_proc_stat_read(de->d_name, &ps) != 0 || !adopted(a, ps.ppid) || ps.state == 'Z')
            continue;
        pid_t pid = (pid_t)atoi(de->d_name);
        if (is_ours(a, pid))
            continue;
        found[n] = pid;
        groups[n++] = ps.pgrp;
    }
    closedir(d);
    pid_t own_group = getpgrp();
    for (int i = 0; i < n; i++) {
        kill(found[i], sig);
        /* Never our own group: that would signal the launcher and the user's shell pipeline. */
        if (groups[i] > 1 && groups[i] != own_group)
            kill(-groups[i], sig);
    }
    return n;
}

/* --- acting on the state machine's steps ---------------------------------- */

/* /proc first: signalled groups would die before the count could see them. */
static void sweep(struct dt_agent *a, struct dt_agent__act act)
{
    int n = dt_agent__signal_leftovers(a, act.sig);
    dt_agent__signal_groups(a, act.sig);
    if (act.what != DT_AGENT__DO_FIRST_SWEEP)
        return;
    a->res->attempts[a->attempt].leftovers = n;
    if (n > 0)
        dt_log_info("the ranks left %d process%s running; stopping %s", n, n == 1 ? "" : "es",
                    n == 1 ? "it" : "them");
}

void dt_agent__event(struct dt_agent *a, enum dt_agent__event e, int arg)
{
    enum dt_agent__state was = a->sm.state;
    struct dt_agent__act act = dt_agent__sm_step(&a->sm, e, arg, dt_clock_s());
    /* Only an attempt settles: a->attempt indexes one then. */
    if (was == DT_AGENT__SETTLING || a->sm.state == DT_AGENT__SETTLING)
        a->res->attempts[a->attempt].electing = a->sm.state == DT_AGENT__SETTLING;
    switch (act.what) {
    case DT_AGENT__DO_SIGNAL:
        dt_agent__signal_groups(a, act.sig);
        dt_agent__signal_leftovers(a, act.sig);
        break;
    case DT_AGENT__DO_SWEEP:
    case DT_AGENT__DO_FIRST_SWEEP:
        sweep(a, act);
        break;
    case DT_AGENT__DO_GIVE_UP:
        /* SIGKILL cannot be ignored; a process that outlives it is stuck in the
         * kernel (D state: a hung file system or device).  Waiting longer would
         * hang the launcher with it. */
        dt_log_error("processes of the job are still there %g s after SIGKILL: they are stuck in the "
                     "kernel (D state, see `ps -eo pid,stat,wchan,cmd`); the machine may need attention",
                     DT_AGENT__UNKILLABLE_S);
        break;
    case DT_AGENT__DO_NOTHING:
        break;
    }
}

static void log_failed(struct dt_agent *a, int rank, bool is_err, int e);

void dt_agent__close_attempt(struct dt_agent *a)
{
    dt_agent__console_settle(a);
    for (int i = 0; i < a->nproc; i++) {
        struct dt_agent__proc *p = &a->procs[i];
        struct dt_agent__stream *ss[2] = {&p->out, &p->err};
        for (int k = 0; k < 2; k++) {
            if (ss[k]->fd >= 0)
                close(ss[k]->fd);
            ss[k]->fd = -1;
        }
        if (p->status_fd >= 0)
            close(p->status_fd);
        p->status_fd = -1;
        /* No process of the group is left, so the number may be reused: forget it. */
        p->pid = p->guard = 0;
        p->running = false;
    }
    /* close(2) reports what a network file system could not write back. */
    for (int i = 0; i < a->nranks; i++)
        for (int k = 0; k < 2; k++) {
            if (a->sinks[i].log_fd[k] >= 0 && close(a->sinks[i].log_fd[k]) != 0 && errno != EINTR)
                log_failed(a, a->sinks[i].rank, k == 1, errno);
            a->sinks[i].log_fd[k] = -1;
        }
    if (a->own_log >= 0 && close(a->own_log) != 0 && errno != EINTR)
        log_failed(a, -1, false, errno);
    a->own_log = -1;
}

/* --- the "[rank N]" prefix and the stderr tail --------------------------- */

size_t dt_agent_format_line(char *out, int rank, const char *line, size_t len)
{
    /* Hand-rolled rather than snprintf: this runs once per line of output. */
    char digits[16];
    int nd = 0;
    unsigned v = rank < 0 ? 0u : (unsigned)rank;
    do {
        digits[nd++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    size_t o = 0;
    memcpy(out, "[rank ", 6);
    o = 6;
    while (nd > 0)
        out[o++] = digits[--nd];
    out[o++] = ']';
    out[o++] = ' ';
    memcpy(out + o, line, len);
    o += len;
    out[o++] = '\n';
    return o;
}

size_t dt_agent_torch_prefix(int rank, const char *line, size_t len)
{
    size_t i = 5;
    if (rank < 0 || len < 8 || memcmp(line, "[rank", 5) != 0 || !isdigit((unsigned char)line[5]))
        return 0;
    long v = 0;
    while (i < len && i < 16 && isdigit((unsigned char)line[i]))
        v = v * 10 + (line[i++] - '0');
    if (v != rank || i + 1 >= len || line[i] != ']' || line[i + 1] != ':')
        return 0;
    i += 2;
    return i < len && line[i] == ' ' ? i + 1 : i;
}

void dt_agent_tail_push(struct dt_agent_tail *t, const char *line, size_t len, bool complete)
{
    if (t->continuing) {
        /* Rest of a long line whose start is already kept: the start is what matters. */
        t->continuing = !complete;
        return;
    }
    char *dst = t->lines[t->next];
    size_t keep = len < DT_AGENT_TAIL_WIDTH - 1 ? len : DT_AGENT_TAIL_WIDTH - 1;
    memcpy(dst, line, keep);
    dst[keep] = 0;
    if (keep < len && keep >= 3)
        memcpy(dst + keep - 3, "...", 3);
    t->next = (t->next + 1) % DT_AGENT_TAIL_LINES;
    if (t->count < DT_AGENT_TAIL_LINES)
        t->count++;
    t->continuing = !complete;
}

int dt_agent_tail_copy(const struct dt_agent_tail *t, char out[][DT_AGENT_TAIL_WIDTH])
{
    int first = (t->next - t->count + DT_AGENT_TAIL_LINES) % DT_AGENT_TAIL_LINES;
    for (int i = 0; i < t->count; i++)
        memcpy(out[i], t->lines[(first + i) % DT_AGENT_TAIL_LINES], DT_AGENT_TAIL_WIDTH);
    return t->count;
}

/* --- output: pipes to log files and the console -------------------------- */

struct line_ctx {
    struct dt_agent *a;
    struct dt_agent__proc *p;
    struct dt_agent__stream *s;
};

/* A log that cannot be written (a full disk, a quota, RLIMIT_FSIZE) would
 * leave the run's record cut short without a word: the first such error is
 * kept in res->write_error, naming the file and the reason, and fails the
 * job now, no restart, rather than let it run on and end "succeeded" over
 * incomplete logs.  The console still gets the output. */
static void log_failed(struct dt_agent *a, int rank, bool is_err, int e)
{
    if (a->res->write_error[0])
        return;
    char name[96];
    if (rank >= 0)
        snprintf(name, sizeof name, "rank_%d.%s", rank, is_err ? "err" : "out");
    else
        snprintf(name, sizeof name, "%s", a->group->log_name);
    snprintf(a->res->write_error, sizeof a->res->write_error,
             "cannot write the log file %s/attempt_%d/%s: %s", a->cfg->run_dir, a->attempt, name,
             e ? strerror(e) : "nothing was written");
    dt_log_error("%s; stopping the job: its logs would be incomplete", a->res->write_error);
    dt_agent__event(a, DT_AGENT__EV_ABORT, 1);
}

/* rank -1: a group's own log. */
static void log_write(struct dt_agent *a, int *fd, int rank, bool is_err, const char *buf, size_t len)
{
    while (len > 0 && *fd >= 0) {
        ssize_t w = write(*fd, buf, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            log_failed(a, rank, is_err, w < 0 ? errno : 0);
            close(*fd);
            *fd = -1;
            return;
        }
        buf += w;
        len -= (size_t)w;
    }
}

/* A line of a group's process: a rank's, by its route, or its own.  The
 * stream it came on is the rank's unless the route says otherwise (mpirun's
 * tags name the stream; srun --label's do not). */
static void from_group(struct dt_agent *a, bool on_err, const char *line, size_t len, bool complete, char end)
{
    const struct dt_adapter_group *g = a->group;
    const char *text;
    size_t n;
    bool is_err = on_err;
    int r = g->route(g->ctx, line, len, &text, &n, &is_err);
    if (r >= 0 && r < a->nranks) {
        struct dt_agent__sink *k = &a->sinks[r];
        log_write(a, &k->log_fd[is_err], k->rank, is_err, text, n);
        if (complete)
            log_write(a, &k->log_fd[is_err], k->rank, is_err, "\n", 1);
        dt_agent__console_piece(a, k, is_err, text, n, end);
        return;
    }
    memcpy(a->scratch, line, len);
    a->scratch[len] = '\n';
    log_write(a, &a->own_log, -1, false, a->scratch, len + 1);
    dt_agent__console_line(a, true, a->scratch, len + 1);
}

static void on_line(void *ctx, const char *line, size_t len, bool complete)
{
    struct line_ctx *c = ctx;
    if (c->a->group)
        from_group(c->a, c->s->is_err, line, len, complete, c->s->lb.end);
    else
        dt_agent__console_piece(c->a, &c->a->sinks[c->p->index], c->s->is_err, line, len, c->s->lb.end);
}

ssize_t dt_agent__pump(struct dt_agent *a, struct dt_agent__proc *p, struct dt_agent__stream *s)
{
    if (s->fd < 0)
        return 0;
    ssize_t n;
    do
        n = read(s->fd, a->readbuf, a->readbuf_size);
    while (n < 0 && errno == EINTR);
    if (n < 0 && errno == EAGAIN)
        return -1;
    struct line_ctx c = {a, p, s};
    if (n <= 0) {
        close(s->fd);
        s->fd = -1;
        dt_lines_flush(&s->lb, on_line, &c);
        if (!a->group)
            dt_agent__console_end(a, &a->sinks[p->index], s->is_err);
        return 0;
    }
    s->last_read = dt_clock_s();
    if (!a->group)
        log_write(a, &a->sinks[p->index].log_fd[s->is_err], p->rank, s->is_err, a->readbuf, (size_t)n);
    dt_lines_feed(&s->lb, a->readbuf, (size_t)n, on_line, &c);
    return n;
}

/* A group's lines are whole or nothing: the route reads each line's tag. */
int dt_agent__pump_partial(struct dt_agent *a, double now)
{
    int wait_ms = -1;
    for (int i = 0; i < a->nproc && !a->group; i++) {
        struct dt_agent__proc *p = &a->procs[i];
        struct dt_agent__stream *ss[2] = {&p->out, &p->err};
        for (int k = 0; k < 2; k++) {
            struct dt_agent__stream *s = ss[k];
            if (s->fd < 0 || s->lb.len == 0 || !(a->sinks[i].shown & (s->is_err ? DT_STD_ERR : DT_STD_OUT)))
                continue;
            double left = s->last_read + DT_AGENT__PARTIAL_S - now;
            if (left <= 0) {
                struct line_ctx c = {a, p, s};
                dt_lines_take(&s->lb, on_line, &c);
                continue;
            }
            int ms = (int)(left * 1000) + 1;
            if (wait_ms < 0 || ms < wait_ms)
                wait_ms = ms;
        }
    }
    return wait_ms;
}

/* --- the agent's state: processes, sinks, buffers ------------------------ */

#define READ_CHUNK 65536

/* Three descriptors per process (its pipes and its guard's status pipe) and
 * two per rank (its log files) can pass the usual soft limit of 1024 at a few
 * hundred ranks: raise it for the agent, and hand the ranks the limit they
 * would have had (agent_guard.c restores it before exec). */
static void raise_fd_limit(struct dt_agent *a)
{
    getrlimit(RLIMIT_NOFILE, &a->nofile);
    rlim_t need = (rlim_t)a->nproc * 3 + (rlim_t)a->nranks * 2 + 64;
    if (a->nofile.rlim_cur == RLIM_INFINITY || a->nofile.rlim_cur >= need)
        return;
    struct rlimit raised = a->nofile;
    raised.rlim_cur =
        a->nofile.rlim_max == RLIM_INFINITY || a->nofile.rlim_max > need ? need : a->nofile.rlim_max;
    setrlimit(RLIMIT_NOFILE, &raised);
}

static int init_attempts(struct dt_agent *a, const struct dt_agent_config *cfg)
{
    struct dt_agent_result *res = a->res;
    /* An elastic job's membership changes are rounds past max_restarts + 1. */
    int n_attempts = cfg->job->max_restarts + 1 + (cfg->elastic ? DT_AGENT_ELASTIC_ROUNDS : 0);
    res->attempts = calloc((size_t)n_attempts, sizeof *res->attempts);
    res->max_attempts = res->attempts ? n_attempts : 0;
    for (int k = 0; k < res->max_attempts; k++) {
        res->attempts[k].first_failed = -1;
        res->attempts[k].hung = -1;
        res->attempts[k].ranks = calloc((size_t)a->nranks, sizeof *res->attempts[k].ranks);
        if (!res->attempts[k].ranks)
            return dt_error_set(DT_ENOMEM, "out of memory starting the agent for %d ranks", a->nranks);
        for (int i = 0; i < a->nranks; i++)
            res->attempts[k].ranks[i].rank = dt_placement_rank_of(cfg->nproc, cfg->node_rank, i);
    }
    return res->attempts
               ? 0
               : dt_error_set(DT_ENOMEM, "out of memory starting the agent for %d ranks", a->nranks);
}

static int init_procs(struct dt_agent *a, const struct dt_agent_config *cfg)
{
    for (int i = 0; i < a->nranks; i++) {
        struct dt_agent__sink *k = &a->sinks[i];
        k->rank = dt_placement_rank_of(cfg->nproc, cfg->node_rank, i);
        k->log_fd[0] = k->log_fd[1] = -1;
    }
    for (int i = 0; i < a->nproc; i++) {
        struct dt_agent__proc *p = &a->procs[i];
        p->index = a->group ? -1 : i;
        p->rank = a->group ? -1 : a->sinks[i].rank;
        p->out.fd = p->err.fd = p->status_fd = -1;
        p->err.is_err = true;
        int rc = dt_lines_init(&p->out.lb, DT_LINES_MAX);
        if (rc == 0)
            rc = dt_lines_init(&p->err.lb, DT_LINES_MAX);
        if (rc < 0)
            return rc;
        p->out.lb.cr = p->err.lb.cr = !a->group; /* a group's \r would cut a line from its tag */
    }
    return 0;
}

int dt_agent__init(struct dt_agent *a, const struct dt_agent_config *cfg, struct dt_agent_result *res)
{
    memset(a, 0, sizeof *a);
    memset(res, 0, sizeof *res);
    a->cfg = cfg;
    a->res = res;
    a->group = cfg->group;
    res->lost_node.node = -1;
    a->nproc = a->group ? 1 : cfg->nproc;
    a->nranks = res->nproc = a->group ? a->group->world : cfg->nproc;
    a->own_log = -1;
    raise_fd_limit(a); /* first: dt_agent__free puts it back whatever fails below */
    a->con.out_fd = cfg->out_fd || cfg->err_fd ? cfg->out_fd : STDOUT_FILENO;
    a->con.err_fd = cfg->out_fd || cfg->err_fd ? cfg->err_fd : STDERR_FILENO;
    dt_agent__console_init(a);
    dt_agent__sm_init(&a->sm, cfg->grace_s > 0               ? cfg->grace_s
                              : cfg->job->grace_period_s > 0 ? cfg->job->grace_period_s
                                                             : DT_JOB_GRACE_DEFAULT_S);
    a->null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    a->procs = calloc((size_t)a->nproc, sizeof *a->procs);
    a->sinks = calloc((size_t)a->nranks, sizeof *a->sinks);
    a->pfds = calloc((size_t)a->nproc * 3 + 1, sizeof *a->pfds);
    a->pfd_stream = calloc((size_t)a->nproc * 3 + 1, sizeof *a->pfd_stream);
    a->pfd_proc = calloc((size_t)a->nproc * 3 + 1, sizeof *a->pfd_proc);
    a->readbuf_size = READ_CHUNK;
    a->readbuf = malloc(READ_CHUNK);
    a->scratch = malloc(DT_LINES_MAX + DT_AGENT_PREFIX_MAX + 8); /* "\n", the prefix, the line, its end */
    if (a->null_fd < 0 || !a->procs || !a->sinks || !a->pfds || !a->pfd_stream || !a->pfd_proc ||
        !a->readbuf || !a->scratch)
        return dt_error_set(DT_ENOMEM, "out of memory starting the agent for %d ranks", a->nranks);
    if (cfg->progress && dt_progress_open(cfg->run_dir, a->con.out_fd, isatty(a->con.out_fd), 10, &a->progress))
        return dt_error_set(DT_ENOMEM, "out of memory for the progress line");
    int rc = init_attempts(a, cfg);
    return rc ? rc : init_procs(a, cfg);
}

void dt_agent__free(struct dt_agent *a)
{
    dt_log_set_before(NULL, NULL);
    dt_progress_close(a->progress);
    for (int i = 0; a->procs && i < a->nproc; i++) {
        dt_lines_free(&a->procs[i].out.lb);
        dt_lines_free(&a->procs[i].err.lb);
        dt_agent_env_free(a->procs[i].env);
    }
    if (a->null_fd >= 0)
        close(a->null_fd);
    free(a->procs);
    free(a->sinks);
    free(a->pfds);
    free(a->pfd_stream);
    free(a->pfd_proc);
    free(a->readbuf);
    free(a->scratch);
    setrlimit(RLIMIT_NOFILE, &a->nofile);
}
