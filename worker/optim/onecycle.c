/* onecycle.c - OneCycleLR and the constant schedule (see onecycle.h).
 *
 * Mirrors torch/optim/lr_scheduler.py (OneCycleLR.__init__ and get_lr).  The
 * expressions keep torch's order of operations; changing one of them breaks
 * the bit-exact fixtures in tests/fixtures/onecycle.safetensors.
 */
#include "worker/optim/onecycle.h"

#include <math.h>
#include <string.h>

#include "base/error.h"

/* cos: end + (start - end) / 2.0 * (cos(pi * pct) + 1); linear: (end - start) * pct + start. */
static double anneal(enum dt_anneal a, double start, double end, double pct)
{
    if (a == DT_ANNEAL_COS) {
        double cos_out = cos(M_PI * pct) + 1;
        return end + (start - end) / 2.0 * cos_out;
    }
    return (end - start) * pct + start;
}

static void evaluate(struct dt_onecycle *s)
{
    if (s->type == DT_SCHED_CONSTANT) {
        s->lr = s->const_lr;
        s->beta1 = s->const_beta1;
        return;
    }
    double step = (double)s->last_epoch, start_step = 0.0;
    for (int i = 0; i < s->n_phases; i++) {
        const struct dt_onecycle_phase *p = &s->phase[i];
        if (step <= p->end_step || i == s->n_phases - 1) {
            double pct = (step - start_step) / (p->end_step - start_step);
            s->lr = anneal(s->anneal, p->start_lr, p->end_lr, pct);
            s->beta1 = s->cycle_momentum ? anneal(s->anneal, p->start_m, p->end_m, pct) : s->const_beta1;
            return;
        }
        start_step = p->end_step;
    }
}

static int validate(const struct dt_scheduler_spec *spec, int64_t total_steps)
{
    if (total_steps <= 0)
        return dt_error_set(DT_EINVAL, "onecycle: total steps must be a positive integer, got %lld",
                            (long long)total_steps);
    if (!(spec->pct_start >= 0 && spec->pct_start <= 1))
        return dt_error_set(DT_EINVAL, "onecycle: pct_start must be in [0, 1], got %g", spec->pct_start);
    if (!(spec->max_lr > 0) || !(spec->div_factor > 0) || !(spec->final_div_factor > 0))
        return dt_error_set(DT_EINVAL, "onecycle: max_lr, div_factor and final_div_factor must be positive");
    return 0;
}

int dt_onecycle_init(struct dt_onecycle *s, const struct dt_scheduler_spec *spec, int64_t total_steps,
                     double lr, double beta1)
{
    memset(s, 0, sizeof *s);
    s->type = spec->type;
    s->anneal = spec->anneal;
    s->cycle_momentum = spec->cycle_momentum;
    s->total_steps = total_steps;
    s->const_lr = lr;
    s->const_beta1 = beta1;
    if (s->type == DT_SCHED_ONECYCLE) {
        int rc = validate(spec, total_steps);
        if (rc)
            return rc;
        double T = (double)total_steps, pct = spec->pct_start;
        double initial = spec->max_lr / spec->div_factor, max = spec->max_lr;
        double min = initial / spec->final_div_factor;
        double mmax = spec->max_momentum, mbase = spec->base_momentum;
        if (spec->three_phase) {
            s->n_phases = 3;
            s->phase[0] = (struct dt_onecycle_phase){pct * T - 1, initial, max, mmax, mbase};
            s->phase[1] = (struct dt_onecycle_phase){2 * pct * T - 2, max, initial, mbase, mmax};
            s->phase[2] = (struct dt_onecycle_phase){T - 1, initial, min, mmax, mmax};
        } else {
            s->n_phases = 2;
            s->phase[0] = (struct dt_onecycle_phase){pct * T - 1, initial, max, mmax, mbase};
            s->phase[1] = (struct dt_onecycle_phase){T - 1, max, min, mbase, mmax};
        }
    }
    evaluate(s);
    return 0;
}

int dt_onecycle_step(struct dt_onecycle *s)
{
    return dt_onecycle_seek(s, s->last_epoch + 1);
}

int dt_onecycle_seek(struct dt_onecycle *s, int64_t last_epoch)
{
    if (s->type == DT_SCHED_ONECYCLE && last_epoch > s->total_steps)
        return dt_error_set(DT_EINVAL, "Tried to step %lld times. The specified number of total steps is %lld",
                            (long long)last_epoch, (long long)s->total_steps);
    if (last_epoch < 0)
        return dt_error_set(DT_EINVAL, "onecycle: negative step %lld", (long long)last_epoch);
    s->last_epoch = last_epoch;
    evaluate(s);
    return 0;
}
