/* agent_guard.c - the guard: a small process between the agent and each rank
 * that outlives the agent, so that no process of a job survives any end of
 * its launcher, `kill -9` included.
 *
 * Why a process in between.  The agent is a child subreaper: whatever the
 * ranks start and leave behind is re-parented to it and stopped at the end.
 * But when the agent itself is killed with SIGKILL, nothing of it runs: the
 * ranks die by PR_SET_PDEATHSIG, and whatever they started (`sleep 9001 &`
 * in a shell rank, DataLoader workers, anything that called setsid) is
 * re-parented to the nearest living subreaper above, usually init, and runs
 * on.  The kernel hands orphans only to an ancestor, so the one who cleans up
 * after the agent must sit between it and the ranks, and must live on when
 * the agent dies.  That is the guard:
 *
 *   agent ── guard (subreaper, session of its own) ── rank (session and
 *                                                     group of its own) ── ...
 *
 * The agent forks the guard; the guard forks the rank, tells the agent the
 * rank's pid over a status pipe, and waits.  Ranks stay descendants of the
 * process hosting the coordinator (the coordinator counts a refused client
 * only then: coord_gate.c).  The guard
 *   - reaps the rank and writes its wait status on the status pipe (the agent
 *     sees the exit exactly, core dumps included, and keeps supervising the
 *     rank by its own pid: signals go to the rank's process group as before);
 *   - reaps what the rank leaves behind, which is re-parented to it, until it
 *     has no child left, then exits: an attempt still ends only when nothing
 *     of it is left (the agent stops those leftovers, the guards reap them);
 *   - on the agent's death (PR_SET_PDEATHSIG, SIGUSR2, checked against
 *     getppid) kills the rank's session and process group and every process
 *     re-parented to it with SIGKILL, again and again as each death orphans
 *     the next generation, until none is left.  A group's process (mpirun)
 *     gets SIGTERM first and the grace period, so it can stop the ranks it
 *     started on other hosts.
 *
 * The guard is a fork of a threaded process (the coordinator's thread), so it
 * makes only async-signal-safe calls (no malloc, no stdio) for its whole
 * life, and it keeps no descriptor of the agent's: the coordinator's sockets
 * held open here would keep connections alive after the coordinator closed
 * them.  It blocks every signal and takes SIGCHLD and SIGUSR2 with
 * sigwaitinfo; a terminal's Ctrl-C cannot reach it (its own session).  As
 * a fork that never execs, it shares the agent's pages as they were when it
 * started: about 0.4 MiB of its own (Pss) each, measured on a 4-rank job.
 *
 * Not for the agent's side of the status pipe (agent_procs.c spawns and
 * reads, agent_supervise.c reaps), nor for policy: the guard decides nothing
 * while the agent lives.
 */
#include "launcher/agent/agent_internal.h"

#include "base/proc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The descriptors of the guard, and of the rank before its exec. */
enum { FD_IN, FD_OUT, FD_ERR, FD_STATUS, FD_FIRST_FREE };

#define DEATH_SIG SIGUSR2 /* PR_SET_PDEATHSIG: the agent is gone */

/* --- the rank ------------------------------------------------------------ */

