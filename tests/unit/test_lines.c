/* test_lines.c - a byte stream cut into lines (base/lines.c): lines split
 * across reads, lines longer than the buffer handed over in pieces, the
 * partial last line at end of stream. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "base/lines.h"

/* Collects what a line buffer hands over as "<text>|" or "<text>+" (unfinished). */
struct collect {
    char out[8192];
    size_t len;
};

static void collect_line(void *ctx, const char *line, size_t len, bool complete)
{
    struct collect *c = ctx;
    memcpy(c->out + c->len, line, len);
    c->len += len;
    c->out[c->len++] = complete ? '|' : '+';
    c->out[c->len] = 0;
}

static void lines_split_across_reads(void **state)
{
    (void)state;
    struct dt_lines lb;
    assert_int_equal(dt_lines_init(&lb, 64), 0);
    struct collect c = {0};
    dt_lines_feed(&lb, "one\ntw", 6, collect_line, &c);
    assert_string_equal(c.out, "one|");
    dt_lines_feed(&lb, "o\n\nthree", 8, collect_line, &c);
    assert_string_equal(c.out, "one|two||");
    dt_lines_flush(&lb, collect_line, &c);
    assert_string_equal(c.out, "one|two||three|");
    dt_lines_flush(&lb, collect_line, &c); /* nothing pending: nothing more */
    assert_string_equal(c.out, "one|two||three|");
    dt_lines_free(&lb);
}

static void long_lines_come_in_pieces(void **state)
{
    (void)state;
    struct dt_lines lb;
    assert_int_equal(dt_lines_init(&lb, 4), 0);
    struct collect c = {0};
    /* In one read, longer than the buffer. */
    dt_lines_feed(&lb, "abcdefghij\nxy\n", 14, collect_line, &c);
    assert_string_equal(c.out, "abcd+efgh+ij|xy|");
    c.len = 0;
    /* Spread over reads while something is pending. */
    dt_lines_feed(&lb, "ab", 2, collect_line, &c);
    dt_lines_feed(&lb, "cdefg\n", 6, collect_line, &c);
    assert_string_equal(c.out, "abcd+efg|");
    c.len = 0;
    /* Exactly at a piece boundary: the end of the line is an empty final piece. */
    dt_lines_feed(&lb, "abcd", 4, collect_line, &c);
    dt_lines_feed(&lb, "\n", 1, collect_line, &c);
    assert_string_equal(c.out, "abcd+|");
    dt_lines_free(&lb);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lines_split_across_reads),
        cmocka_unit_test(long_lines_come_in_pieces),
    };
    return cmocka_run_group_tests_name("lines", tests, NULL, NULL);
}
