/* test_coord_limits.c - what a client without the token, or a slow or greedy
 * one with it, can make the coordinator do (docs/security.md): refusals that
 * count only for processes of the job, the pre-authentication frame limit,
 * the handshake and request deadlines, the connection caps, replies that are
 * not read, and WAITs on fresh keys held within the memory budget.  Each case checks that a well-behaved client is still served.
 * Deadlines are shortened through struct dt_coord_config so the cases take
 * fractions of a second. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <poll.h>
#include <sys/wait.h>
#include <time.h>

#include "base/clock.h"
#include "coord_fixture.h"

static int setup_short_deadlines(void **state)
{
    struct dt_coord_config cfg = {.token = token, .handshake_timeout_ms = 300, .request_timeout_ms = 300};
    return start_with(state, &cfg);
}

static int setup_small_caps(void **state)
{
    struct dt_coord_config cfg = {.token = token, .max_conns = 16, .max_preauth_conns = 4};
    return start_with(state, &cfg);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* ---- which refusals count ---- */

/* Sends VALIDATE then PING (nine bytes) and waits for the close: what
 * PyTorch's client does on connect, and what an outsider needs to send. */
static void nine_bytes(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    struct timeval tv = {3, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    uint8_t b[10] = {DT_WIRE_VALIDATE, 0xCE, 0xF7, 0x85, 0x3C, DT_WIRE_PING, 1, 2, 3, 4};
    char c;
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0 && send(fd, b, sizeof b, MSG_NOSIGNAL) == sizeof b)
        while (recv(fd, &c, 1, 0) > 0)
            ;
    close(fd);
}

/* A process that is not a descendant of this one (the coordinator's): its
 * parent exits at once, so it is reparented away from us.  Returns when it
 * is done. */
static void nine_bytes_from_outside(int port)
{
    int done[2];
    assert_int_equal(pipe(done), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        if (fork() == 0) {
            sleep_ms(100); /* until our parent is gone and we are init's */
            nine_bytes(port);
            ssize_t w = write(done[1], "x", 1);
            _exit(w == 1 ? 0 : 1);
        }
        _exit(0);
    }
    waitpid(child, NULL, 0);
    close(done[1]);
    char c;
    assert_int_equal(read(done[0], &c, 1), 1);
    close(done[0]);
}

static void refusal_from_outside_the_job_does_not_count(void **state)
{
    struct fx *f = *state;
    nine_bytes_from_outside(dt_coord_port(f->c));
    assert_true(log_has(f, "PING before the job token; this looks like a PyTorch TCPStore client"));
    assert_int_equal(dt_coord_refusals(f->c, NULL, 0), 0);
    still_serving_without(f, "x");
}

static void refusal_from_a_process_of_the_job_counts(void **state)
{
    struct fx *f = *state;
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        nine_bytes(dt_coord_port(f->c));
        _exit(0);
    }
    int st = -1;
    waitpid(child, &st, 0);
    assert_int_equal(st, 0);
    char last[512] = "";
    assert_int_equal(dt_coord_refusals(f->c, last, sizeof last), 1);
    assert_non_null(strstr(last, "PyTorch"));
    still_serving_without(f, "x");
}

/* ---- before the handshake ---- */

static void preauth_request_is_refused_by_its_first_byte(void **state)
{
    struct fx *f = *state;
    /* The header of a 7 x 8 MiB MULTI_SET: nothing of it is buffered. */
    int fd = raw_connect(f);
    struct dt_wire_buf b;
    dt_wire_buf_init(&b);
    put_validate(&b);
    dt_wire_put_u8(&b, DT_WIRE_MULTI_SET);
    dt_wire_put_u64(&b, 7);
    send_buf(fd, &b);
    assert_true(closed_without_reply(fd));
    assert_true(log_has(f, "MULTI_SET before the job token"));
    /* An AUTH that announces a 1 GiB token. */
    fd = raw_connect(f);
    dt_wire_buf_init(&b);
    put_validate(&b);
    dt_wire_put_u8(&b, DT_WIRE_AUTH);
    dt_wire_put_u64(&b, (uint64_t)1 << 30);
    send_buf(fd, &b);
    assert_true(closed_without_reply(fd));
    assert_true(log_has(f, "AUTH key of 1073741824 bytes is over the 64-byte limit"));
    still_serving_without(f, "x");
}

