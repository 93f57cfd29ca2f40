/* test_comm.c - every collective x dtype x op x world size 1-8 x awkward sizes,
 * on the tcp and shm backends, against a reference computed on each rank.
 *
 * Data are small integers (-5..5), so sums are exact in every dtype (bf16
 * holds integers up to 256) and in any order: the reference can be computed
 * plainly and compared bit for bit, AVG included (its one division is done
 * the same way as the library's: in the dtype's arithmetic, fp32 for halves).
 * Matching the reference bitwise on every rank means identical bits across
 * ranks; a checksum allgather checks that directly too.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "comm/comm_backend.h"
#include "comm/reduce.h"
#include "tests/unit/test_comm_harness.h"
#include "base/clock.h"

static const size_t sizes[] = {0, 1, 2, 3, 7, 13, 31, 97, 1000, 4099, 40009};
#define NSIZES (sizeof sizes / sizeof *sizes)
#define MAXN 40009

static double gen(int rank, size_t i) { return (double)((rank * 7 + (long)(i % 1000003) * 3) % 11) - 5; }

/* Reference for one element reduced over all ranks' gen(q, i). */
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

static int wrong(const char *what, enum dt_dtype t, enum dt_redop op, size_t n, size_t i)
{
    return dt_error_set(DT_EINTERNAL, "%s: wrong result (%s, %s, count %zu) at element %zu", what,
                        dt_dtype_name(t), dt_redop_name(op), n, i);
}

static int check(const char *what, enum dt_dtype t, enum dt_redop op, const char *got, const char *want, size_t n)
{
    size_t es = dt_dtype_size(t);
    for (size_t i = 0; i < n; i++)
        if (memcmp(got + i * es, want + i * es, es))
            return wrong(what, t, op, n, i);
    return 0;
}

struct bufs { char *send, *recv, *want; };

static int one_allreduce(struct dt_comm *c, struct bufs *b, int r, int w, enum dt_dtype t, enum dt_redop op,
                         size_t n, bool inplace)
{
    for (size_t i = 0; i < n; i++) {
        dt_dtype_put(t, b->send, i, gen(r, i));
        ref_put(t, op, b->want, i, w, i);
    }
    char *dst = inplace ? b->send : b->recv;
    int rc = dt_comm_allreduce(c, b->send, dst, n, t, op);
    return rc ? rc : check(inplace ? "allreduce in-place" : "allreduce", t, op, dst, b->want, n);
}

static int one_reduce_scatter(struct dt_comm *c, struct bufs *b, int r, int w, enum dt_dtype t, enum dt_redop op,
                              size_t n)
{
    for (size_t i = 0; i < n * (size_t)w; i++)
        dt_dtype_put(t, b->send, i, gen(r, i));
    for (size_t i = 0; i < n; i++)
        ref_put(t, op, b->want, i, w, (size_t)r * n + i);
    int rc = dt_comm_reduce_scatter(c, b->send, b->recv, n, t, op);
    return rc ? rc : check("reduce_scatter", t, op, b->recv, b->want, n);
}

static int one_allgather(struct dt_comm *c, struct bufs *b, int r, int w, enum dt_dtype t, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dt_dtype_put(t, b->send, i, gen(r, i));
    for (int q = 0; q < w; q++)
        for (size_t i = 0; i < n; i++)
            dt_dtype_put(t, b->want, (size_t)q * n + i, gen(q, i));
    int rc = dt_comm_allgather(c, b->send, b->recv, n, t);
    return rc ? rc : check("allgather", t, DT_SUM, b->recv, b->want, n * (size_t)w);
}

static int one_broadcast(struct dt_comm *c, struct bufs *b, int r, int root, enum dt_dtype t, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        dt_dtype_put(t, b->recv, i, gen(r, i));
        dt_dtype_put(t, b->want, i, gen(root, i));
    }
    int rc = dt_comm_broadcast(c, b->recv, n, t, root);
    return rc ? rc : check("broadcast", t, DT_SUM, b->recv, b->want, n);
}

