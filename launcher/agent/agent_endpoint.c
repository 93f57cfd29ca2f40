/* agent_endpoint.c - a node's store endpoint (agent_endpoint.h): the
 * listener on 127.0.0.1 that admits the job's processes only, and the one
 * connection to the coordinator that carries each admitted client as a
 * channel (comm/store_wire.h).
 *
 *   accept     the kernel names the client's socket (uid, inode); the
 *              client is admitted when that is our uid and a descendant of
 *              the agent holds it (base/sock_owner.h); anything else is
 *              closed before a byte of it is read, with a log line (the
 *              first five, then one in a hundred)
 *   client     whole TCPStore requests, framed with the shared decoder, go
 *              up as CHANNEL frames, verbatim; the endpoint answers nothing
 *              itself, so replies keep the coordinator's order and meaning
 *   upstream   channel frames come back: DATA bytes to their client (a reply
 *              may span frames: they are streamed, not gathered), CLOSED
 *              frees an id, ENDED closes the client with the coordinator's
 *              reason
 *
 * Ids: the endpoint frees an id only at its CLOSED, which answers its own
 * CHANNEL_CLOSE; replies still on the way for a closed client are dropped,
 * never given to the next client of that id.
 *
 * Bounds: a request is at most the coordinator's frame limit; reading the
 * clients stops while 4 MiB wait to go up, reading the coordinator while a
 * client has 4 MiB of replies unread (both resume at half): memory stays
 * bounded, and the clients are the job's own ranks.
 *
 * Not for who uses it (agent_node.c) nor for the store (the coordinator).
 */
#include "launcher/agent/agent_endpoint.h"

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "base/proc.h"
#include "base/sock_owner.h"
#include "comm/store.h"
#include "comm/store_wire.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#define OUT_PAUSE ((size_t)4 << 20)
#define READ_CHUNK ((size_t)64 << 10)
#define REASON_MAX 2048u
#define MAX_CHANNELS 65536u
#define RETRY_MS 1000u
#define LOG_FIRST 5ul
#define LOG_EVERY 100ul

enum { SLOT_FREE, SLOT_OPEN, SLOT_CLOSING };

struct client;

struct slot {
    struct client *cl; /* NULL once its client is gone */
    uint8_t state;
};

struct client {
    uv_tcp_t tcp;
    struct dt_agent_endpoint *ep;
    struct client *prev, *next;
    uint32_t chan;
    char name[128];
    uint8_t *rbuf;
    size_t rlen, rcap;
    struct dt_wire_progress pg;
    struct dt_wire_buf out; /* replies from one read of the coordinator's connection */
    bool closing;
};

struct upstream {
    uv_tcp_t tcp;
    struct dt_agent_endpoint *ep;
};

struct wreq {
    uv_write_t req;
    uint8_t *data;
};

struct dt_agent_endpoint {
    uv_loop_t loop;
    uv_tcp_t listener;
    uv_async_t async;
    uv_thread_t thread;
    bool thread_started;
    int port;
    pid_t root;
    uint32_t uid;
    char name[128];
    char host[256];
    int coord_port;
    char coord[300]; /* "host:port", for messages */
    char token[65];
    double liveness_s;
    bool coordinator_here;
    struct dt_wire_limits lim;
    /* The coordinator's connection, NULL while there is none. */
    struct upstream *up;
    bool up_in_read, up_paused, clients_paused;
    struct dt_wire_buf upout; /* requests gathered while the clients' reads are served */
    uint8_t ubuf[READ_CHUNK];
    uint8_t hdr[DT_WIRE_CHAN_HEADER]; /* the frame being read */
    size_t hdr_len;
    uint32_t f_chan;
    uint8_t f_kind;
    uint64_t f_left;
    struct dt_wire_buf reason; /* an ENDED frame's bytes */
    uint64_t retry_at;         /* loop time from which a lost coordinator is tried again */
    struct slot *slots;
    uint32_t nslots;
    struct client *clients;
    size_t nclients;
    /* Between threads, under lock. */
    pthread_mutex_t lock;
    bool stop;
    int new_fd; /* dt_agent_endpoint_reconnect's connection for the loop to take; -1: none */
    uv_sem_t took;
    unsigned long admitted, refused, logged;
};

