/* test_store_wire.c - the store protocol decoder on requests that arrive a
 * few bytes at a time: resuming where the last call stopped (struct
 * dt_wire_progress) gives the same request as decoding it whole, and a
 * list's entries are read once, not once per arrival; PyTorch's newest
 * requests (LIST_KEYS, STORE_BARRIER) decode; channel frames (a node's
 * store endpoint's) carry one whole request each, within the frame limit,
 * and their reply headers round-trip.  The decoder against arbitrary
 * bytes is tests/fuzz/fuzz_store_wire.c's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "comm/store_wire.h"

static const struct dt_wire_limits lim = {.max_frame_bytes = (size_t)64 << 20,
                                          .max_key_bytes = 8192,
                                          .max_value_bytes = (size_t)8 << 20,
                                          .max_keys = 131072};

static void put_list(struct dt_wire_buf *b, uint8_t op, int n, size_t value_len)
{
    static char value[4096];
    memset(value, 'v', sizeof value);
    dt_wire_put_u8(b, op);
    dt_wire_put_u64(b, (uint64_t)n);
    for (int i = 0; i < n; i++) {
        char k[16];
        snprintf(k, sizeof k, "k%d", i);
        dt_wire_put_key(b, "/", k, strlen(k));
        if (op == DT_WIRE_MULTI_SET)
            dt_wire_put_bytes(b, value, value_len);
    }
}

/* Feeds buf in pieces of `step` bytes; returns the decoded request.  Every
 * call on an incomplete request must advance or keep pg.done, never go back,
 * and ask for more bytes than it has. */
static struct dt_wire_request feed(const struct dt_wire_buf *b, size_t step)
{
    struct dt_wire_progress pg = {0};
    struct dt_wire_request r;
    uint64_t last_done = 0;
    for (size_t len = step;; len += step) {
        if (len > b->len)
            len = b->len;
        if (pg.need > len) /* the caller skips: nothing new to read */
            continue;
        int rc = dt_wire_decode_step(b->p, len, &lim, &pg, &r);
        if (rc == 0)
            return r;
        assert_int_equal(rc, DT_WIRE_INCOMPLETE);
        assert_true(pg.need > len);
        assert_true(pg.done >= last_done);
        last_done = pg.done;
    }
}

static void list_arriving_slowly_decodes_as_whole(void **state)
{
    (void)state;
    struct dt_wire_buf b;
    dt_wire_buf_init(&b);
    put_list(&b, DT_WIRE_MULTI_GET, 10000, 0);
    struct dt_wire_request whole;
    assert_int_equal(dt_wire_decode(b.p, b.len, &lim, &whole), 0);
    struct dt_wire_request r = feed(&b, 7);
    assert_int_equal(r.op, DT_WIRE_MULTI_GET);
    assert_int_equal(r.count, 10000);
    assert_int_equal(r.frame_len, b.len);
    assert_int_equal(r.list.len, whole.list.len);
    assert_ptr_equal(r.list.p, whole.list.p);
    dt_wire_buf_free(&b);
}

/* Half the list is there: the decoder has recorded about half the entries
 * as checked, so the rest of the arrival does not walk them again. */
static void progress_records_the_entries_checked(void **state)
{
    (void)state;
    struct dt_wire_buf b;
    dt_wire_buf_init(&b);
    put_list(&b, DT_WIRE_WAIT, 131072, 0);
    struct dt_wire_progress pg = {0};
    struct dt_wire_request r;
    assert_int_equal(dt_wire_decode_step(b.p, b.len / 2, &lim, &pg, &r), DT_WIRE_INCOMPLETE);
    assert_true(pg.done > 60000 && pg.done < 70000);
    assert_true(pg.pos <= b.len / 2 && pg.need > b.len / 2);
    /* Resuming on the whole buffer finishes from there. */
    assert_int_equal(dt_wire_decode_step(b.p, b.len, &lim, &pg, &r), 0);
    assert_int_equal(r.count, 131072);
    assert_int_equal(r.frame_len, b.len);
    dt_wire_buf_free(&b);
}

/* A value cut anywhere: the decoder asks for exactly the bytes up to the
 * end of what it is reading. */
