/* test_proc.c - processes (base/proc.c): exits in words, /proc/<pid>/stat
 * parsing (command names with spaces and parentheses, truncated lines, this
 * process's own stat), signals through a pipe (and the wait between attempts
 * that drops a late SIGCHLD), and helper programs run to their end: output
 * captured or line by line, stdin fed, a missing program, a timeout, a signal
 * passed on. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/proc.h"

static void exit_statuses_decoded(void **state)
{
    (void)state;
    char buf[160], tmp[32];
    int exited3 = 3 << 8, segv = SIGSEGV, killed = SIGKILL, abrt_core = SIGABRT | 0x80;
    dt_proc_describe(exited3, true, buf, sizeof buf);
    assert_string_equal(buf, "exited with code 3");
    assert_int_equal(dt_proc_exit_status(exited3), 3);
    dt_proc_describe(segv, true, buf, sizeof buf);
    assert_string_equal(buf, "killed by SIGSEGV (segmentation fault)");
    assert_int_equal(dt_proc_exit_status(segv), 128 + SIGSEGV);
    dt_proc_describe(killed, true, buf, sizeof buf);
    assert_non_null(strstr(buf, "killed by SIGKILL"));
    dt_proc_describe(abrt_core, true, buf, sizeof buf);
    assert_non_null(strstr(buf, "SIGABRT"));
    assert_non_null(strstr(buf, "core dumped"));
    assert_string_equal(dt_proc_signal_name(SIGTERM, tmp, sizeof tmp), "SIGTERM");
    assert_string_equal(dt_proc_signal_name(SIGRTMIN + 3, tmp, sizeof tmp) == tmp ? "x" : "y", "x");
    /* The OOM guess only when asked for it: a SIGKILL whose cause is known has none. */
    dt_proc_describe(killed, true, buf, sizeof buf);
    assert_non_null(strstr(buf, "out-of-memory killer"));
    dt_proc_describe(killed, false, buf, sizeof buf);
    assert_string_equal(buf, "killed by SIGKILL");
}

static void plain_line(void **state)
{
    (void)state;
    struct dt_proc_stat ps;
    assert_int_equal(
        dt_proc_stat_parse("42 (python3) S 7 42 42 0 -1 4194560 100 0 0 0 25 17 0 0 20 0 1", &ps), 0);
    assert_int_equal(ps.state, 'S');
    assert_int_equal(ps.ppid, 7);
    assert_int_equal(ps.pgrp, 42);
    assert_int_equal(ps.cpu_ticks, 42);
    assert_string_equal(ps.comm, "python3");
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
    assert_string_equal(ps.comm, "a) T 1 2 (x)");
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
    char task[64];
    snprintf(task, sizeof task, "%d/task/%d", (int)getpid(), (int)getpid());
    assert_int_equal(dt_proc_stat_read(task, &ps), 0); /* a thread's entry */
    assert_int_equal(ps.state, 'R');
}

static void signals_arrive_on_the_pipe(void **state)
{
    (void)state;
    struct dt_proc_signals s;
    const int sigs[] = {SIGUSR2, SIGCHLD};
    assert_int_equal(dt_proc_signals_catch(sigs, 2, &s), 0);
    raise(SIGUSR2);
    raise(SIGPIPE); /* ignored while caught */
    unsigned char b = 0;
    assert_int_equal(read(s.fd, &b, 1), 1);
    assert_int_equal(b, SIGUSR2);
    assert_int_equal(read(s.fd, &b, 1), -1); /* nothing more: non-blocking */
    dt_proc_signals_release(&s);
    struct sigaction now;
    sigaction(SIGUSR2, NULL, &now);
    assert_true(now.sa_handler == SIG_DFL);
    assert_int_equal(dt_proc_signals_catch(sigs, DT_PROC_SIGNALS_MAX + 1, &s), DT_EINTERNAL);
}

/* Between a job's attempts the agent waits on the pipe with no child left: a
 * late SIGCHLD is dropped, not taken for an interruption (test_netns_ifaces
 * met one in CI); a real signal ends the wait and stays in the pipe. */