/* ---- the coordinator's connection ---- */

static int connect_coord(struct dt_agent_endpoint *e, double timeout_s, int *fd)
{
    struct dt_store_options o = {.host = e->host,
                                 .port = e->coord_port,
                                 .token = e->token[0] ? e->token : NULL,
                                 .timeout_s = timeout_s > 0 ? timeout_s : 60};
    struct dt_store *s;
    if (dt_store_connect(&o, &s) < 0)
        return dt_error_prefix("the store endpoint of %s cannot reach the coordinator", e->name);
    if (e->liveness_s > 0)
        dt_store_set_liveness(s, e->liveness_s);
    *fd = dt_store_detach(s);
    return *fd >= 0 ? 0 : dt_error_set(DT_ECONN, "the store endpoint of %s lost the coordinator %s at once",
                                        e->name, e->coord);
}

static void up_closed(uv_handle_t *h) { free(h->data); }

static void close_clients(struct dt_agent_endpoint *e, const char *why);

/* The connection is gone: every client goes too, its channel with it. */
static void up_drop(struct dt_agent_endpoint *e, const char *why)
{
    if (!e->up)
        return;
    uv_close((uv_handle_t *)&e->up->tcp, up_closed);
    e->up = NULL;
    e->upout.len = 0;
    e->upout.failed = false;
    e->hdr_len = 0;
    e->f_left = 0;
    e->up_paused = false;
    size_t n = e->nclients;
    if (why)
        dt_log_error("store endpoint of %s: lost the coordinator %s (%s): closed the %zu connection%s of its "
                     "ranks, whose store calls fail at once instead of waiting",
                     e->name, e->coord, why, n, n == 1 ? "" : "s");
    close_clients(e, NULL);
    memset(e->slots, 0, e->nslots * sizeof *e->slots);
    e->retry_at = uv_now(&e->loop);
}

static void resume_clients(struct dt_agent_endpoint *e);
static void pause_clients(struct dt_agent_endpoint *e);
static void up_resume(struct dt_agent_endpoint *e);

static size_t up_queued(const struct dt_agent_endpoint *e)
{
    return e->up ? uv_stream_get_write_queue_size((const uv_stream_t *)&e->up->tcp) : 0;
}

static void up_written(uv_write_t *req, int status)
{
    struct wreq *w = (struct wreq *)req;
    struct upstream *u = req->handle->data;
    free(w->data);
    free(w);
    struct dt_agent_endpoint *e = u->ep;
    if (e->up != u)
        return;
    if (status < 0)
        up_drop(e, uv_strerror(status));
    else if (e->clients_paused && up_queued(e) <= OUT_PAUSE / 2)
        resume_clients(e);
}

/* Sends what the clients' requests put in upout: at once where the socket
 * takes it, the rest queued without a copy. */
static void up_flush(struct dt_agent_endpoint *e)
{
    struct dt_wire_buf *o = &e->upout;
    if (!e->up || o->len == 0)
        return;
    if (o->failed) {
        up_drop(e, "out of memory for the clients' requests");
        return;
    }
    uv_buf_t b = uv_buf_init((char *)o->p, (unsigned)o->len);
    int n = uv_try_write((uv_stream_t *)&e->up->tcp, &b, 1);
    if (n < 0 && n != UV_EAGAIN) {
        up_drop(e, uv_strerror(n));
        return;
    }
    size_t done = n > 0 ? (size_t)n : 0;
    if (done == o->len) {
        o->len = 0;
        return;
    }
    struct wreq *w = malloc(sizeof *w);
    if (!w) {
        up_drop(e, "out of memory for the clients' requests");
        return;
    }
    w->data = o->p;
    b = uv_buf_init((char *)o->p + done, (unsigned)(o->len - done));
    dt_wire_buf_init(o);
    int rc = uv_write(&w->req, (uv_stream_t *)&e->up->tcp, &b, 1, up_written);
    if (rc < 0) {
        free(w->data);
        free(w);
        up_drop(e, uv_strerror(rc));
        return;
    }
    if (up_queued(e) > OUT_PAUSE)
        pause_clients(e);
}

