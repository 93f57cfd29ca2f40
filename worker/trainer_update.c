/* trainer_update.c - the optimizer step after a step's gradients are
 * averaged, and where they and the optimizer's state live: decided once at
 * set-up (dt_trainer__choose_home), so the loop calls t->home->update and
 * nothing in a step asks again.  Four homes:
 *
 *   device   the accelerator holds gradients, moments and parameters and
 *            runs norm, clipping, AMP and AdamW itself (kernels.h);
 *   zero1    every rank's own gradient arena, averaged in place; AdamW's
 *            moments and the update for this rank's shard (zero.h), then
 *            the all-gather of the parameters;
 *   host     the averages in one host-wide array, with one copy of the
 *            parameters and moments for the host; each rank updates its
 *            slice, then a barrier (host_state.h);
 *   own      every rank's own arena, averaged in place, and the whole
 *            update on every rank (one rank, tcp, share_state off).
 *
 * A host step: the test hook, AMP's unscale of this rank's part of the
 * averages and the agreement on inf/NaN, the norm (for clipping and the
 * metrics), AdamW, the scaler's update, the schedule.  A skipped AMP step
 * leaves parameters, moments and AdamW's step count alone but still steps
 * the schedule, as a PyTorch loop (scaler.step(opt); scaler.update();
 * sched.step()) does.  Not for the micro-batches: trainer_loop.c.
 */
#include "worker/trainer_internal.h"

#include <math.h>

#include "base/error.h"

/* norm and clipping, AMP and AdamW on the device; its norm is read at metrics rows */
static int device_update(struct dt_trainer *t, bool want_norm, double *norm, bool *skipped)
{
    (void)want_norm;
    *norm = NAN;
    *skipped = false;
    int rc = t->devk->update(t->dev, t->sched.lr, t->sched.beta1);
    return rc ? dt_error_prefix("optimizer step %lld", (long long)t->step) : dt_lr_schedule_step(&t->sched);
}

/* Under AMP: unscale this rank's part of the averages (the home's: one
 * host-wide copy, each rank its slice, the agreement below covers them all;
 * ZeRO-1: its shard, the only part it reads) and agree with every rank on
 * whether any was inf/NaN (then the optimizer step is skipped everywhere). */
static int unscale(struct dt_trainer *t, bool *skip)
{
    *skip = false;
    if (!t->scaler.enabled)
        return 0;
    bool bad = t->k->unscale(t->avg_part, t->avg_n, dt_grad_scaler_inv_scale(&t->scaler));
    return dt_grad_scaler_agree(&t->scaler, t->comm, bad, skip);
}

static int host_update(struct dt_trainer *t, bool want_norm, double *norm, bool *skipped)
{
    const struct dt_trainer_spec *s = &t->spec;
    float coef = 1.0f;
    bool skip;
    *norm = NAN;
    *skipped = false;
    if (t->o.after_reduce)
        t->o.after_reduce(t->o.ctx, t->model, t->step);
    int rc = unscale(t, &skip);
    if (rc)
        return rc;
    *skipped = skip;
    if (!skip && (s->optimizer.grad_clip > 0 || want_norm)) {
        double norm2 = NAN;
        if ((rc = t->home->norm2(t, &norm2)))
            return dt_error_prefix("step %lld", (long long)t->step);
        *norm = sqrt(norm2);
    }
    if (!skip && s->optimizer.grad_clip > 0)
        coef = dt_adamw_clip_coef(*norm, s->optimizer.grad_clip);
    if ((rc = t->home->adamw(t, skip, coef)))
        return dt_error_prefix("step %lld", (long long)t->step);
    dt_grad_scaler_update(&t->scaler);
    return dt_lr_schedule_step(&t->sched);
}

/* zero1: this shard's norm blocks, then everyone's; AdamW on the shard, then
 * the all-gather of the parameters. */
static int zero_norm2(struct dt_trainer *t, double *norm2)
{
    return dt_zero_norm(&t->zero, &t->gnorm, norm2);
}

static int zero_adamw(struct dt_trainer *t, bool skip, float coef)
{
    return dt_zero_step(&t->zero, &t->opt, t->model, skip, t->sched.lr, t->sched.beta1, coef);
}

/* host: this rank's slice, then the barrier before anyone's next forward */
static int host_norm2(struct dt_trainer *t, double *norm2)
{
    return dt_host_state_norm(&t->hs, &t->gnorm, norm2);
}

static int host_adamw(struct dt_trainer *t, bool skip, float coef)
{
    return dt_host_state_adamw(&t->hs, &t->opt, t->model, skip, t->sched.lr, t->sched.beta1, coef);
}

/* own: the whole arena here (the norm's blocks may already be summed behind
 * backward, trainer_loop.c) */
static int own_norm2(struct dt_trainer *t, double *norm2)
{
    *norm2 = dt_grad_norm_finish(&t->gnorm);
    return 0;
}

static int own_adamw(struct dt_trainer *t, bool skip, float coef)
{
    if (!skip)
        dt_adamw_step(&t->opt, t->model->params, t->model->grads, t->sched.lr, t->sched.beta1, coef);
    return 0;
}

static const struct dt_trainer_home home_device = {"device", device_update, NULL, NULL};
static const struct dt_trainer_home home_zero = {"zero1", host_update, zero_norm2, zero_adamw};
static const struct dt_trainer_home home_host = {"host", host_update, host_norm2, host_adamw};
static const struct dt_trainer_home home_own = {"own", host_update, own_norm2, own_adamw};

void dt_trainer__choose_home(struct dt_trainer *t)
{
    if (t->dev) {
        t->home = &home_device;
        t->avg_part = NULL;
        t->avg_n = 0;
    } else if (t->zero.comm) {
        t->home = &home_zero;
        t->avg_part = t->model->grads + t->zero.lo;
        t->avg_n = t->zero.hi - t->zero.lo;
    } else if (t->hs.common) {
        t->home = &home_host;
        t->avg_part = t->hs.avg + t->hs.lo;
        t->avg_n = t->hs.hi - t->hs.lo;
    } else {
        t->home = &home_own;
        t->avg_part = t->model->grads;
        t->avg_n = t->model->n_params;
    }
}
