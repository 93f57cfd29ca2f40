/* coord_server.c - the coordinator's server: starting and stopping it, its
 * loop thread, its connections (accept, read, frame, write, close) and what
 * bounds them: connection caps, deadlines, buffered bytes both ways.
 *
 * dt_coord_start binds and listens on the caller's thread, so a port in use
 * or a bad address is an error the caller sees at once, then hands the loop
 * to a thread of its own.  dt_coord_stop wakes the loop through an async
 * handle; the loop closes every handle (each freed in its close callback),
 * uv_run returns, and the thread is joined before anything else is freed.
 *
 * TCPStore requests carry no length prefix (store_wire.h), so each
 * connection keeps the bytes of an incomplete request and the decoder's
 * progress through them (struct dt_wire_progress): more bytes resume the
 * decoding where it stopped, and the decoder is not called at all before
 * the bytes it said it needs are there.  Reads land in one shared buffer;
 * only an incomplete request's bytes are copied to the connection's own,
 * grown to what the decoder asks for, up to the frame limit.  Replies
 * gathered while one read is processed leave in a single write.
 *
 * Before its handshake is finished a connection is served by the gate
 * (coord_gate.c) alone, sits on a list oldest first and has a deadline; the
 * caps, deadlines and buffer bounds, with their values and reasons, are in
 * coordinator_internal.h.
 *
 * A connection that sends a bad or oversized request, or passes a limit, is
 * closed alone and a line says who and why; the loop keeps serving everyone
 * else.  A connection is freed only in its close callback.
 *
 * Not for what requests mean (coord_store.c, coord_rendezvous.c), nor for
 * the handshake's rules (coord_gate.c).
 */
#include "launcher/coordinator/coordinator_internal.h"

#include "base/proc.h"
#include "base/error.h"
#include "base/log.h"
#include "spec/token.h"

#include <ctype.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>

#define DEFAULT_MAX_TOTAL ((size_t)1 << 30)
#define READ_CHUNK ((size_t)64 << 10)
#define SCRATCH_BYTES ((size_t)256 << 10)
/* A reply buffer larger than this is freed once sent, not kept per connection. */
#define IDLE_KEEP ((size_t)4 << 10)
#define LOG_FIRST 5ul
#define LOG_EVERY 100ul

const char *dt_coord__key_str(const uint8_t *key, size_t len, char buf[80])
{
    size_t n = len < 64 ? len : 64;
    for (size_t i = 0; i < n; i++)
        buf[i] = isprint(key[i]) && key[i] != '\'' ? (char)key[i] : '?';
    strcpy(buf + n, len > 64 ? "..." : "");
    return buf;
}

/* ---- closing ---- */

struct write_req {
    uv_write_t req;
    uint8_t *data;
    size_t queued; /* counted in dt_coord.out_bytes until written */
};

static void peer_name(struct dt_coord__conn *conn)
{
    struct sockaddr_storage ss;
    int len = sizeof ss;
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (uv_tcp_getpeername(&conn->tcp, (struct sockaddr *)&ss, &len) == 0) {
        if (ss.ss_family == AF_INET6) {
            uv_ip6_name((struct sockaddr_in6 *)&ss, host, sizeof host);
            port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
        } else {
            uv_ip4_name((struct sockaddr_in *)&ss, host, sizeof host);
            port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        }
    }
    snprintf(conn->peer, sizeof conn->peer, "%s:%d", host, port);
}

static void rbuf_free(struct dt_coord__conn *conn)
{
    conn->coord->in_bytes -= conn->rcap;
    free(conn->rbuf);
    conn->rbuf = NULL;
    conn->rlen = conn->rcap = 0;
}

/* Grows or shrinks the request buffer, counting it against IN_TOTAL. */
static bool rbuf_resize(struct dt_coord__conn *conn, size_t cap)
{
    struct dt_coord *c = conn->coord;
    if (cap > conn->rcap && c->in_bytes + (cap - conn->rcap) > DT_COORD__IN_TOTAL)
        return false;
    uint8_t *p = realloc(conn->rbuf, cap);
    if (!p)
        return false;
    c->in_bytes = c->in_bytes - conn->rcap + cap;
    conn->rbuf = p;
    conn->rcap = cap;
    return true;
}