static void multi_set_cut_inside_a_value(void **state)
{
    (void)state;
    struct dt_wire_buf b;
    dt_wire_buf_init(&b);
    put_list(&b, DT_WIRE_MULTI_SET, 3, 4000);
    struct dt_wire_progress pg = {0};
    struct dt_wire_request r;
    size_t cut = 1 + 8 + 8 + 3 + 8 + 100; /* op, count, key "/k0", inside its value */
    assert_int_equal(dt_wire_decode_step(b.p, cut, &lim, &pg, &r), DT_WIRE_INCOMPLETE);
    assert_int_equal(pg.done, 0);
    assert_int_equal(pg.need, 1 + 8 + 8 + 3 + 8 + 4000);
    r = feed(&b, 999);
    assert_int_equal(r.count, 3);
    assert_int_equal(r.frame_len, b.len);
    dt_wire_buf_free(&b);
}

/* A list announced over the limits is refused before its entries come. */
static void oversized_list_is_refused_at_its_count(void **state)
{
    (void)state;
    struct dt_wire_buf b;
    dt_wire_buf_init(&b);
    dt_wire_put_u8(&b, DT_WIRE_CHECK);
    dt_wire_put_u64(&b, 131073);
    struct dt_wire_progress pg = {0};
    struct dt_wire_request r;
    assert_int_equal(dt_wire_decode_step(b.p, b.len, &lim, &pg, &r), DT_ENOMEM);
    dt_wire_buf_free(&b);
}

static void pytorch_newest_requests_decode(void **state)
{
    (void)state;
    struct dt_wire_buf b;
    dt_wire_buf_init(&b);
    dt_wire_put_u8(&b, DT_WIRE_LIST_KEYS);
    dt_wire_put_u8(&b, DT_WIRE_STORE_BARRIER);
    dt_wire_put_key(&b, "/", "bar", 3);
    dt_wire_put_i64(&b, 4);
    struct dt_wire_request r;
    assert_int_equal(dt_wire_decode(b.p, b.len, &lim, &r), 0);
    assert_int_equal(r.op, DT_WIRE_LIST_KEYS);
    assert_int_equal(r.frame_len, 1);
    assert_int_equal(dt_wire_decode(b.p + 1, b.len - 1, &lim, &r), 0);
    assert_int_equal(r.op, DT_WIRE_STORE_BARRIER);
    assert_int_equal(r.i1, 4);
    assert_int_equal(r.key.len, 4);
    assert_memory_equal(r.key.p, "/bar", 4);
    assert_string_equal(dt_wire_op_name(17), "LIST_KEYS");
    assert_string_equal(dt_wire_op_name(18), "STORE_BARRIER");
    dt_wire_buf_free(&b);
}

static void known_ops_are_pytorch_and_dtrain_ranges(void **state)
{
    (void)state;
    for (int op = 0; op < 256; op++) {
        bool want = op <= DT_WIRE_STORE_BARRIER || (op >= DT_WIRE_AUTH && op <= DT_WIRE_CHANNEL_CLOSE);
        assert_int_equal(dt_wire_op_known((uint8_t)op), want);
        struct dt_wire_request r;
        uint8_t one = (uint8_t)op;
        if (!want)
            assert_int_equal(dt_wire_decode(&one, 1, &lim, &r), DT_EPROTO);
    }
}

