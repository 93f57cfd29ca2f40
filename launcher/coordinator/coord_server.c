/* coord_server.c - the coordinator's server: starting and stopping it, its
 * loop thread, its connections (accept, read, frame, write, close) and the
 * gate every connection passes before anything it sends is applied.
 *
 * dt_coord_start binds and listens on the caller's thread, so a port in use
 * or a bad address is an error the caller sees at once, then hands the loop
 * to a thread of its own.  dt_coord_stop wakes the loop through an async
 * handle; the loop closes every handle (each freed in its close callback),
 * uv_run returns, and the thread is joined before anything else is freed.
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
 * The gate: the first request must be VALIDATE with PyTorch's magic; with
 * auth on, the next must be AUTH with the job token.  Anything else closes
 * the connection before it is applied.
 *
 * Limits (struct dt_coord_config, 0 means the default):
 *   max_frame_bytes  64 MiB  one request
 *   max_key_bytes     8 KiB  one key, barrier name or token (as PyTorch's libuv server)
 *   max_value_bytes   8 MiB  one value (as PyTorch's libuv server)
 *   max_total_bytes   1 GiB  all keys and values, 64 bytes counted per key on top
 * A client that passes one is disconnected with a log line naming the limit.
 *
 * Not for what requests mean (coord_store.c, coord_rendezvous.c).
 */
#include "launcher/coordinator/coordinator_internal.h"

#include "base/error.h"
#include "base/log.h"
#include "spec/token.h"

#include <ctype.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_MAX_TOTAL ((size_t)1 << 30)
#define DEFAULT_MAX_WRITE_QUEUE ((size_t)256 << 20)
#define READ_CHUNK ((size_t)64 << 10)
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

/* ---- connections ---- */

