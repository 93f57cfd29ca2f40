/* coord_gate.c - the handshake every connection passes before anything it
 * sends is applied, and which refusals count.
 *
 * The handshake: VALIDATE with PyTorch's magic, then, with auth on, AUTH with
 * the job token.  Until it is finished only those two requests are read, under
 * the pre-authentication limits (coordinator_internal.h): any other request
 * is refused by its first byte, before any of its fields is buffered, so a
 * client without the token makes the coordinator hold at most
 * DT_COORD__PREAUTH_FRAME bytes for it.  dt_coord__gate_step is a pure state
 * machine; coord_server.c does the I/O around it.
 *
 * Which refusals count.  The launcher stops a job at the first refused
 * PyTorch-like client (launcher/agent/agent_node.c): PyTorch's client would
 * retry for its whole timeout (30 minutes) and the job would look hung.  If
 * every refusal counted, anyone who reaches the port could stop the job with
 * nine bytes (VALIDATE, PING).  So a refusal counts only when the client is a
 * process of this job, which the kernel can tell: the client's end of the
 * connection is a socket of this host and network namespace (an exact
 * NETLINK_SOCK_DIAG lookup answers with its owner's uid and inode), its uid is
 * ours, and it is held open by the process hosting the coordinator or one of
 * that process's descendants - which every local rank is (the agent forks
 * them and is their subreaper).  A client on another host, in another
 * container, of another user, or of this user but outside the job is refused
 * and logged the same way, and cannot stop anything; a PyTorch rank of the job
 * without `auth: none` still stops it at its first refusal.
 *
 * Not for sockets, deadlines and connection limits (coord_server.c).
 */
#include "launcher/coordinator/coordinator_internal.h"

#include "base/error.h"

#include <dirent.h>
#include <inttypes.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- the handshake ---- */

static const struct dt_wire_limits preauth_limits = {
    .max_frame_bytes = DT_COORD__PREAUTH_FRAME,
    .max_key_bytes = DT_COORD__PREAUTH_TOKEN,
    .max_value_bytes = 0,
    .max_keys = 0,
};

bool dt_coord__gate_wants(const struct dt_coord__gate *g, uint8_t op)
{
    return !g->validated || !g->authed || op == DT_WIRE_AUTH;
}

static bool token_matches(const char *token, const struct dt_wire_bytes *t)
{
    if (t->len != 64)
        return false;
    /* Constant time: a mismatch position must not show in the timing. */
    uint8_t diff = 0;
    for (size_t i = 0; i < 64; i++)
        diff |= (uint8_t)(t->p[i] ^ (uint8_t)token[i]);
    return diff == 0;
}

/* The refusal of a request that came before the token, by its type alone. */
static int refuse_op(uint8_t op)
{
    /* PyTorch's client sends VALIDATE then PING on connect; any TCPStore
     * request before the token is most likely a PyTorch script. */
    if (op <= DT_WIRE_STORE_BARRIER)
        return dt_error_set(DT_EAUTH,
                            "%s before the job token; this looks like a PyTorch TCPStore client, "
                            "which cannot present one: to let PyTorch scripts in, set "
                            "`rendezvous: {auth: none}` in the job spec (dtrain run: --auth none)",
                            dt_wire_op_name(op));
    return dt_error_set(DT_EAUTH, "%s before the job token", dt_wire_op_name(op));
}

/* The first byte decides whether the request is read at all. */
static int check_op(const struct dt_coord__gate *g, uint8_t op)
{
    if (!dt_wire_op_known(op))
        return dt_error_set(DT_EPROTO, "unknown request type %u (not a TCPStore client, or a newer protocol)",
                            op);
    if (!g->validated && op != DT_WIRE_VALIDATE)
        return dt_error_set(DT_EPROTO, "first request was %s, not VALIDATE: not a TCPStore client",
                            dt_wire_op_name(op));
    if (g->validated && op != DT_WIRE_AUTH)
        return refuse_op(op);
    return 0;
}

int dt_coord__gate_step(struct dt_coord__gate *g, const char *token, const uint8_t *buf, size_t len,
                        struct dt_wire_progress *pg, size_t *used, int *reply)
{
    *used = 0;
    *reply = -1;
    if (len == 0)
        return DT_WIRE_INCOMPLETE;
    int rc = check_op(g, buf[0]);
    struct dt_wire_request r;
    if (rc == 0)
        rc = dt_wire_decode_step(buf, len, &preauth_limits, pg, &r);
    if (rc)
        return rc;
    *used = r.frame_len;
    if (r.op == DT_WIRE_VALIDATE) {
        if (r.u32 != DT_WIRE_MAGIC)
            return dt_error_set(DT_EPROTO, "VALIDATE with magic 0x%08" PRIx32 ", not 0x%08x", r.u32,
                                DT_WIRE_MAGIC);
        g->validated = true;
        return 0;
    }
    if (token && !token_matches(token, &r.key)) {
        *reply = DT_WIRE_REFUSED;
        return dt_error_set(DT_EAUTH, "wrong job token");
    }
    g->authed = true;
    *reply = DT_WIRE_OK;
    return 0;
}

/* ---- whose refusal counts ---- */

/* A failed process scan is not repeated for this long, so a client of our
 * uid outside the job cannot keep the loop busy reading /proc. */
#define PEER_QUIET_MS 100u
/* Processes looked at, at most: the job's tree is far smaller. */
#define PEER_MAX_PROCS 4096

