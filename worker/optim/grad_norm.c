/* grad_norm.c - the global gradient norm in fixed blocks (see grad_norm.h). */
#include "worker/optim/grad_norm.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

int dt_grad_norm_init(struct dt_grad_norm *gn, const struct dt_kernels *k, const float *grads, size_t n)
{
    memset(gn, 0, sizeof *gn);
    gn->k = k;
    gn->g = grads;
    gn->n = n;
    gn->blocks = (n + DT_GRAD_NORM_BLOCK - 1) / DT_GRAD_NORM_BLOCK;
    gn->s = gn->own = calloc(gn->blocks ? gn->blocks : 1, sizeof *gn->s);
    if (!gn->s)
        return dt_error_set(DT_ENOMEM, "gradient norm: no memory for %zu block sums", gn->blocks);
    gn->done = gn->blocks;
    return 0;
}

void dt_grad_norm_release(struct dt_grad_norm *gn)
{
    free(gn->own);
    gn->s = gn->own = NULL;
}

void dt_grad_norm_begin(struct dt_grad_norm *gn)
{
    gn->done = gn->blocks;
}

/* Blocks [first, done) as one call: the kernel may split them over threads. */
static void sum_down_to(struct dt_grad_norm *gn, size_t first)
{
    if (first >= gn->done)
        return;
    size_t lo = first * DT_GRAD_NORM_BLOCK, hi = gn->done * DT_GRAD_NORM_BLOCK;
    if (hi > gn->n)
        hi = gn->n;
    gn->k->sumsq_blocks(gn->s + first, gn->g + lo, hi - lo, DT_GRAD_NORM_BLOCK);
    gn->done = first;
}

/* Block b lies wholly in [lo, n) when b S >= lo: b >= ceil(lo / S). */
void dt_grad_norm_ready(struct dt_grad_norm *gn, size_t lo)
{
    sum_down_to(gn, (lo + DT_GRAD_NORM_BLOCK - 1) / DT_GRAD_NORM_BLOCK);
}

void dt_grad_norm_share(struct dt_grad_norm *gn, double *s)
{
    free(gn->own);
    gn->own = NULL;
    gn->s = s;
}

void dt_grad_norm_slice(struct dt_grad_norm *gn, size_t lo, size_t hi)
{
    if (hi > gn->n)
        hi = gn->n;
    if (lo < hi)
        gn->k->sumsq_blocks(gn->s + lo / DT_GRAD_NORM_BLOCK, gn->g + lo, hi - lo, DT_GRAD_NORM_BLOCK);
}

double dt_grad_norm_total(const struct dt_grad_norm *gn)
{
    double total = 0.0;
    for (size_t b = 0; b < gn->blocks; b++)
        total += gn->s[b];
    return total;
}

double dt_grad_norm_finish(struct dt_grad_norm *gn)
{
    sum_down_to(gn, 0);
    return dt_grad_norm_total(gn);
}
