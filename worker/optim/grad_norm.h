/* grad_norm.h - the global gradient norm (clip_grad_norm_'s total_norm) in
 * fixed blocks, so that most of it can be summed while backward still runs.
 *
 *   norm^2 = sum over blocks b = 0, 1, ... in that order of s_b,
 *   s_b = sum of g_i^2 over block b = [b S, min((b+1) S, n)),  S = DT_GRAD_NORM_BLOCK
 *
 * each s_b by the kernel table's sumsq_blocks, in double.  The partition
 * depends on n alone, not on threads, ranks, buckets or on when a block was
 * summed, so the norm has the same bits whether a block was summed the moment
 * backward reported it final (one rank: no all-reduce will change it, and it
 * is still in cache) or in one pass after the all-reduce.
 *
 * Not for clipping policy (adamw.h) or for deciding when gradients are final
 * (the trainer knows: the last micro-batch, no all-reduce, no AMP unscale).
 */
#ifndef DT_GRAD_NORM_H
#define DT_GRAD_NORM_H

#include <stddef.h>

#include "worker/kernels.h"

/* 16 KiB of floats: a chunk of backward (worker/models/model.h) leaves at
 * most one block straddling its lower edge for later, and the per-block
 * overhead is nil. */
#define DT_GRAD_NORM_BLOCK ((size_t)4096)

struct dt_grad_norm {
    const struct dt_kernels *k;
    const float *g;
    size_t n;
    double *s;       /* s_b per block */
    double *own;     /* the allocation behind s; NULL after dt_grad_norm_share */
    size_t blocks;
    size_t done;     /* blocks [done, blocks) are summed this step */
};

int dt_grad_norm_init(struct dt_grad_norm *gn, const struct dt_kernels *k, const float *grads, size_t n);
void dt_grad_norm_release(struct dt_grad_norm *gn);

/* A new step: nothing summed yet. */
void dt_grad_norm_begin(struct dt_grad_norm *gn);

/* grads[lo, n) are final: sums the blocks that lie wholly inside and are not summed yet. */
void dt_grad_norm_ready(struct dt_grad_norm *gn, size_t lo);

/* The block sums live in s (`blocks` doubles, owned by the caller): one
 * array for the ranks of a host, each summing its slice (host_state.h). */
void dt_grad_norm_share(struct dt_grad_norm *gn, double *s);

/* Sums blocks [lo / S, ceil(hi / S)) only, lo a multiple of S: one rank's
 * share of the blocks. */
void dt_grad_norm_slice(struct dt_grad_norm *gn, size_t lo, size_t hi);

/* norm^2 from the block sums as they stand, in block order. */
double dt_grad_norm_total(const struct dt_grad_norm *gn);

/* Sums the blocks left and returns norm^2. */
double dt_grad_norm_finish(struct dt_grad_norm *gn);

#endif