/* Every rank's checksum of its last result must be the same. */
static int same_everywhere(struct dt_comm *c, const char *buf, size_t bytes, int w)
{
    uint64_t h = 1469598103934665603ULL, all[16];
    for (size_t i = 0; i < bytes; i++)
        h = (h ^ (uint8_t)buf[i]) * 1099511628211ULL;
    int rc = dt_comm_allgather(c, &h, all, 1, DT_I64);
    for (int q = 0; rc == 0 && q < w; q++)
        if (all[q] != h)
            rc = dt_error_set(DT_EINTERNAL, "results differ between ranks (rank %d's checksum differs)", q);
    return rc;
}

static int body_sweep(struct dt_comm *c, int r, int w, void *arg)
{
    (void)arg;
    struct bufs b = {malloc(MAXN * 8 * 8), malloc(MAXN * 8 * 8), malloc(MAXN * 8 * 8)};
    int rc = 0;
    for (int t = 0; t < DT_DTYPE_COUNT && rc == 0; t++) {
        for (int op = 0; op < DT_REDOP_COUNT && rc == 0; op++)
            for (size_t k = 0; k < NSIZES && rc == 0; k++) {
                size_t n = sizes[k];
                rc = one_allreduce(c, &b, r, w, t, op, n, k % 2);
                if (rc == 0 && k == NSIZES - 1)
                    rc = same_everywhere(c, k % 2 ? b.send : b.recv, n * dt_dtype_size(t), w);
                if (rc == 0 && (k % 3 == 0 || op == DT_SUM))
                    rc = one_reduce_scatter(c, &b, r, w, t, op, n / (size_t)w + (k % 2));
            }
        for (size_t k = 0; k < NSIZES && rc == 0; k++) {
            rc = one_allgather(c, &b, r, w, t, sizes[k] / (size_t)w + 1);
            if (rc == 0)
                rc = one_broadcast(c, &b, r, (int)(k % (size_t)w), t, sizes[k]);
        }
        if (rc == 0)
            rc = dt_comm_barrier(c);
    }
    free(b.send);
    free(b.recv);
    free(b.want);
    return rc;
}

static void sweep(const char *backend, int lo, int hi)
{
    for (int w = lo; w <= hi; w++) {
        int failed = harness_run(w, backend, 60, body_sweep, NULL);
        if (failed)
            fprintf(stderr, "%s: world %d: %d rank(s) failed\n", backend, w, failed);
        assert_int_equal(failed, 0);
    }
}

/* The tcp ring with tiny slices, segments and crossover: nearly every size
 * takes the sliced, pipelined ring (many slices, chunks of uneven length,
 * segments cut inside chunks), which the default sizes only reach at 64 MiB. */
static void tcp_ring_small_slices(void **s)
{
    (void)s;
    setenv("DTRAIN_TCP_SLICE_BYTES", "1000", 1);
    setenv("DTRAIN_TCP_SEGMENT_BYTES", "200", 1);
    setenv("DTRAIN_TCP_SMALL_BYTES", "64", 1);
    sweep("tcp", 2, 3);
    sweep("tcp", 5, 5);
    unsetenv("DTRAIN_TCP_SLICE_BYTES");
    unsetenv("DTRAIN_TCP_SEGMENT_BYTES");
    unsetenv("DTRAIN_TCP_SMALL_BYTES");
}

/* Halving-doubling (Rabenseifner) for every size above 64 B, with segments
 * cut inside its ranges: a power of two (4) and folds of 1, 2 and 3 extra
 * ranks (5, 6, 7; 3 folds one into a pair). */
static void tcp_halving_doubling(void **s)
{
    (void)s;
    setenv("DTRAIN_TCP_HALVING_BYTES", "1073741824", 1);
    setenv("DTRAIN_TCP_SEGMENT_BYTES", "200", 1);
    setenv("DTRAIN_TCP_SMALL_BYTES", "64", 1);
    sweep("tcp", 3, 7);
    unsetenv("DTRAIN_TCP_HALVING_BYTES");
    unsetenv("DTRAIN_TCP_SEGMENT_BYTES");
    unsetenv("DTRAIN_TCP_SMALL_BYTES");
}

static int body_steady(struct dt_comm *c, int r, int w, void *arg);

