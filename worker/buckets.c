/* buckets.c - the gradient buckets' layout (see buckets.h). */
#include "worker/buckets.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

/* Walk tensors from the last to the first; a bucket closes once it holds at
 * least the current limit (first_bucket_bytes for bucket 0, then the cap), at
 * the first tensor, or at a chunk start (cut). */
int dt_buckets_plan(struct dt_buckets *b, const size_t *bounds, const bool *cut, int nt, double first,
                    double cap)
{
    memset(b, 0, sizeof *b);
    if (nt < 1 || bounds[0] != 0)
        return dt_error_set(DT_EINVAL, "gradient buckets: %d tensors, the first at float %zu (wanted 0)", nt,
                            nt < 1 ? (size_t)0 : bounds[0]);
    if (!(first > 0) || !(cap > 0))
        return dt_error_set(DT_EINVAL, "gradient buckets: sizes must be positive (%g, %g bytes)", first, cap);
    b->range = calloc((size_t)nt, sizeof *b->range);
    if (!b->range)
        return dt_error_set(DT_ENOMEM, "gradient buckets: no memory for %d buckets", nt);
    size_t hi = bounds[nt];
    for (int t = nt - 1; t >= 0; t--) {
        double limit = b->n == 0 ? first : cap;
        double bytes = (double)(hi - bounds[t]) * sizeof(float);
        if (bytes >= limit || t == 0 || (cut && cut[t])) {
            b->range[b->n][0] = bounds[t];
            b->range[b->n][1] = hi;
            b->n++;
            hi = bounds[t];
        }
    }
    return 0;
}

int dt_buckets_copy(struct dt_buckets *dst, const struct dt_buckets *src)
{
    memset(dst, 0, sizeof *dst);
    dst->range = calloc((size_t)(src->n > 0 ? src->n : 1), sizeof *dst->range);
    if (!dst->range)
        return dt_error_set(DT_ENOMEM, "gradient buckets: no memory to copy %d buckets", src->n);
    if (src->n > 0)
        memcpy(dst->range, src->range, (size_t)src->n * sizeof *dst->range);
    dst->n = src->n;
    return 0;
}

void dt_buckets_release(struct dt_buckets *b)
{
    free(b->range);
    memset(b, 0, sizeof *b);
}
