/* tcp.c - the TCP transport: bootstrap of a full mesh through the store, and
 * the step engine that streams blocks to one peer while receiving (and
 * reducing) blocks from another, under the collective's deadline.
 *
 * Bootstrap: each rank listens on an ephemeral port, publishes "ip:port"
 * under <prefix>tcp/<rank>, then connects to every lower rank (retrying
 * refused connects until the deadline) and accepts every higher rank.  The
 * connector sends a hello {magic, rank, world, prefix hash} so a stray or
 * stale connection is refused.  The advertised ip is the local address that
 * routes to the coordinator (a connected UDP socket tells us without sending
 * anything), or DTRAIN_COMM_HOST.
 *
 * Not for the collectives' algorithms (tcp_coll.c).
 */
#include "comm/tcp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/env.h"
#include "base/error.h"
#include "comm/reduce.h"
#include "comm/store.h"
#include "base/clock.h"

struct hello {
    uint32_t magic, rank, world, nonce;
};

static uint32_t hash_str(const char *s)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

/* CPUs the local ranks can share (as shm.c): a process pinned to one CPU
 * of several was pinned by a launcher that gives each rank its own, so count
 * the machine's then. */
static int cpus_allowed(void)
{
    cpu_set_t set;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (sched_getaffinity(0, sizeof set, &set) == 0 && (CPU_COUNT(&set) > 1 || online <= 1))
        return CPU_COUNT(&set);
    return online > 0 ? (int)online : 1;
}

/* No Nagle (a small step must leave at once), non-blocking (the engine
 * polls), and socket buffers of DTRAIN_TCP_SOCKBUF_BYTES when set (0, the
 * default, leaves the kernel's autotuning alone). */
static void tune_socket(const struct dt_tcp *t, int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    if (t->sockbuf > 0) {
        int buf = (int)t->sockbuf;
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
    }
}

/* The local address that routes to the coordinator (no packet is sent). */
static void local_ip(const char *coord, char *ip, size_t n)
{
    const char *env = getenv("DTRAIN_COMM_HOST");
    snprintf(ip, n, "%s", env && *env ? env : "127.0.0.1");
    if ((env && *env) || !coord)
        return;
    char host[256];
    snprintf(host, sizeof host, "%s", coord);
    char *colon = strrchr(host, ':');
    if (colon)
        *colon = 0;
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_DGRAM}, *res = NULL;
    if (getaddrinfo(host, "9", &hints, &res) != 0 || !res)
        return;
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in me;
    socklen_t len = sizeof me;
    if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
        getsockname(fd, (struct sockaddr *)&me, &len) == 0)
        inet_ntop(AF_INET, &me.sin_addr, ip, (socklen_t)n);
    if (fd >= 0)
        close(fd);
    freeaddrinfo(res);
}

static int listen_any(struct dt_tcp *t, int *fd_out, int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, t->world + 8) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) < 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return dt_error_set_errno(DT_EIO, e, "rank %d: tcp bootstrap: cannot listen", t->rank);
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    *fd_out = fd;
    *port = ntohs(a.sin_port);
    return 0;
}

/* Waits for fd to become ready for `events` until the deadline: 1 ready, 0 timed out. */
static int wait_fd(int fd, short events, double deadline)
{
    for (;;) {
        double left = deadline - dt_clock_s();
        if (left <= 0)
            return 0;
        struct pollfd p = {.fd = fd, .events = events};
        int r = poll(&p, 1, (int)(left * 1000) + 1);
        if (r > 0)
            return 1;
        if (r < 0 && errno != EINTR)
            return -1;
    }
}

static int connect_peer(struct dt_tcp *t, int peer, uint32_t nonce, double deadline)
{
    char host[64];
    snprintf(host, sizeof host, "%s", t->addr[peer]);
    char *colon = strrchr(host, ':');
    if (!colon)
        return dt_error_set(DT_EPROTO, "rank %d: tcp bootstrap: peer rank %d published a bad address '%s'",
                            t->rank, peer, t->addr[peer]);
    *colon = 0;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    if (inet_pton(AF_INET, host, &a.sin_addr) != 1)
        return dt_error_set(DT_EPROTO, "rank %d: tcp bootstrap: peer rank %d published a bad address '%s'",
                            t->rank, peer, t->addr[peer]);
    int err = 0;
    while (dt_clock_s() < deadline) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return dt_error_set_errno(DT_EIO, errno, "rank %d: tcp bootstrap: socket", t->rank);
        fcntl(fd, F_SETFL, O_NONBLOCK);
        int r = connect(fd, (struct sockaddr *)&a, sizeof a);
        if (r < 0 && errno == EINPROGRESS && wait_fd(fd, POLLOUT, deadline) > 0) {
            socklen_t l = sizeof err;
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l);
            r = err ? -1 : 0;
        } else if (r < 0)
            err = errno;
        if (r == 0) {
            struct hello h = {DT_TCP_MAGIC, (uint32_t)t->rank, (uint32_t)t->world, nonce};
            if (wait_fd(fd, POLLOUT, deadline) > 0 && send(fd, &h, sizeof h, MSG_NOSIGNAL) == sizeof h) {
                tune_socket(t, fd);
                t->fd[peer] = fd;
                return 0;
            }
            err = errno;
        }
        close(fd);
        usleep(10000);
    }
    return dt_error_set(DT_ECONN, "rank %d: tcp bootstrap: could not connect to peer rank %d at %s within %.1f s%s%s",
                        t->rank, peer, t->addr[peer], t->timeout_s, err ? ": " : "", err ? strerror(err) : "");
}

