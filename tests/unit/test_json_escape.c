/* test_json_escape.c - JSON string literals as dtrain writes them.
 *
 * The writer (dt_json_put_str, dt_json_quote): '"' and '\\', every control
 * byte 0x01-0x1F in both styles, DEL and UTF-8 copied as they are, bytes that
 * are no UTF-8 written as U+FFFD, the two forms writing the same bytes, a
 * buffer one byte too small, and the output read back by the project's reader
 * (base/json.h); dt_json_utf8 and dt_json_str, which make any bytes a string
 * jansson takes, replacing what the writers replace.  0x00 cannot be asked for: the writer takes C strings,
 * which end there.
 *
 * Not for the reader's own rules (test_json.c) or for what each writer's
 * file looks like (test_trace.c, test_agent_run.c, ...).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/json.h"
#include "base/json_escape.h"

/* --- writer ----------------------------------------------------------- */

/* What dt_json_put_str writes for s (a static buffer, valid until the next call). */
static const char *put(const char *s, enum dt_json_style style)
{
    static char out[1024];
    FILE *f = fmemopen(out, sizeof out, "w");
    assert_non_null(f);
    dt_json_put_str(f, s, style);
    assert_int_equal(fclose(f), 0);
    return out;
}

/* What dt_json_quote writes for s into a roomy buffer; checks *len. */
static const char *quote(const char *s, enum dt_json_style style)
{
    static char out[1024];
    size_t len = 0;
    assert_int_equal(dt_json_quote(out, sizeof out, s, style, &len), 0);
    assert_int_equal(len, strlen(out));
    return out;
}

static void quote_and_backslash_get_a_backslash(void **state)
{
    (void)state;
    assert_string_equal(put("", DT_JSON_U), "\"\"");
    assert_string_equal(put("a\"b\\c", DT_JSON_U), "\"a\\\"b\\\\c\"");
    assert_string_equal(put("\\\"", DT_JSON_SHORT_WS), "\"\\\\\\\"\"");
    assert_string_equal(quote("a\"b\\c", DT_JSON_U), "\"a\\\"b\\\\c\"");
    assert_string_equal(put("/", DT_JSON_U), "\"/\""); /* RFC 8259 allows \/ but does not need it */
}

/* RFC 8259 section 7: every byte below 0x20 must be escaped. */
static void every_control_byte_is_escaped(void **state)
{
    (void)state;
    for (int c = 1; c < 0x20; c++) {
        char in[] = {'x', (char)c, 'y', 0}, want_u[16], want_ws[16];
        snprintf(want_u, sizeof want_u, "\"x\\u%04xy\"", (unsigned)c);
        const char *named = c == '\n' ? "n" : c == '\r' ? "r" : c == '\t' ? "t" : NULL;
        if (named)
            snprintf(want_ws, sizeof want_ws, "\"x\\%sy\"", named);
        else
            strcpy(want_ws, want_u);
        assert_string_equal(put(in, DT_JSON_U), want_u);
        assert_string_equal(quote(in, DT_JSON_U), want_u);
        assert_string_equal(put(in, DT_JSON_SHORT_WS), want_ws);
        assert_string_equal(quote(in, DT_JSON_SHORT_WS), want_ws);
    }
    assert_string_equal(put("\x1f\x01", DT_JSON_U), "\"\\u001f\\u0001\""); /* lowercase hex */
}

static void del_and_utf8_are_copied(void **state)
{
    (void)state;
    const char *s = "\x7f caf\xc3\xa9 \xe2\x98\x83 \xf0\x9f\x98\x80 \xc2\x85";
    char want[64];
    snprintf(want, sizeof want, "\"%s\"", s);
    assert_string_equal(put(s, DT_JSON_U), want);
    assert_string_equal(put(s, DT_JSON_SHORT_WS), want);
    assert_string_equal(quote(s, DT_JSON_U), want);
}

static void a_small_buffer_is_refused_whole(void **state)
{
    (void)state;
    const char *s = "a\nb\"";
    const char *want = "\"a\\u000ab\\\"\""; /* 12 bytes, 13 with the NUL */
    char buf[32];
    size_t len = 99;
    assert_int_equal(dt_json_quote(buf, 13, s, DT_JSON_U, &len), 0);
    assert_string_equal(buf, want);
    assert_int_equal(len, 12);

    memset(buf, 'z', sizeof buf);
    len = 99;
    assert_int_equal(dt_json_quote(buf, 12, s, DT_JSON_U, &len), DT_ENOMEM);
    assert_string_equal(buf, ""); /* no half escape, no missing quote */
    assert_int_equal(buf[1], 'z');
    assert_int_equal(len, 99);
    assert_non_null(strstr(dt_error_last(), "needs 13 bytes, the buffer has 12"));

    buf[0] = 'z';
    assert_int_equal(dt_json_quote(buf, 0, "", DT_JSON_U, &len), DT_ENOMEM);
    assert_int_equal(buf[0], 'z'); /* size 0: nothing written at all */
    assert_int_equal(dt_json_quote(buf, 2, "", DT_JSON_U, &len), DT_ENOMEM);
    assert_int_equal(dt_json_quote(buf, 3, "", DT_JSON_U, &len), 0);
    assert_string_equal(buf, "\"\"");
}

