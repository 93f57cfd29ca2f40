/* test_comm_fault.c - failures: a peer killed or stopped in the middle of a
 * collective makes every survivor fail within the deadline with a message
 * naming the operation and the rank that died or stalled; the survivors
 * can then build a new communicator and work; with op_timeout_s (the job's
 * heartbeat_timeout) a stalled peer is named in that time, not the
 * bootstrap's timeout, unless the peer announced its pause (dt_comm_busy).
 * Also: mismatched collectives, abort from another thread, and a bootstrap
 * whose peer never comes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <signal.h>
#include <time.h>

#include "comm/comm_backend.h"
#include "tests/unit/test_comm_harness.h"
#include "base/clock.h"

#define VICTIM 2
#define TIMEOUT 3.0

static void *signal_self_later(void *arg)
{
    int sig = *(int *)arg;
    usleep(150000);
    /* harness_run kills the stopped rank once the others are done; should the
     * harness die first, this watchdog ends it, while it is still its parent. */
    pid_t victim = getpid();
    if (sig == SIGSTOP && fork() == 0) {
        usleep((useconds_t)((TIMEOUT + 4) * 1e6));
        if (getppid() == victim)
            kill(victim, SIGKILL);
        _exit(0);
    }
    kill(getpid(), sig);
    return NULL;
}

/* Survivors: a second communicator over the survivors, renumbered, must work. */
static int rebuild(int rank, const char *backend)
{
    int nr = rank < VICTIM ? rank : rank - 1;
    char prefix[128];
    snprintf(prefix, sizeof prefix, "%sagain/", harness_rank_prefix);
    struct dt_comm_options o = {.backend = backend, .rank = nr, .world = 3, .local_rank = nr, .local_world = 3,
                                .store = harness_rank_store, .key_prefix = prefix, .timeout_s = 10};
    struct dt_comm *c;
    int rc = dt_comm_init(&o, &c);
    if (rc < 0)
        return rc;
    int x = nr + 1, y = 0;
    rc = dt_comm_allreduce(c, &x, &y, 1, DT_I32, DT_SUM);
    if (rc == 0 && y != 6)
        rc = dt_error_set(DT_EINTERNAL, "rebuilt communicator: sum %d, wanted 6", y);
    dt_comm_destroy(c);
    return rc;
}

struct fault {
    const char *backend;
    int sig;
    char marks[64];
    double limit_s; /* 0: TIMEOUT + 1.5 */
};

static int body_fault(struct dt_comm *c, int rank, int world, void *arg)
{
    (void)world;
    const struct fault *f = arg;
    size_t n = 1 << 20;
    float *x = calloc(n, 4);
    pthread_t th;
    if (rank == VICTIM)
        pthread_create(&th, NULL, signal_self_later, (void *)&f->sig);
    int rc = 0;
    double t0 = 0;
    for (int i = 0; i < 100000 && rc == 0; i++) {
        t0 = dt_clock_s();
        rc = dt_comm_allreduce(c, x, x, n, DT_F32, DT_SUM);
    }
    free(x);
    double took = dt_clock_s() - t0;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", dt_error_last());
    fprintf(stderr, "rank %d saw (%.2f s): %s\n", rank, took, msg);
    if (rc != DT_ECONN && rc != DT_ETIMEDOUT)
        return dt_error_set(DT_EINTERNAL, "wanted DT_ECONN or DT_ETIMEDOUT, got %d: %s", rc, msg);
    double limit = f->limit_s > 0 ? f->limit_s : TIMEOUT + 1.5;
    if (took > limit)
        return dt_error_set(DT_EINTERNAL, "the failing allreduce took %.2f s (at most %.1f s)", took, limit);
    if (!strstr(msg, "allreduce") || !strstr(msg, "peer rank"))
        return dt_error_set(DT_EINTERNAL, "message does not name the operation and a peer: %s", msg);
    /* Every survivor names the failed rank, not only its neighbours: shm
     * through the segment's first-failure record, tcp through the failure
     * notices (comm/tcp/tcp_engine.c).  Each survivor leaves a mark the parent
     * counts. */
    if (!strstr(msg, "peer rank 2 "))
        return dt_error_set(DT_EINTERNAL, "message does not name the failed rank 2: %s", msg);
    char mark[128];
    snprintf(mark, sizeof mark, "%s.%d", f->marks, rank);
    fclose(fopen(mark, "w"));
    rc = dt_comm_allreduce(c, &rc, &rc, 1, DT_I32, DT_SUM);
    if (rc >= 0)
        return dt_error_set(DT_EINTERNAL, "a failed communicator accepted another collective");
    return rebuild(rank, f->backend);
}

