/* rendezvous_clients.c - N store clients doing a job's rendezvous, for bench/rendezvous.sh
 * and bench/rendezvous_nodes.sh.
 *
 *   rendezvous_clients --port P --clients N --server dtrain|pytorch [--host H]
 *                      [--connect-window K]   (at most K connects in flight; 0: all at once)
 *                      [--world W --first F]  (these N are clients F..F+N-1 of W in the barrier)
 *                      [--read K]             (each reads keys 0..K-1; default: all W)
 *                      [--auth yes]           (pytorch: present DTRAIN_JOB_TOKEN after VALIDATE)
 *                      [--procs K]            (K processes, N/K clients each, as K nodes' ranks)
 *                      [--sync DIR]           (each process writes a byte to the FIFO DIR/ready,
 *                                              then starts once it gets a shared flock on DIR/go)
 *
 * Without --port, MASTER_PORT; without --first, NODE_RANK * N (a node's
 * ranks under bench/rendezvous_nodes.sh's endpoints).
 *
 * Every client connects, authenticates, sets its key, passes a barrier and
 * reads all N keys; the program prints how long that took for all of them.
 * One thread drives every connection through epoll, so 4096 clients cost
 * 4096 sockets rather than 4096 threads, and the same code drives both
 * servers; only the handshake and the barrier differ:
 *
 *   dtrain   VALIDATE, AUTH(token) | SET /rdzv/<i> | BARRIER("rdzv", N)   -> MULTI_GET
 *   pytorch  VALIDATE | SET /rdzv/<i> | ADD /rdzv/count 1; the client whose ADD
 *            answers N SETs /rdzv/done; every client WAITs on /rdzv/done
 *            (the store barrier of torch.distributed)                     -> MULTI_GET
 *
 * A connection closed before its token was accepted is made again (counted as
 * retries=), as PyTorch's client retries: nothing of it was applied.  The
 * token comes from DTRAIN_JOB_TOKEN.  Not a test: it prints figures.
 */
#include "comm/store_wire.h"
#include "base/clock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum phase { CONNECTING, AUTH_REPLY, FIRST_REPLY, BARRIER_REPLY, READING_KEYS, DONE };

struct client {
    int fd, id;
    enum phase phase;
    const uint8_t *out;   /* bytes still to send (own buffer or the shared MULTI_GET) */
    size_t out_len, out_off;
    struct dt_wire_buf own;
    uint8_t in[16384];
    size_t in_len;
    int keys_read;
};

static struct {
    int n, pytorch, epfd, done, barrier_done;
    int world, first, read, auth; /* the barrier's count, our first id, keys read, AUTH in pytorch mode */
    int window, started, connecting;  /* --connect-window: connects in flight at most */
    int procs, retries;
    const char *sync;
    struct client *cs;
    const char *token;
    struct sockaddr_in addr;
    struct dt_wire_buf mget;
    struct dt_wire_bytes *values; /* what key i must hold */
    double t0, t_barrier;
} g;

static void die(const char *what, int id)
{
    fprintf(stderr, "rendezvous_clients: client %d: %s\n", id, what);
    exit(1);
}

static void start_more(void);
static void start_client(struct client *c, int id);

/* Before the token is accepted nothing of the client's is applied, and a
 * coordinator at its handshake cap closes the slowest newcomers: the client
 * connects again, as PyTorch's client retries its connect. */
