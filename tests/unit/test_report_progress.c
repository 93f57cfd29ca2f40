/* test_report_progress.c - the live progress line: it follows metrics.jsonl
 * as it grows (a half-written line waits for its newline), formats epoch,
 * step/total, loss, lr, throughput, accuracy, ETA and restarts, redraws in
 * place on a terminal and erases itself before other output, and prints plain
 * paced lines elsewhere.  The rows no worker writes (numbers beyond a double
 * or an int64, negative steps, a line longer than the reader's buffer, a file
 * truncated, replaced or not a file at all) are what
 * tests/fuzz/fuzz_report_progress.c and reading the code found. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "launcher/report/report_progress.h"
#include "tests/unit/run_dir_fixture.h"

static char metrics[128];
static int pipe_fd[2]; /* the console: its read end is non-blocking, so drain() never waits */

/* Each test follows a run directory of its own, so no file outlives it. */
static int setup(void **state)
{
    if (run_dir_setup(state) || pipe(pipe_fd))
        return -1;
    fcntl(pipe_fd[0], F_SETFL, O_NONBLOCK);
    snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", run_dir);
    return 0;
}

static int teardown(void **state)
{
    close(pipe_fd[0]);
    close(pipe_fd[1]);
    return run_dir_teardown(state);
}