static void run_fault_in(const char *backend, int sig, double timeout_s, double limit_s)
{
    struct fault f = {backend, sig, "", limit_s};
    snprintf(f.marks, sizeof f.marks, "/tmp/dtrain-fault-%d", (int)getpid());
    /* the victim is the one rank that must not exit cleanly */
    assert_int_equal(harness_run(4, backend, timeout_s, body_fault, &f), 1);
    int named = 0;
    for (int r = 0; r < 4; r++) {
        char mark[128];
        snprintf(mark, sizeof mark, "%s.%d", f.marks, r);
        named += unlink(mark) == 0;
    }
    assert_int_equal(named, 3); /* every survivor named rank 2 */
}

static void run_fault(const char *backend, int sig)
{
    run_fault_in(backend, sig, TIMEOUT, 0);
}

static void tcp_killed_peer(void **s) { (void)s; run_fault("tcp", SIGKILL); }
static void shm_killed_peer(void **s) { (void)s; run_fault("shm", SIGKILL); }
static void tcp_stalled_peer(void **s) { (void)s; run_fault("tcp", SIGSTOP); }
static void shm_stalled_peer(void **s) { (void)s; run_fault("shm", SIGSTOP); }

/* The same over 3 lanes (comm/tcp/tcp_mesh.c): a 4 MiB allreduce is 3 stripes
 * on 3 connection meshes, each on its own thread; every lane must fail in time
 * and the message still names the operation and rank 2. */
static void tcp_lanes_fault(int sig)
{
    setenv("DTRAIN_TCP_LANES", "3", 1);
    run_fault("tcp", sig);
    unsetenv("DTRAIN_TCP_LANES");
}
/* Bootstrap may wait 30 s for every rank; a collective's stalled peer is
 * named after op_timeout_s (1 s), well before TIMEOUT. */
static void tcp_stall_named_after_op_timeout(void **s)
{
    (void)s;
    harness_op_timeout_s = 1.0;
    run_fault_in("tcp", SIGSTOP, 30, 2.2);
    harness_op_timeout_s = 0;
}

/* Rank 0 leaves the collectives for 2.5 s (a checkpoint write) while the
 * others wait in an allreduce with a 1 s stall deadline: announced, they wait
 * (a small allreduce, then a 4 MiB one over 3 lanes); unannounced, they fail. */
static int body_pause(struct dt_comm *c, int rank, int world, void *arg)
{
    bool announce = *(bool *)arg;
    static float big[1 << 20];
    int one = 1;
    if (rank == 0) {
        if (announce)
            dt_comm_busy(c, true);
        usleep(2500000);
        dt_comm_busy(c, false);
    }
    int rc = dt_comm_allreduce(c, &one, &one, 1, DT_I32, DT_SUM);
    if (rc == 0 && one != world)
        return dt_error_set(DT_EINTERNAL, "allreduce after the pause: %d, wanted %d", one, world);
    for (size_t i = 0; rc == 0 && i < sizeof big / sizeof *big; i++)
        big[i] = 1;
    if (rc == 0 && rank == 0) {
        if (announce)
            dt_comm_busy(c, true);
        usleep(2500000);
        dt_comm_busy(c, false);
    }
    if (rc == 0)
        rc = dt_comm_allreduce(c, big, big, sizeof big / sizeof *big, DT_F32, DT_SUM);
    if (rc == 0 && big[12345] != (float)world)
        return dt_error_set(DT_EINTERNAL, "4 MiB allreduce after the pause: %g, wanted %d", big[12345],
                            world);
    return rc;
}

