/* coord_rendezvous.c - dtrain's operations beside TCPStore's: one-round-trip
 * barriers, heartbeats and agent membership.
 *
 * Not for key-value semantics (coord_store.c), nor for restart rounds
 * (launcher/agent/agent_rounds.c builds them on the store).
 */
#include "launcher/coordinator/coordinator_internal.h"

#include "base/error.h"
#include "base/log.h"
#include "comm/store.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RANK ((int64_t)1 << 24)
#define MAX_NODES ((int64_t)1 << 20)

/* ---- barriers ---- */

/* BARRIER(name, world): the coordinator counts arrivals and answers every
 * waiter at once when the count reaches `world` - one request and one reply
 * per client, whatever the world size (a TCPStore barrier made of ADD + WAIT
 * costs two round trips and a key per generation).  The barrier is then
 * forgotten, so the same name can be used again for the next round.  A
 * client that disconnects while waiting no longer counts.  A client that
 * names a different world size gets WORLD_DIFFERS and the barrier goes on.
 */
struct dt_coord__barrier {
    struct dt_coord__barrier *next;
    uint8_t *name;
    size_t nlen;
    int64_t world;
    size_t n;
    size_t cap;
    struct dt_coord__conn **waiters;
};

static struct dt_coord__barrier *barrier_find(struct dt_coord *c, const struct dt_wire_bytes *name)
{
    for (struct dt_coord__barrier *b = c->barriers; b; b = b->next)
        if (b->nlen == name->len && (b->nlen == 0 || memcmp(b->name, name->p, b->nlen) == 0))
            return b;
    return NULL;
}

static void barrier_unlink_free(struct dt_coord *c, struct dt_coord__barrier *b)
{
    struct dt_coord__barrier **pp = &c->barriers;
    while (*pp != b)
        pp = &(*pp)->next;
    *pp = b->next;
    free(b->name);
    free(b->waiters);
    free(b);
}

static struct dt_coord__barrier *barrier_create(struct dt_coord *c, const struct dt_wire_bytes *name,
                                                int64_t world)
{
    struct dt_coord__barrier *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->name = malloc(name->len ? name->len : 1);
    b->cap = world < 64 ? (size_t)world : 64;
    b->waiters = malloc(b->cap * sizeof *b->waiters);
    if (!b->name || !b->waiters) {
        free(b->name);
        free(b->waiters);
        free(b);
        return NULL;
    }
    if (name->len)
        memcpy(b->name, name->p, name->len);
    b->nlen = name->len;
    b->world = world;
    b->next = c->barriers;
    c->barriers = b;
    return b;
}

static void barrier_release(struct dt_coord *c, struct dt_coord__barrier *b)
{
    for (size_t i = 0; i < b->n; i++) {
        struct dt_coord__conn *w = b->waiters[i];
        w->barrier = NULL;
        dt_wire_put_u8(&w->out, DT_WIRE_OK);
        if (!w->in_read)
            dt_coord__conn_flush(w);
    }
    barrier_unlink_free(c, b);
}

int dt_coord__barrier_enter(struct dt_coord__conn *conn, const struct dt_wire_request *r)
{
    struct dt_coord *c = conn->coord;
    if (r->i1 < 1 || r->i1 > MAX_RANK)
        return dt_error_set(DT_EPROTO, "BARRIER with world size %lld", (long long)r->i1);
    if (conn->barrier)
        return dt_error_set(DT_EPROTO, "BARRIER while its previous BARRIER is still pending");
    struct dt_coord__barrier *b = barrier_find(c, &r->key);
    if (b && b->world != r->i1) {
        dt_wire_put_u8(&conn->out, DT_WIRE_WORLD_DIFFERS);
        return 0;
    }
    if (!b && !(b = barrier_create(c, &r->key, r->i1)))
        return dt_error_set(DT_ENOMEM, "coordinator: out of memory for a barrier");
    if (b->n == b->cap) {
        size_t cap = b->cap * 2;
        struct dt_coord__conn **w = realloc(b->waiters, cap * sizeof *w);
        if (!w)
            return dt_error_set(DT_ENOMEM, "coordinator: out of memory for a barrier");
        b->waiters = w;
        b->cap = cap;
    }
    b->waiters[b->n++] = conn;
    conn->barrier = b;
    if ((int64_t)b->n == b->world)
        barrier_release(c, b);
    return 0;
}