static int accept_peers(struct dt_tcp *t, int lfd, uint32_t nonce, double deadline)
{
    int missing = t->world - 1 - t->rank;
    while (missing > 0) {
        if (wait_fd(lfd, POLLIN, deadline) <= 0) {
            char list[256] = "";
            for (int p = t->rank + 1; p < t->world; p++)
                if (t->fd[p] < 0 && strlen(list) < sizeof list - 16)
                    snprintf(list + strlen(list), sizeof list - strlen(list), "%s%d", *list ? ", " : "", p);
            return dt_error_set(DT_ETIMEDOUT, "rank %d: tcp bootstrap: peer rank(s) %s did not connect within %.1f s",
                                t->rank, list, t->timeout_s);
        }
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        struct hello h;
        if (wait_fd(fd, POLLIN, deadline) <= 0 || recv(fd, &h, sizeof h, MSG_WAITALL) != sizeof h ||
            h.magic != DT_TCP_MAGIC || h.nonce != nonce || (int)h.world != t->world || (int)h.rank <= t->rank ||
            (int)h.rank >= t->world || t->fd[h.rank] >= 0) {
            close(fd); /* not one of ours (stale communicator, scanner): ignore it */
            continue;
        }
        tune_socket(t, fd);
        t->fd[h.rank] = fd;
        missing--;
    }
    return 0;
}

static int alloc_state(struct dt_tcp *t, const struct dt_comm_options *o)
{
    t->rank = o->rank;
    t->world = o->world;
    t->timeout_s = o->timeout_s;
    t->ncpus = cpus_allowed();
    uint64_t seg, small, spin_us, slice, halving, sockbuf;
    bool pof2 = (t->world & (t->world - 1)) == 0;
    /* Halving-doubling saves 2(p-1) - 2 lg p dependent steps over the ring:
     * none at p = 2; in a power-of-two world of 4 or more it measured 1.3-1.6x
     * faster than the ring at 4-32 MiB with 4 ranks on 2 cores and even at
     * 64 MiB, where the switch to the ring therefore makes no cliff
     * (docs/bench.md).
     * Elsewhere the fold sends whole vectors (2S more for the folding ranks):
     * ring unless DTRAIN_TCP_HALVING_BYTES asks for it. */
    int rc = 0;
    if ((rc = dt_env_u64("DTRAIN_TCP_SEGMENT_BYTES", 256 << 10, 64, 1u << 30, &seg)) < 0 ||
        (rc = dt_env_u64("DTRAIN_TCP_SMALL_BYTES", 64 << 10, 8, 1u << 30, &small)) < 0 ||
        /* more ranks than CPUs here: by default no spin, it would hold a peer's CPU */
        (rc = dt_env_u64("DTRAIN_TCP_SPIN_US", o->local_world > t->ncpus ? 0 : DT_TCP_SPIN_US, 0, 10000000,
                         &spin_us)) < 0 ||
        (rc = dt_env_u64("DTRAIN_TCP_SLICE_BYTES", 512 << 10, 1, UINT64_MAX, &slice)) < 0 ||
        (rc = dt_env_u64("DTRAIN_TCP_HALVING_BYTES", pof2 && t->world >= 4 ? 64u << 20 : 0, 0, UINT64_MAX,
                         &halving)) < 0 ||
        (rc = dt_env_u64("DTRAIN_TCP_SOCKBUF_BYTES", 0, 0, 1u << 30, &sockbuf)) < 0)
        return dt_error_prefix("rank %d: tcp", t->rank);
    t->seg_bytes = (size_t)seg & ~(size_t)7;
    t->small_bytes = (size_t)small & ~(size_t)7;
    t->spin_s = (double)spin_us * 1e-6;
    t->slice_bytes = (size_t)slice;
    t->halving_bytes = (size_t)halving;
    t->sockbuf = (size_t)sockbuf;
    t->max_blocks = 1 + DT_TCP_MAX_SLICES * 2 * (t->world - 1) + 2 * t->world + 4;
    t->fd = malloc(sizeof *t->fd * (size_t)t->world);
    t->addr = calloc((size_t)t->world, sizeof *t->addr);
    t->processed = calloc((size_t)t->max_blocks, sizeof *t->processed);
    t->out = calloc((size_t)t->max_blocks, sizeof *t->out);
    t->in = calloc((size_t)t->max_blocks, sizeof *t->in);
    t->last_pos = calloc(2 * (size_t)t->world, sizeof *t->last_pos);
    t->uaddr = calloc((size_t)t->world, sizeof *t->uaddr);
    t->heard = calloc((size_t)t->world, 1);
    t->suspected = malloc(sizeof *t->suspected * (size_t)t->world);
    t->notice_msg = calloc((size_t)t->world, sizeof *t->notice_msg);
    size_t hb = sizeof(struct dt_tcp_hdr);
    t->stage = malloc(t->seg_bytes + t->small_bytes + hb);
    t->small = malloc(t->small_bytes + hb);
    t->abort_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (!t->fd || !t->addr || !t->processed || !t->out || !t->in || !t->last_pos || !t->uaddr || !t->heard || !t->suspected || !t->notice_msg || !t->stage || !t->small || t->abort_fd < 0)
        return dt_error_set(DT_ENOMEM, "rank %d: tcp: out of memory", t->rank);
    memset(t->stage, 0, t->seg_bytes + t->small_bytes + hb); /* touch once, not in the step loop */
    memset(t->small, 0, t->small_bytes + hb);
    for (int i = 0; i < t->world; i++)
        t->fd[i] = t->suspected[i] = -1;
    t->suspect = -1;
    return 0;
}

