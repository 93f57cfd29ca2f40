/* reducer.c - gradient buckets and their overlapped all-reduce (see reducer.h).
 *
 * Every rank computes the same buckets from the same layout and starts them
 * in the same order (bucket index order, as PyTorch's Reducer does), which is
 * what collectives require.  Not for anything that changes the gradients
 * besides averaging them.
 */
#include "worker/reducer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"
#include "base/clock.h"

int dt_reducer_init(struct dt_reducer *r, struct dt_comm *comm, float *grads, const size_t *bounds,
                    const bool *cut, int n_tensors, double first_bucket_bytes, double bucket_cap_bytes,
                    bool overlap)
{
    memset(r, 0, sizeof *r);
    int rc = dt_buckets_plan(&r->plan, bounds, cut, n_tensors, first_bucket_bytes, bucket_cap_bytes);
    if (rc)
        return rc;
    r->comm = comm;
    r->world = comm ? dt_comm_world(comm) : 1;
    r->grads = r->out = grads;
    r->n = bounds[n_tensors];
    r->overlap = overlap;
    r->hashes = calloc((size_t)r->world, sizeof *r->hashes);
    r->req = calloc((size_t)r->plan.n, sizeof *r->req);
    if (!r->hashes || !r->req)
        return dt_error_set(DT_ENOMEM, "reducer: no memory for %d ranks' hashes and %d buckets", r->world,
                            r->plan.n);
    return 0;
}

void dt_reducer_set_output(struct dt_reducer *r, float *out)
{
    r->out = out;
}

void dt_reducer_release(struct dt_reducer *r)
{
    dt_buckets_release(&r->plan);
    free(r->req);
    free(r->hashes);
    r->req = NULL;
    r->hashes = NULL;
}

void dt_reducer_begin(struct dt_reducer *r, bool communicate)
{
    r->next = 0;
    r->ready_lo = r->n;
    r->communicate = communicate && r->world > 1;
}

static void start(struct dt_reducer *r, int i)
{
    if (r->err)
        return;
    size_t lo = r->plan.range[i][0], hi = r->plan.range[i][1];
    int rc = dt_comm_iallreduce(r->comm, r->grads + lo, r->out + lo, hi - lo, DT_F32, DT_AVG, &r->req[i]);
    if (rc) {
        r->req[i] = NULL;
        r->err = dt_error_prefix("gradient bucket %d (floats %zu..%zu)", i, lo, hi);
    }
}

void dt_reducer_ready(void *ctx, size_t lo, size_t hi)
{
    struct dt_reducer *r = ctx;
    (void)hi;
    if (lo < r->ready_lo)
        r->ready_lo = lo;
    if (!r->communicate || !r->overlap)
        return;
    while (dt_buckets_ready(&r->plan, r->next, r->ready_lo))
        start(r, r->next++);
}

int dt_reducer_finish(struct dt_reducer *r)
{
    if (!r->communicate)
        return 0;
    while (r->next < r->plan.n)
        start(r, r->next++);
    double t0 = dt_clock_s();
    int rc = r->err;
    for (int i = 0; i < r->plan.n; i++) {
        if (!r->req[i])
            continue;
        int w = dt_comm_wait(r->req[i]);
        r->req[i] = NULL;
        if (w && !rc)
            rc = dt_error_prefix("all-reduce of gradient bucket %d", i);
    }
    r->wait_s += dt_clock_s() - t0;
    r->err = 0;
    r->communicate = false;
    return rc;
}

int dt_reducer_check_same(struct dt_reducer *r, const struct dt_kernels *k, const float *params, size_t n,
                          int64_t step)
{
    if (r->world <= 1)
        return 0;
    int64_t mine = (int64_t)k->hash(params, n), *all = r->hashes;
    int rc = dt_comm_allgather(r->comm, &mine, all, 1, DT_I64);
    if (rc)
        return dt_error_prefix("desync check at step %lld", (long long)step);
    char list[512] = "";
    size_t at = 0;
    for (int i = 1; i < r->world; i++)
        if (all[i] != all[0] && at < sizeof list - 16)
            at += (size_t)snprintf(list + at, sizeof list - at, "%s%d", at ? ", " : "", i);
    if (at)
        return dt_error_set(DT_EINTERNAL,
                            "ranks desynchronised at step %lld: the parameters of rank(s) %s differ from rank 0's "
                            "(hash %016llx); every rank must see the same averaged gradients",
                            (long long)step, list, (unsigned long long)all[0]);
    return 0;
}
