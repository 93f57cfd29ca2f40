/* agent_console.c - moves rank output from pipes to log files and the console.
 *
 * Log files get the bytes exactly as the rank wrote them.  The console gets
 * whole lines, each prefixed "[rank N]" and written with one write(2), so lines
 * of different ranks never mix mid-line; stdout is shown only for the ranks
 * chosen with --ranks, stderr always.  Buffers are allocated once per run:
 * nothing is allocated per line.
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

static void on_line(void *ctx, const char *line, size_t len, bool complete)
{
    struct line_ctx *c = ctx;
    struct dt_agent_stream *s = c->s;
    if (s->continuing && complete && len == 0) {
        /* A long line that ended exactly at a piece boundary: nothing left to show. */
        s->continuing = false;
        if (s->is_err)
            dt_agent_tail_push(&c->p->tail, line, 0, true);
        return;
    }
    s->continuing = !complete;
    if (s->is_err)
        dt_agent_tail_push(&c->p->tail, line, len, complete);
    const unsigned char *show = c->a->cfg->console_stdout;
    if (!s->is_err && show && !show[c->p->rank])
        return;
    size_t n = dt_agent_format_line(c->a->scratch, c->p->rank, line, len);
    console_write(c->a, s->is_err ? c->a->err_fd : c->a->out_fd, c->a->scratch, n);
}

static void log_write(struct dt_agent_stream *s, const char *buf, size_t len)
{
    while (len > 0 && s->log_fd >= 0) {
        ssize_t w = write(s->log_fd, buf, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            /* A full disk must not stop the job; the console still has the output. */
            close(s->log_fd);
            s->log_fd = -1;
            return;
        }
        buf += w;
        len -= (size_t)w;
    }
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
    if (n <= 0) {
        close(s->fd);
        s->fd = -1;
        struct line_ctx c = {a, p, s};
        dt_lines_flush(&s->lb, on_line, &c);
        return 0;
    }
    log_write(s, a->readbuf, (size_t)n);
    struct line_ctx c = {a, p, s};
    dt_lines_feed(&s->lb, a->readbuf, (size_t)n, on_line, &c);
    return n;
}

void dt_agent_flush_partial(struct dt_agent *a, struct dt_agent_proc *p)
{
    struct line_ctx c = {a, p, &p->out};
    dt_lines_flush(&p->out.lb, on_line, &c);
    c.s = &p->err;
    dt_lines_flush(&p->err.lb, on_line, &c);
}
