/* bench_broadcast.c - `dtrain bench broadcast` (nccl-tests broadcast_perf):
 * the root's buffer reaches every rank; busbw = algbw (factor 1).  The
 * communicator's broadcast is in place, so the out-of-place column copies
 * the root's send buffer into its receive buffer first (as ncclBroadcast
 * with distinct buffers must move it too). */
#include <string.h>

#include "comm/bench/bench.h"
#include "base/error.h"
#include "comm/reduce.h"

static double factor(int n) { (void)n; return 1; }

static void counts(size_t bytes, size_t es, int world, size_t *send_n, size_t *recv_n, size_t *size)
{
    (void)world;
    *send_n = *recv_n = bytes / es;
    *size = *send_n * es;
}

static void fill(struct dt_bench_ctx *x, int seed)
{
    for (size_t i = 0; i < x->send_n; i++) {
        dt_dtype_put(x->dtype, x->send, i, dt_bench_value(x->rank, i, seed));
        dt_dtype_put(x->dtype, x->recv, i, dt_bench_value(x->rank, i, seed));
    }
}

static int run(struct dt_bench_ctx *x, bool in_place)
{
    char *buf = in_place ? x->send : x->recv;
    if (!in_place && x->rank == x->root)
        memcpy(x->recv, x->send, x->send_n * dt_dtype_size(x->dtype));
    return dt_comm_broadcast(x->comm, buf, x->send_n, x->dtype, x->root);
}

static double expect(const struct dt_bench_ctx *x, size_t i, int seed)
{
    return dt_bench_value(x->root, i, seed);
}

static size_t check(struct dt_bench_ctx *x, int seed, bool in_place)
{
    return dt_bench_count_wrong(x->dtype, in_place ? x->send : x->recv, x->recv_n, 0, expect, x, seed);
}

const struct dt_bench_coll dt_bench_broadcast = {
    .name = "broadcast", .program = "broadcast_perf", .has_op = false, .rooted = true,
    .bus_factor = factor, .counts = counts, .fill = fill, .run = run, .check = check,
};