static void signals_wait_skips_a_late_sigchld(void **state)
{
    (void)state;
    struct dt_proc_signals s;
    const int sigs[] = {SIGUSR2, SIGCHLD};
    assert_int_equal(dt_proc_signals_catch(sigs, 2, &s), 0);
    raise(SIGCHLD);
    double t0 = dt_clock_s();
    assert_int_equal(dt_proc_signals_wait(s.fd, 100), 0);
    assert_true(dt_clock_s() - t0 >= 0.09); /* it waited the whole time */
    unsigned char b = 0;
    assert_int_equal(read(s.fd, &b, 1), -1); /* the SIGCHLD is gone */
    raise(SIGCHLD);
    raise(SIGUSR2);
    assert_int_equal(dt_proc_signals_wait(s.fd, 5000), SIGUSR2);
    assert_int_equal(read(s.fd, &b, 1), 1);
    assert_int_equal(b, SIGUSR2);
    assert_int_equal(read(s.fd, &b, 1), -1);
    dt_proc_signals_release(&s);
}

static void helper_output_captured(void **state)
{
    (void)state;
    char *argv[] = {"sh", "-c", "cat; echo oops >&2; exit 3", NULL};
    struct dt_proc_run r = {
        .argv = argv, .in = "from stdin\n", .in_len = 11, .io = {DT_PROC_CAPTURE, DT_PROC_CAPTURE}};
    assert_int_equal(dt_proc_run(&r), 3);
    assert_string_equal(r.captured[0], "from stdin\n");
    assert_string_equal(r.captured[1], "oops\n");
    free(r.captured[0]);
    free(r.captured[1]);
    /* A big stdin and a big stdout at once: neither side waits for the other. */
    size_t big = 1 << 20;
    char *in = malloc(big);
    memset(in, 'x', big);
    char *cat[] = {"cat", NULL};
    r = (struct dt_proc_run){.argv = cat, .in = in, .in_len = big, .io = {DT_PROC_CAPTURE, DT_PROC_INHERIT}};
    assert_int_equal(dt_proc_run(&r), 0);
    assert_int_equal(strlen(r.captured[0]), big);
    assert_null(r.captured[1]);
    free(r.captured[0]);
    free(in);
}

struct seen {
    char text[256];
};

static void on_line(void *ctx, int stream, const char *line, size_t len, bool complete)
{
    struct seen *s = ctx;
    size_t n = strlen(s->text);
    snprintf(s->text + n, sizeof s->text - n, "%d:%.*s%s", stream, (int)len, line, complete ? "|" : "+");
}

static void helper_output_by_lines(void **state)
{
    (void)state;
    char *argv[] = {"sh", "-c", "echo a; echo b >&2; printf c", NULL};
    struct seen s = {""};
    struct dt_proc_run r = {
        .argv = argv, .io = {DT_PROC_LINES, DT_PROC_CAPTURE}, .on_line = on_line, .ctx = &s};
    assert_int_equal(dt_proc_run(&r), 0);
    assert_string_equal(s.text, "0:a|0:c|");
    assert_string_equal(r.captured[1], "b\n");
    free(r.captured[1]);
}

static void helper_missing_or_slow(void **state)
{
    (void)state;
    char *missing[] = {"no-such-helper-program", NULL};
    struct dt_proc_run r = {.argv = missing, .io = {DT_PROC_CAPTURE, DT_PROC_CAPTURE}};
    assert_int_equal(dt_proc_run(&r), DT_ENOTFOUND);
    assert_non_null(strstr(dt_error_last(), "no-such-helper-program was not found on PATH"));
    free(r.captured[0]);
    free(r.captured[1]);
    /* A helper whose child keeps the pipe open is still cut off at the deadline. */
    char *slow[] = {"sh", "-c", "sleep 5 & sleep 5", NULL};
    r = (struct dt_proc_run){.argv = slow, .io = {DT_PROC_CAPTURE, DT_PROC_CAPTURE}, .timeout_s = 0.2};
    double t0 = dt_clock_s();
    assert_int_equal(dt_proc_run(&r), DT_ETIMEDOUT);
    assert_true(dt_clock_s() - t0 < 3);
    assert_non_null(strstr(dt_error_last(), "sh did not finish within 0.2 s"));
    free(r.captured[0]);
    free(r.captured[1]);
}

