/* coord_store.c - the TCPStore half of the coordinator: what each request
 * does to the store and what it answers, the key-value table and its memory
 * budget, and clients blocked in WAIT.
 *
 * Semantics follow PyTorch's libuv TCPStore server (TCPStoreLibUvBackend.cpp):
 * GET of an absent key answers an empty value (PyTorch's client WAITs first);
 * ADD keeps the counter as decimal text, read as std::stoll reads it;
 * COMPARE_SET on an absent key sets it only when `expected` is empty and
 * otherwise answers `expected` back; DELETE_KEY answers how many keys went
 * (0 or 1); GETNUMKEYS and LIST_KEYS see every key, PyTorch's internal
 * "init/" counter included; STORE_BARRIER is a counter under its key plus a
 * WAIT.  SET, APPEND and MULTI_SET answer nothing.
 *
 * Not for framing, sockets or the job token (coord_server.c, coord_gate.c),
 * PyTorch's queues (coord_queue.c), nor dtrain's barrier, heartbeats and
 * membership (coord_rendezvous.c).
 */
#include "launcher/coordinator/coordinator_internal.h"

#include "base/error.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the key-value table ---- */

/* Chained hashing (FNV-1a over the key bytes) with entries allocated one by
 * one, so an entry keeps its address when the table grows: waiting clients
 * point at entries.  Keys are bytes, not C strings, as in TCPStore.
 *
 * Every key costs its bytes plus ENTRY_COST against max_total_bytes,
 * waited-for keys included, and every key a blocked WAIT names costs
 * WAIT_COST more, so a client cannot grow the coordinator past the budget by
 * waiting on fresh names.  The costs are what the memory takes, not round
 * numbers: an entry is 56 bytes before its key, a malloc chunk adds up to 23
 * (its header and the 16-byte rounding), its hash slot 8 to 16 (the table
 * doubles at one entry a slot): 96; a waiter node is 40 bytes in a 48-byte
 * chunk.  (With 64 for an entry and nothing for a waiter, 107 connections
 * WAITing on 131072 fresh 12-byte keys each took the coordinator to 1.84 GB
 * under the 1 GiB budget.)
 */
#define ENTRY_COST 96u
#define WAIT_COST 48u

/* One key.  An entry that is not `present` exists only to hold the clients
 * waiting for it; it is removed when the last of them leaves. */
struct dt_coord__entry {
    struct dt_coord__entry *next; /* hash chain */
    uint64_t hash;
    bool present;
    size_t klen;
    uint8_t *val;
    size_t vlen;
    struct dt_coord__wait *waiters; /* doubly linked through prev/next */
    uint8_t key[];                  /* in the entry: one cache miss less per lookup */
};