static void try_accept_deferred(struct dt_coord *c);

static void on_closed(uv_handle_t *h)
{
    struct dt_coord__conn *conn = h->data;
    struct dt_coord *c = conn->coord;
    rbuf_free(conn);
    dt_wire_buf_free(&conn->out);
    free(conn);
    try_accept_deferred(c);
}

/* Clients refused before the token that retry (PyTorch's does, for up to 30
 * minutes), or anyone opening connections, would fill the log: of those,
 * the first few closes are logged, then one in LOG_EVERY.  A client past
 * the handshake (a rank) is always named: its close is news. */
static void log_close(struct dt_coord__conn *conn, const char *reason)
{
    struct dt_coord *c = conn->coord;
    if (!conn->preauth) {
        dt_log_warn("coordinator: closed the connection from %s: %s", conn->peer, reason);
        return;
    }
    unsigned long n = ++c->closes_logged;
    if (n <= LOG_FIRST || n % LOG_EVERY == 0)
        dt_log_warn("coordinator: closed the connection from %s: %s%s", conn->peer, reason,
                    n == LOG_FIRST ? " (further closes: one line in 100)" : "");
}

static void preauth_unlink(struct dt_coord__conn *conn)
{
    struct dt_coord *c = conn->coord;
    if (!conn->preauth)
        return;
    if (conn->pa_prev)
        conn->pa_prev->pa_next = conn->pa_next;
    else
        c->pa_head = conn->pa_next;
    if (conn->pa_next)
        conn->pa_next->pa_prev = conn->pa_prev;
    else
        c->pa_tail = conn->pa_prev;
    conn->preauth = false;
    c->npreauth--;
}

static void conn_close(struct dt_coord__conn *conn, const char *reason)
{
    if (conn->closing)
        return;
    conn->closing = true;
    if (reason)
        log_close(conn, reason);
    dt_coord__wait_cancel(conn);
    dt_coord__barrier_leave(conn);
    dt_coord__member_lost(conn, reason);
    dt_coord__store_conn_gone(conn);
    dt_coord__channels_close(conn);
    struct dt_coord *c = conn->coord;
    preauth_unlink(conn);
    if (conn->prev)
        conn->prev->next = conn->next;
    else
        c->conns = conn->next;
    if (conn->next)
        conn->next->prev = conn->prev;
    c->nconns--;
    uv_close((uv_handle_t *)&conn->tcp, on_closed);
}

static void close_all(struct dt_coord *c)
{
    while (c->conns)
        conn_close(c->conns, NULL);
}

/* ---- writing ---- */

/* Replies built or queued but not yet taken by the kernel. */
static size_t unsent(struct dt_coord__conn *conn)
{
    return uv_stream_get_write_queue_size((uv_stream_t *)&conn->tcp) + conn->out.len;
}

static void serve_buffered(struct dt_coord__conn *conn);
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

/* Reading stops while too much of a connection's replies is unsent: its
 * pipelined requests wait in the kernel instead of as replies in memory. */
static void pause_reading(struct dt_coord__conn *conn)
{
    conn->paused = true;
    uv_read_stop((uv_stream_t *)&conn->tcp);
}

static void resume_reading(struct dt_coord__conn *conn)
{
    conn->paused = false;
    serve_buffered(conn);
    if (!conn->closing && !conn->paused)
        uv_read_start((uv_stream_t *)&conn->tcp, on_alloc, on_read);
}

static void on_written(uv_write_t *req, int status)
{
    struct write_req *w = (struct write_req *)req;
    struct dt_coord__conn *conn = req->handle->data;
    conn->coord->out_bytes -= w->queued;
    free(w->data);
    free(w);
    if (conn->closing)
        return;
    if (status < 0) {
        conn_close(conn, uv_strerror(status));
        return;
    }
    if (conn->paused && unsent(conn) <= DT_COORD__OUT_PAUSE / 2)
        resume_reading(conn);
}

int dt_coord__reply_fits(struct dt_coord__conn *conn, const char *op, size_t bytes)
{
    size_t max = conn->coord->max_reply;
    if (bytes <= max)
        return 0;
    return dt_error_set(DT_ENOMEM, "the answer to %s would be %zu bytes, over the %zu-byte reply limit", op,
                        bytes, max);
}

