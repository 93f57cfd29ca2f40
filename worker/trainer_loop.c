/* trainer_loop.c - the step loop (see trainer.h).
 *
 * One optimizer step: grad_accum micro-batches (fewer at the end of an
 * epoch), each a forward and a backward whose gradient ranges feed the
 * reducer; then the wait for the averaged gradients and the update where
 * set-up put them (trainer_update.c: the global norm for clipping and the
 * metrics, AdamW with the schedule's lr and beta1, the schedule's step).
 * Nothing here allocates.  Not for set-up: trainer.c.
 *
 * Divergence: a non-finite loss (this rank's, per micro-batch) or gradient
 * norm (after averaging: the same on every rank, so every rank stops at the
 * same step) ends the run with "training diverged at step N: ...", before
 * the step's checkpoint; a step the AMP scaler skipped is not divergence
 * (fp16 overflow is what it is there for).  On a device the loss and norm
 * are read at metrics rows, so it is caught there; the checkpoint writer
 * refuses a non-finite state in any case (ckpt.h).
 */
#include "worker/trainer_internal.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "base/clock.h"

struct window {          /* what a metrics row averages over */
    double loss, samples, t0;
};

/* On an accelerator (kernels.h): images: the engine makes each batch from
 * the sampler's indices; tokens: the host's loader reads each batch (started
 * where the CPU path starts it: an epoch's first batch, or a resume) and the
 * engine copies it over.  The loss stays on the device (read at metrics
 * rows), so nothing here waits for it. */
static int device_micro_batches(struct dt_trainer *t, int k, double *rows)
{
    if (t->tokens && (t->batch == 0 || t->step == t->resumed_from))
        dt_trainer__data_start(t, t->epoch, t->batch);
    for (int i = 0; i < k; i++) {
        const struct dt_batch *b = NULL;
        if (t->tokens) {
            int64_t w0 = dt_clock_ns();
            b = dt_trainer__data_next(t);
            dt_trace_span(t->trace, DT_TRACE_DATA, "data wait", w0, dt_clock_ns());
            if (!b)
                return dt_trainer__data_none(t);
        }
        int n = 0;
        int rc = t->devk->train_batch(t->dev, b, t->epoch, t->batch, k, i > 0, i == k - 1, &n);
        if (rc)
            return dt_error_prefix("step %lld, epoch %lld batch %lld", (long long)t->step, (long long)t->epoch,
                                   (long long)t->batch);
        *rows += n;
        t->batch = b ? b->index + 1 : t->batch + 1;
    }
    return 0;
}

/* Gradients backward reports are the step's final ones, as clipping sees them,
 * when no all-reduce (one rank), no AMP unscale and no test hook will change
 * them after backward: then the norm is summed block by block right behind
 * backward, while they are still in cache, instead of in one more pass over
 * the whole arena (worker/optim/grad_norm.h: the same bits either way). */
static bool norm_in_backward(const struct dt_trainer *t)
{
    return t->world <= 1 && !t->scaler.enabled && !t->o.after_reduce;
}

/* What the model's callback needs for one backward. */
struct ready_ctx {
    struct dt_trainer *t;
    bool norm; /* these gradients are final for clipping: sum their norm blocks now */
};

/* The model's callback: grads[lo, hi) are final for this backward. */
static void grads_ready(void *ctx, size_t lo, size_t hi)
{
    struct ready_ctx *r = ctx;
    dt_reducer_ready(&r->t->red, lo, hi);
    if (r->norm)
        dt_grad_norm_ready(&r->t->gnorm, lo);
}

/* A micro-batch loss that was not finite, kept for the divergence check
 * after the step (under AMP the scaler may yet skip the step). */
struct bad_loss {
    bool seen;
    double value;
    int micro;
};

/* trainer options' sample_log: each sample of the micro-batch with its
 * place in the epoch's global order (loader.h).  For tokens a sample is a
 * sequence: rank r's row i of batch b is sequence (b x W + r) x B + i of
 * the epoch, named by its first token (shard x 2^40 + offset, tokens.h). */