static int retry(struct client *c)
{
    bool before_auth = c->phase == CONNECTING || c->phase == AUTH_REPLY ||
                       (c->phase == FIRST_REPLY && !g.pytorch);
    if (!before_auth)
        return 0;
    epoll_ctl(g.epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    if (c->phase != CONNECTING)
        g.connecting++;
    c->phase = CONNECTING;
    c->in_len = 0;
    c->out_len = c->out_off = 0;
    g.retries++;
    start_client(c, c->id);
    return 1;
}

static void watch(struct client *c, int out)
{
    struct epoll_event ev = {.events = EPOLLIN | (out ? EPOLLOUT : 0), .data.ptr = c};
    epoll_ctl(g.epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

static void send_own(struct client *c)
{
    c->out = c->own.p;
    c->out_len = c->own.len;
    c->out_off = 0;
    watch(c, 1);
}

static void key_of(int i, char *k, size_t n) { snprintf(k, n, "rdzv/%d", i); }

static void first_batch(struct client *c)
{
    char k[32], v[32];
    struct dt_wire_buf *b = &c->own;
    b->len = 0;
    dt_wire_put_u8(b, DT_WIRE_VALIDATE);
    dt_wire_put_u32(b, DT_WIRE_MAGIC);
    if (!g.pytorch || g.auth) {
        dt_wire_put_u8(b, DT_WIRE_AUTH);
        dt_wire_put_bytes(b, g.token, strlen(g.token));
    }
    key_of(c->id, k, sizeof k);
    snprintf(v, sizeof v, "addr-of-%d", c->id);
    dt_wire_put_u8(b, DT_WIRE_SET);
    dt_wire_put_key(b, "/", k, strlen(k));
    dt_wire_put_bytes(b, v, strlen(v));
    if (g.pytorch) {
        dt_wire_put_u8(b, DT_WIRE_ADD);
        dt_wire_put_key(b, "/", "rdzv/count", 10);
        dt_wire_put_i64(b, 1);
    } else {
        dt_wire_put_u8(b, DT_WIRE_BARRIER);
        dt_wire_put_bytes(b, "rdzv", 4);
        dt_wire_put_i64(b, g.world);
    }
    c->phase = g.pytorch && g.auth ? AUTH_REPLY : FIRST_REPLY;
    send_own(c);
}

static void start_reading(struct client *c)
{
    if (++g.barrier_done == g.n)
        g.t_barrier = dt_clock_s();
    c->phase = READING_KEYS;
    c->out = g.mget.p;
    c->out_len = g.mget.len;
    c->out_off = 0;
    watch(c, 1);
}

/* Consumes whole replies from c->in; returns bytes used. */
static size_t on_replies(struct client *c)
{
    size_t off = 0, left;
    while ((left = c->in_len - off) > 0) {
        const uint8_t *p = c->in + off;
        if (c->phase == AUTH_REPLY) { /* pytorch with --auth: AUTH, then ADD */
            if (p[0] != DT_WIRE_OK)
                die("token refused", c->id);
            off += 1;
            c->phase = FIRST_REPLY;
        } else if (c->phase == FIRST_REPLY && !g.pytorch) { /* AUTH */
            if (p[0] != DT_WIRE_OK)
                die("token refused", c->id);
            off += 1;
            c->phase = BARRIER_REPLY;
        } else if (c->phase == FIRST_REPLY) { /* ADD */
            if (left < 8)
                break;
            int64_t v = (int64_t)dt_wire_load_u64(p);
            off += 8;
            c->own.len = 0;
            if (v == g.world) {
                dt_wire_put_u8(&c->own, DT_WIRE_SET);
                dt_wire_put_key(&c->own, "/", "rdzv/done", 9);
                dt_wire_put_bytes(&c->own, "1", 1);
            }
            dt_wire_put_u8(&c->own, DT_WIRE_WAIT);
            dt_wire_put_u64(&c->own, 1);
            dt_wire_put_key(&c->own, "/", "rdzv/done", 9);
            c->phase = BARRIER_REPLY;
            send_own(c);
        } else if (c->phase == BARRIER_REPLY) {
            if (p[0] != 0)
                die("barrier failed", c->id);
            off += 1;
            start_reading(c);
        } else if (c->phase == READING_KEYS) {
            if (left < 8)
                break;
            uint64_t n = dt_wire_load_u64(p);
            if (left < 8 + n)
                break;
            const struct dt_wire_bytes *want = &g.values[c->keys_read];
            if (n != want->len || memcmp(p + 8, want->p, n) != 0)
                die("read a wrong value", c->id);
            off += 8 + n;
            if (++c->keys_read == g.read) {
                c->phase = DONE;
                g.done++;
                epoll_ctl(g.epfd, EPOLL_CTL_DEL, c->fd, NULL);
                close(c->fd);
                return off;
            }
        } else {
            die("unexpected bytes", c->id);
        }
    }
    return off;
}

static void on_readable(struct client *c)
{
    for (;;) {
        ssize_t r = recv(c->fd, c->in + c->in_len, sizeof c->in - c->in_len, 0);
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (r <= 0 && retry(c))
            return;
        if (r <= 0)
            die(r == 0 ? "server closed the connection" : strerror(errno), c->id);
        c->in_len += (size_t)r;
        size_t used = on_replies(c);
        if (c->phase == DONE)
            return;
        memmove(c->in, c->in + used, c->in_len - used);
        c->in_len -= used;
    }
}

static void on_writable(struct client *c)
{
    if (c->phase == CONNECTING) {
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err && err != ECONNREFUSED && retry(c))
            return;
        if (err)
            die(strerror(err), c->id);
        g.connecting--;
        first_batch(c);
        start_more();
    }
    while (c->out_off < c->out_len) {
        ssize_t w = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (w < 0 && retry(c))
            return;
        if (w < 0)
            die(strerror(errno), c->id);
        c->out_off += (size_t)w;
    }
    watch(c, 0);
}

/* Starts clients while fewer than the window are still connecting. */
static void start_more(void)
{
    while (g.started < g.n && (g.window == 0 || g.connecting < g.window)) {
        g.connecting++;
        start_client(&g.cs[g.started], g.first + g.started);
        g.started++;
    }
}

static void start_client(struct client *c, int id)
{
    c->id = id;
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (c->fd < 0)
        die(strerror(errno), id);
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(c->fd, (struct sockaddr *)&g.addr, sizeof g.addr) < 0 && errno != EINPROGRESS)
        die(strerror(errno), id);
    struct epoll_event ev = {.events = EPOLLOUT, .data.ptr = c};
    epoll_ctl(g.epfd, EPOLL_CTL_ADD, c->fd, &ev);
}

static void usage(void)
{
    fprintf(stderr, "usage: DTRAIN_JOB_TOKEN=... rendezvous_clients --port P --clients N --server dtrain|pytorch "
                    "[--host H] [--connect-window K] [--world W --first F] [--read K] [--auth yes] [--procs K] "
                    "[--sync DIR]\n");
    exit(2);
}

static void parse_args(int argc, char **argv)
{
    const char *host = "127.0.0.1";
    const char *mp = getenv("MASTER_PORT"), *nr = getenv("NODE_RANK");
    int port = mp ? atoi(mp) : 0;
    g.first = -1;
    g.read = -1;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *o = argv[i], *v = argv[i + 1];
        if (!strcmp(o, "--port"))
            port = atoi(v);
        else if (!strcmp(o, "--clients"))
            g.n = atoi(v);
        else if (!strcmp(o, "--server"))
            g.pytorch = !strcmp(v, "pytorch");
        else if (!strcmp(o, "--connect-window"))
            g.window = atoi(v);
        else if (!strcmp(o, "--host"))
            host = v;
        else if (!strcmp(o, "--world"))
            g.world = atoi(v);
        else if (!strcmp(o, "--first"))
            g.first = atoi(v);
        else if (!strcmp(o, "--read"))
            g.read = atoi(v);
        else if (!strcmp(o, "--auth"))
            g.auth = !strcmp(v, "yes");
        else if (!strcmp(o, "--procs"))
            g.procs = atoi(v);
        else if (!strcmp(o, "--sync"))
            g.sync = v;
        else
            usage();
    }
    if (g.world <= 0)
        g.world = g.n;
    if (g.first < 0)
        g.first = nr ? atoi(nr) * g.n : 0;
    if (g.read < 0)
        g.read = g.world;
    g.token = getenv("DTRAIN_JOB_TOKEN");
    if (port <= 0 || g.n <= 0 || g.world > 1000000 || g.first + g.n > g.world || g.read > g.world ||
        g.procs < 0 || g.procs > g.n || ((!g.pytorch || g.auth) && !g.token))
        usage();
    g.addr.sin_family = AF_INET;
    g.addr.sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, host, &g.addr.sin_addr);
}

