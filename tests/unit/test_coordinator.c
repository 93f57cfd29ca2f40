/* test_coordinator.c - the coordinator against bad input on raw sockets:
 * garbage, wrong magic, truncated and oversized frames, limits, requests
 * before the job token.  Each case checks that the offending connection is
 * closed, that nothing it sent was applied, that a log line says why, and
 * that a well-behaved client is still served.  Also the requests dtrain's
 * client does not send, as PyTorch's server answers them: STORE_BARRIER,
 * LIST_KEYS, and ADD on values that are not plain integers
 * (tests/integration/test_pytorch_store.sh compares with PyTorch itself). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "coord_fixture.h"

static void garbage_first_bytes_close(void **state)
{
    struct fx *f = *state;
    int fd = raw_connect(f);
    send_all(fd, "GET / HTTP/1.1\r\n\r\n", 18);
    assert_true(closed_without_reply(fd));
    assert_true(log_has(f, "unknown request type 71"));
    still_serving_without(f, "x");
}

static void wrong_magic_closes(void **state)
{
    struct fx *f = *state;
    int fd = raw_connect(f);
    struct dt_wire_buf b;
    dt_wire_buf_init(&b);
    dt_wire_put_u8(&b, DT_WIRE_VALIDATE);
    dt_wire_put_u32(&b, 0xdeadbeef);
    put_auth(&b, token);
    put_set(&b, "wm", "1");
    send_buf(fd, &b);
    assert_true(closed_without_reply(fd));
    assert_true(log_has(f, "VALIDATE with magic 0xdeadbeef"));
    still_serving_without(f, "wm");
}

static void ops_before_token_close_and_apply_nothing(void **state)
{
    struct fx *f = *state;
    int fd = raw_connect(f);
    struct dt_wire_buf b;
    dt_wire_buf_init(&b);
    put_validate(&b);
    put_set(&b, "early", "1");
    send_buf(fd, &b);
    assert_true(closed_without_reply(fd));
    assert_true(log_has(f, "SET before the job token"));
    assert_true(log_has(f, "reach the store through their node's endpoint (MASTER_ADDR:MASTER_PORT)"));
    char last[512] = "";
    assert_int_equal(dt_coord_refusals(f->c, last, sizeof last), 1);
    assert_non_null(strstr(last, "through their node's endpoint"));
    still_serving_without(f, "early");
}

static void wrong_token_closes_and_pipelined_set_is_not_applied(void **state)
{
    struct fx *f = *state;
    int fd = raw_connect(f);
    char bad[65];
    dt_token_make(bad);
    struct dt_wire_buf b;
    dt_wire_buf_init(&b);
    put_validate(&b);
    put_auth(&b, bad);
    put_set(&b, "sneak", "1");
    send_buf(fd, &b);
    uint8_t r = 0xff;
    assert_int_equal(recv(fd, &r, 1, 0), 1);
    assert_int_equal(r, DT_WIRE_REFUSED);
    assert_true(closed_without_reply(fd));
    assert_true(log_has(f, "wrong job token"));
    assert_int_equal(dt_coord_refusals(f->c, NULL, 0), 1);
    still_serving_without(f, "sneak");
}

static void unknown_op_closes(void **state)
{
    struct fx *f = *state;
    int fd = raw_connect(f);
    struct dt_wire_buf b;
    dt_wire_buf_init(&b);
    put_validate(&b);
    put_auth(&b, token);
    dt_wire_put_u8(&b, 0x77);
    send_buf(fd, &b);
    uint8_t r;
    assert_int_equal(recv(fd, &r, 1, 0), 1); /* the AUTH reply */
    assert_int_equal(r, DT_WIRE_OK);
    assert_true(closed_without_reply(fd));
    assert_true(log_has(f, "unknown request type 119"));
    still_serving_without(f, "x");
}

static void truncated_frame_waits_then_disconnect_is_harmless(void **state)
{
    struct fx *f = *state;
    int fd = raw_connect(f);
    struct dt_wire_buf b;
    dt_wire_buf_init(&b);
    put_validate(&b);
    put_auth(&b, token);
    put_set(&b, "trunc", "0123456789");
    b.len -= 4; /* the value is cut short */
    send_buf(fd, &b);
    uint8_t r;
    assert_int_equal(recv(fd, &r, 1, 0), 1);
    still_serving_without(f, "trunc"); /* served while that frame is incomplete */
    close(fd);
    still_serving_without(f, "trunc");
}