static void append(const char *text)
{
    FILE *f = fopen(metrics, "a");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* Everything written to the console so far. */
static const char *drain(void)
{
    static char buf[8192];
    ssize_t n = read(pipe_fd[0], buf, sizeof buf - 1);
    buf[n > 0 ? n : 0] = 0;
    return buf;
}

static void format_has_every_field(void **state)
{
    (void)state;
    char line[256];
    struct dt_progress_state s = {.step = 340, .total_steps = 1000, .epoch = 1.4166, .loss = 0.45671,
                                  .lr = 0.0012, .samples_per_s = 12345.4, .test_accuracy = 0.8512,
                                  .eta_s = 83, .restarts = 1};
    dt_progress_format(&s, line, sizeof line);
    assert_string_equal(line, "epoch 1.42 | step 340/1000 | loss 0.4567 | lr 1.20e-03 | 12345 samples/s | "
                              "test acc 0.8512 | ETA 1m23s | restarts 1");
    s = (struct dt_progress_state){.step = 5, .epoch = NAN, .loss = NAN, .lr = NAN, .samples_per_s = NAN,
                                   .test_accuracy = NAN, .eta_s = 7300};
    dt_progress_format(&s, line, sizeof line);
    assert_string_equal(line, "step 5 | restarts 0");
    s.total_steps = 10;
    dt_progress_format(&s, line, sizeof line);
    assert_string_equal(line, "step 5/10 | ETA 2h01m | restarts 0");
    s.gpu_ranks = 2; /* a GPU run: the ranks' mean utilisation and the largest memory */
    s.gpu_util_pct = 87.4;
    s.gpu_mem_mib = 1228.8;
    dt_progress_format(&s, line, sizeof line);
    assert_string_equal(line, "step 5/10 | gpu 87% 1.2 GiB | ETA 2h01m | restarts 0");
    s.gpu_ranks = 0;
    char tiny[8];
    dt_progress_format(&s, tiny, sizeof tiny);
    assert_int_equal(strlen(tiny), 7);
}

static void follows_the_file_and_paces_plain_lines(void **state)
{
    (void)state;
    struct dt_progress *p;
    assert_int_equal(dt_progress_open(run_dir, pipe_fd[1], false, 10, &p), 0);
    dt_progress_update(p, 0, 0); /* no file yet: nothing */
    assert_string_equal(drain(), "");
    append("{\"step\": 10, \"epoch\": 0.5, \"loss\": 2.5, \"lr\": 0.001, \"samples_per_s\": 100, "
           "\"total_steps\": 110}\n{\"step\": 20, \"ep");
    dt_progress_update(p, 1, 0);
    assert_string_equal(drain(), "[dtrain] epoch 0.50 | step 10/110 | loss 2.5000 | lr 1.00e-03 | 100 samples/s "
                                 "| restarts 0\n");
    append("och\": 1, \"loss\": 1.5, \"lr\": 0.002, \"samples_per_s\": 200, \"total_steps\": 110}\n");
    dt_progress_update(p, 3, 0); /* news, but the next plain line is due at 11 */
    assert_string_equal(drain(), "");
    assert_int_equal(dt_progress_state(p)->step, 20);
    assert_true(fabs(dt_progress_state(p)->eta_s - 18) < 1e-9); /* 10 steps in 2 s, 90 to go */
    append("{\"step\": 20, \"epoch\": 1, \"test_loss\": 0.4, \"test_accuracy\": 0.875}\nnot json\n");
    dt_progress_update(p, 11, 1);
    assert_string_equal(drain(), "[dtrain] epoch 1.00 | step 20/110 | loss 1.5000 | lr 2.00e-03 | 200 samples/s | "
                                 "test acc 0.8750 | ETA 0m18s | restarts 1\n");
    dt_progress_update(p, 30, 1); /* no news: no line */
    assert_string_equal(drain(), "");
    dt_progress_close(p);
}

/* A token run on a GPU: tokens/s instead of samples/s, MFU, and its
 * evaluation rows (val_loss, val_accuracy) leave the training figures be. */
static void a_token_row_shows_tokens_and_mfu(void **state)
{
    (void)state;
    struct dt_progress *p;
    assert_int_equal(dt_progress_open(run_dir, pipe_fd[1], false, 10, &p), 0);
    append("{\"step\": 10, \"loss\": 2.5, \"samples_per_s\": 100, \"total_steps\": 20, \"tokens_per_s\": 102400, "
           "\"mfu\": 0.4125, \"gpu_util_pct\": [90], \"gpu_mem_mib\": [2048], \"gpu_alloc_mib\": [1500]}\n"
           "{\"step\": 10, \"epoch\": 0.5, \"val_loss\": 2.4, \"val_accuracy\": 0.3}\n");
    dt_progress_update(p, 1, 0);
    assert_string_equal(drain(), "[dtrain] step 10/20 | loss 2.5000 | 102400 tokens/s | MFU 41.2% | gpu 90% 2.0 GiB "
                                 "| restarts 0\n");
    append("{\"step\": 20, \"loss\": 2.0, \"samples_per_s\": 100, \"total_steps\": 20, \"tokens_per_s\": 102400}\n");
    dt_progress_update(p, 12, 0); /* a row without mfu (a GPU of unknown peak) shows none */
    assert_string_equal(drain(), "[dtrain] step 20/20 | loss 2.0000 | 102400 tokens/s | ETA 0m00s | restarts 0\n");
    dt_progress_close(p);
}

static void redraws_in_place_on_a_terminal(void **state)
{
    (void)state;
    struct dt_progress *p;
    assert_int_equal(dt_progress_open(run_dir, pipe_fd[1], true, 0, &p), 0);
    append("{\"step\": 1, \"loss\": 2}\n");
    dt_progress_update(p, 0, 0);
    assert_string_equal(drain(), "\r\033[K[dtrain] step 1 | loss 2.0000 | restarts 0");
    dt_progress_hide(p);
    assert_string_equal(drain(), "\r\033[K");
    dt_progress_hide(p); /* already hidden: nothing */
    assert_string_equal(drain(), "");
    dt_progress_update(p, 0.1, 0); /* hidden lines come back, 4 times a second at most */
    assert_string_equal(drain(), "");
    dt_progress_update(p, 0.3, 0);
    assert_string_equal(drain(), "\r\033[K[dtrain] step 1 | loss 2.0000 | restarts 0");
    dt_progress_close(p);
    assert_string_equal(drain(), "\r\033[K");
    dt_progress_hide(NULL);
    dt_progress_update(NULL, 0, 0);
    dt_progress_close(NULL);
}

/* A GPU run's row: per-rank NVML lists become the mean utilisation and the
 * largest memory; a rank NVML could not read (null) is left out. */
static void reads_gpu_lists(void **state)
{
    (void)state;
    append("{\"step\": 10, \"total_steps\": 100, \"loss\": 1.5, \"samples_per_s\": 1000, "
           "\"gpu_util_pct\": [80, 90, null], \"gpu_mem_mib\": [1000, 3072, null]}\n");
    struct dt_progress *p = NULL;
    assert_int_equal(dt_progress_open(run_dir, pipe_fd[1], false, 10, &p), 0);
    dt_progress_update(p, 1.0, 0);
    const struct dt_progress_state *s = dt_progress_state(p);
    assert_int_equal(s->gpu_ranks, 3);
    assert_true(fabs(s->gpu_util_pct - 85) < 1e-9);
    assert_true(fabs(s->gpu_mem_mib - 3072) < 1e-9);
    char line[256];
    dt_progress_format(s, line, sizeof line);
    assert_non_null(strstr(line, "| gpu 85% 3.0 GiB |"));
    dt_progress_close(p);
}

/* Every training row of a GPU run has the lists, so one without them is
 * from a run with no GPU (a restart on other hardware): the GPU figures go
 * (they stayed, the last GPU row's).  An evaluation row never has them and
 * leaves them be. */
static void a_training_row_without_gpu_lists_drops_the_figures(void **state)
{
    (void)state;
    struct dt_progress *p;
    assert_int_equal(dt_progress_open(run_dir, pipe_fd[1], false, 10, &p), 0);
    append("{\"step\": 10, \"gpu_util_pct\": [80], \"gpu_mem_mib\": [1000]}\n"
           "{\"step\": 10, \"test_accuracy\": 0.5}\n");
    dt_progress_update(p, 1, 0);
    assert_int_equal(dt_progress_state(p)->gpu_ranks, 1);
    append("{\"step\": 20, \"loss\": 1}\n");
    dt_progress_update(p, 2, 0);
    char line[256];
    dt_progress_format(dt_progress_state(p), line, sizeof line);
    assert_string_equal(line, "step 20 | loss 1.0000 | test acc 0.5000 | restarts 0");
    dt_progress_close(p);
}

/* Figures no worker writes: an ETA past any run and a number beyond a
 * double (1e999 reads as inf) are left out, not printed as "inf" or as
 * lround's out-of-range garbage; a huge figure keeps the line short. */
static void format_leaves_out_what_is_no_figure(void **state)
{
    (void)state;
    char line[512];
    struct dt_progress_state s = {.step = 5, .total_steps = 10, .epoch = INFINITY, .loss = -INFINITY,
                                  .lr = NAN, .samples_per_s = 1e300, .test_accuracy = NAN, .eta_s = 1e300,
                                  .gpu_ranks = 1, .gpu_util_pct = INFINITY, .gpu_mem_mib = 1e300};
    dt_progress_format(&s, line, sizeof line);
    assert_string_equal(line, "step 5/10 | 1e+300 samples/s | gpu 9.77e+296 GiB | restarts 0");
    s.gpu_util_pct = NAN; /* no rank had a utilisation: the memory still says "gpu" */
    s.gpu_mem_mib = 3072;
    dt_progress_format(&s, line, sizeof line);
    assert_string_equal(line, "step 5/10 | 1e+300 samples/s | gpu 3.0 GiB | restarts 0");
    s.gpu_ranks = 0;
    s.eta_s = INFINITY;
    s.loss = -1e12;
    dt_progress_format(&s, line, sizeof line);
    assert_string_equal(line, "step 5/10 | loss -1e+12 | 1e+300 samples/s | restarts 0");
}

/* A step or total beyond what a double holds exactly, negative or inf is
 * no count: such a row is skipped, such a total ignored; an inf figure is
 * treated as null (the previous one stands). */
static void skips_steps_that_are_no_count(void **state)
{
    (void)state;
    struct dt_progress *p;
    assert_int_equal(dt_progress_open(run_dir, pipe_fd[1], false, 10, &p), 0);
    append("{\"step\": 4, \"total_steps\": 10, \"loss\": 2}\n"
           "{\"step\": 6, \"total_steps\": 1e999, \"loss\": 1e999}\n{\"step\": 7, \"total_steps\": -3}\n"
           "{\"step\": -5}\n{\"step\": 9007199254740994}\n{\"step\": 1e300, \"loss\": 1}\n");
    dt_progress_update(p, 1, 0);
    const struct dt_progress_state *st = dt_progress_state(p);
    assert_int_equal(st->step, 7);
    assert_int_equal(st->total_steps, 10);
    assert_true(st->loss == 2);
    dt_progress_close(p);
}

/* Rows read in one go carry no timing between them: the rate waits for a
 * row read later (it was "ETA 0m00s", the steps over no time at all). */
static void eta_waits_for_rows_read_apart(void **state)
{
    (void)state;
    struct dt_progress *p;
    assert_int_equal(dt_progress_open(run_dir, pipe_fd[1], false, 10, &p), 0);
    append("{\"step\": 10, \"total_steps\": 110}\n{\"step\": 20, \"total_steps\": 110}\n"
           "{\"step\": 30, \"total_steps\": 110}\n");
    dt_progress_update(p, 1, 0);
    assert_string_equal(drain(), "[dtrain] step 30/110 | restarts 0\n");
    append("{\"step\": 40, \"total_steps\": 110}\n");
    dt_progress_update(p, 2, 0);
    assert_true(fabs(dt_progress_state(p)->eta_s - 7) < 1e-9); /* 10 steps in 1 s since step 30, 70 to go */
    dt_progress_close(p);
}

/* A restart starts the rate again, and the ETA with it: it is unknown
 * until a row read later (the old run's ETA stayed on the line). */
static void a_restart_clears_the_eta(void **state)
{
    (void)state;
    struct dt_progress *p;
    assert_int_equal(dt_progress_open(run_dir, pipe_fd[1], false, 10, &p), 0);
    append("{\"step\": 10, \"total_steps\": 110}\n");
    dt_progress_update(p, 1, 0);
    append("{\"step\": 20, \"total_steps\": 110}\n");
    dt_progress_update(p, 2, 0);
    assert_true(fabs(dt_progress_state(p)->eta_s - 9) < 1e-9);
    append("{\"step\": 5, \"total_steps\": 110}\n"); /* restarted from scratch */
    dt_progress_update(p, 3, 1);
    assert_true(isnan(dt_progress_state(p)->eta_s));
    append("{\"step\": 15, \"total_steps\": 110}\n");
    dt_progress_update(p, 5, 1);
    assert_true(fabs(dt_progress_state(p)->eta_s - 19) < 1e-9); /* 10 steps in 2 s since step 5, 95 to go */
    dt_progress_close(p);
}

/* A restart from a checkpoint goes back from the last row but not below the
 * first: the rate starts again all the same (it went on from the first
 * row, counting the steps done twice and the time of the restart). */
static void a_restart_past_the_first_row_starts_the_rate_again(void **state)
{
    (void)state;
    struct dt_progress *p;
    assert_int_equal(dt_progress_open(run_dir, pipe_fd[1], false, 10, &p), 0);
    append("{\"step\": 10, \"total_steps\": 110}\n");
    dt_progress_update(p, 1, 0);
    append("{\"step\": 50, \"total_steps\": 110}\n");
    dt_progress_update(p, 2, 0);
    append("{\"step\": 30, \"total_steps\": 110}\n"); /* resumed from the checkpoint at 30 */
    dt_progress_update(p, 12, 1);
    assert_true(isnan(dt_progress_state(p)->eta_s));
    append("{\"step\": 50, \"total_steps\": 110}\n");
    dt_progress_update(p, 14, 1);
    assert_true(fabs(dt_progress_state(p)->eta_s - 6) < 1e-9); /* 20 steps in 2 s since step 30, 60 to go */
    dt_progress_close(p);
}

/* A line longer than the buffer (64 KiB) is dropped up to its newline; its
 * tail was read as a line of its own. */
static void drops_an_overlong_line_whole(void **state)
{
    (void)state;
    struct dt_progress *p;
    assert_int_equal(dt_progress_open(run_dir, pipe_fd[1], false, 10, &p), 0);
    static char junk[70000];
    memset(junk, 'x', 65536);
    strcpy(junk + 65536, "{\"step\": 99}\n");
    append("{\"step\": 1}\n");
    append(junk);
    dt_progress_update(p, 1, 0);
    assert_int_equal(dt_progress_state(p)->step, 1);
    append("{\"step\": 3}\n");
    dt_progress_update(p, 2, 0);
    assert_int_equal(dt_progress_state(p)->step, 3);
    dt_progress_close(p);
}

/* More than a call reads (1 MiB) unread is skipped to its end: the
 * evaluation row at the start of a 2 MiB file is never read (it was, and
 * the whole file with it, however big, in one call).  The rows taken are
 * read at one moment, so the rate starts from the last of them. */
static void a_big_backlog_is_skipped_to_its_end(void **state)
{
    (void)state;
    struct dt_progress *p;
    assert_int_equal(dt_progress_open(run_dir, pipe_fd[1], false, 10, &p), 0);
    FILE *f = fopen(metrics, "w");
    assert_non_null(f);
    fputs("{\"step\": 0, \"test_accuracy\": 0.5}\n", f);
    for (int step = 1; step <= 50000; step++)
        fprintf(f, "{\"step\": %d, \"total_steps\": 100000, \"loss\": 1}\n", step);
    assert_true(ftell(f) > 2 << 20);
    fclose(f);
    dt_progress_update(p, 1, 0);
    const struct dt_progress_state *st = dt_progress_state(p);
    assert_int_equal(st->step, 50000);
    assert_true(isnan(st->test_accuracy));
    assert_true(isnan(st->eta_s));
    append("{\"step\": 50100, \"total_steps\": 100000}\n");
    dt_progress_update(p, 2, 0);
    assert_true(fabs(st->eta_s - 499) < 1e-9); /* 100 steps in 1 s since step 50000 */
    dt_progress_close(p);
}

/* A file truncated below where reading stopped, or another file put under
 * the name, is read again from its start; the line froze before. */
static void follows_a_truncated_or_replaced_file(void **state)
{
    (void)state;
    struct dt_progress *p;
    assert_int_equal(dt_progress_open(run_dir, pipe_fd[1], false, 10, &p), 0);
    append("{\"step\": 10, \"loss\": 3}\n{\"step\": 20, \"loss\": 2}\n{\"step\": 30, \"loss\": 1}\n");
    dt_progress_update(p, 1, 0);
    assert_int_equal(dt_progress_state(p)->step, 30);
    assert_int_equal(truncate(metrics, 0), 0);
    append("{\"step\": 5}\n");
    dt_progress_update(p, 2, 0);
    assert_int_equal(dt_progress_state(p)->step, 5);
    unlink(metrics);
    append("{\"step\": 7, \"loss\": 0.5, \"epoch\": 1, \"lr\": 0.1, \"samples_per_s\": 10}\n");
    dt_progress_update(p, 3, 0);
    assert_int_equal(dt_progress_state(p)->step, 7);
    dt_progress_close(p);
}

static void give_up(int sig)
{
    (void)sig;
    fail_msg("dt_progress_update blocked on a FIFO");
}

/* A FIFO under the name blocked the launcher in open() until someone wrote
 * to it; it is no file to follow, and the console is told once. */
static void a_fifo_is_no_metrics_file(void **state)
{
    (void)state;
    struct dt_progress *p;
    assert_int_equal(mkfifo(metrics, 0600), 0);
    assert_int_equal(dt_progress_open(run_dir, pipe_fd[1], false, 10, &p), 0);
    signal(SIGALRM, give_up);
    alarm(5);
    dt_progress_update(p, 1, 0);
    dt_progress_update(p, 20, 0);
    alarm(0);
    assert_non_null(strstr(drain(), "metrics.jsonl: not a regular file (a FIFO)"));
    dt_progress_update(p, 40, 0);
    assert_string_equal(drain(), "");
    dt_progress_close(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(format_has_every_field, setup, teardown),
        cmocka_unit_test_setup_teardown(reads_gpu_lists, setup, teardown),
        cmocka_unit_test_setup_teardown(a_training_row_without_gpu_lists_drops_the_figures, setup, teardown),
        cmocka_unit_test_setup_teardown(follows_the_file_and_paces_plain_lines, setup, teardown),
        cmocka_unit_test_setup_teardown(redraws_in_place_on_a_terminal, setup, teardown),
        cmocka_unit_test_setup_teardown(a_token_row_shows_tokens_and_mfu, setup, teardown),
        cmocka_unit_test_setup_teardown(format_leaves_out_what_is_no_figure, setup, teardown),
        cmocka_unit_test_setup_teardown(skips_steps_that_are_no_count, setup, teardown),
        cmocka_unit_test_setup_teardown(eta_waits_for_rows_read_apart, setup, teardown),
        cmocka_unit_test_setup_teardown(a_restart_clears_the_eta, setup, teardown),
        cmocka_unit_test_setup_teardown(a_restart_past_the_first_row_starts_the_rate_again, setup, teardown),
        cmocka_unit_test_setup_teardown(drops_an_overlong_line_whole, setup, teardown),
        cmocka_unit_test_setup_teardown(a_big_backlog_is_skipped_to_its_end, setup, teardown),
        cmocka_unit_test_setup_teardown(follows_a_truncated_or_replaced_file, setup, teardown),
        cmocka_unit_test_setup_teardown(a_fifo_is_no_metrics_file, setup, teardown),
    };
    return cmocka_run_group_tests_name("report_progress", tests, NULL, NULL);
}
