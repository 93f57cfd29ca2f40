/* test_env.c - checked whole numbers from the environment (base/env.h): the
 * default when unset or empty, the value inside the range, and for anything
 * else an error naming the variable and the range, with the default left in
 * place (tests/integration/test_bench.sh checks a bad knob through dtrain
 * bench). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "base/error.h"

static void defaults_and_values(void **s)
{
    (void)s;
    uint64_t v = 0;
    unsetenv("DT_TEST_KNOB");
    assert_int_equal(dt_env_u64("DT_TEST_KNOB", 7, 1, 100, &v), 0);
    assert_int_equal(v, 7);
    setenv("DT_TEST_KNOB", "", 1);
    assert_int_equal(dt_env_u64("DT_TEST_KNOB", 7, 1, 100, &v), 0);
    assert_int_equal(v, 7);
    setenv("DT_TEST_KNOB", "100", 1);
    assert_int_equal(dt_env_u64("DT_TEST_KNOB", 7, 1, 100, &v), 0);
    assert_int_equal(v, 100);
    setenv("DT_TEST_KNOB", "1", 1);
    assert_int_equal(dt_env_u64("DT_TEST_KNOB", 7, 1, 100, &v), 0);
    assert_int_equal(v, 1);
    unsetenv("DT_TEST_KNOB");
}

static void bad_values_are_errors(void **s)
{
    (void)s;
    const char *bad[] = {"abc", "12x", "-1", "0", "101", " 5", "1e3", "99999999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        uint64_t v = 0;
        setenv("DT_TEST_KNOB", bad[i], 1);
        assert_int_equal(dt_env_u64("DT_TEST_KNOB", 7, 1, 100, &v), DT_EINVAL);
        assert_int_equal(v, 7);
        assert_non_null(strstr(dt_error_last(), "DT_TEST_KNOB="));
        assert_non_null(strstr(dt_error_last(), "from 1 to 100"));
    }
    unsetenv("DT_TEST_KNOB");
}

/* dt_env_int: the same checks into an int (ranks, world sizes). */
static void ints(void **s)
{
    (void)s;
    int v = -5;
    setenv("DT_TEST_KNOB", "3", 1);
    assert_int_equal(dt_env_int("DT_TEST_KNOB", 1, 1, 8, &v), 0);
    assert_int_equal(v, 3);
    setenv("DT_TEST_KNOB", "9", 1);
    assert_int_equal(dt_env_int("DT_TEST_KNOB", 1, 1, 8, &v), DT_EINVAL);
    assert_int_equal(v, 1);
    assert_non_null(strstr(dt_error_last(), "DT_TEST_KNOB=\"9\": expected a whole number from 1 to 8"));
    unsetenv("DT_TEST_KNOB");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(defaults_and_values),
        cmocka_unit_test(bad_values_are_errors),
        cmocka_unit_test(ints),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
