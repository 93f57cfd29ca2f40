/* test_trace_merge.c - dt_trace_merge (`dtrain trace merge`) on run
 * directories no run writes: what tests/fuzz/fuzz_trace_merge.c found, kept
 * as cases.  A rank that no int holds, in otherData or in a file name, is
 * refused or ignored rather than overflowing; a launch row that a double
 * cannot place is left out rather than written as "inf", which is not JSON;
 * the launch row names only the ranks that ran.
 *
 * Not for merging real traces (tests/integration/test_obs_trace.sh).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/json.h"
#include "launcher/report/trace_merge.h"
#include "tests/unit/run_dir_fixture.h"

static char out[128];

static int setup(void **state)
{
    if (run_dir_setup(state))
        return -1;
    snprintf(out, sizeof out, "%s/trace_merged.json", run_dir);
    return 0;
}

static int merge(void)
{
    char *inputs[1] = {run_dir};
    int merged;
    FILE *says = fopen("/dev/null", "w");
    assert_non_null(says);
    int rc = dt_trace_merge(inputs, 1, run_dir, out, says, &merged);
    fclose(says);
    return rc;
}

/* The merged file parses; returns how many of its events are named name. */
static int merged_events(const char *name)
{
    json_t *doc, *e;
    size_t i;
    int n = 0;
    assert_int_equal(dt_json_load_file(out, 1 << 20, &doc), 0);
    json_t *ev = json_object_get(doc, "traceEvents");
    assert_true(json_is_array(ev));
    json_array_foreach (ev, i, e) {
        const char *s = json_string_value(json_object_get(e, "name"));
        n += s && strcmp(s, name) == 0;
    }
    json_decref(doc);
    return n;
}

static void a_rank_no_run_has_is_an_error_naming_the_place(void **state)
{
    (void)state;
    run_dir_write("trace_rank0.json", "{\"otherData\": {\"rank\": 5.88889e+77},\n \"traceEvents\": []}");
    assert_int_equal(merge(), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "trace_rank0.json: otherData.rank is 5.88889e+77, not a rank"));
    /* was INT_MAX, and the launch row's pid after it overflowed */
    run_dir_write("trace_rank0.json", "{\"otherData\": {\"rank\": 2147483647}, \"traceEvents\": []}");
    assert_int_equal(merge(), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "otherData.rank is 2147483647"));
    run_dir_write("trace_rank0.json", "{\"otherData\": {\"rank\": 3}, \"traceEvents\": []}");
    assert_int_equal(merge(), 0);
}

/* sscanf's %d on these is undefined; they are not trace_rank<N> files. */
static void a_file_name_beyond_any_rank_is_not_a_trace(void **state)
{
    (void)state;
    run_dir_write("trace_rank99999999999.json", "{\"traceEvents\": []}");
    run_dir_write("trace_rank2147483647.json", "{\"traceEvents\": []}");
    assert_int_equal(merge(), DT_ENOTFOUND);
    assert_non_null(strstr(dt_error_last(), "holds no trace_rank<N>.json"));
    assert_non_null(strstr(dt_error_last(), run_dir));
}

static void a_launch_row_beyond_a_double_is_left_out(void **state)
{
    (void)state;
    run_dir_write("trace_rank0.json", "{\"traceEvents\": [{\"ph\": \"X\", \"name\": \"step\", \"ts\": 1, \"dur\": 2}]}");
    run_dir_write("summary.json", "{\"started_unix\": 1e308, \"attempts\": [{\"attempt\": 0, \"start_s\": 0, "
                               "\"end_s\": 1, \"ranks\": []}]}");
    assert_int_equal(merge(), 0);
    assert_int_equal(merged_events("attempt"), 0);
    run_dir_write("summary.json", "{\"started_unix\": 1, \"attempts\": [{\"attempt\": 1e10, \"start_s\": 0, "
                               "\"end_s\": 1, \"ranks\": [{\"rank\": 0, \"spawn_s\": 0, \"exit_s\": 1e308}, "
                               "{\"rank\": 1, \"spawn_s\": 0.5, \"exit_s\": 0.75}]}]}");
    assert_int_equal(merge(), 0);
    assert_int_equal(merged_events("attempt"), 1);       /* without its number, which no int holds */
    assert_int_equal(merged_events("spawn to exit"), 1); /* rank 1's; rank 0's ends beyond a double */
}

