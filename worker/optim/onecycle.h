/* onecycle.h - learning-rate and beta1 schedules: OneCycleLR and constant.
 *
 * dt_onecycle follows torch.optim.lr_scheduler.OneCycleLR bit for bit in
 * double: the same phases, the same expression order (so step 0 gives
 * 0.00039999999999999931 for max_lr 0.01, as torch does), cycle_momentum
 * writing Adam's beta1, and refusing the (total_steps+1)-th step.
 *
 * Like torch, construction counts as step 0; call dt_onecycle_step() after
 * each optimizer step.  Not for the optimizer's own state: see adamw.h.
 */
#ifndef DT_ONECYCLE_H
#define DT_ONECYCLE_H

#include <stdbool.h>
#include <stdint.h>

#include "spec/trainer_spec.h"

struct dt_onecycle_phase {
    double end_step;
    double start_lr, end_lr, start_m, end_m;
};

struct dt_onecycle {
    enum dt_sched_type type;
    enum dt_anneal anneal;
    bool cycle_momentum;
    int64_t total_steps;
    int64_t last_epoch;     /* torch's name: the number of step() calls so far */
    int n_phases;
    struct dt_onecycle_phase phase[3];
    double const_lr, const_beta1; /* constant schedule; also beta1 when not cycling */
    double lr, beta1;       /* values for the next optimizer step */
};

/* Validates as torch does (total_steps > 0, pct_start in [0, 1], ...).
 * `lr` and `beta1` are the optimizer's own (used by the constant schedule and
 * as beta1 when cycle_momentum is off). */
int dt_onecycle_init(struct dt_onecycle *s, const struct dt_scheduler_spec *spec, int64_t total_steps,
                     double lr, double beta1);

/* Advances one step; DT_EINVAL once past total_steps (onecycle only). */
int dt_onecycle_step(struct dt_onecycle *s);

/* Jumps to step `last_epoch` (resuming from a checkpoint). */
int dt_onecycle_seek(struct dt_onecycle *s, int64_t last_epoch);

#endif
