/* coord_queue.c - PyTorch's store queues (QUEUE_PUSH, QUEUE_POP, QUEUE_LEN):
 * a key space of their own beside the key-value table.
 *
 * Not for the table or WAIT (coord_store.c), which queues touch only to
 * count a key with items as present and to wake a waiting pop.
 */
#include "launcher/coordinator/coordinator_internal.h"

#include "base/error.h"

#include <stdlib.h>
#include <string.h>

/* Semantics of PyTorch's libuv server (TCPStoreLibUvBackend.cpp, 2.6+):
 * queues are a key space apart from the key-value table (GET, DELETE_KEY,
 * GETNUMKEYS and LIST_KEYS do not see them); PUSH appends and answers
 * nothing, and wakes one client WAITing on that key; POP answers the length
 * before the pop as i64 and, when it was not empty, the front value; LEN
 * answers the length.  CHECK and WAIT count a key whose queue is not empty
 * as present, which is how PyTorch's client makes a blocking pop: WAIT,
 * then POP (and a pop that finds the queue empty is the client's "queue is
 * empty" error).
 *
 * Items count against max_total_bytes like values do (their bytes plus
 * ITEM_COST), so a client cannot grow the coordinator without bound.
 */
#define ITEM_COST 32u

/* An empty queue is removed. */
struct queue_item {
    struct queue_item *next;
    size_t len;
    uint8_t data[];
};

struct dt_coord__queue {
    struct dt_coord__queue *next; /* hash chain */
    uint64_t hash;
    size_t klen;
    size_t n;
    struct queue_item *head, *tail;
    uint8_t key[];
};

static struct dt_coord__queue **slot_of(struct dt_coord *c, uint64_t h)
{
    return &c->queues[h % DT_COORD__QUEUE_SLOTS];
}

static struct dt_coord__queue *queue_find(struct dt_coord *c, const uint8_t *key, size_t klen)
{
    uint64_t h = dt_coord__hash(key, klen);
    for (struct dt_coord__queue *q = *slot_of(c, h); q; q = q->next)
        if (q->hash == h && q->klen == klen && (klen == 0 || memcmp(q->key, key, klen) == 0))
            return q;
    return NULL;
}

bool dt_coord__queue_nonempty(struct dt_coord *c, const uint8_t *key, size_t klen)
{
    struct dt_coord__queue *q = queue_find(c, key, klen);
    return q && q->n > 0;
}

static void unlink_queue(struct dt_coord *c, struct dt_coord__queue *q)
{
    struct dt_coord__queue **pp = slot_of(c, q->hash);
    while (*pp != q)
        pp = &(*pp)->next;
    *pp = q->next;
    c->kv.bytes -= q->klen + ITEM_COST;
    free(q);
}

int dt_coord__queue_push(struct dt_coord *c, const struct dt_wire_bytes *key, const struct dt_wire_bytes *val)
{
    struct dt_coord__queue *q = queue_find(c, key->p, key->len);
    size_t cost = val->len + ITEM_COST + (q ? 0 : key->len + ITEM_COST);
    if (c->kv.bytes + cost > c->max_total_bytes)
        return dt_error_set(DT_ENOMEM,
                            "the store is full: a queue item of %zu bytes would pass the %zu-byte "
                            "total memory limit (%zu in use)",
                            val->len, c->max_total_bytes, c->kv.bytes);
    struct queue_item *it = malloc(sizeof *it + val->len);
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
        q->hash = dt_coord__hash(key->p, key->len);
        struct dt_coord__queue **slot = slot_of(c, q->hash);
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
    dt_coord__wake_one(c, key->p, key->len);
    return 0;
}

void dt_coord__queue_pop(struct dt_coord__conn *conn, const struct dt_wire_bytes *key)
{
    struct dt_coord *c = conn->coord;
    struct dt_coord__queue *q = queue_find(c, key->p, key->len);
    dt_wire_put_i64(&conn->out, q ? (int64_t)q->n : 0);
    if (!q)
        return;
    struct queue_item *it = q->head;
    dt_wire_put_bytes(&conn->out, it->data, it->len);
    q->head = it->next;
    if (!q->head)
        q->tail = NULL;
    q->n--;
    c->kv.bytes -= it->len + ITEM_COST;
    free(it);
    if (q->n == 0)
        unlink_queue(c, q);
}

void dt_coord__queue_len(struct dt_coord__conn *conn, const struct dt_wire_bytes *key)
{
    struct dt_coord__queue *q = queue_find(conn->coord, key->p, key->len);
    dt_wire_put_i64(&conn->out, q ? (int64_t)q->n : 0);
}

void dt_coord__queue_free_all(struct dt_coord *c)
{
    for (size_t i = 0; i < DT_COORD__QUEUE_SLOTS; i++) {
        while (c->queues[i]) {
            struct dt_coord__queue *q = c->queues[i];
            while (q->head) {
                struct queue_item *it = q->head;
                q->head = it->next;
                free(it);
            }
            c->queues[i] = q->next;
            free(q);
        }
    }
}
