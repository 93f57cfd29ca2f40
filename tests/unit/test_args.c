/* test_args.c - command-line values shared by the launcher and the adapters
 * (base/args.c): --ranks lists and --grace-period durations. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "base/args.h"
#include "base/error.h"

static void ranks_lists(void **state)
{
    (void)state;
    unsigned char m[8];
    assert_int_equal(dt_args_ranks("0,2,5-7", 8, m), 0);
    unsigned char want[8] = {1, 0, 1, 0, 0, 1, 1, 1};
    assert_memory_equal(m, want, 8);
    assert_int_equal(dt_args_ranks("8", 8, m), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "rank 8 does not exist"));
    assert_int_equal(dt_args_ranks("3-1", 8, m), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "backwards"));
    assert_int_equal(dt_args_ranks("1;2", 8, m), DT_EINVAL);
    assert_int_equal(dt_args_ranks("", 8, m), DT_EINVAL);
    assert_int_equal(dt_args_ranks("-1", 8, m), DT_EINVAL);
}

static void seconds(void **state)
{
    (void)state;
    double s = -1;
    assert_int_equal(dt_args_seconds("3", &s), 0);
    assert_true(s == 3.0);
    assert_int_equal(dt_args_seconds("0.5s", &s), 0);
    assert_true(s == 0.5);
    const char *bad[] = {"", "0", "-1", "3600.5", "2m", "s", "1ss"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        s = 7;
        assert_int_equal(dt_args_seconds(bad[i], &s), -1);
        assert_true(s == 7.0); /* untouched */
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ranks_lists),
        cmocka_unit_test(seconds),
    };
    return cmocka_run_group_tests_name("args", tests, NULL, NULL);
}