/* Lanes (comm/tcp/tcp_mesh.c): every allreduce from 1 KiB striped over 3
 * connection meshes and threads, stripes of uneven length, tiny segments inside them;
 * results must match the reference and be the same bits on every rank, and
 * the steady state must still allocate nothing. */
static void tcp_lanes(void **s)
{
    (void)s;
    setenv("DTRAIN_TCP_LANES", "3", 1);
    setenv("DTRAIN_TCP_LANE_BYTES", "1024", 1);
    setenv("DTRAIN_TCP_SEGMENT_BYTES", "200", 1);
    setenv("DTRAIN_TCP_SMALL_BYTES", "64", 1);
    sweep("tcp", 2, 4);
    unsetenv("DTRAIN_TCP_SEGMENT_BYTES");
    unsetenv("DTRAIN_TCP_SMALL_BYTES");
    assert_int_equal(harness_run(4, "tcp", 30, body_steady, NULL), 0);
    unsetenv("DTRAIN_TCP_LANES");
    unsetenv("DTRAIN_TCP_LANE_BYTES");
}

static void tcp_worlds_1_to_4(void **s) { (void)s; sweep("tcp", 1, 4); }
static void tcp_worlds_5_to_8(void **s) { (void)s; sweep("tcp", 5, 8); }
static void shm_worlds_1_to_4(void **s) { (void)s; sweep("shm", 1, 4); }
static void shm_worlds_5_to_8(void **s) { (void)s; sweep("shm", 5, 8); }

/* 64 MiB of f32 (16 Mi elements): ring pipelining over many segments. */
static int body_large(struct dt_comm *c, int r, int w, void *arg)
{
    (void)arg;
    size_t n = 16u << 20;
    float *x = malloc(n * 4), *y = malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)gen(r, i);
    int rc = dt_comm_allreduce(c, x, y, n, DT_F32, DT_SUM);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        double want = 0;
        for (int q = 0; q < w; q++)
            want += gen(q, i);
        if (y[i] != (float)want)
            rc = wrong("allreduce 64 MiB", DT_F32, DT_SUM, n, i);
    }
    free(x);
    free(y);
    return rc;
}

static void tcp_64mib(void **s) { (void)s; assert_int_equal(harness_run(3, "tcp", 60, body_large, NULL), 0); }
static void shm_64mib(void **s) { (void)s; assert_int_equal(harness_run(3, "shm", 60, body_large, NULL), 0); }

/* Shared buffers (dt_comm_alloc_shared): an in-place allreduce of a range of
 * one gives the bits the slot path gives for the same data, touches nothing
 * outside the range, works with requests in flight and after a free; a
 * rank that passes a shared range where its peers pass private memory fails
 * with a protocol error naming the shared buffer instead of mixing data. */
static int shared_range(struct dt_comm *c, float *buf, float *priv, int r, int w, size_t at, size_t n,
                        enum dt_redop op)
{
    for (size_t i = 0; i < n + 64 && at + i < (1u << 18); i++)
        buf[at + i] = priv[i] = (float)gen(r, i) * 0.37f + (float)r * 1e-3f; /* inexact: the order shows */
    for (size_t i = 0; i < 16 && i < at; i++)
        buf[at - 1 - i] = -1.0f - (float)i;
    int rc = dt_comm_allreduce(c, buf + at, buf + at, n, DT_F32, op);
    if (rc == 0)
        rc = dt_comm_allreduce(c, priv, priv, n, DT_F32, op);
    if (rc == 0 && (rc = check("shared allreduce", DT_F32, op, (char *)(buf + at), (char *)priv, n)) == 0)
        rc = same_everywhere(c, (char *)(buf + at), n * 4, w);
    for (size_t i = 0; rc == 0 && i < 16 && i < at; i++)
        if (buf[at - 1 - i] != -1.0f - (float)i)
            rc = dt_error_set(DT_EINTERNAL, "shared allreduce at %zu: element %zu before the range changed", at,
                              at - 1 - i);
    for (size_t i = n; rc == 0 && i < n + 64 && at + i < (1u << 18); i++)
        if (buf[at + i] != (float)gen(r, i) * 0.37f + (float)r * 1e-3f)
            rc = dt_error_set(DT_EINTERNAL, "shared allreduce at %zu: element %zu after the range changed", at,
                              at + i);
    return rc;
}

