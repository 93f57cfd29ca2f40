/* test_trace.c - the per-rank Chrome trace: the steps window, the ring, the
 * launch track, concurrent recording, and the JSON it writes (read back with
 * dtrain's JSON reader, base/json.h; the times' digits from the text, as a
 * double cannot hold 1.7e15 µs to the nanosecond). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/json.h"
#include "worker/trace.h"
#include "tests/unit/run_dir_fixture.h"
#include "base/clock.h"

static void steps_parse_like_the_spec(void **state)
{
    (void)state;
    struct dt_trace_spec w;
    assert_int_equal(dt_trace_parse_steps("10-20", &w), 0);
    assert_int_equal(w.first_step, 10);
    assert_int_equal(w.last_step, 20);
    assert_int_equal(dt_trace_parse_steps("7", &w), 0);
    assert_int_equal(w.first_step, 7);
    assert_int_equal(w.last_step, 7);
    const char *bad[] = {"", "a", "20-10", "-3", "1-", "1-2x", "3 ", "1--2", "99999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(dt_trace_parse_steps(bad[i], &w), DT_EINVAL);
        assert_non_null(strstr(dt_error_last(), "expected a range"));
    }
    struct dt_trace *t;
    struct dt_trace_spec empty = {0, -1};
    assert_int_equal(dt_trace_create(&empty, 0, 16, &t), DT_EINVAL);
}

static void null_trace_does_nothing(void **state)
{
    (void)state;
    dt_trace_set_step(NULL, 3);
    dt_trace_span(NULL, DT_TRACE_COMPUTE, "x", 1, 2);
    assert_false(dt_trace_active(NULL));
    assert_int_equal(dt_trace_count(NULL), 0);
    assert_int_equal(dt_trace_write(NULL, "/nonexistent/x"), 0);
}

static void window_keeps_only_its_steps(void **state)
{
    (void)state;
    struct dt_trace_spec w = {2, 3};
    struct dt_trace *t;
    assert_int_equal(dt_trace_create(&w, 0, 64, &t), 0);
    dt_trace_span(t, DT_TRACE_LAUNCH, "connect", 0, 10);
    for (int step = 0; step < 6; step++) {
        dt_trace_set_step(t, step);
        assert_int_equal(dt_trace_active(t), step >= 2 && step <= 3);
        dt_trace_span(t, DT_TRACE_COMPUTE, "forward", step * 100, step * 100 + 50);
    }
    assert_int_equal(dt_trace_count(t), 3); /* the launch span and steps 2, 3 */
    assert_int_equal(dt_trace_dropped(t), 0);
    dt_trace_destroy(t);
}

static void ring_keeps_the_newest(void **state)
{
    (void)state;
    struct dt_trace_spec w = {0, 100};
    struct dt_trace *t;
    assert_int_equal(dt_trace_create(&w, 0, 8, &t), 0);
    dt_trace_set_step(t, 0);
    for (int i = 0; i < 20; i++)
        dt_trace_span_arg(t, DT_TRACE_COMM, "allreduce", i * 10, i * 10 + 5, "bucket", i);
    assert_int_equal(dt_trace_count(t), 8);
    assert_int_equal(dt_trace_dropped(t), 12);
    char path[128];
    snprintf(path, sizeof path, "%s/ring.json", run_dir);
    assert_int_equal(dt_trace_write(t, path), 0);
    json_t *doc, *e;
    size_t i;
    assert_int_equal(dt_json_load_file(path, 1 << 20, &doc), 0);
    double d;
    assert_true(dt_json_get_num(json_object_get(doc, "otherData"), "dropped_spans", &d));
    assert_true(d == 12);
    int buckets = 0;
    json_array_foreach (json_object_get(doc, "traceEvents"), i, e)
        if (strcmp(json_string_value(json_object_get(e, "ph")), "X") == 0) {
            assert_true(dt_json_get_num(json_object_get(e, "args"), "bucket", &d));
            assert_true(d == 12 + buckets); /* oldest kept first */
            buckets++;
        }
    assert_int_equal(buckets, 8);
    json_decref(doc);
    dt_trace_destroy(t);
}

/* The number after `"key": ` at or after from in the writer's text, as
 * written: a double rounds the digits this test is about. */
static const char *number_text(const char *from, const char *key, char out[32])
{
    char pat[32];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *at = strstr(from, pat);
    assert_non_null(at);
    at += strlen(pat);
    size_t n = strspn(at, "0123456789.-");
    assert_true(n > 0 && n < 32);
    memcpy(out, at, n);
    out[n] = 0;
    return out;
}

/* Finds the "X" event named `name` (once in the file); returns its tid and
 * fills the text of its ts and dur. */
static int find_span(json_t *doc, const char *src, const char *name, char ts[32], char dur[32], int *pid)
{
    json_t *e;
    size_t i;
    json_array_foreach (json_object_get(doc, "traceEvents"), i, e) {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        const char *n = json_string_value(json_object_get(e, "name"));
        if (strcmp(ph, "X") || strcmp(n, name))
            continue;
        double tid, p, ts_us, dur_us;
        assert_true(dt_json_get_num(e, "tid", &tid) && dt_json_get_num(e, "pid", &p));
        assert_true(dt_json_get_num(e, "ts", &ts_us) && dt_json_get_num(e, "dur", &dur_us));
        char at[80];
        snprintf(at, sizeof at, "\"name\": \"%s\", \"ts\": ", name);
        const char *text = strstr(src, at);
        assert_non_null(text);
        assert_true(strtod(number_text(text, "ts", ts), NULL) == ts_us); /* the text is this event's */
        assert_true(strtod(number_text(text, "dur", dur), NULL) == dur_us);
        *pid = (int)p;
        return (int)tid;
    }
    fail_msg("no span %s", name);
    return -1;
}

