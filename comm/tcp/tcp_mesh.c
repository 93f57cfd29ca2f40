/* tcp_mesh.c - the `tcp` backend's transport: a full mesh of connections
 * bootstrapped through the store, the state's lifetime, and the lanes (more
 * meshes, each driven by a thread of its own, for large allreduces).
 *
 * Bootstrap: each rank listens on an ephemeral port, publishes "ip:port"
 * under <prefix>tcp/<rank>, then connects to every lower rank (retrying
 * refused connects until the deadline) and accepts every higher rank.  The
 * connector sends a hello {magic, rank, world, prefix hash} so a stray or
 * stale connection is refused.  The advertised ip is DTRAIN_COMM_HOST as
 * given; else the IPv4 address of the first interface named in
 * DTRAIN_SOCKET_IFNAME or GLOO_SOCKET_IFNAME ("eth1" or "eth1,eth2": Gloo's
 * variable, so a host set up for PyTorch's CPU backend needs nothing more;
 * the spec's comm.interfaces reaches here as GLOO_SOCKET_IFNAME, set by the
 * agent; none of them holding one is an error naming the interfaces there are);
 * else the local address that routes to the coordinator (a connected UDP
 * socket tells us without sending anything; DTRAIN_COORD_HOST names it when
 * the store is the node's endpoint on loopback), never 127.0.0.1 unless the
 * coordinator is on this host's loopback.
 *
 * Not for moving bytes during a collective (tcp_engine.c) or for the
 * collectives' algorithms (tcp_coll.c).
 */
#include "comm/tcp/tcp_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/env.h"
#include "base/error.h"
#include "comm/store.h"

#define DT_TCP_SPIN_US 1000 /* default busy-poll before sleeping (tcp_engine.c) */

/* ---- the mesh: bootstrap through the store ---- */

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

/* a's IPv4 address, or NULL when it has none. */
static const struct in_addr *ipv4_of(const struct ifaddrs *a)
{
    return a->ifa_addr && a->ifa_addr->sa_family == AF_INET ? &((struct sockaddr_in *)a->ifa_addr)->sin_addr
                                                            : NULL;
}

/* The IPv4 address of the first interface of `names` (comma-separated) that
 * has one; an error naming the variable and this host's interfaces if none. */
static int iface_ip(const char *var, const char *names, char *ip, size_t n)
{
    struct ifaddrs *all = NULL;
    if (getifaddrs(&all) < 0)
        return dt_error_set_errno(DT_EIO, errno, "tcp bootstrap: %s=%s: cannot list this host's interfaces",
                                  var, names);
    char want[256], list[256] = "";
    snprintf(want, sizeof want, "%s", names);
    const struct in_addr *found = NULL;
    char *save = NULL;
    for (char *name = strtok_r(want, ",", &save); name && !found; name = strtok_r(NULL, ",", &save))
        for (const struct ifaddrs *a = all; a && !found; a = a->ifa_next)
            if (ipv4_of(a) && !strcmp(a->ifa_name, name))
                found = ipv4_of(a);
    if (found)
        inet_ntop(AF_INET, found, ip, (socklen_t)n);
    for (const struct ifaddrs *a = all; a && !found; a = a->ifa_next)
        if (ipv4_of(a) && strlen(list) + strlen(a->ifa_name) + 3 < sizeof list)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", *list ? ", " : "", a->ifa_name);
    freeifaddrs(all);
    if (found)
        return 0;
    return dt_error_set(DT_EINVAL,
                        "tcp bootstrap: %s=%s names no interface with an IPv4 address on this host (those "
                        "with one: %s)",
                        var, names, *list ? list : "none");
}