/* ---- clients ---- */

static void client_freed(uv_handle_t *h)
{
    struct client *cl = h->data;
    free(cl->rbuf);
    dt_wire_buf_free(&cl->out);
    free(cl);
}

/* `tell`: the coordinator is still there and must close the channel. */
static void client_close(struct client *cl, const char *why, bool tell)
{
    struct dt_agent_endpoint *e = cl->ep;
    if (cl->closing)
        return;
    cl->closing = true;
    if (why)
        dt_log_warn("store endpoint of %s: closed the connection of %s: %s", e->name, cl->name, why);
    struct slot *s = &e->slots[cl->chan];
    s->cl = NULL;
    if (tell && s->state == SLOT_OPEN && e->up) {
        dt_wire_put_u8(&e->upout, DT_WIRE_CHANNEL_CLOSE);
        dt_wire_put_u32(&e->upout, cl->chan);
        s->state = SLOT_CLOSING;
    }
    if (cl->prev)
        cl->prev->next = cl->next;
    else
        e->clients = cl->next;
    if (cl->next)
        cl->next->prev = cl->prev;
    e->nclients--;
    uv_close((uv_handle_t *)&cl->tcp, client_freed);
}

static void close_clients(struct dt_agent_endpoint *e, const char *why)
{
    while (e->clients)
        client_close(e->clients, why, false);
}

static void client_written(uv_write_t *req, int status)
{
    struct wreq *w = (struct wreq *)req;
    struct client *cl = req->handle->data;
    struct dt_agent_endpoint *e = cl->ep;
    free(w->data);
    free(w);
    if (status < 0 && !cl->closing)
        client_close(cl, uv_strerror(status), true);
    if (e->up_paused && uv_stream_get_write_queue_size((uv_stream_t *)&cl->tcp) <= OUT_PAUSE / 2)
        up_resume(e);
}

/* Replies gathered for the client during one read of the coordinator's
 * connection, written at once where the socket takes them. */
static void client_flush(struct client *cl)
{
    struct dt_wire_buf *o = &cl->out;
    if (cl->closing || o->len == 0)
        return;
    if (o->failed) {
        client_close(cl, "out of memory for its replies", true);
        return;
    }
    uv_buf_t b = uv_buf_init((char *)o->p, (unsigned)o->len);
    int n = uv_try_write((uv_stream_t *)&cl->tcp, &b, 1);
    if (n < 0 && n != UV_EAGAIN) {
        client_close(cl, uv_strerror(n), true);
        return;
    }
    size_t done = n > 0 ? (size_t)n : 0;
    if (done == o->len) {
        o->len = 0;
        if (o->cap > READ_CHUNK)
            dt_wire_buf_free(o);
        return;
    }
    struct wreq *w = malloc(sizeof *w);
    if (!w) {
        client_close(cl, "out of memory for its replies", true);
        return;
    }
    w->data = o->p;
    b = uv_buf_init((char *)o->p + done, (unsigned)(o->len - done));
    dt_wire_buf_init(o);
    if (uv_write(&w->req, (uv_stream_t *)&cl->tcp, &b, 1, client_written) < 0) {
        free(w->data);
        free(w);
        client_close(cl, "cannot write its replies", true);
    }
}

/* Every whole request in the client's buffer goes up as a CHANNEL frame. */
static void client_serve(struct client *cl)
{
    struct dt_agent_endpoint *e = cl->ep;
    size_t off = 0;
    while (off < cl->rlen && cl->pg.need <= cl->rlen - off) {
        struct dt_wire_request r;
        int rc = dt_wire_decode_step(cl->rbuf + off, cl->rlen - off, &e->lim, &cl->pg, &r);
        if (rc == DT_WIRE_INCOMPLETE)
            break;
        if (rc < 0) {
            client_close(cl, dt_error_last(), true);
            return;
        }
        dt_wire_put_u8(&e->upout, DT_WIRE_CHANNEL);
        dt_wire_put_u32(&e->upout, cl->chan);
        dt_wire_put_bytes(&e->upout, cl->rbuf + off, r.frame_len);
        off += r.frame_len;
        memset(&cl->pg, 0, sizeof cl->pg);
    }
    memmove(cl->rbuf, cl->rbuf + off, cl->rlen - off);
    cl->rlen -= off;
}