static void oversized_key_closes_before_the_bytes_arrive(void **state)
{
    struct fx *f = *state;
    int fd = raw_connect(f);
    struct dt_wire_buf b;
    dt_wire_buf_init(&b);
    put_validate(&b);
    put_auth(&b, token);
    dt_wire_put_u8(&b, DT_WIRE_GET);
    dt_wire_put_u64(&b, UINT64_MAX);
    send_buf(fd, &b);
    uint8_t r;
    assert_int_equal(recv(fd, &r, 1, 0), 1);
    assert_true(closed_without_reply(fd));
    assert_true(log_has(f, "GET key of 18446744073709551615 bytes is over the 64-byte limit"));
    still_serving_without(f, "x");
}

static void oversized_value_closes(void **state)
{
    struct fx *f = *state;
    int fd = raw_connect(f);
    struct dt_wire_buf b;
    dt_wire_buf_init(&b);
    put_validate(&b);
    put_auth(&b, token);
    dt_wire_put_u8(&b, DT_WIRE_SET);
    dt_wire_put_key(&b, "/", "big", 3);
    dt_wire_put_u64(&b, 2000);
    send_buf(fd, &b);
    uint8_t r;
    assert_int_equal(recv(fd, &r, 1, 0), 1);
    assert_true(closed_without_reply(fd));
    assert_true(log_has(f, "SET value of 2000 bytes is over the 1024-byte limit"));
    still_serving_without(f, "big");
}

static void oversized_frame_closes(void **state)
{
    struct fx *f = *state;
    int fd = raw_connect(f);
    struct dt_wire_buf b;
    dt_wire_buf_init(&b);
    put_validate(&b);
    put_auth(&b, token);
    /* Each value is within its limit, the request is not. */
    dt_wire_put_u8(&b, DT_WIRE_MULTI_SET);
    dt_wire_put_u64(&b, 8);
    char v[1000];
    memset(v, 'v', sizeof v);
    for (int i = 0; i < 8; i++) {
        char k[16];
        snprintf(k, sizeof k, "f%d", i);
        dt_wire_put_key(&b, "/", k, strlen(k));
        dt_wire_put_bytes(&b, v, sizeof v);
    }
    send_buf(fd, &b);
    uint8_t r;
    assert_int_equal(recv(fd, &r, 1, 0), 1);
    assert_true(closed_without_reply(fd));
    assert_true(log_has(f, "MULTI_SET request") && log_has(f, "4096-byte frame limit"));
    still_serving_without(f, "f0");
}

static void total_memory_limit_closes_with_message(void **state)
{
    struct fx *f = *state;
    char v[1000];
    memset(v, 'm', sizeof v);
    int rc = 0;
    for (int i = 0; i < 20 && rc == 0; i++) {
        char k[16];
        snprintf(k, sizeof k, "mem%d", i);
        rc = dt_store_set(f->good, k, v, sizeof v);
        int64_t n;
        if (rc == 0)
            rc = dt_store_num_keys(f->good, &n);
    }
    assert_int_equal(rc, DT_ECONN);
    assert_true(log_has(f, "the store is full"));
    assert_true(log_has(f, "8192-byte total memory limit"));
    int64_t n = 0;
    assert_int_equal(dt_store_num_keys(f->good, &n), 0); /* reconnected */
    assert_true(n >= 5 && n < 9);
}

/* An answer is sized before it is built: five copies of a 1000-byte value
 * pass the 4096-byte reply limit (the frame limit). */
static void multi_get_answer_over_the_reply_limit_closes(void **state)
{
    struct fx *f = *state;
    char v[1000];
    memset(v, 'r', sizeof v);
    assert_int_equal(dt_store_set(f->good, "r", v, sizeof v), 0);
    int fd = authed_connect(f);
    struct dt_wire_buf b;
    dt_wire_buf_init(&b);
    dt_wire_put_u8(&b, DT_WIRE_MULTI_GET);
    dt_wire_put_u64(&b, 5);
    for (int i = 0; i < 5; i++)
        dt_wire_put_key(&b, "/", "r", 1);
    send_buf(fd, &b);
    assert_true(closed_without_reply(fd));
    assert_true(log_has(f, "the answer to MULTI_GET would be 5040 bytes, over the 4096-byte reply limit"));
    still_serving_without(f, "x");
}

