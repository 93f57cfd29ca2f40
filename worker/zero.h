/* zero.h - ZeRO stage 1 (ddp.zero: 1) for the CPU trainer: each rank keeps
 * AdamW's moments for its shard of the parameter arena only.
 *
 * The arena [0, n) is cut into W shards of `per` floats, whole blocks of the
 * gradient norm (worker/optim/grad_norm.h), the same size on every rank so
 * that the parameters can be all-gathered in place: rank r owns
 * [r per, min((r+1) per, n)), and the parameter arena is W per floats (the
 * tail past n is padding that stays 0).  One step, after the reducer:
 *   - the norm: each rank sums the norm blocks of its shard, an all-gather
 *     of the block sums gives every rank all of them, and every rank totals
 *     them in block order: the bits of zero 0's norm (the partition into
 *     blocks is fixed; nothing is added to a block sum but its own terms);
 *   - AdamW on the shard (elementwise: the bits of the whole step there);
 *   - an all-gather of the parameters, after which every rank holds the
 *     whole updated arena again.
 * The gradients are still averaged by the reducer's bucketed all-reduce,
 * started during backward as with zero 0, and each rank reads only its
 * shard of them.  A reduce-scatter would move half the bytes, but its
 * pieces are cut by the shard boundaries, and tcp's ring sums each element
 * starting at a rank that depends on where the element falls in its
 * message (comm/tcp/tcp_coll.c), so at W >= 3 the averages, and every step
 * after, would differ from zero 0 in the last bits; the all-reduce keeps
 * them identical on every backend.  What ZeRO-1 divides by W is the
 * optimizer's state (2 n floats of moments: 2 per per rank); the cost is
 * the all-gather, (W-1)/W of the parameters per step.
 *
 * Checkpoints stay whole: dt_zero_gather_state() gathers the moments on rank
 * 0 for the writer (in pieces of 256 KiB per rank), and a resume copies each rank's
 * shard out of the whole file (ckpt.h), so a checkpoint moves between zero 0
 * and 1 and between shard layouts freely; the world size a checkpoint must
 * match is the data order's rule (ckpt.h), not the optimizer's.
 *
 * With share_state (host_state.h) on one host the ranks already keep one
 * copy of the moments for all of them, which is less than one shard each;
 * zero 1 turns that one copy off (gradients stay in shared memory).
 *
 * Not for the GPU trainer (the spec refuses zero 1 with device: cuda) or
 * for deciding when to checkpoint.
 */
#ifndef DT_ZERO_H
#define DT_ZERO_H

#include <stdbool.h>
#include <stddef.h>

#include "comm/comm.h"
#include "worker/models/model.h"
#include "worker/optim/adamw.h"
#include "worker/optim/grad_norm.h"
#include "worker/trace.h"

struct dt_zero {
    struct dt_comm *comm; /* NULL: off (zero 0 or one rank); lo = 0, hi = n */
    int rank, world;
    size_t n;               /* parameters */
    size_t per;             /* floats per shard, a multiple of DT_GRAD_NORM_BLOCK */
    size_t lo, hi;          /* this rank's shard, clipped to [0, n) */
    float *params;          /* the parameter arena, world * per floats */
    double *sums;           /* the norm's block sums, world * per / DT_GRAD_NORM_BLOCK */
    struct dt_trace *trace; /* NULL, or where the shard's spans go (compute track) */
};

/* Cuts the arena when `on` and the communicator has 2 or more ranks, and
 * moves the model's parameters to the padded arena; otherwise z is off
 * with the whole arena as its shard.  Before the optimizer is made: it
 * holds hi - lo moments, from lo (dt_adamw.base). */
int dt_zero_init(struct dt_zero *z, struct dt_comm *comm, struct dt_model *m, bool on);
/* After the model is gone. */
void dt_zero_release(struct dt_zero *z);

/* The norm's block sums go to z's array (once, after dt_grad_norm_init). */
void dt_zero_share_norm(struct dt_zero *z, struct dt_grad_norm *gn);

/* norm^2 of the averaged gradients: this shard's blocks, then everyone's. */
int dt_zero_norm(struct dt_zero *z, struct dt_grad_norm *gn, double *norm2);

/* AdamW on this shard of the gradients (skip: no step, as an AMP step with
 * inf/NaN, and nothing to gather), then the all-gather of the parameters. */
int dt_zero_step(struct dt_zero *z, struct dt_adamw *opt, struct dt_model *m, bool skip, double lr,
                 double beta1, float grad_scale);

/* Collective: every rank's moments into *full on rank 0 (n floats each,
 * base 0, opt's step; free with dt_adamw_release); other ranks get nothing
 * and *full zeroed. */
int dt_zero_gather_state(struct dt_zero *z, const struct dt_adamw *opt, struct dt_adamw *full);

#endif
