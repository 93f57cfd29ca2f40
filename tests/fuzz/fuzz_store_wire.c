/* fuzz_store_wire.c - libFuzzer target for the store protocol decoder.
 *
 * Feeds arbitrary bytes to dt_wire_decode the way the coordinator does (one
 * request after another from a connection's buffer, under small limits so
 * limit paths are reached), walks every decoded list, re-encodes what was
 * decoded and checks the encoder gives back the same bytes.  Also decodes
 * every prefix of the input, which is what a slow connection delivers, and
 * decodes the first request again in pieces, resuming each call where the
 * last stopped (dt_wire_decode_step), which must give the same answer.
 *
 * Not a test of the coordinator's semantics (tests/unit/test_coordinator.c).
 */
#include "base/error.h"
#include "comm/store_wire.h"

#include <stdlib.h>
#include <string.h>

static const struct dt_wire_limits lim = {
    .max_frame_bytes = 4096, .max_key_bytes = 256, .max_value_bytes = 2048, .max_keys = 64};

static void reencode(const uint8_t *frame, const struct dt_wire_request *r)
{
    struct dt_wire_buf b;
    dt_wire_buf_init(&b);
    dt_wire_put_u8(&b, r->op);
    size_t pos = 0;
    struct dt_wire_bytes s;
    switch (r->op) {
    case DT_WIRE_VALIDATE:
    case DT_WIRE_PING: dt_wire_put_u32(&b, r->u32); break;
    case DT_WIRE_SET:
    case DT_WIRE_APPEND:
    case DT_WIRE_QUEUE_PUSH:
        dt_wire_put_bytes(&b, r->key.p, r->key.len);
        dt_wire_put_bytes(&b, r->v1.p, r->v1.len);
        break;
    case DT_WIRE_COMPARE_SET:
        dt_wire_put_bytes(&b, r->key.p, r->key.len);
        dt_wire_put_bytes(&b, r->v1.p, r->v1.len);
        dt_wire_put_bytes(&b, r->v2.p, r->v2.len);
        break;
    case DT_WIRE_GET:
    case DT_WIRE_DELETE_KEY:
    case DT_WIRE_AUTH:
    case DT_WIRE_QUEUE_POP:
    case DT_WIRE_QUEUE_LEN: dt_wire_put_bytes(&b, r->key.p, r->key.len); break;
    case DT_WIRE_JOIN:
        dt_wire_put_i64(&b, r->i1);
        dt_wire_put_i64(&b, r->i2);
        dt_wire_put_i64(&b, r->i3);
        dt_wire_put_i64(&b, r->i4);
        dt_wire_put_bytes(&b, r->key.p, r->key.len);
        break;
    case DT_WIRE_ADD:
    case DT_WIRE_BARRIER:
    case DT_WIRE_STORE_BARRIER:
        dt_wire_put_bytes(&b, r->key.p, r->key.len);
        dt_wire_put_i64(&b, r->i1);
        break;
    case DT_WIRE_HEARTBEAT:
        dt_wire_put_i64(&b, r->i1);
        dt_wire_put_i64(&b, r->i2);
        break;
    case DT_WIRE_CHANNEL_OPEN:
        dt_wire_put_u32(&b, r->u32);
        dt_wire_put_bytes(&b, r->key.p, r->key.len);
        break;
    case DT_WIRE_CHANNEL:
        dt_wire_put_u32(&b, r->u32);
        dt_wire_put_bytes(&b, r->v1.p, r->v1.len);
        break;
    case DT_WIRE_CHANNEL_CLOSE: dt_wire_put_u32(&b, r->u32); break;
    case DT_WIRE_CHECK:
    case DT_WIRE_WAIT:
    case DT_WIRE_MULTI_GET:
    case DT_WIRE_MULTI_SET:
        dt_wire_put_u64(&b, r->count);
        while (dt_wire_list_next(r, &pos, &s))
            dt_wire_put_bytes(&b, s.p, s.len);
        break;
    default: break;
    }
    if (b.failed || b.len != r->frame_len || memcmp(b.p, frame, b.len) != 0)
        abort();
    dt_wire_buf_free(&b);
}

/* The first request fed `step` bytes at a time, resuming at the progress
 * the last call left: the same outcome and frame as decoding it whole. */
static void resumed_equals_whole(const uint8_t *data, size_t size, size_t step)
{
    struct dt_wire_request whole, r;
    int want = dt_wire_decode(data, size, &lim, &whole);
    struct dt_wire_progress pg = {0};
    int rc = DT_WIRE_INCOMPLETE;
    for (size_t len = 0; rc == DT_WIRE_INCOMPLETE && len < size;) {
        len = size - len < step ? size : len + step;
        if (pg.need > len)
            continue;
        rc = dt_wire_decode_step(data, len, &lim, &pg, &r);
        if (rc == DT_WIRE_INCOMPLETE && pg.need <= len)
            abort();
    }
    if ((rc == 0) != (want == 0) || (rc < 0) != (want < 0))
        abort();
    if (rc == 0 && (r.frame_len != whole.frame_len || r.count != whole.count || r.list.len != whole.list.len))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t off = 0;
    while (off < size) {
        struct dt_wire_request r;
        int rc = dt_wire_decode(data + off, size - off, &lim, &r);
        if (rc != 0)
            break;
        if (r.frame_len == 0 || r.frame_len > size - off || r.frame_len > lim.max_frame_bytes)
            abort();
        reencode(data + off, &r);
        off += r.frame_len;
    }
    /* Any prefix decodes to "incomplete", an error, or a whole request
     * that fits in the prefix. */
    for (size_t n = 0; n <= size && n < 64; n++) {
        struct dt_wire_request r;
        int rc = dt_wire_decode(data, n, &lim, &r);
        if (rc == 0 && r.frame_len > n)
            abort();
    }
    if (size > 0)
        resumed_equals_whole(data, size, 1 + data[size - 1] % 16);
    dt_error_clear();
    return 0;
}
