/* mpirun_supervise.c - one attempt of mpirun: start it, sort its output, pass
 * signals on, wait for it.
 *
 * mpirun is the one child: it starts (and on failure ends) every rank itself,
 * locally and through its daemons on other hosts, so the launcher supervises
 * it as a whole, as the agent supervises a rank.  Its output arrives on two
 * pipes with --tag-output; each rank's lines go to that rank's log files
 * (attempt_<k>/rank_<r>.{out,err}) and to the console prefixed "[rank r]",
 * mpirun's own lines to attempt_<k>/mpirun.err and the console as they are,
 * and are read for its verdict (which rank failed first).
 *
 * Signals: SIGINT/SIGTERM/SIGHUP/SIGQUIT to the launcher become SIGTERM to
 * mpirun, which forwards it to every rank and tears the job down; after the
 * grace period SIGKILL goes to mpirun's process group.  mpirun dies with the
 * launcher (PR_SET_PDEATHSIG), and its ranks with it.  mpirun signals only the
 * ranks it started, so what they started (a shell's `sleep`, DataLoader
 * workers) would outlive the job: the launcher is a child subreaper, inherits
 * such orphans on this host, and stops them once mpirun has ended.
 *
 * Not for settling the job or restarts (mpirun_submit.c).
 */
#include "scheduler-adapters/mpirun_internal.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "base/lines.h"
#include "base/proc.h"
#include "base/clock.h"

static int sig_w = -1;

static void on_signal(int sig)
{
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    ssize_t w = write(sig_w, &b, 1);
    (void)w;
    errno = saved;
}

static const int job_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

struct sorter {
    struct dt_mpirun_attempt *a;
    int (*fds)[2]; /* per rank: .out and .err, opened on first line (-1 before) */
    int mpirun_log;
    char *buf;     /* one console line */
    char *scratch; /* a line's text without embedded tags */
};

static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
    }
}

static int rank_fd(struct sorter *s, int rank, bool err)
{
    if (!s->a->attempt_dir)
        return -1;
    int *fd = &s->fds[rank][err];
    if (*fd == -1) {
        char path[4200];
        snprintf(path, sizeof path, "%s/rank_%d.%s", s->a->attempt_dir, rank, err ? "err" : "out");
        *fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (*fd < 0)
            *fd = -2; /* tried; the console still gets the line */
    }
    return *fd;
}

static void on_line(void *ctx, const char *line, size_t len, bool complete)
{
    struct sorter *s = ctx;
    struct dt_mpirun_attempt *a = s->a;
    int rank;
    bool err;
    const char *text;
    if (!dt_mpirun_parse_tag(line, len, &rank, &err, &text) || rank < 0 || rank >= a->world) {
        dt_mpirun_verdict_feed(&a->verdict, line, len);
        if (s->mpirun_log >= 0) {
            write_all(s->mpirun_log, line, len);
            write_all(s->mpirun_log, "\n", 1);
        }
        write_all(STDERR_FILENO, line, len);
        write_all(STDERR_FILENO, "\n", 1);
        return;
    }
    size_t n = len - (size_t)(text - line);
    if (memchr(text, '<', n) && n <= DT_LINES_MAX) { /* rare: another tag inside the line */
        memcpy(s->scratch, text, n);
        n = dt_mpirun_strip_tags(s->scratch, n);
        text = s->scratch;
    }
    int fd = rank_fd(s, rank, err);
    if (fd >= 0) {
        write_all(fd, text, n);
        if (complete)
            write_all(fd, "\n", 1);
    }
    if (err)
        dt_agent_tail_push(&a->tails[rank], text, n, complete);
    if (!err && a->show && !a->show[rank])
        return;
    size_t m = a->prefix_ranks ? dt_agent_format_line(s->buf, rank, text, n) : 0;
    if (!a->prefix_ranks) {
        memcpy(s->buf, text, n);
        s->buf[n] = '\n';
        m = n + 1;
    }
    write_all(err ? STDERR_FILENO : STDOUT_FILENO, s->buf, m);
}

static pid_t spawn(struct dt_mpirun_attempt *a, int out[2], int err[2])
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    /* Its own session: a Ctrl-C at the terminal reaches the launcher only,
     * which passes it on once (mpirun would otherwise get it twice). */
    setsid();
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    for (size_t i = 0; i < sizeof job_signals / sizeof *job_signals; i++)
        signal(job_signals[i], SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    int null = open("/dev/null", O_RDONLY);
    dup2(null, STDIN_FILENO);
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    execvpe(a->argv[0], a->argv, a->envp);
    dprintf(STDERR_FILENO, "dtrain: cannot run %s: %s\n", a->argv[0], strerror(errno));
    _exit(127);
}

struct loop {
    struct pollfd pfd[3];
    struct dt_lines lb[2];
    bool stopping;
    double kill_at;
};

static void pass_signal(struct dt_mpirun_attempt *a, struct loop *l, int sig)
{
    if (!a->interrupt_signal)
        a->interrupt_signal = sig;
    if (l->stopping) { /* a second signal: no more grace */
        kill(-a->mpirun_pid, SIGKILL);
        return;
    }
    l->stopping = true;
    l->kill_at = dt_clock_s() + a->grace_s;
    kill(a->mpirun_pid, SIGTERM);
}

