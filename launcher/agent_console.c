/* agent_console.c - moves rank output from pipes to log files and the console.
 *
 * Log files get the bytes exactly as the rank wrote them.  The console gets
 * whole lines, each prefixed "[rank N]" and written with one write(2), so lines
 * of different ranks never mix mid-line; stdout is shown only for the ranks
 * chosen with --ranks, stderr always.  A group's process (mpirun) carries
 * every rank's lines on its two pipes: the group's route says whose each is,
 * and it goes to that rank's log file (a line at a time: the tags are gone)
 * and the console the same way; the process's own lines go to its log and
 * stderr as they are.  Buffers are allocated once per run: nothing is
 * allocated per line.
 *
 * Not for deciding when to read (the poll loop in agent_supervise.c does).
 */
#include "launcher/agent_internal.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

struct line_ctx {
    struct dt_agent *a;
    struct dt_agent_proc *p;
    struct dt_agent_stream *s;
};

/* Writes all of buf unless the console is gone; a full pipe to a slow
 * terminal only slows the agent down, it never drops output. */
static void console_write(struct dt_agent *a, int fd, const char *buf, size_t len)
{
    dt_progress_hide(a->progress); /* rank output scrolls above the progress line */
    while (len > 0 && !a->console_broken) {
        ssize_t w = write(fd, buf, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN) {
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            poll(&pfd, 1, 100);
            continue;
        }
        if (w <= 0) {
            /* EPIPE (SIGPIPE is ignored): `dtrain launch | head` closed early; the logs go on. */
            a->console_broken = true;
            return;
        }
        buf += w;
        len -= (size_t)w;
    }
}

static void log_write(int *fd, const char *buf, size_t len)
{
    while (len > 0 && *fd >= 0) {
        ssize_t w = write(*fd, buf, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            /* A full disk must not stop the job; the console still has the output. */
            close(*fd);
            *fd = -1;
            return;
        }
        buf += w;
        len -= (size_t)w;
    }
}

/* One line (or piece) of a rank's stream: its stderr tail, the console. */
static void to_console(struct dt_agent *a, struct dt_agent_sink *k, bool is_err, const char *line, size_t len,
                       bool complete)
{
    bool *continuing = &k->continuing[is_err];
    if (*continuing && complete && len == 0) {
        /* A long line that ended exactly at a piece boundary: nothing left to show. */
        *continuing = false;
        if (is_err)
            dt_agent_tail_push(&k->tail, line, 0, true);
        return;
    }
    *continuing = !complete;
    if (is_err)
        dt_agent_tail_push(&k->tail, line, len, complete);
    const unsigned char *show = a->cfg->console_stdout;
    if (!is_err && show && !show[k->rank])
        return;
    size_t n = dt_agent_format_line(a->scratch, k->rank, line, len);
    console_write(a, is_err ? a->err_fd : a->out_fd, a->scratch, n);
}

/* A line of a group's process: a rank's, by its route, or its own. */
static void from_group(struct dt_agent *a, const char *line, size_t len, bool complete)
{
    const struct dt_adapter_group *g = a->group;
    const char *text;
    size_t n;
    bool is_err = false;
    int r = g->route(g->ctx, line, len, &text, &n, &is_err);
    if (r >= 0 && r < a->nranks) {
        struct dt_agent_sink *k = &a->sinks[r];
        log_write(&k->log_fd[is_err], text, n);
        if (complete)
            log_write(&k->log_fd[is_err], "\n", 1);
        to_console(a, k, is_err, text, n, complete);
        return;
    }
    memcpy(a->scratch, line, len);
    a->scratch[len] = '\n';
    log_write(&a->own_log, a->scratch, len + 1);
    console_write(a, a->err_fd, a->scratch, len + 1);
}

static void on_line(void *ctx, const char *line, size_t len, bool complete)
{
    struct line_ctx *c = ctx;
    if (c->a->group)
        from_group(c->a, line, len, complete);
    else
        to_console(c->a, &c->a->sinks[c->p->index], c->s->is_err, line, len, complete);
}

ssize_t dt_agent_pump(struct dt_agent *a, struct dt_agent_proc *p, struct dt_agent_stream *s)
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
        return 0;
    }
    if (!a->group)
        log_write(&a->sinks[p->index].log_fd[s->is_err], a->readbuf, (size_t)n);
    dt_lines_feed(&s->lb, a->readbuf, (size_t)n, on_line, &c);
    return n;
}