static void second_wait_while_waiting_closes(void **state)
{
    struct fx *f = *state;
    int fd = raw_connect(f);
    struct dt_wire_buf b;
    dt_wire_buf_init(&b);
    put_validate(&b);
    put_auth(&b, token);
    for (int i = 0; i < 2; i++) {
        dt_wire_put_u8(&b, DT_WIRE_WAIT);
        dt_wire_put_u64(&b, 1);
        dt_wire_put_key(&b, "/", "nope", 4);
    }
    send_buf(fd, &b);
    uint8_t r;
    assert_int_equal(recv(fd, &r, 1, 0), 1);
    assert_true(closed_without_reply(fd));
    assert_true(log_has(f, "WAIT while its previous WAIT is still pending"));
    /* The waiter's placeholder for "nope" is gone with it. */
    int64_t n = -1;
    assert_int_equal(dt_store_num_keys(f->good, &n), 0);
    assert_int_equal(n, 0);
    still_serving_without(f, "nope");
}

static void too_many_keys_closes(void **state)
{
    struct fx *f = *state;
    int fd = raw_connect(f);
    struct dt_wire_buf b;
    dt_wire_buf_init(&b);
    put_validate(&b);
    put_auth(&b, token);
    dt_wire_put_u8(&b, DT_WIRE_CHECK);
    dt_wire_put_u64(&b, (uint64_t)1 << 40);
    send_buf(fd, &b);
    uint8_t r;
    assert_int_equal(recv(fd, &r, 1, 0), 1);
    assert_true(closed_without_reply(fd));
    assert_true(log_has(f, "CHECK with 1099511627776 keys is over the 131072-key limit"));
    still_serving_without(f, "x");
}

static void retrying_refused_clients_are_logged_sparingly(void **state)
{
    struct fx *f = *state;
    for (int i = 0; i < 30; i++) {
        int fd = raw_connect(f);
        struct dt_wire_buf b;
        dt_wire_buf_init(&b);
        put_validate(&b);
        dt_wire_put_u8(&b, DT_WIRE_PING);
        dt_wire_put_u32(&b, 1);
        send_buf(fd, &b);
        assert_true(closed_without_reply(fd));
    }
    assert_int_equal(dt_coord_refusals(f->c, NULL, 0), 30);
    char buf[65536] = "";
    FILE *fp = fopen(f->logpath, "r");
    size_t n = fread(buf, 1, sizeof buf - 1, fp);
    fclose(fp);
    buf[n] = 0;
    int lines = 0;
    for (char *p = buf; (p = strstr(p, "closed the connection")) != NULL; p++)
        lines++;
    assert_int_equal(lines, 5);
    assert_true(log_has(f, "further closes: one line in 100"));
}

static void raw_client_without_auth_gets_tcpstore_answers(void **state)
{
    struct fx *f = *state;
    int fd = raw_connect(f);
    struct dt_wire_buf b;
    dt_wire_buf_init(&b);
    put_validate(&b);
    dt_wire_put_u8(&b, DT_WIRE_PING);
    dt_wire_put_u32(&b, 0x01020304);
    dt_wire_put_u8(&b, DT_WIRE_ADD);
    dt_wire_put_key(&b, "", "init/", 5);
    dt_wire_put_i64(&b, 1);
    dt_wire_put_u8(&b, DT_WIRE_GETNUMKEYS);
    send_buf(fd, &b);
    uint8_t r[20];
    size_t got = 0;
    while (got < sizeof r) {
        ssize_t n = recv(fd, r + got, sizeof r - got, 0);
        assert_true(n > 0);
        got += (size_t)n;
    }
    assert_int_equal(dt_wire_load_u32(r), 0x01020304);
    assert_int_equal(dt_wire_load_u64(r + 4), 1);
    assert_int_equal(dt_wire_load_u64(r + 12), 1);
    close(fd);
}

static void put_store_barrier(struct dt_wire_buf *b, const char *k, int64_t world)
{
    dt_wire_put_u8(b, DT_WIRE_STORE_BARRIER);
    dt_wire_put_key(b, "/", k, strlen(k));
    dt_wire_put_i64(b, world);
}

static void store_barrier(int fd, const char *k, int64_t world)
{
    struct dt_wire_buf b;
    dt_wire_buf_init(&b);
    put_store_barrier(&b, k, world);
    send_buf(fd, &b);
}

