/* bench_reduce_scatter.c - `dtrain bench reduce_scatter` (nccl-tests
 * reduce_scatter_perf): each rank contributes n blocks and receives the
 * reduction of its own block.  The size column is the whole send buffer;
 * busbw = algbw * (n-1)/n.  In-place: recv is this rank's block of send. */
#include "comm/bench/bench.h"
#include "base/error.h"
#include "comm/reduce.h"

static double factor(int n) { return n > 1 ? (double)(n - 1) / n : 0; }

static void counts(size_t bytes, size_t es, int world, size_t *send_n, size_t *recv_n, size_t *size)
{
    *recv_n = bytes / es / (size_t)world;
    *send_n = *recv_n * (size_t)world;
    *size = *send_n * es;
}

static char *recv_of(struct dt_bench_ctx *x, bool in_place)
{
    return in_place ? x->send + (size_t)x->rank * x->recv_n * dt_dtype_size(x->dtype) : x->recv;
}

static void fill(struct dt_bench_ctx *x, int seed)
{
    for (size_t i = 0; i < x->send_n; i++)
        dt_dtype_put(x->dtype, x->send, i, dt_bench_value(x->rank, i, seed));
}

static int run(struct dt_bench_ctx *x, bool in_place)
{
    return dt_comm_reduce_scatter(x->comm, x->send, recv_of(x, in_place), x->recv_n, x->dtype, x->op);
}

static double expect(const struct dt_bench_ctx *x, size_t i, int seed)
{
    return dt_bench_reduced(x->dtype, x->op, x->world, i, seed);
}

static size_t check(struct dt_bench_ctx *x, int seed, bool in_place)
{
    return dt_bench_count_wrong(x->dtype, recv_of(x, in_place), x->recv_n, (size_t)x->rank * x->recv_n, expect,
                                x, seed);
}

const struct dt_bench_coll dt_bench_reduce_scatter = {
    .name = "reduce_scatter", .program = "reduce_scatter_perf", .has_op = true, .rooted = false,
    .bus_factor = factor, .counts = counts, .fill = fill, .run = run, .check = check,
};
