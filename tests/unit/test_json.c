/* test_json.c - dtrain's JSON reader (base/json.h): jansson with dtrain's
 * rules.  Escapes decode to UTF-8 with surrogate pairs joined; what RFC 8259
 * refuses is refused with the file, line and column (lines counted from the
 * caller's first line, as a metrics.jsonl row has its own); \u0000 is
 * refused in dtrain's words, in a value or a name; duplicate names and
 * nesting beyond DT_JSON_MAX_DEPTH are refused; files are read whole within
 * a limit, and a missing one says so with its own code.
 *
 * Not for what each reader makes of a tree (test_report_load.c,
 * test_trace_merge.c, test_safetensors.c, ...) or for writing strings
 * (test_json_escape.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "base/json.h"
#include "tests/unit/run_dir_fixture.h"

/* The string text decodes to (a JSON string literal); a static copy. */
static const char *decoded(const char *text)
{
    static char out[64];
    json_t *v;
    if (dt_json_parse(text, strlen(text), "t.json", 1, &v))
        fail_msg("%s: %s", text, dt_error_last());
    assert_true(json_is_string(v));
    snprintf(out, sizeof out, "%s", json_string_value(v));
    json_decref(v);
    return out;
}

/* Refused; the message starts with the place and holds why. */
static void refused(const char *text, const char *place, const char *why)
{
    json_t *v = NULL;
    assert_int_equal(dt_json_parse(text, strlen(text), "t.json", 1, &v), DT_EINVAL);
    assert_null(v);
    if (strncmp(dt_error_last(), place, strlen(place)) != 0 || !strstr(dt_error_last(), why))
        fail_msg("%s: wanted '%s ... %s' in: %s", text, place, why, dt_error_last());
}

static void escapes_decode_to_utf8(void **state)
{
    (void)state;
    assert_string_equal(decoded("\"\\u0041\""), "A");
    assert_string_equal(decoded("\"\\u00e9\""), "\xc3\xa9");
    assert_string_equal(decoded("\"\\u2603 and more\""), "\xe2\x98\x83 and more");
    assert_string_equal(decoded("\"\\uD83D\\uDE00\""), "\xf0\x9f\x98\x80");
    assert_string_equal(decoded("\"\\udbff\\udfff\""), "\xf4\x8f\xbf\xbf");
    assert_string_equal(decoded("\"\\u0001\\\"\\\\\\/\\b\\f\\n\\r\\t\""), "\x01\"\\/\b\f\n\r\t");
}

/* dtrain's strings are C strings: a NUL would end a name or value early
 * ("loss\u0000x" read as "loss"), so it is refused where it stands. */
static void nul_is_refused_in_dtrains_words(void **state)
{
    (void)state;
    const char *why = "\\u0000 (a NUL character) is not allowed: dtrain's strings are C strings";
    refused("{\"a\": \"x\\u0000\"}", "t.json:1:15: ", why);
    refused("{\"step\": 2, \"loss\\u0000x\": 7}", "t.json:1:25: ", why);
}

/* The escapes jansson refuses, and RFC 8259's other refusals. */
static void what_rfc_8259_refuses_is_refused_with_its_place(void **state)
{
    (void)state;
    refused("\"\\ud800\"", "t.json:1:8: ", "invalid Unicode '\\uD800'"); /* high surrogate alone */
    refused("\"\\ud800\\u0041\"", "t.json:1:14: ", "invalid Unicode");   /* ... or before no low one */
    refused("\"\\udc00\"", "t.json:1:8: ", "invalid Unicode '\\uDC00'"); /* low surrogate alone */
    refused("\"\\u12g4\"", "t.json:1:6: ", "invalid escape");            /* 4 hex digits */
    refused("\"\\u123", "t.json:1:", "invalid escape");                  /* ... cut by the end */
    refused("\"\\q\"", "t.json:1:3: ", "invalid escape");
    refused("\"a\tb\"", "t.json:1:2: ", "control character 0x9");
    refused("{\"step\": 1, \"loss\": NaN}", "t.json:1:23: ", "invalid token near 'NaN'");
    refused("Infinity", "t.json:1:", "invalid token");
    refused("[1,]", "t.json:1:4: ", "unexpected token near ']'");
    refused("{\"a\": 1,}", "t.json:1:9: ", "string or '}' expected");
    refused("[1] // c", "t.json:1:5: ", "end of file expected");
    refused("{} x", "t.json:1:4: ", "end of file expected near 'x'");
    refused("01", "t.json:1:", "invalid token");
    refused("\"\xff\"", "t.json:1:", "unable to decode byte 0xff");
    refused("\"\xed\xa0\x80\"", "t.json:1:", "unable to decode byte"); /* a surrogate in UTF-8 */
    refused("{\"step\": 2, \"lo", "t.json:1:15: ", "premature end of input");
    refused("", "t.json:1:1: ", "unexpected token near end of file");
}

