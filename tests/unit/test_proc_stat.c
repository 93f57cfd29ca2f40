/* test_proc_stat.c - /proc/<pid>/stat parsing (launcher/proc_stat.c): command
 * names with spaces and parentheses, truncated lines, and this process's own
 * stat read from /proc. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <unistd.h>

#include "launcher/proc_stat.h"

static void plain_line(void **state)
{
    (void)state;
    struct dt_proc_stat ps;
    assert_int_equal(dt_proc_stat_parse("42 (python3) S 7 42 42 0 -1 4194560 100 0 0 0 25 17 0 0 20 0 1", &ps), 0);
    assert_int_equal(ps.state, 'S');
    assert_int_equal(ps.ppid, 7);
    assert_int_equal(ps.pgrp, 42);
    assert_int_equal(ps.cpu_ticks, 42);
}

/* comm is whatever the program set (prctl, argv[0]): ") T 1 2" inside it
 * must not be read as fields. */
static void name_with_spaces_and_parens(void **state)
{
    (void)state;
    struct dt_proc_stat ps;
    assert_int_equal(dt_proc_stat_parse("9 (a) T 1 2 (x)) D 3 9 9 0 -1 0 0 0 0 0 5 6 0", &ps), 0);
    assert_int_equal(ps.state, 'D');
    assert_int_equal(ps.ppid, 3);
    assert_int_equal(ps.pgrp, 9);
    assert_int_equal(ps.cpu_ticks, 11);
}

static void truncated_or_garbage_refused(void **state)
{
    (void)state;
    struct dt_proc_stat ps;
    assert_int_equal(dt_proc_stat_parse("42 (python3) S 7 42", &ps), -1);
    assert_int_equal(dt_proc_stat_parse("42 python3 S 7 42 42 0 -1 0 0 0 0 0 1 1", &ps), -1);
    assert_int_equal(dt_proc_stat_parse("", &ps), -1);
}

static void reads_own_process(void **state)
{
    (void)state;
    char pid[32];
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    struct dt_proc_stat ps;
    assert_int_equal(dt_proc_stat_read(pid, &ps), 0);
    assert_int_equal(ps.state, 'R');
    assert_int_equal(ps.ppid, getppid());
    assert_int_equal(ps.pgrp, getpgrp());
    assert_true(ps.cpu_ticks >= 0);
    assert_int_equal(dt_proc_stat_read("999999999", &ps), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(plain_line),
        cmocka_unit_test(name_with_spaces_and_parens),
        cmocka_unit_test(truncated_or_garbage_refused),
        cmocka_unit_test(reads_own_process),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
