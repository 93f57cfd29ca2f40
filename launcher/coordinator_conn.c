/* coordinator_conn.c - the coordinator's connections: accept, read, frame, write, close.
 *
 * TCPStore requests carry no length prefix (store_wire.h), so each
 * connection keeps the bytes read so far and hands them to the decoder until
 * it says "incomplete".  libuv reads straight into the free tail of that
 * buffer; it grows up to the frame limit and no further.  Replies gathered
 * while one read is processed leave in a single write.
 *
 * A connection that sends a bad or oversized request, or stops reading its
 * replies, is closed alone and a line says who and why; the loop keeps
 * serving everyone else.  A connection is freed only in its close callback.
 *
 * Not for what requests mean (coordinator_ops.c).
 */
#include "launcher/coordinator_internal.h"

#include "base/error.h"
#include "base/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define READ_CHUNK ((size_t)64 << 10)
/* A reply buffer larger than this is freed once sent, not kept per connection. */
#define IDLE_KEEP ((size_t)4 << 10)
#define LOG_FIRST 5ul
#define LOG_EVERY 100ul

struct write_req {
    uv_write_t req;
    uint8_t *data;
};

static void peer_name(struct coord_conn *conn)
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

static void on_closed(uv_handle_t *h)
{
    struct coord_conn *conn = h->data;
    free(conn->rbuf);
    dt_wire_buf_free(&conn->out);
    free(conn);
}

/* Clients that retry (PyTorch's does, for up to 30 minutes) would fill the
 * log: the first few closes are logged, then one in LOG_EVERY with a count. */
static void log_close(struct coord_conn *conn, const char *reason)
{
    struct dt_coord *c = conn->coord;
    unsigned long n = ++c->closes_logged;
    if (n <= LOG_FIRST || n % LOG_EVERY == 0)
        dt_log_warn("coordinator: closed the connection from %s: %s%s", conn->peer, reason,
                    n == LOG_FIRST ? " (further closes: one line in 100)" : "");
}

void coord_conn_close(struct coord_conn *conn, const char *reason)
{
    if (conn->closing)
        return;
    conn->closing = true;
    if (reason)
        log_close(conn, reason);
    wait_cancel(conn);
    barrier_leave(conn);
    member_lost(conn);
    struct dt_coord *c = conn->coord;
    if (conn->prev)
        conn->prev->next = conn->next;
    else
        c->conns = conn->next;
    if (conn->next)
        conn->next->prev = conn->prev;
    c->nconns--;
    uv_close((uv_handle_t *)&conn->tcp, on_closed);
}

void coord_close_all(struct dt_coord *c)
{
    while (c->conns)
        coord_conn_close(c->conns, NULL);
}

static void on_written(uv_write_t *req, int status)
{
    struct write_req *w = (struct write_req *)req;
    struct coord_conn *conn = req->handle->data;
    free(w->data);
    free(w);
    if (status < 0 && status != UV_ECANCELED && !conn->closing)
        coord_conn_close(conn, uv_strerror(status));
}

/* Tries the write at once (most replies are a few bytes and leave here);
 * what the socket does not take is queued, the buffer handed to libuv
 * without a copy. */
void coord_conn_flush(struct coord_conn *conn)
{
    struct dt_wire_buf *o = &conn->out;
    if (conn->closing || o->len == 0)
        return;
    if (o->failed) {
        coord_conn_close(conn, "out of memory for a reply");
        return;
    }
    uv_buf_t b = uv_buf_init((char *)o->p, (unsigned)o->len);
    int n = uv_try_write((uv_stream_t *)&conn->tcp, &b, 1);
    size_t done = n > 0 ? (size_t)n : 0;
    if (n < 0 && n != UV_EAGAIN) {
        coord_conn_close(conn, uv_strerror(n));
        return;
    }
    if (done == o->len) {
        o->len = 0;
        if (o->cap > IDLE_KEEP)
            dt_wire_buf_free(o);
        return;
    }
    if (uv_stream_get_write_queue_size((uv_stream_t *)&conn->tcp) > conn->coord->max_write_queue) {
        coord_conn_close(conn, "it does not read its replies (write queue over the limit)");
        return;
    }
    struct write_req *w = malloc(sizeof *w);
    if (!w) {
        coord_conn_close(conn, "out of memory for a reply");
        return;
    }
    w->data = o->p;
    b = uv_buf_init((char *)o->p + done, (unsigned)(o->len - done));
    dt_wire_buf_init(o);
    int e = uv_write(&w->req, (uv_stream_t *)&conn->tcp, &b, 1, on_written);
    if (e < 0) {
        free(w->data);
        free(w);
        coord_conn_close(conn, uv_strerror(e));
    }
}