/* Refused: one name twice, a number no double or long long holds. */
static void duplicates_and_overflows_are_refused(void **state)
{
    (void)state;
    refused("{\"a\": 1, \"b\": {\"a\": 2, \"a\": 3}}", "t.json:1:", "duplicate object key near '\"a\"'");
    refused("[1e999]", "t.json:1:", "real number overflow");
    refused("[99999999999999999999]", "t.json:1:", "too big integer");
    json_t *v;
    const char *big = "[9223372036854775807, 1e308, 5e-324]";
    assert_int_equal(dt_json_parse(big, strlen(big), "t.json", 1, &v), 0);
    assert_int_equal(json_integer_value(json_array_get(v, 0)), INT64_MAX);
    assert_true(json_real_value(json_array_get(v, 2)) > 0);
    json_decref(v);
}

/* A metrics.jsonl row passes its line: the message counts from there. */
static void lines_count_from_the_first_line_given(void **state)
{
    (void)state;
    json_t *v;
    assert_int_equal(dt_json_parse("{\n\"a\":\n x}", 10, "m.jsonl", 7, &v), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "m.jsonl:9:2: "));
    assert_int_equal(dt_json_parse("\r\n\t [1, 2] \n", 12, "m.jsonl", 7, &v), 0);
    assert_int_equal(json_array_size(v), 2);
    json_decref(v);
}

/* 64 levels of containers parse, 65 do not; jansson parsed it whole, so the
 * place is the text's first line. */
static void nesting_deeper_than_64_is_refused(void **state)
{
    (void)state;
    char buf[1024]; /* objects and arrays mixed: {"k":[{"k":[ ... 1 ]}]} */
    for (int levels = 64; levels <= 65; levels++) {
        size_t n = 0;
        for (int i = 0; i < levels; i++)
            n += (size_t)sprintf(buf + n, i % 2 ? "[" : "{\"k\":");
        n += (size_t)sprintf(buf + n, "1");
        for (int i = levels - 1; i >= 0; i--)
            buf[n++] = i % 2 ? ']' : '}';
        buf[n] = 0;
        json_t *v = NULL;
        json_error_t err;
        int rc = dt_json_parse(buf, n, "deep.jsonl", 3, &v);
        json_decref(v);
        if (levels == 64) {
            assert_int_equal(rc, 0);
            continue;
        }
        assert_int_equal(rc, DT_EINVAL);
        assert_string_equal(dt_error_last(), "deep.jsonl:3: nested deeper than 64 levels");
        assert_null(dt_json_loadb(buf, n, &err));
        assert_int_equal(err.line, -1);
        assert_int_equal(err.position, -1);
    }
}

static void files_are_read_whole_within_a_limit(void **state)
{
    (void)state;
    json_t *v;
    char path[600];
    run_dir_write("ok.json", "{\"n\": 3}\n");
    snprintf(path, sizeof path, "%s/ok.json", run_dir);
    assert_int_equal(dt_json_load_file(path, 9, &v), 0);
    assert_int_equal(json_integer_value(json_object_get(v, "n")), 3);
    json_decref(v);
    assert_int_equal(dt_json_load_file(path, 8, &v), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "is 9 bytes, more than the 8 this reads"));
    run_dir_write("bad.json", "{\"n\":\n 3,}\n");
    snprintf(path, sizeof path, "%s/bad.json", run_dir);
    assert_int_equal(dt_json_load_file(path, 100, &v), DT_EINVAL);
    assert_null(v);
    assert_non_null(strstr(dt_error_last(), "/bad.json:2:4: string or '}' expected"));
    snprintf(path, sizeof path, "%s/none.json", run_dir);
    assert_int_equal(dt_json_load_file(path, 100, &v), DT_ENOTFOUND);
    assert_non_null(strstr(dt_error_last(), path));
    assert_int_equal(dt_json_load_file(run_dir, 100, &v), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "not a regular file (a directory)"));
    char *text;
    size_t len;
    snprintf(path, sizeof path, "%s/ok.json", run_dir);
    assert_int_equal(dt_json_read_file(path, 100, &text, &len), 0);
    assert_int_equal(len, 9);
    assert_string_equal(text, "{\"n\": 3}\n");
    free(text);
}

