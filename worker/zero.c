/* zero.c - ZeRO stage 1: shards of AdamW's state, the shard's norm and
 * step, the all-gather of the parameters, whole checkpoints (see zero.h). */
#include "worker/zero.h"

#include <stdlib.h>
#include <string.h>

#include "base/arena.h"
#include "base/clock.h"
#include "base/error.h"

/* The moments are gathered for a checkpoint in pieces of at most this many
 * floats per rank (256 KiB): the scratch is W + 1 pieces, not the arena, and
 * the tests' shards (20 norm blocks) take two pieces, the second short. */
#define GATHER_CHUNK ((size_t)1 << 16)

int dt_zero_init(struct dt_zero *z, struct dt_comm *comm, struct dt_model *m, bool on)
{
    memset(z, 0, sizeof *z);
    z->n = z->hi = m->n_params;
    z->world = 1;
    if (!on || !comm || dt_comm_world(comm) < 2)
        return 0;
    const size_t B = DT_GRAD_NORM_BLOCK;
    z->rank = dt_comm_rank(comm);
    z->world = dt_comm_world(comm);
    size_t W = (size_t)z->world, blocks = (z->n + B - 1) / B, pb = (blocks + W - 1) / W;
    z->per = pb * B;
    size_t floats = W * z->per, sums = W * pb;
    z->params = dt_arena_calloc(floats > 0 ? floats : 1, sizeof(float));
    z->sums = calloc(sums > 0 ? sums : 1, sizeof *z->sums);
    if (!z->params || !z->sums) {
        dt_zero_release(z);
        return dt_error_set(DT_ENOMEM, "ZeRO-1: no memory for %zu parameters padded to %d shards of %zu",
                            z->n, z->world, z->per);
    }
    dt_model_use_params(m, z->params, true);
    size_t lo = (size_t)z->rank * z->per, hi = lo + z->per;
    z->lo = lo < z->n ? lo : z->n;
    z->hi = hi < z->n ? hi : z->n;
    z->comm = comm;
    return 0;
}

void dt_zero_release(struct dt_zero *z)
{
    dt_arena_free(z->params);
    free(z->sums);
    memset(z, 0, sizeof *z);
}

void dt_zero_share_norm(struct dt_zero *z, struct dt_grad_norm *gn)
{
    if (z->comm)
        dt_grad_norm_share(gn, z->sums);
}

int dt_zero_norm(struct dt_zero *z, struct dt_grad_norm *gn, double *norm2)
{
    int64_t t0 = dt_clock_ns();
    dt_grad_norm_slice(gn, z->lo, z->hi);
    int64_t t1 = dt_clock_ns();
    size_t pb = z->per / DT_GRAD_NORM_BLOCK;
    int rc = dt_comm_allgather(z->comm, z->sums + (size_t)z->rank * pb, z->sums, pb, DT_F64);
    dt_trace_span(z->trace, DT_TRACE_COMPUTE, "norm shard", t0, t1);
    dt_trace_span(z->trace, DT_TRACE_COMPUTE, "norm gather", t1, dt_clock_ns());
    if (rc)
        return dt_error_prefix("gathering every shard's part of the gradient norm");
    *norm2 = dt_grad_norm_total(gn);
    return 0;
}

int dt_zero_step(struct dt_zero *z, struct dt_adamw *opt, struct dt_model *m, bool skip, double lr,
                 double beta1, float grad_scale)
{
    if (skip) /* every rank skips alike (the scaler's agreement): the parameters did not change */
        return 0;
    int64_t t0 = dt_clock_ns();
    dt_adamw_step(opt, m->params, m->grads, lr, beta1, grad_scale);
    int64_t t1 = dt_clock_ns();
    int rc = dt_comm_allgather(z->comm, z->params + (size_t)z->rank * z->per, z->params, z->per, DT_F32);
    dt_trace_span(z->trace, DT_TRACE_COMPUTE, "adamw shard", t0, t1);
    dt_trace_span(z->trace, DT_TRACE_COMPUTE, "parameter gather", t1, dt_clock_ns());
    return rc ? dt_error_prefix("all-gathering the parameters after each rank's optimizer shard") : 0;
}

/* One moment array: piece [j, j + c) of every shard, gathered, lands at
 * rank 0's q per + j (clipped to n). */
static int gather_moment(struct dt_zero *z, const float *mine, float *full, float *send, float *recv)
{
    size_t own = z->hi - z->lo;
    for (size_t j = 0; j < z->per; j += GATHER_CHUNK) {
        size_t c = z->per - j < GATHER_CHUNK ? z->per - j : GATHER_CHUNK;
        size_t have = own > j ? (own - j < c ? own - j : c) : 0;
        if (have)
            memcpy(send, mine + j, have * sizeof *send);
        memset(send + have, 0, (c - have) * sizeof *send);
        if (dt_comm_allgather(z->comm, send, recv, c, DT_F32))
            return dt_error_prefix("gathering AdamW's moments for a checkpoint");
        for (int q = 0; full && q < z->world; q++) {
            size_t at = (size_t)q * z->per + j;
            if (at < z->n)
                memcpy(full + at, recv + (size_t)q * c, (z->n - at < c ? z->n - at : c) * sizeof *full);
        }
    }
    return 0;
}

int dt_zero_gather_state(struct dt_zero *z, const struct dt_adamw *opt, struct dt_adamw *full)
{
    memset(full, 0, sizeof *full);
    size_t c = z->per < GATHER_CHUNK ? z->per : GATHER_CHUNK;
    float *send = malloc((c ? c : 1) * sizeof *send),
          *recv = malloc(((size_t)z->world * c + 1) * sizeof *recv);
    int rc = send && recv ? 0 : dt_error_set(DT_ENOMEM, "ZeRO-1: no memory to gather the moments");
    if (!rc && z->rank == 0 &&
        (rc = dt_adamw_init(full, opt->k, z->n, opt->beta2, opt->eps, opt->weight_decay)) == 0)
        full->step = opt->step;
    int bad = rc != 0; /* every rank must take part in the gathers, or learn that rank 0 cannot */
    if (dt_comm_allreduce(z->comm, &bad, &bad, 1, DT_I32, DT_MAX))
        rc = rc ? rc : dt_error_prefix("agreeing to gather AdamW's moments");
    else if (bad && !rc)
        rc = dt_error_set(DT_ENOMEM, "ZeRO-1: a rank has no memory to gather the moments for a checkpoint");
    if (!rc)
        rc = gather_moment(z, opt->m, full->m, send, recv);
    if (!rc)
        rc = gather_moment(z, opt->v, full->v, send, recv);
    free(send);
    free(recv);
    if (rc)
        dt_adamw_release(full);
    return rc;
}
