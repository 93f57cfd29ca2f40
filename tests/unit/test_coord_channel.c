/* test_coord_channel.c - channels (launcher/coordinator/coord_channel.c) on
 * raw sockets, as a node's store endpoint uses them: each channel is a
 * connection of its own (a WAIT on one is woken by a SET on another, its
 * reply framed with its id), CHANNEL_CLOSE drops what the channel held and is
 * answered CLOSED, a bad request ends its channel alone (ENDED with why) and
 * never the carrying connection, channels need the token, and a connection
 * that carries channels sends nothing else. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "coord_fixture.h"

static void put_open(struct dt_wire_buf *b, uint32_t ch)
{
    dt_wire_put_u8(b, DT_WIRE_CHANNEL_OPEN);
    dt_wire_put_u32(b, ch);
    dt_wire_put_bytes(b, "pid 1 (test)", 12);
}

/* One request, wrapped for channel ch. */
static void put_in(struct dt_wire_buf *b, uint32_t ch, struct dt_wire_buf *req)
{
    dt_wire_put_u8(b, DT_WIRE_CHANNEL);
    dt_wire_put_u32(b, ch);
    dt_wire_put_bytes(b, req->p, req->len);
    req->len = 0;
}

static void put_close(struct dt_wire_buf *b, uint32_t ch)
{
    dt_wire_put_u8(b, DT_WIRE_CHANNEL_CLOSE);
    dt_wire_put_u32(b, ch);
}

/* Opens channel ch and validates it, as the endpoint forwards a client's VALIDATE. */
static void open_validated(int fd, uint32_t ch)
{
    struct dt_wire_buf b, r;
    dt_wire_buf_init(&b);
    dt_wire_buf_init(&r);
    put_open(&b, ch);
    put_validate(&r);
    put_in(&b, ch, &r);
    send_buf(fd, &b);
    dt_wire_buf_free(&r);
}

/* Sends one request on channel ch. */
static void send_in(int fd, uint32_t ch, struct dt_wire_buf *req)
{
    struct dt_wire_buf b;
    dt_wire_buf_init(&b);
    put_in(&b, ch, req);
    send_buf(fd, &b);
}

struct frame {
    uint32_t chan;
    uint8_t kind;
    uint64_t len;
    char bytes[2048];
};

static bool read_frame(int fd, struct frame *f)
{
    uint8_t h[DT_WIRE_CHAN_HEADER];
    if (!recv_all(fd, h, sizeof h) || !dt_wire_chan_header(h, &f->chan, &f->kind, &f->len) ||
        f->len >= sizeof f->bytes || !recv_all(fd, f->bytes, (size_t)f->len))
        return false;
    f->bytes[f->len] = 0;
    return true;
}

static void expect_frame(int fd, uint32_t chan, uint8_t kind, const void *bytes, size_t len)
{
    struct frame f;
    assert_true(read_frame(fd, &f));
    assert_int_equal(f.chan, chan);
    assert_int_equal(f.kind, kind);
    assert_int_equal(f.len, len);
    if (len)
        assert_memory_equal(f.bytes, bytes, len);
}

static void put_wait(struct dt_wire_buf *b, const char *key)
{
    dt_wire_put_u8(b, DT_WIRE_WAIT);
    dt_wire_put_u64(b, 1);
    dt_wire_put_key(b, "/", key, strlen(key));
}

static void put_get(struct dt_wire_buf *b, const char *key)
{
    dt_wire_put_u8(b, DT_WIRE_GET);
    dt_wire_put_key(b, "/", key, strlen(key));
}