/* Hands what the socket did not take to libuv, without a copy. */
static void queue_rest(struct dt_coord__conn *conn, size_t done)
{
    struct dt_coord *c = conn->coord;
    struct dt_wire_buf *o = &conn->out;
    size_t rest = o->len - done;
    if (c->out_bytes + rest > DT_COORD__OUT_TOTAL) {
        char why[160];
        snprintf(why, sizeof why,
                 "it does not read its replies, and those of all clients would pass the "
                 "%zu MiB limit on unsent replies",
                 DT_COORD__OUT_TOTAL >> 20);
        conn_close(conn, why);
        return;
    }
    struct write_req *w = malloc(sizeof *w);
    if (!w) {
        conn_close(conn, "out of memory for a reply");
        return;
    }
    w->data = o->p;
    w->queued = rest;
    uv_buf_t b = uv_buf_init((char *)o->p + done, (unsigned)rest);
    dt_wire_buf_init(o);
    int e = uv_write(&w->req, (uv_stream_t *)&conn->tcp, &b, 1, on_written);
    if (e < 0) {
        free(w->data);
        free(w);
        conn_close(conn, uv_strerror(e));
        return;
    }
    c->out_bytes += rest;
}

/* Tries the write at once (most replies are a few bytes and leave here);
 * what the socket does not take is queued. */
void dt_coord__conn_flush(struct dt_coord__conn *conn)
{
    if (conn->chan_parent) {
        dt_coord__channel_flush(conn);
        return;
    }
    struct dt_wire_buf *o = &conn->out;
    if (conn->closing || o->len == 0)
        return;
    /* A reply is news too: an answered WAIT or BARRIER starts its silence anew. */
    conn->quiet_since_ms = uv_now(&conn->coord->loop);
    if (o->failed) {
        conn_close(conn, "out of memory for a reply");
        return;
    }
    /* UV_EAGAIN behind queued writes too, so replies stay in order. */
    uv_buf_t b = uv_buf_init((char *)o->p, (unsigned)o->len);
    int n = uv_try_write((uv_stream_t *)&conn->tcp, &b, 1);
    if (n < 0 && n != UV_EAGAIN) {
        conn_close(conn, uv_strerror(n));
        return;
    }
    size_t done = n > 0 ? (size_t)n : 0;
    if (done < o->len) {
        queue_rest(conn, done);
        return;
    }
    o->len = 0;
    if (o->cap > IDLE_KEEP)
        dt_wire_buf_free(o);
}

/* ---- reading and framing ---- */

/* The frame limit this connection is under: the gate's until the handshake
 * is finished. */
static size_t frame_limit(const struct dt_coord__conn *conn)
{
    return conn->gate.validated && conn->gate.authed ? conn->coord->lim.max_frame_bytes
                                                     : DT_COORD__PREAUTH_FRAME;
}

/* An empty connection reads into the shared scratch buffer; one holding
 * part of a request reads into its own, grown towards what the decoder said
 * it needs (bounded by the frame limit and by IN_TOTAL; a zero-length
 * buffer makes libuv report UV_ENOBUFS, and on_read closes). */
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    struct dt_coord__conn *conn = h->data;
    struct dt_coord *c = conn->coord;
    if (conn->rlen == 0 && !c->scratch_busy) {
        c->scratch_busy = true;
        *buf = uv_buf_init((char *)c->scratch, (unsigned)c->scratch_cap);
        return;
    }
    size_t limit = frame_limit(conn) + (frame_limit(conn) > DT_COORD__PREAUTH_FRAME ? READ_CHUNK : 0);
    if (conn->rcap - conn->rlen < READ_CHUNK && conn->rcap < limit) {
        size_t want = conn->rlen + READ_CHUNK;
        if (want < conn->rcap * 2)
            want = conn->rcap * 2;
        if (want < conn->pg.need)
            want = conn->pg.need;
        rbuf_resize(conn, want < limit ? want : limit);
    }
    *buf = uv_buf_init((char *)conn->rbuf + conn->rlen, (unsigned)(conn->rcap - conn->rlen));
}