static int body_shared(struct dt_comm *c, int r, int w, void *arg)
{
    (void)arg;
    enum { N = 1 << 18 };
    static const size_t at[] = {0, 0, 4, 4, 1000, 4099, 0, 77};
    static const size_t len[] = {0, 1, 3, 7, 40009, 100003, N, 1};
    float *buf = NULL, *priv = malloc((N + 64) * sizeof *priv);
    int rc = priv ? dt_comm_alloc_shared(c, N * sizeof *buf, (void **)&buf) : DT_ENOMEM;
    if (rc == 0 && !buf)
        rc = dt_error_set(DT_EINTERNAL, "%s gave no shared buffer", dt_comm_backend_name(c));
    for (size_t k = 0; rc == 0 && k < sizeof at / sizeof *at; k++)
        rc = shared_range(c, buf, priv, r, w, at[k], len[k] < N - at[k] ? len[k] : N - at[k], k % 2 ? DT_AVG : DT_SUM);
    /* Two disjoint ranges in flight at once, as the reducer's buckets are. */
    struct dt_comm_req *q1 = NULL, *q2 = NULL;
    for (size_t i = 0; rc == 0 && i < N; i++)
        buf[i] = (float)gen(r, i);
    if (rc == 0 && (rc = dt_comm_iallreduce(c, buf + N / 2, buf + N / 2, N / 2, DT_F32, DT_SUM, &q1)) == 0 &&
        (rc = dt_comm_iallreduce(c, buf, buf, N / 2, DT_F32, DT_SUM, &q2)) == 0) {
        rc = dt_comm_wait(q1);
        int rc2 = dt_comm_wait(q2);
        rc = rc ? rc : rc2;
    }
    for (size_t i = 0; rc == 0 && i < N; i++) {
        float want;
        ref_put(DT_F32, DT_SUM, &want, 0, w, i);
        if (buf[i] != want)
            rc = wrong("shared iallreduce", DT_F32, DT_SUM, N, i);
    }
    /* Freed and allocated again: a new buffer, zeroed, that works as the first did. */
    if (rc == 0) {
        dt_comm_free_shared(c, buf);
        buf = NULL;
        rc = dt_comm_alloc_shared(c, 5000 * sizeof *buf, (void **)&buf);
    }
    for (size_t i = 0; rc == 0 && i < 5000; i++)
        if (buf[i] != 0.0f)
            rc = dt_error_set(DT_EINTERNAL, "a new shared buffer is not zeroed at %zu", i);
    if (rc == 0)
        rc = shared_range(c, buf, priv, r, w, 8, 4000, DT_AVG);
    dt_comm_free_shared(c, buf);
    free(priv);
    return rc;
}

/* Rank 0 reduces its shared buffer, rank 1 a private copy: a protocol error on both. */
static int body_shared_mismatch(struct dt_comm *c, int r, int w, void *arg)
{
    (void)w;
    (void)arg;
    float *buf = NULL, priv[100] = {0};
    int rc = dt_comm_alloc_shared(c, sizeof priv, (void **)&buf);
    if (rc)
        return rc;
    rc = dt_comm_allreduce(c, r == 0 ? buf : priv, r == 0 ? buf : priv, 100, DT_F32, DT_SUM);
    const char *msg = dt_error_last();
    dt_comm_free_shared(c, buf);
    if (rc == 0)
        return dt_error_set(DT_EINTERNAL, "a shared range against a private one was not detected");
    if (rc != DT_EPROTO || !strstr(msg, "shared buffer"))
        return dt_error_set(DT_EINTERNAL, "want a protocol error naming the shared buffer, got %d: %s", rc, msg);
    return 0;
}

/* An allreduce from a shared buffer into a common one: the slot path's bits
 * in the common buffer, the send range untouched, nothing outside the
 * result's range written, also with two requests in flight. */