/* Nothing arrives within 300 ms. */
static bool quiet(int fd)
{
    struct timeval tv = {0, 300000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char c;
    ssize_t n = recv(fd, &c, 1, 0);
    tv = (struct timeval){2, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

static void wait_on_one_channel_is_woken_by_another(void **state)
{
    struct fx *f = *state;
    int fd = authed_connect(f);
    open_validated(fd, 0);
    open_validated(fd, 5);
    struct dt_wire_buf r;
    dt_wire_buf_init(&r);
    put_wait(&r, "w");
    send_in(fd, 0, &r);
    assert_true(quiet(fd)); /* the WAIT holds: no busy answer */
    put_set(&r, "w", "hello");
    send_in(fd, 5, &r);
    uint8_t stop = DT_WIRE_STOP_WAITING;
    expect_frame(fd, 0, DT_WIRE_CHAN_DATA, &stop, 1);
    put_get(&r, "w");
    send_in(fd, 5, &r);
    expect_frame(fd, 5, DT_WIRE_CHAN_DATA, "\x05\0\0\0\0\0\0\0hello", 13);
    /* A direct client's SET wakes a channel's WAIT too: one store. */
    put_wait(&r, "direct");
    send_in(fd, 5, &r);
    assert_int_equal(dt_store_set(f->good, "direct", "1", 1), 0);
    expect_frame(fd, 5, DT_WIRE_CHAN_DATA, &stop, 1);
    dt_wire_buf_free(&r);
    close(fd);
}

static void close_drops_the_wait_and_frees_the_id(void **state)
{
    struct fx *f = *state;
    int fd = authed_connect(f);
    open_validated(fd, 1);
    struct dt_wire_buf r, b;
    dt_wire_buf_init(&r);
    dt_wire_buf_init(&b);
    put_wait(&r, "late");
    send_in(fd, 1, &r);
    put_close(&b, 1);
    send_buf(fd, &b);
    expect_frame(fd, 1, DT_WIRE_CHAN_CLOSED, NULL, 0);
    assert_int_equal(dt_store_set(f->good, "late", "1", 1), 0);
    assert_true(quiet(fd)); /* the closed channel's WAIT is gone */
    open_validated(fd, 1);  /* and its id opens again */
    put_get(&r, "late");
    send_in(fd, 1, &r);
    expect_frame(fd, 1, DT_WIRE_CHAN_DATA, "\x01\0\0\0\0\0\0\0" "1", 9);
    dt_wire_buf_free(&r);
    close(fd);
}

static void bad_request_ends_its_channel_only(void **state)
{
    struct fx *f = *state;
    int fd = authed_connect(f);
    open_validated(fd, 0);
    open_validated(fd, 1);
    struct dt_wire_buf r, b;
    dt_wire_buf_init(&r);
    dt_wire_buf_init(&b);
    dt_wire_put_u8(&r, DT_WIRE_LEAVE);
    send_in(fd, 0, &r);
    struct frame fr;
    assert_true(read_frame(fd, &fr));
    assert_int_equal(fr.chan, 0);
    assert_int_equal(fr.kind, DT_WIRE_CHAN_ENDED);
    assert_non_null(strstr(fr.bytes, "LEAVE through a node's store endpoint"));
    assert_true(log_has(f, "closed the connection of pid 1 (test) via 127.0.0.1:"));
    put_set(&r, "dropped", "1"); /* to the ended channel: dropped, not an error */
    send_in(fd, 0, &r);
    put_close(&b, 0);
    send_buf(fd, &b);
    expect_frame(fd, 0, DT_WIRE_CHAN_CLOSED, NULL, 0);
    put_get(&r, "dropped");
    send_in(fd, 1, &r);
    expect_frame(fd, 1, DT_WIRE_CHAN_DATA, "\0\0\0\0\0\0\0\0", 8);
    /* A channel's first request must be VALIDATE, as a socket's. */
    dt_wire_buf_init(&b);
    put_open(&b, 2);
    send_buf(fd, &b);
    put_set(&r, "novalidate", "1");
    send_in(fd, 2, &r);
    assert_true(read_frame(fd, &fr));
    assert_int_equal(fr.kind, DT_WIRE_CHAN_ENDED);
    assert_non_null(strstr(fr.bytes, "not VALIDATE"));
    /* A wrong token in a channel is refused (REFUSED), then the channel ends. */
    open_validated(fd, 3);
    put_auth(&r, "0000000000000000000000000000000000000000000000000000000000000000");
    send_in(fd, 3, &r);
    uint8_t refused = DT_WIRE_REFUSED;
    expect_frame(fd, 3, DT_WIRE_CHAN_DATA, &refused, 1);
    assert_true(read_frame(fd, &fr));
    assert_int_equal(fr.kind, DT_WIRE_CHAN_ENDED);
    assert_non_null(strstr(fr.bytes, "wrong job token"));
    dt_wire_buf_free(&r);
    close(fd);
    still_serving_without(f, "novalidate");
}

static void channels_need_the_token(void **state)
{
    struct fx *f = *state;
    int fd = raw_connect(f);
    struct dt_wire_buf b;
    dt_wire_buf_init(&b);
    put_validate(&b);
    put_open(&b, 0);
    send_buf(fd, &b);
    assert_true(closed_without_reply(fd));
    assert_true(log_has(f, "CHANNEL_OPEN before the job token"));
    still_serving_without(f, "x");
}

static void carrying_connection_sends_channel_requests_only(void **state)
{
    struct fx *f = *state;
    int fd = authed_connect(f);
    open_validated(fd, 0);
    struct dt_wire_buf b;
    dt_wire_buf_init(&b);
    put_set(&b, "plain", "1");
    send_buf(fd, &b);
    assert_true(closed_without_reply(fd));
    assert_true(log_has(f, "SET on a connection that carries channels"));
    still_serving_without(f, "plain");
}

/* The carrying connection closing takes its channels' barrier arrivals with it. */
static void closing_the_carrier_leaves_barriers(void **state)
{
    struct fx *f = *state;
    int fd = authed_connect(f);
    open_validated(fd, 0);
    struct dt_wire_buf r;
    dt_wire_buf_init(&r);
    dt_wire_put_u8(&r, DT_WIRE_BARRIER);
    dt_wire_put_bytes(&r, "bb", 2);
    dt_wire_put_i64(&r, 2);
    send_in(fd, 0, &r);
    dt_wire_buf_free(&r);
    assert_true(quiet(fd));
    close(fd);
    usleep(100000);
    assert_int_equal(dt_store_barrier(f->good, "bb", 2, 0.3), DT_ETIMEDOUT);
}

int main(void)
{
    dt_token_make(token);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(wait_on_one_channel_is_woken_by_another, setup, teardown),
        cmocka_unit_test_setup_teardown(close_drops_the_wait_and_frees_the_id, setup, teardown),
        cmocka_unit_test_setup_teardown(bad_request_ends_its_channel_only, setup, teardown),
        cmocka_unit_test_setup_teardown(channels_need_the_token, setup, teardown),
        cmocka_unit_test_setup_teardown(carrying_connection_sends_channel_requests_only, setup, teardown),
        cmocka_unit_test_setup_teardown(closing_the_carrier_leaves_barriers, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
