/* test_store.c - every store operation through dtrain's client against an
 * in-process coordinator (with a job token): values, blocking, timeouts,
 * barriers, heartbeats, and the client's errors. */
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
#include "base/clock.h"

struct fx {
    struct dt_coord *coord;
    char token[65];
    struct dt_store *s;
};

static int connect_to(struct fx *f, const char *token, double timeout, struct dt_store **out)
{
    struct dt_store_options o = {.host = "127.0.0.1", .port = dt_coord_port(f->coord),
                                 .token = token, .timeout_s = timeout};
    return dt_store_connect(&o, out);
}

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof *f);
    assert_int_equal(dt_token_make(f->token), 0);
    struct dt_coord_config cfg = {.bind_host = "127.0.0.1", .token = f->token};
    assert_int_equal(dt_coord_start(&cfg, &f->coord), 0);
    assert_int_equal(connect_to(f, f->token, 5, &f->s), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    dt_store_close(f->s);
    dt_coord_stop(f->coord);
    free(f);
    return 0;
}

static void token_is_64_hex_and_fresh(void **state)
{
    (void)state;
    char a[65], b[65];
    assert_int_equal(dt_token_make(a), 0);
    assert_int_equal(dt_token_make(b), 0);
    assert_int_equal(strlen(a), 64);
    assert_int_equal(strspn(a, "0123456789abcdef"), 64);
    assert_string_not_equal(a, b);
}

static void set_then_get(void **state)
{
    struct fx *f = *state;
    assert_int_equal(dt_store_set(f->s, "a", "hello", 5), 0);
    void *v;
    size_t n;
    assert_int_equal(dt_store_get(f->s, "a", &v, &n), 0);
    assert_int_equal(n, 5);
    assert_string_equal(v, "hello");
    free(v);
    /* Overwrite, and an empty value. */
    assert_int_equal(dt_store_set(f->s, "a", "", 0), 0);
    assert_int_equal(dt_store_get(f->s, "a", &v, &n), 0);
    assert_int_equal(n, 0);
    free(v);
}

struct setter_arg {
    struct fx *f;
    const char *key;
    double delay;
};

static void *late_setter(void *p)
{
    struct setter_arg *a = p;
    struct timespec ts = {0, (long)(a->delay * 1e9)};
    nanosleep(&ts, NULL);
    struct dt_store *s;
    assert_int_equal(connect_to(a->f, a->f->token, 5, &s), 0);
    assert_int_equal(dt_store_set(s, a->key, "late", 4), 0);
    dt_store_close(s);
    return NULL;
}

static void get_blocks_until_set(void **state)
{
    struct fx *f = *state;
    struct setter_arg a = {f, "later", 0.2};
    pthread_t t;
    pthread_create(&t, NULL, late_setter, &a);
    void *v;
    size_t n;
    assert_int_equal(dt_store_get(f->s, "later", &v, &n), 0);
    assert_string_equal(v, "late");
    free(v);
    pthread_join(t, NULL);
}

static void add_counts_and_returns_new_value(void **state)
{
    struct fx *f = *state;
    int64_t r = 0;
    assert_int_equal(dt_store_add(f->s, "ctr", 5, &r), 0);
    assert_int_equal(r, 5);
    assert_int_equal(dt_store_add(f->s, "ctr", -7, &r), 0);
    assert_int_equal(r, -2);
    void *v;
    size_t n;
    assert_int_equal(dt_store_get(f->s, "ctr", &v, &n), 0);
    assert_string_equal(v, "-2");
    free(v);
}

static void add_on_text_closes_connection(void **state)
{
    struct fx *f = *state;
    assert_int_equal(dt_store_set(f->s, "txt", "abc", 3), 0);
    int64_t r;
    dt_log_set_level(DT_LOG_SILENT);
    assert_int_equal(dt_store_add(f->s, "txt", 1, &r), DT_ECONN);
    dt_log_set_level(DT_LOG_INFO);
    assert_non_null(strstr(dt_error_last(), "closed the connection during ADD for key 'txt'"));
    /* The next call reconnects. */
    assert_int_equal(dt_store_add(f->s, "fine", 1, &r), 0);
    assert_int_equal(r, 1);
}

