/* store_client.c - the store client's connection: connect, handshake, deadline I/O.
 *
 * Connecting retries (10 ms, doubling to 250 ms) until the deadline while
 * nothing listens yet, because ranks routinely start before the coordinator
 * is up.  The handshake is PyTorch's VALIDATE (op 0, magic 0x3C85F7CE, no
 * reply) followed in the same write by AUTH with the job token (reply: one
 * byte) or, with auth: none, by PING (reply: the nonce), so one round trip
 * proves a live coordinator either way.
 *
 * The socket stays non-blocking; every wait is a poll() bounded by the
 * operation's deadline.  After any failure the connection is dropped, since
 * replies would no longer line up with requests; the next call reconnects.
 *
 * Not for the operations themselves (store_client_ops.c,
 * store_client_members.c).
 */
#include "comm/store_client_internal.h"

#include "base/error.h"
#include "comm/resolve.h"
#include "base/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Replies larger than this are refused rather than allocated. */
#define DT_STORE_MAX_REPLY ((uint64_t)1 << 30)

/* ---- the connection ---- */

static int wait_fd(int fd, short ev, double deadline)
{
    for (;;) {
        double left = deadline - dt_clock_s();
        if (left <= 0)
            return 0;
        struct pollfd p = {.fd = fd, .events = ev};
        int n = poll(&p, 1, (int)(left * 1000) + 1);
        if (n > 0 || (n < 0 && errno != EINTR))
            return n;
    }
}

/* One connect attempt; 0, or errno. */
static int try_connect(const struct addrinfo *ai, double deadline, int *fd_out)
{
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return errno;
    int err = 0;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
        err = errno;
        if (err == EINPROGRESS) {
            err = ETIMEDOUT;
            if (wait_fd(fd, POLLOUT, deadline) > 0) {
                socklen_t len = sizeof err;
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
            }
        }
    }
    if (err) {
        close(fd);
        return err;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    *fd_out = fd;
    return 0;
}

/* Not in every libc's headers yet (linux/tcp.h of 6.15). */
#ifndef TCP_RTO_MAX_MS
#define TCP_RTO_MAX_MS 44
#endif

int dt_store_liveness_fd(int fd, double seconds)
{
    int one = 1, probe_s = 1, count = 127; /* the most; TCP_USER_TIMEOUT decides anyway */
    unsigned user_ms = (unsigned)(seconds * 1000);
    int rto_ms = 1000; /* the kernel's floor for this option */
    if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one) < 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &probe_s, sizeof probe_s) < 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &probe_s, sizeof probe_s) < 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count) < 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_ms, sizeof user_ms) < 0)
        return errno;
    setsockopt(fd, IPPROTO_TCP, TCP_RTO_MAX_MS, &rto_ms, sizeof rto_ms);
    return 0;
}

static int open_socket(struct dt_store *s, double deadline)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    char port[16];
    snprintf(port, sizeof port, "%d", s->port);
    double backoff = 0.01;
    int err = 0;
    for (;;) {
        struct addrinfo *res = NULL;
        int g = dt_resolve(s->host, port, &hints, &res); /* DTRAIN_HOSTS_FILE first */
        if (g == 0) {
            for (struct addrinfo *ai = res; ai; ai = ai->ai_next)
                if ((err = try_connect(ai, deadline, &s->fd)) == 0)
                    break;
            freeaddrinfo(res);
            if (err == 0)
                return 0;
        } else if (g != EAI_AGAIN) {
            return dt_error_set(DT_ECONN, "coordinator %s: cannot resolve '%s': %s", s->peer,
                                s->host, dt_resolve_strerror(g));
        }
        double left = deadline - dt_clock_s();
        if (left <= 0)
            break;
        struct timespec ts = {0, (long)((backoff < left ? backoff : left) * 1e9)};
        nanosleep(&ts, NULL);
        backoff = backoff * 2 > 0.25 ? 0.25 : backoff * 2;
    }
    return dt_error_set(DT_ECONN, "coordinator %s did not accept a connection in %gs (last error: %s)",
                        s->peer, s->timeout_s, err ? strerror(err) : "name not resolved");
}