void dt_coord__barrier_leave(struct dt_coord__conn *conn)
{
    struct dt_coord__barrier *b = conn->barrier;
    if (!b)
        return;
    conn->barrier = NULL;
    for (size_t i = 0; i < b->n; i++) {
        if (b->waiters[i] == conn) {
            b->waiters[i] = b->waiters[--b->n];
            break;
        }
    }
    if (b->n == 0)
        barrier_unlink_free(conn->coord, b);
}

static void barrier_free_all(struct dt_coord *c)
{
    while (c->barriers)
        barrier_unlink_free(c, c->barriers);
}

/* ---- heartbeats ---- */

/* HEARTBEAT(rank, step): stored in a table indexed by rank that the agent
 * reads from its own thread through dt_coord_heartbeat (hence hb_lock).
 */
struct dt_coord__heartbeat {
    int64_t step;
    double when_s;
    bool seen;
};

int dt_coord__heartbeat_record(struct dt_coord *c, int64_t rank, int64_t step)
{
    if (rank < 0 || rank >= MAX_RANK)
        return dt_error_set(DT_EPROTO, "HEARTBEAT for rank %lld", (long long)rank);
    int rc = 0;
    pthread_mutex_lock(&c->hb_lock);
    if ((size_t)rank >= c->hb_cap) {
        size_t cap = c->hb_cap ? c->hb_cap : 64;
        while (cap <= (size_t)rank)
            cap *= 2;
        struct dt_coord__heartbeat *hb = realloc(c->hb, cap * sizeof *hb);
        if (hb) {
            memset(hb + c->hb_cap, 0, (cap - c->hb_cap) * sizeof *hb);
            c->hb = hb;
            c->hb_cap = cap;
        } else {
            rc = dt_error_set(DT_ENOMEM, "coordinator: out of memory for heartbeats");
        }
    }
    if (rc == 0) {
        c->hb[rank].step = step;
        c->hb[rank].when_s = (double)uv_hrtime() / 1e9;
        c->hb[rank].seen = true;
    }
    pthread_mutex_unlock(&c->hb_lock);
    return rc;
}

int dt_coord_heartbeat(struct dt_coord *c, int rank, int64_t *step, double *when_s)
{
    int rc = DT_ENOTFOUND;
    pthread_mutex_lock(&c->hb_lock);
    if (rank >= 0 && (size_t)rank < c->hb_cap && c->hb[rank].seen) {
        *step = c->hb[rank].step;
        if (when_s)
            *when_s = c->hb[rank].when_s;
        rc = 0;
    }
    pthread_mutex_unlock(&c->hb_lock);
    if (rc)
        dt_error_set(rc, "rank %d has not sent a heartbeat", rank);
    return rc;
}

/* ---- agent membership ---- */

/* Agent membership: JOIN, LEAVE, MEMBERS.  Each node's agent JOINs once with its node rank, host, pid and number of
 * ranks, on a connection it keeps for the whole job; that connection is the
 * member.  LEAVE marks it left (the agent is done); the connection closing
 * without LEAVE marks it lost (the agent was killed, or its host or the
 * network went away), with a log line.  MEMBERS lists every node rank that
 * ever joined and its state, so any agent can see who is there.
 *
 * The first JOIN fixes the job's node count; a JOIN that names another count,
 * a node rank outside 0..nnodes-1, or a node rank a connected member holds is
 * answered with a status and a sentence saying which, and changes nothing.
 * A node rank that was left or lost may be joined again (an agent restarted
 * in place).
 *
 * An elastic job's agents other than node 0 do not know their node rank:
 * they JOIN with node rank -2 (DT_WIRE_ANY_NODE) and are given a slot, the lowest never
 * joined at or above 1 (slots past nnodes are made as needed; a slot is
 * never given twice, so a lost agent's slot stays lost).  The OK answer's
 * message carries the slot in decimal.  Which slots take part in a round,
 * and as which node, is agent_rounds.c's.
 *
 * A host that goes away (powered off, partitioned) closes nothing: its
 * connection would look alive for the kernel's TCP timeouts (about 15
 * minutes with unacknowledged data, for ever without).  So a member's
 * connection gets dt_store_liveness_fd(member_liveness_s) when it joins:
 * keepalive probes every second while it is silent, and TCP_USER_TIMEOUT
 * closes it once nothing was acknowledged for that long; the member is then
 * lost "stopped acknowledging".  An agent that is only busy is not: its
 * kernel acknowledges.
 */