static void check_and_wait(void **state)
{
    struct fx *f = *state;
    const char *keys[] = {"c1", "c2"};
    bool ready = true;
    assert_int_equal(dt_store_check(f->s, keys, 2, &ready), 0);
    assert_false(ready);
    assert_int_equal(dt_store_set(f->s, "c1", "x", 1), 0);
    assert_int_equal(dt_store_check(f->s, keys, 2, &ready), 0);
    assert_false(ready);
    assert_int_equal(dt_store_set(f->s, "c2", "y", 1), 0);
    assert_int_equal(dt_store_check(f->s, keys, 2, &ready), 0);
    assert_true(ready);
    assert_int_equal(dt_store_wait(f->s, keys, 2, 1), 0);
}

static void wait_times_out_with_message_and_stays_usable(void **state)
{
    struct fx *f = *state;
    const char *keys[] = {"never"};
    double t0 = dt_clock_s();
    assert_int_equal(dt_store_wait(f->s, keys, 1, 0.2), DT_ETIMEDOUT);
    double dt = dt_clock_s() - t0;
    assert_true(dt >= 0.19 && dt < 2);
    char want[128];
    snprintf(want, sizeof want, "coordinator 127.0.0.1:%d did not answer WAIT for key 'never' in 0.2s",
             dt_coord_port(f->coord));
    assert_non_null(strstr(dt_error_last(), want));
    /* Cancelled cleanly: the same connection answers the next request in step. */
    int64_t n = -1;
    assert_int_equal(dt_store_num_keys(f->s, &n), 0);
    assert_int_equal(n, 0);
}

static void wait_wakes_when_other_client_sets(void **state)
{
    struct fx *f = *state;
    struct setter_arg a = {f, "w", 0.1};
    pthread_t t;
    pthread_create(&t, NULL, late_setter, &a);
    const char *keys[] = {"w"};
    assert_int_equal(dt_store_wait(f->s, keys, 1, 5), 0);
    pthread_join(t, NULL);
}

static void compare_set_semantics(void **state)
{
    struct fx *f = *state;
    void *cur;
    size_t n;
    /* Absent key, non-empty expected: nothing set, expected answered back. */
    assert_int_equal(dt_store_compare_set(f->s, "cs", "x", 1, "y", 1, &cur, &n), 0);
    assert_string_equal(cur, "x");
    free(cur);
    bool ready;
    const char *k[] = {"cs"};
    assert_int_equal(dt_store_check(f->s, k, 1, &ready), 0);
    assert_false(ready);
    /* Absent key, empty expected: set. */
    assert_int_equal(dt_store_compare_set(f->s, "cs", "", 0, "v1", 2, &cur, &n), 0);
    assert_string_equal(cur, "v1");
    free(cur);
    /* Mismatch: unchanged, current value answered. */
    assert_int_equal(dt_store_compare_set(f->s, "cs", "zz", 2, "v2", 2, &cur, &n), 0);
    assert_string_equal(cur, "v1");
    free(cur);
    /* Match: swapped. */
    assert_int_equal(dt_store_compare_set(f->s, "cs", "v1", 2, "v2", 2, &cur, &n), 0);
    assert_string_equal(cur, "v2");
    free(cur);
}

static void delete_and_num_keys(void **state)
{
    struct fx *f = *state;
    int64_t n;
    assert_int_equal(dt_store_set(f->s, "d1", "1", 1), 0);
    assert_int_equal(dt_store_set(f->s, "d2", "2", 1), 0);
    assert_int_equal(dt_store_num_keys(f->s, &n), 0);
    assert_int_equal(n, 2);
    bool del = false;
    assert_int_equal(dt_store_delete_key(f->s, "d1", &del), 0);
    assert_true(del);
    assert_int_equal(dt_store_delete_key(f->s, "d1", &del), 0);
    assert_false(del);
    assert_int_equal(dt_store_num_keys(f->s, &n), 0);
    assert_int_equal(n, 1);
}