static void handshake_done(struct dt_coord__conn *conn)
{
    preauth_unlink(conn);
    conn->deadline_ms = 0;
    try_accept_deferred(conn->coord);
}

/* The gate's step plus what it asks for: a reply (a refused token's too,
 * flushed before the close), a refusal counted. */
static int gate(struct dt_coord__conn *conn, const uint8_t *buf, size_t len, size_t *used)
{
    struct dt_coord *c = conn->coord;
    int reply;
    int rc = dt_coord__gate_step(&conn->gate, c->auth ? c->token : NULL, buf, len, &conn->pg, used, &reply);
    if (reply >= 0)
        dt_wire_put_u8(&conn->out, (uint8_t)reply);
    if (rc == DT_EAUTH) {
        char why[1100];
        snprintf(why, sizeof why, "%s", dt_error_last());
        dt_coord__refusal(conn, why);
        return dt_error_set(DT_EAUTH, "%s", why);
    }
    if (rc == 0 && conn->preauth && conn->gate.validated && conn->gate.authed)
        handshake_done(conn);
    return rc;
}

static int serve_one(struct dt_coord__conn *conn, const uint8_t *buf, size_t len, size_t *used)
{
    struct dt_wire_request r;
    int rc = dt_wire_decode_step(buf, len, &conn->coord->lim, &conn->pg, &r);
    if (rc)
        return rc;
    *used = r.frame_len;
    return dt_coord__handle(conn, &r);
}

/* Decodes and serves the whole requests in buf[0..len); returns the bytes
 * used (the rest waits: incomplete, or held back while replies are unsent),
 * or SIZE_MAX once the connection is closing. */
static size_t process(struct dt_coord__conn *conn, const uint8_t *buf, size_t len)
{
    size_t off = 0;
    while (off < len) {
        if (unsent(conn) >= DT_COORD__OUT_PAUSE) {
            dt_coord__conn_flush(conn);
            if (!conn->closing && unsent(conn) >= DT_COORD__OUT_PAUSE) {
                pause_reading(conn);
                break;
            }
        }
        if (conn->closing)
            return SIZE_MAX;
        if (conn->pg.need > len - off)
            break;
        size_t used = 0;
        int rc = dt_coord__gate_wants(&conn->gate, buf[off]) ? gate(conn, buf + off, len - off, &used)
                                                             : serve_one(conn, buf + off, len - off, &used);
        if (rc == DT_WIRE_INCOMPLETE)
            break;
        if (rc < 0) {
            char why[1100];
            snprintf(why, sizeof why, "%s", dt_error_last());
            /* Answers to the requests before the bad one still go out. */
            dt_coord__conn_flush(conn);
            conn_close(conn, why);
        }
        if (conn->closing)
            return SIZE_MAX;
        memset(&conn->pg, 0, sizeof conn->pg);
        off += used;
        conn->quiet_since_ms = uv_now(&conn->coord->loop);
        /* A whole request is progress: the next one gets its own deadline. */
        if (conn->gate.validated && conn->gate.authed)
            conn->deadline_ms = 0;
    }
    return off;
}

/* Keeps the unused tail of a read in the connection's own buffer. */
static void keep_tail(struct dt_coord__conn *conn, const uint8_t *from, size_t n)
{
    if (n == 0) {
        rbuf_free(conn);
        return;
    }
    if (from != conn->rbuf && n > conn->rcap && !rbuf_resize(conn, n)) {
        conn_close(conn, "out of memory for a request, or the requests buffered for all clients "
                         "would pass their limit (256 MiB)");
        return;
    }
    memmove(conn->rbuf, from, n);
    conn->rlen = n;
}

/* An incomplete request must be whole within the request deadline; a
 * paused connection is not late, its requests are. */
static void set_deadline(struct dt_coord__conn *conn)
{
    if (conn->preauth || conn->closing)
        return;
    if (conn->rlen == 0 || conn->paused)
        conn->deadline_ms = 0;
    else if (conn->deadline_ms == 0)
        conn->deadline_ms = uv_now(&conn->coord->loop) + conn->coord->request_ms;
}