/* Splits a peer's published "ip:port:uport" into t->addr[p] ("ip:port", what
 * connect_peer() and messages use) and its notice address. */
static void notice_addr(struct dt_tcp *t, int p)
{
    char *colon = strrchr(t->addr[p], ':');
    if (!colon || colon == strchr(t->addr[p], ':'))
        return; /* no notice port: connect_peer() reports the bad address */
    int uport = atoi(colon + 1);
    *colon = 0;
    char host[64];
    snprintf(host, sizeof host, "%s", t->addr[p]);
    char *c = strrchr(host, ':');
    *c = 0;
    t->uaddr[p].sin_family = AF_INET;
    if (uport > 0 && uport < 65536 && inet_pton(AF_INET, host, &t->uaddr[p].sin_addr) == 1)
        t->uaddr[p].sin_port = htons((uint16_t)uport);
}

/* Publishes our address, reads everyone's, connects the mesh. */
static int bootstrap(struct dt_tcp *t, const struct dt_comm_options *o)
{
    double deadline = dt_clock_s() + o->timeout_s;
    int lfd = -1, port = 0, uport = 0, rc;
    if ((rc = dt_tcp_fault_open(t, &uport)) < 0 || (rc = listen_any(t, &lfd, &port)) < 0)
        return rc;
    char ip[64], key[256], val[96];
    local_ip(o->store ? dt_store_peer(o->store) : NULL, ip, sizeof ip);
    snprintf(key, sizeof key, "%stcp/%d", o->key_prefix, t->rank);
    /* "ip:port:uport": the mesh's listener, then the failure-notice socket */
    int n = snprintf(val, sizeof val, "%s:%d:%d", ip, port, uport);
    if ((rc = dt_store_set(o->store, key, val, (size_t)n)) < 0)
        goto out;
    for (int p = 0; p < t->world && rc == 0; p++) {
        if (p == t->rank)
            continue;
        snprintf(key, sizeof key, "%stcp/%d", o->key_prefix, p);
        const char *keys[1] = {key};
        void *v = NULL;
        size_t len = 0;
        double left = deadline - dt_clock_s();
        rc = dt_store_wait(o->store, keys, 1, left > 0 ? left : 0.001);
        if (rc == 0)
            rc = dt_store_get(o->store, key, &v, &len);
        if (rc < 0) {
            dt_error_prefix("rank %d: tcp bootstrap: address of peer rank %d", t->rank, p);
            break;
        }
        snprintf(t->addr[p], sizeof t->addr[p], "%.*s", (int)len, (char *)v);
        free(v);
        notice_addr(t, p);
    }
    snprintf(t->addr[t->rank], sizeof t->addr[t->rank], "%.46s:%d", ip, port);
    uint32_t nonce = t->nonce = hash_str(o->key_prefix);
    for (int p = 0; p < t->rank && rc == 0; p++)
        rc = connect_peer(t, p, nonce, deadline);
    if (rc == 0)
        rc = accept_peers(t, lfd, nonce, deadline);
out:
    close(lfd);
    return rc;
}