static void log_samples(struct dt_trainer *t, const struct dt_batch *b)
{
    const int64_t *idx = t->loader ? dt_loader_indices(t->loader) : NULL;
    int shard = 0;
    int64_t offset = 0;
    if (t->tokens)
        dt_tokens_origin(t->tokens, &shard, &offset);
    else if (!idx || b->kind != DT_BATCH_IMAGES)
        return;
    for (int i = 0; i < b->n; i++) {
        int64_t j = b->index * t->spec.data.batch_size + i;
        int64_t pos = t->tokens ? (b->index * t->world + t->rank) * b->n + i : j * t->world + t->rank;
        int64_t sample = t->tokens ? ((int64_t)shard << 40) + offset + (int64_t)i * b->T : idx[j];
        fprintf(t->sample_log, "%lld %lld %lld %lld\n", (long long)t->step + 1, (long long)t->epoch,
                (long long)pos, (long long)sample);
    }
    fflush(t->sample_log);
}

/* The micro-batches of one step; returns the rank's summed loss and rows.
 * want_norm: the step needs the gradient norm (clipping or a metrics row). */
static int micro_batches(struct dt_trainer *t, bool want_norm, double *loss, double *rows,
                         struct bad_loss *bad)
{
    int64_t left = t->batches_per_epoch - t->batch;
    int k = left < t->spec.ddp.grad_accum ? (int)left : t->spec.ddp.grad_accum;
    if (t->dev)
        return device_micro_batches(t, k, rows);
    if (t->batch == 0 || t->step == t->resumed_from)
        dt_trainer__data_start(t, t->epoch, t->batch);
    dt_grad_norm_begin(&t->gnorm);
    bool early = want_norm && norm_in_backward(t);
    for (int i = 0; i < k; i++) {
        int64_t w0 = dt_clock_ns();
        const struct dt_batch *b = dt_trainer__data_next(t);
        int64_t f0 = dt_clock_ns();
        dt_trace_span(t->trace, DT_TRACE_DATA, "data wait", w0, f0);
        if (!b)
            return dt_trainer__data_none(t);
        if (t->sample_log)
            log_samples(t, b);
        /* loss = mean over the micro-batch / k: the step's gradient is the mean over its micro-batches;
         * under AMP times the loss scale (a power of two while dynamic: exact). */
        float dscale = dt_grad_scaler_loss_scale(&t->scaler) / ((float)dt_batch_terms(b) * (float)k);
        dt_reducer_begin(&t->red, i == k - 1);
        struct ready_ctx ready = {t, early && i == k - 1};
        double l = dt_model_train_batch(t->model, b, dscale, i > 0, grads_ready, &ready);
        if (!isfinite(l) && !bad->seen)
            *bad = (struct bad_loss){true, l, i};
        *loss += l;
        int64_t b0 = t->model->backward_start_ns, b1 = dt_clock_ns();
        dt_trace_span(t->trace, DT_TRACE_COMPUTE, "forward", f0, b0);
        dt_trace_span(t->trace, DT_TRACE_COMPUTE, "backward", b0, b1);
        t->split_ns[0] += f0 - w0;
        t->split_ns[1] += b0 - f0;
        t->split_ns[2] += b1 - b0;
        *rows += b->n;
        t->batch = b->index + 1;
    }
    int64_t c0 = dt_clock_ns();
    int rc = dt_reducer_finish(&t->red);
    int64_t c1 = dt_clock_ns();
    dt_trace_span(t->trace, DT_TRACE_COMPUTE, "comm wait", c0, c1);
    t->split_ns[3] += c1 - c0;
    return rc;
}

/* The device's loss sum since the last row and the last step's gradient
 * norm (the one wait for the device per metrics row), and its utilisation
 * and memory as NVML reads them and the memory the engine took, per rank. */