static int into_common(struct dt_comm *c, float *one, int r)
{
    enum { N = 100000, AT = 1000, M = 77777 };
    float *sh = NULL, *want = malloc(N * sizeof *want);
    int rc = want ? dt_comm_alloc_shared(c, N * sizeof *sh, (void **)&sh) : DT_ENOMEM;
    for (size_t i = 0; rc == 0 && i < N; i++)
        sh[i] = want[i] = (float)gen(r, i) * 0.37f + (float)r * 1e-3f;
    if (rc == 0)
        rc = dt_comm_barrier(c); /* everyone is done reading the common buffer above */
    for (size_t i = 0; rc == 0 && i < N; i++)
        one[i] = -1.0f;
    if (rc == 0)
        rc = dt_comm_barrier(c);
    struct dt_comm_req *q1, *q2;
    if (rc == 0 && (rc = dt_comm_iallreduce(c, sh + AT + M / 2, one + AT + M / 2, M - M / 2, DT_F32, DT_AVG, &q1)) == 0 &&
        (rc = dt_comm_iallreduce(c, sh + AT, one + AT, M / 2, DT_F32, DT_AVG, &q2)) == 0) {
        rc = dt_comm_wait(q1);
        int rc2 = dt_comm_wait(q2);
        rc = rc ? rc : rc2;
    }
    if (rc == 0)
        rc = dt_comm_allreduce(c, want + AT, want + AT, M / 2, DT_F32, DT_AVG);
    if (rc == 0)
        rc = dt_comm_allreduce(c, want + AT + M / 2, want + AT + M / 2, M - M / 2, DT_F32, DT_AVG);
    if (rc == 0)
        rc = check("allreduce into a common buffer", DT_F32, DT_AVG, (char *)(one + AT), (char *)(want + AT), M);
    for (size_t i = 0; rc == 0 && i < N; i++) {
        if (sh[i] != (float)gen(r, i) * 0.37f + (float)r * 1e-3f)
            rc = dt_error_set(DT_EINTERNAL, "allreduce into a common buffer changed its send buffer at %zu", i);
        else if ((i < AT || i >= AT + M) && one[i] != -1.0f)
            rc = dt_error_set(DT_EINTERNAL, "allreduce into a common buffer wrote element %zu outside", i);
    }
    dt_comm_free_shared(c, sh);
    free(want);
    return rc;
}

/* A common buffer is one memory for all: what each rank writes there every
 * rank reads after a barrier; shared buffers allocated around it still work. */
static int body_common(struct dt_comm *c, int r, int w, void *arg)
{
    (void)arg;
    enum { N = 100000 };
    float *one = NULL, *sh = NULL, priv[16 + 64];
    int rc = dt_comm_alloc_common(c, N * sizeof(float), (void **)&one);
    if (rc == 0 && !one)
        rc = dt_error_set(DT_EINTERNAL, "%s gave no common buffer", dt_comm_backend_name(c));
    for (size_t i = 0; rc == 0 && i < N; i++)
        if (one[i] != 0.0f)
            rc = dt_error_set(DT_EINTERNAL, "a new common buffer is not zeroed at %zu", i);
    if (rc == 0)
        rc = dt_comm_barrier(c); /* everyone has looked before anyone writes */
    for (size_t i = (size_t)r; rc == 0 && i < N; i += (size_t)w)
        one[i] = (float)(i * 3 + 1);
    if (rc == 0)
        rc = dt_comm_barrier(c);
    for (size_t i = 0; rc == 0 && i < N; i++)
        if (one[i] != (float)(i * 3 + 1))
            rc = dt_error_set(DT_EINTERNAL, "common buffer: element %zu (written by rank %zu) reads %g", i,
                              i % (size_t)w, one[i]);
    if (rc == 0)
        rc = dt_comm_alloc_shared(c, 1024 * sizeof *sh, (void **)&sh); /* shared_range writes 64 past the range */
    if (rc == 0)
        rc = shared_range(c, sh, priv, r, w, 0, 16, DT_SUM);
    dt_comm_free_shared(c, sh);
    if (rc == 0)
        rc = into_common(c, one, r);
    dt_comm_free_shared(c, one);
    return rc;
}

