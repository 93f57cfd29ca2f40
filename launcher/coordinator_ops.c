/* coordinator_ops.c - what each request does to the store and what it answers.
 *
 * Semantics follow PyTorch's libuv TCPStore server (TCPStoreLibUvBackend.cpp):
 * GET of an absent key answers an empty value (PyTorch's client WAITs first);
 * ADD keeps the counter as decimal text; COMPARE_SET on an absent key sets it
 * only when `expected` is empty and otherwise answers `expected` back;
 * DELETE_KEY answers how many keys went (0 or 1); GETNUMKEYS counts every
 * key, PyTorch's internal "init/" counter included.  SET, APPEND and
 * MULTI_SET answer nothing.  Queues are in coordinator_queue.c, agent
 * membership in coordinator_members.c.
 *
 * The gate: the first request must be VALIDATE with PyTorch's magic; with
 * auth on, the next must be AUTH with the job token.  Anything else closes
 * the connection before it is applied.
 *
 * Not for framing or sockets (coordinator_conn.c).
 */
#include "launcher/coordinator_internal.h"

#include "base/error.h"
#include "base/log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool token_matches(const struct dt_coord *c, const struct dt_wire_bytes *t)
{
    if (t->len != 64)
        return false;
    /* Constant time: a mismatch position must not show in the timing. */
    uint8_t diff = 0;
    for (size_t i = 0; i < 64; i++)
        diff |= (uint8_t)(t->p[i] ^ (uint8_t)c->token[i]);
    return diff == 0;
}

/* Returns 1 when the request may go on to be served, 0 when it was the gate's
 * own request, negative to close. */
static int gate(struct coord_conn *conn, const struct dt_wire_request *r)
{
    if (!conn->validated) {
        if (r->op != DT_WIRE_VALIDATE)
            return dt_error_set(DT_EPROTO, "first request was %s, not VALIDATE: not a TCPStore client",
                                dt_wire_op_name(r->op));
        if (r->u32 != DT_WIRE_MAGIC)
            return dt_error_set(DT_EPROTO, "VALIDATE with magic 0x%08" PRIx32 ", not 0x%08x",
                                r->u32, DT_WIRE_MAGIC);
        conn->validated = true;
        return 0;
    }
    if (r->op == DT_WIRE_AUTH) {
        if (!conn->coord->auth || token_matches(conn->coord, &r->key)) {
            conn->authed = true;
            dt_wire_put_u8(&conn->out, DT_WIRE_OK);
            return 0;
        }
        uint8_t no = DT_WIRE_REFUSED;
        uv_buf_t b = uv_buf_init((char *)&no, 1);
        uv_try_write((uv_stream_t *)&conn->tcp, &b, 1);
        dt_error_set(DT_EAUTH, "wrong job token");
        refusal_record(conn->coord, dt_error_last());
        return DT_EAUTH;
    }
    if (!conn->authed) {
        if (r->op <= DT_WIRE_PING)
            dt_error_set(DT_EAUTH,
                         "%s before the job token; this looks like a PyTorch TCPStore client, "
                         "which cannot present one: to let PyTorch scripts in, set "
                         "`rendezvous: {auth: none}` in the job spec",
                         dt_wire_op_name(r->op));
        else
            dt_error_set(DT_EAUTH, "%s before the job token", dt_wire_op_name(r->op));
        refusal_record(conn->coord, dt_error_last());
        return DT_EAUTH;
    }
    return 1;
}

static int parse_counter(const struct kv_entry *e, int64_t *v)
{
    char tmp[32];
    char kb[80];
    if (e->vlen == 0 || e->vlen >= sizeof tmp)
        goto bad;
    memcpy(tmp, e->val, e->vlen);
    tmp[e->vlen] = 0;
    char *end;
    errno = 0;
    long long x = strtoll(tmp, &end, 10);
    if (errno || *end)
        goto bad;
    *v = x;
    return 0;
bad:
    return dt_error_set(DT_EPROTO, "ADD on key '%s', whose value is not a decimal integer",
                        coord_key_str(e->key, e->klen, kb));
}

static int op_set(struct dt_coord *c, const struct dt_wire_bytes *k, const struct dt_wire_bytes *v)
{
    struct kv_entry *e;
    int rc = kv_lookup_or_add(c, k->p, k->len, &e);
    if (rc == 0)
        rc = kv_put(c, e, v->p, v->len);
    if (rc == 0)
        wait_key_present(c, e);
    return rc;
}

static int op_add(struct coord_conn *conn, const struct dt_wire_request *r)
{
    struct dt_coord *c = conn->coord;
    struct kv_entry *e;
    int64_t v = 0;
    int rc = kv_lookup_or_add(c, r->key.p, r->key.len, &e);
    if (rc == 0 && e->present)
        rc = parse_counter(e, &v);
    if (rc == 0 && __builtin_add_overflow(v, r->i1, &v))
        rc = dt_error_set(DT_EPROTO, "ADD overflows a 64-bit counter");
    if (rc) {
        if (!e->present && !e->waiters)
            kv_remove(&c->kv, e);
        return rc;
    }
    char txt[32];
    int n = snprintf(txt, sizeof txt, "%" PRId64, v);
    if ((rc = kv_put(c, e, (const uint8_t *)txt, (size_t)n)) != 0)
        return rc;
    wait_key_present(c, e);
    dt_wire_put_i64(&conn->out, v);
    return 0;
}