static int device_stats(struct dt_trainer *t, struct window *w, double *norm)
{
    int rc = t->devk->read_stats(t->dev, &w->loss, norm);
    if (rc)
        return dt_error_prefix("step %lld", (long long)t->step);
    if ((rc = dt_trainer__device_scaler(t)))
        return rc;
    double split[DT_METRICS_SPLIT];
    if (t->devk->read_split && (rc = t->devk->read_split(t->dev, split)) == 0) {
        /* the device's own clock: one finished step stands for the window */
        for (int i = 0; i < DT_METRICS_SPLIT; i++)
            t->split_ns[i] = isfinite(split[i]) ? (int64_t)(split[i] * 1e9) : 0;
        t->split_steps = 1;
    }
    if (rc)
        return dt_error_prefix("step %lld", (long long)t->step);
    enum { V = DT_METRICS_GPU_VALUES };
    double mine[V], all[V * DT_METRICS_GPU_RANKS];
    t->devk->sample(t->dev, &mine[0], &mine[1], &mine[2]);
    bool each = t->comm && t->world > 1 && t->world <= DT_METRICS_GPU_RANKS; /* else rank 0's alone */
    int n = each ? t->world : 1;
    if (each && dt_comm_allgather(t->comm, mine, all, V, DT_F64))
        return dt_error_prefix("gathering the GPU utilisation of every rank");
    if (!each)
        memcpy(all, mine, sizeof mine);
    if (t->rank != 0 || !t->tb)
        return 0;
    for (int r = 0; r < n; r++) {
        char tu[48], tm[48], ta[48];
        snprintf(tu, sizeof tu, "gpu/util_pct_rank%d", r);
        snprintf(tm, sizeof tm, "gpu/mem_mib_rank%d", r);
        snprintf(ta, sizeof ta, "gpu/alloc_mib_rank%d", r);
        const char *const tags[] = {tu, tm, ta};
        if ((rc = dt_tb_scalars(t->tb, t->step, tags, &all[V * r], V)))
            return rc;
    }
    dt_metrics_set_gpu(&t->metrics, all, n);
    return 0;
}

/* Model FLOPs utilisation of a token run on a device: tokens/s (all ranks)
 * times the model's training FLOPs per token over the GPUs' peak
 * (kernels.h: NAN on a GPU whose peak is not known, and then no figure). */
static double mfu(const struct dt_trainer *t, double samples_per_s)
{
    if (!t->dev || !t->tokens || !t->devk->peak_flops)
        return NAN;
    double peak = t->devk->peak_flops(t->dev);
    return samples_per_s * t->spec.data.seq_len * dt_trainer__flops_per_token(t) / (peak * t->world);
}

/* The live line's device part: MFU when known, rank 0's GPU memory (NVML)
 * and what the engine took of it. */
static const char *device_note(const struct dt_trainer *t, char *buf, size_t len)
{
    buf[0] = 0;
    if (!t->dev)
        return buf;
    size_t at = 0;
    if (isfinite(t->metrics.mfu))
        at += (size_t)snprintf(buf, len, "  MFU %.1f%%", 100.0 * t->metrics.mfu);
    if (t->metrics.gpu_ranks > 0 && isfinite(t->metrics.gpu[1]))
        at += (size_t)snprintf(buf + at, len - at, "  GPU %.1f GiB", t->metrics.gpu[1] / 1024.0);
    if (t->metrics.gpu_ranks > 0 && isfinite(t->metrics.gpu[2]) && at < len)
        snprintf(buf + at, len - at, " (dtrain %.1f)", t->metrics.gpu[2] / 1024.0);
    return buf;
}