/* A rank without room for its part (here: over DTRAIN_SHM_MAX_BYTES,
 * set in rank 1 alone; a full /dev/shm takes the same way) means no shared
 * buffer for anyone, no error, and the next buffer that fits works. */
static int body_no_room(struct dt_comm *c, int r, int w, void *arg)
{
    (void)arg;
    float *big = (float *)1, *small = NULL, priv[16 + 64];
    if (r == 1)
        setenv("DTRAIN_SHM_MAX_BYTES", "65536", 1);
    int rc = dt_comm_alloc_shared(c, 1 << 20, (void **)&big);
    if (rc == 0 && big)
        rc = dt_error_set(DT_EINTERNAL, "a shared buffer was handed out though rank 1 had no room for its part");
    big = (float *)1;
    /* rank 0 creates the common buffer: rank 1's limit does not apply */
    if (rc == 0 && (rc = dt_comm_alloc_common(c, 1 << 20, (void **)&big)) == 0 && !big)
        rc = dt_error_set(DT_EINTERNAL, "no common buffer, though rank 0 (its creator) had room");
    if (rc == 0)
        dt_comm_free_shared(c, big);
    if (rc == 0)
        rc = dt_comm_alloc_shared(c, 1024 * sizeof *small, (void **)&small);
    if (rc == 0 && !small)
        rc = dt_error_set(DT_EINTERNAL, "no shared buffer under the limit");
    if (rc == 0)
        rc = shared_range(c, small, priv, r, w, 0, 16, DT_SUM);
    dt_comm_free_shared(c, small);
    return rc;
}

/* tcp has no shared memory: none is handed out, and nothing fails. */
static int body_no_shared(struct dt_comm *c, int r, int w, void *arg)
{
    (void)r;
    (void)w;
    (void)arg;
    void *p = (void *)1;
    int rc = dt_comm_alloc_shared(c, 4096, &p);
    if (rc == 0 && p)
        rc = dt_error_set(DT_EINTERNAL, "%s handed out shared memory", dt_comm_backend_name(c));
    p = (void *)1;
    if (rc == 0 && (rc = dt_comm_alloc_common(c, 4096, &p)) == 0 && p)
        rc = dt_error_set(DT_EINTERNAL, "%s handed out common memory", dt_comm_backend_name(c));
    return rc;
}

/* auto on one host with no room in /dev/shm for shm's segment (here: over
 * DTRAIN_SHM_MAX_BYTES on every rank): every rank turns to tcp, which works. */
static int body_auto_tcp(struct dt_comm *c, int r, int w, void *arg)
{
    (void)arg;
    if (strcmp(dt_comm_backend_name(c), "tcp") != 0)
        return dt_error_set(DT_EINTERNAL, "auto picked %s with no room for shm", dt_comm_backend_name(c));
    struct bufs b = {malloc(4096), malloc(4096), malloc(4096)};
    int rc = one_allreduce(c, &b, r, w, DT_F32, DT_SUM, 100, false);
    free(b.send);
    free(b.recv);
    free(b.want);
    return rc;
}

static void auto_without_room_uses_tcp(void **s)
{
    (void)s;
    setenv("DTRAIN_SHM_MAX_BYTES", "4096", 1);
    int auto_failed = harness_run(3, "auto", 10, body_auto_tcp, NULL);
    int shm_failed = harness_run(3, "shm", 10, body_auto_tcp, NULL); /* asked for shm: every rank fails */
    /* A bad value on rank 0 is its error; the others hear of it at once, not at their 30 s deadline. */
    setenv("DTRAIN_SHM_MAX_BYTES", "lots", 1);
    double t0 = dt_clock_s();
    int bad_failed = harness_run(3, "shm", 30, body_auto_tcp, NULL);
    double took = dt_clock_s() - t0;
    unsetenv("DTRAIN_SHM_MAX_BYTES");
    assert_int_equal(auto_failed, 0);
    assert_int_equal(shm_failed, 3);
    assert_int_equal(bad_failed, 3);
    if (took > 10)
        fail_msg("a bad DTRAIN_SHM_MAX_BYTES took %.1f s to fail every rank", took);
}

