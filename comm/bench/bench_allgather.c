/* bench_allgather.c - `dtrain bench allgather` (nccl-tests all_gather_perf):
 * each rank contributes size/n bytes and receives everyone's.  The size
 * column is the gathered buffer; busbw = algbw * (n-1)/n (each rank receives
 * the n-1 blocks it does not have).  In-place: send is this rank's block of
 * the receive buffer. */
#include "comm/bench/bench.h"
#include "base/error.h"
#include "comm/reduce.h"

static double factor(int n) { return n > 1 ? (double)(n - 1) / n : 0; }

static void counts(size_t bytes, size_t es, int world, size_t *send_n, size_t *recv_n, size_t *size)
{
    *send_n = bytes / es / (size_t)world;
    *recv_n = *send_n * (size_t)world;
    *size = *recv_n * es;
}

static char *send_of(struct dt_bench_ctx *x, bool in_place)
{
    return in_place ? x->recv + (size_t)x->rank * x->send_n * dt_dtype_size(x->dtype) : x->send;
}

static void fill(struct dt_bench_ctx *x, int seed)
{
    for (int ip = 0; ip < 2; ip++)
        for (size_t i = 0; i < x->send_n; i++)
            dt_dtype_put(x->dtype, send_of(x, ip), i, dt_bench_value(x->rank, i, seed));
}

static int run(struct dt_bench_ctx *x, bool in_place)
{
    return dt_comm_allgather(x->comm, send_of(x, in_place), x->recv, x->send_n, x->dtype);
}

static double expect(const struct dt_bench_ctx *x, size_t i, int seed)
{
    return dt_bench_value((int)(i / x->send_n), i % x->send_n, seed);
}

static size_t check(struct dt_bench_ctx *x, int seed, bool in_place)
{
    (void)in_place;
    return x->send_n ? dt_bench_count_wrong(x->dtype, x->recv, x->recv_n, 0, expect, x, seed) : 0;
}

const struct dt_bench_coll dt_bench_allgather = {
    .name = "allgather", .program = "all_gather_perf", .has_op = false, .rooted = false,
    .bus_factor = factor, .counts = counts, .fill = fill, .run = run, .check = check,
};
