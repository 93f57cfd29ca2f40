/* test_report_load.c - `dtrain report` on run directories no trainer writes:
 * what the fuzz target tests/fuzz/fuzz_report_load.c found, kept as cases.
 * A missing metrics.jsonl is an error naming the run directory (it was also
 * undefined behaviour, caught by `make asan`).
 *
 * Not for the findings (test_report_diagnose.c) or the page's looks
 * (tests/integration/test_obs_report.sh).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/error.h"
#include "launcher/report.h"

static char dir[64], path[128];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/dt-report-load-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    unlink(path);
    return rmdir(dir);
}

static void missing_metrics_names_the_run_directory(void **state)
{
    (void)state;
    struct dt_report r;
    assert_int_equal(dt_report_load(dir, &r), DT_ENOTFOUND);
    assert_non_null(strstr(dt_error_last(), dir));
    assert_non_null(strstr(dt_error_last(), "no metrics.jsonl"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(missing_metrics_names_the_run_directory, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