/* The address this rank advertises (the file's header says which). */
static int local_ip(const char *coord, char *ip, size_t n)
{
    const char *env = getenv("DTRAIN_COMM_HOST");
    snprintf(ip, n, "%s", env && *env ? env : "127.0.0.1");
    if (env && *env)
        return 0;
    static const char *const vars[] = {"DTRAIN_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *names = getenv(vars[i]);
        if (names && *names)
            return iface_ip(vars[i], names, ip, n);
    }
    if (!coord)
        return 0;
    char host[256];
    snprintf(host, sizeof host, "%s", coord);
    char *colon = strrchr(host, ':');
    if (colon)
        *colon = 0;
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_DGRAM}, *res = NULL;
    if (getaddrinfo(host, "9", &hints, &res) != 0 || !res)
        return 0;
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in me;
    socklen_t len = sizeof me;
    if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
        getsockname(fd, (struct sockaddr *)&me, &len) == 0)
        inet_ntop(AF_INET, &me.sin_addr, ip, (socklen_t)n);
    if (fd >= 0)
        close(fd);
    freeaddrinfo(res);
    return 0;
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
            struct hello h = {DT_TCP__MAGIC, (uint32_t)t->rank, (uint32_t)t->world, nonce};
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
            h.magic != DT_TCP__MAGIC || h.nonce != nonce || (int)h.world != t->world || (int)h.rank <= t->rank ||
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

/* ---- the state ---- */