static void put(const char *s)
{
    ssize_t w = write(FD_ERR, s, strlen(s));
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

static _Noreturn void rank_exec(const struct dt_agent *a, const struct dt_agent__proc *p, pid_t guard)
{
    /* The signal comes when the guard dies (killed itself: the rank must not
     * outlive it).  A group's process gets SIGTERM: it stops the ranks it
     * started, on other hosts too, which SIGKILL would leave running. */
    prctl(PR_SET_PDEATHSIG, a->group ? SIGTERM : SIGKILL);
    if (getppid() != guard)
        _exit(1);
    setsid();
    /* The agent ignores SIGPIPE and SIGXFSZ and handles the job's signals:
     * ignored dispositions survive exec, and a handler must not run here. */
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigemptyset(&dfl.sa_mask);
    static const int sigs[] = {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGUSR1, SIGUSR2, SIGXFSZ};
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

/* --- the guard's descriptors --------------------------------------------- */

/* in, out, err and the status pipe become 0..3, everything else is closed.
 * Copies above FD_FIRST_FREE first: a source may itself be one of 0..3. */
static int take_fds(int in, int out, int err, int status)
{
    int src[] = {in, out, err, status}, tmp[4];
    for (int i = 0; i < 4; i++)
        if ((tmp[i] = fcntl(src[i], F_DUPFD, FD_FIRST_FREE + 4)) < 0)
            return -1;
    for (int i = 0; i < 4; i++)
        if (dup2(tmp[i], i) < 0)
            return -1;
#ifdef SYS_close_range
    if (syscall(SYS_close_range, (unsigned)FD_FIRST_FREE, ~0u, 0) == 0)
        return fcntl(FD_STATUS, F_SETFD, FD_CLOEXEC);
#endif
    /* Kernels before 5.9: one by one, up to the (raised) descriptor limit. */
    struct rlimit lim;
    long top = getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < 65536 ? (long)lim.rlim_cur : 65536;
    for (long fd = FD_FIRST_FREE; fd < top; fd++)
        close((int)fd);
    return fcntl(FD_STATUS, F_SETFD, FD_CLOEXEC);
}

/* --- the sweep after the agent's death ----------------------------------- */

struct linux_dirent64 {
    unsigned long long d_ino;
    long long d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};

/* ppid, pgrp and session of /proc/<name>/stat, read without stdio: after the
 * last ')' (the command may hold any character) come state, ppid, pgrp,
 * session. */
static int stat_ids(const char *name, pid_t ids[3])
{
    char path[64] = "/proc/", buf[512];
    size_t n = strlen(name);
    if (n > 20)
        return -1;
    memcpy(path + 6, name, n);
    memcpy(path + 6 + n, "/stat", 6);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t len = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (len <= 0)
        return -1;
    buf[len] = 0;
    char *s = NULL;
    for (char *q = buf; *q; q++)
        if (*q == ')')
            s = q;
    if (!s || !s[1] || !s[2] || !s[3])
        return -1;
    s += 4; /* ") S " */
    for (int i = 0; i < 3; i++) {
        long v = 0;
        while (*s == ' ')
            s++;
        if (*s < '0' || *s > '9')
            return -1;
        while (*s >= '0' && *s <= '9')
            v = v * 10 + (*s++ - '0');
        ids[i] = (pid_t)v;
    }
    return 0;
}

/* SIGKILL to the rank's session and group and to every child of the guard
 * (what the rank's death re-parented here) with its group.  Once the rank is
 * reaped its pid may be another process's: only members of its group and
 * session found in /proc are signalled then (they keep the number taken). */
static void kill_job(pid_t rank, bool rank_done)
{
    pid_t self = getpid();
    if (!rank_done) {
        kill(-rank, SIGKILL);
        kill(rank, SIGKILL);
    }
    int dir = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0)
        return;
    char buf[4096];
    long n;
    while ((n = syscall(SYS_getdents64, dir, buf, sizeof buf)) > 0) {
        for (long off = 0; off < n;) {
            struct linux_dirent64 *d = (struct linux_dirent64 *)(buf + off);
            off += d->d_reclen;
            pid_t ids[3]; /* ppid, pgrp, session */
            if (d->d_name[0] < '1' || d->d_name[0] > '9' || stat_ids(d->d_name, ids) != 0)
                continue;
            if (ids[0] != self && ids[1] != rank && ids[2] != rank)
                continue;
            long pid = 0;
            for (const char *c = d->d_name; *c; c++)
                pid = pid * 10 + (*c - '0');
            kill((pid_t)pid, SIGKILL);
            if (ids[1] > 1 && ids[1] != self)
                kill(-ids[1], SIGKILL);
        }
    }
    close(dir);
}

/* Reaps every child that has ended; the rank's status goes to the agent.
 * Returns false once the guard has no child left. */
static bool reap(pid_t rank, bool *rank_done)
{
    for (;;) {
        int st;
        pid_t w = waitpid(-1, &st, WNOHANG);
        if (w == 0)
            return true;
        if (w < 0)
            return errno == EINTR;
        if (w == rank && !*rank_done) {
            *rank_done = true;
            ssize_t k = write(FD_STATUS, &st, sizeof st);
            (void)k;
        }
    }
}

static double mono_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Waits at most s seconds for a SIGCHLD. */
static void wait_child(double s)
{
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    sigtimedwait(&chld, NULL, &t);
}

/* The agent is gone: nothing of the job may outlive it. */
static _Noreturn void sweep(const struct dt_agent *a, pid_t rank, bool rank_done)
{
    if (a->group && !rank_done) {
        kill(rank, SIGTERM);
        double end = mono_s() + a->sm.grace_s, left;
        while (!rank_done && reap(rank, &rank_done) && (left = end - mono_s()) > 0)
            wait_child(left);
    }
    double pause = 0.001; /* doubling to 1 s: a process stuck in D state may take long */
    for (;;) {
        kill_job(rank, rank_done);
        if (!reap(rank, &rank_done))
            _exit(0);
        wait_child(pause);
        if (!reap(rank, &rank_done))
            _exit(0);
        pause = pause < 0.5 ? pause * 2 : 1.0;
    }
}

/* --- the guard ----------------------------------------------------------- */

_Noreturn void dt_agent__guard_run(const struct dt_agent *a, const struct dt_agent__proc *p, pid_t agent,
                                   int out_w, int err_w, int status_w)
{
    /* Every signal stays blocked (the agent blocked them across fork): the
     * ones that matter are taken with sigwaitinfo, the agent's handlers never
     * run here. */
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGCHLD, &dfl, NULL);
    sigaction(DEATH_SIG, &dfl, NULL);
    prctl(PR_SET_PDEATHSIG, DEATH_SIG);
    if (getppid() != agent) /* it died before the line above: no rank started yet */
        _exit(1);
    setsid();
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    dt_proc_retitle("dtrain-guard"); /* comm and command line: pkill -f "dtrain launch" is not for it */
    if (take_fds(a->null_fd, out_w, err_w, status_w) < 0)
        _exit(127);
    pid_t self = getpid(), rank = fork();
    if (rank == 0)
        rank_exec(a, p, self);
    if (rank < 0) {
        put("dtrain: cannot start a rank: fork failed\n");
        _exit(127);
    }
    ssize_t k = write(FD_STATUS, &rank, sizeof rank);
    (void)k;
    /* The rank's pipes must reach end of file when the rank and its children close theirs. */
    close(FD_IN);
    close(FD_OUT);
    close(FD_ERR);
    sigset_t wait_for;
    sigemptyset(&wait_for);
    sigaddset(&wait_for, SIGCHLD);
    sigaddset(&wait_for, DEATH_SIG);
    bool rank_done = false;
    for (;;) {
        siginfo_t si;
        int sig = sigwaitinfo(&wait_for, &si);
        if (sig == DEATH_SIG && getppid() != agent)
            sweep(a, rank, rank_done);
        if (sig == SIGCHLD && !reap(rank, &rank_done))
            _exit(0);
    }
}