/* One agent of the job, by node rank. */
struct dt_coord__member {
    uint8_t state; /* 0 never joined, else DT_WIRE_MEMBER_* */
    int64_t nproc, pid;
    char host[256];
    char addr[64];               /* the connection's peer, ip:port */
    struct dt_coord__conn *conn; /* while joined */
    char lost_why[512];          /* under hb_lock: why it was lost, "" unless it was */
    double lost_s;               /* under hb_lock: when (monotonic seconds) */
};

static void answer(struct dt_coord__conn *conn, uint8_t status, const char *msg)
{
    dt_wire_put_u8(&conn->out, status);
    dt_wire_put_bytes(&conn->out, msg, strlen(msg));
}

static void host_of(const struct dt_wire_request *r, char *out, size_t n)
{
    size_t len = r->key.len < n - 1 ? r->key.len : n - 1;
    for (size_t i = 0; i < len; i++)
        out[i] = r->key.p[i] >= 0x20 && r->key.p[i] < 0x7f ? (char)r->key.p[i] : '?';
    out[len] = 0;
}

/* A reason not to accept the JOIN into msg, or "" when it may go ahead. */
static uint8_t check_join(struct dt_coord__conn *conn, const struct dt_wire_request *r, char *msg, size_t n)
{
    struct dt_coord *c = conn->coord;
    int64_t rank = r->i1, nnodes = r->i2;
    msg[0] = 0;
    if (conn->member >= 0) {
        snprintf(msg, n, "this connection already joined as node %" PRId64, conn->member);
        return DT_WIRE_TAKEN;
    }
    if (nnodes < 1 || nnodes > MAX_NODES) {
        snprintf(msg, n, "a job of %" PRId64 " nodes (nnodes must be 1..%" PRId64 ")", nnodes, MAX_NODES);
        return DT_WIRE_OUT_OF_RANGE;
    }
    if (c->nnodes && nnodes != c->nnodes) {
        snprintf(msg, n,
                 "node %" PRId64 " says the job has %" PRId64 " nodes, but the first agent to join said %" PRId64
                 ": every agent must be started with the same node count",
                 rank, nnodes, c->nnodes);
        return DT_WIRE_OUT_OF_RANGE;
    }
    if (rank != DT_WIRE_ANY_NODE && (rank < 0 || rank >= nnodes)) {
        snprintf(msg, n, "node rank %" PRId64 " is out of range for a job of %" PRId64 " nodes (0..%" PRId64 ")",
                 rank, nnodes, nnodes - 1);
        return DT_WIRE_OUT_OF_RANGE;
    }
    if (r->i3 < 1 || r->i3 > MAX_NODES) {
        snprintf(msg, n, "node %" PRId64 " joins with %" PRId64 " ranks (must be at least 1)", rank, r->i3);
        return DT_WIRE_OUT_OF_RANGE;
    }
    if (rank != DT_WIRE_ANY_NODE && c->members && c->members[rank].state == DT_WIRE_MEMBER_JOINED) {
        const struct dt_coord__member *m = &c->members[rank];
        snprintf(msg, n,
                 "node rank %" PRId64 " is already taken by the agent with pid %" PRId64 " on %s: two agents "
                 "were given the same node rank",
                 rank, m->pid, m->host);
        return DT_WIRE_TAKEN;
    }
    return DT_WIRE_OK;
}