static void serve(struct dt_coord__conn *conn, const uint8_t *data, size_t len)
{
    conn->in_read = true;
    size_t used = process(conn, data, len);
    conn->in_read = false;
    if (used == SIZE_MAX)
        return;
    keep_tail(conn, data + used, len - used);
    /* The decoder refuses oversized requests as soon as their sizes are
     * read; this only catches a buffer that could not grow further. */
    if (!conn->closing && !conn->paused && conn->rlen >= frame_limit(conn))
        conn_close(conn, "request larger than the frame limit");
    dt_coord__conn_flush(conn);
    set_deadline(conn);
}

/* What a paused connection had read but not served. */
static void serve_buffered(struct dt_coord__conn *conn)
{
    if (conn->rlen > 0)
        serve(conn, conn->rbuf, conn->rlen);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct dt_coord__conn *conn = s->data;
    struct dt_coord *c = conn->coord;
    bool scratch = (uint8_t *)buf->base == c->scratch;
    if (scratch)
        c->scratch_busy = false;
    if (nread == 0 || conn->closing)
        return;
    if (nread == UV_ENOBUFS) {
        conn_close(conn, "the incomplete requests buffered for all clients would pass their limit "
                         "(256 MiB)");
        return;
    }
    if (nread < 0) {
        conn_close(conn, nread == UV_EOF ? NULL : uv_strerror((int)nread));
        return;
    }
    if (scratch)
        serve(conn, c->scratch, (size_t)nread);
    else
        serve(conn, conn->rbuf, conn->rlen + (size_t)nread);
}

/* ---- accepting ---- */

/* Half of the open-file limit, as it is now (the agent raises its own
 * after the coordinator started). */
static void refresh_caps(struct dt_coord *c)
{
    struct rlimit rl;
    size_t fds = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? (size_t)rl.rlim_cur
                                                                                    : DT_COORD__MAX_CONNS * 2;
    size_t conns = c->cfg_conns ? c->cfg_conns : fds / 2;
    if (conns > DT_COORD__MAX_CONNS && !c->cfg_conns)
        conns = DT_COORD__MAX_CONNS;
    c->conn_cap = conns > 4 ? conns : 4;
    size_t pre = c->cfg_preauth ? c->cfg_preauth : c->conn_cap / 2;
    if (!c->cfg_preauth && pre > DT_COORD__PREAUTH_CONNS)
        pre = DT_COORD__PREAUTH_CONNS;
    c->preauth_cap = pre;
}

static bool under_caps(const struct dt_coord *c)
{
    return c->nconns < c->conn_cap && c->npreauth < c->preauth_cap;
}

/* Bytes the client sent that the loop has not read yet. */
static int unread_bytes(struct dt_coord__conn *conn)
{
    uv_os_fd_t fd;
    int n = 0;
    if (uv_fileno((uv_handle_t *)&conn->tcp, &fd) != 0 || ioctl(fd, FIONREAD, &n) != 0)
        return 0;
    return n;
}

/* The connection to close for room, oldest first among the first
 * EVICT_SCAN: one that had EVICT_AGE_MS to finish its handshake and has
 * nothing waiting to be read.  dtrain's and PyTorch's clients send their
 * whole handshake with the connect, and it is read within a loop turn, so a
 * real client is past the handshake (or has bytes waiting) long before; a
 * connection that stays is one that sends nothing, or dribbles.  NULL when
 * none qualifies yet (*retry_ms: when the oldest will). */
static struct dt_coord__conn *evictable(struct dt_coord *c, uint64_t *retry_ms)
{
    uint64_t now = uv_now(&c->loop);
    int looked = 0;
    *retry_ms = 0;
    for (struct dt_coord__conn *conn = c->pa_head; conn && looked < DT_COORD__EVICT_SCAN;
         conn = conn->pa_next, looked++) {
        uint64_t age = now - conn->accepted_ms;
        if (age < DT_COORD__EVICT_AGE_MS) {
            *retry_ms = DT_COORD__EVICT_AGE_MS - age;
            return NULL; /* the rest are younger still */
        }
        if (unread_bytes(conn) == 0)
            return conn;
    }
    *retry_ms = DT_COORD__EVICT_AGE_MS;
    return NULL;
}