static void client_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    struct client *cl = h->data;
    size_t limit = cl->ep->lim.max_frame_bytes + READ_CHUNK;
    if (cl->rcap - cl->rlen < READ_CHUNK && cl->rcap < limit) {
        size_t want = cl->rlen + READ_CHUNK > cl->pg.need ? cl->rlen + READ_CHUNK : cl->pg.need;
        if (want < cl->rcap * 2)
            want = cl->rcap * 2;
        uint8_t *p = realloc(cl->rbuf, want < limit ? want : limit);
        if (p) {
            cl->rbuf = p;
            cl->rcap = want < limit ? want : limit;
        }
    }
    *buf = uv_buf_init((char *)cl->rbuf + cl->rlen, (unsigned)(cl->rcap - cl->rlen));
}

static void client_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    (void)buf;
    struct client *cl = s->data;
    struct dt_agent_endpoint *e = cl->ep;
    if (n == 0 || cl->closing)
        return;
    if (n < 0)
        client_close(cl, n == UV_EOF ? NULL
                         : n == UV_ENOBUFS ? "out of memory for its request"
                                           : uv_strerror((int)n),
                     true);
    else {
        cl->rlen += (size_t)n;
        client_serve(cl);
    }
    up_flush(e);
}

static void pause_clients(struct dt_agent_endpoint *e)
{
    e->clients_paused = true;
    for (struct client *cl = e->clients; cl; cl = cl->next)
        uv_read_stop((uv_stream_t *)&cl->tcp);
}

static void resume_clients(struct dt_agent_endpoint *e)
{
    e->clients_paused = false;
    for (struct client *cl = e->clients; cl; cl = cl->next)
        uv_read_start((uv_stream_t *)&cl->tcp, client_alloc, client_read);
}

/* ---- frames from the coordinator ---- */

static struct client *client_of(struct dt_agent_endpoint *e, uint32_t chan)
{
    if (chan >= e->nslots || e->slots[chan].state != SLOT_OPEN)
        return NULL;
    return e->slots[chan].cl;
}

/* A whole frame was read: what its kind asks for. */
static int frame_done(struct dt_agent_endpoint *e)
{
    struct slot *s = e->f_chan < e->nslots ? &e->slots[e->f_chan] : NULL;
    if (e->f_kind == DT_WIRE_CHAN_CLOSED) {
        if (!s || s->state != SLOT_CLOSING)
            return dt_error_set(DT_EPROTO, "CLOSED for channel %" PRIu32 ", which was not closing", e->f_chan);
        s->state = SLOT_FREE;
    } else if (e->f_kind == DT_WIRE_CHAN_ENDED && s && s->state == SLOT_OPEN) {
        struct client *cl = s->cl;
        char why[REASON_MAX + 1];
        snprintf(why, sizeof why, "%.*s", (int)e->reason.len, (const char *)e->reason.p);
        if (cl) {
            if (!e->coordinator_here)
                dt_log_warn("store endpoint of %s: the coordinator closed the connection of %s: %s", e->name,
                            cl->name, why);
            client_close(cl, NULL, true);
        } else { /* its client left before: the id is still to be closed */
            dt_wire_put_u8(&e->upout, DT_WIRE_CHANNEL_CLOSE);
            dt_wire_put_u32(&e->upout, e->f_chan);
            s->state = SLOT_CLOSING;
        }
    }
    e->hdr_len = 0;
    e->reason.len = 0;
    return 0;
}

/* The bytes of the frame being read: a DATA frame's to its client as they
 * come, an ENDED frame's kept for the log line. */
