/* test_report_diagnose.c - the bottleneck findings of `dtrain report` and of
 * the end-of-run summary, from synthetic run directories: each rule (data
 * wait, exposed communication, low GPU utilisation, straggler rank) fires with
 * its figure when the metrics say so and stays quiet just under its
 * threshold; per-rank lists are averaged per rank over the rows. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "launcher/report/report.h"
#include "tests/unit/run_dir_fixture.h"

/* Two training rows with the same split (seconds per step: data, forward,
 * backward, comm wait, optimizer) and the given extra members. */
static void rows(double data, double comm, const char *extra)
{
    char text[2048];
    int n = 0;
    for (int step = 10; step <= 20; step += 10)
        n += snprintf(text + n, sizeof text - (size_t)n,
                      "{\"step\": %d, \"loss\": 0.5, \"data_s\": %g, \"forward_s\": 0.010, \"backward_s\": 0.020, "
                      "\"comm_wait_s\": %g, \"optimizer_s\": %g%s}\n",
                      step, data, comm, 0.070 - data - comm, extra);
    run_dir_write("metrics.jsonl", text);
}

/* The findings of the run directory as one string; n gets their number. */
static const char *diagnose(int *n)
{
    static char buf[4096];
    struct dt_report r;
    assert_int_equal(dt_report_load(run_dir, &r), 0);
    *n = dt_report_diagnose(&r, buf, sizeof buf);
    dt_report_free(&r);
    return buf;
}

/* The split sums to 100 ms; 20 ms of data wait is 20%. */
static void data_wait_over_a_tenth_is_named(void **state)
{
    (void)state;
    int n;
    rows(0.020, 0.002, "");
    const char *f = diagnose(&n);
    assert_int_equal(n, 1);
    assert_non_null(strstr(f, "Data loading limits the run: 20% of the step"));
    assert_non_null(strstr(f, "20.0 ms of a 100.0 ms step"));
    assert_non_null(strstr(f, "data.workers"));
    rows(0.009, 0.002, "");
    f = diagnose(&n);
    assert_null(strstr(f, "Data loading"));
    assert_non_null(strstr(f, "No bottleneck found: data wait 9.0%, communication wait 2.0%"));
}

static void exposed_communication_is_named(void **state)
{
    (void)state;
    int n;
    rows(0.001, 0.035, "");
    const char *f = diagnose(&n);
    assert_int_equal(n, 1);
    assert_non_null(strstr(f, "Communication is exposed: 35% of the step"));
    assert_non_null(strstr(f, "35.0 ms of a 100.0 ms step, mean comm_wait_s"));
    assert_non_null(strstr(f, "ddp.bucket_cap_mb"));
    assert_non_null(strstr(f, "ddp.overlap"));
    rows(0.001, 0.009, "");
    assert_null(strstr(diagnose(&n), "Communication is exposed"));
}

/* Rank 1 at 40% and rank 0 at 80%: 60% on average, rank 1 named. */
static void low_gpu_utilisation_is_named(void **state)
{
    (void)state;
    int n;
    rows(0.001, 0.001, ", \"gpu_util_pct\": [80, 40], \"gpu_mem_mib\": [900, 900]");
    const char *f = diagnose(&n);
    assert_int_equal(n, 1);
    assert_non_null(strstr(f, "The GPUs are underused: 60% utilisation on average, rank 1 lowest at 40%"));
    rows(0.001, 0.001, ", \"gpu_util_pct\": [95, 75]");
    f = diagnose(&n);
    assert_null(strstr(f, "underused"));
    assert_non_null(strstr(f, "GPU utilisation at least 70%"));
}

/* rank_work_seconds of trainer_summary.json with rank 2 at the given seconds. */
static void work(double rank2)
{
    char text[256];
    snprintf(text, sizeof text, "{\"train_seconds\": 20, \"rank_work_seconds\": [10.0, 10.1, %g, 9.9]}", rank2);
    run_dir_write("trainer_summary.json", text);
}