static void shared_buffers(void **s)
{
    (void)s;
    for (int w = 2; w <= 5; w++)
        assert_int_equal(harness_run(w, "shm", 30, body_shared, NULL), 0);
    assert_int_equal(harness_run(2, "shm", 10, body_shared_mismatch, NULL), 0);
    assert_int_equal(harness_run(3, "shm", 10, body_common, NULL), 0);
    assert_int_equal(harness_run(3, "shm", 10, body_no_room, NULL), 0);
    assert_int_equal(harness_run(3, "tcp", 10, body_no_shared, NULL), 0);
}

/* Async: several f32 AVG requests in flight, waited in order and out of order. */
static int body_async(struct dt_comm *c, int r, int w, void *arg)
{
    (void)arg;
    enum { K = 6, N = 5000 };
    static float buf[K][N];
    struct dt_comm_req *req[K];
    int rc = 0;
    for (int k = 0; k < K && rc == 0; k++) {
        for (int i = 0; i < N; i++)
            buf[k][i] = (float)gen(r, (size_t)(i + k));
        rc = dt_comm_iallreduce(c, buf[k], buf[k], N, DT_F32, DT_AVG, &req[k]);
    }
    for (int k = K - 1; k >= 0 && rc == 0; k--)
        rc = dt_comm_wait(req[k]);
    for (int k = 0; k < K && rc == 0; k++)
        for (int i = 0; i < N && rc == 0; i++) {
            float want;
            ref_put(DT_F32, DT_AVG, &want, 0, w, (size_t)(i + k));
            if (memcmp(&want, &buf[k][i], 4))
                rc = wrong("iallreduce", DT_F32, DT_AVG, N, (size_t)i);
        }
    bool done = false;
    struct dt_comm_req *b;
    if (rc == 0 && (rc = dt_comm_ibarrier(c, &b)) == 0) {
        while (rc == 0 && !done)
            rc = dt_comm_test(b, &done);
        if (rc == 0)
            rc = dt_comm_wait(b);
    }
    return rc;
}

static void async_requests(void **s)
{
    (void)s;
    assert_int_equal(harness_run(3, "tcp", 30, body_async, NULL), 0);
    assert_int_equal(harness_run(3, "shm", 30, body_async, NULL), 0);
}

/* 64 KiB of stack below this frame, written once, so a deeper call in the
 * measured phase finds its stack pages already there. */
static __attribute__((noinline)) void touch_stack(void)
{
    volatile char pad[64 * 1024];
    for (size_t i = 0; i < sizeof pad; i += 4096)
        pad[i] = 0;
}

/* Makes every page this rank has mapped present, before the fault count
 * starts.  A forked rank maps its parent's code and data pages lazily (and
 * copies a written one on first write), so a path the warm-up never ran
 * faults once the first time it runs; under load that is the waits' slow
 * paths (a peer's futex, the check that it is alive), taken in a random
 * iteration: 1 fault in about one run in three with two CPU hogs beside the
 * 4 ranks on 2 cores.  Those are no allocation.  MADV_POPULATE_WRITE breaks
 * the copy-on-write of every writable page, _READ maps the rest; after that
 * a fault is memory the steady state touched for the first time. */
static int prefault(void)
{
    touch_stack();
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return dt_error_set(DT_EIO, "/proc/self/maps: %s", strerror(errno));
    char line[512];
    int rc = 0;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char perms[8], path[256] = "";
        if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %255s", &lo, &hi, perms, path) < 3)
            continue;
        /* guard pages, and the kernel's own ([vvar], [vdso], [vsyscall]) */
        if (perms[0] != 'r' || (path[0] == '[' && strcmp(path, "[heap]") && strcmp(path, "[stack]")))
            continue;
        int advice = perms[1] == 'w' ? MADV_POPULATE_WRITE : MADV_POPULATE_READ;
        if (madvise((void *)lo, hi - lo, advice) != 0)
            rc = dt_error_set(DT_EIO, "madvise(%s) of %lx-%lx %s %s: %s",
                              advice == MADV_POPULATE_WRITE ? "MADV_POPULATE_WRITE" : "MADV_POPULATE_READ", lo,
                              hi, perms, path, strerror(errno));
    }
    fclose(f);
    return rc;
}