static int log_row(struct dt_trainer *t, struct window *w, double lr, double beta1, double norm)
{
    /* The stop request rides along: the signal reaches ranks at different steps, and all
     * must stop at the same one, or the others would wait in the next all-reduce. */
    double v[3] = {w->loss, w->samples, t->o.stop_request && *t->o.stop_request ? 1 : 0};
    double r0 = dt_clock_s();
    if (t->comm && t->world > 1 && dt_comm_allreduce(t->comm, v, v, 3, DT_F64, DT_SUM))
        return dt_error_prefix("averaging the loss over ranks");
    t->stopping = v[2] > 0;
    double now = dt_clock_s(), dt = now - w->t0;
    /* This all-reduce waits on every rank, as a step's do: a stalled link shows in time_s
     * whichever of the two it stalls. */
    t->train_s += now - r0;
    /* per image, or per target token: every row of a token run is seq_len of them */
    t->last_loss = v[0] / (v[1] * (t->tokens ? t->spec.data.seq_len : 1));
    double sps = dt > 0 ? v[1] / dt : NAN;
    double epoch = (double)t->epoch + (double)t->batch / (double)t->batches_per_epoch;
    if (t->rank == 0) {
        for (int i = 0; i < DT_METRICS_SPLIT; i++)
            t->metrics.split[i] = t->split_steps ? 1e-9 * (double)t->split_ns[i] / (double)t->split_steps : NAN;
        t->metrics.amp = t->scaler.enabled;
        t->metrics.loss_scale = t->scaler.scale;
        t->metrics.skipped_steps = t->scaler.skipped;
        t->metrics.mfu = mfu(t, sps);
        int rc = dt_metrics_step(&t->metrics, t->step, epoch, t->last_loss, lr, beta1, norm, sps, t->train_s);
        if (rc)
            return rc;
        static const char *const tags[] = {"train/loss", "train/lr", "train/beta1", "train/grad_norm",
                                           "train/samples_per_s", "train/data_s", "train/forward_s",
                                           "train/backward_s", "train/comm_wait_s", "train/optimizer_s",
                                           "train/loss_scale", "train/skipped_steps"};
        double tv[] = {t->last_loss, lr, beta1, norm, sps, t->metrics.split[0], t->metrics.split[1],
                       t->metrics.split[2], t->metrics.split[3], t->metrics.split[4], t->scaler.scale,
                       (double)t->scaler.skipped};
        rc = dt_tb_scalars(t->tb, t->step, tags, tv, t->scaler.enabled ? 12 : 10);
        static const char *const token_tags[] = {"train/tokens_per_s", "train/mfu"};
        double ttv[] = {sps * t->spec.data.seq_len, t->metrics.mfu};
        if (!rc && t->tokens)
            rc = dt_tb_scalars(t->tb, t->step, token_tags, ttv, isfinite(t->metrics.mfu) ? 2 : 1);
        if (rc)
            return rc;
        char note[96];
        if (!t->o.quiet && t->tokens) /* a row is a sequence of seq_len tokens */
            printf("step %lld/%lld  epoch %.2f  loss %.4f  lr %.3g  grad_norm %.3g  %.0f tokens/s%s\n",
                   (long long)t->step, (long long)t->total_steps, epoch, t->last_loss, lr, norm,
                   sps * t->spec.data.seq_len, device_note(t, note, sizeof note));
        else if (!t->o.quiet)
            printf("step %lld/%lld  epoch %.2f  loss %.4f  lr %.3g  grad_norm %.3g  %.0f samples/s\n",
                   (long long)t->step, (long long)t->total_steps, epoch, t->last_loss, lr, norm, sps);
        fflush(stdout);
    }
    w->loss = w->samples = 0;
    w->t0 = dt_clock_s();
    memset(t->split_ns, 0, sizeof t->split_ns);
    t->split_steps = 0;
    return 0;
}

