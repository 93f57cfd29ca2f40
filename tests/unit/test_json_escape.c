/* test_json_escape.c - the \uXXXX decoder both JSON readers share: UTF-8 of
 * 1 to 4 bytes, surrogate pairs joined, and the escapes it refuses (\u0000,
 * lone surrogates, fewer than 4 hex digits, digits past the end of the
 * text), each with the sentence the readers put in their messages.
 *
 * Not for where the readers place the message (test_safetensors.c,
 * test_report_load.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "comm/json_escape.h"

/* Decodes the escape in text (which starts at its 'u'); returns the UTF-8. */
static const char *decoded(const char *text, size_t want_used)
{
    static char out[16];
    char *o = out;
    const char *why = "unset";
    size_t used = dt_json_decode_u(text, text + strlen(text), &o, &why);
    if (used != want_used)
        fail_msg("%s: used %zu, wanted %zu (%s)", text, used, want_used, why);
    assert_true((size_t)(o - out) <= used + 1); /* never longer than "\\" + the escape */
    *o = 0;
    return out;
}

static const char *refused(const char *text, size_t len)
{
    char out[16], *o = out;
    const char *why = NULL;
    assert_int_equal(dt_json_decode_u(text, text + len, &o, &why), 0);
    assert_ptr_equal(o, out); /* nothing written */
    assert_non_null(why);
    return why;
}

static void code_points_decode_to_utf8(void **state)
{
    (void)state;
    assert_string_equal(decoded("u0041", 5), "A");
    assert_string_equal(decoded("u00e9", 5), "\xc3\xa9");
    assert_string_equal(decoded("u2603 and more", 5), "\xe2\x98\x83");
    assert_string_equal(decoded("uD83D\\uDE00", 11), "\xf0\x9f\x98\x80");
    assert_string_equal(decoded("udbff\\udfff", 11), "\xf4\x8f\xbf\xbf");
    assert_string_equal(decoded("u0001", 5), "\x01");
}

static void nul_and_broken_escapes_are_refused(void **state)
{
    (void)state;
    assert_non_null(strstr(refused("u0000", 5), "\\u0000 (a NUL character) is not allowed"));
    assert_non_null(strstr(refused("u0000", 5), "C strings"));
    assert_non_null(strstr(refused("u12g4", 5), "4 hex digits"));
    assert_non_null(strstr(refused("u+123", 5), "4 hex digits"));
    assert_non_null(strstr(refused("u1234", 4), "4 hex digits")); /* the text ends after "u123" */
    assert_non_null(strstr(refused("ud800", 5), "high surrogate must be followed by a low one"));
    assert_non_null(strstr(refused("ud800\\u0041", 11), "high surrogate"));
    assert_non_null(strstr(refused("ud800\\udc00", 10), "high surrogate")); /* the low one is cut */
    assert_non_null(strstr(refused("udc00", 5), "lone \\u low surrogate"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(code_points_decode_to_utf8),
        cmocka_unit_test(nul_and_broken_escapes_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