static int frame_bytes(struct dt_agent_endpoint *e, const uint8_t *p, size_t n)
{
    if (e->f_kind == DT_WIRE_CHAN_DATA) {
        struct client *cl = client_of(e, e->f_chan);
        if (cl && !cl->closing)
            dt_wire_put_raw(&cl->out, p, n);
    } else if (e->f_kind == DT_WIRE_CHAN_ENDED && e->reason.len + n <= REASON_MAX) {
        dt_wire_put_raw(&e->reason, p, n);
    }
    e->f_left -= n;
    return e->f_left == 0 ? frame_done(e) : 0;
}

static int up_parse(struct dt_agent_endpoint *e, const uint8_t *p, size_t n)
{
    while (n > 0) {
        if (e->hdr_len < DT_WIRE_CHAN_HEADER) {
            size_t k = DT_WIRE_CHAN_HEADER - e->hdr_len < n ? DT_WIRE_CHAN_HEADER - e->hdr_len : n;
            memcpy(e->hdr + e->hdr_len, p, k);
            e->hdr_len += k;
            p += k;
            n -= k;
            if (e->hdr_len < DT_WIRE_CHAN_HEADER)
                return 0;
            if (!dt_wire_chan_header(e->hdr, &e->f_chan, &e->f_kind, &e->f_left))
                return dt_error_set(DT_EPROTO, "a channel frame of unknown kind %u", e->f_kind);
            int rc = e->f_left == 0 ? frame_done(e) : 0;
            if (rc)
                return rc;
            continue;
        }
        size_t k = e->f_left < n ? (size_t)e->f_left : n;
        int rc = frame_bytes(e, p, k);
        if (rc)
            return rc;
        p += k;
        n -= k;
    }
    return 0;
}

static void up_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    struct upstream *u = h->data;
    *buf = uv_buf_init((char *)u->ep->ubuf, sizeof u->ep->ubuf);
}

static void up_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    struct upstream *u = s->data;
    struct dt_agent_endpoint *e = u->ep;
    if (n == 0 || e->up != u)
        return;
    if (n < 0) {
        up_drop(e, n == UV_EOF ? "it closed the connection" : uv_strerror((int)n));
        return;
    }
    e->up_in_read = true;
    int rc = up_parse(e, (const uint8_t *)buf->base, (size_t)n);
    e->up_in_read = false;
    if (rc < 0) {
        char why[600];
        snprintf(why, sizeof why, "%s", dt_error_last());
        up_drop(e, why);
        return;
    }
    bool full = false;
    for (struct client *cl = e->clients; cl; cl = cl->next) {
        client_flush(cl);
        full |= !cl->closing && uv_stream_get_write_queue_size((uv_stream_t *)&cl->tcp) > OUT_PAUSE;
    }
    up_flush(e);
    if (full && e->up) {
        e->up_paused = true;
        uv_read_stop((uv_stream_t *)&e->up->tcp);
    }
}

static void up_resume(struct dt_agent_endpoint *e)
{
    e->up_paused = false;
    if (e->up)
        uv_read_start((uv_stream_t *)&e->up->tcp, up_alloc, up_read);
}

static int up_open(struct dt_agent_endpoint *e, int fd)
{
    struct upstream *u = calloc(1, sizeof *u);
    if (!u) {
        close(fd);
        return dt_error_set(DT_ENOMEM, "out of memory for the store endpoint");
    }
    u->ep = e;
    uv_tcp_init(&e->loop, &u->tcp);
    u->tcp.data = u;
    int rc = uv_tcp_open(&u->tcp, fd);
    if (rc < 0)
        close(fd); /* not the handle's */
    else
        rc = uv_read_start((uv_stream_t *)&u->tcp, up_alloc, up_read);
    if (rc < 0) {
        uv_close((uv_handle_t *)&u->tcp, up_closed);
        return dt_error_set(DT_EIO, "store endpoint of %s: %s", e->name, uv_strerror(rc));
    }
    uv_tcp_nodelay(&u->tcp, 1);
    e->up = u;
    if (e->clients_paused)
        resume_clients(e);
    return 0;
}

/* A client came while the coordinator is lost: one try to reach it again,
 * at most once a RETRY_MS, bounded by a second (nothing else is served). */
