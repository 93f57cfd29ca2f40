/* reducer.h - data-parallel gradient averaging in buckets, overlapped with backward.
 *
 * The gradient arena (worker/models/model.h) is cut into buckets by the rule
 * of worker/buckets.h, which the CUDA engine follows too: views into the
 * arena, so nothing is copied.  While backward runs, dt_reducer_ready()
 * learns which range has its final gradients; every bucket that is ready
 * (buckets.h) starts its all-reduce (average) on the communicator's thread at
 * once, in bucket order on every rank.  dt_reducer_finish() waits for all of
 * them: the optimizer never sees a gradient that is not averaged.
 *
 * With no communicator or one rank, nothing is sent.  ZeRO-1 (worker/zero.h)
 * keeps this all-reduce, whose sums have zero 0's bits on every backend, and
 * each rank reads only its shard of the averages.  Not for the optimizer or
 * clipping: the trainer does those after dt_reducer_finish().
 */
#ifndef DT_REDUCER_H
#define DT_REDUCER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "worker/buckets.h"
#include "worker/kernels.h"

struct dt_reducer {
    struct dt_comm *comm;        /* NULL: one process, nothing to reduce */
    int world;
    float *grads;
    float *out;                  /* where the averages go: grads (in place) or a host-wide array */
    size_t n;
    struct dt_buckets plan;      /* in launch order: plan.range[0] holds the last parameters */
    struct dt_comm_req **req;    /* each bucket's all-reduce in flight, or NULL */
    int next;                    /* first bucket not yet started this backward */
    size_t ready_lo;             /* grads[ready_lo, n) are final for this backward */
    bool overlap;                /* start buckets during backward (else all at finish) */
    bool communicate;            /* this backward is the last micro-batch of a step */
    int err;                     /* first error from starting an all-reduce */
    double wait_s;               /* time spent in finish waiting for the network */
    int64_t *hashes;             /* one per rank, for dt_reducer_check_same */
};

/* The buckets of dt_buckets_plan(bounds, cut, n_tensors, ...): cut, when
 * not NULL, starts a bucket at each row chunk, so that each chunk is
 * all-reduced as soon as backward has written it. */
int dt_reducer_init(struct dt_reducer *r, struct dt_comm *comm, float *grads, const size_t *bounds,
                    const bool *cut, int n_tensors, double first_bucket_bytes, double bucket_cap_bytes,
                    bool overlap);
/* The averages go to out[0, n) instead of back into grads: one array for all
 * the ranks of a host (host_state.h), filled by the all-reduce itself. */
void dt_reducer_set_output(struct dt_reducer *r, float *out);
void dt_reducer_release(struct dt_reducer *r);

/* Before each micro-batch's backward; `communicate` is true for the last one
 * of an optimizer step (accumulation sends once). */
void dt_reducer_begin(struct dt_reducer *r, bool communicate);

/* Model callback (dt_model_ready_fn): grads[lo, hi) are final. */
void dt_reducer_ready(void *r, size_t lo, size_t hi);

/* Starts what is left and waits for every bucket; returns the first error. */
int dt_reducer_finish(struct dt_reducer *r);

/* Desync detection: every rank hashes its parameters and compares with all
 * the others; a mismatch is DT_EINTERNAL naming the ranks that differ from rank 0. */
int dt_reducer_check_same(struct dt_reducer *r, const struct dt_kernels *k, const float *params, size_t n,
                          int64_t step);

#endif
