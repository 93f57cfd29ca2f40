/* coordinator_members.c - agent membership: JOIN, LEAVE, MEMBERS.
 *
 * Each node's agent JOINs once with its node rank, host, pid and number of
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
 * in place).  Everything here runs on the loop thread.
 *
 * Not for restart rounds (launcher/agent_round.c builds them on the store).
 */
#include "launcher/coordinator_internal.h"

#include "base/error.h"
#include "base/log.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NODES ((int64_t)1 << 20)

static void answer(struct coord_conn *conn, uint8_t status, const char *msg)
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
static uint8_t check_join(struct coord_conn *conn, const struct dt_wire_request *r, char *msg, size_t n)
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
    if (rank < 0 || rank >= nnodes) {
        snprintf(msg, n, "node rank %" PRId64 " is out of range for a job of %" PRId64 " nodes (0..%" PRId64 ")",
                 rank, nnodes, nnodes - 1);
        return DT_WIRE_OUT_OF_RANGE;
    }
    if (r->i3 < 1 || r->i3 > MAX_NODES) {
        snprintf(msg, n, "node %" PRId64 " joins with %" PRId64 " ranks (must be at least 1)", rank, r->i3);
        return DT_WIRE_OUT_OF_RANGE;
    }
    if (c->members && c->members[rank].state == DT_WIRE_MEMBER_JOINED) {
        const struct coord_member *m = &c->members[rank];
        snprintf(msg, n,
                 "node rank %" PRId64 " is already taken by the agent with pid %" PRId64 " on %s: two agents "
                 "were given the same node rank",
                 rank, m->pid, m->host);
        return DT_WIRE_TAKEN;
    }
    return DT_WIRE_OK;
}

int member_join(struct coord_conn *conn, const struct dt_wire_request *r)
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
        c->members = calloc((size_t)r->i2, sizeof *c->members);
        if (!c->members)
            return dt_error_set(DT_ENOMEM, "coordinator: out of memory for %" PRId64 " members", r->i2);
        c->nnodes = r->i2;
    }
    struct coord_member *m = &c->members[r->i1];
    m->state = DT_WIRE_MEMBER_JOINED;
    m->nproc = r->i3;
    m->pid = r->i4;
    host_of(r, m->host, sizeof m->host);
    m->conn = conn;
    conn->member = r->i1;
    dt_log_debug("coordinator: node %" PRId64 " of %" PRId64 " joined from %s (%s, pid %" PRId64
                 ", %" PRId64 " ranks)",
                 r->i1, c->nnodes, conn->peer, m->host, m->pid, m->nproc);
    answer(conn, DT_WIRE_OK, "");
    return 0;
}

static void part(struct coord_conn *conn, uint8_t state)
{
    struct dt_coord *c = conn->coord;
    if (conn->member < 0 || !c->members)
        return;
    struct coord_member *m = &c->members[conn->member];
    m->state = state;
    m->conn = NULL;
    if (state == DT_WIRE_MEMBER_LOST && !c->stopping)
        dt_log_warn("coordinator: node %" PRId64 " (%s, pid %" PRId64 ") lost its connection without leaving: "
                    "its agent was killed, or its host or the network went away",
                    conn->member, m->host, m->pid);
    conn->member = -1;
}

void member_leave(struct coord_conn *conn)
{
    part(conn, DT_WIRE_MEMBER_LEFT);
    dt_wire_put_u8(&conn->out, DT_WIRE_OK);
}

void member_lost(struct coord_conn *conn) { part(conn, DT_WIRE_MEMBER_LOST); }

void member_list(struct coord_conn *conn)
{
    struct dt_coord *c = conn->coord;
    uint64_t n = 0;
    for (int64_t i = 0; i < c->nnodes; i++)
        n += c->members[i].state != 0;
    dt_wire_put_u64(&conn->out, n);
    for (int64_t i = 0; i < c->nnodes; i++) {
        const struct coord_member *m = &c->members[i];
        if (!m->state)
            continue;
        dt_wire_put_i64(&conn->out, i);
        dt_wire_put_i64(&conn->out, m->nproc);
        dt_wire_put_i64(&conn->out, m->pid);
        dt_wire_put_u8(&conn->out, m->state);
        dt_wire_put_bytes(&conn->out, m->host, strlen(m->host));
    }
}

void member_free_all(struct dt_coord *c)
{
    free(c->members);
    c->members = NULL;
    c->nnodes = 0;
}