static void channel_frames_decode(void **state)
{
    (void)state;
    struct dt_wire_buf inner, b;
    dt_wire_buf_init(&inner);
    dt_wire_buf_init(&b);
    put_list(&inner, DT_WIRE_WAIT, 3, 0);
    dt_wire_put_u8(&b, DT_WIRE_CHANNEL_OPEN);
    dt_wire_put_u32(&b, 7);
    dt_wire_put_bytes(&b, "pid 42 (python3) of node 1", 26);
    size_t open_len = b.len;
    dt_wire_put_u8(&b, DT_WIRE_CHANNEL);
    dt_wire_put_u32(&b, 7);
    dt_wire_put_bytes(&b, inner.p, inner.len);
    size_t data_end = b.len;
    dt_wire_put_u8(&b, DT_WIRE_CHANNEL_CLOSE);
    dt_wire_put_u32(&b, 7);
    struct dt_wire_request r;
    assert_int_equal(dt_wire_decode(b.p, b.len, &lim, &r), 0);
    assert_int_equal(r.op, DT_WIRE_CHANNEL_OPEN);
    assert_int_equal(r.u32, 7);
    assert_int_equal(r.frame_len, open_len);
    assert_memory_equal(r.key.p, "pid 42", 6);
    /* Arriving a byte at a time, the CHANNEL frame decodes as it does whole. */
    struct dt_wire_progress pg = {0};
    int rc = DT_WIRE_INCOMPLETE;
    for (size_t have = 1; rc == DT_WIRE_INCOMPLETE && have <= data_end - open_len; have++)
        rc = dt_wire_decode_step(b.p + open_len, have, &lim, &pg, &r);
    assert_int_equal(rc, 0);
    assert_int_equal(r.op, DT_WIRE_CHANNEL);
    assert_int_equal(r.v1.len, inner.len);
    assert_memory_equal(r.v1.p, inner.p, inner.len);
    assert_int_equal(dt_wire_decode(b.p + data_end, b.len - data_end, &lim, &r), 0);
    assert_int_equal(r.op, DT_WIRE_CHANNEL_CLOSE);
    assert_int_equal(r.frame_len, 5);
    assert_true(dt_wire_op_channel(DT_WIRE_CHANNEL) && !dt_wire_op_channel(DT_WIRE_MEMBERS));
    assert_string_equal(dt_wire_op_name(DT_WIRE_CHANNEL_CLOSE), "CHANNEL_CLOSE");
    dt_wire_buf_free(&inner);
    dt_wire_buf_free(&b);
}

/* A CHANNEL's request may be as large as the frame limit less its 13 bytes,
 * and no larger: the size is refused as soon as it is read. */
static void channel_request_within_the_frame_limit(void **state)
{
    (void)state;
    const struct dt_wire_limits small = {.max_frame_bytes = 100, .max_key_bytes = 64, .max_value_bytes = 64,
                                         .max_keys = 16};
    uint8_t buf[128] = {0};
    struct dt_wire_buf b;
    dt_wire_buf_init(&b);
    dt_wire_put_u8(&b, DT_WIRE_CHANNEL);
    dt_wire_put_u32(&b, 1);
    dt_wire_put_bytes(&b, buf, 87);
    struct dt_wire_request r;
    assert_int_equal(dt_wire_decode(b.p, b.len, &small, &r), 0);
    assert_int_equal(r.frame_len, 100);
    b.len = 0;
    dt_wire_put_u8(&b, DT_WIRE_CHANNEL);
    dt_wire_put_u32(&b, 1);
    dt_wire_put_u64(&b, 88);
    assert_int_equal(dt_wire_decode(b.p, b.len, &small, &r), DT_ENOMEM);
    assert_non_null(strstr(dt_error_last(), "CHANNEL request of 88 bytes is over the 87-byte limit"));
    dt_wire_buf_free(&b);
}

static void channel_reply_header_round_trips(void **state)
{
    (void)state;
    struct dt_wire_buf b;
    dt_wire_buf_init(&b);
    dt_wire_put_chan_header(&b, 65535, DT_WIRE_CHAN_ENDED, 300);
    assert_int_equal(b.len, DT_WIRE_CHAN_HEADER);
    uint32_t chan;
    uint8_t kind;
    uint64_t len;
    assert_true(dt_wire_chan_header(b.p, &chan, &kind, &len));
    assert_int_equal(chan, 65535);
    assert_int_equal(kind, DT_WIRE_CHAN_ENDED);
    assert_int_equal(len, 300);
    b.p[4] = 3;
    assert_false(dt_wire_chan_header(b.p, &chan, &kind, &len));
    dt_wire_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(list_arriving_slowly_decodes_as_whole),
        cmocka_unit_test(progress_records_the_entries_checked),
        cmocka_unit_test(multi_set_cut_inside_a_value),
        cmocka_unit_test(oversized_list_is_refused_at_its_count),
        cmocka_unit_test(pytorch_newest_requests_decode),
        cmocka_unit_test(known_ops_are_pytorch_and_dtrain_ranges),
        cmocka_unit_test(channel_frames_decode),
        cmocka_unit_test(channel_request_within_the_frame_limit),
        cmocka_unit_test(channel_reply_header_round_trips),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
