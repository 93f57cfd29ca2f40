/* test_lines.c - a byte stream cut into lines (base/lines.c): lines split
 * across reads, lines longer than the buffer handed over in pieces, the
 * partial last line at end of stream, \r ending a piece when asked, and a
 * stalled line handed over as far as it came. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "base/lines.h"

/* Collects what a line buffer hands over as "<text>|" or "<text>+"
 * (unfinished), or with lb set, "<text>" and what ended it: '|' for \n, 'r'
 * for \r, '+' for a cut, '~' for what dt_lines_take handed over. */
struct collect {
    char out[8192];
    size_t len;
    const struct dt_lines *lb;
};

static void collect_line(void *ctx, const char *line, size_t len, bool complete)
{
    struct collect *c = ctx;
    memcpy(c->out + c->len, line, len);
    c->len += len;
    char mark = complete ? '|' : '+';
    if (c->lb)
        mark = c->lb->end == '\n' ? '|' : c->lb->end == '\r' ? 'r' : c->lb->end == DT_LINES_OPEN ? '~' : '+';
    c->out[c->len++] = mark;
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

/* A progress bar: "\r 10%" ... "\r100%\n"; without cr the \r stays in the line. */
static void carriage_returns_end_pieces_when_asked(void **state)
{
    (void)state;
    struct dt_lines lb;
    assert_int_equal(dt_lines_init(&lb, 8), 0);
    struct collect c = {.lb = &lb};
    dt_lines_feed(&lb, "a\rb\n", 4, collect_line, &c);
    assert_string_equal(c.out, "a\rb|");
    c.len = 0;
    lb.cr = true;
    dt_lines_feed(&lb, "\r 10%\r 2", 8, collect_line, &c);
    assert_string_equal(c.out, "r 10%r");
    dt_lines_feed(&lb, "0%\r\n", 4, collect_line, &c);
    assert_string_equal(c.out, "r 10%r 20%r|");
    c.len = 0;
    /* \r\n: the piece ends at \r, then an empty line's end */
    dt_lines_feed(&lb, "dos\r\nlong line\r", 15, collect_line, &c);
    assert_string_equal(c.out, "dosr|long lin+er");
    dt_lines_free(&lb);
}

/* A prompt, or a line that stalls: what has come is handed over, and the
 * rest of the line follows as its own piece. */
static void take_hands_over_a_stalled_line(void **state)
{
    (void)state;
    struct dt_lines lb;
    assert_int_equal(dt_lines_init(&lb, 64), 0);
    lb.cr = true;
    struct collect c = {.lb = &lb};
    dt_lines_take(&lb, collect_line, &c); /* nothing pending: nothing */
    assert_string_equal(c.out, "");
    dt_lines_feed(&lb, "done\nloss 1.", 12, collect_line, &c);
    dt_lines_take(&lb, collect_line, &c);
    assert_string_equal(c.out, "done|loss 1.~");
    dt_lines_feed(&lb, "5\n", 2, collect_line, &c);
    assert_string_equal(c.out, "done|loss 1.~5|");
    dt_lines_free(&lb);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lines_split_across_reads),
        cmocka_unit_test(long_lines_come_in_pieces),
        cmocka_unit_test(carriage_returns_end_pieces_when_asked),
        cmocka_unit_test(take_hands_over_a_stalled_line),
    };
    return cmocka_run_group_tests_name("lines", tests, NULL, NULL);
}