int dt_tcp_create(const struct dt_comm_options *o, bool with_lanes, struct dt_tcp **out)
{
    *out = NULL;
    struct dt_tcp *t = calloc(1, sizeof *t);
    if (!t)
        return dt_error_set(DT_ENOMEM, "tcp: out of memory");
    t->abort_fd = t->ufd = -1;
    t->nlanes = 1;
    int rc = alloc_state(t, o);
    if (rc == 0 && with_lanes)
        rc = dt_tcp_lanes_choose(t, o);
    if (rc == 0)
        rc = bootstrap(t, o);
    if (rc == 0 && with_lanes)
        rc = dt_tcp_lanes_init(t, o);
    if (rc < 0) {
        dt_tcp_destroy(t);
        return rc;
    }
    *out = t;
    return 0;
}

int dt_tcp_init(const struct dt_comm_options *o, void **state)
{
    struct dt_tcp *t = NULL;
    int rc = dt_tcp_create(o, true, &t);
    *state = t;
    return rc;
}

void dt_tcp_fail(struct dt_tcp *t)
{
    t->failed = true;
    for (int p = 0; p < t->world; p++)
        if (t->fd[p] >= 0)
            shutdown(t->fd[p], SHUT_RDWR);
}

void dt_tcp_abort(void *st)
{
    struct dt_tcp *t = st;
    atomic_store(&t->aborted, 1);
    dt_tcp_lanes_abort(t);
    uint64_t one = 1;
    if (write(t->abort_fd, &one, sizeof one) < 0) {
        /* the counter is saturated only if abort was called 2^64 times */
    }
}

void dt_tcp_destroy(void *st)
{
    struct dt_tcp *t = st;
    if (!t)
        return;
    dt_tcp_lanes_destroy(t);
    for (int p = 0; t->fd && p < t->world; p++)
        if (t->fd[p] >= 0)
            close(t->fd[p]);
    if (t->abort_fd >= 0)
        close(t->abort_fd);
    if (t->ufd >= 0 && !t->notices_borrowed)
        close(t->ufd);
    free(t->fd);
    free(t->addr);
    free(t->processed);
    free(t->out);
    free(t->in);
    free(t->last_pos);
    if (!t->notices_borrowed) {
        free(t->uaddr);
        free(t->heard);
        free(t->suspected);
        free(t->notice_msg);
    }
    free(t->stage);
    free(t->small);
    free(t->scratch);
    free(t);
}

int dt_tcp_scratch(struct dt_tcp *t, size_t bytes)
{
    if (bytes <= t->scratch_bytes)
        return 0;
    char *p = realloc(t->scratch, bytes);
    if (!p)
        return dt_error_set(DT_ENOMEM, "rank %d: tcp: cannot allocate %zu bytes of scratch", t->rank, bytes);
    memset(p, 0, bytes);
    t->scratch = p;
    t->scratch_bytes = bytes;
    return 0;
}

void dt_tcp_hdr_make(struct dt_tcp *t, struct dt_tcp_hdr *h, size_t count, enum dt_dtype dt, enum dt_redop op,
                     int root)
{
    memset(h, 0, sizeof *h);
    h->magic = DT_TCP_MAGIC;
    h->kind = (uint16_t)t->cur;
    h->dtype = (uint16_t)dt;
    h->seq = t->seq;
    h->count = count;
    h->op = op;
    h->root = root;
}

int dt_tcp_hdr_check(struct dt_tcp *t, int peer, const struct dt_tcp_hdr *got, const struct dt_tcp_hdr *want)
{
    if (got->magic != DT_TCP_MAGIC)
        return dt_error_set(DT_EPROTO, "rank %d: %s #%llu (tcp): peer rank %d sent a corrupt frame", t->rank,
                            dt_coll_name(t->cur), (unsigned long long)t->seq, peer);
    if (memcmp(got, want, sizeof *got) != 0)
        return dt_error_set(DT_EPROTO,
                            "rank %d: %s #%llu (tcp, count %llu, %s, %s, root %d): peer rank %d is running %s #%llu "
                            "(count %llu, %s, %s, root %d); every rank must call the same collectives in the same order",
                            t->rank, dt_coll_name(t->cur), (unsigned long long)t->seq,
                            (unsigned long long)want->count, dt_dtype_name(want->dtype), dt_redop_name(want->op),
                            want->root, peer, dt_coll_name(got->kind), (unsigned long long)got->seq,
                            (unsigned long long)got->count, dt_dtype_name(got->dtype), dt_redop_name(got->op),
                            got->root);
    return 0;
}