/* Makes room for `want` slots (the first JOIN: nnodes; an elastic JOIN:
 * one more); 0, or -1 when out of memory. */
static int members_grow(struct dt_coord *c, int64_t want)
{
    if (want <= c->nslots)
        return 0;
    int64_t cap = c->nslots ? c->nslots * 2 : want;
    cap = cap < want ? want : cap > MAX_NODES ? MAX_NODES : cap;
    struct dt_coord__member *all = calloc((size_t)cap, sizeof *all);
    if (!all)
        return -1;
    pthread_mutex_lock(&c->hb_lock); /* dt_coord_member_lost reads them from another thread */
    if (c->nslots)
        memcpy(all, c->members, (size_t)c->nslots * sizeof *all);
    free(c->members);
    c->members = all;
    c->nslots = cap;
    pthread_mutex_unlock(&c->hb_lock);
    return 0;
}

/* The slot an elastic JOIN gets: the lowest never joined from 1; -1 when
 * MAX_NODES slots are used up or memory is. */
static int64_t free_slot(struct dt_coord *c)
{
    for (int64_t i = 1; i < c->nslots; i++)
        if (c->members[i].state == 0)
            return i;
    int64_t i = c->nslots > 1 ? c->nslots : 1;
    return i < MAX_NODES && members_grow(c, i + 1) == 0 ? i : -1;
}

int dt_coord__member_join(struct dt_coord__conn *conn, const struct dt_wire_request *r)
{
    struct dt_coord *c = conn->coord;
    char msg[512];
    uint8_t st = check_join(conn, r, msg, sizeof msg);
    if (st != DT_WIRE_OK) {
        dt_log_warn("coordinator: refused JOIN from %s: %s", conn->peer, msg);
        answer(conn, st, msg);
        return 0;
    }
    if (!c->members) {
        if (members_grow(c, r->i2) < 0)
            return dt_error_set(DT_ENOMEM, "coordinator: out of memory for %" PRId64 " members", r->i2);
        c->nnodes = r->i2;
    }
    int64_t node = r->i1;
    if (node == DT_WIRE_ANY_NODE && (node = free_slot(c)) < 0)
        return dt_error_set(DT_ENOMEM, "coordinator: no slot left for another agent");
    struct dt_coord__member *m = &c->members[node];
    pthread_mutex_lock(&c->hb_lock); /* joined again (an agent restarted in place): not lost now */
    m->lost_why[0] = 0;
    pthread_mutex_unlock(&c->hb_lock);
    m->state = DT_WIRE_MEMBER_JOINED;
    m->nproc = r->i3;
    m->pid = r->i4;
    host_of(r, m->host, sizeof m->host);
    snprintf(m->addr, sizeof m->addr, "%s", conn->peer);
    m->conn = conn;
    conn->member = node;
    uv_os_fd_t fd;
    int e = c->liveness_s > 0 && uv_fileno((uv_handle_t *)&conn->tcp, &fd) == 0
                ? dt_store_liveness_fd(fd, c->liveness_s)
                : 0;
    if (e)
        dt_log_warn("coordinator: node %" PRId64
                    "'s connection from %s keeps the kernel's TCP timeouts (%s): a "
                    "host that goes away is noticed in minutes, not %g s",
                    node, conn->peer, strerror(e), c->liveness_s);
    dt_log_debug("coordinator: node %" PRId64 " of %" PRId64 " joined from %s (%s, pid %" PRId64 ", %" PRId64
                 " ranks)",
                 node, c->nnodes, conn->peer, m->host, m->pid, m->nproc);
    char slot[24] = "";
    if (r->i1 == DT_WIRE_ANY_NODE)
        snprintf(slot, sizeof slot, "%" PRId64, node);
    answer(conn, DT_WIRE_OK, slot);
    return 0;
}