static void silent_and_slow_handshakes_are_closed(void **state)
{
    struct fx *f = *state;
    int silent = raw_connect(f);
    int slow = raw_connect(f);
    uint8_t v[5] = {DT_WIRE_VALIDATE, 0xCE, 0xF7, 0x85, 0x3C};
    double t0 = dt_clock_s();
    for (int i = 0; i < 4; i++) { /* a byte every 100 ms never finishes in 300 ms */
        if (send(slow, &v[i], 1, MSG_NOSIGNAL) != 1)
            break;
        sleep_ms(100);
    }
    assert_true(closed_without_reply(silent));
    assert_true(closed_without_reply(slow));
    double took = dt_clock_s() - t0;
    assert_true(took < 1.5);
    assert_true(log_has(f, "did not finish its handshake (VALIDATE, AUTH) within 0.3 s"));
    still_serving_without(f, "x");
}

/* ---- after the handshake ---- */

/* Closes before the token are logged sparingly (anyone can make many); a
 * client past the handshake is always named when it is closed. */
static void a_rank_close_is_logged_after_many_refusals(void **state)
{
    struct fx *f = *state;
    for (int i = 0; i < 8; i++) {
        int fd = raw_connect(f);
        send_all(fd, "GET / HTTP/1.1\r\n\r\n", 18);
        assert_true(closed_without_reply(fd));
    }
    int fd = authed_connect(f);
    struct dt_wire_buf b;
    dt_wire_buf_init(&b);
    dt_wire_put_u8(&b, DT_WIRE_SET);
    dt_wire_put_key(&b, "/", "huge", 4);
    dt_wire_put_u64(&b, (uint64_t)1 << 30);
    send_buf(fd, &b);
    assert_true(closed_without_reply(fd));
    assert_true(log_has(f, "further closes: one line in 100"));
    assert_true(log_has(f, "SET value of 1073741824 bytes is over the 8388608-byte limit"));
}

static void slow_request_is_closed_idle_connection_stays(void **state)
{
    struct fx *f = *state;
    int idle = authed_connect(f);
    int slow = authed_connect(f);
    struct dt_wire_buf b;
    dt_wire_buf_init(&b);
    put_set(&b, "dribble", "0123456789");
    for (size_t i = 0; i < 6; i++) { /* a byte every 100 ms: 600 ms for a 300 ms deadline */
        if (send(slow, b.p + i, 1, MSG_NOSIGNAL) != 1)
            break;
        sleep_ms(100);
    }
    dt_wire_buf_free(&b);
    assert_true(closed_without_reply(slow));
    assert_true(log_has(f, "a request did not arrive whole within 0.3 s"));
    /* Idle for twice the deadline, with no request under way: still served. */
    dt_wire_buf_init(&b);
    dt_wire_put_u8(&b, DT_WIRE_GETNUMKEYS);
    send_buf(idle, &b);
    int64_t n = -1;
    assert_true(recv_all(idle, &n, 8));
    assert_int_equal(n, 0);
    close(idle);
    still_serving_without(f, "dribble");
}

/* Resident memory of this process, in MiB (the coordinator runs in it). */
static double vm_rss_mib(void)
{
    FILE *fp = fopen("/proc/self/status", "r");
    char line[256];
    double kb = -1;
    while (fp && fgets(line, sizeof line, fp))
        if (sscanf(line, "VmRSS: %lf kB", &kb) == 1)
            break;
    if (fp)
        fclose(fp);
    return kb / 1024;
}

/* 200 GETs of an 8 MiB value whose answers are never read: the coordinator
 * stops reading that connection once 4 MiB of its answers are unsent,
 * instead of building 1.6 GB of them. */
static void pipelined_gets_whose_answers_are_not_read(void **state)
{
    struct fx *f = *state;
    size_t big = (size_t)8 << 20;
    char *v = malloc(big);
    memset(v, 'g', big);
    assert_int_equal(dt_store_set(f->good, "big", v, big), 0);
    free(v);
    double before = vm_rss_mib();
    int fd = authed_connect(f);
    int rcvbuf = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    struct dt_wire_buf b;
    dt_wire_buf_init(&b);
    for (int i = 0; i < 200; i++) {
        dt_wire_put_u8(&b, DT_WIRE_GET);
        dt_wire_put_key(&b, "/", "big", 3);
    }
    send_buf(fd, &b);
    sleep_ms(500);
    still_serving_without(f, "x");
    double grew = vm_rss_mib() - before;
    print_message("resident memory grew by %.1f MiB with 200 unread 8 MiB answers\n", grew);
    assert_true(grew < 32);
    close(fd);
}

