/* store_client_members.c - the client side of agent membership (store.h):
 * JOIN, LEAVE, MEMBERS (layouts in store_wire.h).
 *
 * A refused JOIN carries the coordinator's sentence (which node rank, who
 * holds it, which node count the job has); it becomes this call's error
 * message as it is, so the agent's user reads the reason, not a code.
 *
 * Not for restart rounds (launcher/agent/agent_rounds.c) or key-value operations.
 */
#include "comm/store_client_internal.h"

#include "base/error.h"
#include "base/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_MEMBERS (1 << 20)

/* JOIN as node_rank (DT_WIRE_ANY_NODE: any free slot, into *given). */
static int join(struct dt_store *s, int node_rank, int nnodes, int nproc, const char *host, int *given)
{
    int rc = dt_store__begin(s, DT_WIRE_JOIN, NULL, 0);
    if (rc)
        return rc;
    if (node_rank == DT_WIRE_ANY_NODE)
        snprintf(s->what, sizeof s->what, " as a node of an elastic job of at most %d", nnodes);
    else
        snprintf(s->what, sizeof s->what, " as node %d of %d", node_rank, nnodes);
    dt_wire_put_i64(&s->req, node_rank);
    dt_wire_put_i64(&s->req, nnodes);
    dt_wire_put_i64(&s->req, nproc);
    dt_wire_put_i64(&s->req, (int64_t)getpid());
    dt_wire_put_bytes(&s->req, host, strlen(host));
    double deadline = dt_clock_s() + s->timeout_s;
    uint8_t st = 0;
    rc = dt_store__send(s, deadline);
    if (rc == 0)
        rc = dt_store__recv(s, &st, 1, deadline);
    void *msg = NULL;
    size_t len = 0;
    if (rc == 0)
        rc = dt_store__recv_bytes(s, &msg, &len, deadline);
    if (rc)
        return rc;
    if (st != DT_WIRE_OK)
        rc = dt_error_set(st == DT_WIRE_TAKEN || st == DT_WIRE_OUT_OF_RANGE ? DT_EINVAL : DT_EPROTO,
                          "coordinator %s refused JOIN%s: %s", s->peer, s->what,
                          len ? (const char *)msg : "no reason given");
    else if (given && (!len || sscanf(msg, "%d", given) != 1 || *given < 1))
        rc = dt_error_set(DT_EPROTO, "coordinator %s accepted JOIN%s without giving a node slot", s->peer,
                          s->what);
    free(msg);
    return rc;
}

int dt_store_join(struct dt_store *s, int node_rank, int nnodes, int nproc, const char *host)
{
    return join(s, node_rank, nnodes, nproc, host, NULL);
}

int dt_store_join_any(struct dt_store *s, int nnodes, int nproc, const char *host, int *slot)
{
    return join(s, DT_WIRE_ANY_NODE, nnodes, nproc, host, slot);
}

int dt_store_leave(struct dt_store *s)
{
    int rc = dt_store__begin(s, DT_WIRE_LEAVE, NULL, 0);
    if (rc)
        return rc;
    double deadline = dt_clock_s() + s->timeout_s;
    uint8_t st = 0;
    rc = dt_store__send(s, deadline);
    if (rc == 0)
        rc = dt_store__recv(s, &st, 1, deadline);
    if (rc == 0 && st != DT_WIRE_OK) {
        dt_store__drop(s);
        return dt_error_set(DT_EPROTO, "coordinator %s answered LEAVE with %u", s->peer, st);
    }
    return rc;
}

static int recv_member(struct dt_store *s, struct dt_store_member *m, double deadline)
{
    int64_t rank = 0, nproc = 0, pid = 0;
    uint8_t state = 0;
    void *host = NULL;
    size_t len = 0;
    int rc = dt_store__recv_i64(s, &rank, deadline);
    if (rc == 0)
        rc = dt_store__recv_i64(s, &nproc, deadline);
    if (rc == 0)
        rc = dt_store__recv_i64(s, &pid, deadline);
    if (rc == 0)
        rc = dt_store__recv(s, &state, 1, deadline);
    if (rc == 0)
        rc = dt_store__recv_bytes(s, &host, &len, deadline);
    if (rc)
        return rc;
    m->node_rank = (int)rank;
    m->nproc = (int)nproc;
    m->pid = (long)pid;
    m->state = (enum dt_store_member_state)state;
    snprintf(m->host, sizeof m->host, "%s", (const char *)host);
    free(host);
    return 0;
}

int dt_store_members(struct dt_store *s, struct dt_store_member **out, int *n)
{
    *out = NULL;
    *n = 0;
    int rc = dt_store__begin(s, DT_WIRE_MEMBERS, NULL, 0);
    if (rc)
        return rc;
    double deadline = dt_clock_s() + s->timeout_s;
    int64_t count = 0;
    rc = dt_store__send(s, deadline);
    if (rc == 0)
        rc = dt_store__recv_i64(s, &count, deadline);
    if (rc)
        return rc;
    if (count < 0 || count > MAX_MEMBERS) {
        dt_store__drop(s);
        return dt_error_set(DT_EPROTO, "coordinator %s answered MEMBERS with %lld members", s->peer,
                            (long long)count);
    }
    struct dt_store_member *m = calloc(count ? (size_t)count : 1, sizeof *m);
    if (!m) {
        dt_store__drop(s);
        return dt_error_set(DT_ENOMEM, "store: out of memory for %lld members", (long long)count);
    }
    for (int64_t i = 0; i < count && rc == 0; i++)
        rc = recv_member(s, &m[i], deadline);
    if (rc) {
        free(m);
        return rc;
    }
    *out = m;
    *n = (int)count;
    return 0;
}
