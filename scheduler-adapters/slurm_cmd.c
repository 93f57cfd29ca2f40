/* slurm_cmd.c - runs one of Slurm's client commands (sbatch, scontrol, sacct, scancel).
 *
 * The command's stdout and stderr are captured (cut to the buffers' size),
 * stdin is /dev/null, and a command that does not finish in time is killed:
 * a slurmctld that does not answer must not hang `dtrain launch`.
 *
 * Not for rank processes (only the agent forks those) or for anything interactive.
 */
#include "scheduler-adapters/slurm.h"

#include "base/error.h"
#include "base/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void child(int out_w, int err_w, char *const argv[], char *const envp[])
{
    int null = open("/dev/null", O_RDONLY);
    if (null >= 0)
        dup2(null, 0);
    dup2(out_w, 1);
    dup2(err_w, 2);
    signal(SIGPIPE, SIG_DFL);
    if (envp)
        execvpe(argv[0], argv, envp);
    else
        execvp(argv[0], argv);
    dprintf(2, "%s", strerror(errno));
    _exit(127);
}

struct sink {
    int fd;
    char *buf;
    size_t size, len;
};

/* Reads what is there; returns false at end of stream. */
static bool drain(struct sink *s)
{
    char tmp[4096];
    ssize_t n = read(s->fd, tmp, sizeof tmp);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return true;
    if (n <= 0)
        return false;
    size_t room = s->size > s->len + 1 ? s->size - s->len - 1 : 0;
    size_t k = (size_t)n < room ? (size_t)n : room;
    memcpy(s->buf + s->len, tmp, k);
    s->len += k;
    s->buf[s->len] = 0;
    return true;
}

int dt_slurm_cmd(char *const argv[], char *const envp[], double timeout_s, char *out, size_t out_size,
                 char *err, size_t err_size)
{
    char dummy_out[1], dummy_err[1];
    struct sink s[2] = {{-1, out_size ? out : dummy_out, out_size ? out_size : 1, 0},
                        {-1, err_size ? err : dummy_err, err_size ? err_size : 1, 0}};
    s[0].buf[0] = s[1].buf[0] = 0;
    int po[2], pe[2];
    if (pipe2(po, O_CLOEXEC) < 0)
        return dt_error_set_errno(DT_EIO, errno, "cannot make a pipe for %s", argv[0]);
    if (pipe2(pe, O_CLOEXEC) < 0) {
        close(po[0]), close(po[1]);
        return dt_error_set_errno(DT_EIO, errno, "cannot make a pipe for %s", argv[0]);
    }
    pid_t pid = fork();
    if (pid == 0)
        child(po[1], pe[1], argv, envp);
    close(po[1]);
    close(pe[1]);
    if (pid < 0) {
        close(po[0]), close(pe[0]);
        return dt_error_set_errno(DT_EIO, errno, "cannot start %s", argv[0]);
    }
    s[0].fd = po[0];
    s[1].fd = pe[0];
    double deadline = dt_clock_s() + timeout_s;
    bool open_[2] = {true, true}, timed_out = false;
    while (open_[0] || open_[1]) {
        int left_ms = (int)((deadline - dt_clock_s()) * 1000);
        if (left_ms <= 0) {
            timed_out = true;
            kill(pid, SIGKILL);
            break;
        }
        struct pollfd p[2] = {{open_[0] ? s[0].fd : -1, POLLIN, 0}, {open_[1] ? s[1].fd : -1, POLLIN, 0}};
        if (poll(p, 2, left_ms) < 0 && errno != EINTR)
            break;
        for (int i = 0; i < 2; i++)
            if (open_[i] && (p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                open_[i] = drain(&s[i]);
    }
    close(s[0].fd);
    close(s[1].fd);
    int ws;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
        ;
    if (timed_out)
        return dt_error_set(DT_ETIMEDOUT, "%s did not answer within %g s (is slurmctld up?)", argv[0],
                            timeout_s);
    if (WIFEXITED(ws) && WEXITSTATUS(ws) == 127 && strstr(s[1].buf, "No such file"))
        return dt_error_set(DT_ENOTFOUND,
                            "%s was not found on PATH: `dtrain launch` of a scheduler: slurm job "
                            "runs where Slurm's client commands are installed (Debian: slurm-client)",
                            argv[0]);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}
