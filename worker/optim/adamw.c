/* adamw.c - AdamW scalars and state (see adamw.h). */
#include "worker/optim/adamw.h"
#include "base/arena.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

int dt_adamw_init(struct dt_adamw *a, const struct dt_kernels *k, size_t n, double beta2, double eps,
                  double weight_decay)
{
    memset(a, 0, sizeof *a);
    a->k = k;
    a->n = n;
    a->beta2 = beta2;
    a->eps = eps;
    a->weight_decay = weight_decay;
    a->m = a->own = dt_arena_calloc(2 * (n ? n : 1), sizeof(float));
    if (!a->m)
        return dt_error_set(DT_ENOMEM, "adamw: no memory for %zu moments", 2 * n);
    a->v = a->m + n;
    return 0;
}

void dt_adamw_use_state(struct dt_adamw *a, float *m, float *v, bool copy)
{
    if (copy) {
        memcpy(m, a->m, a->n * sizeof *m);
        memcpy(v, a->v, a->n * sizeof *v);
    }
    dt_arena_free(a->own);
    a->own = NULL;
    a->m = m;
    a->v = v;
}

void dt_adamw_release(struct dt_adamw *a)
{
    dt_arena_free(a->own);
    free(a->runs);
    a->m = a->v = a->own = NULL;
    a->runs = NULL;
    a->n_runs = 0;
}

static int by_lo(const void *x, const void *y)
{
    size_t a = ((const struct dt_adamw_run *)x)->lo, b = ((const struct dt_adamw_run *)y)->lo;
    return a < b ? -1 : a > b;
}

int dt_adamw_set_decay(struct dt_adamw *a, const size_t *start, const bool *decay, int n_tensors)
{
    struct dt_adamw_run *r = malloc((size_t)(n_tensors > 0 ? n_tensors : 1) * sizeof *r);
    if (!r)
        return dt_error_set(DT_ENOMEM, "adamw: no memory for the weight decay of %d tensors", n_tensors);
    for (int i = 0; i < n_tensors; i++)
        r[i] = (struct dt_adamw_run){start[i], decay[i]};
    qsort(r, (size_t)n_tensors, sizeof *r, by_lo);
    int n = 0;
    for (int i = 0; i < n_tensors; i++)
        if (n == 0 || r[i].decay != r[n - 1].decay)
            r[n++] = r[i];
    if (n == 0)
        r[n++] = (struct dt_adamw_run){0, true};
    r[0].lo = 0; /* floats before the lowest tensor go with it */
    free(a->runs);
    a->runs = r;
    a->n_runs = n;
    return 0;
}

/* step += 1; bias_correction1 = 1 - beta1**step; bias_correction2 = 1 - beta2**step;
 * step_size = lr / bias_correction1; bias_correction2_sqrt = bias_correction2**0.5.
 * Python floats are doubles; the tensor ops take them as float. */
void dt_adamw_step(struct dt_adamw *a, float *params, const float *grads, double lr, double beta1,
                   float grad_scale)
{
    dt_adamw_step_range(a, params, grads, a->base, a->base + a->n, lr, beta1, grad_scale);
}

/* The kernel over [lo, hi), one call per run of one decay flag. */
static void by_runs(struct dt_adamw *a, float *params, const float *grads, size_t lo, size_t hi,
                    struct dt_adamw_scalars *s)
{
    float decay = s->decay;
    int i = 0;
    while (i + 1 < a->n_runs && a->runs[i + 1].lo <= lo)
        i++;
    for (size_t at = lo; at < hi; i++) {
        size_t end = i + 1 < a->n_runs && a->runs[i + 1].lo < hi ? a->runs[i + 1].lo : hi;
        s->decay = a->runs && !a->runs[i].decay ? 1.0f : decay;
        a->k->adamw(params + at, grads + at, a->m + (at - a->base), a->v + (at - a->base), end - at, s);
        at = end;
    }
}

void dt_adamw_step_range(struct dt_adamw *a, float *params, const float *grads, size_t lo, size_t hi, double lr,
                         double beta1, float grad_scale)
{
    /* Saturating: a count from a checkpoint is held to its step (ckpt.c), but
     * the library takes any; at 2^63 steps beta^t is 0 for every beta < 1, so
     * the corrections are exact either way, and a wrap would make t negative. */
    if (a->step < INT64_MAX)
        a->step++;
    double t = (double)a->step;
    double bc1 = 1 - pow(beta1, t), bc2 = 1 - pow(a->beta2, t);
    struct dt_adamw_scalars s = {
        .decay = (float)(1 - lr * a->weight_decay),
        .w1 = (float)(1 - beta1),
        .beta2 = (float)a->beta2,
        .w2 = (float)(1 - a->beta2),
        .bc2_sqrt = (float)pow(bc2, 0.5),
        .eps = (float)a->eps,
        .neg_step = (float)(-(lr / bc1)),
        .grad_scale = grad_scale,
    };
    by_runs(a, params, grads, lo, hi, &s);
}

/* clip_coef = max_norm / (total_norm + 1e-6); clamped to 1.  total_norm is an
 * fp32 tensor in torch, so the sum is rounded to float first. */
float dt_adamw_clip_coef(double total_norm, double max_norm)
{
    float norm = (float)total_norm;
    float coef = (float)max_norm / (norm + 1e-6f);
    return coef < 1.0f ? coef : 1.0f;
}
