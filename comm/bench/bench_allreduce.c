/* bench_allreduce.c - `dtrain bench allreduce` (nccl-tests all_reduce_perf):
 * every rank contributes `count` elements and receives their reduction.
 * busbw = algbw * 2(n-1)/n: each rank must send and receive 2(n-1)/n of the
 * data whatever the algorithm (nccl-tests' doc/PERFORMANCE.md). */
#include "comm/bench/bench.h"
#include "base/error.h"
#include "comm/reduce.h"

static double factor(int n) { return n > 1 ? 2.0 * (n - 1) / n : 0; }

static void counts(size_t bytes, size_t es, int world, size_t *send_n, size_t *recv_n, size_t *size)
{
    (void)world;
    *send_n = *recv_n = bytes / es;
    *size = *send_n * es;
}

static void fill(struct dt_bench_ctx *x, int seed)
{
    for (size_t i = 0; i < x->send_n; i++)
        dt_dtype_put(x->dtype, x->send, i, dt_bench_value(x->rank, i, seed));
}

static int run(struct dt_bench_ctx *x, bool in_place)
{
    return dt_comm_allreduce(x->comm, x->send, in_place ? x->send : x->recv, x->send_n, x->dtype, x->op);
}

static double expect(const struct dt_bench_ctx *x, size_t i, int seed)
{
    return dt_bench_reduced(x->dtype, x->op, x->world, i, seed);
}

static size_t check(struct dt_bench_ctx *x, int seed, bool in_place)
{
    return dt_bench_count_wrong(x->dtype, in_place ? x->send : x->recv, x->recv_n, 0, expect, x, seed);
}

const struct dt_bench_coll dt_bench_allreduce = {
    .name = "allreduce", .program = "all_reduce_perf", .has_op = true, .rooted = false,
    .bus_factor = factor, .counts = counts, .fill = fill, .run = run, .check = check,
};
