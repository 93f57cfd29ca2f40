/* adamw.h - torch.optim.AdamW (decoupled weight decay), state and step.
 *
 * The hyper-parameters that change per step (lr, beta1 under OneCycle) are
 * passed to each step, as a scheduler writes them into torch's param group;
 * bias correction uses the current beta1, as torch does.  The per-element
 * update is the kernel table's (kernels.h); this file computes its scalars in
 * double exactly as torch/optim/adam.py (_single_tensor_adam) does.
 *
 * Not for clipping policy: the caller passes the clip coefficient.
 */
#ifndef DT_ADAMW_H
#define DT_ADAMW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "worker/kernels.h"

struct dt_adamw {
    const struct dt_kernels *k;
    size_t n;
    double beta2, eps, weight_decay;
    int64_t step;   /* steps taken (torch's state['step']) */
    float *m, *v;   /* exp_avg and exp_avg_sq */
    float *own;     /* the allocation behind m and v; NULL after dt_adamw_use_state */
};

int dt_adamw_init(struct dt_adamw *a, const struct dt_kernels *k, size_t n, double beta2, double eps,
                  double weight_decay);
void dt_adamw_release(struct dt_adamw *a);

/* The moments live in m and v (n floats each, owned by the caller and kept
 * until dt_adamw_release) from now on, with their current values copied
 * there first unless `copy` is false: one copy for the ranks of a host
 * (host_state.h).  The optimizer's own allocation is freed. */
void dt_adamw_use_state(struct dt_adamw *a, float *m, float *v, bool copy);

/* One step over params/grads[0..n) with this step's lr and beta1; grads are
 * multiplied by grad_scale first (the clipping coefficient, 1 for none). */
void dt_adamw_step(struct dt_adamw *a, float *params, const float *grads, double lr, double beta1,
                   float grad_scale);

/* The same step over elements [lo, hi) only (the update is elementwise, so
 * ranks that split [0, n) among them get the bits of one whole step). */
void dt_adamw_step_range(struct dt_adamw *a, float *params, const float *grads, size_t lo, size_t hi, double lr,
                         double beta1, float grad_scale);

/* torch.nn.utils.clip_grad_norm_'s coefficient: min(max_norm / (norm + 1e-6), 1),
 * computed in float as torch does on fp32 gradients. */
float dt_adamw_clip_coef(double total_norm, double max_norm);

#endif