/* An empty connection reads into the shared scratch buffer; one holding
 * part of a request reads into its own, grown to fit what the decoder has
 * said it still needs (bounded by the frame limit). */
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    struct coord_conn *conn = h->data;
    struct dt_coord *c = conn->coord;
    if (conn->rlen == 0 && !c->scratch_busy) {
        c->scratch_busy = true;
        *buf = uv_buf_init((char *)c->scratch, (unsigned)c->scratch_cap);
        return;
    }
    size_t limit = c->lim.max_frame_bytes + READ_CHUNK;
    if (conn->rcap - conn->rlen < READ_CHUNK && conn->rcap < limit) {
        size_t cap = conn->rcap ? conn->rcap * 2 : READ_CHUNK;
        while (cap - conn->rlen < READ_CHUNK)
            cap *= 2;
        if (cap > limit)
            cap = limit;
        uint8_t *p = realloc(conn->rbuf, cap);
        if (p) {
            conn->rbuf = p;
            conn->rcap = cap;
        }
    }
    *buf = uv_buf_init((char *)conn->rbuf + conn->rlen, (unsigned)(conn->rcap - conn->rlen));
}

/* Decodes and serves every whole request in buf[0..len); returns the bytes
 * used, or SIZE_MAX once the connection is closing. */
static size_t process(struct coord_conn *conn, const uint8_t *buf, size_t len)
{
    size_t off = 0;
    while (off < len) {
        struct dt_wire_request r;
        int rc = dt_wire_decode(buf + off, len - off, &conn->coord->lim, &r);
        if (rc == DT_WIRE_INCOMPLETE)
            break;
        if (rc == 0)
            rc = coord_handle(conn, &r);
        if (rc < 0) {
            char why[1100];
            snprintf(why, sizeof why, "%s", dt_error_last());
            /* Answers to the requests before the bad one still go out. */
            coord_conn_flush(conn);
            coord_conn_close(conn, why);
        }
        if (conn->closing)
            return SIZE_MAX;
        off += r.frame_len;
    }
    return off;
}

/* Keeps the unused tail of a read in the connection's own buffer. */
static void keep_tail(struct coord_conn *conn, const uint8_t *from, size_t n)
{
    if (n == 0) {
        free(conn->rbuf);
        conn->rbuf = NULL;
        conn->rlen = conn->rcap = 0;
        return;
    }
    if (from != conn->rbuf) {
        if (n > conn->rcap) {
            uint8_t *p = realloc(conn->rbuf, n);
            if (!p) {
                coord_conn_close(conn, "out of memory for a request");
                return;
            }
            conn->rbuf = p;
            conn->rcap = n;
        }
    }
    memmove(conn->rbuf, from, n);
    conn->rlen = n;
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct coord_conn *conn = s->data;
    struct dt_coord *c = conn->coord;
    bool scratch = (uint8_t *)buf->base == c->scratch;
    if (scratch)
        c->scratch_busy = false;
    if (nread == 0 || conn->closing)
        return;
    if (nread < 0) {
        coord_conn_close(conn, nread == UV_EOF ? NULL : uv_strerror((int)nread));
        return;
    }
    const uint8_t *data = scratch ? c->scratch : conn->rbuf;
    size_t len = scratch ? (size_t)nread : conn->rlen + (size_t)nread;
    conn->in_read = true;
    size_t used = process(conn, data, len);
    conn->in_read = false;
    if (used == SIZE_MAX)
        return;
    keep_tail(conn, data + used, len - used);
    /* The decoder refuses oversized requests as soon as their sizes are
     * read; this only catches a buffer that could not grow further. */
    if (!conn->closing && conn->rlen >= conn->coord->lim.max_frame_bytes)
        coord_conn_close(conn, "request larger than the frame limit");
    coord_conn_flush(conn);
}

int coord_conn_accept(struct dt_coord *c)
{
    struct coord_conn *conn = calloc(1, sizeof *conn);
    if (!conn)
        return dt_error_set(DT_ENOMEM, "out of memory for a connection");
    conn->coord = c;
    conn->authed = !c->auth;
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
    conn->next = c->conns;
    if (c->conns)
        c->conns->prev = conn;
    c->conns = conn;
    c->nconns++;
    e = uv_read_start((uv_stream_t *)&conn->tcp, on_alloc, on_read);
    if (e < 0) {
        coord_conn_close(conn, uv_strerror(e));
        return 0;
    }
    return 0;
}
