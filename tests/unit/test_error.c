/* test_error.c - the error buffer: codes pass through, context is prefixed,
 * long messages are truncated rather than overflowing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "base/error.h"

static void set_returns_code_and_message(void **state)
{
    (void)state;
    assert_int_equal(dt_error_set(DT_EINVAL, "bad %s at %d", "key", 7), DT_EINVAL);
    assert_string_equal(dt_error_last(), "bad key at 7");
    assert_int_equal(dt_error_code(), DT_EINVAL);
}

static void prefix_keeps_code(void **state)
{
    (void)state;
    dt_error_set(DT_ETIMEDOUT, "no answer");
    assert_int_equal(dt_error_prefix("coordinator %s", "h:1"), DT_ETIMEDOUT);
    assert_string_equal(dt_error_last(), "coordinator h:1: no answer");
}

static void errno_text_appended(void **state)
{
    (void)state;
    dt_error_set_errno(DT_EIO, ENOENT, "opening %s", "x.yaml");
    assert_string_equal(dt_error_last(), "opening x.yaml: No such file or directory");
}

static void long_message_truncated(void **state)
{
    (void)state;
    char big[4096];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = 0;
    dt_error_set(DT_EINVAL, "%s", big);
    assert_true(strlen(dt_error_last()) < 1024);
    dt_error_prefix("%s", big);
    assert_true(strlen(dt_error_last()) < 1024);
}

static void clear_forgets(void **state)
{
    (void)state;
    dt_error_set(DT_EIO, "x");
    dt_error_clear();
    assert_string_equal(dt_error_last(), "");
    assert_int_equal(dt_error_code(), DT_OK);
    assert_string_equal(dt_error_name(DT_EAUTH), "authentication failed");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(set_returns_code_and_message),
        cmocka_unit_test(prefix_keeps_code),
        cmocka_unit_test(errno_text_appended),
        cmocka_unit_test(long_message_truncated),
        cmocka_unit_test(clear_forgets),
    };
    return cmocka_run_group_tests_name("error", tests, NULL, NULL);
}
