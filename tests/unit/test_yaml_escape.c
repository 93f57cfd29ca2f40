/* test_yaml_escape.c - YAML double-quoted scalars that read back byte for byte.
 *
 * The writer (dt_yaml_put_quoted): '"' and '\\', every C0 control in both
 * styles, DEL, the C1 controls with NEL, LS and PS, the BOM and U+FFFE/FFFF
 * escaped; ordinary UTF-8 (é, 日本, an emoji) copied; invalid UTF-8 refused
 * with nothing written.  Every output is read back by libyaml, the reader
 * dtrain's job specs go through, and compared with the input bytes: the
 * named cases, then every code point from U+0000 to U+10FFFF between spaces.
 * dt_yaml_block_ok: what may stand unescaped in a literal block.
 *
 * Not for plain-or-quoted choices or block layout (test_kubernetes.c) or for
 * --print as a whole (test_jobspec.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "base/error.h"
#include "base/yaml_escape.h"
#include "spec/jobspec_yaml.h"

/* What the writer gives for s (len bytes), NUL-terminated; asserts it accepted s. */
static char *put(const char *s, size_t len, enum dt_yaml_style style)
{
    char *out = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&out, &n);
    assert_non_null(f);
    int rc = dt_yaml_put_quoted(f, s, len, style);
    if (rc)
        fail_msg("refused: %s", dt_error_last());
    assert_int_equal(fclose(f), 0);
    return out;
}

static void expect(const char *s, const char *dq, const char *short_ws)
{
    char *hex = put(s, strlen(s), DT_YAML_HEX), *ws = put(s, strlen(s), DT_YAML_SHORT_WS);
    assert_string_equal(hex, dq);
    assert_string_equal(ws, short_ws ? short_ws : dq);
    free(hex);
    free(ws);
}

/* The value libyaml reads from "v: <scalar>" (malloc'd, *len bytes). */
static char *read_back(const char *scalar, size_t *len)
{
    size_t n = strlen(scalar) + 5;
    char *doc = malloc(n);
    assert_non_null(doc);
    snprintf(doc, n, "v: %s\n", scalar);
    yaml_parser_t p;
    yaml_event_t ev;
    assert_true(yaml_parser_initialize(&p));
    yaml_parser_set_input_string(&p, (const unsigned char *)doc, strlen(doc));
    char *value = NULL;
    for (int scalars = 0, done = 0; !done;) {
        if (!yaml_parser_parse(&p, &ev))
            fail_msg("libyaml refused %s: %s", doc, p.problem);
        if (ev.type == YAML_SCALAR_EVENT && scalars++ == 1) {
            *len = ev.data.scalar.length;
            value = malloc(*len + 1);
            assert_non_null(value);
            memcpy(value, ev.data.scalar.value, *len);
        }
        done = ev.type == YAML_STREAM_END_EVENT;
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&p);
    free(doc);
    assert_non_null(value);
    return value;
}

static void round_trips(const char *s, size_t len)
{
    for (int style = DT_YAML_HEX; style <= DT_YAML_SHORT_WS; style++) {
        char *out = put(s, len, (enum dt_yaml_style)style);
        assert_null(memchr(out, '\n', strlen(out)));
        size_t n = 0;
        char *back = read_back(out, &n);
        size_t same = 0;
        while (same < len && same < n && back[same] == s[same])
            same++;
        if (n != len || same != len)
            fail_msg("%zu bytes read back as %zu, differing from byte %zu (0x%02x)", len, n, same,
                     same < len ? (unsigned char)s[same] : 0);
        free(back);
        free(out);
    }
}

static void quote_and_backslash_get_a_backslash(void **state)
{
    (void)state;
    expect("", "\"\"", NULL);
    expect("a\"b\\c", "\"a\\\"b\\\\c\"", NULL);
    expect("say \"hi\"\\\n\t\x01", "\"say \\\"hi\\\"\\\\\\x0a\\x09\\x01\"",
           "\"say \\\"hi\\\"\\\\\\n\\t\\x01\"");
    round_trips("a\"b\\c\\\"", 7);
}