static void pump(struct dt_mpirun_attempt *a, struct sorter *s, struct loop *l)
{
    char chunk[65536];
    while (l->pfd[0].fd >= 0 || l->pfd[1].fd >= 0) {
        int timeout = l->stopping ? 100 : -1;
        if (poll(l->pfd, 3, timeout) < 0 && errno != EINTR)
            break;
        if (l->stopping && dt_clock_s() >= l->kill_at) {
            kill(-a->mpirun_pid, SIGKILL);
            l->kill_at = dt_clock_s() + 3600;
        }
        if (l->pfd[2].revents & POLLIN) {
            unsigned char sig;
            if (read(l->pfd[2].fd, &sig, 1) == 1)
                pass_signal(a, l, sig);
        }
        for (int i = 0; i < 2; i++) {
            if (l->pfd[i].fd < 0 || !(l->pfd[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            ssize_t n = read(l->pfd[i].fd, chunk, sizeof chunk);
            if (n > 0) {
                dt_lines_feed(&l->lb[i], chunk, (size_t)n, on_line, s);
            } else if (n == 0 || errno != EINTR) {
                dt_lines_flush(&l->lb[i], on_line, s);
                close(l->pfd[i].fd);
                l->pfd[i].fd = -1;
            }
        }
    }
}

/* Our children other than mpirun are orphans we inherited as subreaper. */
static int kill_leftovers(void)
{
    int total = 0;
    for (int round = 0; round < 50; round++) {
        DIR *d = opendir("/proc");
        if (!d)
            break;
        int n = 0;
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
            if (!isdigit((unsigned char)de->d_name[0]))
                continue;
            char path[300], buf[512];
            snprintf(path, sizeof path, "/proc/%s/stat", de->d_name);
            FILE *f = fopen(path, "r");
            size_t len = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
            if (f)
                fclose(f);
            buf[len] = 0;
            const char *rp = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
            char state;
            int ppid;
            if (!rp || sscanf(rp + 1, " %c %d", &state, &ppid) != 2 || ppid != getpid() || state == 'Z')
                continue;
            kill(atoi(de->d_name), SIGKILL);
            n++;
        }
        closedir(d);
        while (waitpid(-1, NULL, WNOHANG) > 0) {
        }
        if (!n)
            break;
        total += n;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    return total;
}

static int run(struct dt_mpirun_attempt *a, struct sorter *s, int sigfd)
{
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC))
        return dt_error_set_errno(DT_EIO, errno, "cannot make pipes for mpirun");
    a->start_s = dt_clock_s() - a->t0;
    pid_t pid = spawn(a, out, err);
    close(out[1]);
    close(err[1]);
    if (pid < 0) {
        close(out[0]);
        close(err[0]);
        return dt_error_set_errno(DT_EIO, errno, "cannot fork to run %s", a->argv[0]);
    }
    a->mpirun_pid = pid;
    struct loop l = {.pfd = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}, {sigfd, POLLIN, 0}}};
    int rc = dt_lines_init(&l.lb[0], DT_LINES_MAX);
    if (rc == 0)
        rc = dt_lines_init(&l.lb[1], DT_LINES_MAX);
    if (rc == 0)
        pump(a, s, &l);
    else
        kill(-pid, SIGKILL);
    for (int i = 0; i < 2; i++)
        if (l.pfd[i].fd >= 0)
            close(l.pfd[i].fd);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    a->leftovers = kill_leftovers();
    a->end_s = dt_clock_s() - a->t0;
    a->status = dt_proc_exit_status(st);
    dt_lines_free(&l.lb[0]);
    dt_lines_free(&l.lb[1]);
    return rc;
}

int dt_mpirun_run_attempt(struct dt_mpirun_attempt *a)
{
    a->verdict = (struct dt_mpirun_verdict){.rank = -1};
    a->interrupt_signal = 0;
    struct sorter s = {.a = a, .mpirun_log = -1};
    s.fds = malloc((size_t)(a->world > 0 ? a->world : 1) * sizeof *s.fds);
    s.buf = malloc(DT_LINES_MAX + 64);
    s.scratch = malloc(DT_LINES_MAX + 1);
    a->tails = calloc((size_t)(a->world > 0 ? a->world : 1), sizeof *a->tails);
    if (!s.fds || !s.buf || !s.scratch || !a->tails) {
        free(s.fds);
        free(s.buf);
        free(s.scratch);
        return dt_error_set(DT_ENOMEM, "out of memory supervising mpirun");
    }
    for (int r = 0; r < a->world; r++)
        s.fds[r][0] = s.fds[r][1] = -1;
    if (a->attempt_dir) {
        char path[4200];
        snprintf(path, sizeof path, "%s/mpirun.err", a->attempt_dir);
        s.mpirun_log = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    }
    int sp[2];
    struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_RESTART}, old[4], ign = {.sa_handler = SIG_IGN},
                     oldpipe;
    int rc = pipe2(sp, O_CLOEXEC | O_NONBLOCK) ? dt_error_set_errno(DT_EIO, errno, "cannot make a signal pipe") : 0;
    if (rc == 0) {
        sig_w = sp[1];
        prctl(PR_SET_CHILD_SUBREAPER, 1);
        for (int i = 0; i < 4; i++)
            sigaction(job_signals[i], &sa, &old[i]);
        sigaction(SIGPIPE, &ign, &oldpipe);
        rc = run(a, &s, sp[0]);
        for (int i = 0; i < 4; i++)
            sigaction(job_signals[i], &old[i], NULL);
        sigaction(SIGPIPE, &oldpipe, NULL);
        sig_w = -1;
        close(sp[0]);
        close(sp[1]);
    }
    for (int r = 0; r < a->world; r++)
        for (int k = 0; k < 2; k++)
            if (s.fds[r][k] >= 0)
                close(s.fds[r][k]);
    if (s.mpirun_log >= 0)
        close(s.mpirun_log);
    free(s.fds);
    free(s.buf);
    free(s.scratch);
    return rc;
}
