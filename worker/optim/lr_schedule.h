/* lr_schedule.h - learning-rate and beta1 schedules: OneCycleLR, cosine
 * with linear warmup, and constant.
 *
 * onecycle follows torch.optim.lr_scheduler.OneCycleLR bit for bit in
 * double: the same phases, the same expression order (so step 0 gives
 * 0.00039999999999999931 for max_lr 0.01, as torch does), cycle_momentum
 * writing Adam's beta1, and refusing the (total_steps+1)-th step.
 *
 * cosine is llm.c's (train_gpt2.c) and build-nanogpt's get_lr, for step s
 * (0-based) of S, warmup N, peak lr (the optimizer's) and min_lr:
 *   lr(s) = lr * (s + 1) / N                                   while s < N
 *   lr(s) = min_lr + 0.5 * (1 + cos(pi * (s - N) / (S - N))) * (lr - min_lr)
 * in that expression order, so the doubles are Python's.  N >= S warms up
 * throughout (the peak is reached only when N == S); N == 0 starts at the
 * peak.  nanoGPT's train.py warms up as lr * (s + 1) / (N + 1) and is the
 * same from step N on.  beta1 stays the optimizer's.
 *
 * Like torch, construction counts as step 0; call dt_lr_schedule_step() after
 * each optimizer step.  Not for the optimizer's own state: see adamw.h.
 */
#ifndef DT_LR_SCHEDULE_H
#define DT_LR_SCHEDULE_H

#include <stdbool.h>
#include <stdint.h>

#include "spec/trainer_spec.h"

struct dt_lr_schedule_phase {
    double end_step;
    double start_lr, end_lr, start_m, end_m;
};

struct dt_lr_schedule {
    enum dt_sched_type type;
    enum dt_anneal anneal;
    bool cycle_momentum;
    int64_t total_steps;
    int64_t warmup_steps;   /* cosine */
    double min_lr;          /* cosine */
    int64_t last_epoch;     /* torch's name: the number of step() calls so far */
    int n_phases;
    struct dt_lr_schedule_phase phase[3];
    double const_lr, const_beta1; /* the optimizer's: constant's, cosine's peak; beta1 when not cycling */
    double lr, beta1;       /* values for the next optimizer step */
};

/* Validates as torch does (total_steps > 0, pct_start in [0, 1], ...);
 * cosine: warmup_steps >= 0, min_lr in [0, lr], messages naming the keys.
 * `lr` and `beta1` are the optimizer's own (used by the constant schedule and
 * as beta1 when cycle_momentum is off). */
int dt_lr_schedule_init(struct dt_lr_schedule *s, const struct dt_scheduler_spec *spec, int64_t total_steps,
                        double lr, double beta1);

/* Advances one step; DT_EINVAL once past total_steps (onecycle and cosine). */
int dt_lr_schedule_step(struct dt_lr_schedule *s);

/* Jumps to step `last_epoch` (resuming from a checkpoint). */
int dt_lr_schedule_seek(struct dt_lr_schedule *s, int64_t last_epoch);

#endif