/* The writer's worst case, which safetensors sizes its header by: 6 bytes a byte, plus 3. */
static void six_bytes_a_byte_always_fit(void **state)
{
    (void)state;
    char in[33], buf[6 * 32 + 3];
    memset(in, 0x01, 32);
    in[32] = 0;
    size_t len;
    assert_int_equal(dt_json_quote(buf, sizeof buf, in, DT_JSON_U, &len), 0);
    assert_int_equal(len, sizeof buf - 1);
}

/* RFC 8259 section 8.1: JSON is UTF-8.  Each byte that starts no
 * well-formed character (a stray continuation, a lead byte cut short, an
 * overlong form, a surrogate, past U+10FFFF, 0xFE/0xFF) becomes U+FFFD, and
 * what follows it is read again from the next byte. */
static void bytes_that_are_no_utf8_become_u_fffd(void **state)
{
    (void)state;
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"a\x80z", "\"a\xef\xbf\xbdz\""},             /* a continuation alone */
        {"\xc3(", "\"\xef\xbf\xbd(\""},               /* a lead byte without its continuation */
        {"\xe2\x98", "\"\xef\xbf\xbd\xef\xbf\xbd\""}, /* cut at the end of the text */
        {"\xc0\xaf", "\"\xef\xbf\xbd\xef\xbf\xbd\""}, /* an overlong '/' */
        {"\xed\xa0\x80", "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\""}, /* the surrogate U+D800 */
        {"\xf4\x90\x80\x80", "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\""}, /* U+110000 */
        {"\xff\"", "\"\xef\xbf\xbd\\\"\""},           /* and the quote after it is still escaped */
        {"\xf4\x8f\xbf\xbf", "\"\xf4\x8f\xbf\xbf\""}, /* U+10FFFF is a character */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_string_equal(put(cases[i].in, DT_JSON_U), cases[i].out);
        assert_string_equal(quote(cases[i].in, DT_JSON_SHORT_WS), cases[i].out);
        /* The same bytes as a jansson string: the literal without its quotes (no case needs an escape
         * but the last, whose quote jansson holds as it is). */
        char *fixed = dt_json_utf8(cases[i].in);
        json_t *v = dt_json_str(cases[i].in);
        assert_non_null(fixed);
        assert_non_null(v);
        char want[64];
        snprintf(want, sizeof want, "%.*s", (int)strlen(cases[i].out) - 2, cases[i].out + 1);
        if (cases[i].in[0] == '\xff')
            snprintf(want, sizeof want, "\xef\xbf\xbd\"");
        assert_string_equal(fixed, want);
        assert_string_equal(json_string_value(v), want);
        free(fixed);
        json_decref(v);
    }
    char in[33], buf[6 * 32 + 3]; /* still within 6 bytes a byte */
    memset(in, 0xff, 32);
    in[32] = 0;
    size_t len;
    assert_int_equal(dt_json_quote(buf, sizeof buf, in, DT_JSON_U, &len), 0);
    assert_int_equal(len, 3 * 32 + 2);
}

/* What the project's reader makes of the writer's output. */
static void read_back(const char *literal, const char *want)
{
    json_t *v = NULL;
    if (dt_json_parse(literal, strlen(literal), "test", 1, &v))
        fail_msg("%s does not parse: %s", literal, dt_error_last());
    assert_true(json_is_string(v));
    assert_string_equal(json_string_value(v), want);
    json_decref(v);
}

static void output_reads_back_as_the_input(void **state)
{
    (void)state;
    char all_controls[32];
    for (int c = 1; c < 0x20; c++)
        all_controls[c - 1] = (char)c;
    all_controls[31] = 0;
    const char *cases[] = {"",
                           "plain",
                           "a\"b\\c\\\"",
                           all_controls,
                           "tab\there\r\nnext line",
                           "\x7f caf\xc3\xa9 \xf0\x9f\x98\x80",
                           "\\u0041 stays six bytes"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        read_back(put(cases[i], DT_JSON_U), cases[i]);
        read_back(put(cases[i], DT_JSON_SHORT_WS), cases[i]);
        read_back(quote(cases[i], DT_JSON_U), cases[i]);
    }
    read_back(put("Latin-1 caf\xe9", DT_JSON_U), "Latin-1 caf\xef\xbf\xbd"); /* was JSON no reader took */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(quote_and_backslash_get_a_backslash),
        cmocka_unit_test(every_control_byte_is_escaped),
        cmocka_unit_test(del_and_utf8_are_copied),
        cmocka_unit_test(a_small_buffer_is_refused_whole),
        cmocka_unit_test(six_bytes_a_byte_always_fit),
        cmocka_unit_test(bytes_that_are_no_utf8_become_u_fffd),
        cmocka_unit_test(output_reads_back_as_the_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