static int alloc_state(struct dt_tcp *t, const struct dt_comm_options *o)
{
    t->rank = o->rank;
    t->world = o->world;
    t->timeout_s = o->timeout_s;
    t->ncpus = dt_comm_cpus_available();
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
    t->max_blocks = 1 + DT_TCP__MAX_SLICES * 2 * (t->world - 1) + 2 * t->world + 4;
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
    t->busy_from = calloc((size_t)t->world, sizeof *t->busy_from);
    size_t hb = sizeof(struct dt_tcp__hdr);
    t->stage = malloc(t->seg_bytes + t->small_bytes + hb);
    t->small = malloc(t->small_bytes + hb);
    t->abort_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (!t->fd || !t->addr || !t->processed || !t->out || !t->in || !t->last_pos || !t->uaddr || !t->heard ||
        !t->suspected || !t->notice_msg || !t->busy_from || !t->stage || !t->small || t->abort_fd < 0)
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
    if ((rc = dt_tcp__fault_open(t, &uport)) < 0 || (rc = listen_any(t, &lfd, &port)) < 0)
        return rc;
    char ip[64], key[256], val[96];
    /* A rank behind its node's store endpoint (127.0.0.1) is told the coordinator's host. */
    const char *coord = getenv("DTRAIN_COORD_HOST");
    if (!coord || !*coord)
        coord = o->store ? dt_store_peer(o->store) : NULL;
    if ((rc = local_ip(coord, ip, sizeof ip)) < 0) {
        dt_error_prefix("rank %d", t->rank);
        goto out;
    }
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

/* ---- lanes ---- */

/* Large allreduces are striped over several TCP connections per peer, each
 * lane driven by its own thread.
 *
 * Why: one TCP stream moves 2-3 GB/s on the 16-core test host whoever drives
 * it (Open MPI's TCP transport lands in the same place, docs/bench.md): the
 * kernel copies each byte twice and does the receive work on one core per
 * stream.  L streams on L cores move up to L times as much, until memory
 * bandwidth or the cores run out; NCCL's socket transport splits its traffic
 * over several sockets and threads for the same reason.
 *
 * A lane is a whole tcp communicator (its own mesh, failure-notice socket,
 * buffers and sequence numbers) bootstrapped under "<prefix>lane<i>/"; lane 0
 * is the communicator itself.  An allreduce of at least lane_bytes is cut into
 * L stripes of whole elements (the first n%L one element longer) and lane i
 * runs the ordinary algorithm (ring or halving-doubling, chosen by the stripe's
 * size) on stripe i: lanes 1..L-1 on their threads, lane 0 on the caller's.
 * Each stripe's sum is computed as it would be alone, so every rank still
 * gets the same bits.  All ranks must stripe alike: rank 0 decides L and
 * lane_bytes and publishes them before its address; the others read them.
 *
 * How many by default: L = CPUs per local rank, at most 4 (16 cores, 2 or 4
 * ranks: 4 lanes; the 2-core VM: 1, no lanes).  A lane's thread and the
 * kernel's work on its stream share the rank's cores well enough: 4 ranks on
 * the 16-core host, 64-256 MiB, measured 2.9-4.3 GB/s busbw with 2 lanes,
 * 4.2-5.3 with 3, 5.0-6.1 with 4 and 5.1-6.4 with 6 (6 lost half of 4's
 * rate at 4-16 MiB); Gloo 2.1-2.3 in the same run (docs/bench.md).
 * DTRAIN_TCP_LANES and DTRAIN_TCP_LANE_BYTES (default 1 MiB) on rank 0 set
 * them.
 *
 * Faults: each lane has the deadline of any tcp communicator; the failure
 * notices (tcp_engine.c) go through lane 0's socket for all lanes, so the
 * survivors name the culprit whichever lane saw it.  Once every lane has
 * returned and one failed, every lane shuts its connections: a peer whose
 * lanes all finished and that is already waiting in the next collective
 * fails at once instead of at its deadline.  The message is lane 0's when it
 * failed, else that of the first lane that did.  The communicator is unusable
 * after a failure, as without lanes.
 *
 * The other collectives run on lane 0 alone.
 */
#define DT_TCP_MAX_LANES 8

struct lane {
    struct dt_tcp *t;
    pthread_t thread;
    bool started, stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;        /* a job posted, a job done, or stop */
    uint64_t posted, done;
    const char *send;
    char *recv;
    size_t n;
    enum dt_dtype dt;
    enum dt_redop op;
    int rc;
    int code;
    char msg[1024];            /* its error message (error.h keeps one per thread) */
};

struct dt_tcp__lanes {
    int n;                    /* lanes, lane 0 (the communicator itself) included */
    pthread_mutex_t notice_mu; /* the notice state all lanes share (lane 0's) */
    struct lane lane[DT_TCP_MAX_LANES];
};

/* A tcp communicator; with_lanes false for a lane itself (lifetime, below). */
static int tcp_create(const struct dt_comm_options *o, bool with_lanes, struct dt_tcp **out);

static int lanes_choose(struct dt_tcp *t, const struct dt_comm_options *o)
{
    if (t->rank != 0 || t->world < 2)
        return 0;
    int local = o->local_world > 0 ? o->local_world : 1;
    int per = t->ncpus / local, lanes;
    uint64_t bytes;
    int rc = dt_env_int("DTRAIN_TCP_LANES", per < 1 ? 1 : per > 4 ? 4 : per, 1, DT_TCP_MAX_LANES, &lanes);
    if (rc == 0)
        rc = dt_env_u64("DTRAIN_TCP_LANE_BYTES", 1 << 20, 1024, 1ull << 40, &bytes);
    if (rc < 0)
        return dt_error_prefix("rank 0: tcp lanes");
    char key[256], val[64];
    snprintf(key, sizeof key, "%stcp/lanes", o->key_prefix);
    int len = snprintf(val, sizeof val, "%d %llu", lanes, (unsigned long long)bytes);
    if ((rc = dt_store_set(o->store, key, val, (size_t)len)) < 0)
        return dt_error_prefix("rank 0: tcp bootstrap: publishing the lane count");
    t->nlanes = lanes;
    t->lane_bytes = (size_t)bytes;
    return 0;
}

/* Rank 0's choice: it published it before its address, which we have. */
static int read_choice(struct dt_tcp *t, const struct dt_comm_options *o)
{
    if (t->rank == 0 || t->world < 2)
        return 0;
    char key[256];
    snprintf(key, sizeof key, "%stcp/lanes", o->key_prefix);
    void *v = NULL;
    size_t len = 0;
    int rc = dt_store_get(o->store, key, &v, &len);
    if (rc < 0)
        return dt_error_prefix("rank %d: tcp bootstrap: rank 0's lane count", t->rank);
    char buf[64];
    snprintf(buf, sizeof buf, "%.*s", (int)(len < sizeof buf ? len : sizeof buf - 1), (char *)v);
    free(v);
    int lanes = 0;
    unsigned long long bytes = 0;
    if (sscanf(buf, "%d %llu", &lanes, &bytes) != 2 || lanes < 1 || lanes > DT_TCP_MAX_LANES || bytes < 1024)
        return dt_error_set(DT_EPROTO, "rank %d: tcp bootstrap: rank 0 published a bad lane count \"%s\" under %s",
                            t->rank, buf, key);
    t->nlanes = lanes;
    t->lane_bytes = (size_t)bytes;
    return 0;
}

static void *lane_main(void *arg)
{
    struct lane *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (l->done == l->posted && !l->stop)
            pthread_cond_wait(&l->cv, &l->mu);
        if (l->stop)
            break;
        pthread_mutex_unlock(&l->mu);
        int rc = dt_tcp__allreduce_one(l->t, l->send, l->recv, l->n, l->dt, l->op);
        pthread_mutex_lock(&l->mu);
        l->rc = rc;
        if (rc < 0) { /* the message lives in this thread's error buffer */
            l->code = dt_error_code();
            snprintf(l->msg, sizeof l->msg, "%s", dt_error_last());
        }
        l->done++;
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* A lane reports and hears failures through lane 0's socket (its own one was
 * published but is never written to: peers send to lane 0's). */
static void borrow_notices(struct dt_tcp *lane, struct dt_tcp *t)
{
    close(lane->ufd);
    free(lane->uaddr);
    free(lane->heard);
    free(lane->suspected);
    free(lane->notice_msg);
    free(lane->busy_from);
    lane->ufd = t->ufd;
    lane->uaddr = t->uaddr;
    lane->heard = t->heard;
    lane->suspected = t->suspected;
    lane->notice_msg = t->notice_msg;
    lane->busy_from = t->busy_from;
    lane->nonce = t->nonce;
    lane->grace_s = t->grace_s;
    lane->notice_mu = t->notice_mu;
    lane->notices_borrowed = true;
}

static int lanes_init(struct dt_tcp *t, const struct dt_comm_options *o)
{
    int rc = read_choice(t, o);
    if (rc < 0 || t->nlanes < 2)
        return rc;
    struct dt_tcp__lanes *L = calloc(1, sizeof *L);
    if (!L)
        return dt_error_set(DT_ENOMEM, "rank %d: tcp: out of memory for %d lanes", t->rank, t->nlanes);
    t->lanes = L;
    L->n = t->nlanes;
    pthread_mutex_init(&L->notice_mu, NULL);
    t->notice_mu = &L->notice_mu;
    for (int i = 1; i < L->n; i++) {
        struct lane *l = &L->lane[i];
        char prefix[256];
        snprintf(prefix, sizeof prefix, "%slane%d/", o->key_prefix, i);
        struct dt_comm_options lo = *o;
        lo.key_prefix = prefix;
        if ((rc = tcp_create(&lo, false, &l->t)) < 0)
            return dt_error_prefix("rank %d: tcp lane %d of %d", t->rank, i, L->n);
        borrow_notices(l->t, t);
        pthread_mutex_init(&l->mu, NULL);
        pthread_cond_init(&l->cv, NULL);
        if (pthread_create(&l->thread, NULL, lane_main, l) != 0)
            return dt_error_set(DT_ENOMEM, "rank %d: tcp: cannot start the thread of lane %d", t->rank, i);
        l->started = true;
    }
    return 0;
}

int dt_tcp__lanes_allreduce(struct dt_tcp *t, const void *send, void *recv, size_t n, enum dt_dtype dt,
                            enum dt_redop op)
{
    struct dt_tcp__lanes *L = t->lanes;
    size_t es = dt_dtype_size(dt), base = n / (size_t)L->n, rem = n % (size_t)L->n, off = base + (rem > 0);
    for (int i = 1; i < L->n; i++) {
        struct lane *l = &L->lane[i];
        size_t len = base + ((size_t)i < rem);
        pthread_mutex_lock(&l->mu);
        l->send = (const char *)send + off * es;
        l->recv = (char *)recv + off * es;
        l->n = len;
        l->dt = dt;
        l->op = op;
        l->posted++;
        pthread_cond_broadcast(&l->cv);
        pthread_mutex_unlock(&l->mu);
        off += len;
    }
    int rc = dt_tcp__allreduce_one(t, send, recv, base + (rem > 0), dt, op);
    int first = -1;
    for (int i = 1; i < L->n; i++) {
        struct lane *l = &L->lane[i];
        pthread_mutex_lock(&l->mu);
        while (l->done != l->posted)
            pthread_cond_wait(&l->cv, &l->mu);
        pthread_mutex_unlock(&l->mu);
        if (l->rc < 0 && first < 0)
            first = i;
    }
    if (rc == 0 && first < 0)
        return 0;
    dt_tcp__fail(t);
    for (int i = 1; i < L->n; i++)
        dt_tcp__fail(L->lane[i].t);
    if (rc < 0)
        return rc;
    struct lane *l = &L->lane[first];
    return dt_error_set(l->code, "%s (lane %d of %d)", l->msg, first, L->n);
}

static void lanes_abort(struct dt_tcp *t)
{
    struct dt_tcp__lanes *L = t->lanes;
    for (int i = 1; L && i < L->n; i++)
        if (L->lane[i].t)
            dt_tcp__abort(L->lane[i].t);
}

static void lanes_destroy(struct dt_tcp *t)
{
    struct dt_tcp__lanes *L = t->lanes;
    if (!L)
        return;
    for (int i = 1; i < L->n; i++) {
        struct lane *l = &L->lane[i];
        if (l->started) {
            pthread_mutex_lock(&l->mu);
            l->stop = true;
            pthread_cond_broadcast(&l->cv);
            pthread_mutex_unlock(&l->mu);
            pthread_join(l->thread, NULL);
            pthread_mutex_destroy(&l->mu);
            pthread_cond_destroy(&l->cv);
        }
        dt_tcp__destroy(l->t);
    }
    t->notice_mu = NULL;
    pthread_mutex_destroy(&L->notice_mu);
    free(L);
    t->lanes = NULL;
}

/* ---- lifetime ---- */

static int tcp_create(const struct dt_comm_options *o, bool with_lanes, struct dt_tcp **out)
{
    *out = NULL;
    struct dt_tcp *t = calloc(1, sizeof *t);
    if (!t)
        return dt_error_set(DT_ENOMEM, "tcp: out of memory");
    t->abort_fd = t->ufd = -1;
    t->nlanes = 1;
    int rc = alloc_state(t, o);
    if (rc == 0 && with_lanes)
        rc = lanes_choose(t, o);
    if (rc == 0)
        rc = bootstrap(t, o);
    if (rc == 0) /* bootstrap waits for every rank to start; a step only for its peers' data */
        dt_tcp__set_timeout(t, o->op_timeout_s > 0 ? o->op_timeout_s : o->timeout_s);
    t->busy_limit_s = o->busy_limit_s > 0 ? o->busy_limit_s : o->timeout_s;
    if (rc == 0 && with_lanes)
        rc = lanes_init(t, o);
    if (rc < 0) {
        dt_tcp__destroy(t);
        return rc;
    }
    *out = t;
    return 0;
}

int dt_tcp__init(const struct dt_comm_options *o, void **state)
{
    struct dt_tcp *t = NULL;
    int rc = tcp_create(o, true, &t);
    *state = t;
    return rc;
}

void dt_tcp__abort(void *st)
{
    struct dt_tcp *t = st;
    atomic_store(&t->aborted, 1);
    lanes_abort(t);
    uint64_t one = 1;
    if (write(t->abort_fd, &one, sizeof one) < 0) {
        /* the counter is saturated only if abort was called 2^64 times */
    }
}

void dt_tcp__destroy(void *st)
{
    struct dt_tcp *t = st;
    if (!t)
        return;
    dt_tcp__busy(t, false);
    lanes_destroy(t);
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
        free(t->busy_from);
    }
    free(t->stage);
    free(t->small);
    free(t->scratch);
    free(t);
}
