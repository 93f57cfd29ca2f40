/* test_nccl.c - the NCCL communicator through comm.h on device buffers.
 *
 * One GPU: a single-rank communicator (no store) runs every collective, in
 * and out of place, blocking and async, for several types and reductions,
 * against the reference (a world of one: the input itself); an async
 * all-reduce must wait for a large copy queued before it on the compute
 * stream; dt_comm_abort() makes later operations fail at once.  Bootstrap
 * faults: a rank whose rank 0 never publishes the unique id, and a rank 0
 * whose peer never arrives, both return DT_ETIMEDOUT near the deadline instead
 * of hanging.  With two or more GPUs: forked ranks all-reduce with exact
 * integer-valued sums and averages, and a rank that dies leaves the others
 * with an error, not a hang.
 *
 * Every scenario runs in a forked child so the parent never initialises CUDA
 * (a CUDA context does not survive fork).
 */
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/comm_backend.h"
#include "base/error.h"
#include "comm/nccl/nccl_comm.h"
#include "comm/store.h"
#include "launcher/coordinator/coordinator.h"
#include "tests/gpu/gpu_test.h"
#include "base/clock.h"

static struct dt_coord *coord;

/* Runs fn in a child with a 120 s alarm; its TAP lines go to stdout. */
static int in_child(void (*fn)(void *), void *arg, int *passed, int *failed)
{
    int fds[2];
    if (pipe(fds) < 0)
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        alarm(120);
        fn(arg);
        dprintf(fds[1], "%d %d\n", gt_passed, gt_failed);
        fflush(NULL);
        _exit(0);
    }
    close(fds[1]);
    char buf[64] = {0};
    ssize_t got = read(fds[0], buf, sizeof buf - 1);
    close(fds[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    if (got <= 0 || sscanf(buf, "%d %d", passed, failed) != 2) {
        *passed = 0;
        *failed = 1;
        printf("not ok - a test child died (status %d)\n", st);
    }
    return 0;
}

static void run(void (*fn)(void *), void *arg)
{
    int p = 0, f = 0;
    in_child(fn, arg, &p, &f);
    gt_passed += p;
    gt_failed += f;
}

static int device_count(void)
{
    int fds[2], n = 0;
    if (pipe(fds) < 0)
        return 0;
    pid_t pid = fork();
    if (pid == 0) {
        int c = 0;
        dt_nccl_device_count(&c);
        dprintf(fds[1], "%d\n", c);
        _exit(0);
    }
    close(fds[1]);
    char buf[16] = {0};
    if (read(fds[0], buf, sizeof buf - 1) > 0)
        n = atoi(buf);
    close(fds[0]);
    waitpid(pid, NULL, 0);
    return n;
}

static struct dt_comm *single_rank(void)
{
    struct dt_comm_options o = {.backend = "nccl", .rank = 0, .world = 1, .timeout_s = 30, .cuda_device = 0};
    struct dt_comm *c = NULL;
    int rc = dt_comm_init(&o, &c);
    gt_result(rc == 0, "single-rank nccl communicator: init%s%s", rc ? ": " : "", rc ? dt_error_last() : "");
    return c;
}

/* Fills n elements of type t with i % 97 - 40 (exact in every type). */
static void *pattern(enum dt_dtype t, size_t n)
{
    size_t es = dt_dtype_size(t);
    unsigned char *h = malloc(n * es);
    for (size_t i = 0; i < n; i++) {
        double v = (double)(i % 97) - 40;
        float f = (float)v;
        int32_t i32 = (int32_t)v;
        int64_t i64 = (int64_t)v;
        uint16_t b = gt_to_bf16(f);
        switch (t) {
        case DT_F32: memcpy(h + i * es, &f, 4); break;
        case DT_F64: memcpy(h + i * es, &v, 8); break;
        case DT_BF16: memcpy(h + i * es, &b, 2); break;
        case DT_I32: memcpy(h + i * es, &i32, 4); break;
        case DT_I64: memcpy(h + i * es, &i64, 8); break;
        default: memset(h + i * es, 0, es); break;
        }
    }
    return h;
}

static void single_collectives(void *arg)
{
    (void)arg;
    struct dt_comm *c = single_rank();
    if (!c)
        return;
    const enum dt_dtype types[] = {DT_F32, DT_F64, DT_BF16, DT_I32, DT_I64};
    const size_t n = 1 << 20;
    for (int ti = 0; ti < 5; ti++) {
        enum dt_dtype t = types[ti];
        size_t bytes = n * dt_dtype_size(t);
        void *h = pattern(t, n), *back = malloc(bytes), *s, *r;
        dt_nccl_mem_alloc(&s, bytes);
        dt_nccl_mem_alloc(&r, bytes);
        for (int op = DT_SUM; op < DT_REDOP_COUNT; op++) {
            dt_nccl_mem_copy(s, h, bytes);
            dt_nccl_mem_set(r, 0, bytes);
            int rc = dt_comm_allreduce(c, s, r, n, t, (enum dt_redop)op);
            dt_nccl_mem_copy(back, r, bytes);
            gt_result(rc == 0 && !memcmp(back, h, bytes), "allreduce %s %s out of place (1 rank) %s",
                      dt_dtype_name(t), dt_redop_name((enum dt_redop)op), rc ? dt_error_last() : "");
            rc = dt_comm_allreduce(c, s, s, n, t, (enum dt_redop)op);
            dt_nccl_mem_copy(back, s, bytes);
            gt_result(rc == 0 && !memcmp(back, h, bytes), "allreduce %s %s in place (1 rank)", dt_dtype_name(t),
                      dt_redop_name((enum dt_redop)op));
        }
        dt_nccl_mem_set(r, 0, bytes);
        int rc = dt_comm_allgather(c, s, r, n, t);
        dt_nccl_mem_copy(back, r, bytes);
        gt_result(rc == 0 && !memcmp(back, h, bytes), "allgather %s (1 rank)", dt_dtype_name(t));
        dt_nccl_mem_set(r, 0, bytes);
        rc = dt_comm_reduce_scatter(c, s, r, n, t, DT_SUM);
        dt_nccl_mem_copy(back, r, bytes);
        gt_result(rc == 0 && !memcmp(back, h, bytes), "reduce_scatter %s (1 rank)", dt_dtype_name(t));
        rc = dt_comm_broadcast(c, s, n, t, 0);
        dt_nccl_mem_copy(back, s, bytes);
        gt_result(rc == 0 && !memcmp(back, h, bytes), "broadcast %s (1 rank)", dt_dtype_name(t));
        dt_nccl_mem_free(s), dt_nccl_mem_free(r);
        free(h), free(back);
    }
    gt_result(dt_comm_barrier(c) == 0, "barrier (1 rank)");
    dt_comm_destroy(c);
}

/* 64 async all-reduces in flight, then each waited; and ordering against a
 * large copy queued on the compute stream just before. */
static void single_async(void *arg)
{
    (void)arg;
    struct dt_comm *c = single_rank();
    if (!c)
        return;
    const size_t n = 64 << 20; /* 256 MiB: the copy takes tens of ms */
    float *host = NULL, *s, *r;
    cudaMallocHost((void **)&host, n * 4);
    for (size_t i = 0; i < n; i++)
        host[i] = 1.0f;
    dt_nccl_mem_alloc((void **)&s, n * 4);
    dt_nccl_mem_alloc((void **)&r, n * 4);
    dt_nccl_mem_set(s, 0, n * 4);
    dt_nccl_mem_set(r, 0, n * 4);
    cudaStream_t compute;
    cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking);
    dt_nccl_set_compute_stream(c, compute);
    cudaMemcpyAsync(s, host, n * 4, cudaMemcpyHostToDevice, compute);
    struct dt_comm_req *req = NULL;
    int rc = dt_comm_iallreduce(c, s, r, n, DT_F32, DT_AVG, &req);
    if (rc == 0)
        rc = dt_comm_wait(req);
    float tail[2];
    dt_nccl_mem_copy(tail, r + n - 2, 8);
    gt_result(rc == 0 && tail[0] == 1.0f && tail[1] == 1.0f,
              "iallreduce waits for the copy queued before it on the compute stream (%g)", (double)tail[1]);
    struct dt_comm_req *reqs[64];
    rc = 0;
    for (int i = 0; i < 64 && rc == 0; i++)
        rc = dt_comm_iallreduce(c, s + (size_t)i * 1024, r + (size_t)i * 1024, 1024, DT_F32, DT_SUM, &reqs[i]);
    bool done = false;
    if (rc == 0)
        rc = dt_comm_test(reqs[63], &done);
    for (int i = 0; i < 64 && rc == 0; i++)
        rc = dt_comm_wait(reqs[i]);
    gt_result(rc == 0, "64 iallreduce in flight, then waited %s", rc ? dt_error_last() : "");
    rc = dt_nccl_stream_wait_comm(c, compute);
    gt_result(rc == 0 && cudaStreamSynchronize(compute) == cudaSuccess, "the compute stream waits for the comm stream");
    dt_comm_abort(c);
    rc = dt_comm_allreduce(c, s, r, 16, DT_F32, DT_SUM);
    gt_result(rc == DT_EABORTED, "after dt_comm_abort an all-reduce fails at once: %s", dt_error_last());
    dt_comm_destroy(c);
    cudaFreeHost(host);
    dt_nccl_mem_free(s), dt_nccl_mem_free(r);
}