/* SIGTERM to us while the helper runs reaches it as SIGTERM; we live on. */
static void helper_gets_our_signal(void **state)
{
    (void)state;
    char *argv[] = {"sh", "-c", "trap 'echo got TERM; exit 9' TERM; echo up; while :; do sleep 0.05; done",
                    NULL};
    pid_t me = getpid();
    pid_t killer = fork();
    if (killer == 0) {
        struct timespec ts = {0, 300 * 1000 * 1000};
        nanosleep(&ts, NULL);
        kill(me, SIGTERM);
        _exit(0);
    }
    struct dt_proc_run r = {.argv = argv, .io = {DT_PROC_CAPTURE, DT_PROC_INHERIT}, .grace_s = 5};
    assert_int_equal(dt_proc_run(&r), 9);
    assert_int_equal(r.signal, SIGTERM);
    assert_string_equal(r.captured[0], "up\ngot TERM\n");
    free(r.captured[0]);
    waitpid(killer, NULL, 0);
    struct sigaction now;
    sigaction(SIGTERM, NULL, &now);
    assert_true(now.sa_handler == SIG_DFL); /* put back */
}

/* stop_at, set from on_line: SIGTERM then, SIGKILL to its group a grace
 * period later, even while a child of it holds the pipes; signal stays 0. */
static void stop_line(void *ctx, int stream, const char *line, size_t len, bool complete)
{
    (void)stream;
    (void)complete;
    struct dt_proc_run *r = ctx;
    if (len == 7 && !memcmp(line, "abandon", 7))
        r->stop_at = dt_clock_s() + 0.2;
}

static void helper_stopped_after_it_says_so(void **state)
{
    (void)state;
    char *argv[] = {"sh", "-c", "trap '' TERM; (trap '' TERM; sleep 30) & echo abandon; wait", NULL};
    struct dt_proc_run r = {
        .argv = argv, .io = {DT_PROC_LINES, DT_PROC_INHERIT}, .on_line = stop_line, .grace_s = 0.3};
    r.ctx = &r;
    double t0 = dt_clock_s();
    int rc = dt_proc_run(&r);
    double took = dt_clock_s() - t0;
    assert_int_equal(rc, 128 + SIGKILL); /* it ignored SIGTERM */
    assert_int_equal(r.signal, 0);
    assert_true(took >= 0.2 + 0.9 && took < 5); /* the grace is at least 1 s */
}

static void on_usr2(int sig) { (void)sig; }

/* SigCgt as the kernel reports it: a handler is caught, an ignored or
 * default signal is not; a process that is gone says so. */
static void catches_read_from_proc(void **state)
{
    (void)state;
    struct sigaction sa = {.sa_handler = on_usr2}, old;
    sigemptyset(&sa.sa_mask);
    assert_int_equal(sigaction(SIGUSR2, &sa, &old), 0);
    assert_int_equal(dt_proc_catches(getpid(), SIGUSR2), 1);
    signal(SIGUSR2, SIG_IGN);
    assert_int_equal(dt_proc_catches(getpid(), SIGUSR2), 0);
    signal(SIGUSR2, SIG_DFL);
    assert_int_equal(dt_proc_catches(getpid(), SIGUSR2), 0);
    sigaction(SIGUSR2, &old, NULL);
    pid_t child = fork();
    if (child == 0)
        _exit(0);
    waitpid(child, NULL, 0);
    assert_int_equal(dt_proc_catches(child, SIGUSR2), -1); /* reaped: gone */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(exit_statuses_decoded),
        cmocka_unit_test(plain_line),
        cmocka_unit_test(name_with_spaces_and_parens),
        cmocka_unit_test(truncated_or_garbage_refused),
        cmocka_unit_test(reads_own_process),
        cmocka_unit_test(signals_arrive_on_the_pipe),
        cmocka_unit_test(catches_read_from_proc),
        cmocka_unit_test(signals_wait_skips_a_late_sigchld),
        cmocka_unit_test(helper_output_captured),
        cmocka_unit_test(helper_output_by_lines),
        cmocka_unit_test(helper_missing_or_slow),
        cmocka_unit_test(helper_gets_our_signal),
        cmocka_unit_test(helper_stopped_after_it_says_so),
    };
    return cmocka_run_group_tests_name("proc", tests, NULL, NULL);
}
