/* tcp_engine.c - runs one step of a TCP collective: non-blocking send of the
 * plan's out blocks to one peer and receive of its in blocks from another,
 * reducing each incoming segment as soon as it is complete.
 *
 * Progress rule: try to send (as far as dependencies allow) and to receive;
 * when neither moved, keep retrying while the spin policy allows
 * (tcp_spin.c: up to 1 ms when the machine has a CPU to spare), and only then
 * poll() the sockets, the abort eventfd and the failure notices with the time
 * left before the collective's deadline.
 * Reductions run on this thread between syscalls, while the peer keeps
 * filling our socket buffer: the kernel's buffers are the pipeline.
 * On failure every exit goes through dt_tcp_fault() (tcp_fault.c), which
 * tells the other ranks and names the rank that failed.
 *
 * Not for choosing algorithms (tcp_coll.c) or setting connections up (tcp.c).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "base/error.h"
#include "comm/reduce.h"
#include "comm/tcp.h"
#include "base/clock.h"

struct engine {
    struct dt_tcp *t;
    const struct dt_tcp_plan *p;
    int oi, ii;          /* current out / in block */
    size_t ooff, ioff;   /* bytes done within it */
    bool out_blocked;    /* the socket is full (EAGAIN) */
    bool in_gated;       /* waiting for an out block to drain before writing */
    bool progress;
    bool hdr_checked;
};

static int peer_error(struct dt_tcp *t, int code, int peer, const char *what)
{
    dt_error_set(code, "rank %d: %s #%llu (tcp): peer rank %d (%s) %s", t->rank, dt_coll_name(t->cur),
                 (unsigned long long)t->seq, peer, t->addr[peer], what);
    t->suspect = peer;
    return code;
}

static bool out_done(const struct engine *e, int idx)
{
    return e->oi > idx || (e->oi == idx && e->ooff == e->p->out[idx].len);
}

static int pump_out(struct engine *e)
{
    const struct dt_tcp_plan *p = e->p;
    int fd = p->out_peer >= 0 ? e->t->fd[p->out_peer] : -1;
    e->out_blocked = false;
    while (e->oi < p->nout) {
        const struct dt_tcp_blk *b = &p->out[e->oi];
        if (e->ooff == b->len) {
            e->oi++;
            e->ooff = 0;
            continue;
        }
        size_t avail = b->len;
        if (b->dep >= 0 && e->t->processed[b->dep] < avail)
            avail = e->t->processed[b->dep];
        if (e->ooff >= avail)
            return 0;
        ssize_t n = send(fd, b->ptr + e->ooff, avail - e->ooff, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                e->out_blocked = true;
                return 0;
            }
            if (errno == EINTR)
                continue;
            char what[128];
            snprintf(what, sizeof what, "could not be sent to: %s", strerror(errno));
            return peer_error(e->t, DT_ECONN, p->out_peer, what);
        }
        e->ooff += (size_t)n;
        e->progress = true;
    }
    return 0;
}

/* A REDUCE block's segment [s0, s1) is in t->stage: fold it into place. */
static void reduce_segment(struct engine *e, const struct dt_tcp_blk *b, size_t s0, size_t s1)
{
    const struct dt_tcp_plan *p = e->p;
    size_t es = dt_dtype_size(p->dtype), n = (s1 - s0) / es;
    const void *mine = b->src + s0, *inc = e->t->stage;
    if (b->incoming_first)
        dt_reduce(p->dtype, p->op, b->ptr + s0, inc, mine, n);
    else
        dt_reduce(p->dtype, p->op, b->ptr + s0, mine, inc, n);
    if (b->finish)
        dt_reduce_finish(p->dtype, p->op, b->ptr + s0, n, e->t->world);
}

/* The header is checked as soon as it is in (block 0 may carry data after
 * it), so a mismatch is reported before the payload lengths disagree. */
static int check_header(struct engine *e)
{
    const struct dt_tcp_plan *p = e->p;
    if (!p->check_hdr || e->hdr_checked || e->ii != 0 || e->ioff < sizeof(struct dt_tcp_hdr))
        return 0;
    e->hdr_checked = true;
    int rc = dt_tcp_hdr_check(e->t, p->in_peer, (const struct dt_tcp_hdr *)p->in[0].ptr, p->hdr);
    if (rc < 0)
        e->t->suspect = p->in_peer;
    return rc;
}

/* Called when in block ii is complete. */
static int in_block_done(struct engine *e)
{
    const struct dt_tcp_plan *p = e->p;
    e->t->processed[e->ii] = p->in[e->ii].len;
    e->ii++;
    e->ioff = 0;
    return 0;
}

