/* coord_fixture.h - the set-up the coordinator's raw-socket tests share
 * (test_coordinator, test_coord_limits): a coordinator on loopback whose log
 * (fd 2) goes to a file the tests read, an authenticated client that must
 * keep being served, and helpers that speak the wire protocol by hand.
 * Header-only so each test stays one file; not a test itself; include it
 * after cmocka.h. */
#ifndef DT_TEST_COORD_FIXTURE_H
#define DT_TEST_COORD_FIXTURE_H

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
    struct dt_store *good; /* an authenticated client that must keep working */
    int saved_stderr;
    char logpath[64];
};

static inline int start_with(void **state, const struct dt_coord_config *extra)
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
    struct dt_store_options o = {
        .host = "127.0.0.1", .port = dt_coord_port(f->c), .token = cfg.token, .timeout_s = 5};
    assert_int_equal(dt_store_connect(&o, &f->good), 0);
    *state = f;
    return 0;
}

static inline int setup(void **state)
{
    struct dt_coord_config cfg = {.token = token};
    return start_with(state, &cfg);
}

static inline int setup_small_limits(void **state)
{
    struct dt_coord_config cfg = {.token = token,
                                  .max_frame_bytes = 4096,
                                  .max_key_bytes = 64,
                                  .max_value_bytes = 1024,
                                  .max_total_bytes = 8192};
    return start_with(state, &cfg);
}

static inline int setup_noauth(void **state)
{
    struct dt_coord_config cfg = {0};
    return start_with(state, &cfg);
}

static inline int teardown(void **state)
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

static inline bool log_has(struct fx *f, const char *needle)
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

static inline int raw_connect(struct fx *f)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)dt_coord_port(f->c))};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    struct timeval tv = {2, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

static inline void send_all(int fd, const void *p, size_t n)
{
    assert_int_equal(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
}

static inline void send_buf(int fd, struct dt_wire_buf *b)
{
    send_all(fd, b->p, b->len);
    dt_wire_buf_free(b);
}

/* True when the peer closes (EOF or reset) within 2 s, with no reply bytes. */
static inline bool closed_without_reply(int fd)
{
    char c;
    ssize_t n = recv(fd, &c, 1, 0);
    close(fd);
    return n == 0 || (n < 0 && errno == ECONNRESET);
}

static inline void put_validate(struct dt_wire_buf *b)
{
    dt_wire_put_u8(b, DT_WIRE_VALIDATE);
    dt_wire_put_u32(b, DT_WIRE_MAGIC);
}

static inline void put_auth(struct dt_wire_buf *b, const char *tok)
{
    dt_wire_put_u8(b, DT_WIRE_AUTH);
    dt_wire_put_bytes(b, tok, strlen(tok));
}

static inline void put_set(struct dt_wire_buf *b, const char *k, const char *v)
{
    dt_wire_put_u8(b, DT_WIRE_SET);
    dt_wire_put_key(b, "/", k, strlen(k));
    dt_wire_put_bytes(b, v, strlen(v));
}

/* Reads exactly n bytes; false on EOF, error or the 2 s timeout. */
static inline bool recv_all(int fd, void *p, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = recv(fd, (char *)p + got, n - got, 0);
        if (k <= 0)
            return false;
        got += (size_t)k;
    }
    return true;
}

/* A raw connection past the handshake (VALIDATE, AUTH and its OK read). */
static inline int authed_connect(struct fx *f)
{
    int fd = raw_connect(f);
    struct dt_wire_buf b;
    dt_wire_buf_init(&b);
    put_validate(&b);
    put_auth(&b, token);
    send_buf(fd, &b);
    uint8_t r = 0xff;
    assert_true(recv_all(fd, &r, 1));
    assert_int_equal(r, DT_WIRE_OK);
    return fd;
}

/* The good client still works, and `key` was never set. */
static inline void still_serving_without(struct fx *f, const char *key)
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

#endif