struct write_req {
    uv_write_t req;
    uint8_t *data;
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

static void on_closed(uv_handle_t *h)
{
    struct dt_coord__conn *conn = h->data;
    free(conn->rbuf);
    dt_wire_buf_free(&conn->out);
    free(conn);
}

/* Clients that retry (PyTorch's does, for up to 30 minutes) would fill the
 * log: the first few closes are logged, then one in LOG_EVERY with a count. */
static void log_close(struct dt_coord__conn *conn, const char *reason)
{
    struct dt_coord *c = conn->coord;
    unsigned long n = ++c->closes_logged;
    if (n <= LOG_FIRST || n % LOG_EVERY == 0)
        dt_log_warn("coordinator: closed the connection from %s: %s%s", conn->peer, reason,
                    n == LOG_FIRST ? " (further closes: one line in 100)" : "");
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
    dt_coord__member_lost(conn);
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

static void close_all(struct dt_coord *c)
{
    while (c->conns)
        conn_close(c->conns, NULL);
}

static void on_written(uv_write_t *req, int status)
{
    struct write_req *w = (struct write_req *)req;
    struct dt_coord__conn *conn = req->handle->data;
    free(w->data);
    free(w);
    if (status < 0 && status != UV_ECANCELED && !conn->closing)
        conn_close(conn, uv_strerror(status));
}

/* Tries the write at once (most replies are a few bytes and leave here);
 * what the socket does not take is queued, the buffer handed to libuv
 * without a copy. */
void dt_coord__conn_flush(struct dt_coord__conn *conn)
{
    struct dt_wire_buf *o = &conn->out;
    if (conn->closing || o->len == 0)
        return;
    if (o->failed) {
        conn_close(conn, "out of memory for a reply");
        return;
    }
    uv_buf_t b = uv_buf_init((char *)o->p, (unsigned)o->len);
    int n = uv_try_write((uv_stream_t *)&conn->tcp, &b, 1);
    size_t done = n > 0 ? (size_t)n : 0;
    if (n < 0 && n != UV_EAGAIN) {
        conn_close(conn, uv_strerror(n));
        return;
    }
    if (done == o->len) {
        o->len = 0;
        if (o->cap > IDLE_KEEP)
            dt_wire_buf_free(o);
        return;
    }
    if (uv_stream_get_write_queue_size((uv_stream_t *)&conn->tcp) > conn->coord->max_write_queue) {
        conn_close(conn, "it does not read its replies (write queue over the limit)");
        return;
    }
    struct write_req *w = malloc(sizeof *w);
    if (!w) {
        conn_close(conn, "out of memory for a reply");
        return;
    }
    w->data = o->p;
    b = uv_buf_init((char *)o->p + done, (unsigned)(o->len - done));
    dt_wire_buf_init(o);
    int e = uv_write(&w->req, (uv_stream_t *)&conn->tcp, &b, 1, on_written);
    if (e < 0) {
        free(w->data);
        free(w);
        conn_close(conn, uv_strerror(e));
    }
}

/* An empty connection reads into the shared scratch buffer; one holding
 * part of a request reads into its own, grown to fit what the decoder has
 * said it still needs (bounded by the frame limit). */
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

/* ---- the gate ---- */

/* Counts a client turned away for lack of the token (see dt_coord_refusals). */
static void refusal_record(struct dt_coord *c, const char *why)
{
    pthread_mutex_lock(&c->hb_lock);
    c->refusals++;
    snprintf(c->last_refusal, sizeof c->last_refusal, "%s", why);
    pthread_mutex_unlock(&c->hb_lock);
}

unsigned long dt_coord_refusals(struct dt_coord *c, char *last, size_t n)
{
    pthread_mutex_lock(&c->hb_lock);
    unsigned long r = c->refusals;
    if (last && n)
        snprintf(last, n, "%s", c->last_refusal);
    pthread_mutex_unlock(&c->hb_lock);
    return r;
}

static bool token_matches(const struct dt_coord *c, const struct dt_wire_bytes *t)
{
    if (t->len != 64)
        return false;
    /* Constant time: a mismatch position must not show in the timing. */
    uint8_t diff = 0;
    for (size_t i = 0; i < 64; i++)
        diff |= (uint8_t)(t->p[i] ^ (uint8_t)c->token[i]);
    return diff == 0;
}

/* Returns 1 when the request may go on to be served, 0 when it was the gate's
 * own request, negative to close. */
static int gate(struct dt_coord__conn *conn, const struct dt_wire_request *r)
{
    if (!conn->validated) {
        if (r->op != DT_WIRE_VALIDATE)
            return dt_error_set(DT_EPROTO, "first request was %s, not VALIDATE: not a TCPStore client",
                                dt_wire_op_name(r->op));
        if (r->u32 != DT_WIRE_MAGIC)
            return dt_error_set(DT_EPROTO, "VALIDATE with magic 0x%08" PRIx32 ", not 0x%08x",
                                r->u32, DT_WIRE_MAGIC);
        conn->validated = true;
        return 0;
    }
    if (r->op == DT_WIRE_AUTH) {
        if (!conn->coord->auth || token_matches(conn->coord, &r->key)) {
            conn->authed = true;
            dt_wire_put_u8(&conn->out, DT_WIRE_OK);
            return 0;
        }
        uint8_t no = DT_WIRE_REFUSED;
        uv_buf_t b = uv_buf_init((char *)&no, 1);
        uv_try_write((uv_stream_t *)&conn->tcp, &b, 1);
        dt_error_set(DT_EAUTH, "wrong job token");
        refusal_record(conn->coord, dt_error_last());
        return DT_EAUTH;
    }
    if (!conn->authed) {
        if (r->op <= DT_WIRE_PING)
            dt_error_set(DT_EAUTH,
                         "%s before the job token; this looks like a PyTorch TCPStore client, "
                         "which cannot present one: to let PyTorch scripts in, set "
                         "`rendezvous: {auth: none}` in the job spec",
                         dt_wire_op_name(r->op));
        else
            dt_error_set(DT_EAUTH, "%s before the job token", dt_wire_op_name(r->op));
        refusal_record(conn->coord, dt_error_last());
        return DT_EAUTH;
    }
    return 1;
}

/* ---- framing ---- */

/* Decodes and serves every whole request in buf[0..len); returns the bytes
 * used, or SIZE_MAX once the connection is closing. */
static size_t process(struct dt_coord__conn *conn, const uint8_t *buf, size_t len)
{
    size_t off = 0;
    while (off < len) {
        struct dt_wire_request r;
        int rc = dt_wire_decode(buf + off, len - off, &conn->coord->lim, &r);
        if (rc == DT_WIRE_INCOMPLETE)
            break;
        if (rc == 0)
            rc = gate(conn, &r);
        if (rc > 0)
            rc = dt_coord__handle(conn, &r);
        if (rc < 0) {
            char why[1100];
            snprintf(why, sizeof why, "%s", dt_error_last());
            /* Answers to the requests before the bad one still go out. */
            dt_coord__conn_flush(conn);
            conn_close(conn, why);
        }
        if (conn->closing)
            return SIZE_MAX;
        off += r.frame_len;
    }
    return off;
}

/* Keeps the unused tail of a read in the connection's own buffer. */
static void keep_tail(struct dt_coord__conn *conn, const uint8_t *from, size_t n)
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
                conn_close(conn, "out of memory for a request");
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
    struct dt_coord__conn *conn = s->data;
    struct dt_coord *c = conn->coord;
    bool scratch = (uint8_t *)buf->base == c->scratch;
    if (scratch)
        c->scratch_busy = false;
    if (nread == 0 || conn->closing)
        return;
    if (nread < 0) {
        conn_close(conn, nread == UV_EOF ? NULL : uv_strerror((int)nread));
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
        conn_close(conn, "request larger than the frame limit");
    dt_coord__conn_flush(conn);
}

static int conn_accept(struct dt_coord *c)
{
    struct dt_coord__conn *conn = calloc(1, sizeof *conn);
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
        conn_close(conn, uv_strerror(e));
        return 0;
    }
    return 0;
}

/* ---- start and stop ---- */

static void on_stop(uv_async_t *a)
{
    struct dt_coord *c = a->data;
    c->stopping = true;
    close_all(c);
    uv_close((uv_handle_t *)&c->listener, NULL);
    uv_close((uv_handle_t *)&c->stop_async, NULL);
}

static void loop_main(void *arg)
{
    struct dt_coord *c = arg;
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
    c->max_write_queue = DEFAULT_MAX_WRITE_QUEUE;
}

static void on_connection(uv_stream_t *server, int status)
{
    struct dt_coord *c = server->data;
    if (status < 0) {
        dt_log_warn("coordinator: accepting a connection failed: %s", uv_strerror(status));
        return;
    }
    if (conn_accept(c) != 0)
        dt_log_warn("coordinator: %s", dt_error_last());
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
    uv_run(&c->loop, UV_RUN_DEFAULT);
    uv_loop_close(&c->loop);
    dt_coord__store_free(c);
    pthread_mutex_destroy(&c->hb_lock);
    free(c->scratch);
    free(c);
}

int dt_coord_start(const struct dt_coord_config *cfg, struct dt_coord **out)
{
    *out = NULL;
    if (cfg->token && dt_token_check(cfg->token, "the coordinator's configuration") != 0)
        return DT_EINVAL;
    struct dt_coord *c = calloc(1, sizeof *c);
    if (c) {
        c->scratch_cap = (size_t)256 << 10;
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
    pthread_mutex_init(&c->hb_lock, NULL);
    uv_loop_init(&c->loop);
    uv_tcp_init(&c->loop, &c->listener);
    uv_async_init(&c->loop, &c->stop_async, on_stop);
    c->listener.data = c;
    c->stop_async.data = c;
    int rc = bind_listen(c, cfg);
    if (rc == 0 && uv_thread_create(&c->thread, loop_main, c) != 0)
        rc = dt_error_set(DT_EIO, "coordinator: cannot start its thread");
    if (rc) {
        unwind(c);
        return rc;
    }
    c->thread_started = true;
    if (!c->auth)
        dt_log_info("coordinator: auth: none - any client that reaches port %d may use the store",
                    c->port);
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
