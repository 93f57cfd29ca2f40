/* proc.c - processes: their titles, exits in words, /proc/<pid>/stat,
 * signals through a pipe, a helper program run to its end (see proc.h).
 *
 * Not for ranks: launcher/agent/agent_procs.c forks those.
 */
#include "base/proc.h"

#include "base/clock.h"
#include "base/error.h"
#include "base/lines.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

/* --- what ps and pgrep -f show -------------------------------------------- */

/* main's argv strings: the kernel laid them out one after another, and
 * /proc/<pid>/cmdline reads that area of the process's memory as it is now. */
static char *argv_area;
static size_t argv_len;

void dt_proc_keep_argv(int argc, char **argv)
{
    if (argc < 1 || !argv[0])
        return;
    char *end = argv[0];
    for (int i = 0; i < argc && argv[i] == end; i++)
        end = argv[i] + strlen(argv[i]) + 1;
    argv_area = argv[0];
    argv_len = (size_t)(end - argv[0]);
}

void dt_proc_retitle(const char *title)
{
    prctl(PR_SET_NAME, title);
    if (!argv_area || argv_len < 2)
        return;
    size_t n = strlen(title);
    if (n > argv_len - 1)
        n = argv_len - 1;
    /* The last byte stays NUL: the kernel then shows the area as argv, not
     * (as for setproctitle's overwrites) running on into the environment. */
    memcpy(argv_area, title, n);
    memset(argv_area + n, 0, argv_len - n);
}

/* --- how a process ended ------------------------------------------------- */