static void file_has_tracks_names_and_exact_times(void **state)
{
    (void)state;
    struct dt_trace_spec w = {5, 5};
    struct dt_trace *t;
    assert_int_equal(dt_trace_create(&w, 3, 0, &t), 0);
    int64_t base = dt_clock_ns();
    dt_trace_set_step(t, 5);
    /* recorded children first, as a loop does (a step's span ends last) */
    dt_trace_span(t, DT_TRACE_COMPUTE, "forward", base + 1000, base + 2500);
    dt_trace_span(t, DT_TRACE_COMPUTE, "backward", base + 2500, base + 9000);
    dt_trace_span_arg(t, DT_TRACE_COMM, "allreduce", base + 4000, base + 11000, "bucket", 0);
    dt_trace_span(t, DT_TRACE_DATA, "data wait", base, base + 1000);
    dt_trace_span(t, DT_TRACE_COMPUTE, "step", base, base + 12000);
    dt_trace_span(t, DT_TRACE_LAUNCH, "communicator init", base - 5000, base - 1);
    assert_int_equal(dt_trace_write_dir(t, run_dir), 0);
    char path[128];
    snprintf(path, sizeof path, "%s/trace_rank3.json", run_dir);
    char *src;
    size_t len;
    json_t *doc;
    assert_int_equal(dt_json_read_file(path, 1 << 20, &src, &len), 0);
    assert_int_equal(dt_json_parse(src, len, path, 1, &doc), 0);
    char ts[32], dur[32], ts_step[32], dur_step[32];
    int pid;
    assert_int_equal(find_span(doc, src, "forward", ts, dur, &pid), 1 + DT_TRACE_COMPUTE);
    assert_string_equal(dur, "1.500");
    assert_int_equal(pid, 3);
    assert_int_equal(find_span(doc, src, "step", ts_step, dur_step, &pid), 1 + DT_TRACE_COMPUTE);
    assert_string_equal(dur_step, "12.000");
    /* forward starts 1 µs after the step, to the nanosecond */
    assert_int_equal(strtoll(ts, NULL, 10) * 1000 + atoi(strchr(ts, '.') + 1),
                     strtoll(ts_step, NULL, 10) * 1000 + atoi(strchr(ts_step, '.') + 1) + 1000);
    assert_int_equal(find_span(doc, src, "allreduce", ts, dur, &pid), 1 + DT_TRACE_COMM);
    assert_int_equal(find_span(doc, src, "data wait", ts, dur, &pid), 1 + DT_TRACE_DATA);
    assert_int_equal(find_span(doc, src, "communicator init", ts, dur, &pid), 1 + DT_TRACE_LAUNCH);
    /* the enclosing step is written before the spans it encloses */
    assert_true(strstr(src, "\"step\", \"ts\"") < strstr(src, "\"forward\""));
    assert_non_null(strstr(src, "\"name\": \"process_name\", \"args\": {\"name\": \"rank 3\"}"));
    assert_non_null(strstr(src, "\"args\": {\"name\": \"communication\"}"));
    json_decref(doc);
    free(src);
    assert_int_equal(dt_trace_write(t, "/nonexistent/dir/trace.json"), DT_EIO);
    assert_non_null(strstr(dt_error_last(), "/nonexistent/dir/trace.json"));
    dt_trace_destroy(t);
}

struct recorder {
    struct dt_trace *t;
    int id;
};

static void *record_many(void *arg)
{
    struct recorder *r = arg;
    for (int i = 0; i < 1000; i++)
        dt_trace_span_arg(r->t, DT_TRACE_COMM, "allreduce", i, i + 1, "thread", r->id);
    return NULL;
}

static void threads_record_without_losing_spans(void **state)
{
    (void)state;
    struct dt_trace_spec w = {0, 0};
    struct dt_trace *t;
    assert_int_equal(dt_trace_create(&w, 0, 8192, &t), 0);
    dt_trace_set_step(t, 0);
    pthread_t th[4];
    struct recorder r[4];
    for (int i = 0; i < 4; i++) {
        r[i] = (struct recorder){t, i};
        assert_int_equal(pthread_create(&th[i], NULL, record_many, &r[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    assert_int_equal(dt_trace_count(t), 4000);
    assert_int_equal(dt_trace_dropped(t), 0);
    dt_trace_destroy(t);
}

/* Recording must be cheap enough to leave on for every span of a step:
 * measured here, and held to a bound loose enough for a loaded 2-core box. */
static void recording_is_cheap(void **state)
{
    (void)state;
    struct dt_trace_spec w = {0, 1000000};
    struct dt_trace *t;
    assert_int_equal(dt_trace_create(&w, 0, 4096, &t), 0);
    dt_trace_set_step(t, 1);
    int64_t t0 = dt_clock_ns();
    for (int i = 0; i < 1000000; i++)
        dt_trace_span(t, DT_TRACE_COMPUTE, "forward", i, i + 1);
    double ns = (double)(dt_clock_ns() - t0) / 1e6;
    printf("trace: %.1f ns per recorded span (ring of 4096, wrapping)\n", ns);
    assert_true(ns < 500);
    dt_trace_destroy(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(steps_parse_like_the_spec),
        cmocka_unit_test(null_trace_does_nothing),
        cmocka_unit_test(window_keeps_only_its_steps),
        cmocka_unit_test(ring_keeps_the_newest),
        cmocka_unit_test(file_has_tracks_names_and_exact_times),
        cmocka_unit_test(threads_record_without_losing_spans),
        cmocka_unit_test(recording_is_cheap),
    };
    return cmocka_run_group_tests_name("trace", tests, run_dir_setup, run_dir_teardown);
}
