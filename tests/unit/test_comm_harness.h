/* test_comm_harness.h - runs a function on N forked ranks that share an
 * in-process coordinator, for the communicator's unit tests.
 *
 * Each call gets a fresh store prefix, so communicators of different calls
 * (and a second communicator after a failure) never see each other's keys.
 * A rank's failure message goes to stderr with its rank; the parent returns
 * the number of ranks that failed.  Every rank has an alarm so a hang fails
 * the test instead of blocking CI.
 */
#ifndef TEST_COMM_HARNESS_H
#define TEST_COMM_HARNESS_H

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm/comm.h"
#include "base/error.h"
#include "comm/store.h"
#include "launcher/coordinator/coordinator.h"

static int harness_port;
static pid_t harness_coord_pid;
static int harness_seq;
/* In a rank: its store and communicator prefix, to build another communicator. */
static struct dt_store *harness_rank_store;
static const char *harness_rank_prefix;

static void harness_stop(void)
{
    if (harness_coord_pid > 0) {
        kill(harness_coord_pid, SIGKILL);
        waitpid(harness_coord_pid, NULL, 0);
    }
}

/* The coordinator runs in a process of its own, forked before this process
 * has any thread: forking ranks from a process whose other threads may hold
 * allocator locks (the coordinator's loop, sanitizer runtimes) can deadlock
 * a child. */
static void harness_start(void)
{
    if (harness_port)
        return;
    int fds[2];
    if (pipe(fds) != 0)
        exit(2);
    fflush(NULL);
    harness_coord_pid = fork();
    if (harness_coord_pid == 0) {
        struct dt_coord *coord;
        struct dt_coord_config cfg = {.bind_host = "127.0.0.1", .port = 0};
        int port = dt_coord_start(&cfg, &coord) == 0 ? dt_coord_port(coord) : -1;
        if (port < 0)
            fprintf(stderr, "harness: coordinator: %s\n", dt_error_last());
        if (write(fds[1], &port, sizeof port) != sizeof port || port < 0)
            _exit(2);
        for (;;)
            pause();
    }
    close(fds[1]);
    if (read(fds[0], &harness_port, sizeof harness_port) != sizeof harness_port || harness_port <= 0) {
        fprintf(stderr, "harness: the coordinator did not start\n");
        exit(2);
    }
    close(fds[0]);
    atexit(harness_stop);
}

static int harness_store(struct dt_store **s)
{
    struct dt_store_options so = {.host = "127.0.0.1", .port = harness_port, .timeout_s = 30};
    return dt_store_connect(&so, s);
}

typedef int (*harness_body)(struct dt_comm *c, int rank, int world, void *arg);

/* dt_comm_options.op_timeout_s of the next harness_run's ranks (0: timeout_s). */
static double harness_op_timeout_s;

/* Runs body on `world` ranks; returns how many failed.  The body returns 0 or
 * a negative code (its message in dt_error_last()). */
enum { HARNESS_MAX_WORLD = 16 };

static int harness_run(int world, const char *backend, double timeout_s, harness_body body, void *arg)
{
    if (world < 1 || world > HARNESS_MAX_WORLD) {
        fprintf(stderr, "harness_run: world %d is outside 1..%d\n", world, HARNESS_MAX_WORLD);
        return world < 1 ? 1 : world;
    }
    harness_start();
    char prefix[64];
    snprintf(prefix, sizeof prefix, "h%d-%d/", (int)getpid(), harness_seq++);
    pid_t pids[HARNESS_MAX_WORLD];
    fflush(NULL);
    for (int r = 0; r < world; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            alarm(150);
            struct dt_store *s = NULL;
            struct dt_comm *c = NULL;
            struct dt_comm_options o = {.backend = backend,
                                        .rank = r,
                                        .world = world,
                                        .local_rank = r,
                                        .local_world = world,
                                        .key_prefix = prefix,
                                        .timeout_s = timeout_s,
                                        .op_timeout_s = harness_op_timeout_s};
            int rc = harness_store(&s);
            if (rc == 0) {
                o.store = s;
                harness_rank_store = s;
                harness_rank_prefix = prefix;
                rc = dt_comm_init(&o, &c);
            }
            if (rc == 0)
                rc = body(c, r, world, arg);
            if (rc != 0)
                fprintf(stderr, "rank %d/%d (%s): %s\n", r, world, backend, dt_error_last());
            dt_comm_destroy(c);
            dt_store_close(s);
            fflush(NULL);
            _exit(rc == 0 ? 0 : 1);
        }
    }
    /* A rank a test stopped (SIGSTOP, a stalled peer) is killed once every
     * other rank has exited: the survivors' verdicts are in, and waiting for
     * the test's own watchdog would cost seconds a run.  It counts as failed.
     * Only these pids are waited for (a test may have other children). */
    int failed = 0, left = world;
    bool done[HARNESS_MAX_WORLD] = {false}, is_stopped[HARNESS_MAX_WORLD] = {false};
    while (left > 0) {
        int stopped = 0;
        for (int r = 0; r < world; r++) {
            int st;
            pid_t got = done[r] ? 0 : waitpid(pids[r], &st, WNOHANG | WUNTRACED | WCONTINUED);
            if (got == pids[r] && (WIFSTOPPED(st) || WIFCONTINUED(st)))
                is_stopped[r] = WIFSTOPPED(st);
            else if (got == pids[r] || (got < 0 && errno != EINTR)) {
                failed += got < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0;
                done[r] = true;
                left--;
            }
            stopped += !done[r] && is_stopped[r];
        }
        for (int r = 0; r < world && left > 0 && stopped == left; r++)
            if (!done[r])
                kill(pids[r], SIGKILL);
        usleep(10000);
    }
    return failed;
}

#endif