/* One row name per rank that ran (two attempts of rank 0 name it once), none
 * for the ranks in between: a bogus rank of 999999 wrote a million names. */
static void only_the_ranks_that_ran_get_a_launch_row(void **state)
{
    (void)state;
    run_dir_write("trace_rank0.json", "{\"traceEvents\": [{\"ph\": \"X\", \"name\": \"step\", \"ts\": 1, \"dur\": 2}]}");
    run_dir_write("summary.json", "{\"started_unix\": 1, \"attempts\": ["
                               "{\"attempt\": 0, \"start_s\": 0, \"end_s\": 1, \"ranks\": ["
                               "{\"rank\": 0, \"spawn_s\": 0, \"exit_s\": 1}, {\"rank\": 999999, \"spawn_s\": 0, \"exit_s\": 1}]},"
                               "{\"attempt\": 1, \"start_s\": 1, \"end_s\": 2, \"ranks\": ["
                               "{\"rank\": 0, \"spawn_s\": 1, \"exit_s\": 2}]}]}");
    assert_int_equal(merge(), 0);
    assert_int_equal(merged_events("thread_name"), 3); /* attempts, rank 0, rank 999999 */
    assert_int_equal(merged_events("spawn to exit"), 3);
}

/* Where jansson gives no line and column (the tree has none), a bad event
 * is named by its index. */
static void an_event_without_ph_is_named_by_its_index(void **state)
{
    (void)state;
    run_dir_write("trace_rank0.json", "{\"traceEvents\": [{\"ph\": \"X\"}, {\"name\": \"x\"}]}");
    assert_int_equal(merge(), DT_EINVAL);
    assert_non_null(
        strstr(dt_error_last(), "trace_rank0.json: traceEvents[1]: a trace event must be an object"));
    run_dir_write("trace_rank0.json", "[{\"ph\": \"X\"}, 5]");
    assert_int_equal(merge(), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "trace_rank0.json: traceEvents[1]: "));
}

/* An event comes out as it went in, but for its pid: every member, integers
 * exactly, a real as the double nearest its text. */
static void events_are_written_back_as_read(void **state)
{
    (void)state;
    run_dir_write("trace_rank2.json", "{\"traceEvents\": [{\"ph\": \"X\", \"pid\": 7, \"name\": \"s\", "
                                      "\"ts\": 1700000000123456.789, \"dur\": 9007199254740993, "
                                      "\"args\": {\"k\": [0.1, \"caf\\u00e9\", null, true, {}]}}]}");
    assert_int_equal(merge(), 0);
    json_t *doc, *e;
    assert_int_equal(dt_json_load_file(out, 1 << 20, &doc), 0);
    size_t i;
    int found = 0;
    json_t *want = json_loads("[0.1, \"caf\u00e9\", null, true, {}]", 0, NULL);
    json_array_foreach (json_object_get(doc, "traceEvents"), i, e) {
        if (!json_is_string(json_object_get(e, "name")) ||
            strcmp(json_string_value(json_object_get(e, "name")), "s"))
            continue;
        found++;
        assert_int_equal(json_integer_value(json_object_get(e, "pid")), 2);
        assert_true(json_real_value(json_object_get(e, "ts")) == 1700000000123456.789);
        assert_int_equal(json_integer_value(json_object_get(e, "dur")), 9007199254740993LL);
        assert_true(json_equal(json_object_get(json_object_get(e, "args"), "k"), want));
    }
    assert_int_equal(found, 1);
    json_decref(want);
    json_decref(doc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(a_rank_no_run_has_is_an_error_naming_the_place, setup,
                                        run_dir_teardown),
        cmocka_unit_test_setup_teardown(a_file_name_beyond_any_rank_is_not_a_trace, setup, run_dir_teardown),
        cmocka_unit_test_setup_teardown(a_launch_row_beyond_a_double_is_left_out, setup, run_dir_teardown),
        cmocka_unit_test_setup_teardown(only_the_ranks_that_ran_get_a_launch_row, setup, run_dir_teardown),
        cmocka_unit_test_setup_teardown(an_event_without_ph_is_named_by_its_index, setup, run_dir_teardown),
        cmocka_unit_test_setup_teardown(events_are_written_back_as_read, setup, run_dir_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
