/* coordinator_queue.c - PyTorch's store queues: QUEUE_PUSH, QUEUE_POP, QUEUE_LEN.
 *
 * Semantics of PyTorch's libuv server (TCPStoreLibUvBackend.cpp, 2.6+):
 * queues are a key space apart from the key-value table (GET, DELETE_KEY
 * and GETNUMKEYS do not see them); PUSH appends and answers nothing, and
 * wakes one client WAITing on that key; POP answers the length before the
 * pop as i64 and, when it was not empty, the front value; LEN answers the
 * length.  CHECK and WAIT count a key whose queue is not empty as present,
 * which is how PyTorch's client makes a blocking pop: WAIT, then POP (and a
 * pop that finds the queue empty is the client's "queue is empty" error).
 *
 * Items count against max_total_bytes like values do (their bytes plus
 * ITEM_COST), so a client cannot grow the coordinator without bound.
 *
 * Not for the key-value table (coordinator_kv.c) or waking (coordinator_wait.c).
 */
#include "launcher/coordinator_internal.h"

#include "base/error.h"

#include <stdlib.h>
#include <string.h>

#define ITEM_COST 32u

static struct coord_queue **slot_of(struct dt_coord *c, uint64_t h)
{
    return &c->queues[h % COORD_QUEUE_SLOTS];
}

static struct coord_queue *find(struct dt_coord *c, const uint8_t *key, size_t klen)
{
    uint64_t h = kv_hash(key, klen);
    for (struct coord_queue *q = *slot_of(c, h); q; q = q->next)
        if (q->hash == h && q->klen == klen && (klen == 0 || memcmp(q->key, key, klen) == 0))
            return q;
    return NULL;
}

bool queue_nonempty(struct dt_coord *c, const uint8_t *key, size_t klen)
{
    struct coord_queue *q = find(c, key, klen);
    return q && q->n > 0;
}

static void unlink_queue(struct dt_coord *c, struct coord_queue *q)
{
    struct coord_queue **pp = slot_of(c, q->hash);
    while (*pp != q)
        pp = &(*pp)->next;
    *pp = q->next;
    c->kv.bytes -= q->klen + ITEM_COST;
    free(q);
}

int queue_push(struct dt_coord *c, const struct dt_wire_bytes *key, const struct dt_wire_bytes *val)
{
    struct coord_queue *q = find(c, key->p, key->len);
    size_t cost = val->len + ITEM_COST + (q ? 0 : key->len + ITEM_COST);
    if (c->kv.bytes + cost > c->max_total_bytes)
        return dt_error_set(DT_ENOMEM,
                            "the store is full: a queue item of %zu bytes would pass the %zu-byte "
                            "total memory limit (%zu in use)",
                            val->len, c->max_total_bytes, c->kv.bytes);
    struct coord_queue_item *it = malloc(sizeof *it + val->len);
    if (!it)
        return dt_error_set(DT_ENOMEM, "coordinator: out of memory for a queue item");
    if (!q) {
        q = calloc(1, sizeof *q + key->len);
        if (!q) {
            free(it);
            return dt_error_set(DT_ENOMEM, "coordinator: out of memory for a queue");
        }
        if (key->len)
            memcpy(q->key, key->p, key->len);
        q->klen = key->len;
        q->hash = kv_hash(key->p, key->len);
        struct coord_queue **slot = slot_of(c, q->hash);
        q->next = *slot;
        *slot = q;
    }
    it->next = NULL;
    it->len = val->len;
    if (val->len)
        memcpy(it->data, val->p, val->len);
    if (q->tail)
        q->tail->next = it;
    else
        q->head = it;
    q->tail = it;
    q->n++;
    c->kv.bytes += cost;
    struct kv_entry *e = kv_find(&c->kv, key->p, key->len);
    if (e && e->waiters)
        wait_wake_one(c, e);
    return 0;
}

int queue_pop(struct coord_conn *conn, const struct dt_wire_bytes *key)
{
    struct dt_coord *c = conn->coord;
    struct coord_queue *q = find(c, key->p, key->len);
    dt_wire_put_i64(&conn->out, q ? (int64_t)q->n : 0);
    if (!q)
        return 0;
    struct coord_queue_item *it = q->head;
    dt_wire_put_bytes(&conn->out, it->data, it->len);
    q->head = it->next;
    if (!q->head)
        q->tail = NULL;
    q->n--;
    c->kv.bytes -= it->len + ITEM_COST;
    free(it);
    if (q->n == 0)
        unlink_queue(c, q);
    return 0;
}

void queue_len(struct coord_conn *conn, const struct dt_wire_bytes *key)
{
    struct coord_queue *q = find(conn->coord, key->p, key->len);
    dt_wire_put_i64(&conn->out, q ? (int64_t)q->n : 0);
}

void queue_free_all(struct dt_coord *c)
{
    for (size_t i = 0; i < COORD_QUEUE_SLOTS; i++) {
        while (c->queues[i]) {
            struct coord_queue *q = c->queues[i];
            while (q->head) {
                struct coord_queue_item *it = q->head;
                q->head = it->next;
                free(it);
            }
            c->queues[i] = q->next;
            free(q);
        }
    }
}