struct boot {
    int rank, world;
    const char *prefix;
};

/* A lone rank of a world of two: it must give up near its 4 s deadline. */
static void lone_rank(void *arg)
{
    const struct boot *b = arg;
    struct dt_store_options so = {.host = "127.0.0.1", .port = dt_coord_port(coord), .timeout_s = 30};
    struct dt_store *s = NULL;
    if (dt_store_connect(&so, &s) < 0) {
        gt_result(0, "store connect: %s", dt_error_last());
        return;
    }
    struct dt_comm_options o = {.backend = "nccl", .rank = b->rank, .world = b->world, .store = s,
                                .key_prefix = b->prefix, .timeout_s = 4, .cuda_device = 0};
    struct dt_comm *c = NULL;
    double t0 = dt_clock_s();
    int rc = dt_comm_init(&o, &c);
    double took = dt_clock_s() - t0;
    gt_result(rc == DT_ETIMEDOUT && took < 15,
              "rank %d alone in a world of %d: init fails with a timeout after %.1f s: %s", b->rank, b->world, took,
              dt_error_last());
    dt_comm_destroy(c);
    dt_store_close(s);
}

/* Rank r of `world` on GPU r: all-reduces integer-valued floats (exact in any
 * order) and, with `die`, the last rank leaves after init so the others must
 * fail within their 5 s deadline.  Exit status 0 = as expected. */