/* Steady state allocates nothing and touches no fresh page: after warm-up,
 * 50 more collectives of each kind leave the heap and the minor-fault count
 * unchanged (comm.h: steady-state collectives allocate nothing). */
static int body_steady(struct dt_comm *c, int r, int w, void *arg)
{
    (void)r;
    (void)w;
    (void)arg;
    enum { N = 1 << 18 }; /* 1 MiB of f32: the ring path; 64 floats: the small path */
    float *x = calloc(N, 4), *y = calloc(N, 4), *g = calloc((size_t)N * 4, 4), *sh = NULL;
    int rc = dt_comm_alloc_shared(c, N * 4, (void **)&sh);
    struct rusage ru0 = {0}, ru1;
    struct mallinfo2 m0 = {0}, m1;
    for (int phase = 0; phase < 2 && rc == 0; phase++) {
        if (phase == 1) {
            if ((rc = prefault()) != 0)
                break;
            getrusage(RUSAGE_SELF, &ru0);
            m0 = mallinfo2();
        }
        for (int i = 0; i < 50 && rc == 0; i++) {
            struct dt_comm_req *req;
            rc = dt_comm_allreduce(c, x, y, N, DT_F32, DT_SUM);
            if (rc == 0)
                rc = dt_comm_allreduce(c, x, x, 64, DT_F32, DT_AVG);
            if (rc == 0)
                rc = dt_comm_reduce_scatter(c, g, y, N / 4, DT_F32, DT_SUM);
            if (rc == 0)
                rc = dt_comm_allgather(c, x, g, N / 4, DT_F32);
            if (rc == 0)
                rc = dt_comm_broadcast(c, x, N, DT_F32, 0);
            if (rc == 0 && (rc = dt_comm_iallreduce(c, y, y, N, DT_F32, DT_AVG, &req)) == 0)
                rc = dt_comm_wait(req);
            if (rc == 0 && sh) /* shm: the shared buffers' path */
                rc = dt_comm_allreduce(c, sh, sh, N, DT_F32, DT_AVG);
        }
    }
    getrusage(RUSAGE_SELF, &ru1);
    m1 = mallinfo2();
#ifdef __SANITIZE_ADDRESS__
    /* AddressSanitizer touches shadow pages of its own: only the plain build can count. */
    if (r == 0)
        fprintf(stderr, "note: under AddressSanitizer the page-fault count is not checked (%ld faults)\n",
                ru1.ru_minflt - ru0.ru_minflt);
#else
    if (rc == 0 && ru1.ru_minflt != ru0.ru_minflt)
        rc = dt_error_set(DT_EINTERNAL, "%ld page faults in steady state", ru1.ru_minflt - ru0.ru_minflt);
#endif
    if (rc == 0 && (m1.uordblks != m0.uordblks || m1.hblkhd != m0.hblkhd))
        rc = dt_error_set(DT_EINTERNAL, "the heap changed in steady state (%zu -> %zu bytes in use)", m0.uordblks,
                          m1.uordblks);
    dt_comm_free_shared(c, sh);
    free(x);
    free(y);
    free(g);
    return rc;
}

static void steady_state_allocates_nothing(void **s)
{
    (void)s;
    assert_int_equal(harness_run(4, "tcp", 30, body_steady, NULL), 0);
    assert_int_equal(harness_run(4, "shm", 30, body_steady, NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tcp_worlds_1_to_4), cmocka_unit_test(tcp_worlds_5_to_8),
        cmocka_unit_test(shm_worlds_1_to_4), cmocka_unit_test(shm_worlds_5_to_8),
        cmocka_unit_test(tcp_ring_small_slices), cmocka_unit_test(tcp_halving_doubling),
        cmocka_unit_test(tcp_lanes),
        cmocka_unit_test(tcp_64mib),         cmocka_unit_test(shm_64mib),
        cmocka_unit_test(async_requests),    cmocka_unit_test(steady_state_allocates_nothing),
        cmocka_unit_test(shared_buffers),    cmocka_unit_test(auto_without_room_uses_tcp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