static bool up_retry(struct dt_agent_endpoint *e)
{
    uint64_t now = uv_now(&e->loop);
    if (now < e->retry_at)
        return false;
    e->retry_at = now + RETRY_MS;
    int fd;
    if (connect_coord(e, 1.0, &fd) < 0 || up_open(e, fd) < 0)
        return false;
    dt_log_info("store endpoint of %s: reached the coordinator %s again", e->name, e->coord);
    return true;
}

/* ---- admitting ---- */

/* "pid 4242 (python3)", or "a process of uid 1001" when no pid is known. */
static void describe(pid_t pid, uint32_t uid, char *out, size_t n)
{
    struct dt_proc_stat st;
    char entry[24];
    snprintf(entry, sizeof entry, "%d", (int)pid);
    if (pid > 0 && dt_proc_stat_read(entry, &st) == 0)
        snprintf(out, n, "pid %d (%.40s)", (int)pid, st.comm);
    else if (pid > 0)
        snprintf(out, n, "pid %d", (int)pid);
    else
        snprintf(out, n, "a process of uid %" PRIu32, uid);
}

/* Whether the kernel says the client is a process of this job; `name` gets
 * what it is, `why` why it is refused. */
static bool admit(struct dt_agent_endpoint *e, int fd, char *name, size_t nn, char *why, size_t wn)
{
    uint32_t uid = 0, ino = 0;
    pid_t pid = -1;
    if (!dt_sock_owner(fd, &uid, &ino)) {
        snprintf(name, nn, "a client the kernel does not know");
        snprintf(why, wn, "its socket is not one of this host and network namespace");
        return false;
    }
    if (uid == e->uid && dt_sock_held_below(e->root, ino, &pid)) {
        describe(pid, uid, name, nn);
        return true;
    }
    /* Who it is, for the log line only (a scan of /proc), and not for every refusal. */
    unsigned long k = e->refused + 1;
    bool logged = k <= LOG_FIRST || k % LOG_EVERY == 0;
    describe(logged ? dt_sock_holder(ino) : -1, uid, name, nn);
    if (uid != e->uid)
        snprintf(why, wn, "its socket belongs to uid %" PRIu32 ", not to the job's user (uid %" PRIu32 ")", uid,
                 e->uid);
    else
        snprintf(why, wn, "it is not a process of this job (only the job's ranks and the processes they "
                          "start may use the job's store)");
    return false;
}

static void refuse(struct dt_agent_endpoint *e, struct client *cl, const char *who, const char *why)
{
    pthread_mutex_lock(&e->lock);
    unsigned long k = ++e->refused;
    pthread_mutex_unlock(&e->lock);
    if (k <= LOG_FIRST || k % LOG_EVERY == 0)
        dt_log_warn("store endpoint of %s (127.0.0.1:%d): refused %s: %s%s", e->name, e->port, who, why,
                    k == LOG_FIRST ? " (further refusals: one line in 100)" : "");
    uv_close((uv_handle_t *)&cl->tcp, client_freed);
}

static int take_slot(struct dt_agent_endpoint *e, uint32_t *id)
{
    for (uint32_t i = 0; i < e->nslots; i++)
        if (e->slots[i].state == SLOT_FREE) {
            *id = i;
            return 0;
        }
    if (e->nslots >= MAX_CHANNELS)
        return dt_error_set(DT_ENOMEM, "%u connections at once, the most a node's endpoint carries", MAX_CHANNELS);
    uint32_t cap = e->nslots ? e->nslots * 2 : 16;
    struct slot *p = realloc(e->slots, cap * sizeof *p);
    if (!p)
        return dt_error_set(DT_ENOMEM, "out of memory");
    memset(p + e->nslots, 0, (cap - e->nslots) * sizeof *p);
    *id = e->nslots;
    e->slots = p;
    e->nslots = cap;
    return 0;
}

