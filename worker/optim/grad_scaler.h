/* grad_scaler.h - dynamic loss scaling, exactly torch.amp.GradScaler's state machine.
 *
 * fp16 gradients underflow (below 2^-24 they are zero): the loss is multiplied
 * by `scale` before backward, the gradients divided by it (multiplied by
 * float(1 / (double)scale), as torch does) before the optimizer.  When any
 * gradient element on any rank is inf or NaN the optimizer step is skipped
 * (AdamW's step count does not advance, parameters and moments stay) and the
 * scale backs off; after growth_interval clean steps in a row it grows:
 *
 *   found_inf:  scale = float(scale * backoff_factor), tracker = 0
 *   else:       tracker + 1 == growth_interval ? (scale = float(scale * growth_factor)
 *               if that is finite; tracker = 0) : tracker += 1
 *
 * The learning-rate schedule still steps on a skipped step: a PyTorch loop
 * calls scheduler.step() after scaler.step(optimizer) whether or not the
 * optimizer stepped, and we match it.  A fixed loss scale (loss_scale: <n>)
 * skips overflowing steps too but never changes the scale.
 *
 * The state is plain host data, so the CPU and CUDA trainers share this file;
 * the unscale-and-check pass itself is a kernel of each device.  Not for
 * autocast (which GEMMs run in low precision: the model's, e.g.
 * worker/models/mlp.c).
 */
#ifndef DT_GRAD_SCALER_H
#define DT_GRAD_SCALER_H

#include <stdbool.h>
#include <stdint.h>

#include "comm/comm.h"
#include "spec/trainer_spec.h"

struct dt_grad_scaler {
    bool enabled;            /* false (amp off): scale 1, nothing checked, never skips */
    bool dynamic;            /* false: a fixed scale */
    float scale;             /* torch's _scale (a float32 tensor there) */
    int32_t growth_tracker;  /* clean steps in a row since the last change */
    double growth_factor, backoff_factor;
    int32_t growth_interval;
    bool found_inf;          /* the last step's agreed decision */
    int64_t skipped;         /* optimizer steps skipped so far (checkpointed) */
};

/* From the spec's amp section; the scaler is enabled whenever dtype is not off. */
int dt_grad_scaler_init(struct dt_grad_scaler *s, const struct dt_amp_spec *a);

/* What dloss is multiplied by before backward (1 when disabled). */
float dt_grad_scaler_loss_scale(const struct dt_grad_scaler *s);

/* float(1.0 / (double)scale): torch takes the reciprocal in double because an
 * fp32 division "can be imprecise for certain compile options". */
float dt_grad_scaler_inv_scale(const struct dt_grad_scaler *s);

/* Agrees on found_inf over all ranks (all-reduce MAX of the local flags), so
 * every rank skips or steps together; comm may be NULL for one process.
 * Sets s->found_inf and *skip. */
int dt_grad_scaler_agree(struct dt_grad_scaler *s, struct dt_comm *comm, bool local_found, bool *skip);

/* torch._amp_update_scale_ with s->found_inf; counts a skipped step. */
void dt_grad_scaler_update(struct dt_grad_scaler *s);

#endif