static int handshake(struct dt_store *s, double deadline)
{
    s->req.len = 0;
    s->req.failed = false;
    s->op_timeout_s = s->timeout_s;
    dt_wire_put_u8(&s->req, DT_WIRE_VALIDATE);
    dt_wire_put_u32(&s->req, DT_WIRE_MAGIC);
    uint32_t nonce = (uint32_t)getpid();
    if (s->token) {
        dt_wire_put_u8(&s->req, DT_WIRE_AUTH);
        dt_wire_put_bytes(&s->req, s->token, strlen(s->token));
        s->op = "AUTH";
    } else {
        dt_wire_put_u8(&s->req, DT_WIRE_PING);
        dt_wire_put_u32(&s->req, nonce);
        s->op = "PING";
    }
    s->what[0] = 0;
    int rc = dt_store__send(s, deadline);
    if (rc)
        return rc;
    uint8_t r[4];
    rc = dt_store__recv(s, r, s->token ? 1 : 4, deadline);
    if (rc && s->token && dt_error_code() == DT_ECONN)
        return dt_error_prefix("presenting the job token (a PyTorch TCPStore server takes none: "
                               "run the job with rendezvous: {auth: none})");
    if (rc)
        return rc;
    if (s->token && r[0] != DT_WIRE_OK) {
        dt_store__drop(s);
        return dt_error_set(DT_EAUTH, "coordinator %s refused the job token (not this job's)", s->peer);
    }
    if (!s->token && dt_wire_load_u32(r) != nonce) {
        dt_store__drop(s);
        return dt_error_set(DT_EPROTO, "coordinator %s answered PING with the wrong nonce", s->peer);
    }
    return 0;
}

static int reconnect(struct dt_store *s)
{
    double deadline = dt_clock_s() + s->timeout_s;
    int rc = open_socket(s, deadline);
    if (rc == 0 && s->liveness_s > 0)
        dt_store_liveness_fd(s->fd, s->liveness_s);
    return rc ? rc : handshake(s, deadline);
}

int dt_store_connect(const struct dt_store_options *opts, struct dt_store **out)
{
    *out = NULL;
    if (!opts->host || !*opts->host || opts->port <= 0 || opts->port > 65535)
        return dt_error_set(DT_EINVAL, "store: coordinator address '%s:%d' is not host:port",
                            opts->host ? opts->host : "", opts->port);
    struct dt_store *s = calloc(1, sizeof *s);
    if (!s)
        return dt_error_set(DT_ENOMEM, "store: out of memory");
    s->fd = -1;
    snprintf(s->host, sizeof s->host, "%s", opts->host);
    s->port = opts->port;
    snprintf(s->peer, sizeof s->peer, strchr(s->host, ':') ? "[%s]:%d" : "%s:%d", s->host, s->port);
    s->timeout_s = opts->timeout_s > 0 ? opts->timeout_s : 60;
    if (opts->token && *opts->token && !(s->token = strdup(opts->token))) {
        free(s);
        return dt_error_set(DT_ENOMEM, "store: out of memory");
    }
    int rc = reconnect(s);
    if (rc) {
        dt_store_close(s);
        return rc;
    }
    *out = s;
    return 0;
}

int dt_store_connect_env(double timeout_s, struct dt_store **out)
{
    *out = NULL;
    const char *addr = getenv("DTRAIN_COORD_ADDR");
    if (!addr || !*addr)
        return dt_error_set(DT_EINVAL, "DTRAIN_COORD_ADDR is not set (the agent sets it for every "
                                       "rank: host:port of the coordinator)");
    const char *colon = strrchr(addr, ':');
    char *end = NULL;
    long port = colon ? strtol(colon + 1, &end, 10) : 0;
    if (!colon || colon == addr || !end || *end || port <= 0 || port > 65535)
        return dt_error_set(DT_EINVAL, "DTRAIN_COORD_ADDR='%s' is not host:port", addr);
    char host[256];
    size_t hlen = (size_t)(colon - addr);
    if (hlen >= sizeof host)
        return dt_error_set(DT_EINVAL, "DTRAIN_COORD_ADDR: host name too long");
    /* "[::1]:29500" names an IPv6 address. */
    if (addr[0] == '[' && hlen >= 2 && addr[hlen - 1] == ']') {
        memcpy(host, addr + 1, hlen - 2);
        host[hlen - 2] = 0;
    } else {
        memcpy(host, addr, hlen);
        host[hlen] = 0;
    }
    const char *token = getenv("DTRAIN_JOB_TOKEN");
    struct dt_store_options o = {.host = host, .port = (int)port,
                                 .token = token && *token ? token : NULL, .timeout_s = timeout_s};
    return dt_store_connect(&o, out);
}

void dt_store__drop(struct dt_store *s)
{
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
}

void dt_store_close(struct dt_store *s)
{
    if (!s)
        return;
    dt_store__drop(s);
    if (s->token)
        memset(s->token, 0, strlen(s->token));
    free(s->token);
    dt_wire_buf_free(&s->req);
    free(s);
}

int dt_store_detach(struct dt_store *s)
{
    int fd = s->fd;
    s->fd = -1;
    dt_store_close(s);
    return fd;
}

