/* lr_schedule.c - OneCycleLR, cosine with warmup and the constant schedule
 * (see lr_schedule.h).
 *
 * OneCycle mirrors torch/optim/lr_scheduler.py (OneCycleLR.__init__ and
 * get_lr), cosine llm.c's get_learning_rate.  The expressions keep the
 * references' order of operations; changing one of them breaks the bit-exact
 * fixtures in tests/fixtures/onecycle.safetensors and cosine.safetensors.
 */
#include "worker/optim/lr_schedule.h"

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

/* lr * (s + 1) / N, then min_lr + coeff * (lr - min_lr): Python's order. */
static double cosine(const struct dt_lr_schedule *s)
{
    int64_t step = s->last_epoch, n = s->warmup_steps, total = s->total_steps;
    double lr = s->const_lr;
    if (step < n)
        return lr * (double)(step + 1) / (double)n;
    if (n >= total) /* step == S == N: the warmup's end (no cosine of 0/0) */
        return lr;
    double decay_ratio = (double)(step - n) / (double)(total - n);
    double coeff = 0.5 * (1.0 + cos(M_PI * decay_ratio));
    return s->min_lr + coeff * (lr - s->min_lr);
}

static void evaluate(struct dt_lr_schedule *s)
{
    if (s->type == DT_SCHED_COSINE) {
        s->lr = cosine(s);
        s->beta1 = s->const_beta1;
        return;
    }
    if (s->type == DT_SCHED_CONSTANT) {
        s->lr = s->const_lr;
        s->beta1 = s->const_beta1;
        return;
    }
    double step = (double)s->last_epoch, start_step = 0.0;
    for (int i = 0; i < s->n_phases; i++) {
        const struct dt_lr_schedule_phase *p = &s->phase[i];
        if (step <= p->end_step || i == s->n_phases - 1) {
            double pct = (step - start_step) / (p->end_step - start_step);
            s->lr = anneal(s->anneal, p->start_lr, p->end_lr, pct);
            s->beta1 = s->cycle_momentum ? anneal(s->anneal, p->start_m, p->end_m, pct) : s->const_beta1;
            return;
        }
        start_step = p->end_step;
    }
}

static int validate_cosine(const struct dt_scheduler_spec *spec, int64_t total_steps, double lr)
{
    if (total_steps <= 0)
        return dt_error_set(DT_EINVAL, "cosine: total steps must be a positive integer, got %lld",
                            (long long)total_steps);
    if (spec->warmup_steps < 0)
        return dt_error_set(DT_EINVAL, "trainer.scheduler.warmup_steps must be >= 0, got %lld",
                            (long long)spec->warmup_steps);
    if (!(spec->min_lr >= 0 && spec->min_lr <= lr))
        return dt_error_set(DT_EINVAL,
                            "trainer.scheduler.min_lr %g must be in [0, trainer.optimizer.lr] = [0, %g]",
                            spec->min_lr, lr);
    return 0;
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

int dt_lr_schedule_init(struct dt_lr_schedule *s, const struct dt_scheduler_spec *spec, int64_t total_steps,
                        double lr, double beta1)
{
    memset(s, 0, sizeof *s);
    s->type = spec->type;
    s->anneal = spec->anneal;
    s->cycle_momentum = spec->cycle_momentum;
    s->total_steps = total_steps;
    s->const_lr = lr;
    s->const_beta1 = beta1;
    s->warmup_steps = spec->warmup_steps;
    s->min_lr = spec->min_lr;
    if (s->type == DT_SCHED_COSINE) {
        int rc = validate_cosine(spec, total_steps, lr);
        if (rc)
            return rc;
    }
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
            s->phase[0] = (struct dt_lr_schedule_phase){pct * T - 1, initial, max, mmax, mbase};
            s->phase[1] = (struct dt_lr_schedule_phase){2 * pct * T - 2, max, initial, mbase, mmax};
            s->phase[2] = (struct dt_lr_schedule_phase){T - 1, initial, min, mmax, mmax};
        } else {
            s->n_phases = 2;
            s->phase[0] = (struct dt_lr_schedule_phase){pct * T - 1, initial, max, mmax, mbase};
            s->phase[1] = (struct dt_lr_schedule_phase){T - 1, max, min, mbase, mmax};
        }
    }
    evaluate(s);
    return 0;
}

int dt_lr_schedule_step(struct dt_lr_schedule *s)
{
    return dt_lr_schedule_seek(s, s->last_epoch + 1);
}

int dt_lr_schedule_seek(struct dt_lr_schedule *s, int64_t last_epoch)
{
    if (s->type == DT_SCHED_ONECYCLE && last_epoch > s->total_steps) /* torch's words */
        return dt_error_set(DT_EINVAL, "Tried to step %lld times. The specified number of total steps is %lld",
                            (long long)last_epoch, (long long)s->total_steps);
    if (s->type == DT_SCHED_COSINE && last_epoch > s->total_steps)
        return dt_error_set(DT_EINVAL, "cosine: step %lld is past the schedule's %lld steps", (long long)last_epoch,
                            (long long)s->total_steps);
    if (last_epoch < 0)
        return dt_error_set(DT_EINVAL, "lr schedule: negative step %lld", (long long)last_epoch);
    s->last_epoch = last_epoch;
    evaluate(s);
    return 0;
}