static const struct {
    int sig;
    const char *name;
} signal_names[] = {
    {SIGHUP, "SIGHUP"},       {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"},   {SIGILL, "SIGILL"},
    {SIGTRAP, "SIGTRAP"},     {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},     {SIGFPE, "SIGFPE"},
    {SIGKILL, "SIGKILL"},     {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"},   {SIGUSR2, "SIGUSR2"},
    {SIGPIPE, "SIGPIPE"},     {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"},   {SIGCHLD, "SIGCHLD"},
    {SIGCONT, "SIGCONT"},     {SIGSTOP, "SIGSTOP"}, {SIGTSTP, "SIGTSTP"},   {SIGTTIN, "SIGTTIN"},
    {SIGTTOU, "SIGTTOU"},     {SIGURG, "SIGURG"},   {SIGXCPU, "SIGXCPU"},   {SIGXFSZ, "SIGXFSZ"},
    {SIGVTALRM, "SIGVTALRM"}, {SIGPROF, "SIGPROF"}, {SIGWINCH, "SIGWINCH"}, {SIGIO, "SIGIO"},
    {SIGPWR, "SIGPWR"},       {SIGSYS, "SIGSYS"},
};

const char *dt_proc_signal_name(int sig, char *buf, size_t size)
{
    for (size_t i = 0; i < sizeof signal_names / sizeof signal_names[0]; i++)
        if (signal_names[i].sig == sig)
            return signal_names[i].name;
    snprintf(buf, size, "signal %d", sig);
    return buf;
}

/* Hints for the signals people meet most, so "SIGKILL" is not a dead end. */
static const char *signal_hint(int sig)
{
    switch (sig) {
    case SIGKILL:
        return " (often the kernel's out-of-memory killer: see dmesg)";
    case SIGSEGV:
        return " (segmentation fault)";
    case SIGBUS:
        return " (bus error)";
    case SIGABRT:
        return " (abort(), e.g. a failed assertion)";
    case SIGFPE:
        return " (arithmetic error)";
    default:
        return "";
    }
}

void dt_proc_describe(int wstatus, bool sigkill_hint, char *buf, size_t size)
{
    char tmp[32];
    if (WIFEXITED(wstatus)) {
        snprintf(buf, size, "exited with code %d", WEXITSTATUS(wstatus));
    } else if (WIFSIGNALED(wstatus)) {
        int sig = WTERMSIG(wstatus);
        snprintf(buf, size, "killed by %s%s%s", dt_proc_signal_name(sig, tmp, sizeof tmp),
                 sigkill_hint || sig != SIGKILL ? signal_hint(sig) : "",
                 WCOREDUMP(wstatus) ? ", core dumped" : "");
    } else {
        snprintf(buf, size, "ended with wait status 0x%x", (unsigned)wstatus);
    }
}

int dt_proc_exit_status(int wstatus)
{
    if (WIFEXITED(wstatus))
        return WEXITSTATUS(wstatus);
    if (WIFSIGNALED(wstatus))
        return 128 + WTERMSIG(wstatus);
    return 1;
}

/* --- /proc/<pid>/stat ---------------------------------------------------- */

int dt_proc_stat_parse(const char *line, struct dt_proc_stat *out)
{
    const char *lp = strchr(line, '('), *rp = strrchr(line, ')');
    int ppid, pgrp;
    unsigned long long ut, st;
    /* after "pid (comm)": state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime
     * stime */
    if (!lp || !rp || rp < lp ||
        sscanf(rp + 1, " %c %d %d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &out->state, &ppid, &pgrp, &ut,
               &st) != 5)
        return -1;
    snprintf(out->comm, sizeof out->comm, "%.*s", (int)(rp - lp - 1), lp + 1);
    out->ppid = ppid;
    out->pgrp = pgrp;
    out->cpu_ticks = (long long)(ut + st);
    return 0;
}

/* A /proc file's first size-1 bytes, NUL-terminated: one read, as the
 * kernel fills these files in one go; -1 when the process is gone. */
static int read_proc_file(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, size - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    return 0;
}

int dt_proc_stat_read(const char *entry, struct dt_proc_stat *out)
{
    char path[300], buf[1024];
    snprintf(path, sizeof path, "/proc/%s/stat", entry);
    if (read_proc_file(path, buf, sizeof buf) < 0)
        return -1;
    return dt_proc_stat_parse(buf, out);
}

int dt_proc_catches(pid_t pid, int sig)
{
    char path[64], buf[8192];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    if (read_proc_file(path, buf, sizeof buf) < 0)
        return -1;
    const char *f = strstr(buf, "\nSigCgt:");
    if (!f || sig < 1 || sig > 64)
        return -1;
    unsigned long long mask = strtoull(f + 8, NULL, 16);
    return (int)((mask >> (sig - 1)) & 1);
}

/* --- signals through a pipe ---------------------------------------------- */

static int signal_pipe_w = -1;

static void on_signal(int sig)
{
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    ssize_t w = write(signal_pipe_w, &b, 1);
    (void)w;
    errno = saved;
}

int dt_proc_signals_catch(const int *sigs, int n, struct dt_proc_signals *s)
{
    int p[2];
    if (n > DT_PROC_SIGNALS_MAX)
        return dt_error_set(DT_EINTERNAL, "%d signals to catch; at most %d", n, DT_PROC_SIGNALS_MAX);
    if (pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0)
        return dt_error_set_errno(DT_EIO, errno, "cannot create a pipe for signals");
    s->fd = p[0];
    s->w = signal_pipe_w = p[1];
    s->n = n;
    for (int i = 0; i < n; i++) {
        /* SA_NOCLDSTOP: a rank stopped by SIGSTOP is the watchdog's business, not an exit. */
        struct sigaction sa = {.sa_handler = on_signal,
                               .sa_flags = SA_RESTART | (sigs[i] == SIGCHLD ? SA_NOCLDSTOP : 0)};
        sigemptyset(&sa.sa_mask);
        s->sigs[i] = sigs[i];
        sigaction(sigs[i], &sa, &s->saved[i]);
    }
    struct sigaction ign = {.sa_handler = SIG_IGN};
    sigemptyset(&ign.sa_mask);
    sigaction(SIGPIPE, &ign, &s->saved_pipe);
    return 0;
}

void dt_proc_signals_release(struct dt_proc_signals *s)
{
    for (int i = 0; i < s->n; i++)
        sigaction(s->sigs[i], &s->saved[i], NULL);
    sigaction(SIGPIPE, &s->saved_pipe, NULL);
    signal_pipe_w = -1;
    close(s->fd);
    close(s->w);
}

int dt_proc_signals_wait(int fd, int timeout_ms)
{
    double until = dt_clock_s() + timeout_ms / 1e3;
    for (;;) {
        double left = until - dt_clock_s();
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int rc = left > 0 ? poll(&p, 1, (int)(left * 1000) + 1) : 0;
        if (rc == 0 || (rc < 0 && errno != EINTR))
            return 0;
        unsigned char buf[64], keep[64];
        ssize_t n = rc > 0 ? read(fd, buf, sizeof buf) : 0;
        int k = 0;
        for (ssize_t i = 0; i < n; i++)
            if (buf[i] != SIGCHLD)
                keep[k++] = buf[i];
        if (k > 0) {
            ssize_t w = write(signal_pipe_w, keep, (size_t)k); /* back, for the caller's handler */
            (void)w;
            return keep[0];
        }
    }
}

/* --- a helper program, run to its end ------------------------------------ */

static const int job_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

/* One of the helper's pipes and what becomes of it. */
struct stream {
    int fd;
    enum dt_proc_io io;
    char *buf; /* DT_PROC_CAPTURE */
    size_t len, cap;
    struct dt_lines lb; /* DT_PROC_LINES */
    struct dt_proc_run *r;
    int index;
};

static void child(const struct dt_proc_run *r, int in, int out[2], int err[2], int exec_w)
{
    if (r->grace_s > 0) {
        setsid();
        prctl(PR_SET_PDEATHSIG, SIGTERM);
    }
    for (size_t i = 0; i < sizeof job_signals / sizeof *job_signals; i++)
        signal(job_signals[i], SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    dup2(in, STDIN_FILENO);
    if (out[1] >= 0)
        dup2(out[1], STDOUT_FILENO);
    if (err[1] >= 0)
        dup2(err[1], STDERR_FILENO);
    if (r->envp)
        execvpe(r->argv[0], r->argv, r->envp);
    else
        execvp(r->argv[0], r->argv);
    int e = errno;
    ssize_t w = write(exec_w, &e, sizeof e);
    (void)w;
    _exit(127);
}

static void on_piece(void *ctx, const char *line, size_t len, bool complete)
{
    struct stream *s = ctx;
    s->r->on_line(s->r->ctx, s->index, line, len, complete);
}

/* Reads what is there; false at the end of the stream. */
static bool drain(struct stream *s)
{
    char tmp[16384];
    ssize_t n = read(s->fd, tmp, sizeof tmp);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return true;
    if (n <= 0) {
        if (s->io == DT_PROC_LINES)
            dt_lines_flush(&s->lb, on_piece, s);
        return false;
    }
    if (s->io == DT_PROC_LINES) {
        dt_lines_feed(&s->lb, tmp, (size_t)n, on_piece, s);
        return true;
    }
    if (s->len + (size_t)n + 1 > s->cap) {
        size_t cap = (s->cap ? s->cap : 4096) * 2;
        while (cap < s->len + (size_t)n + 1)
            cap *= 2;
        char *b = realloc(s->buf, cap);
        if (!b)
            return true; /* keep what fits; the rest is read and dropped */
        s->buf = b;
        s->cap = cap;
    }
    memcpy(s->buf + s->len, tmp, (size_t)n);
    s->len += (size_t)n;
    s->buf[s->len] = 0;
    return true;
}

/* The state of one run while the helper's pipes are open. */
struct run {
    struct dt_proc_run *r;
    pid_t pid;
    struct stream s[2];
    int in_fd; /* write end of its stdin, -1 once all is written */
    size_t in_done;
    int sig_fd;      /* -1 without signal passing */
    double deadline; /* 0: none */
    double kill_at;  /* grace over: SIGKILL to its group; 0: not stopping */
    bool timed_out;
    bool stopped; /* r->stop_at passed: SIGTERM sent */
    bool dropped; /* SIGKILL after stop_at: its pipes are no longer read (what it started may hold them) */
};

static void pass_signal(struct run *u)
{
    unsigned char sig;
    while (read(u->sig_fd, &sig, 1) == 1) {
        if (u->r->signal) { /* a second signal: no more grace */
            kill(-u->pid, SIGKILL);
            continue;
        }
        u->r->signal = sig;
        u->kill_at = dt_clock_s() + u->r->grace_s;
        kill(u->pid, SIGTERM);
    }
}

/* The poll timeout (ms) until the next deadline, or -1; acts on past ones. */
static int deadlines(struct run *u)
{
    double now = dt_clock_s(), next = -1;
    if (u->deadline > 0 && now >= u->deadline && !u->timed_out) {
        u->timed_out = true;
        kill(u->pid, SIGKILL);
    }
    if (u->r->stop_at > 0 && now >= u->r->stop_at && !u->stopped) {
        u->stopped = true;
        kill(u->pid, SIGTERM);
        if (u->kill_at <= 0)
            u->kill_at = now + (u->r->grace_s > 1 ? u->r->grace_s : 1);
    }
    if (u->kill_at > 0 && now >= u->kill_at) {
        kill(-u->pid, SIGKILL);
        u->kill_at = 0;
        u->dropped = u->stopped;
    }
    if (u->deadline > 0 && !u->timed_out)
        next = u->deadline;
    if (u->r->stop_at > 0 && !u->stopped && (next < 0 || u->r->stop_at < next))
        next = u->r->stop_at;
    if (u->kill_at > 0 && (next < 0 || u->kill_at < next))
        next = u->kill_at;
    return next < 0 ? -1 : (int)((next - now) * 1000) + 1;
}

static void feed_stdin(struct run *u)
{
    ssize_t w = write(u->in_fd, u->r->in + u->in_done, u->r->in_len - u->in_done);
    if (w > 0)
        u->in_done += (size_t)w;
    if ((w < 0 && errno != EINTR && errno != EAGAIN) || u->in_done >= u->r->in_len) {
        close(u->in_fd); /* EPIPE too: a helper that quits before reading it all */
        u->in_fd = -1;
    }
}

/* Until every pipe of the helper is closed (or it timed out). */
static void pump(struct run *u)
{
    while (!u->timed_out && !u->dropped) {
        struct pollfd p[4];
        int n = 0, idx[4];
        for (int i = 0; i < 2; i++)
            if (u->s[i].fd >= 0) {
                idx[n] = i;
                p[n++] = (struct pollfd){.fd = u->s[i].fd, .events = POLLIN};
            }
        if (u->in_fd >= 0) {
            idx[n] = 2;
            p[n++] = (struct pollfd){.fd = u->in_fd, .events = POLLOUT};
        }
        if (n == 0)
            return;
        if (u->sig_fd >= 0) {
            idx[n] = 3;
            p[n++] = (struct pollfd){.fd = u->sig_fd, .events = POLLIN};
        }
        if (poll(p, (nfds_t)n, deadlines(u)) < 0 && errno != EINTR)
            return;
        for (int k = 0; k < n; k++) {
            if (!p[k].revents)
                continue;
            if (idx[k] == 3) {
                pass_signal(u);
            } else if (idx[k] == 2) {
                feed_stdin(u);
            } else if (!drain(&u->s[idx[k]])) {
                close(u->s[idx[k]].fd);
                u->s[idx[k]].fd = -1;
            }
        }
        deadlines(u);
    }
}

/* Its exit, still passing signals on and keeping the deadlines. */
static int wait_exit(struct run *u, int *st)
{
    bool watch = u->sig_fd >= 0 || u->deadline > 0 || u->r->stop_at > 0;
    for (;;) {
        pid_t w = waitpid(u->pid, st, watch ? WNOHANG : 0);
        if (w == u->pid)
            return 0;
        if (w < 0 && errno != EINTR)
            return dt_error_set_errno(DT_EIO, errno, "waiting for %s", u->r->argv[0]);
        if (w == 0) {
            int timeout = deadlines(u);
            struct pollfd p = {.fd = u->sig_fd, .events = POLLIN};
            poll(&p, u->sig_fd >= 0, timeout < 0 || timeout > 50 ? 50 : timeout);
            if (p.revents & POLLIN)
                pass_signal(u);
        }
    }
}

/* Forks and execs; the exec pipe (close-on-exec) says whether exec worked. */
static int start(struct run *u, int in, int out[2], int err[2])
{
    int ex[2];
    if (pipe2(ex, O_CLOEXEC) != 0)
        return dt_error_set_errno(DT_EIO, errno, "cannot make a pipe to start %s", u->r->argv[0]);
    fflush(NULL);
    u->pid = fork();
    if (u->pid == 0)
        child(u->r, in, out, err, ex[1]);
    int fork_errno = errno;
    close(ex[1]);
    if (u->pid < 0) {
        close(ex[0]);
        return dt_error_set_errno(DT_EIO, fork_errno, "cannot start %s", u->r->argv[0]);
    }
    int e = 0;
    ssize_t n;
    while ((n = read(ex[0], &e, sizeof e)) < 0 && errno == EINTR) {
    }
    close(ex[0]);
    if (n <= 0)
        return 0;
    while (waitpid(u->pid, NULL, 0) < 0 && errno == EINTR) {
    }
    if (e == ENOENT)
        return dt_error_set(DT_ENOTFOUND, "%s was not found on PATH", u->r->argv[0]);
    return dt_error_set_errno(DT_EIO, e, "cannot run %s", u->r->argv[0]);
}

static int open_pipes(struct run *u, int *in, int out[2], int err[2])
{
    int *ends[2] = {out, err};
    for (int i = 0; i < 2; i++) {
        ends[i][0] = ends[i][1] = -1;
        if (u->r->io[i] != DT_PROC_INHERIT && pipe2(ends[i], O_CLOEXEC) != 0)
            return dt_error_set_errno(DT_EIO, errno, "cannot make a pipe for %s", u->r->argv[0]);
        u->s[i] = (struct stream){.fd = ends[i][0], .io = u->r->io[i], .r = u->r, .index = i};
        if (u->r->io[i] == DT_PROC_LINES && dt_lines_init(&u->s[i].lb, DT_LINES_MAX) < 0)
            return DT_ENOMEM;
    }
    int p[2];
    if (!u->r->in) {
        *in = open("/dev/null", O_RDONLY | O_CLOEXEC);
        return *in >= 0 ? 0 : dt_error_set_errno(DT_EIO, errno, "cannot open /dev/null");
    }
    if (pipe2(p, O_CLOEXEC) != 0)
        return dt_error_set_errno(DT_EIO, errno, "cannot make a pipe for %s", u->r->argv[0]);
    *in = p[0];
    u->in_fd = p[1];
    fcntl(u->in_fd, F_SETFL, O_NONBLOCK);
    return 0;
}

static void close_all(struct run *u, int in, int out[2], int err[2])
{
    int fds[] = {in, out[0], out[1], err[0], err[1], u->in_fd};
    for (size_t i = 0; i < sizeof fds / sizeof *fds; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    for (int i = 0; i < 2; i++) {
        if (u->s[i].io == DT_PROC_LINES)
            dt_lines_free(&u->s[i].lb);
        if (u->s[i].io == DT_PROC_CAPTURE && !u->r->captured[i])
            u->r->captured[i] = u->s[i].buf ? u->s[i].buf : strdup("");
    }
}

int dt_proc_run(struct dt_proc_run *r)
{
    struct run u = {.r = r, .in_fd = -1, .sig_fd = -1};
    int in = -1, out[2] = {-1, -1}, err[2] = {-1, -1};
    struct dt_proc_signals sigs;
    r->captured[0] = r->captured[1] = NULL;
    r->signal = 0;
    /* A helper that quits before reading all of its stdin: EPIPE, not our death. */
    struct sigaction ign = {.sa_handler = SIG_IGN}, old_pipe;
    sigemptyset(&ign.sa_mask);
    sigaction(SIGPIPE, &ign, &old_pipe);
    int rc = open_pipes(&u, &in, out, err);
    if (rc == 0 && r->grace_s > 0)
        rc = dt_proc_signals_catch(job_signals, 4, &sigs);
    if (rc == 0)
        u.sig_fd = r->grace_s > 0 ? sigs.fd : -1;
    if (rc == 0 && r->timeout_s > 0)
        u.deadline = dt_clock_s() + r->timeout_s;
    if (rc == 0)
        rc = start(&u, in, out, err);
    int st = 0;
    if (rc == 0) {
        int child_ends[] = {in, out[1], err[1]};
        for (int i = 0; i < 3; i++)
            if (child_ends[i] >= 0)
                close(child_ends[i]);
        in = out[1] = err[1] = -1;
        pump(&u);
        for (int i = 0; i < 2; i++) /* a timed-out helper's children may still hold them */
            if (u.s[i].fd >= 0) {
                close(u.s[i].fd);
                u.s[i].fd = -1;
            }
        out[0] = err[0] = -1;
        rc = wait_exit(&u, &st);
    }
    if (u.sig_fd >= 0)
        dt_proc_signals_release(&sigs);
    close_all(&u, in, out, err);
    sigaction(SIGPIPE, &old_pipe, NULL);
    if (rc == 0 && u.timed_out)
        rc = dt_error_set(DT_ETIMEDOUT, "%s did not finish within %g s", r->argv[0], r->timeout_s);
    return rc < 0 ? rc : dt_proc_exit_status(st);
}

void dt_proc_thread_block_sigpipe(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
}
