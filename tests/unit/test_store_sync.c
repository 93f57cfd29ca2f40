/* test_store_sync.c - dtrain's additions through the client: barriers (one
 * reply per client, reusable names, world mismatch, timeout, a leaver not
 * counted), heartbeats, the job token (right, wrong, missing, auth: none),
 * connect retries and DTRAIN_COORD_ADDR parsing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"
#include "comm/store.h"
#include "launcher/coordinator/coordinator.h"
#include "spec/token.h"

static char token[65];

static struct dt_coord *start(const char *tok)
{
    struct dt_coord *c;
    struct dt_coord_config cfg = {.bind_host = "127.0.0.1", .token = tok};
    assert_int_equal(dt_coord_start(&cfg, &c), 0);
    return c;
}

static int connect_to(struct dt_coord *c, const char *tok, double timeout, struct dt_store **out)
{
    struct dt_store_options o = {.host = "127.0.0.1", .port = dt_coord_port(c), .token = tok,
                                 .timeout_s = timeout};
    return dt_store_connect(&o, out);
}

struct rank_arg {
    struct dt_coord *c;
    const char *name;
    int world;
    int rounds;
    int rc;
};

static void *rank_main(void *p)
{
    struct rank_arg *a = p;
    struct dt_store *s;
    a->rc = connect_to(a->c, token, 10, &s);
    for (int r = 0; a->rc == 0 && r < a->rounds; r++)
        a->rc = dt_store_barrier(s, a->name, a->world, 10);
    dt_store_close(s);
    return NULL;
}

static void barrier_releases_all_and_is_reusable(void **state)
{
    (void)state;
    struct dt_coord *c = start(token);
    enum { N = 16 };
    pthread_t t[N];
    struct rank_arg a[N];
    for (int i = 0; i < N; i++) {
        a[i] = (struct rank_arg){c, "b", N, 5, -99};
        pthread_create(&t[i], NULL, rank_main, &a[i]);
    }
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(a[i].rc, 0);
    }
    dt_coord_stop(c);
}

static void barrier_times_out_and_leaver_is_not_counted(void **state)
{
    (void)state;
    struct dt_coord *c = start(token);
    struct dt_store *s;
    assert_int_equal(connect_to(c, token, 5, &s), 0);
    assert_int_equal(dt_store_barrier(s, "two", 2, 0.2), DT_ETIMEDOUT);
    assert_non_null(strstr(dt_error_last(), "did not answer BARRIER 'two' (2 ranks) in 0.2s"));
    /* The timed-out client left; one more arrival must not complete the barrier. */
    usleep(50000);
    struct rank_arg a = {c, "two", 2, 1, -99};
    pthread_t t;
    pthread_create(&t, NULL, rank_main, &a);
    usleep(200000);
    assert_int_equal(dt_store_barrier(s, "two", 2, 5), 0); /* reconnects, then completes it */
    pthread_join(t, NULL);
    assert_int_equal(a.rc, 0);
    dt_store_close(s);
    dt_coord_stop(c);
}

static void barrier_world_mismatch_is_an_error(void **state)
{
    (void)state;
    struct dt_coord *c = start(token);
    struct rank_arg a = {c, "m", 2, 1, -99};
    pthread_t t;
    pthread_create(&t, NULL, rank_main, &a);
    usleep(100000);
    struct dt_store *s;
    assert_int_equal(connect_to(c, token, 5, &s), 0);
    assert_int_equal(dt_store_barrier(s, "m", 3, 5), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "different world size"));
    assert_int_equal(dt_store_barrier(s, "m", 2, 5), 0);
    pthread_join(t, NULL);
    assert_int_equal(a.rc, 0);
    dt_store_close(s);
    dt_coord_stop(c);
}

static void heartbeat_is_readable(void **state)
{
    (void)state;
    struct dt_coord *c = start(token);
    struct dt_store *s;
    assert_int_equal(connect_to(c, token, 5, &s), 0);
    int64_t step = -1;
    double when = 0;
    assert_int_equal(dt_coord_heartbeat(c, 3, &step, &when), DT_ENOTFOUND);
    assert_int_equal(dt_store_heartbeat(s, 3, 41), 0);
    assert_int_equal(dt_store_heartbeat(s, 3, 42), 0);
    assert_int_equal(dt_coord_heartbeat(c, 3, &step, &when), 0);
    assert_int_equal(step, 42);
    assert_true(when > 0);
    assert_int_equal(dt_coord_heartbeat(c, 2, &step, &when), DT_ENOTFOUND);
    dt_store_close(s);
    dt_coord_stop(c);
}