/* An admitted client gets a channel and is read from. */
static void client_start(struct dt_agent_endpoint *e, struct client *cl)
{
    if ((!e->up && !up_retry(e)) || take_slot(e, &cl->chan) < 0) {
        refuse(e, cl, cl->name,
               e->up ? dt_error_last() : "the coordinator cannot be reached (the job is ending, or node 0 is lost)");
        return;
    }
    e->slots[cl->chan] = (struct slot){.cl = cl, .state = SLOT_OPEN};
    dt_wire_put_u8(&e->upout, DT_WIRE_CHANNEL_OPEN);
    dt_wire_put_u32(&e->upout, cl->chan);
    char name[300];
    int len = snprintf(name, sizeof name, "%s of %s", cl->name, e->name);
    dt_wire_put_bytes(&e->upout, name, (size_t)len < sizeof name ? (size_t)len : sizeof name - 1);
    cl->next = e->clients;
    if (e->clients)
        e->clients->prev = cl;
    e->clients = cl;
    e->nclients++;
    pthread_mutex_lock(&e->lock);
    e->admitted++;
    pthread_mutex_unlock(&e->lock);
    uv_tcp_nodelay(&cl->tcp, 1);
    if (!e->clients_paused)
        uv_read_start((uv_stream_t *)&cl->tcp, client_alloc, client_read);
    up_flush(e);
}

static void on_connection(uv_stream_t *server, int status)
{
    struct dt_agent_endpoint *e = server->data;
    if (status < 0)
        return;
    struct client *cl = calloc(1, sizeof *cl);
    if (!cl)
        return;
    cl->ep = e;
    dt_wire_buf_init(&cl->out);
    uv_tcp_init(&e->loop, &cl->tcp);
    cl->tcp.data = cl;
    uv_os_fd_t fd;
    char why[256];
    if (uv_accept(server, (uv_stream_t *)&cl->tcp) < 0 || uv_fileno((uv_handle_t *)&cl->tcp, &fd) < 0) {
        uv_close((uv_handle_t *)&cl->tcp, client_freed);
        return;
    }
    if (!admit(e, fd, cl->name, sizeof cl->name, why, sizeof why))
        refuse(e, cl, cl->name, why);
    else
        client_start(e, cl);
}

/* ---- the loop's thread ---- */

static void on_async(uv_async_t *a)
{
    struct dt_agent_endpoint *e = a->data;
    pthread_mutex_lock(&e->lock);
    bool stop = e->stop;
    int fd = e->new_fd;
    e->new_fd = -1;
    pthread_mutex_unlock(&e->lock);
    if (fd >= 0) {
        if (e->up)
            dt_log_debug("store endpoint of %s: a fresh coordinator replaces the last one", e->name);
        up_drop(e, NULL);
        if (up_open(e, fd) < 0)
            dt_log_error("%s", dt_error_last());
        uv_sem_post(&e->took);
    }
    if (stop) {
        up_drop(e, NULL);
        uv_close((uv_handle_t *)&e->listener, NULL);
        uv_close((uv_handle_t *)&e->async, NULL);
    }
}

static void loop_main(void *arg)
{
    struct dt_agent_endpoint *e = arg;
    dt_proc_thread_block_sigpipe();
    uv_run(&e->loop, UV_RUN_DEFAULT);
}

static int listen_local(struct dt_agent_endpoint *e, int port)
{
    struct sockaddr_in a;
    uv_ip4_addr("127.0.0.1", port, &a);
    int rc = uv_tcp_bind(&e->listener, (const struct sockaddr *)&a, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&e->listener, 4096, on_connection);
    if (rc < 0)
        return dt_error_set(DT_EIO,
                            "the store endpoint of %s cannot listen on 127.0.0.1:%d (the ranks' MASTER_PORT): %s",
                            e->name, port, uv_strerror(rc));
    struct sockaddr_storage got;
    int len = sizeof got;
    uv_tcp_getsockname(&e->listener, (struct sockaddr *)&got, &len);
    e->port = ntohs(((struct sockaddr_in *)&got)->sin_port);
    return 0;
}

static void endpoint_free(struct dt_agent_endpoint *e)
{
    pthread_mutex_destroy(&e->lock);
    uv_sem_destroy(&e->took);
    dt_wire_buf_free(&e->upout);
    dt_wire_buf_free(&e->reason);
    free(e->slots);
    memset(e->token, 0, sizeof e->token);
    free(e);
}