/* --sync: ready, then wait for the go, so that every process of a run
 * starts at once however long the others took to start. */
static void sync_start(void)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/ready", g.sync);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, "r", 1) != 1)
        die("cannot write DIR/ready", -1);
    close(fd);
    snprintf(path, sizeof path, "%s/go", g.sync);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || flock(fd, LOCK_SH) < 0)
        die("cannot lock DIR/go", -1);
    close(fd);
}

static int run_one(void)
{
    dt_wire_put_u8(&g.mget, DT_WIRE_MULTI_GET);
    dt_wire_put_u64(&g.mget, (uint64_t)g.read);
    for (int i = 0; i < g.read; i++) {
        char k[32];
        key_of(i, k, sizeof k);
        dt_wire_put_key(&g.mget, "/", k, strlen(k));
    }
    g.values = calloc((unsigned)g.read + 1, sizeof *g.values);
    for (int i = 0; i < g.read; i++) {
        char v[32];
        g.values[i].len = (size_t)snprintf(v, sizeof v, "addr-of-%d", i);
        g.values[i].p = (const uint8_t *)strdup(v);
    }
    struct client *cs = g.cs = calloc((unsigned)g.n, sizeof *cs);
    g.epfd = epoll_create1(0);
    if (g.sync)
        sync_start();
    g.t0 = dt_clock_s();
    start_more();
    struct epoll_event evs[256];
    while (g.done < g.n) {
        int k = epoll_wait(g.epfd, evs, 256, 1000);
        if (dt_clock_s() - g.t0 > 300)
            die("gave up after 300 s", -1);
        for (int i = 0; i < k; i++) {
            struct client *c = evs[i].data.ptr;
            if (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP))
                on_readable(c);
            if (c->phase != DONE && (evs[i].events & EPOLLOUT))
                on_writable(c);
        }
    }
    double end = dt_clock_s();
    /* start/barrier_at/end: CLOCK_MONOTONIC, comparable between the processes of a run. */
    printf("server=%s clients=%d barrier_s=%.3f total_s=%.3f start=%.6f barrier_at=%.6f end=%.6f retries=%d\n",
           g.pytorch ? "pytorch" : "dtrain", g.n, g.t_barrier - g.t0, end - g.t0, g.t0, g.t_barrier, end,
           g.retries);
    fflush(stdout);
    for (int i = 0; i < g.n; i++)
        dt_wire_buf_free(&cs[i].own);
    free(cs);
    dt_wire_buf_free(&g.mget);
    return 0;
}

/* --procs K: K processes of consecutive ids, as K nodes' ranks would be. */
static int run_procs(void)
{
    int n = g.n, first = g.first;
    for (int j = 0; j < g.procs; j++) {
        pid_t pid = fork();
        if (pid < 0)
            die(strerror(errno), -1);
        if (pid == 0) {
            int lo = (int)((long)j * n / g.procs), hi = (int)((long)(j + 1) * n / g.procs);
            g.first = first + lo;
            g.n = hi - lo;
            exit(run_one());
        }
    }
    int rc = 0, st;
    while (wait(&st) > 0)
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            rc = 1;
    return rc;
}

int main(int argc, char **argv)
{
    parse_args(argc, argv);
    return g.procs > 1 ? run_procs() : run_one();
}