/* ---- WAITs within the memory budget ---- */

static int setup_32mib_budget(void **state)
{
    struct dt_coord_config cfg = {.token = token, .max_total_bytes = (size_t)32 << 20};
    return start_with(state, &cfg);
}

/* Connections with the token each WAIT on 131072 keys no one sets, until
 * the budget refuses one (closing it): the coordinator's memory grows by
 * about the budget, not twice it (its waiters were not counted, its entries
 * undercounted: 1.84 GB under the 1 GiB default). */
static void waits_on_fresh_keys_stay_within_the_budget(void **state)
{
    struct fx *f = *state;
    double before = vm_rss_mib();
    int fds[64], n = 0;
    bool refused = false;
    char key[32];
    while (n < 64 && !refused) {
        int fd = authed_connect(f);
        struct dt_wire_buf b;
        dt_wire_buf_init(&b);
        dt_wire_put_u8(&b, DT_WIRE_WAIT);
        dt_wire_put_u64(&b, 131072);
        for (int i = 0; i < 131072; i++)
            dt_wire_put_key(&b, "", key, (size_t)snprintf(key, sizeof key, "/w%02d-%07d", n, i));
        send_buf(fd, &b);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        refused = poll(&p, 1, 500) == 1; /* a WAIT that is held answers nothing */
        fds[n++] = fd;
    }
    double grew = vm_rss_mib() - before;
    print_message("%d WAITs of 131072 fresh keys held, the next refused; resident memory grew by %.1f MiB "
                  "(budget 32 MiB)\n",
                  n - 1, grew);
    assert_true(refused);
    assert_true(log_has(f, "the store is full"));
    assert_true(grew < 32 + 8);
    for (int i = 0; i < n; i++)
        close(fds[i]);
    sleep_ms(200); /* their waiters go with them, and the budget with them */
    still_serving_without(f, "/w00-0000001");
}

/* ---- connection caps ---- */

/* Four connections that never finish their handshake fill the pre-auth cap;
 * a real client waits in the backlog, then the oldest that had a second to
 * finish makes room for it. */
static void full_preauth_cap_makes_room_for_a_real_client(void **state)
{
    struct fx *f = *state;
    int idle[4];
    for (int i = 0; i < 4; i++)
        idle[i] = raw_connect(f);
    double t0 = dt_clock_s();
    struct dt_store_options o = {
        .host = "127.0.0.1", .port = dt_coord_port(f->c), .token = token, .timeout_s = 5};
    struct dt_store *s = NULL;
    assert_int_equal(dt_store_connect(&o, &s), 0);
    assert_int_equal(dt_store_set(s, "late", "1", 1), 0);
    double took = dt_clock_s() - t0;
    print_message("a client waited %.2f s behind 4 idle connections\n", took);
    assert_true(took < 3);
    dt_store_close(s);
    assert_true(closed_without_reply(idle[0])); /* the oldest went */
    assert_true(log_has(f, "had not finished its handshake when the connection limit was reached"));
    for (int i = 1; i < 4; i++)
        close(idle[i]);
}

int main(void)
{
    dt_token_make(token);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(refusal_from_outside_the_job_does_not_count, setup, teardown),
        cmocka_unit_test_setup_teardown(refusal_from_a_process_of_the_job_counts, setup, teardown),
        cmocka_unit_test_setup_teardown(preauth_request_is_refused_by_its_first_byte, setup, teardown),
        cmocka_unit_test_setup_teardown(silent_and_slow_handshakes_are_closed, setup_short_deadlines,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_rank_close_is_logged_after_many_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(slow_request_is_closed_idle_connection_stays, setup_short_deadlines,
                                        teardown),
        cmocka_unit_test_setup_teardown(pipelined_gets_whose_answers_are_not_read, setup, teardown),
        cmocka_unit_test_setup_teardown(full_preauth_cap_makes_room_for_a_real_client, setup_small_caps,
                                        teardown),
        cmocka_unit_test_setup_teardown(waits_on_fresh_keys_stay_within_the_budget, setup_32mib_budget,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
