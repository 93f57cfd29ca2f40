/* agent_spawn.c - starting a rank and signalling what the ranks started.
 *
 * Each rank runs in a session and process group of its own, so one
 * kill(-pgid) reaches the rank and everything it started that stayed in its
 * group (DataLoader workers, `sleep &` in a shell script).  A session rather
 * than only a group, as torchrun does (start_new_session): with the kernel's
 * autogroup scheduling each session gets a fair share of the CPU, and ranks
 * crowded into the launcher's one session were measured 2.5x slower to import
 * torch on a busy machine.  Whatever leaves its group and
 * outlives its parent is re-parented to the agent, which is a child
 * subreaper, and found through /proc.  PR_SET_PDEATHSIG covers the last case:
 * the agent itself killed with SIGKILL.
 *
 * Not for the failure policy or the poll loop (agent_supervise.c).
 */
#include "launcher/agent_internal.h"
#include "base/proc.h"

#include "base/error.h"

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
#include <sys/stat.h>
#include <unistd.h>

/* Only async-signal-safe calls from here on: the launcher has a coordinator
 * thread, and a forked child of a threaded process may hold copies of its
 * locks (malloc's, stdio's) in a locked state. */
static void put(const char *s)
{
    ssize_t w = write(STDERR_FILENO, s, strlen(s));
    (void)w;
}

static const char *errno_text(int e)
{
    switch (e) {
    case ENOENT:
        return "no such file (is it on PATH?)";
    case EACCES:
        return "permission denied (is it executable?)";
    case ENOEXEC:
        return "not an executable format";
    case ENOMEM:
        return "out of memory";
    case E2BIG:
        return "argument list too long";
    default:
        return "exec failed";
    }
}

static _Noreturn void child_exec(const struct dt_agent *a, const struct dt_agent_proc *p, pid_t parent,
                                 int out_w, int err_w)
{
    /* The kernel sends the signal when the thread that forked us dies; that
     * is the agent's main thread, which lives as long as the agent.  If the
     * agent died before this line, the signal will never come: check by hand.
     * A group's process gets SIGTERM: it stops the ranks it started, on other
     * hosts too, which SIGKILL would leave running. */
    prctl(PR_SET_PDEATHSIG, a->group ? SIGTERM : SIGKILL);
    if (getppid() != parent)
        _exit(1);
    setsid();
    if (dup2(a->null_fd, STDIN_FILENO) < 0 || dup2(out_w, STDOUT_FILENO) < 0 ||
        dup2(err_w, STDERR_FILENO) < 0)
        _exit(127);
    /* The agent ignores SIGPIPE and handles the job's signals: ignored
     * dispositions survive exec, and a handler must not run here at all. */
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigemptyset(&dfl.sa_mask);
    static const int sigs[] = {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGUSR1};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaction(sigs[i], &dfl, NULL);
    setrlimit(RLIMIT_NOFILE, &a->nofile);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execvpe(a->cfg->argv[0], (char *const *)a->cfg->argv, p->env);
    int e = errno;
    put("dtrain: cannot run '");
    put(a->cfg->argv[0]);
    put("': ");
    put(errno_text(e));
    put("\n");
    _exit(127);
}

/* A run directory is used again by a requeued Slurm job (its run id is the
 * job id) or a repeated --run-id: the log is appended to, after a line that
 * says where this run begins, so the earlier run's output is kept. */
static int open_log(const char *dir, int rank, const char *ext)
{
    char path[4300];
    snprintf(path, sizeof path, "%s/rank_%d.%s", dir, rank, ext);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return dt_error_set_errno(DT_EIO, errno, "cannot create the log file %s", path);
    struct stat st;
    char last = '\n';
    if (fstat(fd, &st) == 0 && st.st_size > 0) {
        int rd = open(path, O_RDONLY | O_CLOEXEC);
        if (rd >= 0 && pread(rd, &last, 1, st.st_size - 1) != 1)
            last = '\n';
        if (rd >= 0)
            close(rd);
        dprintf(fd, "%s%s\n", last == '\n' ? "" : "\n", DT_AGENT_LOG_RERUN_MARK);
    }
    return fd;
}

/* "rank 3", or the group's program: for messages. */
static const char *proc_name(const struct dt_agent *a, const struct dt_agent_proc *p, char *buf, size_t size)
{
    if (p->rank < 0)
        return a->cfg->argv[0];
    snprintf(buf, size, "rank %d", p->rank);
    return buf;
}

