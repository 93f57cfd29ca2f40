/* test_coordinator.c - the coordinator against bad input on raw sockets:
 * garbage, wrong magic, truncated and oversized frames, limits, requests
 * before the job token.  Each case checks that the offending connection is
 * closed, that nothing it sent was applied, that a log line says why, and
 * that a well-behaved client is still served. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "base/error.h"
#include "comm/store.h"
#include "comm/store_wire.h"
#include "launcher/coordinator/coordinator.h"
#include "spec/token.h"

static char token[65];

struct fx {
    struct dt_coord *c;
    struct dt_store *good;   /* an authenticated client that must keep working */
    int saved_stderr;
    char logpath[64];
};

static int start_with(void **state, const struct dt_coord_config *extra)
{
    struct fx *f = calloc(1, sizeof *f);
    struct dt_coord_config cfg = *extra;
    cfg.bind_host = "127.0.0.1";
    /* The coordinator logs to fd 2; keep those lines in a file to check them. */
    snprintf(f->logpath, sizeof f->logpath, "/tmp/dtrain-coordlog.XXXXXX");
    int fd = mkstemp(f->logpath);
    f->saved_stderr = dup(2);
    dup2(fd, 2);
    close(fd);
    assert_int_equal(dt_coord_start(&cfg, &f->c), 0);
    struct dt_store_options o = {.host = "127.0.0.1", .port = dt_coord_port(f->c),
                                 .token = cfg.token, .timeout_s = 5};
    assert_int_equal(dt_store_connect(&o, &f->good), 0);
    *state = f;
    return 0;
}

static int setup(void **state)
{
    struct dt_coord_config cfg = {.token = token};
    return start_with(state, &cfg);
}

static int setup_small_limits(void **state)
{
    struct dt_coord_config cfg = {.token = token, .max_frame_bytes = 4096, .max_key_bytes = 64,
                                  .max_value_bytes = 1024, .max_total_bytes = 8192};
    return start_with(state, &cfg);
}

static int setup_noauth(void **state)
{
    struct dt_coord_config cfg = {0};
    return start_with(state, &cfg);
}

static int teardown(void **state)
{
    struct fx *f = *state;
    dt_store_close(f->good);
    dt_coord_stop(f->c);
    dup2(f->saved_stderr, 2);
    close(f->saved_stderr);
    unlink(f->logpath);
    free(f);
    return 0;
}

static bool log_has(struct fx *f, const char *needle)
{
    char buf[16384] = "";
    FILE *fp = fopen(f->logpath, "r");
    size_t n = fread(buf, 1, sizeof buf - 1, fp);
    fclose(fp);
    buf[n] = 0;
    if (!strstr(buf, needle)) {
        fprintf(stdout, "log lacks '%s'; it holds:\n%s\n", needle, buf);
        return false;
    }
    return true;
}

static int raw_connect(struct fx *f)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)dt_coord_port(f->c))};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    struct timeval tv = {2, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

static void send_all(int fd, const void *p, size_t n)
{
    assert_int_equal(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
}

static void send_buf(int fd, struct dt_wire_buf *b)
{
    send_all(fd, b->p, b->len);
    dt_wire_buf_free(b);
}

/* True when the peer closes (EOF or reset) within 2 s, with no reply bytes. */
static bool closed_without_reply(int fd)
{
    char c;
    ssize_t n = recv(fd, &c, 1, 0);
    close(fd);
    return n == 0 || (n < 0 && errno == ECONNRESET);
}

static void put_validate(struct dt_wire_buf *b)
{
    dt_wire_put_u8(b, DT_WIRE_VALIDATE);
    dt_wire_put_u32(b, DT_WIRE_MAGIC);
}

static void put_auth(struct dt_wire_buf *b, const char *tok)
{
    dt_wire_put_u8(b, DT_WIRE_AUTH);
    dt_wire_put_bytes(b, tok, strlen(tok));
}

static void put_set(struct dt_wire_buf *b, const char *k, const char *v)
{
    dt_wire_put_u8(b, DT_WIRE_SET);
    dt_wire_put_key(b, "/", k, strlen(k));
    dt_wire_put_bytes(b, v, strlen(v));
}

/* The good client still works, and `key` was never set. */
static void still_serving_without(struct fx *f, const char *key)
{
    bool ready = true;
    const char *k[] = {key};
    assert_int_equal(dt_store_check(f->good, k, 1, &ready), 0);
    assert_false(ready);
    assert_int_equal(dt_store_set(f->good, "alive", "1", 1), 0);
    void *v;
    size_t n;
    assert_int_equal(dt_store_get(f->good, "alive", &v, &n), 0);
    free(v);
}

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
    assert_true(log_has(f, "rendezvous: {auth: none}"));
    char last[512] = "";
    assert_int_equal(dt_coord_refusals(f->c, last, sizeof last), 1);
    assert_non_null(strstr(last, "rendezvous: {auth: none}"));
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

int main(void)
{
    dt_token_make(token);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(garbage_first_bytes_close, setup, teardown),
        cmocka_unit_test_setup_teardown(wrong_magic_closes, setup, teardown),
        cmocka_unit_test_setup_teardown(ops_before_token_close_and_apply_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(wrong_token_closes_and_pipelined_set_is_not_applied, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(unknown_op_closes, setup, teardown),
        cmocka_unit_test_setup_teardown(truncated_frame_waits_then_disconnect_is_harmless, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(oversized_key_closes_before_the_bytes_arrive,
                                        setup_small_limits, teardown),
        cmocka_unit_test_setup_teardown(oversized_value_closes, setup_small_limits, teardown),
        cmocka_unit_test_setup_teardown(oversized_frame_closes, setup_small_limits, teardown),
        cmocka_unit_test_setup_teardown(total_memory_limit_closes_with_message, setup_small_limits,
                                        teardown),
        cmocka_unit_test_setup_teardown(second_wait_while_waiting_closes, setup, teardown),
        cmocka_unit_test_setup_teardown(too_many_keys_closes, setup, teardown),
        cmocka_unit_test_setup_teardown(retrying_refused_clients_are_logged_sparingly, setup, teardown),
        cmocka_unit_test_setup_teardown(raw_client_without_auth_gets_tcpstore_answers, setup_noauth,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