uint64_t dt_coord__hash(const uint8_t *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

static int kv_init(struct dt_coord__kv *t)
{
    memset(t, 0, sizeof *t);
    t->nslots = 1024;
    t->slots = calloc(t->nslots, sizeof *t->slots);
    return t->slots ? 0 : DT_ENOMEM;
}

static void entry_free(struct dt_coord__entry *e)
{
    free(e->val);
    free(e);
}

static void kv_free(struct dt_coord__kv *t)
{
    for (size_t i = 0; i < t->nslots; i++) {
        struct dt_coord__entry *e = t->slots[i];
        while (e) {
            struct dt_coord__entry *next = e->next;
            entry_free(e);
            e = next;
        }
    }
    free(t->slots);
    memset(t, 0, sizeof *t);
}

static struct dt_coord__entry *kv_find(struct dt_coord__kv *t, const uint8_t *key, size_t klen)
{
    uint64_t h = dt_coord__hash(key, klen);
    for (struct dt_coord__entry *e = t->slots[h & (t->nslots - 1)]; e; e = e->next)
        if (e->hash == h && e->klen == klen && (klen == 0 || memcmp(e->key, key, klen) == 0))
            return e;
    return NULL;
}

/* Doubling keeps chains short; a failed grow only makes them longer. */
static void maybe_grow(struct dt_coord__kv *t)
{
    if (t->nentries < t->nslots)
        return;
    size_t n = t->nslots * 2;
    struct dt_coord__entry **slots = calloc(n, sizeof *slots);
    if (!slots)
        return;
    for (size_t i = 0; i < t->nslots; i++) {
        struct dt_coord__entry *e = t->slots[i];
        while (e) {
            struct dt_coord__entry *next = e->next;
            e->next = slots[e->hash & (n - 1)];
            slots[e->hash & (n - 1)] = e;
            e = next;
        }
    }
    free(t->slots);
    t->slots = slots;
    t->nslots = n;
}

static int over_budget(struct dt_coord *c, size_t more)
{
    return dt_error_set(DT_ENOMEM,
                        "the store is full: %zu more bytes would pass the %zu-byte total memory "
                        "limit (%zu in use)",
                        more, c->max_total_bytes, c->kv.bytes);
}

static int kv_lookup_or_add(struct dt_coord *c, const uint8_t *key, size_t klen, struct dt_coord__entry **out)
{
    struct dt_coord__kv *t = &c->kv;
    struct dt_coord__entry *e = kv_find(t, key, klen);
    if (e) {
        *out = e;
        return 0;
    }
    size_t cost = klen + ENTRY_COST;
    if (t->bytes + cost > c->max_total_bytes)
        return over_budget(c, cost);
    e = calloc(1, sizeof *e + klen);
    if (!e)
        return dt_error_set(DT_ENOMEM, "coordinator: out of memory for a key");
    if (klen)
        memcpy(e->key, key, klen);
    e->klen = klen;
    e->hash = dt_coord__hash(key, klen);
    maybe_grow(t);
    size_t slot = e->hash & (t->nslots - 1);
    e->next = t->slots[slot];
    t->slots[slot] = e;
    t->nentries++;
    t->bytes += cost;
    *out = e;
    return 0;
}

/* Puts len bytes at offset `keep` of e's value, growing it. */
static int store_value(struct dt_coord *c, struct dt_coord__entry *e, size_t keep, const uint8_t *val,
                       size_t len)
{
    size_t total = keep + len;
    if (total > c->lim.max_value_bytes)
        return dt_error_set(DT_ENOMEM, "value of %zu bytes would pass the %zu-byte value limit",
                            total, c->lim.max_value_bytes);
    size_t old = e->present ? e->vlen : 0;
    if (total > old && c->kv.bytes + (total - old) > c->max_total_bytes)
        return over_budget(c, total - old);
    uint8_t *p = e->val;
    if (total > old || !p) {
        p = realloc(e->val, total ? total : 1);
        if (!p)
            return dt_error_set(DT_ENOMEM, "coordinator: out of memory for a value");
    }
    if (len)
        memcpy(p + keep, val, len);
    e->val = p;
    c->kv.bytes = c->kv.bytes - old + total;
    c->kv.generation++;
    e->vlen = total;
    if (!e->present) {
        e->present = true;
        c->kv.npresent++;
    }
    return 0;
}

static int kv_put(struct dt_coord *c, struct dt_coord__entry *e, const uint8_t *val, size_t vlen)
{
    return store_value(c, e, 0, val, vlen);
}

static int kv_append(struct dt_coord *c, struct dt_coord__entry *e, const uint8_t *val, size_t vlen)
{
    return store_value(c, e, e->present ? e->vlen : 0, val, vlen);
}

static void kv_remove(struct dt_coord__kv *t, struct dt_coord__entry *e);

/* DELETE_KEY: clients waiting on the key (STORE_BARRIER's waiters wait on a
 * present key) keep the entry, as PyTorch keeps them waiting for the next
 * SET of that key. */
static void kv_delete(struct dt_coord__kv *t, struct dt_coord__entry *e)
{
    if (!e->waiters) {
        kv_remove(t, e);
        return;
    }
    t->bytes -= e->vlen;
    t->npresent--;
    t->generation++;
    free(e->val);
    e->val = NULL;
    e->vlen = 0;
    e->present = false;
}

static void kv_remove(struct dt_coord__kv *t, struct dt_coord__entry *e)
{
    struct dt_coord__entry **pp = &t->slots[e->hash & (t->nslots - 1)];
    while (*pp != e)
        pp = &(*pp)->next;
    *pp = e->next;
    t->nentries--;
    t->generation++;
    t->bytes -= e->klen + ENTRY_COST + (e->present ? e->vlen : 0);
    if (e->present)
        t->npresent--;
    entry_free(e);
}

/* ---- WAIT ---- */

/* Clients blocked in WAIT until their keys exist.  A WAIT names keys; the
 * reply (one STOP_WAITING byte) goes out when the last missing one appears.
 * Each missing key gets a node (struct dt_coord__wait) on both the key's list
 * and the client's list, so a key appearing wakes its waiters in O(waiters)
 * and a client leaving (CANCEL_WAIT, timeout, disconnect) drops its nodes in
 * O(its keys).  One WAIT per client at a time: PyTorch's client
 * blocks on the reply, so a second one is a protocol error.
 */

/* A client waiting for one key; it sits both on the key's list and on the
 * client's own list, so either side can drop it in O(1). */
struct dt_coord__wait {
    struct dt_coord__wait *prev, *next;
    struct dt_coord__wait *conn_next;
    struct dt_coord__entry *entry;
    struct dt_coord__conn *conn;
};

static void unlink_node(struct dt_coord *c, struct dt_coord__wait *n)
{
    struct dt_coord__entry *e = n->entry;
    if (!e) /* its key already appeared and emptied its list */
        return;
    if (n->prev)
        n->prev->next = n->next;
    else
        e->waiters = n->next;
    if (n->next)
        n->next->prev = n->prev;
    if (!e->present && !e->waiters)
        kv_remove(&c->kv, e);
}

void dt_coord__wait_cancel(struct dt_coord__conn *conn)
{
    struct dt_coord__wait *n = conn->wait_nodes;
    while (n) {
        struct dt_coord__wait *next = n->conn_next;
        unlink_node(conn->coord, n);
        free(n);
        conn->coord->kv.bytes -= WAIT_COST;
        n = next;
    }
    conn->wait_nodes = NULL;
    conn->waits_left = 0;
    conn->waiting = false;
}

/* Puts conn on e's list of waiters; the same key twice in one WAIT counts
 * once. */
static int wait_on(struct dt_coord__conn *conn, struct dt_coord__entry *e)
{
    /* This WAIT's nodes go to the head of their keys' lists, and nothing
     * else runs while it registers: a key named twice has this connection
     * first (O(1), not a walk over every client waiting on the key). */
    if (e->waiters && e->waiters->conn == conn)
        return 0;
    struct dt_coord *c = conn->coord;
    struct dt_coord__wait *n = NULL;
    int rc = c->kv.bytes + WAIT_COST > c->max_total_bytes ? over_budget(c, WAIT_COST) : 0;
    if (rc == 0 && !(n = calloc(1, sizeof *n)))
        rc = dt_error_set(DT_ENOMEM, "coordinator: out of memory for a waiter");
    if (rc) {
        if (!e->waiters)
            kv_remove(&c->kv, e);
        return rc;
    }
    c->kv.bytes += WAIT_COST;
    n->entry = e;
    n->conn = conn;
    n->next = e->waiters;
    if (e->waiters)
        e->waiters->prev = n;
    e->waiters = n;
    n->conn_next = conn->wait_nodes;
    conn->wait_nodes = n;
    conn->waits_left++;
    return 0;
}

static int add_node(struct dt_coord__conn *conn, const struct dt_wire_bytes *k)
{
    /* A key whose queue holds an item counts as present (a blocking pop). */
    if (dt_coord__queue_nonempty(conn->coord, k->p, k->len))
        return 0;
    struct dt_coord__entry *e;
    int rc = kv_lookup_or_add(conn->coord, k->p, k->len, &e);
    if (rc)
        return rc;
    return e->present ? 0 : wait_on(conn, e);
}

static int wait_register(struct dt_coord__conn *conn, const struct dt_wire_request *r, bool *ready)
{
    if (conn->waiting)
        return dt_error_set(DT_EPROTO, "WAIT while its previous WAIT is still pending");
    size_t pos = 0;
    struct dt_wire_bytes k;
    while (dt_wire_list_next(r, &pos, &k)) {
        int rc = add_node(conn, &k);
        if (rc) {
            dt_coord__wait_cancel(conn);
            return rc;
        }
    }
    *ready = conn->waits_left == 0;
    conn->waiting = !*ready;
    return 0;
}

/* PyTorch wakes one waiter per pushed item, so two blocked pops do not race
 * for one item: the first waiter in the list is answered; a waiter still
 * missing other keys counts this one as there and the next is tried. */
void dt_coord__wake_one(struct dt_coord *c, const uint8_t *key, size_t klen)
{
    struct dt_coord__entry *e = kv_find(&c->kv, key, klen);
    if (!e)
        return;
    while (e->waiters) {
        struct dt_coord__wait *n = e->waiters;
        e->waiters = n->next;
        if (e->waiters)
            e->waiters->prev = NULL;
        n->entry = NULL;
        struct dt_coord__conn *conn = n->conn;
        if (--conn->waits_left == 0) {
            dt_coord__wait_cancel(conn);
            dt_wire_put_u8(&conn->out, DT_WIRE_STOP_WAITING);
            if (!conn->in_read)
                dt_coord__conn_flush(conn);
            break;
        }
    }
    if (!e->present && !e->waiters)
        kv_remove(&c->kv, e);
}

/* The nodes stay linked from the client's list until that WAIT completes;
 * only the key's list is emptied here. */
static void wait_key_present(struct dt_coord *c, struct dt_coord__entry *e)
{
    struct dt_coord__wait *n = e->waiters;
    e->waiters = NULL;
    while (n) {
        struct dt_coord__wait *next = n->next;
        struct dt_coord__conn *conn = n->conn;
        n->entry = NULL;
        if (--conn->waits_left == 0) {
            dt_coord__wait_cancel(conn);
            dt_wire_put_u8(&conn->out, DT_WIRE_STOP_WAITING);
            if (!conn->in_read)
                dt_coord__conn_flush(conn);
        }
        n = next;
    }
    (void)c;
}

/* ---- requests ---- */

/* A counter's value read as PyTorch's server reads it, std::stoll on the
 * bytes as a C string (TCPStoreLibUvBackend.cpp, add and barrier): stop at
 * a NUL, skip leading white space (isspace in the C locale), an optional
 * sign, then decimal digits up to the first other byte ("7x" is 7).  No
 * digit (invalid_argument) or a value past int64 (out_of_range) is an error,
 * on which PyTorch closes the connection. */
static int parse_counter(const struct dt_coord__entry *e, int64_t *v)
{
    const uint8_t *p = e->val, *end = e->val + e->vlen;
    while (p < end && (*p == ' ' || (*p >= '\t' && *p <= '\r')))
        p++;
    bool neg = p < end && *p == '-';
    if (p < end && (*p == '-' || *p == '+'))
        p++;
    uint64_t mag = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    const uint8_t *digits = p;
    bool over = false;
    for (; p < end && *p >= '0' && *p <= '9'; p++) {
        unsigned d = *p - '0';
        over = over || mag > (lim - d) / 10;
        mag = over ? mag : mag * 10 + d;
    }
    char kb[80];
    if (p == digits || over)
        return dt_error_set(DT_EPROTO, "ADD or STORE_BARRIER on key '%s', whose value %s",
                            dt_coord__key_str(e->key, e->klen, kb),
                            over ? "is past the 64-bit range" : "does not start with a decimal integer");
    *v = neg ? (int64_t)(0 - mag) : (int64_t)mag;
    return 0;
}

/* PyTorch adds in int64_t and wraps past 2^63 (two's complement). */
static int64_t wrapping_add(int64_t a, int64_t b)
{
    return (int64_t)((uint64_t)a + (uint64_t)b);
}

static int op_set(struct dt_coord *c, const struct dt_wire_bytes *k, const struct dt_wire_bytes *v)
{
    struct dt_coord__entry *e;
    int rc = kv_lookup_or_add(c, k->p, k->len, &e);
    if (rc == 0)
        rc = kv_put(c, e, v->p, v->len);
    if (rc == 0)
        wait_key_present(c, e);
    return rc;
}

static int op_add(struct dt_coord__conn *conn, const struct dt_wire_request *r)
{
    struct dt_coord *c = conn->coord;
    struct dt_coord__entry *e;
    int64_t v = 0;
    int rc = kv_lookup_or_add(c, r->key.p, r->key.len, &e);
    if (rc)
        return rc;
    if (e->present && (rc = parse_counter(e, &v)) != 0)
        return rc;
    v = wrapping_add(v, r->i1);
    char txt[32];
    int n = snprintf(txt, sizeof txt, "%" PRId64, v);
    if ((rc = kv_put(c, e, (const uint8_t *)txt, (size_t)n)) != 0)
        return rc;
    wait_key_present(c, e);
    dt_wire_put_i64(&conn->out, v);
    return 0;
}

static int op_compare_set(struct dt_coord__conn *conn, const struct dt_wire_request *r)
{
    struct dt_coord *c = conn->coord;
    struct dt_coord__entry *e = kv_find(&c->kv, r->key.p, r->key.len);
    if (!e || !e->present) {
        if (r->v1.len != 0) {
            dt_wire_put_bytes(&conn->out, r->v1.p, r->v1.len);
            return 0;
        }
        int rc = op_set(c, &r->key, &r->v2);
        if (rc == 0)
            dt_wire_put_bytes(&conn->out, r->v2.p, r->v2.len);
        return rc;
    }
    if (e->vlen == r->v1.len && (e->vlen == 0 || memcmp(e->val, r->v1.p, e->vlen) == 0)) {
        int rc = kv_put(c, e, r->v2.p, r->v2.len);
        if (rc)
            return rc;
    }
    /* PyTorch wakes the key's waiters whether or not it swapped. */
    wait_key_present(c, e);
    dt_wire_put_bytes(&conn->out, e->val, e->vlen);
    return 0;
}

static void put_value_of(struct dt_coord *c, struct dt_wire_buf *out, const struct dt_wire_bytes *k)
{
    struct dt_coord__entry *e = kv_find(&c->kv, k->p, k->len);
    if (e && e->present)
        dt_wire_put_bytes(out, e->val, e->vlen);
    else
        dt_wire_put_bytes(out, "", 0);
}

static bool cache_hit(const struct dt_coord__mget *m, const struct dt_coord__kv *t, const struct dt_wire_request *r)
{
    return m->valid && m->generation == t->generation && m->keys_len == r->list.len &&
           memcmp(m->keys, r->list.p, r->list.len) == 0;
}

static void cache_drop(struct dt_coord__mget *m)
{
    free(m->keys);
    free(m->reply);
    memset(m, 0, sizeof *m);
}

/* Kept only while small (DT_COORD__MGET_CACHE): a rendezvous answer is a few
 * bytes per rank, and the copy must not double a large answer's memory. */
static void cache_fill(struct dt_coord__conn *conn, const struct dt_wire_request *r, const uint8_t *reply,
                       size_t reply_len)
{
    struct dt_coord__mget *m = &conn->coord->mget;
    cache_drop(m);
    if (r->list.len > DT_COORD__MGET_CACHE - reply_len || reply_len > DT_COORD__MGET_CACHE)
        return;
    uint8_t *k = malloc(r->list.len ? r->list.len : 1);
    uint8_t *v = malloc(reply_len ? reply_len : 1);
    if (!k || !v) {
        free(k);
        free(v);
        return;
    }
    memcpy(k, r->list.p, r->list.len);
    memcpy(v, reply, reply_len);
    *m = (struct dt_coord__mget){k, r->list.len, v, reply_len, conn->coord->kv.generation, true, conn};
}

static size_t value_len_of(struct dt_coord *c, const struct dt_wire_bytes *k)
{
    struct dt_coord__entry *e = kv_find(&c->kv, k->p, k->len);
    return e && e->present ? e->vlen : 0;
}

/* The answer's size first: the same 8 MiB key named 131072 times must be
 * refused, not built. */
static int op_multi_get(struct dt_coord__conn *conn, const struct dt_wire_request *r)
{
    struct dt_coord *c = conn->coord;
    struct dt_wire_buf *out = &conn->out;
    if (cache_hit(&c->mget, &c->kv, r)) {
        dt_wire_put_raw(out, c->mget.reply, c->mget.reply_len);
        return 0;
    }
    size_t pos = 0, bytes = 0;
    struct dt_wire_bytes k;
    while (dt_wire_list_next(r, &pos, &k))
        bytes += 8 + value_len_of(c, &k);
    int rc = dt_coord__reply_fits(conn, "MULTI_GET", bytes);
    if (rc)
        return rc;
    dt_wire_buf_reserve(out, bytes);
    size_t start = out->len;
    pos = 0;
    while (dt_wire_list_next(r, &pos, &k))
        put_value_of(c, out, &k);
    /* Only lists worth it: a few keys are as cheap to look up as to compare. */
    if (!out->failed && r->count >= 16)
        cache_fill(conn, r, out->p + start, out->len - start);
    return 0;
}

static bool all_present(struct dt_coord *c, const struct dt_wire_request *r)
{
    size_t pos = 0;
    struct dt_wire_bytes k;
    while (dt_wire_list_next(r, &pos, &k)) {
        struct dt_coord__entry *e = kv_find(&c->kv, k.p, k.len);
        if ((!e || !e->present) && !dt_coord__queue_nonempty(c, k.p, k.len))
            return false;
    }
    return true;
}

static int op_list(struct dt_coord__conn *conn, const struct dt_wire_request *r)
{
    struct dt_coord *c = conn->coord;
    size_t pos = 0;
    struct dt_wire_bytes k, v;
    switch (r->op) {
    case DT_WIRE_CHECK:
        dt_wire_put_u8(&conn->out, all_present(c, r) ? DT_WIRE_READY : DT_WIRE_NOT_READY);
        return 0;
    case DT_WIRE_MULTI_GET:
        return op_multi_get(conn, r);
    case DT_WIRE_MULTI_SET:
        while (dt_wire_list_next(r, &pos, &k) && dt_wire_list_next(r, &pos, &v)) {
            int rc = op_set(c, &k, &v);
            if (rc)
                return rc;
        }
        return 0;
    default: { /* WAIT */
        bool ready = false;
        int rc = wait_register(conn, r, &ready);
        if (rc == 0 && ready)
            dt_wire_put_u8(&conn->out, DT_WIRE_STOP_WAITING);
        return rc;
    }
    }
}

static int op_append(struct dt_coord *c, const struct dt_wire_request *r)
{
    struct dt_coord__entry *e;
    int rc = kv_lookup_or_add(c, r->key.p, r->key.len, &e);
    if (rc == 0)
        rc = kv_append(c, e, r->v1.p, r->v1.len);
    if (rc == 0)
        wait_key_present(c, e);
    return rc;
}

static int op_delete(struct dt_coord__conn *conn, const struct dt_wire_request *r)
{
    struct dt_coord__entry *e = kv_find(&conn->coord->kv, r->key.p, r->key.len);
    int64_t n = 0;
    if (e && e->present) {
        kv_delete(&conn->coord->kv, e);
        n = 1;
    }
    dt_wire_put_i64(&conn->out, n);
    return 0;
}

/* Every present key, in table order (PyTorch's is its hash map's order:
 * clients must not rely on one). */
static int op_list_keys(struct dt_coord__conn *conn)
{
    struct dt_coord__kv *t = &conn->coord->kv;
    size_t bytes = 8;
    for (size_t i = 0; i < t->nslots; i++)
        for (struct dt_coord__entry *e = t->slots[i]; e; e = e->next)
            bytes += e->present ? 8 + e->klen : 0;
    int rc = dt_coord__reply_fits(conn, "LIST_KEYS", bytes);
    if (rc)
        return rc;
    dt_wire_buf_reserve(&conn->out, bytes);
    dt_wire_put_i64(&conn->out, (int64_t)t->npresent);
    for (size_t i = 0; i < t->nslots; i++)
        for (struct dt_coord__entry *e = t->slots[i]; e; e = e->next)
            if (e->present)
                dt_wire_put_bytes(&conn->out, e->key, e->klen);
    return 0;
}

/* PyTorch's Store::barrier (TCPStoreLibUvBackend.cpp, barrier): the count
 * under the key goes up by one (read as ADD reads it); at `world` or more
 * every client waiting on the key is woken and this one answered at once,
 * below it this one waits on the key.  Intermediate counts wake nobody; the
 * key stays, so a name is used once (its count only grows), and a client
 * that cancels (CANCEL_WAIT after its timeout) still counted. */
static int op_store_barrier(struct dt_coord__conn *conn, const struct dt_wire_request *r)
{
    struct dt_coord *c = conn->coord;
    if (conn->waiting)
        return dt_error_set(DT_EPROTO, "STORE_BARRIER while its previous WAIT is still pending");
    struct dt_coord__entry *e;
    int64_t count = 0;
    int rc = kv_lookup_or_add(c, r->key.p, r->key.len, &e);
    if (rc)
        return rc;
    if (e->present && (rc = parse_counter(e, &count)) != 0)
        return rc;
    count = wrapping_add(count, 1);
    char txt[32];
    int n = snprintf(txt, sizeof txt, "%" PRId64, count);
    if ((rc = kv_put(c, e, (const uint8_t *)txt, (size_t)n)) != 0)
        return rc;
    if (count >= r->i1) {
        wait_key_present(c, e);
        dt_wire_put_u8(&conn->out, DT_WIRE_STOP_WAITING);
        return 0;
    }
    if ((rc = wait_on(conn, e)) == 0)
        conn->waiting = true;
    return rc;
}

static int handle_op(struct dt_coord__conn *conn, const struct dt_wire_request *r)
{
    struct dt_coord *c = conn->coord;
    switch (r->op) {
    case DT_WIRE_VALIDATE:
        return 0;
    case DT_WIRE_SET:
        return op_set(c, &r->key, &r->v1);
    case DT_WIRE_COMPARE_SET:
        return op_compare_set(conn, r);
    case DT_WIRE_GET:
        put_value_of(c, &conn->out, &r->key);
        return 0;
    case DT_WIRE_ADD:
        return op_add(conn, r);
    case DT_WIRE_CHECK:
    case DT_WIRE_WAIT:
    case DT_WIRE_MULTI_GET:
    case DT_WIRE_MULTI_SET:
        return op_list(conn, r);
    case DT_WIRE_GETNUMKEYS:
        dt_wire_put_i64(&conn->out, (int64_t)c->kv.npresent);
        return 0;
    case DT_WIRE_DELETE_KEY:
        return op_delete(conn, r);
    case DT_WIRE_APPEND:
        return op_append(c, r);
    case DT_WIRE_CANCEL_WAIT:
        dt_coord__wait_cancel(conn);
        dt_wire_put_u8(&conn->out, DT_WIRE_WAIT_CANCELED);
        return 0;
    case DT_WIRE_PING:
        dt_wire_put_u32(&conn->out, r->u32);
        return 0;
    case DT_WIRE_BARRIER:
        return dt_coord__barrier_enter(conn, r);
    case DT_WIRE_QUEUE_PUSH:
        return dt_coord__queue_push(c, &r->key, &r->v1);
    case DT_WIRE_QUEUE_POP:
        dt_coord__queue_pop(conn, &r->key);
        return 0;
    case DT_WIRE_QUEUE_LEN:
        dt_coord__queue_len(conn, &r->key);
        return 0;
    case DT_WIRE_LIST_KEYS:
        return op_list_keys(conn);
    case DT_WIRE_STORE_BARRIER:
        return op_store_barrier(conn, r);
    case DT_WIRE_JOIN:
        return dt_coord__member_join(conn, r);
    case DT_WIRE_LEAVE:
        dt_coord__member_leave(conn);
        return 0;
    case DT_WIRE_MEMBERS:
        dt_coord__member_list(conn);
        return 0;
    case DT_WIRE_HEARTBEAT: {
        int rc = dt_coord__heartbeat_record(c, r->i1, r->i2);
        if (rc == 0)
            dt_wire_put_u8(&conn->out, DT_WIRE_OK);
        return rc;
    }
    default:
        return dt_error_set(DT_EPROTO, "unexpected request %s", dt_wire_op_name(r->op));
    }
}

int dt_coord__handle(struct dt_coord__conn *conn, const struct dt_wire_request *r)
{
    int rc = handle_op(conn, r);
    /* A stale MULTI_GET answer holds memory for nothing. */
    struct dt_coord__mget *m = &conn->coord->mget;
    if (m->valid && m->generation != conn->coord->kv.generation)
        cache_drop(m);
    return rc;
}

void dt_coord__store_conn_gone(struct dt_coord__conn *conn)
{
    if (conn->coord->mget.owner == conn)
        cache_drop(&conn->coord->mget);
}

/* ---- lifetime ---- */

int dt_coord__store_init(struct dt_coord *c)
{
    return kv_init(&c->kv);
}

void dt_coord__store_free(struct dt_coord *c)
{
    dt_coord__queue_free_all(c);
    kv_free(&c->kv);
    cache_drop(&c->mget);
}