static bool nothing_to_read(int fd)
{
    char c;
    return recv(fd, &c, 1, MSG_DONTWAIT) < 0 && errno == EAGAIN;
}

/* The good client's view of a key, polled until it is `want` (the raw
 * connections' requests are served in their own time). */
static void wait_value(struct fx *f, const char *key, const char *want)
{
    for (int i = 0; i < 200; i++) {
        void *v = NULL;
        size_t n = 0;
        bool ready = false;
        const char *k[] = {key};
        assert_int_equal(dt_store_check(f->good, k, 1, &ready), 0);
        if (ready)
            assert_int_equal(dt_store_get(f->good, key, &v, &n), 0);
        bool same = ready && n == strlen(want) && memcmp(v, want, n) == 0;
        free(v);
        if (same)
            return;
        usleep(10000);
    }
    fail_msg("key '%s' never became '%s'", key, want);
}

/* PyTorch's Store::barrier: a counter under the key; the arrival that
 * brings it to `world` releases everyone; later arrivals pass at once. */
static void store_barrier_releases_at_world(void **state)
{
    struct fx *f = *state;
    int a = authed_connect(f), b = authed_connect(f), c = authed_connect(f);
    store_barrier(a, "b", 3);
    store_barrier(b, "b", 3);
    wait_value(f, "b", "2");
    assert_true(nothing_to_read(a) && nothing_to_read(b));
    store_barrier(c, "b", 3);
    uint8_t r[3] = {9, 9, 9};
    assert_true(recv_all(a, &r[0], 1) && recv_all(b, &r[1], 1) && recv_all(c, &r[2], 1));
    assert_true(r[0] == DT_WIRE_STOP_WAITING && r[1] == DT_WIRE_STOP_WAITING && r[2] == DT_WIRE_STOP_WAITING);
    store_barrier(a, "b", 3); /* a fourth arrival: the count only grows */
    assert_true(recv_all(a, &r[0], 1));
    assert_int_equal(r[0], DT_WIRE_STOP_WAITING);
    wait_value(f, "b", "4");
    close(a);
    close(b);
    close(c);
}

/* DELETE_KEY while a client waits in STORE_BARRIER: it keeps waiting (as in
 * PyTorch) and the next SET of the key wakes it. */
static void store_barrier_waiter_outlives_delete(void **state)
{
    struct fx *f = *state;
    int a = authed_connect(f);
    store_barrier(a, "d", 2);
    wait_value(f, "d", "1");
    bool deleted = false;
    assert_int_equal(dt_store_delete_key(f->good, "d", &deleted), 0);
    assert_true(deleted);
    int64_t n = -1;
    assert_int_equal(dt_store_num_keys(f->good, &n), 0);
    assert_int_equal(n, 0);
    assert_true(nothing_to_read(a));
    assert_int_equal(dt_store_set(f->good, "d", "x", 1), 0);
    uint8_t r = 9;
    assert_true(recv_all(a, &r, 1));
    assert_int_equal(r, DT_WIRE_STOP_WAITING);
    close(a);
}

static int cmp_str(const void *x, const void *y)
{
    return strcmp(*(char *const *)x, *(char *const *)y);
}

/* LIST_KEYS: every key as stored, PyTorch's "/" prefix and its internal
 * "init/" counter included; queues are not keys. */
static void list_keys_answers_every_key(void **state)
{
    struct fx *f = *state;
    assert_int_equal(dt_store_set(f->good, "x", "1", 1), 0);
    assert_int_equal(dt_store_set(f->good, "y", "2", 1), 0);
    assert_int_equal(dt_store_queue_push(f->good, "q", "3", 1), 0);
    int fd = authed_connect(f);
    struct dt_wire_buf b;
    dt_wire_buf_init(&b);
    dt_wire_put_u8(&b, DT_WIRE_ADD);
    dt_wire_put_key(&b, "", "init/", 5);
    dt_wire_put_i64(&b, 1);
    dt_wire_put_u8(&b, DT_WIRE_LIST_KEYS);
    send_buf(fd, &b);
    int64_t add = 0, count = 0;
    assert_true(recv_all(fd, &add, 8) && recv_all(fd, &count, 8));
    assert_int_equal(count, 3);
    char *keys[3];
    for (int i = 0; i < 3; i++) {
        uint64_t len = 0;
        assert_true(recv_all(fd, &len, 8) && len < 16);
        keys[i] = calloc(1, len + 1);
        assert_true(recv_all(fd, keys[i], len));
    }
    qsort(keys, 3, sizeof keys[0], cmp_str);
    assert_string_equal(keys[0], "/x");
    assert_string_equal(keys[1], "/y");
    assert_string_equal(keys[2], "init/");
    for (int i = 0; i < 3; i++)
        free(keys[i]);
    close(fd);
}

