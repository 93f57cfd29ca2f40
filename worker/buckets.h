/* buckets.h - the gradient buckets of data parallelism: which exist, and when
 * one is ready to be all-reduced.  The one rule the CPU reducer (reducer.c)
 * and the CUDA engine (cuda/engine_step.c) both follow, so the two cannot cut
 * or start them differently.
 *
 * The gradient arena (worker/models/model.h) is cut into buckets of whole
 * tensors in reverse parameter order, the order backward produces them: the
 * first bucket closes once it holds first_bucket_bytes (1 MiB, as PyTorch
 * DDP's rebuilt buckets), the others at bucket_cap_bytes (25 MiB); a tensor
 * written in row chunks gets a bucket per chunk (`cut`: the last chunk, the
 * first rows, is the smallest).  Buckets are views into the arena ([lo, hi)
 * floats), so nothing is copied.
 *
 * Backward reports "gradients [ready_lo, n) are final" with ready_lo moving
 * down; bucket i is ready once its lo is at or above ready_lo.  Buckets start
 * in index order on every rank, as collectives require (PyTorch's Reducer
 * does the same), so a bucket waits for the ones before it.
 *
 * Not for sending anything: the reducer and the engine start the all-reduces.
 */
#ifndef DT_BUCKETS_H
#define DT_BUCKETS_H

#include <stdbool.h>
#include <stddef.h>

/* range[i] = [lo, hi) floats of the arena, in launch order: range[0] holds
 * the last parameters. */
struct dt_buckets {
    size_t (*range)[2];
    int n;
};

/* bounds[0..n_tensors] are the tensors' start offsets in the arena,
 * ascending, bounds[0] == 0, bounds[n_tensors] the arena's floats.  A
 * "tensor" may be a row chunk of one (dt_model_grad_segments); cut, when not
 * NULL, marks those where a bucket must start whatever its size. */
int dt_buckets_plan(struct dt_buckets *b, const size_t *bounds, const bool *cut, int n_tensors,
                    double first_bucket_bytes, double bucket_cap_bytes);
/* dst gets its own copy of src's table. */
int dt_buckets_copy(struct dt_buckets *dst, const struct dt_buckets *src);
void dt_buckets_release(struct dt_buckets *b);

/* Bucket `next` (the first not yet started this backward) may start: it
 * exists and gradients [ready_lo, n) cover it. */
static inline bool dt_buckets_ready(const struct dt_buckets *b, int next, size_t ready_lo)
{
    return next < b->n && b->range[next][0] >= ready_lo;
}

#endif