static int pipe_error(const struct dt_agent *a, const struct dt_agent_proc *p, int e)
{
    char tmp[32];
    const char *what = proc_name(a, p, tmp, sizeof tmp);
    if (e == EMFILE || e == ENFILE)
        return dt_error_set_errno(DT_EIO, e,
                                  "cannot create a pipe for %s (%d ranks need about %d file "
                                  "descriptors: raise `ulimit -n`)",
                                  what, a->nranks, a->nranks * 4 + 64);
    return dt_error_set_errno(DT_EIO, e, "cannot create a pipe for %s", what);
}

int dt_agent_open_logs(struct dt_agent_sink *k, const char *attempt_dir)
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

static void stream_reset(struct dt_agent_stream *s, int fd)
{
    s->fd = fd;
    s->lb.len = 0;
}

int dt_agent_spawn(struct dt_agent *a, struct dt_agent_proc *p)
{
    /* O_CLOEXEC: a rank must not inherit the write end of another rank's
     * pipe, or that pipe would never reach end of file. */
    int po[2], pe[2];
    if (pipe2(po, O_CLOEXEC) != 0)
        return pipe_error(a, p, errno);
    if (pipe2(pe, O_CLOEXEC) != 0) {
        int e = errno;
        close(po[0]);
        close(po[1]);
        return pipe_error(a, p, e);
    }
    /* Until the child has reset the agent's handlers, a signal for it (the
     * group's SIGTERM) would run the agent's handler in the child and write
     * into the agent's own signal pipe: keep everything blocked across fork;
     * the child unblocks after the reset and then gets what is pending. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0)
        child_exec(a, p, parent, po[1], pe[1]);
    int fork_errno = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    close(po[1]);
    close(pe[1]);
    if (pid < 0) {
        close(po[0]);
        close(pe[0]);
        char tmp[32];
        return dt_error_set_errno(DT_EIO, fork_errno, "cannot start %s", proc_name(a, p, tmp, sizeof tmp));
    }
    fcntl(po[0], F_SETFL, O_NONBLOCK);
    fcntl(pe[0], F_SETFL, O_NONBLOCK);
    stream_reset(&p->out, po[0]);
    stream_reset(&p->err, pe[0]);
    p->pid = pid;
    p->running = true;
    return 0;
}

/* A group's process stops the job itself when it gets SIGTERM (mpirun passes
 * it on to every rank it started, on every host): it gets that once, and
 * only SIGKILL goes to its whole process group. */
static void signal_group_process(struct dt_agent *a, int sig)
{
    struct dt_agent_proc *p = &a->procs[0];
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

void dt_agent_signal_groups(struct dt_agent *a, int sig)
{
    if (a->group) {
        signal_group_process(a, sig);
        return;
    }
    for (int i = 0; i < a->nproc; i++) {
        struct dt_agent_proc *p = &a->procs[i];
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

static bool is_rank(const struct dt_agent *a, pid_t pid)
{
    for (int i = 0; i < a->nproc; i++)
        if (a->procs[i].running && a->procs[i].pid == pid)
            return true;
    return false;
}

int dt_agent_signal_leftovers(struct dt_agent *a, int sig)
{
    DIR *d = opendir("/proc");
    if (!d)
        return 0;
    /* Collect first, signal after: a signalled group could otherwise die
     * before the scan reaches its other members, and the count would vary. */
    enum { MAX_FOUND = 512 }; /* more are caught by the next sweep */
    pid_t found[MAX_FOUND], groups[MAX_FOUND];
    int n = 0;
    pid_t self = getpid();
    struct dirent *de;
    while (n < MAX_FOUND && (de = readdir(d)) != NULL) {
        if (!isdigit((unsigned char)de->d_name[0]))
            continue;
        struct dt_proc_stat ps;
        if (dt_proc_stat_read(de->d_name, &ps) != 0 || ps.ppid != self || ps.state == 'Z')
            continue;
        pid_t pid = (pid_t)atoi(de->d_name);
        if (is_rank(a, pid))
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

void dt_agent_close_attempt(struct dt_agent *a)
{
    for (int i = 0; i < a->nproc; i++) {
        struct dt_agent_proc *p = &a->procs[i];
        struct dt_agent_stream *ss[2] = {&p->out, &p->err};
        for (int k = 0; k < 2; k++) {
            if (ss[k]->fd >= 0)
                close(ss[k]->fd);
            ss[k]->fd = -1;
        }
        /* No process of the group is left, so the number may be reused: forget it. */
        p->pid = 0;
        p->running = false;
    }
    for (int i = 0; i < a->nranks; i++)
        for (int k = 0; k < 2; k++) {
            if (a->sinks[i].log_fd[k] >= 0)
                close(a->sinks[i].log_fd[k]);
            a->sinks[i].log_fd[k] = -1;
        }
    if (a->own_log >= 0)
        close(a->own_log);
    a->own_log = -1;
}