static int eval_row(struct dt_trainer *t)
{
    if (t->tokens && !t->val_loader) { /* no val glob: no loss to compute, only the sample */
        t->evaluated_at = t->step;
        return dt_trainer__sample(t);
    }
    int64_t e0 = dt_clock_ns();
    int rc = dt_trainer__evaluate(t);
    dt_trace_span(t->trace, DT_TRACE_COMPUTE, "evaluate", e0, dt_clock_ns());
    if (rc)
        return rc;
    if (t->rank == 0) {
        static const char *const test_tags[] = {"eval/test_loss", "eval/test_accuracy"};
        static const char *const val_tags[] = {"eval/val_loss", "eval/val_accuracy"};
        const char *const *tags = t->tokens ? val_tags : test_tags;
        double tv[] = {t->test_loss, t->test_acc};
        if ((rc = dt_metrics_eval(&t->metrics, t->step, (double)t->epoch, t->test_loss, t->test_acc)) ||
            (rc = dt_tb_scalars(t->tb, t->step, tags, tv, 2)))
            return rc;
        if (!t->o.quiet)
            printf("eval  step %lld  epoch %lld  %s %.4f  %s %.4f\n", (long long)t->step, (long long)t->epoch,
                   t->tokens ? "val_loss" : "test_loss", t->test_loss,
                   t->tokens ? "val_accuracy" : "test_accuracy", t->test_acc);
        fflush(stdout);
    }
    return t->tokens ? dt_trainer__sample(t) : 0;
}

/* What happens between steps: epoch end and evaluation, desync check, checkpoint. */
static int between_steps(struct dt_trainer *t)
{
    const struct dt_trainer_spec *s = &t->spec;
    int rc = 0;
    if (t->batch == t->batches_per_epoch) {
        t->epoch++;
        t->batch = 0;
        if (s->eval_every_epochs > 0 && t->epoch % s->eval_every_epochs == 0 && t->step < t->total_steps)
            rc = eval_row(t);
    }
    if (!rc && s->eval_every_steps > 0 && t->step % s->eval_every_steps == 0 && t->step < t->total_steps &&
        t->evaluated_at != t->step)
        rc = eval_row(t);
    int every = s->ddp.desync_check_every;
    if (!rc && t->dev && t->world > 1 && every > 0 && t->step % every == 0) /* the host mirror, then compare */
        rc = t->devk->get_state(t->dev, t->model->params, NULL, NULL, NULL);
    if (!rc && every > 0 && t->step % every == 0)
        rc = dt_reducer_check_same(&t->red, t->k, t->model->params, t->model->n_params, t->step);
    if (!rc && s->checkpoint.every_steps > 0 && t->step % s->checkpoint.every_steps == 0 &&
        t->step < t->total_steps) {
        int64_t c0 = dt_clock_ns();
        rc = dt_trainer__save(t);
        dt_trace_span(t->trace, DT_TRACE_COMPUTE, "checkpoint", c0, dt_clock_ns());
    }
    return rc;
}

/* The end of a step: the optimizer's time (from o0) into the split, and the
 * step's own spans: optimizer, the whole step from s0, and on the launch track
 * the first step of the run. */
static void end_step(struct dt_trainer *t, int64_t s0, int64_t o0, bool first)
{
    int64_t end = dt_clock_ns();
    t->split_ns[4] += end - o0;
    t->split_steps++;
    dt_trace_span(t->trace, DT_TRACE_COMPUTE, "optimizer", o0, end);
    dt_trace_span(t->trace, DT_TRACE_COMPUTE, "step", s0, end);
    if (first)
        dt_trace_span(t->trace, DT_TRACE_LAUNCH, "first step", s0, end);
}

/* The step just computed (t->step + 1, as its checkpoint would be named)
 * diverged when its loss or its gradient norm, where computed, is not
 * finite.  Every rank has the same norm; a loss is this rank's own.  Values
 * are printed through fabs: a loss or a norm is not negative, and a NaN's
 * sign bit would print as "-nan". */