/* ADD reads the value as PyTorch's server does (std::stoll): leading white
 * space and sign, digits up to the first other byte, wrapping past 2^63;
 * no digits or a value past int64 close the connection (PyTorch's does). */
static void add_reads_counters_as_pytorch_does(void **state)
{
    struct fx *f = *state;
    static const struct {
        const char *v;
        size_t len;
        int64_t delta, want;
    } ok[] = {
        {"7x", 2, 1, 8},
        {" \t\n7", 4, 1, 8},
        {"+7", 2, 1, 8},
        {"-7", 2, 1, -6},
        {"0x10", 4, 1, 1},
        {"1e3", 3, 1, 2},
        {"5\0009", 3, 1, 6},
        {"9223372036854775807", 19, 1, INT64_MIN},
        {"-9223372036854775808", 20, -1, INT64_MAX},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        int64_t got = 0;
        assert_int_equal(dt_store_set(f->good, "ctr", ok[i].v, ok[i].len), 0);
        assert_int_equal(dt_store_add(f->good, "ctr", ok[i].delta, &got), 0);
        assert_true(got == ok[i].want);
    }
    static const char *bad[] = {"", "x", "-", " ", "9223372036854775808", "\0005"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t len = i == 5 ? 2 : strlen(bad[i]);
        assert_int_equal(dt_store_set(f->good, "bad", bad[i], len), 0);
        int64_t got = 0;
        assert_int_not_equal(dt_store_add(f->good, "bad", 1, &got), 0);
        void *v = NULL;
        size_t n = 0;
        assert_int_equal(dt_store_get(f->good, "bad", &v, &n), 0); /* unchanged, reconnected */
        assert_int_equal(n, len);
        free(v);
    }
    assert_true(log_has(f, "whose value does not start with a decimal integer"));
    assert_true(log_has(f, "whose value is past the 64-bit range"));
}

int main(void)
{
    dt_token_make(token);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(garbage_first_bytes_close, setup, teardown),
        cmocka_unit_test_setup_teardown(wrong_magic_closes, setup, teardown),
        cmocka_unit_test_setup_teardown(ops_before_token_close_and_apply_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(wrong_token_closes_and_pipelined_set_is_not_applied, setup, teardown),
        cmocka_unit_test_setup_teardown(unknown_op_closes, setup, teardown),
        cmocka_unit_test_setup_teardown(truncated_frame_waits_then_disconnect_is_harmless, setup, teardown),
        cmocka_unit_test_setup_teardown(oversized_key_closes_before_the_bytes_arrive, setup_small_limits,
                                        teardown),
        cmocka_unit_test_setup_teardown(oversized_value_closes, setup_small_limits, teardown),
        cmocka_unit_test_setup_teardown(oversized_frame_closes, setup_small_limits, teardown),
        cmocka_unit_test_setup_teardown(total_memory_limit_closes_with_message, setup_small_limits, teardown),
        cmocka_unit_test_setup_teardown(multi_get_answer_over_the_reply_limit_closes, setup_small_limits,
                                        teardown),
        cmocka_unit_test_setup_teardown(second_wait_while_waiting_closes, setup, teardown),
        cmocka_unit_test_setup_teardown(too_many_keys_closes, setup, teardown),
        cmocka_unit_test_setup_teardown(retrying_refused_clients_are_logged_sparingly, setup, teardown),
        cmocka_unit_test_setup_teardown(raw_client_without_auth_gets_tcpstore_answers, setup_noauth,
                                        teardown),
        cmocka_unit_test_setup_teardown(store_barrier_releases_at_world, setup, teardown),
        cmocka_unit_test_setup_teardown(store_barrier_waiter_outlives_delete, setup, teardown),
        cmocka_unit_test_setup_teardown(list_keys_answers_every_key, setup, teardown),
        cmocka_unit_test_setup_teardown(add_reads_counters_as_pytorch_does, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
