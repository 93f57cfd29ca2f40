/* store_wire.c - encoder and decoder of the store protocol (layouts in store_wire.h).
 *
 * The decoder is written for hostile input: every length is checked against
 * the bytes present and against the limits before it is used, sizes are
 * compared without overflowing, and nothing is allocated.  It is the one
 * piece the fuzz target (tests/fuzz/fuzz_store_wire.c) drives.
 *
 * Not for I/O: the coordinator and the client own their sockets.
 */
#include "comm/store_wire.h"

#include "base/error.h"

#include <stdlib.h>
#include <string.h>

void dt_wire_put_chan_header(struct dt_wire_buf *b, uint32_t chan, uint8_t kind, uint64_t len)
{
    dt_wire_put_u32(b, chan);
    dt_wire_put_u8(b, kind);
    dt_wire_put_u64(b, len);
}

bool dt_wire_chan_header(const uint8_t *p, uint32_t *chan, uint8_t *kind, uint64_t *len)
{
    *chan = dt_wire_load_u32(p);
    *kind = p[4];
    *len = dt_wire_load_u64(p + 5);
    return *kind <= DT_WIRE_CHAN_ENDED;
}

uint32_t dt_wire_load_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint64_t dt_wire_load_u64(const uint8_t *p)
{
    return (uint64_t)dt_wire_load_u32(p) | (uint64_t)dt_wire_load_u32(p + 4) << 32;
}

const char *dt_wire_op_name(uint8_t op)
{
    static const char *names[] = {"VALIDATE",  "SET",       "COMPARE_SET", "GET",          "ADD",
                                  "CHECK",     "WAIT",      "GETNUMKEYS",  "DELETE_KEY",   "APPEND",
                                  "MULTI_GET", "MULTI_SET", "CANCEL_WAIT", "PING",         "QUEUE_PUSH",
                                  "QUEUE_POP", "QUEUE_LEN", "LIST_KEYS",   "STORE_BARRIER"};
    if (op < sizeof names / sizeof names[0])
        return names[op];
    switch (op) {
    case DT_WIRE_AUTH: return "AUTH";
    case DT_WIRE_BARRIER: return "BARRIER";
    case DT_WIRE_HEARTBEAT: return "HEARTBEAT";
    case DT_WIRE_JOIN: return "JOIN";
    case DT_WIRE_LEAVE: return "LEAVE";
    case DT_WIRE_MEMBERS: return "MEMBERS";
    case DT_WIRE_CHANNEL_OPEN: return "CHANNEL_OPEN";
    case DT_WIRE_CHANNEL: return "CHANNEL";
    case DT_WIRE_CHANNEL_CLOSE: return "CHANNEL_CLOSE";
    default: return "unknown";
    }
}

/* --- decoding ------------------------------------------------------------- */

bool dt_wire_op_known(uint8_t op)
{
    return op <= DT_WIRE_STORE_BARRIER || (op >= DT_WIRE_AUTH && op <= DT_WIRE_CHANNEL_CLOSE);
}

bool dt_wire_op_channel(uint8_t op)
{
    return op >= DT_WIRE_CHANNEL_OPEN && op <= DT_WIRE_CHANNEL_CLOSE;
}

struct cursor {
    const uint8_t *buf;
    size_t len, pos;
    const struct dt_wire_limits *lim;
    uint8_t op;
    struct dt_wire_progress *pg; /* where to say how far an incomplete request got */
};

/* Each reader returns 0, DT_WIRE_INCOMPLETE or a negative code. */
static int need(struct cursor *c, size_t n)
{
    if (c->len - c->pos >= n)
        return 0;
    /* What is missing would already make the request too big: say so now
     * rather than waiting for bytes that will never be accepted. */
    if (c->pos + n > c->lim->max_frame_bytes || c->pos + n < c->pos)
        return dt_error_set(DT_ENOMEM, "%s request larger than the %zu-byte frame limit",
                            dt_wire_op_name(c->op), c->lim->max_frame_bytes);
    c->pg->need = c->pos + n;
    return DT_WIRE_INCOMPLETE;
}

static int read_u32(struct cursor *c, uint32_t *v)
{
    int rc = need(c, 4);
    if (rc)
        return rc;
    *v = dt_wire_load_u32(c->buf + c->pos);
    c->pos += 4;
    return 0;
}

static int read_u64(struct cursor *c, uint64_t *v)
{
    int rc = need(c, 8);
    if (rc)
        return rc;
    *v = dt_wire_load_u64(c->buf + c->pos);
    c->pos += 8;
    return 0;
}

static int read_i64(struct cursor *c, int64_t *v)
{
    uint64_t u;
    int rc = read_u64(c, &u);
    if (rc == 0)
        memcpy(v, &u, sizeof *v);
    return rc;
}