static int check_step(const struct dt_trainer *t, const struct bad_loss *bad, bool have_norm, double norm,
                      bool skipped)
{
    long long step = (long long)t->step + 1;
    if (skipped) /* AMP: the scaler skipped it and backs off; parameters are untouched */
        return 0;
    if (bad->seen)
        return dt_error_set(
            DT_EINVAL,
            "training diverged at step %lld: loss is %g (epoch %lld, micro-batch %d of the step); "
            "nothing of this step is saved",
            step, fabs(bad->value), (long long)t->epoch, bad->micro);
    if (have_norm && !isfinite(norm))
        return dt_error_set(
            DT_EINVAL,
            "training diverged at step %lld: the gradient norm is %g (after averaging over ranks); "
            "nothing of this step is saved",
            step, fabs(norm));
    return 0;
}

/* At a metrics row, what a device reports (its loss and norm are read only
 * there): the loss averaged over ranks since the last row, the last step's
 * norm.  Under AMP the window may hold steps the scaler skipped, which is
 * not divergence; there the checkpoint's own check stands. */
static int check_row(const struct dt_trainer *t, double norm)
{
    if (t->scaler.enabled)
        return 0;
    if (!isfinite(t->last_loss))
        return dt_error_set(DT_EINVAL,
                            "training diverged by step %lld: the mean loss since the last metrics row is %g",
                            (long long)t->step, fabs(t->last_loss));
    if (t->dev && !isfinite(norm))
        return dt_error_set(DT_EINVAL, "training diverged at step %lld: the gradient norm is %g",
                            (long long)t->step, fabs(norm));
    return 0;
}

static int loop(struct dt_trainer *t)
{
    const struct dt_trainer_spec *s = &t->spec;
    struct window w = {0, 0, dt_clock_s()};
    int every = s->log_every_steps > 0 ? s->log_every_steps : 1;
    bool first = true;
    while (t->step < t->total_steps && !(t->o.stop_after > 0 && t->step >= t->o.stop_after)) {
        double t0 = dt_clock_s(), norm, rows = 0;
        double lr = t->sched.lr, beta1 = t->sched.beta1;
        dt_trace_set_step(t->trace, t->step);
        int64_t s0 = dt_clock_ns();
        bool log = (t->step + 1) % every == 0 || t->step + 1 == t->total_steps, skipped;
        bool want_norm = s->optimizer.grad_clip > 0 || log;
        struct bad_loss bad = {0};
        int rc = micro_batches(t, want_norm, &w.loss, &rows, &bad);
        int64_t o0 = dt_clock_ns();
        if (!rc)
            rc = t->home->update(t, log, &norm, &skipped); /* trainer_update.c */
        if (!rc)
            rc = check_step(t, &bad, want_norm && !t->dev, norm, skipped);
        if (rc)
            return rc;
        end_step(t, s0, o0, first);
        first = false;
        t->step++;
        w.samples += rows;
        t->samples += rows;
        if (log && t->dev && (rc = device_stats(t, &w, &norm)))
            return rc;
        t->train_s += dt_clock_s() - t0;
        if (log && ((rc = log_row(t, &w, lr, beta1, norm)) || (rc = check_row(t, norm))))
            return rc;
        if (t->o.step_done)
            t->o.step_done(t->o.ctx, t->step);
        double pause = dt_clock_s();
        if ((rc = between_steps(t)))
            return rc;
        w.t0 += dt_clock_s() - pause;
        if (t->o.after_step)
            t->o.after_step(t->o.ctx, t->model, t->step);
        if (t->stopping)
            break;
    }
    return 0;
}

/* The all-reduce of one step's buckets with no compute beside it: the
 * yardstick for how much of it overlap hides (bench/trainer_cpu.sh). */