static int pump_in(struct engine *e)
{
    const struct dt_tcp_plan *p = e->p;
    struct dt_tcp *t = e->t;
    int fd = p->in_peer >= 0 ? t->fd[p->in_peer] : -1;
    e->in_gated = false;
    while (e->ii < p->nin) {
        const struct dt_tcp_blk *b = &p->in[e->ii];
        int rc;
        if (e->ioff == b->len) {
            if ((rc = in_block_done(e)) < 0)
                return rc;
            continue;
        }
        if (b->after_out >= 0 && !out_done(e, b->after_out)) {
            e->in_gated = true;
            return 0;
        }
        size_t s0 = 0, s1 = b->len;
        char *dst = b->ptr + e->ioff;
        if (b->kind == DT_TCP_IN_REDUCE) {
            s0 = e->ioff / t->seg_bytes * t->seg_bytes;
            s1 = s0 + t->seg_bytes < b->len ? s0 + t->seg_bytes : b->len;
            dst = t->stage + (e->ioff - s0);
        }
        ssize_t n = recv(fd, dst, s1 - e->ioff, MSG_DONTWAIT);
        if (n == 0)
            return peer_error(t, DT_ECONN, p->in_peer, "closed the connection (it exited, failed or aborted)");
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            if (errno == EINTR)
                continue;
            char what[128];
            snprintf(what, sizeof what, "could not be read from: %s", strerror(errno));
            return peer_error(t, DT_ECONN, p->in_peer, what);
        }
        e->ioff += (size_t)n;
        e->progress = true;
        if ((rc = check_header(e)) < 0)
            return rc;
        if (b->kind == DT_TCP_IN_DIRECT)
            t->processed[e->ii] = e->ioff;
        else if (e->ioff == s1) {
            reduce_segment(e, b, s0, s1);
            t->processed[e->ii] = s1;
        }
    }
    return 0;
}

static int wait_events(struct engine *e)
{
    struct dt_tcp *t = e->t;
    const struct dt_tcp_plan *p = e->p;
    struct pollfd pf[4] = {{.fd = t->abort_fd, .events = POLLIN}, {.fd = t->ufd, .events = POLLIN}};
    int n = 2;
    if (e->ii < p->nin && !e->in_gated)
        pf[n++] = (struct pollfd){.fd = t->fd[p->in_peer], .events = POLLIN};
    /* While we still owe the out peer data it cannot have finished the step,
     * so a hang-up on its socket means it died: watch for that too, or a rank
     * waiting on a dependency would only hear of the death second hand. */
    int outi = -1;
    if (e->oi < p->nout) {
        short ev = (short)(POLLRDHUP | (e->out_blocked ? POLLOUT : 0));
        if (n == 3 && p->out_peer == p->in_peer)
            pf[2].events |= ev;
        else {
            outi = n;
            pf[n++] = (struct pollfd){.fd = t->fd[p->out_peer], .events = ev};
        }
    }
    double left = t->deadline - dt_clock_s();
    if (left <= 0) {
        char what[160];
        if (e->ii < p->nin && !e->in_gated) {
            snprintf(what, sizeof what, "sent nothing for %.1f s (it, or a rank it waits for, stalled or died)",
                     t->timeout_s - t->grace_s);
            return peer_error(t, DT_ETIMEDOUT, p->in_peer, what);
        }
        snprintf(what, sizeof what, "took no data for %.1f s (stalled or dead)",
                 t->timeout_s - t->grace_s);
        return peer_error(t, DT_ETIMEDOUT, p->out_peer, what);
    }
    if (poll(pf, (nfds_t)n, (int)(left * 1000) + 1) < 0 && errno != EINTR)
        return dt_error_set_errno(DT_EIO, errno, "rank %d: %s (tcp): poll", t->rank, dt_coll_name(t->cur));
    if (outi >= 0 && (pf[outi].revents & (POLLRDHUP | POLLHUP | POLLERR)))
        return peer_error(t, DT_ECONN, p->out_peer, "closed the connection (it exited, failed or aborted)");
    if (atomic_load(&t->aborted))
        return dt_error_set(DT_EABORTED, "rank %d: %s #%llu (tcp): aborted", t->rank, dt_coll_name(t->cur),
                            (unsigned long long)t->seq);
    return pf[1].revents & POLLIN ? dt_tcp_fault_check(t) : 0;
}

static int run(struct dt_tcp *t, const struct dt_tcp_plan *p)
{
    struct engine e = {.t = t, .p = p};
    for (int i = 0; i < p->nin; i++)
        t->processed[i] = 0;
    if (atomic_load(&t->aborted))
        return dt_error_set(DT_EABORTED, "rank %d: %s #%llu (tcp): aborted", t->rank, dt_coll_name(t->cur),
                            (unsigned long long)t->seq);
    struct dt_tcp_spin spin = {0};
    for (;;) {
        e.progress = false;
        int rc = pump_out(&e);
        if (rc == 0)
            rc = pump_in(&e);
        if (rc < 0)
            return rc;
        bool done = e.oi >= p->nout && e.ii >= p->nin;
        if (e.progress || done) {
            dt_tcp_spin_end(t, &spin);
            if (done)
                return 0;
            continue;
        }
        if (dt_tcp_spin_again(t, &spin))
            continue;
        if ((rc = wait_events(&e)) < 0)
            return rc;
    }
}

int dt_tcp_run(struct dt_tcp *t, const struct dt_tcp_plan *p)
{
    t->suspect = -1;
    int rc = run(t, p);
    return rc < 0 ? dt_tcp_fault(t, rc) : rc;
}