static void wrong_token_is_refused(void **state)
{
    (void)state;
    struct dt_coord *c = start(token);
    char other[65];
    dt_token_make(other);
    struct dt_store *s = NULL;
    dt_log_set_level(DT_LOG_SILENT);
    assert_int_equal(connect_to(c, other, 2, &s), DT_EAUTH);
    assert_non_null(strstr(dt_error_last(), "refused the job token"));
    assert_null(s);
    /* No token at all: the coordinator closes on the PING. */
    assert_int_equal(connect_to(c, NULL, 2, &s), DT_ECONN);
    assert_null(s);
    dt_log_set_level(DT_LOG_INFO);
    dt_coord_stop(c);
}

static void auth_none_takes_clients_with_and_without_token(void **state)
{
    (void)state;
    struct dt_coord *c = start(NULL);
    struct dt_store *a, *b;
    assert_int_equal(connect_to(c, NULL, 2, &a), 0);
    assert_int_equal(connect_to(c, token, 2, &b), 0);
    assert_int_equal(dt_store_set(a, "k", "v", 1), 0);
    void *v;
    size_t n;
    assert_int_equal(dt_store_get(b, "k", &v, &n), 0);
    assert_string_equal(v, "v");
    free(v);
    dt_store_close(a);
    dt_store_close(b);
    dt_coord_stop(c);
}

static void bad_token_config_is_refused(void **state)
{
    (void)state;
    struct dt_coord *c = NULL;
    struct dt_coord_config cfg = {.bind_host = "127.0.0.1", .token = "short"};
    assert_int_equal(dt_coord_start(&cfg, &c), DT_EINVAL);
    assert_null(c);
}

struct late_arg {
    int port;
    struct dt_coord *c;
};

static void *start_late(void *p)
{
    struct late_arg *a = p;
    usleep(300000);
    struct dt_coord_config cfg = {.bind_host = "127.0.0.1", .port = a->port, .token = token};
    assert_int_equal(dt_coord_start(&cfg, &a->c), 0);
    return NULL;
}

static void connect_retries_until_coordinator_is_up(void **state)
{
    (void)state;
    /* Find a free port by starting and stopping a coordinator on port 0. */
    struct dt_coord *probe = start(token);
    struct late_arg a = {dt_coord_port(probe), NULL};
    dt_coord_stop(probe);
    pthread_t t;
    pthread_create(&t, NULL, start_late, &a);
    struct dt_store *s;
    struct dt_store_options o = {.host = "127.0.0.1", .port = a.port, .token = token, .timeout_s = 5};
    assert_int_equal(dt_store_connect(&o, &s), 0);
    pthread_join(t, NULL);
    dt_store_close(s);
    dt_coord_stop(a.c);
}

static void connect_gives_up_at_deadline(void **state)
{
    (void)state;
    struct dt_coord *probe = start(token);
    int port = dt_coord_port(probe);
    dt_coord_stop(probe);
    struct dt_store *s;
    struct dt_store_options o = {.host = "127.0.0.1", .port = port, .token = token, .timeout_s = 0.3};
    assert_int_equal(dt_store_connect(&o, &s), DT_ECONN);
    char want[96];
    snprintf(want, sizeof want, "coordinator 127.0.0.1:%d did not accept a connection in 0.3s", port);
    assert_non_null(strstr(dt_error_last(), want));
}

static void connect_env_parses_and_validates(void **state)
{
    (void)state;
    struct dt_coord *c = start(token);
    struct dt_store *s;
    unsetenv("DTRAIN_COORD_ADDR");
    assert_int_equal(dt_store_connect_env(2, &s), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "DTRAIN_COORD_ADDR is not set"));
    setenv("DTRAIN_COORD_ADDR", "127.0.0.1", 1);
    assert_int_equal(dt_store_connect_env(2, &s), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "is not host:port"));
    setenv("DTRAIN_COORD_ADDR", "127.0.0.1:99999", 1);
    assert_int_equal(dt_store_connect_env(2, &s), DT_EINVAL);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", dt_coord_port(c));
    setenv("DTRAIN_COORD_ADDR", addr, 1);
    setenv("DTRAIN_JOB_TOKEN", token, 1);
    assert_int_equal(dt_store_connect_env(2, &s), 0);
    assert_string_equal(dt_store_peer(s), addr);
    dt_store_close(s);
    unsetenv("DTRAIN_JOB_TOKEN");
    dt_coord_stop(c);
}

int main(void)
{
    dt_token_make(token);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(barrier_releases_all_and_is_reusable),
        cmocka_unit_test(barrier_times_out_and_leaver_is_not_counted),
        cmocka_unit_test(barrier_world_mismatch_is_an_error),
        cmocka_unit_test(heartbeat_is_readable),
        cmocka_unit_test(wrong_token_is_refused),
        cmocka_unit_test(auth_none_takes_clients_with_and_without_token),
        cmocka_unit_test(bad_token_config_is_refused),
        cmocka_unit_test(connect_retries_until_coordinator_is_up),
        cmocka_unit_test(connect_gives_up_at_deadline),
        cmocka_unit_test(connect_env_parses_and_validates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
