/* coordinator_kv.c - the coordinator's key-value table and its memory budget.
 *
 * Chained hashing (FNV-1a over the key bytes) with entries allocated one by
 * one, so an entry keeps its address when the table grows: waiting clients
 * point at entries.  Keys are bytes, not C strings, as in TCPStore.
 *
 * Every key costs its bytes plus ENTRY_COST against max_total_bytes,
 * waited-for keys included, so a client cannot grow the coordinator without
 * bound by waiting on fresh names.
 *
 * Not for waking waiters (coordinator_wait.c) or request semantics (coordinator_ops.c).
 */
#include "launcher/coordinator_internal.h"

#include "base/error.h"

#include <stdlib.h>
#include <string.h>

#define ENTRY_COST 64u

uint64_t kv_hash(const uint8_t *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

int kv_init(struct kv_table *t)
{
    memset(t, 0, sizeof *t);
    t->nslots = 1024;
    t->slots = calloc(t->nslots, sizeof *t->slots);
    return t->slots ? 0 : DT_ENOMEM;
}

static void entry_free(struct kv_entry *e)
{
    free(e->val);
    free(e);
}

void kv_free(struct kv_table *t)
{
    for (size_t i = 0; i < t->nslots; i++) {
        struct kv_entry *e = t->slots[i];
        while (e) {
            struct kv_entry *next = e->next;
            entry_free(e);
            e = next;
        }
    }
    free(t->slots);
    memset(t, 0, sizeof *t);
}

struct kv_entry *kv_find(struct kv_table *t, const uint8_t *key, size_t klen)
{
    uint64_t h = kv_hash(key, klen);
    for (struct kv_entry *e = t->slots[h & (t->nslots - 1)]; e; e = e->next)
        if (e->hash == h && e->klen == klen && (klen == 0 || memcmp(e->key, key, klen) == 0))
            return e;
    return NULL;
}

/* Doubling keeps chains short; a failed grow only makes them longer. */
static void maybe_grow(struct kv_table *t)
{
    if (t->nentries < t->nslots)
        return;
    size_t n = t->nslots * 2;
    struct kv_entry **slots = calloc(n, sizeof *slots);
    if (!slots)
        return;
    for (size_t i = 0; i < t->nslots; i++) {
        struct kv_entry *e = t->slots[i];
        while (e) {
            struct kv_entry *next = e->next;
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

int kv_lookup_or_add(struct dt_coord *c, const uint8_t *key, size_t klen, struct kv_entry **out)
{
    struct kv_table *t = &c->kv;
    struct kv_entry *e = kv_find(t, key, klen);
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
    e->hash = kv_hash(key, klen);
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
static int store_value(struct dt_coord *c, struct kv_entry *e, size_t keep, const uint8_t *val,
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

int kv_put(struct dt_coord *c, struct kv_entry *e, const uint8_t *val, size_t vlen)
{
    return store_value(c, e, 0, val, vlen);
}

int kv_append(struct dt_coord *c, struct kv_entry *e, const uint8_t *val, size_t vlen)
{
    return store_value(c, e, e->present ? e->vlen : 0, val, vlen);
}

void kv_remove(struct kv_table *t, struct kv_entry *e)
{
    struct kv_entry **pp = &t->slots[e->hash & (t->nslots - 1)];
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