static int time_allreduce(struct dt_trainer *t, double *per_step)
{
    *per_step = NAN;
    if (t->o.bench_allreduce <= 0 || t->world <= 1 || t->dev) /* the reducer's buckets are host memory */
        return 0;
    if (dt_comm_barrier(t->comm))
        return dt_error_prefix("barrier before timing the all-reduce");
    double t0 = dt_clock_s();
    for (int i = 0; i < t->o.bench_allreduce; i++) {
        dt_reducer_begin(&t->red, true);
        dt_reducer_ready(&t->red, 0, t->model->n_params);
        int rc = dt_reducer_finish(&t->red);
        if (rc)
            return rc;
    }
    *per_step = (dt_clock_s() - t0) / t->o.bench_allreduce;
    return 0;
}

/* Every rank's work time (train time less its data and all-reduce waits)
 * on rank 0, for the straggler finding of `dtrain report` and the end of
 * `dtrain launch`: the slow rank waits least, the others wait for it.  One
 * all-gather at the end of training, on every rank alike. */
static int gather_work(struct dt_trainer *t, struct dt_metrics_summary *s, double **out)
{
    *out = NULL;
    if (!t->comm || t->world < 2 || t->world > DT_METRICS_WORK_RANKS)
        return 0;
    double mine = s->train_s - (isfinite(s->data_wait_s) ? s->data_wait_s : 0) -
                  (isfinite(s->comm_wait_s) ? s->comm_wait_s : 0);
    double *all = malloc((size_t)t->world * sizeof *all);
    if (!all)
        return dt_error_set(DT_ENOMEM, "trainer: no memory to gather %d ranks' work times", t->world);
    if (dt_comm_allgather(t->comm, &mine, all, 1, DT_F64)) {
        free(all);
        return dt_error_prefix("gathering every rank's work time");
    }
    s->work_s = all;
    s->n_work = t->world;
    *out = all;
    return 0;
}

int dt_trainer_run(struct dt_trainer *t, struct dt_metrics_summary *res)
{
    double samples0 = t->samples;
    int rc = loop(t);
    int trc = dt_trace_write_dir(t->trace, t->run_dir); /* also after a failure: the trace shows where */
    rc = rc ? rc : trc;
    bool finished = t->step >= t->total_steps;
    if (!rc && finished && t->evaluated_at != t->step)
        rc = eval_row(t);
    if (!rc && finished) /* stop_after stands for a kill: no final checkpoint */
        rc = dt_trainer__save(t);
    int every_ckpt = t->spec.checkpoint.every_steps;
    if (!rc && !finished && t->stopping && !(every_ckpt > 0 && t->step % every_ckpt == 0))
        rc = dt_trainer__save(t); /* between_steps has not saved this step */
    double wait_before = t->red.wait_s, allreduce_s = NAN;
    if (!rc)
        rc = time_allreduce(t, &allreduce_s);
    t->red.wait_s = wait_before;
    struct dt_metrics_summary s = {
        .final_loss = t->last_loss, .test_loss = t->test_loss, .test_accuracy = t->test_acc,
        .samples_per_s = t->train_s > 0 ? (t->samples - samples0) * t->world / t->train_s : NAN,
        .train_s = t->train_s, .data_wait_s = dt_trainer__data_wait_s(t), .comm_wait_s = t->red.wait_s,
        .steps = t->step, .total_steps = t->total_steps,
        .epochs = (double)t->epoch + (double)t->batch / (double)t->batches_per_epoch,
        .world = t->world, .batch_size = t->spec.data.batch_size, .resumed_from = t->resumed_from,
        .allreduce_s = allreduce_s, .seq_len = t->tokens ? t->spec.data.seq_len : 0};
    double *work = NULL;
    if (!rc)
        rc = gather_work(t, &s, &work);
    if (!rc && t->rank == 0)
        rc = dt_metrics_write_summary(t->run_dir, &s);
    free(work);
    s.work_s = NULL;
    s.n_work = 0;
    if (!rc)
        rc = dt_tb_flush(t->tb);
    if (res)
        *res = s;
    return rc;
}

bool dt_trainer_stopped(const struct dt_trainer *t)
{
    return t->stopping && t->step < t->total_steps;
}