/* sock_diag wants the client's end: its address as the source. */
static bool diag_id(struct inet_diag_req_v2 *q, const struct sockaddr_storage *peer,
                    const struct sockaddr_storage *me)
{
    const struct sockaddr_in6 *p6 = (const void *)peer, *m6 = (const void *)me;
    if (peer->ss_family == AF_INET && me->ss_family == AF_INET) {
        const struct sockaddr_in *p4 = (const void *)peer, *m4 = (const void *)me;
        q->sdiag_family = AF_INET;
        q->id.idiag_sport = p4->sin_port;
        q->id.idiag_dport = m4->sin_port;
        memcpy(q->id.idiag_src, &p4->sin_addr, 4);
        memcpy(q->id.idiag_dst, &m4->sin_addr, 4);
        return true;
    }
    if (peer->ss_family != AF_INET6 || me->ss_family != AF_INET6)
        return false;
    q->id.idiag_sport = p6->sin6_port;
    q->id.idiag_dport = m6->sin6_port;
    /* A v4 client of a dual-stack listener has an AF_INET socket. */
    bool mapped = IN6_IS_ADDR_V4MAPPED(&p6->sin6_addr) && IN6_IS_ADDR_V4MAPPED(&m6->sin6_addr);
    q->sdiag_family = mapped ? AF_INET : AF_INET6;
    memcpy(q->id.idiag_src, mapped ? &p6->sin6_addr.s6_addr[12] : (const void *)&p6->sin6_addr,
           mapped ? 4 : 16);
    memcpy(q->id.idiag_dst, mapped ? &m6->sin6_addr.s6_addr[12] : (const void *)&m6->sin6_addr,
           mapped ? 4 : 16);
    return true;
}

/* The owner uid and inode of the client's end of the connection, when it is
 * a socket of this host and network namespace. */
static bool peer_socket(uv_tcp_t *tcp, uint32_t *uid, uint32_t *ino)
{
    struct sockaddr_storage me, peer;
    int ml = sizeof me, pl = sizeof peer;
    if (uv_tcp_getsockname(tcp, (struct sockaddr *)&me, &ml) ||
        uv_tcp_getpeername(tcp, (struct sockaddr *)&peer, &pl))
        return false;
    struct {
        struct nlmsghdr nh;
        struct inet_diag_req_v2 r;
    } q;
    memset(&q, 0, sizeof q);
    q.nh.nlmsg_len = sizeof q;
    q.nh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    q.nh.nlmsg_flags = NLM_F_REQUEST; /* no NLM_F_DUMP: one exact lookup */
    q.r.sdiag_protocol = IPPROTO_TCP;
    q.r.idiag_states = ~0u;
    q.r.id.idiag_cookie[0] = q.r.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
    if (!diag_id(&q.r, &peer, &me))
        return false;
    int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (fd < 0)
        return false;
    union {
        struct nlmsghdr nh;
        char b[1024];
    } a;
    /* The kernel answers within send(): the reply is queued when it returns. */
    ssize_t n = send(fd, &q, sizeof q, 0) == (ssize_t)sizeof q ? recv(fd, &a, sizeof a, MSG_DONTWAIT) : -1;
    close(fd);
    if (n < (ssize_t)NLMSG_LENGTH(sizeof(struct inet_diag_msg)) || a.nh.nlmsg_type != SOCK_DIAG_BY_FAMILY)
        return false;
    const struct inet_diag_msg *m = NLMSG_DATA(&a.nh);
    if (m->idiag_state == TCP_LISTEN)
        return false;
    *uid = m->idiag_uid;
    *ino = m->idiag_inode;
    return true;
}

/* Does process `pid` hold the socket with this inode open? */
static bool holds_socket(pid_t pid, uint32_t ino)
{
    char path[64], want[40], got[40];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    int wn = snprintf(want, sizeof want, "socket:[%" PRIu32 "]", ino);
    DIR *d = opendir(path);
    if (!d)
        return false;
    bool found = false;
    struct dirent *de;
    while (!found && (de = readdir(d)) != NULL) {
        ssize_t k = de->d_name[0] == '.' ? -1 : readlinkat(dirfd(d), de->d_name, got, sizeof got);
        found = k == wn && memcmp(got, want, (size_t)wn) == 0;
    }
    closedir(d);
    return found;
}

/* Appends the children of every thread of `pid` (a child belongs to the
 * thread that forked it). */
static size_t add_children(pid_t pid, pid_t *list, size_t n)
{
    char path[96];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return n;
    struct dirent *de;
    while (n < PEER_MAX_PROCS && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "/proc/%d/task/%.20s/children", (int)pid, de->d_name);
        FILE *f = fopen(path, "r");
        long child;
        while (f && n < PEER_MAX_PROCS && fscanf(f, "%ld", &child) == 1)
            list[n++] = (pid_t)child;
        if (f)
            fclose(f);
    }
    closedir(d);
    return n;
}

/* Walks this process and its descendants, breadth first. */
static bool job_holds_socket(uint32_t ino)
{
    pid_t *list = malloc(PEER_MAX_PROCS * sizeof *list);
    if (!list)
        return false;
    size_t n = 1;
    list[0] = getpid();
    bool found = false;
    for (size_t i = 0; i < n && !found; i++) {
        found = holds_socket(list[i], ino);
        n = add_children(list[i], list, n);
    }
    free(list);
    return found;
}

static bool peer_in_job(struct dt_coord__conn *conn)
{
    struct dt_coord *c = conn->coord;
    uint32_t uid, ino;
    if (!peer_socket(&conn->tcp, &uid, &ino) || uid != (uint32_t)geteuid() || ino == 0)
        return false;
    uint64_t now = uv_now(&c->loop);
    if (now < c->peer_quiet_until)
        return false;
    bool found = job_holds_socket(ino);
    if (!found)
        c->peer_quiet_until = now + PEER_QUIET_MS;
    return found;
}

void dt_coord__refusal(struct dt_coord__conn *conn, const char *why)
{
    struct dt_coord *c = conn->coord;
    if (!peer_in_job(conn))
        return;
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