static void on_retry_accept(uv_timer_t *t)
{
    try_accept_deferred(t->data);
}

/* Room for one more connection: at a cap, a connection still in its
 * handshake makes room (evictable); otherwise the new one waits in the
 * kernel's backlog, and the accept is tried again as soon as one will. */
static bool room_for_one(struct dt_coord *c)
{
    if (under_caps(c))
        return true;
    refresh_caps(c);
    if (under_caps(c))
        return true;
    uint64_t retry_ms;
    struct dt_coord__conn *old = evictable(c, &retry_ms);
    if (!old) {
        if (!c->stopping && retry_ms)
            uv_timer_start(&c->retry_accept, on_retry_accept, retry_ms, 0);
        return false;
    }
    conn_close(old, "it had not finished its handshake when the connection limit was reached");
    return under_caps(c);
}

static void conn_link(struct dt_coord *c, struct dt_coord__conn *conn)
{
    conn->next = c->conns;
    if (c->conns)
        c->conns->prev = conn;
    c->conns = conn;
    c->nconns++;
    conn->accepted_ms = uv_now(&c->loop);
    conn->deadline_ms = conn->accepted_ms + c->handshake_ms;
    conn->preauth = true;
    conn->pa_prev = c->pa_tail;
    if (c->pa_tail)
        c->pa_tail->pa_next = conn;
    else
        c->pa_head = conn;
    c->pa_tail = conn;
    c->npreauth++;
}

static int conn_accept(struct dt_coord *c)
{
    struct dt_coord__conn *conn = calloc(1, sizeof *conn);
    if (!conn)
        return dt_error_set(DT_ENOMEM, "out of memory for a connection");
    conn->coord = c;
    conn->gate.authed = !c->auth;
    conn->member = -1;
    dt_wire_buf_init(&conn->out);
    uv_tcp_init(&c->loop, &conn->tcp);
    conn->tcp.data = conn;
    int e = uv_accept((uv_stream_t *)&c->listener, (uv_stream_t *)&conn->tcp);
    if (e < 0) {
        uv_close((uv_handle_t *)&conn->tcp, on_closed);
        return dt_error_set(DT_EIO, "accept: %s", uv_strerror(e));
    }
    uv_tcp_nodelay(&conn->tcp, 1);
    peer_name(conn);
    conn_link(c, conn);
    e = uv_read_start((uv_stream_t *)&conn->tcp, on_alloc, on_read);
    if (e < 0)
        conn_close(conn, uv_strerror(e));
    return 0;
}

static void accept_one(struct dt_coord *c)
{
    if (!room_for_one(c)) {
        c->accept_deferred = true; /* libuv stops polling the listener until uv_accept */
        return;
    }
    c->accept_deferred = false;
    if (conn_accept(c) != 0)
        dt_log_warn("coordinator: %s", dt_error_last());
}

static void try_accept_deferred(struct dt_coord *c)
{
    if (c->accept_deferred && !c->stopping)
        accept_one(c);
}

static void on_connection(uv_stream_t *server, int status)
{
    struct dt_coord *c = server->data;
    if (status < 0) {
        dt_log_warn("coordinator: accepting a connection failed: %s", uv_strerror(status));
        return;
    }
    accept_one(c);
}

/* ---- deadlines ---- */

/* Whether the member's host has stopped acknowledging: keepalive probes or
 * data unanswered.  TCP liveness (member_liveness_s) closes that connection
 * and says so; it is no silent agent. */
static bool host_unanswering(const struct dt_coord__conn *conn)
{
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    uv_os_fd_t fd;
    return conn->coord->liveness_s > 0 && uv_fileno((const uv_handle_t *)&conn->tcp, &fd) == 0 &&
           getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0 && (ti.tcpi_probes > 0 || ti.tcpi_unacked > 0);
}

/* A member (a JOINed agent) that sends nothing: its kernel acknowledges, so
 * TCP liveness cannot tell a stopped or hung agent from a quiet one.  A
 * pending WAIT or BARRIER is a reason to be quiet, and so is a paused
 * connection (its replies wait to be read).  Node 0's agent hosts this
 * coordinator: stopped, it stops the coordinator too, and busy, it must not
 * be taken for lost by its own loop thread. */