static int read_str_max(struct cursor *c, size_t max, const char *what, struct dt_wire_bytes *out)
{
    uint64_t n;
    int rc = read_u64(c, &n);
    if (rc)
        return rc;
    if (n > max)
        return dt_error_set(DT_ENOMEM, "%s %s of %llu bytes is over the %zu-byte limit",
                            dt_wire_op_name(c->op), what, (unsigned long long)n, max);
    rc = need(c, (size_t)n);
    if (rc)
        return rc;
    out->p = c->buf + c->pos;
    out->len = (size_t)n;
    c->pos += (size_t)n;
    return 0;
}

/* is_key picks the limit and the word in the message. */
static int read_str(struct cursor *c, bool is_key, struct dt_wire_bytes *out)
{
    return is_key ? read_str_max(c, c->lim->max_key_bytes, "key", out)
                  : read_str_max(c, c->lim->max_value_bytes, "value", out);
}

/* A channel's request travels whole inside CHANNEL, whose own fields take
 * 13 bytes of the frame limit. */
static int read_channel(struct cursor *c, struct dt_wire_request *r)
{
    int rc = read_u32(c, &r->u32);
    if (rc || r->op == DT_WIRE_CHANNEL_CLOSE)
        return rc;
    if (r->op == DT_WIRE_CHANNEL_OPEN)
        return read_str(c, true, &r->key);
    size_t max = c->lim->max_frame_bytes > 13 ? c->lim->max_frame_bytes - 13 : 0;
    return read_str_max(c, max, "request", &r->v1);
}

/* Entries already checked by an earlier call are not read again: the walk
 * resumes at the first entry that was incomplete (c->pg). */
static int read_list(struct cursor *c, struct dt_wire_request *r, int per_entry)
{
    int rc = read_u64(c, &r->count);
    if (rc)
        return rc;
    if (r->count > c->lim->max_keys)
        return dt_error_set(DT_ENOMEM, "%s with %llu keys is over the %llu-key limit",
                            dt_wire_op_name(c->op), (unsigned long long)r->count,
                            (unsigned long long)c->lim->max_keys);
    size_t start = c->pos;
    uint64_t i = 0;
    if (c->pg->done > 0 && c->pg->done <= r->count && c->pg->pos <= c->len) {
        i = c->pg->done;
        c->pos = c->pg->pos;
    }
    struct dt_wire_bytes s;
    for (; i < r->count; i++) {
        size_t entry = c->pos;
        rc = read_str(c, true, &s);
        if (rc == 0 && per_entry == 2)
            rc = read_str(c, false, &s);
        if (rc == DT_WIRE_INCOMPLETE) {
            c->pg->done = i;
            c->pg->pos = entry;
        }
        if (rc)
            return rc;
    }
    r->list.p = c->buf + start;
    r->list.len = c->pos - start;
    return 0;
}

static int decode_fields(struct cursor *c, struct dt_wire_request *r)
{
    switch (r->op) {
    case DT_WIRE_VALIDATE:
    case DT_WIRE_PING:
        return read_u32(c, &r->u32);
    case DT_WIRE_SET:
    case DT_WIRE_APPEND:
    case DT_WIRE_QUEUE_PUSH: {
        int rc = read_str(c, true, &r->key);
        return rc ? rc : read_str(c, false, &r->v1);
    }
    case DT_WIRE_COMPARE_SET: {
        int rc = read_str(c, true, &r->key);
        if (rc == 0)
            rc = read_str(c, false, &r->v1);
        return rc ? rc : read_str(c, false, &r->v2);
    }
    case DT_WIRE_GET:
    case DT_WIRE_DELETE_KEY:
    case DT_WIRE_AUTH:
    case DT_WIRE_QUEUE_POP:
    case DT_WIRE_QUEUE_LEN:
        return read_str(c, true, &r->key);
    case DT_WIRE_ADD:
    case DT_WIRE_STORE_BARRIER: {
        int rc = read_str(c, true, &r->key);
        return rc ? rc : read_i64(c, &r->i1);
    }
    case DT_WIRE_CHECK:
    case DT_WIRE_WAIT:
    case DT_WIRE_MULTI_GET:
        return read_list(c, r, 1);
    case DT_WIRE_MULTI_SET:
        return read_list(c, r, 2);
    case DT_WIRE_GETNUMKEYS:
    case DT_WIRE_CANCEL_WAIT:
    case DT_WIRE_LIST_KEYS:
    case DT_WIRE_LEAVE:
    case DT_WIRE_MEMBERS:
        return 0;
    case DT_WIRE_JOIN: {
        int64_t *v[4] = {&r->i1, &r->i2, &r->i3, &r->i4};
        for (int i = 0; i < 4; i++) {
            int rc = read_i64(c, v[i]);
            if (rc)
                return rc;
        }
        return read_str(c, true, &r->key);
    }
    case DT_WIRE_BARRIER: {
        int rc = read_str(c, true, &r->key);
        return rc ? rc : read_i64(c, &r->i1);
    }
    case DT_WIRE_HEARTBEAT: {
        int rc = read_i64(c, &r->i1);
        return rc ? rc : read_i64(c, &r->i2);
    }
    case DT_WIRE_CHANNEL_OPEN:
    case DT_WIRE_CHANNEL:
    case DT_WIRE_CHANNEL_CLOSE:
        return read_channel(c, r);
    default:
        return dt_error_set(DT_EPROTO, "unknown request type %u (not a TCPStore client, or a "
                                       "newer protocol)", r->op);
    }
}

