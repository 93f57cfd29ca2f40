/* grad_scaler.c - torch.amp.GradScaler's state machine (see grad_scaler.h). */
#include "worker/optim/grad_scaler.h"

#include <math.h>
#include <string.h>

#include "base/error.h"

int dt_grad_scaler_init(struct dt_grad_scaler *s, const struct dt_amp_spec *a)
{
    memset(s, 0, sizeof *s);
    s->enabled = a->dtype != DT_AMP_OFF;
    s->dynamic = a->dynamic;
    double init = a->dynamic ? a->init_scale : a->loss_scale;
    if (!(init > 0) || !isfinite((float)init))
        return dt_error_set(DT_EINVAL, "trainer.amp: the %s %g must be a positive finite float",
                            a->dynamic ? "init_scale" : "loss_scale", init);
    if (!(a->growth_factor > 1) || !(a->backoff_factor > 0 && a->backoff_factor < 1) || a->growth_interval < 1)
        return dt_error_set(DT_EINVAL,
                            "trainer.amp: growth_factor %g must be > 1, backoff_factor %g in (0, 1), "
                            "growth_interval %d >= 1",
                            a->growth_factor, a->backoff_factor, a->growth_interval);
    s->scale = (float)init;
    s->growth_factor = a->growth_factor;
    s->backoff_factor = a->backoff_factor;
    s->growth_interval = a->growth_interval;
    return 0;
}

float dt_grad_scaler_loss_scale(const struct dt_grad_scaler *s)
{
    return s->enabled ? s->scale : 1.0f;
}

float dt_grad_scaler_inv_scale(const struct dt_grad_scaler *s)
{
    return s->enabled ? (float)(1.0 / (double)s->scale) : 1.0f;
}

/* One float per rank through MAX: 1 when that rank saw inf or NaN.  The same
 * check after the gradient all-reduce would usually agree anyway (an inf
 * propagates through the sum), but not for a NaN the transport drops or for a
 * value that overflows on one rank's side only; the explicit MAX is cheap. */
int dt_grad_scaler_agree(struct dt_grad_scaler *s, struct dt_comm *comm, bool local_found, bool *skip)
{
    float flag = local_found ? 1.0f : 0.0f;
    if (s->enabled && comm && dt_comm_world(comm) > 1 && dt_comm_allreduce(comm, &flag, &flag, 1, DT_F32, DT_MAX))
        return dt_error_prefix("agreeing on found_inf (loss scale %g)", (double)s->scale);
    s->found_inf = s->enabled && flag != 0.0f;
    *skip = s->found_inf;
    return 0;
}

/* ATen's _amp_update_scale_cpu_kernel: current_scale * factor evaluated in
 * double (the factors are doubles), stored as float; growth only when the
 * grown scale is finite, so 2^127 stays 2^127.  There is no lower clamp: a
 * run of overflows can back the scale off to 0. */
void dt_grad_scaler_update(struct dt_grad_scaler *s)
{
    if (!s->enabled)
        return;
    if (s->found_inf)
        s->skipped++;
    if (!s->dynamic)
        return;
    if (s->found_inf) {
        s->scale = (float)((double)s->scale * s->backoff_factor);
        s->growth_tracker = 0;
        return;
    }
    int32_t successful = s->growth_tracker + 1;
    if (successful == s->growth_interval) {
        float grown = (float)((double)s->scale * s->growth_factor);
        if (isfinite(grown))
            s->scale = grown;
        s->growth_tracker = 0;
    } else {
        s->growth_tracker = successful;
    }
}