static void append_creates_then_extends(void **state)
{
    struct fx *f = *state;
    assert_int_equal(dt_store_append(f->s, "ap", "ab", 2), 0);
    assert_int_equal(dt_store_append(f->s, "ap", "cd", 2), 0);
    void *v;
    size_t n;
    assert_int_equal(dt_store_get(f->s, "ap", &v, &n), 0);
    assert_string_equal(v, "abcd");
    free(v);
}

static void multi_set_and_multi_get(void **state)
{
    struct fx *f = *state;
    const char *keys[] = {"m1", "m2", "m3"};
    const void *vals[] = {"one", "", "three"};
    size_t lens[] = {3, 0, 5};
    assert_int_equal(dt_store_multi_set(f->s, keys, vals, lens, 3), 0);
    void *out[3];
    size_t olen[3];
    assert_int_equal(dt_store_multi_get(f->s, keys, 3, out, olen), 0);
    assert_string_equal(out[0], "one");
    assert_int_equal(olen[1], 0);
    assert_string_equal(out[2], "three");
    for (int i = 0; i < 3; i++)
        free(out[i]);
}

/* 16+ keys take the coordinator's MULTI_GET cache: a change must show. */
static void multi_get_sees_changes_between_identical_requests(void **state)
{
    struct fx *f = *state;
    enum { N = 20 };
    char names[N][16];
    const char *keys[N];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "g%d", i);
        keys[i] = names[i];
        assert_int_equal(dt_store_set(f->s, keys[i], "old", 3), 0);
    }
    void *out[N];
    size_t lens[N];
    for (int round = 0; round < 4; round++) {
        if (round == 2)
            assert_int_equal(dt_store_set(f->s, "g7", "new!", 4), 0);
        if (round == 3)
            assert_int_equal(dt_store_append(f->s, "g7", "+", 1), 0);
        assert_int_equal(dt_store_multi_get(f->s, keys, N, out, lens), 0);
        const char *want7 = round < 2 ? "old" : round == 2 ? "new!" : "new!+";
        assert_string_equal(out[7], want7);
        assert_string_equal(out[8], "old");
        for (int i = 0; i < N; i++)
            free(out[i]);
    }
}

static void binary_values_round_trip(void **state)
{
    struct fx *f = *state;
    uint8_t big[100000];
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (uint8_t)(i * 7);
    assert_int_equal(dt_store_set(f->s, "bin", big, sizeof big), 0);
    void *v;
    size_t n;
    assert_int_equal(dt_store_get(f->s, "bin", &v, &n), 0);
    assert_int_equal(n, sizeof big);
    assert_memory_equal(v, big, sizeof big);
    free(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(token_is_64_hex_and_fresh),
        cmocka_unit_test_setup_teardown(set_then_get, setup, teardown),
        cmocka_unit_test_setup_teardown(get_blocks_until_set, setup, teardown),
        cmocka_unit_test_setup_teardown(add_counts_and_returns_new_value, setup, teardown),
        cmocka_unit_test_setup_teardown(add_on_text_closes_connection, setup, teardown),
        cmocka_unit_test_setup_teardown(check_and_wait, setup, teardown),
        cmocka_unit_test_setup_teardown(wait_times_out_with_message_and_stays_usable, setup, teardown),
        cmocka_unit_test_setup_teardown(wait_wakes_when_other_client_sets, setup, teardown),
        cmocka_unit_test_setup_teardown(compare_set_semantics, setup, teardown),
        cmocka_unit_test_setup_teardown(delete_and_num_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(append_creates_then_extends, setup, teardown),
        cmocka_unit_test_setup_teardown(multi_set_and_multi_get, setup, teardown),
        cmocka_unit_test_setup_teardown(multi_get_sees_changes_between_identical_requests, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(binary_values_round_trip, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