int dt_wire_decode_step(const uint8_t *buf, size_t len, const struct dt_wire_limits *lim,
                        struct dt_wire_progress *pg, struct dt_wire_request *req)
{
    memset(req, 0, sizeof *req);
    if (len == 0) {
        pg->need = 1;
        return DT_WIRE_INCOMPLETE;
    }
    struct cursor c = {.buf = buf, .len = len, .pos = 1, .lim = lim, .op = buf[0], .pg = pg};
    req->op = buf[0];
    int rc = decode_fields(&c, req);
    if (rc)
        return rc;
    if (c.pos > lim->max_frame_bytes)
        return dt_error_set(DT_ENOMEM, "%s request of %zu bytes is over the %zu-byte frame limit",
                            dt_wire_op_name(req->op), c.pos, lim->max_frame_bytes);
    req->frame_len = c.pos;
    return 0;
}

int dt_wire_decode(const uint8_t *buf, size_t len, const struct dt_wire_limits *lim,
                   struct dt_wire_request *req)
{
    struct dt_wire_progress pg = {0};
    return dt_wire_decode_step(buf, len, lim, &pg, req);
}

bool dt_wire_list_next(const struct dt_wire_request *req, size_t *pos, struct dt_wire_bytes *out)
{
    if (*pos + 8 > req->list.len)
        return false;
    uint64_t n = dt_wire_load_u64(req->list.p + *pos);
    out->p = req->list.p + *pos + 8;
    out->len = (size_t)n;
    *pos += 8 + (size_t)n;
    return true;
}

/* --- encoding ------------------------------------------------------------- */

void dt_wire_buf_init(struct dt_wire_buf *b) { memset(b, 0, sizeof *b); }

void dt_wire_buf_reserve(struct dt_wire_buf *b, size_t more)
{
    if (b->failed || b->cap - b->len >= more)
        return;
    uint8_t *p = more <= SIZE_MAX - b->len ? realloc(b->p, b->len + more) : NULL;
    if (!p) {
        b->failed = true;
        return;
    }
    b->p = p;
    b->cap = b->len + more;
}

void dt_wire_buf_free(struct dt_wire_buf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

static uint8_t *grow(struct dt_wire_buf *b, size_t n)
{
    if (b->failed)
        return NULL;
    if (b->cap - b->len < n) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap - b->len < n) {
            if (cap > SIZE_MAX / 2) {
                b->failed = true;
                return NULL;
            }
            cap *= 2;
        }
        uint8_t *p = realloc(b->p, cap);
        if (!p) {
            b->failed = true;
            return NULL;
        }
        b->p = p;
        b->cap = cap;
    }
    uint8_t *at = b->p + b->len;
    b->len += n;
    return at;
}

void dt_wire_put_u8(struct dt_wire_buf *b, uint8_t v)
{
    uint8_t *p = grow(b, 1);
    if (p)
        *p = v;
}

void dt_wire_put_u32(struct dt_wire_buf *b, uint32_t v)
{
    uint8_t *p = grow(b, 4);
    for (int i = 0; p && i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

void dt_wire_put_u64(struct dt_wire_buf *b, uint64_t v)
{
    uint8_t *p = grow(b, 8);
    for (int i = 0; p && i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

void dt_wire_put_i64(struct dt_wire_buf *b, int64_t v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    dt_wire_put_u64(b, u);
}

void dt_wire_put_bytes(struct dt_wire_buf *b, const void *p, size_t len)
{
    /* One grow for length and bytes: MULTI_GET replies are made of these. */
    uint8_t *at = len <= SIZE_MAX - 8 ? grow(b, 8 + len) : NULL;
    if (!at) {
        b->failed = true;
        return;
    }
    for (int i = 0; i < 8; i++)
        at[i] = (uint8_t)((uint64_t)len >> (8 * i));
    if (len)
        memcpy(at + 8, p, len);
}

void dt_wire_put_raw(struct dt_wire_buf *b, const void *p, size_t len)
{
    uint8_t *at = grow(b, len);
    if (at && len)
        memcpy(at, p, len);
}

void dt_wire_put_key(struct dt_wire_buf *b, const char *prefix, const void *key, size_t len)
{
    size_t plen = strlen(prefix);
    dt_wire_put_u64(b, (uint64_t)(plen + len));
    uint8_t *p = grow(b, plen + len);
    if (!p)
        return;
    memcpy(p, prefix, plen);
    if (len)
        memcpy(p + plen, key, len);
}