double dt_store_set_timeout(struct dt_store *s, double timeout_s)
{
    double was = s->timeout_s;
    if (timeout_s > 0)
        s->timeout_s = timeout_s;
    return was;
}

void dt_store_set_liveness(struct dt_store *s, double seconds)
{
    if (seconds <= 0)
        return;
    s->liveness_s = seconds;
    if (s->fd >= 0)
        dt_store_liveness_fd(s->fd, seconds);
}

const char *dt_store_peer(const struct dt_store *s)
{
    return s->peer;
}

/* ---- one request's bytes ---- */

int dt_store__begin(struct dt_store *s, uint8_t op, const char *key, int nkeys)
{
    s->op = dt_wire_op_name(op);
    if (key && nkeys > 1)
        snprintf(s->what, sizeof s->what, " for keys '%.60s' and %d more", key, nkeys - 1);
    else if (key)
        snprintf(s->what, sizeof s->what, " for key '%.80s'", key);
    else
        s->what[0] = 0;
    if (s->fd < 0) {
        int rc = reconnect(s);
        s->op = dt_wire_op_name(op);
        if (rc)
            return rc;
    }
    s->req.len = 0;
    s->req.failed = false;
    s->op_timeout_s = s->timeout_s;
    dt_wire_put_u8(&s->req, op);
    return 0;
}

int dt_store__send(struct dt_store *s, double deadline)
{
    if (s->req.failed) {
        s->req.failed = false;
        return dt_error_set(DT_ENOMEM, "store: out of memory building %s%s", s->op, s->what);
    }
    size_t off = 0;
    while (off < s->req.len) {
        ssize_t n = send(s->fd, s->req.p + off, s->req.len - off, MSG_NOSIGNAL);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && wait_fd(s->fd, POLLOUT, deadline) > 0)
            continue;
        int err = n < 0 && errno != EAGAIN ? errno : ETIMEDOUT;
        dt_store__drop(s);
        return dt_error_set(DT_ECONN, "coordinator %s: sending %s%s: %s", s->peer, s->op, s->what,
                            strerror(err));
    }
    return 0;
}

int dt_store__recv_i64(struct dt_store *s, int64_t *v, double deadline)
{
    uint8_t b[8];
    int rc = dt_store__recv(s, b, 8, deadline);
    if (rc == 0) {
        uint64_t u = dt_wire_load_u64(b);
        memcpy(v, &u, sizeof *v);
    }
    return rc;
}

int dt_store__recv(struct dt_store *s, void *buf, size_t n, double deadline)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = recv(s->fd, (char *)buf + got, n - got, 0);
        if (r > 0) {
            got += (size_t)r;
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (wait_fd(s->fd, POLLIN, deadline) > 0)
                continue;
            if (!s->keep_on_timeout)
                dt_store__drop(s);
            return dt_error_set(DT_ETIMEDOUT, "coordinator %s did not answer %s%s in %gs", s->peer,
                                s->op, s->what, s->op_timeout_s);
        }
        int err = r < 0 ? errno : 0;
        dt_store__drop(s);
        if (err == ETIMEDOUT) /* dt_store_set_liveness's TCP_USER_TIMEOUT, or the kernel's own */
            return dt_error_set(DT_ECONN,
                                "coordinator %s stopped acknowledging during %s%s: its host or "
                                "the network went away (TCP timed out)",
                                s->peer, s->op, s->what);
        return dt_error_set(DT_ECONN,
                            "coordinator %s closed the connection during %s%s (%s; its "
                            "log says why: job token, a limit, or a bad request)",
                            s->peer, s->op, s->what, err ? strerror(err) : "end of stream");
    }
    return 0;
}

int dt_store__recv_bytes(struct dt_store *s, void **out, size_t *len, double deadline)
{
    uint8_t l[8];
    int rc = dt_store__recv(s, l, 8, deadline);
    if (rc)
        return rc;
    uint64_t n = dt_wire_load_u64(l);
    if (n > DT_STORE_MAX_REPLY) {
        dt_store__drop(s);
        return dt_error_set(DT_EPROTO, "coordinator %s answered %s%s with %llu bytes (over 1 GiB)",
                            s->peer, s->op, s->what, (unsigned long long)n);
    }
    char *p = malloc((size_t)n + 1);
    if (!p) {
        dt_store__drop(s);
        return dt_error_set(DT_ENOMEM, "store: out of memory for a %llu-byte value",
                            (unsigned long long)n);
    }
    if ((rc = dt_store__recv(s, p, (size_t)n, deadline)) != 0) {
        free(p);
        return rc;
    }
    p[n] = 0;
    *out = p;
    *len = (size_t)n;
    return 0;
}