static void tcp_announced_pause_is_no_stall(void **s)
{
    (void)s;
    setenv("DTRAIN_TCP_LANES", "3", 1);
    harness_op_timeout_s = 1.0;
    bool announce = true;
    assert_int_equal(harness_run(3, "tcp", 30, body_pause, &announce), 0);
    announce = false;
    assert_int_equal(harness_run(3, "tcp", 30, body_pause, &announce), 3);
    harness_op_timeout_s = 0;
    unsetenv("DTRAIN_TCP_LANES");
}

static void tcp_lanes_killed_peer(void **s) { (void)s; tcp_lanes_fault(SIGKILL); }
static void tcp_lanes_stalled_peer(void **s) { (void)s; tcp_lanes_fault(SIGSTOP); }

static int body_mismatch(struct dt_comm *c, int rank, int world, void *arg)
{
    (void)world;
    (void)arg;
    float x[64] = {0};
    int rc = dt_comm_allreduce(c, x, x, rank == 0 ? 10 : 20, DT_F32, DT_SUM);
    if (rc == 0)
        return dt_error_set(DT_EINTERNAL, "mismatched counts were not detected");
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", dt_error_last());
    if (rank == 1 && (rc != DT_EPROTO || !strstr(msg, "same order")))
        return dt_error_set(DT_EINTERNAL, "rank 1 wanted a protocol error, got: %s", msg);
    return 0;
}

static void mismatch_detected(void **s)
{
    (void)s;
    assert_int_equal(harness_run(2, "tcp", TIMEOUT, body_mismatch, NULL), 0);
    assert_int_equal(harness_run(2, "shm", TIMEOUT, body_mismatch, NULL), 0);
}

static void *abort_later(void *arg)
{
    usleep(200000);
    dt_comm_abort(arg);
    return NULL;
}

/* Rank 1 never joins the collective; rank 0 is aborted from another thread. */
static int body_abort(struct dt_comm *c, int rank, int world, void *arg)
{
    (void)world;
    const char *backend = arg;
    if (rank == 1) {
        usleep(1500000);
        return 0;
    }
    pthread_t th;
    pthread_create(&th, NULL, abort_later, c);
    double t0 = dt_clock_s();
    float x = 1;
    int rc = dt_comm_allreduce(c, &x, &x, 1, DT_F32, DT_SUM);
    pthread_join(th, NULL);
    if (rc != DT_EABORTED || dt_clock_s() - t0 > 1.0)
        return dt_error_set(DT_EINTERNAL, "%s: wanted a prompt DT_EABORTED, got %d after %.2f s", backend, rc,
                            dt_clock_s() - t0);
    return 0;
}

static void abort_interrupts(void **s)
{
    (void)s;
    assert_int_equal(harness_run(2, "tcp", 10, body_abort, "tcp"), 0);
    assert_int_equal(harness_run(2, "shm", 10, body_abort, "shm"), 0);
}

static void bootstrap_peer_missing(void **s)
{
    (void)s;
    harness_start();
    struct dt_store *st;
    assert_int_equal(harness_store(&st), 0);
    const char *backends[] = {"tcp", "shm"};
    for (int i = 0; i < 2; i++) {
        struct dt_comm_options o = {.backend = backends[i], .rank = 1, .world = 2, .local_rank = 1,
                                    .local_world = 2, .store = st, .key_prefix = i ? "lonely-shm/" : "lonely-tcp/",
                                    .timeout_s = 0.5};
        struct dt_comm *c = NULL;
        double t0 = dt_clock_s();
        int rc = dt_comm_init(&o, &c);
        assert_true(rc < 0);
        assert_null(c);
        assert_true(dt_clock_s() - t0 < 3);
        assert_non_null(strstr(dt_error_last(), i ? "rank 0" : "peer rank 0"));
    }
    dt_store_close(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tcp_killed_peer),
        cmocka_unit_test(shm_killed_peer),
        cmocka_unit_test(tcp_stalled_peer),
        cmocka_unit_test(shm_stalled_peer),
        cmocka_unit_test(tcp_stall_named_after_op_timeout),
        cmocka_unit_test(tcp_announced_pause_is_no_stall),
        cmocka_unit_test(tcp_lanes_killed_peer),
        cmocka_unit_test(tcp_lanes_stalled_peer),
        cmocka_unit_test(mismatch_detected),
        cmocka_unit_test(abort_interrupts),
        cmocka_unit_test(bootstrap_peer_missing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