/* Why a member was lost, from how its connection closed (conn_close's reason). */
static void lost_why(const struct dt_coord *c, int64_t node, const struct dt_coord__member *m,
                     const char *reason, char *out, size_t n)
{
    int len = snprintf(out, n, "node %" PRId64 " (host %s, address %s, agent pid %" PRId64 ") ", node,
                       m->host, m->addr, m->pid);
    if (len < 0 || (size_t)len >= n)
        return;
    if (reason && strstr(reason, "timed out"))
        snprintf(out + len, n - (size_t)len,
                 "stopped acknowledging: nothing from its host for %g s (rendezvous.heartbeat_timeout): "
                 "the host or the network went away",
                 c->liveness_s);
    else if (reason && strstr(reason, "sent nothing for"))
        snprintf(out + len, n - (size_t)len,
                 "went silent: its agent sent nothing for %g s while its host still acknowledged: the agent "
                 "is stopped (SIGSTOP, a debugger) or hung",
                 (double)c->silence_ms / 1e3);
    else if (reason)
        snprintf(out + len, n - (size_t)len, "lost its connection (%s) without leaving", reason);
    else
        snprintf(out + len, n - (size_t)len,
                 "closed its connection without leaving: its agent exited or was killed");
}

static void part(struct dt_coord__conn *conn, uint8_t state, const char *reason)
{
    struct dt_coord *c = conn->coord;
    if (conn->member < 0 || !c->members)
        return;
    struct dt_coord__member *m = &c->members[conn->member];
    m->state = state;
    m->conn = NULL;
    if (state == DT_WIRE_MEMBER_LOST && !c->stopping) {
        char why[sizeof m->lost_why];
        lost_why(c, conn->member, m, reason, why, sizeof why);
        pthread_mutex_lock(&c->hb_lock);
        memcpy(m->lost_why, why, sizeof why);
        m->lost_s = (double)uv_hrtime() / 1e9;
        pthread_mutex_unlock(&c->hb_lock);
        dt_log_warn("coordinator: %s", why);
    }
    conn->member = -1;
}

void dt_coord__member_leave(struct dt_coord__conn *conn)
{
    part(conn, DT_WIRE_MEMBER_LEFT, NULL);
    dt_wire_put_u8(&conn->out, DT_WIRE_OK);
}

void dt_coord__member_lost(struct dt_coord__conn *conn, const char *reason)
{
    part(conn, DT_WIRE_MEMBER_LOST, reason);
}

int dt_coord_member_lost(struct dt_coord *c, int node, char *why, size_t n, double *when_s)
{
    int rc = DT_ENOTFOUND;
    pthread_mutex_lock(&c->hb_lock);
    if (c->members && node >= 0 && node < c->nslots && c->members[node].lost_why[0]) {
        snprintf(why, n, "%s", c->members[node].lost_why);
        if (when_s)
            *when_s = c->members[node].lost_s;
        rc = 0;
    }
    pthread_mutex_unlock(&c->hb_lock);
    return rc ? dt_error_set(rc, "node %d was not lost", node) : 0;
}

void dt_coord__member_list(struct dt_coord__conn *conn)
{
    struct dt_coord *c = conn->coord;
    uint64_t n = 0;
    for (int64_t i = 0; i < c->nslots; i++)
        n += c->members[i].state != 0;
    dt_wire_put_u64(&conn->out, n);
    for (int64_t i = 0; i < c->nslots; i++) {
        const struct dt_coord__member *m = &c->members[i];
        if (!m->state)
            continue;
        dt_wire_put_i64(&conn->out, i);
        dt_wire_put_i64(&conn->out, m->nproc);
        dt_wire_put_i64(&conn->out, m->pid);
        dt_wire_put_u8(&conn->out, m->state);
        dt_wire_put_bytes(&conn->out, m->host, strlen(m->host));
    }
}

static void member_free_all(struct dt_coord *c)
{
    free(c->members);
    c->members = NULL;
    c->nnodes = c->nslots = 0;
}

/* ---- lifetime ---- */

void dt_coord__rendezvous_free(struct dt_coord *c)
{
    barrier_free_all(c);
    member_free_all(c);
    free(c->hb);
}