static void configure(struct dt_agent_endpoint *e, const struct dt_agent_endpoint_config *cfg)
{
    e->root = cfg->root > 0 ? cfg->root : getpid();
    e->uid = (uint32_t)geteuid();
    e->new_fd = -1;
    snprintf(e->name, sizeof e->name, "%s", cfg->name && *cfg->name ? cfg->name : "this node");
    snprintf(e->host, sizeof e->host, "%s", cfg->coord_host);
    e->coord_port = cfg->coord_port;
    snprintf(e->coord, sizeof e->coord, strchr(e->host, ':') ? "[%s]:%d" : "%s:%d", e->host, e->coord_port);
    snprintf(e->token, sizeof e->token, "%s", cfg->token ? cfg->token : "");
    e->liveness_s = cfg->liveness_s;
    e->coordinator_here = cfg->coordinator_here;
    /* A CHANNEL frame is the request plus 13 bytes, within the coordinator's frame limit. */
    e->lim = (struct dt_wire_limits){.max_frame_bytes = DT_WIRE_DEFAULT_MAX_FRAME - 13,
                                     .max_key_bytes = DT_WIRE_DEFAULT_MAX_KEY,
                                     .max_value_bytes = DT_WIRE_DEFAULT_MAX_VALUE,
                                     .max_keys = DT_WIRE_DEFAULT_MAX_KEYS};
    pthread_mutex_init(&e->lock, NULL);
    uv_sem_init(&e->took, 0);
    dt_wire_buf_init(&e->upout);
    dt_wire_buf_init(&e->reason);
}

int dt_agent_endpoint_start(const struct dt_agent_endpoint_config *cfg, struct dt_agent_endpoint **out)
{
    *out = NULL;
    struct dt_agent_endpoint *e = calloc(1, sizeof *e);
    if (!e)
        return dt_error_set(DT_ENOMEM, "out of memory for the store endpoint");
    configure(e, cfg);
    int fd = -1;
    int rc = connect_coord(e, cfg->connect_timeout_s, &fd);
    if (rc) {
        endpoint_free(e);
        return rc;
    }
    uv_loop_init(&e->loop);
    uv_tcp_init(&e->loop, &e->listener);
    uv_async_init(&e->loop, &e->async, on_async);
    e->listener.data = e;
    e->async.data = e;
    rc = listen_local(e, cfg->port);
    if (rc == 0)
        rc = up_open(e, fd);
    else
        close(fd);
    if (rc == 0 && uv_thread_create(&e->thread, loop_main, e) != 0)
        rc = dt_error_set(DT_EIO, "the store endpoint of %s cannot start its thread", e->name);
    if (rc) {
        up_drop(e, NULL);
        uv_close((uv_handle_t *)&e->listener, NULL);
        uv_close((uv_handle_t *)&e->async, NULL);
        uv_run(&e->loop, UV_RUN_DEFAULT);
        uv_loop_close(&e->loop);
        endpoint_free(e);
        return rc;
    }
    e->thread_started = true;
    *out = e;
    return 0;
}

int dt_agent_endpoint_port(const struct dt_agent_endpoint *e) { return e->port; }

int dt_agent_endpoint_reconnect(struct dt_agent_endpoint *e, double timeout_s)
{
    int fd;
    int rc = connect_coord(e, timeout_s, &fd);
    if (rc)
        return rc;
    pthread_mutex_lock(&e->lock);
    e->new_fd = fd;
    pthread_mutex_unlock(&e->lock);
    uv_async_send(&e->async);
    uv_sem_wait(&e->took);
    return 0;
}

void dt_agent_endpoint_counts(struct dt_agent_endpoint *e, unsigned long *admitted, unsigned long *refused)
{
    pthread_mutex_lock(&e->lock);
    *admitted = e->admitted;
    *refused = e->refused;
    pthread_mutex_unlock(&e->lock);
}

void dt_agent_endpoint_stop(struct dt_agent_endpoint *e)
{
    if (!e)
        return;
    pthread_mutex_lock(&e->lock);
    e->stop = true;
    pthread_mutex_unlock(&e->lock);
    uv_async_send(&e->async);
    uv_thread_join(&e->thread);
    uv_loop_close(&e->loop);
    endpoint_free(e);
}
