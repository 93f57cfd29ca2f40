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

/* Walk tensors from the last to the first; a bucket closes once it holds at
 * least the current limit (first_bucket_bytes for bucket 0, then the cap), or
 * at a chunk start (cut). */
static int assign(struct dt_reducer *r, const size_t *bounds, const bool *cut, int nt, double first, double cap)
{
    r->b = calloc((size_t)(nt > 0 ? nt : 1), sizeof *r->b);
    if (!r->b)
        return dt_error_set(DT_ENOMEM, "reducer: no memory for %d buckets", nt);
    size_t hi = bounds[nt];
    for (int t = nt - 1; t >= 0; t--) {
        double limit = r->nb == 0 ? first : cap;
        double bytes = (double)(hi - bounds[t]) * sizeof(float);
        if (bytes >= limit || t == 0 || (cut && cut[t])) {
            r->b[r->nb++] = (struct dt_reducer_bucket){.lo = bounds[t], .hi = hi};
            hi = bounds[t];
        }
    }
    return 0;
}

int dt_reducer_init(struct dt_reducer *r, struct dt_comm *comm, float *grads, const size_t *bounds,
                    const bool *cut, int n_tensors, double first_bucket_bytes, double bucket_cap_bytes,
                    bool overlap)
{
    memset(r, 0, sizeof *r);
    if (n_tensors < 1 || bounds[0] != 0)
        return dt_error_set(DT_EINVAL, "reducer: %d tensors, first at %zu", n_tensors, bounds[0]);
    if (!(first_bucket_bytes > 0) || !(bucket_cap_bytes > 0))
        return dt_error_set(DT_EINVAL, "reducer: bucket sizes must be positive (%g, %g bytes)",
                            first_bucket_bytes, bucket_cap_bytes);
    r->comm = comm;
    r->world = comm ? dt_comm_world(comm) : 1;
    r->grads = r->out = grads;
    r->n = bounds[n_tensors];
    r->overlap = overlap;
    r->hashes = calloc((size_t)r->world, sizeof *r->hashes);
    if (!r->hashes)
        return dt_error_set(DT_ENOMEM, "reducer: no memory for %d hashes", r->world);
    return assign(r, bounds, cut, n_tensors, first_bucket_bytes, bucket_cap_bytes);
}

void dt_reducer_set_output(struct dt_reducer *r, float *out)
{
    r->out = out;
}

void dt_reducer_release(struct dt_reducer *r)
{
    free(r->b);
    free(r->hashes);
    r->b = NULL;
    r->hashes = NULL;
}

void dt_reducer_begin(struct dt_reducer *r, bool communicate)
{
    r->next = 0;
    r->ready_lo = r->n;
    r->communicate = communicate && r->world > 1;
}

static void start(struct dt_reducer *r, struct dt_reducer_bucket *b)
{
    if (r->err)
        return;
    int rc = dt_comm_iallreduce(r->comm, r->grads + b->lo, r->out + b->lo, b->hi - b->lo, DT_F32, DT_AVG,
                                &b->req);
    if (rc) {
        b->req = NULL;
        r->err = dt_error_prefix("gradient bucket %ld (floats %zu..%zu)", (long)(b - r->b), b->lo, b->hi);
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
    while (r->next < r->nb && r->b[r->next].lo >= r->ready_lo)
        start(r, &r->b[r->next++]);
}

int dt_reducer_finish(struct dt_reducer *r)
{
    if (!r->communicate)
        return 0;
    while (r->next < r->nb)
        start(r, &r->b[r->next++]);
    double t0 = dt_clock_s();
    int rc = r->err;
    for (int i = 0; i < r->nb; i++) {
        if (!r->b[i].req)
            continue;
        int w = dt_comm_wait(r->b[i].req);
        r->b[i].req = NULL;
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