static int op_compare_set(struct coord_conn *conn, const struct dt_wire_request *r)
{
    struct dt_coord *c = conn->coord;
    struct kv_entry *e = kv_find(&c->kv, r->key.p, r->key.len);
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
    dt_wire_put_bytes(&conn->out, e->val, e->vlen);
    return 0;
}

static void put_value_of(struct dt_coord *c, struct dt_wire_buf *out, const struct dt_wire_bytes *k)
{
    struct kv_entry *e = kv_find(&c->kv, k->p, k->len);
    if (e && e->present)
        dt_wire_put_bytes(out, e->val, e->vlen);
    else
        dt_wire_put_bytes(out, "", 0);
}

static bool cache_hit(const struct mget_cache *m, const struct kv_table *t, const struct dt_wire_request *r)
{
    return m->valid && m->generation == t->generation && m->keys_len == r->list.len &&
           memcmp(m->keys, r->list.p, r->list.len) == 0;
}

static void cache_fill(struct mget_cache *m, const struct kv_table *t, const struct dt_wire_request *r,
                       const uint8_t *reply, size_t reply_len)
{
    uint8_t *k = malloc(r->list.len ? r->list.len : 1);
    uint8_t *v = malloc(reply_len ? reply_len : 1);
    if (!k || !v) {
        free(k);
        free(v);
        return;
    }
    free(m->keys);
    free(m->reply);
    memcpy(k, r->list.p, r->list.len);
    memcpy(v, reply, reply_len);
    *m = (struct mget_cache){k, r->list.len, v, reply_len, t->generation, true};
}

static int op_multi_get(struct coord_conn *conn, const struct dt_wire_request *r)
{
    struct dt_coord *c = conn->coord;
    struct dt_wire_buf *out = &conn->out;
    if (cache_hit(&c->mget, &c->kv, r)) {
        dt_wire_put_raw(out, c->mget.reply, c->mget.reply_len);
        return 0;
    }
    size_t start = out->len, pos = 0;
    struct dt_wire_bytes k;
    while (dt_wire_list_next(r, &pos, &k))
        put_value_of(c, out, &k);
    /* Only lists worth it: a few keys are as cheap to look up as to compare. */
    if (!out->failed && r->count >= 16)
        cache_fill(&c->mget, &c->kv, r, out->p + start, out->len - start);
    return 0;
}

static bool all_present(struct dt_coord *c, const struct dt_wire_request *r)
{
    size_t pos = 0;
    struct dt_wire_bytes k;
    while (dt_wire_list_next(r, &pos, &k)) {
        struct kv_entry *e = kv_find(&c->kv, k.p, k.len);
        if ((!e || !e->present) && !queue_nonempty(c, k.p, k.len))
            return false;
    }
    return true;
}

static int op_list(struct coord_conn *conn, const struct dt_wire_request *r)
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
        bool ready;
        int rc = wait_register(conn, r, &ready);
        if (rc == 0 && ready)
            dt_wire_put_u8(&conn->out, DT_WIRE_STOP_WAITING);
        return rc;
    }
    }
}

static int op_append(struct dt_coord *c, const struct dt_wire_request *r)
{
    struct kv_entry *e;
    int rc = kv_lookup_or_add(c, r->key.p, r->key.len, &e);
    if (rc == 0)
        rc = kv_append(c, e, r->v1.p, r->v1.len);
    if (rc == 0)
        wait_key_present(c, e);
    return rc;
}

static int op_delete(struct coord_conn *conn, const struct dt_wire_request *r)
{
    struct kv_entry *e = kv_find(&conn->coord->kv, r->key.p, r->key.len);
    int64_t n = 0;
    if (e && e->present) {
        kv_remove(&conn->coord->kv, e);
        n = 1;
    }
    dt_wire_put_i64(&conn->out, n);
    return 0;
}

int coord_handle(struct coord_conn *conn, const struct dt_wire_request *r)
{
    int g = gate(conn, r);
    if (g <= 0)
        return g;
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
        wait_cancel(conn);
        dt_wire_put_u8(&conn->out, DT_WIRE_WAIT_CANCELED);
        return 0;
    case DT_WIRE_PING:
        dt_wire_put_u32(&conn->out, r->u32);
        return 0;
    case DT_WIRE_BARRIER:
        return barrier_enter(conn, r);
    case DT_WIRE_QUEUE_PUSH:
        return queue_push(c, &r->key, &r->v1);
    case DT_WIRE_QUEUE_POP:
        return queue_pop(conn, &r->key);
    case DT_WIRE_QUEUE_LEN:
        queue_len(conn, &r->key);
        return 0;
    case DT_WIRE_JOIN:
        return member_join(conn, r);
    case DT_WIRE_LEAVE:
        member_leave(conn);
        return 0;
    case DT_WIRE_MEMBERS:
        member_list(conn);
        return 0;
    case DT_WIRE_HEARTBEAT: {
        int rc = heartbeat_record(c, r->i1, r->i2);
        if (rc == 0)
            dt_wire_put_u8(&conn->out, DT_WIRE_OK);
        return rc;
    }
    default:
        return dt_error_set(DT_EPROTO, "unexpected request %s", dt_wire_op_name(r->op));
    }
}