/* Rank 2 works 15 s, the others 9.9-10.1: 5 s (50%) over their median of 10 s. */
static void straggler_rank_is_named_with_its_excess(void **state)
{
    (void)state;
    int n;
    rows(0.001, 0.001, "");
    work(15);
    const char *f = diagnose(&n);
    assert_int_equal(n, 1);
    assert_non_null(strstr(f, "Rank 2 is a straggler: 15.0 s of work, 5.0 s (50%) more than the median of the "
                              "other ranks (10.0 s;"));
    /* 8% over the others is load noise, not a straggler */
    work(10.8);
    f = diagnose(&n);
    assert_null(strstr(f, "straggler:"));
    assert_non_null(strstr(f, "no straggler rank"));
    /* a short run's seconds keep their digits */
    run_dir_write("trainer_summary.json", "{\"rank_work_seconds\": [0.040, 0.041, 0.076, 0.039]}");
    assert_non_null(strstr(diagnose(&n), "Rank 2 is a straggler: 0.076 s of work, 0.036 s (90%) more than the "
                                          "median of the other ranks (0.040 s;"));
    /* a rank without a figure gives no verdict */
    run_dir_write("trainer_summary.json", "{\"rank_work_seconds\": [10.0, null, 30.0]}");
    assert_null(strstr(diagnose(&n), "straggler:"));
    run_dir_write("trainer_summary.json", "{\"rank_work_seconds\": [30.0]}");
    assert_null(strstr(diagnose(&n), "straggler:"));
}

/* Several limits at once: each is named, and the comm finding points at the straggler. */
static void every_limit_is_named_at_once(void **state)
{
    (void)state;
    int n;
    rows(0.030, 0.030, ", \"gpu_util_pct\": [20, 30]");
    run_dir_write("trainer_summary.json", "{\"rank_work_seconds\": [20, 40]}");
    const char *f = diagnose(&n);
    assert_int_equal(n, 4);
    assert_non_null(strstr(f, "Data loading"));
    assert_non_null(strstr(f, "part of this wait is for the straggler"));
    assert_non_null(strstr(f, "rank 0 lowest at 20%"));
    assert_non_null(strstr(f, "Rank 1 is a straggler: 40.0 s of work, 20.0 s (100%)"));
}

/* A per-rank list is averaged per rank over the rows; a null is no number, and
 * the list's mean over ranks becomes a series (the chart). */
static void per_rank_lists_are_averaged_per_rank(void **state)
{
    (void)state;
    run_dir_write("metrics.jsonl", "{\"step\": 10, \"gpu_util_pct\": [10, 50, null]}\n"
                                "{\"step\": 20, \"gpu_util_pct\": [30, 70, 90]}\n");
    struct dt_report r;
    assert_int_equal(dt_report_load(run_dir, &r), 0);
    const struct dt_report_ranks *l = dt_report_ranks(&r, "gpu_util_pct");
    assert_non_null(l);
    assert_int_equal(l->ranks, 3);
    assert_float_equal(dt_report_rank_mean(l, 0), 20, 1e-12);
    assert_float_equal(dt_report_rank_mean(l, 1), 60, 1e-12);
    assert_float_equal(dt_report_rank_mean(l, 2), 90, 1e-12);
    assert_true(isnan(dt_report_rank_mean(l, 3)));
    const struct dt_report_series *s = dt_report_series(&r, "gpu_util_pct");
    assert_non_null(s);
    assert_int_equal(s->n, 2);
    assert_float_equal(s->value[0], 30, 1e-12);
    assert_float_equal(s->value[1], 190.0 / 3, 1e-12);
    assert_null(dt_report_ranks(&r, "loss"));
    dt_report_free(&r);
}

/* Without a per-step split the trainer's whole-run totals decide. */
static void trainer_summary_totals_are_the_fallback(void **state)
{
    (void)state;
    int n;
    run_dir_write("metrics.jsonl", "{\"step\": 10, \"loss\": 0.5}\n");
    run_dir_write("trainer_summary.json",
               "{\"train_seconds\": 100, \"data_wait_seconds\": 25, \"comm_wait_seconds\": 1}");
    const char *f = diagnose(&n);
    assert_int_equal(n, 1);
    assert_non_null(strstr(f, "25% of the step is spent waiting for batches (25.0 s of 100.0 s training, "
                              "trainer_summary.json)"));
    snprintf(run_path, sizeof run_path, "%s/trainer_summary.json", run_dir);
    unlink(run_path);
    f = diagnose(&n);
    assert_non_null(strstr(f, "No step-time figures in this run"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(data_wait_over_a_tenth_is_named, run_dir_setup, run_dir_teardown),
        cmocka_unit_test_setup_teardown(exposed_communication_is_named, run_dir_setup, run_dir_teardown),
        cmocka_unit_test_setup_teardown(low_gpu_utilisation_is_named, run_dir_setup, run_dir_teardown),
        cmocka_unit_test_setup_teardown(straggler_rank_is_named_with_its_excess, run_dir_setup, run_dir_teardown),
        cmocka_unit_test_setup_teardown(every_limit_is_named_at_once, run_dir_setup, run_dir_teardown),
        cmocka_unit_test_setup_teardown(per_rank_lists_are_averaged_per_rank, run_dir_setup, run_dir_teardown),
        cmocka_unit_test_setup_teardown(trainer_summary_totals_are_the_fallback, run_dir_setup, run_dir_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
