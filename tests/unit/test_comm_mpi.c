/* test_comm_mpi.c - the MPI backend (comm/mpi/) under real Open MPI: every
 * collective x dtype x op at awkward sizes against a reference, async
 * requests, and its failure paths (not launched by mpirun, rank mismatch, a
 * stalled peer hitting the deadline, a rank that dies).
 *
 * The cmocka process is not an MPI process: each test runs
 * `mpirun -np N --oversubscribe <this binary> --rank BODY` on loopback and
 * reads what the ranks printed.  In rank mode the binary builds a communicator
 * with backend "mpi" and no store (MPI wires the ranks), runs BODY and exits
 * 0 or 1.  Data are small integers, so sums are exact in every dtype and any
 * reduction order, and results are compared bit for bit (the reference is the
 * one of test_comm.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm.h"
#include "base/error.h"
#include "comm/reduce.h"

static char self_path[4096];

static double gen(int rank, size_t i) { return (double)((rank * 7 + (long)(i % 1000003) * 3) % 11) - 5; }

static void ref_put(enum dt_dtype t, enum dt_redop op, void *buf, size_t at, int world, size_t i)
{
    double acc = gen(0, i);
    for (int q = 1; q < world; q++) {
        double v = gen(q, i);
        acc = op == DT_MAX ? (v > acc ? v : acc) : op == DT_MIN ? (v < acc ? v : acc) : acc + v;
    }
    if (op == DT_AVG) {
        switch (t) {
        case DT_F64: acc = acc / world; break;
        case DT_I32: case DT_I64: acc = (double)((int64_t)acc / world); break;
        default: acc = (double)((float)acc / (float)world); break;
        }
    }
    dt_dtype_put(t, buf, at, acc);
}

static int check(const char *what, enum dt_dtype t, enum dt_redop op, const char *got, const char *want, size_t n)
{
    size_t es = dt_dtype_size(t);
    for (size_t i = 0; i < n; i++)
        if (memcmp(got + i * es, want + i * es, es))
            return dt_error_set(DT_EINTERNAL, "%s: wrong result (%s, %s, count %zu) at element %zu", what,
                                dt_dtype_name(t), dt_redop_name(op), n, i);
    return 0;
}

/* ---- rank mode ---------------------------------------------------------- */

static const size_t sizes[] = {0, 1, 3, 13, 97, 4099, 40009};
#define NSIZES (sizeof sizes / sizeof *sizes)
#define MAXN 40009

static int sweep_one(struct dt_comm *c, char *snd, char *rcv, char *want, int r, int w, enum dt_dtype t,
                     enum dt_redop op, size_t k)
{
    size_t n = sizes[k];
    for (size_t i = 0; i < n; i++) {
        dt_dtype_put(t, snd, i, gen(r, i));
        ref_put(t, op, want, i, w, i);
    }
    char *dst = k % 2 ? snd : rcv; /* odd sizes in place */
    int rc = dt_comm_allreduce(c, snd, dst, n, t, op);
    if (rc == 0)
        rc = check(k % 2 ? "allreduce in-place" : "allreduce", t, op, dst, want, n);
    size_t m = n / (size_t)w + 1; /* reduce_scatter: m per rank */
    for (size_t i = 0; rc == 0 && i < m * (size_t)w; i++)
        dt_dtype_put(t, snd, i, gen(r, i));
    for (size_t i = 0; rc == 0 && i < m; i++)
        ref_put(t, op, want, i, w, (size_t)r * m + i);
    if (rc == 0 && (rc = dt_comm_reduce_scatter(c, snd, rcv, m, t, op)) == 0)
        rc = check("reduce_scatter", t, op, rcv, want, m);
    return rc;
}