/* Run files (issue 45): a FIFO named launch.json or summary.json hung `dtrain
 * list` and `status` in open(2); a device was opened; a link was followed
 * out of the run directory.  Now none is opened: the name is checked first
 * (both readers), and the run reader refuses a link at it. */
static void only_regular_files_are_opened(void **state)
{
    (void)state;
    char fifo[600], link[600], ok[600];
    json_t *v;
    char *text;
    size_t len;
    run_dir_write("ok.json", "{\"n\": 3}\n");
    snprintf(ok, sizeof ok, "%s/ok.json", run_dir);
    snprintf(fifo, sizeof fifo, "%s/launch.json", run_dir);
    snprintf(link, sizeof link, "%s/summary.json", run_dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(symlink(ok, link), 0);
    alarm(10); /* a reader blocked in open(2) fails the test instead of hanging it */
    assert_int_equal(dt_json_load_file(fifo, 100, &v), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "/launch.json: not a regular file (a FIFO)"));
    assert_int_equal(dt_json_load_run_file(fifo, 100, &v), DT_EINVAL);
    assert_int_equal(dt_json_read_run_file(fifo, 100, &text, &len), DT_EINVAL);
    assert_int_equal(dt_json_load_file("/dev/zero", 100, &v), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "/dev/zero: not a regular file (a character device)"));
    alarm(0);
    assert_int_equal(dt_json_load_file(link, 100, &v), 0); /* a path the user names: followed */
    json_decref(v);
    assert_int_equal(dt_json_load_run_file(link, 100, &v), DT_EINVAL);
    assert_null(v);
    assert_non_null(strstr(dt_error_last(), "/summary.json: a symbolic link, which is not followed here"));
    assert_int_equal(dt_json_read_run_file(link, 100, &text, &len), DT_EINVAL);
    assert_int_equal(dt_json_load_run_file(ok, 100, &v), 0);
    assert_int_equal(json_integer_value(json_object_get(v, "n")), 3);
    json_decref(v);
    snprintf(ok, sizeof ok, "%s/none.json", run_dir);
    assert_int_equal(dt_json_load_run_file(ok, 100, &v), DT_ENOTFOUND);
}

static void get_num_takes_integers_and_reals_only(void **state)
{
    (void)state;
    const char *text = "{\"i\": 3, \"r\": 0.5, \"n\": null, \"s\": \"4\", \"a\": [1]}";
    json_t *v;
    double x = -1;
    assert_int_equal(dt_json_parse(text, strlen(text), "t.json", 1, &v), 0);
    assert_true(dt_json_get_num(v, "i", &x) && x == 3);
    assert_true(dt_json_get_num(v, "r", &x) && x == 0.5);
    assert_false(dt_json_get_num(v, "n", &x));
    assert_false(dt_json_get_num(v, "s", &x));
    assert_false(dt_json_get_num(v, "a", &x));
    assert_false(dt_json_get_num(v, "absent", &x));
    assert_false(dt_json_get_num(json_object_get(v, "a"), "i", &x)); /* not an object */
    assert_false(dt_json_get_num(NULL, "i", &x));
    assert_true(x == 0.5); /* untouched by the misses */
    json_decref(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(escapes_decode_to_utf8),
        cmocka_unit_test(nul_is_refused_in_dtrains_words),
        cmocka_unit_test(what_rfc_8259_refuses_is_refused_with_its_place),
        cmocka_unit_test(duplicates_and_overflows_are_refused),
        cmocka_unit_test(lines_count_from_the_first_line_given),
        cmocka_unit_test(nesting_deeper_than_64_is_refused),
        cmocka_unit_test_setup_teardown(files_are_read_whole_within_a_limit, run_dir_setup, run_dir_teardown),
        cmocka_unit_test_setup_teardown(only_regular_files_are_opened, run_dir_setup, run_dir_teardown),
        cmocka_unit_test(get_num_takes_integers_and_reals_only),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