static void every_c0_control_is_escaped(void **state)
{
    (void)state;
    for (unsigned c = 0; c < 0x20; c++) {
        char s[1] = {(char)c}, hex[16], ws[16];
        snprintf(hex, sizeof hex, "\"\\x%02x\"", c);
        snprintf(ws, sizeof ws, "%s", c == '\n' ? "\"\\n\"" : c == '\t' ? "\"\\t\"" : hex);
        char *a = put(s, 1, DT_YAML_HEX), *b = put(s, 1, DT_YAML_SHORT_WS);
        assert_string_equal(a, hex);
        assert_string_equal(b, ws);
        free(a);
        free(b);
        round_trips(s, 1);
    }
}

/* C1 controls and DEL are outside YAML's printable set; NEL, LS and PS are
 * line breaks to libyaml; U+FFFE/FFFF are not characters; the BOM should be
 * escaped.  NBSP (U+00A0) and U+FFFD are the printable neighbours. */
static void del_c1_and_breaks_are_escaped(void **state)
{
    (void)state;
    expect("\x7f", "\"\\x7f\"", NULL);
    expect("\xc2\x80", "\"\\u0080\"", NULL);
    expect("a\xc2\x85 b", "\"a\\u0085 b\"", NULL);
    expect("\xc2\x9f", "\"\\u009f\"", NULL);
    expect("\xc2\xa0", "\"\xc2\xa0\"", NULL);
    expect(" \xe2\x80\xa8 \xe2\x80\xa9 ", "\" \\u2028 \\u2029 \"", NULL);
    expect("\xef\xbb\xbf", "\"\\ufeff\"", NULL);
    expect("\xef\xbf\xbe\xef\xbf\xbf\xef\xbf\xbd", "\"\\ufffe\\uffff\xef\xbf\xbd\"", NULL);
    const char *const cases[] = {"\x7f",
                                 "\xc2\x80",
                                 " \xc2\x85 ",
                                 "\xc2\x9f",
                                 "\xc2\xa0",
                                 " \xe2\x80\xa8 ",
                                 " \xe2\x80\xa9 ",
                                 "\xef\xbb\xbf",
                                 "\xef\xbf\xbe\xef\xbf\xbf",
                                 NULL};
    for (int i = 0; cases[i]; i++)
        round_trips(cases[i], strlen(cases[i]));
}

static void ordinary_utf8_is_copied(void **state)
{
    (void)state;
    const char *const cases[] = {"caf\xc3\xa9",      "\xe6\x97\xa5\xe6\x9c\xac", "\xf0\x9f\x98\x80",
                                 "\xf4\x8f\xbf\xbf", "plain ascii ~!@#$%^&*()",  NULL};
    for (int i = 0; cases[i]; i++) {
        char want[64];
        snprintf(want, sizeof want, "\"%s\"", cases[i]);
        expect(cases[i], want, NULL);
        round_trips(cases[i], strlen(cases[i]));
    }
}

