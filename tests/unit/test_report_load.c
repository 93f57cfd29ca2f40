/* test_report_load.c - `dtrain report` on run directories no trainer writes:
 * what the fuzz target tests/fuzz/fuzz_report_load.c found, kept as cases.
 * A missing metrics.jsonl is an error naming the run directory (it was also
 * undefined behaviour, caught by `make asan`); steps and values a double
 * barely holds draw a chart of bounded size with no NaN in it (a single point
 * at step 1e89 used to write tick labels forever).  A \u0000 in a key or
 * value is refused where it stands: keys and values are used as C strings,
 * so "loss\u0000x" was read as "loss".
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

#include "base/error.h"
#include "launcher/report/report.h"
#include "tests/unit/run_dir_fixture.h"

static int setup(void **state)
{
    alarm(10); /* a chart that never ends is a failure, not a hung suite */
    return run_dir_setup(state);
}

static int teardown(void **state)
{
    alarm(0);
    return run_dir_teardown(state);
}

static void write_metrics(const char *text)
{
    run_dir_write("metrics.jsonl", text);
}

/* The page of the run directory, which must fit in 1 MiB: a fixed buffer,
 * so a page that never ends costs the alarm's seconds, not all memory. */
static const char *page(void)
{
    static char text[1 << 20];
    struct dt_report r;
    assert_int_equal(dt_report_load(run_dir, &r), 0);
    FILE *f = fmemopen(text, sizeof text, "w");
    assert_non_null(f);
    dt_report_write(&r, f);
    assert_int_equal(fclose(f), 0); /* fails when the page outgrew the buffer */
    dt_report_free(&r);
    return text;
}

static void missing_metrics_names_the_run_directory(void **state)
{
    (void)state;
    struct dt_report r;
    assert_int_equal(dt_report_load(run_dir, &r), DT_ENOTFOUND);
    assert_non_null(strstr(dt_error_last(), run_dir));
    assert_non_null(strstr(dt_error_last(), "no metrics.jsonl"));
}

/* 1e89 + 1 == 1e89: widening the x axis by one step left it empty. */
static void one_point_at_a_huge_step_draws_a_bounded_chart(void **state)
{
    (void)state;
    write_metrics("{\"step\": 1e89, \"loss\": 2.5}\n{\"step\": 2, \"loss\": null}\n");
    const char *text = page();
    assert_true(strlen(text) < 100000);
    assert_non_null(strstr(text, "data-series=\"loss\""));
    assert_null(strstr(text, "nan"));
}

/* A tick step of 20 does not move 1e18, whose neighbours are 128 apart. */
static void steps_closer_than_a_double_holds_draw_a_bounded_chart(void **state)
{
    (void)state;
    write_metrics("{\"step\": 1000000000000000000, \"loss\": 1}\n{\"step\": 1000000000000000128, \"loss\": 2}\n");
    const char *text = page();
    assert_true(strlen(text) < 100000);
    assert_non_null(strstr(text, "data-series=\"loss\""));
}

/* +-1e308 overflowed the axis padding, 10% of 5e-324 is 0: both gave NaN
 * coordinates.  Beyond +-1e150 a value is a gap; a subnormal one is drawn. */
static void absurd_values_draw_no_nan(void **state)
{
    (void)state;
    write_metrics("{\"step\": 1, \"loss\": 1e308, \"lr\": 5e-324}\n{\"step\": 2, \"loss\": -1e308, \"lr\": 5e-324}\n"
                  "{\"step\": 3, \"loss\": 0.5, \"lr\": 5e-324}\n");
    const char *text = page();
    assert_null(strstr(text, "nan"));
    assert_null(strstr(text, "inf"));
    assert_non_null(strstr(text, "data-series=\"loss\""));
    assert_non_null(strstr(text, "data-series=\"lr\""));
}

static void nul_in_a_string_is_refused_with_its_place(void **state)
{
    (void)state;
    write_metrics("{\"step\": 1, \"loss\": 1}\n{\"step\": 2, \"loss\\u0000x\": 7}\n");
    struct dt_report r;
    assert_int_equal(dt_report_load(run_dir, &r), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "metrics.jsonl:2:25: \\u0000 (a NUL character) is not allowed"));
    write_metrics("{\"step\": 1, \"loss\": 1, \"note\": \"a\\u0000\"}\n");
    assert_int_equal(dt_report_load(run_dir, &r), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "metrics.jsonl:1:"));
    assert_non_null(strstr(dt_error_last(), "NUL character"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(missing_metrics_names_the_run_directory, setup, teardown),
        cmocka_unit_test_setup_teardown(one_point_at_a_huge_step_draws_a_bounded_chart, setup, teardown),
        cmocka_unit_test_setup_teardown(steps_closer_than_a_double_holds_draw_a_bounded_chart, setup, teardown),
        cmocka_unit_test_setup_teardown(absurd_values_draw_no_nan, setup, teardown),
        cmocka_unit_test_setup_teardown(nul_in_a_string_is_refused_with_its_place, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