static int body_sweep(struct dt_comm *c, int r, int w)
{
    size_t cap = (size_t)MAXN * 8 * 8;
    char *snd = malloc(cap), *rcv = malloc(cap), *want = malloc(cap);
    int rc = 0;
    for (int t = 0; t < DT_DTYPE_COUNT && rc == 0; t++) {
        for (int op = 0; op < DT_REDOP_COUNT && rc == 0; op++)
            for (size_t k = 0; k < NSIZES && rc == 0; k++)
                rc = sweep_one(c, snd, rcv, want, r, w, t, op, k);
        for (size_t k = 0; k < NSIZES && rc == 0; k++) {
            size_t n = sizes[k] / (size_t)w + 1, es = dt_dtype_size(t);
            for (size_t i = 0; i < n; i++)
                dt_dtype_put(t, snd, i, gen(r, i));
            for (int q = 0; q < w; q++)
                for (size_t i = 0; i < n; i++)
                    dt_dtype_put(t, want, (size_t)q * n + i, gen(q, i));
            /* Even sizes: in place, our block already at its place in recv. */
            const char *src = snd;
            if (k % 2 == 0) {
                memcpy(rcv + (size_t)r * n * es, snd, n * es);
                src = rcv + (size_t)r * n * es;
            }
            if ((rc = dt_comm_allgather(c, src, rcv, n, t)) == 0)
                rc = check("allgather", t, DT_SUM, rcv, want, n * (size_t)w);
            int root = (int)(k % (size_t)w);
            for (size_t i = 0; rc == 0 && i < sizes[k]; i++) {
                dt_dtype_put(t, rcv, i, gen(r, i));
                dt_dtype_put(t, want, i, gen(root, i));
            }
            if (rc == 0 && (rc = dt_comm_broadcast(c, rcv, sizes[k], t, root)) == 0)
                rc = check("broadcast", t, DT_SUM, rcv, want, sizes[k]);
        }
        if (rc == 0)
            rc = dt_comm_barrier(c);
    }
    free(snd);
    free(rcv);
    free(want);
    return rc;
}

/* Several requests in flight on the communication thread, waited out of order. */
static int body_async(struct dt_comm *c, int r, int w)
{
    enum { K = 6, N = 5000 };
    static float buf[K][N];
    static uint16_t half[N], want[N];
    struct dt_comm_req *req[K + 1];
    int rc = 0;
    for (int k = 0; k < K && rc == 0; k++) {
        for (int i = 0; i < N; i++)
            buf[k][i] = (float)gen(r, (size_t)(i + k));
        rc = dt_comm_iallreduce(c, buf[k], buf[k], N, DT_F32, DT_AVG, &req[k]);
    }
    for (int i = 0; i < N; i++) {
        dt_dtype_put(DT_BF16, half, (size_t)i, gen(r, (size_t)i));
        ref_put(DT_BF16, DT_MAX, want, (size_t)i, w, (size_t)i);
    }
    if (rc == 0)
        rc = dt_comm_iallreduce(c, half, half, N, DT_BF16, DT_MAX, &req[K]);
    for (int k = K; k >= 0 && rc == 0; k--)
        rc = dt_comm_wait(req[k]);
    for (int k = 0; k < K && rc == 0; k++) {
        float ref[N];
        for (int i = 0; i < N; i++)
            ref_put(DT_F32, DT_AVG, ref, (size_t)i, w, (size_t)(i + k));
        rc = check("iallreduce", DT_F32, DT_AVG, (char *)buf[k], (char *)ref, N);
    }
    return rc ? rc : check("iallreduce bf16", DT_BF16, DT_MAX, (char *)half, (char *)want, N);
}

/* Rank 1 stalls: the others must fail at the 1 s deadline, not hang. */
static int body_stall(struct dt_comm *c, int r, int w)
{
    (void)w;
    if (r == 1) {
        sleep(20);
        return 0;
    }
    float x = 1;
    return dt_comm_allreduce(c, &x, &x, 1, DT_F32, DT_SUM);
}

/* Rank 1 dies with status 3 before the collective the others wait in. */
static int body_die(struct dt_comm *c, int r, int w)
{
    (void)w;
    if (r == 1)
        exit(3);
    float x = 1;
    return dt_comm_allreduce(c, &x, &x, 1, DT_F32, DT_SUM);
}

static int rank_main(const char *body)
{
    const char *rs = getenv("OMPI_COMM_WORLD_RANK"), *ws = getenv("OMPI_COMM_WORLD_SIZE");
    if (!rs || !ws) {
        fprintf(stderr, "--rank needs to run under mpirun\n");
        return 1;
    }
    int r = atoi(rs), w = atoi(ws);
    bool stall = !strcmp(body, "stall");
    /* "mismatch": claim one rank too many, which init must refuse. */
    struct dt_comm_options o = {.backend = "mpi", .rank = r, .world = w + !strcmp(body, "mismatch"),
                                .local_rank = r, .local_world = w, .timeout_s = stall ? 1 : 60};
    struct dt_comm *c = NULL;
    int rc = dt_comm_init(&o, &c);
    if (rc == 0) {
        rc = !strcmp(body, "sweep") ? body_sweep(c, r, w)
             : !strcmp(body, "async") ? body_async(c, r, w)
             : stall                  ? body_stall(c, r, w)
             : !strcmp(body, "die")   ? body_die(c, r, w)
                                      : dt_error_set(DT_EINVAL, "unknown body %s", body);
    }
    if (rc)
        printf("rank %d failed: %s\n", r, dt_error_last());
    else
        printf("rank %d ok\n", r);
    fflush(stdout);
    if (rc && c)
        dt_comm_abort(c);
    dt_comm_destroy(c);
    return rc ? 1 : 0;
}