static bool member_silent(const struct dt_coord__conn *conn, uint64_t now)
{
    const struct dt_coord *c = conn->coord;
    return c->silence_ms && conn->member > 0 && !conn->closing && !conn->waiting && !conn->barrier &&
           !conn->paused && now - conn->quiet_since_ms > c->silence_ms && !host_unanswering(conn);
}

static void on_sweep(uv_timer_t *t)
{
    struct dt_coord *c = t->data;
    uint64_t now = uv_now(&c->loop);
    char why[160];
    for (struct dt_coord__conn *conn = c->conns, *next; conn; conn = next) {
        next = conn->next;
        if (member_silent(conn, now)) {
            snprintf(why, sizeof why,
                     "it sent nothing for %.3g s", /* lost_why (coord_rendezvous.c) says more */
                     (double)c->silence_ms / 1e3);
            conn_close(conn, why);
            continue;
        }
        if (!conn->deadline_ms || now < conn->deadline_ms || conn->paused)
            continue;
        if (conn->preauth)
            snprintf(why, sizeof why, "it did not finish its handshake (VALIDATE, AUTH) within %.3g s",
                     (double)c->handshake_ms / 1e3);
        else
            snprintf(why, sizeof why, "a request did not arrive whole within %.3g s (%zu bytes of it came)",
                     (double)c->request_ms / 1e3, conn->rlen);
        conn_close(conn, why);
    }
    try_accept_deferred(c);
}

/* ---- start and stop ---- */

static void on_stop(uv_async_t *a)
{
    struct dt_coord *c = a->data;
    c->stopping = true;
    close_all(c);
    uv_close((uv_handle_t *)&c->listener, NULL);
    uv_close((uv_handle_t *)&c->stop_async, NULL);
    uv_close((uv_handle_t *)&c->sweep, NULL);
    uv_close((uv_handle_t *)&c->retry_accept, NULL);
}

static void loop_main(void *arg)
{
    struct dt_coord *c = arg;
    dt_proc_thread_block_sigpipe();
    uv_run(&c->loop, UV_RUN_DEFAULT);
}

static int resolve(const char *host, int port, struct sockaddr_storage *ss)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *res = NULL;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int rc = getaddrinfo(host, ps, &hints, &res);
    if (rc != 0)
        return dt_error_set(DT_EINVAL, "coordinator address '%s': %s", host, gai_strerror(rc));
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    return 0;
}

static void apply_limits(struct dt_coord *c, const struct dt_coord_config *cfg)
{
    c->lim.max_frame_bytes = cfg->max_frame_bytes ? cfg->max_frame_bytes : DT_WIRE_DEFAULT_MAX_FRAME;
    c->lim.max_key_bytes = cfg->max_key_bytes ? cfg->max_key_bytes : DT_WIRE_DEFAULT_MAX_KEY;
    c->lim.max_value_bytes = cfg->max_value_bytes ? cfg->max_value_bytes : DT_WIRE_DEFAULT_MAX_VALUE;
    c->lim.max_keys = DT_WIRE_DEFAULT_MAX_KEYS;
    c->max_total_bytes = cfg->max_total_bytes ? cfg->max_total_bytes : DEFAULT_MAX_TOTAL;
    c->max_reply = c->lim.max_frame_bytes;
    c->handshake_ms = cfg->handshake_timeout_ms ? cfg->handshake_timeout_ms : DT_COORD__HANDSHAKE_MS;
    c->request_ms = cfg->request_timeout_ms ? cfg->request_timeout_ms : DT_COORD__REQUEST_MS;
    c->liveness_s = cfg->member_liveness_s > 0 ? cfg->member_liveness_s : 0;
    c->silence_ms = cfg->member_silence_s > 0 ? (uint64_t)(cfg->member_silence_s * 1e3) : 0;
    c->cfg_conns = cfg->max_conns;
    c->cfg_preauth = cfg->max_preauth_conns;
    refresh_caps(c);
}

/* Often enough for the shortest deadline to be kept within a quarter of it. */
static uint64_t sweep_period_ms(const struct dt_coord *c)
{
    uint64_t t = c->handshake_ms < c->request_ms ? c->handshake_ms : c->request_ms;
    if (c->silence_ms && c->silence_ms < t)
        t = c->silence_ms;
    t /= 4;
    return t < 10 ? 10 : t > 1000 ? 1000 : t;
}

