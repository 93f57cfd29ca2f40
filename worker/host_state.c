/* host_state.c - shared gradients, one copy of parameters and moments per
 * host, the optimizer split among its ranks (see host_state.h). */
#include "worker/host_state.h"

#include <string.h>

#include "base/error.h"
#include "base/clock.h"

static int share_grads(struct dt_host_state *hs, struct dt_model *m)
{
    void *p = NULL;
    if (dt_comm_alloc_shared(hs->comm, m->n_params * sizeof(float), &p))
        return dt_error_prefix("gradients in shared memory (%zu floats)", m->n_params);
    if (p) {
        hs->grads = p;
        dt_model_use_grads(m, p);
    }
    return 0;
}

/* Layout of the common buffer: params, m, v, averaged gradients (n floats
 * each), then the block sums (doubles, 8-byte aligned since 4n floats are
 * rounded up to an even count). */
static int one_copy(struct dt_host_state *hs, struct dt_model *m, struct dt_adamw *opt)
{
    size_t n = m->n_params, blocks = (n + DT_GRAD_NORM_BLOCK - 1) / DT_GRAD_NORM_BLOCK;
    size_t floats = (4 * n + 1) / 2 * 2;
    void *p = NULL;
    if (dt_comm_alloc_common(hs->comm, floats * sizeof(float) + (blocks ? blocks : 1) * sizeof(double), &p))
        return dt_error_prefix("parameters, moments and averaged gradients in one copy for the host (%zu floats)",
                               4 * n);
    if (!p)
        return 0;
    hs->common = p;
    hs->avg = hs->common + 3 * n;
    hs->sums = (double *)(hs->common + floats);
    int rank = dt_comm_rank(hs->comm), world = dt_comm_world(hs->comm);
    bool first = rank == 0; /* every rank holds rank 0's values: one writes them */
    dt_model_use_params(m, hs->common, first);
    dt_adamw_use_state(opt, hs->common + n, hs->common + 2 * n, first);
    hs->lo = blocks * (size_t)rank / (size_t)world * DT_GRAD_NORM_BLOCK;
    hs->hi = blocks * (size_t)(rank + 1) / (size_t)world * DT_GRAD_NORM_BLOCK;
    hs->lo = hs->lo < n ? hs->lo : n;
    hs->hi = hs->hi < n ? hs->hi : n;
    if (dt_comm_barrier(hs->comm))
        return dt_error_prefix("waiting for rank 0 to fill the host's copy of the parameters");
    return 0;
}

int dt_host_state_init(struct dt_host_state *hs, struct dt_comm *comm, struct dt_model *m, struct dt_adamw *opt,
                       bool one)
{
    memset(hs, 0, sizeof *hs);
    if (!comm || dt_comm_world(comm) < 2)
        return 0;
    hs->comm = comm;
    int rc = share_grads(hs, m);
    /* The all-reduce writes into the host's copy only from shared gradients (all ranks agree on having them). */
    return rc || !one || !hs->grads ? rc : one_copy(hs, m, opt);
}

void dt_host_state_release(struct dt_host_state *hs)
{
    if (hs->comm) {
        dt_comm_free_shared(hs->comm, hs->grads);
        dt_comm_free_shared(hs->comm, hs->common);
    }
    memset(hs, 0, sizeof *hs);
}

void dt_host_state_share_norm(struct dt_host_state *hs, struct dt_grad_norm *gn)
{
    if (hs->common)
        dt_grad_norm_share(gn, hs->sums);
}

/* The trace tells this rank's share of the work from the wait for the
 * slowest rank, which is what a long optimizer span usually is. */
static int slice_then_barrier(struct dt_host_state *hs, int64_t t0, const char *slice, const char *wait)
{
    int64_t t1 = dt_clock_ns();
    int rc = dt_comm_barrier(hs->comm);
    dt_trace_span(hs->trace, DT_TRACE_COMPUTE, slice, t0, t1);
    dt_trace_span(hs->trace, DT_TRACE_COMPUTE, wait, t1, dt_clock_ns());
    return rc;
}

int dt_host_state_norm(struct dt_host_state *hs, struct dt_grad_norm *gn, double *norm2)
{
    int64_t t0 = dt_clock_ns();
    dt_grad_norm_slice(gn, hs->lo, hs->hi);
    if (slice_then_barrier(hs, t0, "norm slice", "norm wait"))
        return dt_error_prefix("waiting for every rank's part of the gradient norm");
    *norm2 = dt_grad_norm_total(gn);
    return 0;
}

int dt_host_state_adamw(struct dt_host_state *hs, struct dt_adamw *opt, struct dt_model *m, bool skip, double lr,
                        double beta1, float grad_scale)
{
    int64_t t0 = dt_clock_ns();
    if (!skip)
        dt_adamw_step_range(opt, m->params, hs->avg, hs->lo, hs->hi, lr, beta1, grad_scale);
    if (slice_then_barrier(hs, t0, "adamw slice", "adamw wait"))
        return dt_error_prefix("waiting for every rank's part of the optimizer step");
    return 0;
}