/* ---- cmocka side -------------------------------------------------------- */

/* Runs the body on n ranks under mpirun; returns mpirun's exit status and
 * what the ranks printed (truncated to out's size) and how long it took. */
/* mpirun's --timeout ends a job that hangs (Open MPI 4.1 has been seen to
 * wait forever once, under load, for two ranks that both exited non-zero
 * without MPI_Finalize: open-mpi/ompi#3380) and prints each process's state,
 * so a hang fails this test in 3 minutes with a diagnosis, not in run-tests'
 * 10 with none. */
static int mpirun(int n, const char *body, char *out, size_t size, double *secs)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "mpirun -np %d --oversubscribe --timeout 180 --report-state-on-timeout %s "
             "--mca btl self,vader,tcp --mca btl_tcp_if_include lo "
             "--mca oob_tcp_if_include lo --mca btl_vader_single_copy_mechanism none %s --rank %s 2>&1",
             n, geteuid() == 0 ? "--allow-run-as-root" : "", self_path, body);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t len = fread(out, 1, size - 1, p);
    out[len] = 0;
    char sink[4096];
    while (fread(sink, 1, sizeof sink, p) > 0) {
    }
    int st = pclose(p);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    *secs = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static char out[1 << 16];

static void expect_ok(int n, const char *body)
{
    double secs;
    int st = mpirun(n, body, out, sizeof out, &secs);
    if (st != 0)
        fprintf(stderr, "mpirun -np %d %s: status %d\n%s\n", n, body, st, out);
    assert_int_equal(st, 0);
    for (int r = 0; r < n; r++) {
        char want[32];
        snprintf(want, sizeof want, "rank %d ok", r);
        assert_non_null(strstr(out, want));
    }
}

static void sweep_world_2(void **s) { (void)s; expect_ok(2, "sweep"); }
static void sweep_world_3(void **s) { (void)s; expect_ok(3, "sweep"); }
static void async_world_3(void **s) { (void)s; expect_ok(3, "async"); }

static void refuses_rank_mismatch(void **s)
{
    (void)s;
    double secs;
    int st = mpirun(2, "mismatch", out, sizeof out, &secs);
    assert_int_not_equal(st, 0);
    if (!strstr(out, "MPI says this process is rank 0 of 2, but dtrain was told rank 0 of 3"))
        fail_msg("no mismatch message in:\n%s", out);
}

static void stalled_peer_times_out(void **s)
{
    (void)s;
    double secs;
    int st = mpirun(2, "stall", out, sizeof out, &secs);
    assert_int_not_equal(st, 0);
    if (!strstr(out, "rank 0 failed: rank 0: allreduce #1 (mpi): not finished after 1 s"))
        fail_msg("no deadline message in:\n%s", out);
    assert_true(secs < 15); /* rank 1 sleeps 20 s: mpirun ended it when rank 0 failed */
}

static void dead_rank_ends_job(void **s)
{
    (void)s;
    double secs;
    int st = mpirun(3, "die", out, sizeof out, &secs);
    assert_int_equal(st, 3); /* mpirun exits with the failed rank's status */
    if (!strstr(out, "Exit code:    3"))
        fail_msg("mpirun did not name the failed rank:\n%s", out);
    assert_true(secs < 30); /* the survivors' deadline is 60 s: mpirun ended them */
}

static void needs_mpirun(void **s)
{
    (void)s;
    struct dt_comm_options o = {.backend = "mpi", .rank = 0, .world = 2, .timeout_s = 1};
    struct dt_comm *c = NULL;
    assert_int_equal(dt_comm_init(&o, &c), DT_EUNSUPPORTED);
    assert_non_null(strstr(dt_error_last(), "not started by mpirun"));
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--rank"))
        return rank_main(argv[2]);
#ifndef DT_HAVE_MPI
    fprintf(stderr, "test_comm_mpi: this build has no MPI backend (mpicc was not found when it was built; "
                    "scripts/install-deps.sh installs openmpi-bin and libopenmpi-dev)\n");
    return 1;
#endif
    ssize_t n = readlink("/proc/self/exe", self_path, sizeof self_path - 1);
    if (n <= 0)
        return 1;
    self_path[n] = 0;
    unsetenv("OMPI_COMM_WORLD_SIZE");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(needs_mpirun),       cmocka_unit_test(sweep_world_2),
        cmocka_unit_test(sweep_world_3),      cmocka_unit_test(async_world_3),
        cmocka_unit_test(refuses_rank_mismatch), cmocka_unit_test(stalled_peer_times_out),
        cmocka_unit_test(dead_rank_ends_job),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
