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
 * NETLINK_SOCK_DIAG lookup answers with its owner's uid and inode,
 * base/sock_owner.h), its uid is
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
#include "base/sock_owner.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
                            "which cannot present one: a job's ranks reach the store through their "
                            "node's endpoint (MASTER_ADDR:MASTER_PORT), which presents it for them; "
                            "elsewhere, `rendezvous: {auth: none}` in the job spec (dtrain run: --auth none) "
                            "lets it in",
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
/* The coordinator's own process, or one of its descendants (base/sock_owner.h). */
static bool job_holds_socket(uint32_t ino)
{
    return dt_sock_held_by(getpid(), ino) || dt_sock_held_below(getpid(), ino, NULL);
}

static bool peer_in_job(struct dt_coord__conn *conn)
{
    struct dt_coord *c = conn->coord;
    uint32_t uid, ino;
    uv_os_fd_t fd;
    if (uv_fileno((uv_handle_t *)&conn->tcp, &fd) || !dt_sock_owner(fd, &uid, &ino) || uid != (uint32_t)geteuid())
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