/* Everything up to listen(); on failure the caller unwinds with uv_close. */
static int bind_listen(struct dt_coord *c, const struct dt_coord_config *cfg)
{
    struct sockaddr_storage ss;
    const char *host = cfg->bind_host && *cfg->bind_host ? cfg->bind_host : "0.0.0.0";
    int rc = resolve(host, cfg->port, &ss);
    if (rc)
        return rc;
    int e = uv_tcp_bind(&c->listener, (const struct sockaddr *)&ss, 0);
    if (e == 0)
        e = uv_listen((uv_stream_t *)&c->listener, 65535, on_connection);
    if (e != 0)
        return dt_error_set(DT_EIO, "coordinator cannot listen on %s:%d: %s", host, cfg->port,
                            uv_strerror(e));
    struct sockaddr_storage got;
    int len = sizeof got;
    uv_tcp_getsockname(&c->listener, (struct sockaddr *)&got, &len);
    c->port = ntohs(got.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&got)->sin6_port
                                              : ((struct sockaddr_in *)&got)->sin_port);
    return 0;
}

static void unwind(struct dt_coord *c)
{
    uv_close((uv_handle_t *)&c->listener, NULL);
    uv_close((uv_handle_t *)&c->stop_async, NULL);
    uv_close((uv_handle_t *)&c->sweep, NULL);
    uv_close((uv_handle_t *)&c->retry_accept, NULL);
    uv_run(&c->loop, UV_RUN_DEFAULT);
    uv_loop_close(&c->loop);
    dt_coord__store_free(c);
    pthread_mutex_destroy(&c->hb_lock);
    free(c->scratch);
    free(c);
}

static void init_handles(struct dt_coord *c)
{
    pthread_mutex_init(&c->hb_lock, NULL);
    uv_loop_init(&c->loop);
    uv_tcp_init(&c->loop, &c->listener);
    uv_async_init(&c->loop, &c->stop_async, on_stop);
    uv_timer_init(&c->loop, &c->sweep);
    uv_timer_init(&c->loop, &c->retry_accept);
    c->listener.data = c;
    c->stop_async.data = c;
    c->sweep.data = c;
    c->retry_accept.data = c;
}

int dt_coord_start(const struct dt_coord_config *cfg, struct dt_coord **out)
{
    *out = NULL;
    if (cfg->token && dt_token_check(cfg->token, "the coordinator's configuration") != 0)
        return DT_EINVAL;
    struct dt_coord *c = calloc(1, sizeof *c);
    if (c) {
        c->scratch_cap = SCRATCH_BYTES;
        c->scratch = malloc(c->scratch_cap);
    }
    if (!c || !c->scratch || dt_coord__store_init(c) != 0) {
        if (c)
            free(c->scratch);
        free(c);
        return dt_error_set(DT_ENOMEM, "coordinator: out of memory");
    }
    apply_limits(c, cfg);
    c->auth = cfg->token != NULL;
    if (c->auth)
        memcpy(c->token, cfg->token, 65);
    init_handles(c);
    int rc = bind_listen(c, cfg);
    if (rc == 0)
        uv_timer_start(&c->sweep, on_sweep, sweep_period_ms(c), sweep_period_ms(c));
    if (rc == 0 && uv_thread_create(&c->thread, loop_main, c) != 0)
        rc = dt_error_set(DT_EIO, "coordinator: cannot start its thread");
    if (rc) {
        unwind(c);
        return rc;
    }
    c->thread_started = true;
    *out = c;
    return 0;
}

int dt_coord_port(const struct dt_coord *c) { return c->port; }

void dt_coord_stop(struct dt_coord *c)
{
    if (!c)
        return;
    uv_async_send(&c->stop_async);
    uv_thread_join(&c->thread);
    uv_loop_close(&c->loop);
    dt_coord__rendezvous_free(c);
    dt_coord__store_free(c);
    pthread_mutex_destroy(&c->hb_lock);
    free(c->scratch);
    free(c);
}
