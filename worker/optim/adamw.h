/* adamw.h - torch.optim.AdamW (decoupled weight decay), state and step.
 *
 * The hyper-parameters that change per step (lr, beta1 under OneCycle) are
 * passed to each step, as a scheduler writes them into torch's param group;
 * bias correction uses the current beta1, as torch does.  The per-element
 * update is the kernel table's (kernels.h); this file computes its scalars in
 * double exactly as torch/optim/adam.py (_single_tensor_adam) does.
 *
 * Weight decay is per tensor, as torch's param groups give it (nanoGPT's
 * configure_optimizers: one group with weight_decay for the matrices and
 * embeddings, one with 0 for biases and LayerNorm): dt_adamw_set_decay()
 * takes the arena's tensors and their flags; floats between tensors
 * (padding) go with the tensor below them.  A tensor without decay is
 * stepped with the factor 1, which is torch skipping `p.mul_(1 - lr * 0)`:
 * the same bits.  Without the call every element decays.
 *
 * The moments may cover a part of the arena only (ZeRO stage 1,
 * worker/zero.h): m[i] and v[i] belong to arena element base + i.
 *
 * Not for clipping policy: the caller passes the clip coefficient.
 */
#ifndef DT_ADAMW_H
#define DT_ADAMW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "worker/kernels.h"

/* Elements [lo, next run's lo) of the arena decay or not. */
struct dt_adamw_run {
    size_t lo;
    bool decay;
};

struct dt_adamw {
    const struct dt_kernels *k;
    size_t n;       /* moments held: arena elements [base, base + n) */
    size_t base;    /* 0 unless the moments are one rank's shard (worker/zero.h) */
    double beta2, eps, weight_decay;
    int64_t step;   /* steps taken (torch's state['step']) */
    float *m, *v;   /* exp_avg and exp_avg_sq */
    float *own;     /* the allocation behind m and v; NULL after dt_adamw_use_state */
    struct dt_adamw_run *runs; /* ascending, runs[0].lo == 0; NULL: every element decays */
    int n_runs;
};

int dt_adamw_init(struct dt_adamw *a, const struct dt_kernels *k, size_t n, double beta2, double eps,
                  double weight_decay);
void dt_adamw_release(struct dt_adamw *a);

/* Per-tensor weight decay: tensor i starts at arena offset start[i] (any
 * order, disjoint) and decays when decay[i]; the floats up to the next
 * tensor's start go with it, and the tensor at the lowest offset also takes
 * the floats before it.  Adjacent tensors of one flag become one run. */
int dt_adamw_set_decay(struct dt_adamw *a, const size_t *start, const bool *decay, int n_tensors);

/* The moments live in m and v (n floats each, owned by the caller and kept
 * until dt_adamw_release) from now on, with their current values copied
 * there first unless `copy` is false: one copy for the ranks of a host
 * (host_state.h).  The optimizer's own allocation is freed. */
void dt_adamw_use_state(struct dt_adamw *a, float *m, float *v, bool copy);

/* One step over params/grads[base, base + n) (arena offsets) with this
 * step's lr and beta1; grads are multiplied by grad_scale first (the
 * clipping coefficient, 1 for none). */
void dt_adamw_step(struct dt_adamw *a, float *params, const float *grads, double lr, double beta1,
                   float grad_scale);

/* The same step over arena elements [lo, hi) only, inside [base, base + n)
 * (the update is elementwise, so ranks that split the arena among them get
 * the bits of one whole step, wherever the cuts fall). */
void dt_adamw_step_range(struct dt_adamw *a, float *params, const float *grads, size_t lo, size_t hi, double lr,
                         double beta1, float grad_scale);

/* torch.nn.utils.clip_grad_norm_'s coefficient: min(max_norm / (norm + 1e-6), 1),
 * computed in float as torch does on fp32 gradients. */
float dt_adamw_clip_coef(double total_norm, double max_norm);

#endif