static void invalid_utf8_is_refused_whole(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        size_t bad;
    } cases[] = {
        {"ok\x80", 2},               /* a continuation byte alone */
        {"\xff", 0},                 /* never in UTF-8 */
        {"\xc3", 0},                 /* cut short at the end */
        {"\xc3(", 0},                /* cut short by another character */
        {"\xc0\xaf", 0},             /* overlong '/' */
        {"\xe0\x80\xaf", 0},         /* overlong, 3 bytes */
        {"\xed\xa0\x80", 0},         /* a surrogate (U+D800) */
        {"\xf4\x90\x80\x80", 0},     /* above U+10FFFF */
        {"\xf8\x88\x80\x80\x80", 0}, /* 5-byte form */
        {"caf\xe9", 3},              /* Latin-1 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out = NULL;
        size_t n = 0;
        FILE *f = open_memstream(&out, &n);
        assert_non_null(f);
        assert_int_equal(dt_yaml_put_quoted(f, cases[i].s, strlen(cases[i].s), DT_YAML_SHORT_WS), DT_EINVAL);
        assert_int_equal(fclose(f), 0);
        assert_int_equal(n, 0);
        char want[32];
        snprintf(want, sizeof want, "byte %zu (0x", cases[i].bad);
        assert_non_null(strstr(dt_error_last(), want));
        assert_false(dt_yaml_block_ok(cases[i].s, strlen(cases[i].s)));
        free(out);
    }
}

static size_t utf8(unsigned cp, char *o)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12);
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18);
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Spaces around each character, because libyaml folds spaces at a line break. */
static void every_code_point_reads_back(void **state)
{
    (void)state;
    static char s[256 * 6];
    for (unsigned block = 0; block < 0x110000; block += 256) {
        size_t len = 0;
        for (unsigned cp = block; cp < block + 256; cp++) {
            if (cp >= 0xD800 && cp <= 0xDFFF)
                continue;
            s[len++] = ' ';
            len += utf8(cp, s + len);
        }
        s[len++] = ' ';
        round_trips(s, len);
    }
}

static void block_ok_only_without_escapes(void **state)
{
    (void)state;
    const char *const ok[] = {"", "a: 1\n\tb: \xc3\xa9\n", "\xe6\x97\xa5\xf0\x9f\x98\x80\xc2\xa0", NULL};
    const char *const not_ok[] = {
        "crlf\r\n",     "\x01",         "\x7f",         "\xc2\x80",     "\xc2\x85", "\xe2\x80\xa8",
        "\xe2\x80\xa9", "\xef\xbb\xbf", "\xef\xbf\xbe", "\xef\xbf\xbf", NULL};
    for (int i = 0; ok[i]; i++)
        assert_true(dt_yaml_block_ok(ok[i], strlen(ok[i])));
    for (int i = 0; not_ok[i]; i++)
        if (dt_yaml_block_ok(not_ok[i], strlen(not_ok[i])))
            fail_msg("case %d may stand in a block", i);
    assert_false(dt_yaml_block_ok("a\0b", 3));
}

/* A one-line message or YAML comment shows each character the writer would
 * escape, and each byte that is no UTF-8, as one '?' (a NEL or U+2028 in a
 * `validate --print` comment was a line break to libyaml); other UTF-8 as it is. */
static void messages_show_what_yaml_escapes_as_a_mark(void **state)
{
    (void)state;
    char q[64];
    assert_string_equal(dt_yaml_quote("a\nb\x7f" "c\xc2\x85" "d\xe2\x80\xa8" "e\xff" "f\xc3\xa9", q, sizeof q),
                        "a?b?c?d?e?f\xc3\xa9");
    int unsafe;
    assert_int_equal(dt_yaml_char("\xc2\x85", 2, &unsafe), 2);
    assert_true(unsafe);
    assert_int_equal(dt_yaml_char("\xe2\x80\xa9", 3, &unsafe), 3);
    assert_true(unsafe);
    assert_int_equal(dt_yaml_char("\xe2\x80", 2, &unsafe), 1); /* cut short: one byte at a time */
    assert_true(unsafe);
    assert_int_equal(dt_yaml_char("\xc3\xa9", 2, &unsafe), 2);
    assert_false(unsafe);
    /* Cut to the buffer without halving a character. */
    assert_string_equal(dt_yaml_quote("\xc3\xa9\xc3\xa9\xc3\xa9", q, 8), "\xc3\xa9\xc3\xa9...");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(quote_and_backslash_get_a_backslash), cmocka_unit_test(every_c0_control_is_escaped),
        cmocka_unit_test(del_c1_and_breaks_are_escaped),       cmocka_unit_test(ordinary_utf8_is_copied),
        cmocka_unit_test(invalid_utf8_is_refused_whole),       cmocka_unit_test(every_code_point_reads_back),
        cmocka_unit_test(block_ok_only_without_escapes),
        cmocka_unit_test(messages_show_what_yaml_escapes_as_a_mark),
    };
    return cmocka_run_group_tests_name("yaml_escape", tests, NULL, NULL);
}