static int multi_rank(int r, int world, const char *prefix, bool die)
{
    struct dt_store_options so = {.host = "127.0.0.1", .port = dt_coord_port(coord), .timeout_s = 30};
    struct dt_store *s = NULL;
    struct dt_comm *c = NULL;
    struct dt_comm_options o = {.backend = "nccl", .rank = r, .world = world, .local_rank = r,
                                .local_world = world, .key_prefix = prefix, .timeout_s = 5, .cuda_device = -1};
    if (dt_store_connect(&so, &s) < 0 || (o.store = s, dt_comm_init(&o, &c)) < 0) {
        fprintf(stderr, "rank %d: %s\n", r, dt_error_last());
        return 1;
    }
    if (die && r == world - 1)
        _exit(0); /* no destroy, no goodbye: as a crash looks to the peers */
    const size_t n = 1 << 22;
    float *h = malloc(n * 4), *d;
    for (size_t i = 0; i < n; i++)
        h[i] = (float)(i % 13) + r;
    dt_nccl_mem_alloc((void **)&d, n * 4);
    dt_nccl_mem_copy(d, h, n * 4);
    double t0 = dt_clock_s();
    int rc = dt_comm_allreduce(c, d, d, n, DT_F32, DT_SUM);
    double took = dt_clock_s() - t0;
    int bad = 0;
    if (die) {
        bad = rc == 0 || took > 20;
        fprintf(stderr, "rank %d: after the peer died: rc %d after %.1f s: %s\n", r, rc, took, dt_error_last());
    } else {
        dt_nccl_mem_copy(h, d, n * 4);
        for (size_t i = 0; i < n && !rc; i++)
            bad += h[i] != (float)(world * (double)(i % 13) + world * (world - 1) / 2.0);
        if (rc || bad)
            fprintf(stderr, "rank %d: all-reduce rc %d, %d wrong: %s\n", r, rc, bad, dt_error_last());
    }
    dt_nccl_mem_free(d);
    free(h);
    dt_comm_destroy(c);
    dt_store_close(s);
    return rc && !die ? 1 : bad ? 1 : 0;
}

static void multi(int world, bool die)
{
    static int seq;
    char prefix[64];
    snprintf(prefix, sizeof prefix, "gpu-%d-%d/", (int)getpid(), seq++);
    pid_t pids[16];
    fflush(NULL);
    for (int r = 0; r < world; r++)
        if ((pids[r] = fork()) == 0) {
            alarm(120);
            _exit(multi_rank(r, world, prefix, die));
        }
    int failed = 0;
    for (int r = 0; r < world; r++) {
        int st = 0;
        waitpid(pids[r], &st, 0);
        failed += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    gt_result(failed == 0, "%d ranks on %d GPUs: %s (%d ranks not as expected)", world, world,
              die ? "a rank dies after init; the others fail instead of hanging" : "exact all-reduce of 16 MiB",
              failed);
}

int main(void)
{
    int gpus = device_count();
    if (gpus == 0) {
        printf("ok - # SKIP test_nccl: no CUDA device here\n0 passed, 0 failed\n");
        return 0;
    }
    struct dt_coord_config cfg = {.bind_host = "127.0.0.1", .port = 0};
    if (dt_coord_start(&cfg, &coord) != 0) {
        printf("not ok - coordinator: %s\n", dt_error_last());
        return 1;
    }
    run(single_collectives, NULL);
    run(single_async, NULL);
    struct boot no_id = {.rank = 1, .world = 2, .prefix = "no-id/"};
    run(lone_rank, &no_id);
    struct boot no_peer = {.rank = 0, .world = 2, .prefix = "no-peer/"};
    run(lone_rank, &no_peer);
    if (gpus >= 2) {
        multi(gpus, false);
        multi(gpus, true);
    } else {
        printf("ok - # SKIP multi-rank NCCL tests: %d GPU here, they need 2 or more\n", gpus);
    }
    dt_coord_stop(coord);
    return gt_finish();
}
