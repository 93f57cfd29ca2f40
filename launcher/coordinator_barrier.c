/* coordinator_barrier.c - dtrain's barrier and heartbeat operations.
 *
 * BARRIER(name, world): the coordinator counts arrivals and answers every
 * waiter at once when the count reaches `world` - one request and one reply
 * per client, whatever the world size (a TCPStore barrier made of ADD + WAIT
 * costs two round trips and a key per generation).  The barrier is then
 * forgotten, so the same name can be used again for the next round.  A
 * client that disconnects while waiting no longer counts.  A client that
 * names a different world size gets WORLD_DIFFERS and the barrier goes on.
 *
 * HEARTBEAT(rank, step): stored in a table indexed by rank that the agent
 * reads from its own thread through dt_coord_heartbeat (hence the lock).
 * The count of clients refused for lack of the job token sits under the same
 * lock, for dt_coord_refusals.
 *
 * Not for key-value semantics (coordinator_ops.c).
 */
#include "launcher/coordinator_internal.h"

#include "base/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RANK ((int64_t)1 << 24)

static struct coord_barrier *find(struct dt_coord *c, const struct dt_wire_bytes *name)
{
    for (struct coord_barrier *b = c->barriers; b; b = b->next)
        if (b->nlen == name->len && (b->nlen == 0 || memcmp(b->name, name->p, b->nlen) == 0))
            return b;
    return NULL;
}

static void unlink_free(struct dt_coord *c, struct coord_barrier *b)
{
    struct coord_barrier **pp = &c->barriers;
    while (*pp != b)
        pp = &(*pp)->next;
    *pp = b->next;
    free(b->name);
    free(b->waiters);
    free(b);
}

static struct coord_barrier *create(struct dt_coord *c, const struct dt_wire_bytes *name, int64_t world)
{
    struct coord_barrier *b = calloc(1, sizeof *b);
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

static void release(struct dt_coord *c, struct coord_barrier *b)
{
    for (size_t i = 0; i < b->n; i++) {
        struct coord_conn *w = b->waiters[i];
        w->barrier = NULL;
        dt_wire_put_u8(&w->out, DT_WIRE_OK);
        if (!w->in_read)
            coord_conn_flush(w);
    }
    unlink_free(c, b);
}

int barrier_enter(struct coord_conn *conn, const struct dt_wire_request *r)
{
    struct dt_coord *c = conn->coord;
    if (r->i1 < 1 || r->i1 > MAX_RANK)
        return dt_error_set(DT_EPROTO, "BARRIER with world size %lld", (long long)r->i1);
    if (conn->barrier)
        return dt_error_set(DT_EPROTO, "BARRIER while its previous BARRIER is still pending");
    struct coord_barrier *b = find(c, &r->key);
    if (b && b->world != r->i1) {
        dt_wire_put_u8(&conn->out, DT_WIRE_WORLD_DIFFERS);
        return 0;
    }
    if (!b && !(b = create(c, &r->key, r->i1)))
        return dt_error_set(DT_ENOMEM, "coordinator: out of memory for a barrier");
    if (b->n == b->cap) {
        size_t cap = b->cap * 2;
        struct coord_conn **w = realloc(b->waiters, cap * sizeof *w);
        if (!w)
            return dt_error_set(DT_ENOMEM, "coordinator: out of memory for a barrier");
        b->waiters = w;
        b->cap = cap;
    }
    b->waiters[b->n++] = conn;
    conn->barrier = b;
    if ((int64_t)b->n == b->world)
        release(c, b);
    return 0;
}

void barrier_leave(struct coord_conn *conn)
{
    struct coord_barrier *b = conn->barrier;
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
        unlink_free(conn->coord, b);
}

void barrier_free_all(struct dt_coord *c)
{
    while (c->barriers)
        unlink_free(c, c->barriers);
}

void refusal_record(struct dt_coord *c, const char *why)
{
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

int heartbeat_record(struct dt_coord *c, int64_t rank, int64_t step)
{
    if (rank < 0 || rank >= MAX_RANK)
        return dt_error_set(DT_EPROTO, "HEARTBEAT for rank %lld", (long long)rank);
    int rc = 0;
    pthread_mutex_lock(&c->hb_lock);
    if ((size_t)rank >= c->hb_cap) {
        size_t cap = c->hb_cap ? c->hb_cap : 64;
        while (cap <= (size_t)rank)
            cap *= 2;
        struct coord_heartbeat *hb = realloc(c->hb, cap * sizeof *hb);
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
