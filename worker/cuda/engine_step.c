/* engine_step.c - one training step of the CUDA engine: the batch's indices
 * (images) or tokens to the device, the model's forward, loss and backward (its GPU half,
 * model_cuda.h) with each gradient bucket's all-reduce started on the
 * communication stream as soon as backward reports it written, and the
 * optimizer; eagerly, or as one replayed CUDA graph.
 *
 * Per step (graph mode), host side: lr, beta1 and the batch's B indices
 * (tokens: its B*T inputs and B*T targets, from the host's loader) into a
 * pinned slot, one async copy, one graph launch.
 * Device side, in order:
 *   copy stream: wait slot.consumed (the step two back read d_idx),
 *                H2D slot, record slot.copied
 *   compute:     wait slot.copied, [graph: gather x,y (tokens: two
 *                device-to-device copies into the fixed x, y) | fwd | xent +
 *                loss sum | bwd | (sumsq) | AdamW], record slot.consumed
 *   comm (DDP):  per bucket i: wait bucket_ev[i] (recorded on the stream
 *                that wrote the bucket's last gradient), ncclAllReduce(avg);
 *                compute waits join_ev before the optimizer
 * The host writes a pinned slot only after its previous copy finished
 * (slot.copied), so it runs up to two steps ahead of the device.
 *
 * The graph bakes in the batch size and the micro-batch count, so it covers
 * the steps of one micro-batch of the training batch; the short last batch of
 * an epoch and gradient accumulation run the same kernels eagerly (equal
 * bits either way).  Not for set-up or evaluation: engine_cuda.c.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "comm/nccl/nccl_comm.h"
#include "worker/cuda/cuda_internal.h"
#include "worker/cuda/engine_internal.h"
#include "worker/data/batch.h"

static int cuda_call(cudaError_t e, const char *what)
{
    return e == cudaSuccess ? 0 : dt_cuda_err(e, what);
}

/* A host wait for the device; with NCCL bounded and abortable (a dead peer
 * would otherwise hang the rank here, a step or two after the last
 * collective that could finish). */
static int wait_event(struct dt_dev_model *d, cudaEvent_t ev, const char *what)
{
    if (d->cs)
        return dt_nccl_wait_event(d->c.comm, ev, what);
    return cuda_call(cudaEventSynchronize(ev), what);
}

/* Phase mark i on the compute stream (engine_internal.h).  While capturing,
 * recorded as external so the capture turns it into an event node that each
 * replay records anew (a plain record would only order the capture); outside
 * a capture that flag is an error (cudaErrorIllegalState), so a plain one. */
static int mark(struct dt_dev_model *d, int i)
{
    if (!d->marking)
        return 0;
    enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    int rc = cuda_call(cudaStreamIsCapturing(d->s, &cap), "cudaStreamIsCapturing (phase mark)");
    if (rc)
        return rc;
    if (cap == cudaStreamCaptureStatusActive)
        return cuda_call(cudaEventRecordWithFlags(d->phase_ev[i], d->s, cudaEventRecordExternal),
                         "cudaEventRecordWithFlags (phase mark in a capture)");
    return cuda_call(cudaEventRecord(d->phase_ev[i], d->s), "cudaEventRecord (phase mark)");
}

/* The model's report (model_cuda.h): gradients [ready_lo, n) are written
 * once `written_on` has run what it has queued.  Starts every bucket that is
 * ready (worker/buckets.h, the reducer's rule: in bucket order on every rank,
 * as collectives require) on the communication stream, behind an event on
 * `written_on`. */
static int start_buckets(void *ctx, size_t ready_lo, cudaStream_t written_on)
{
    struct dt_dev_model *d = ctx;
    while (dt_buckets_ready(&d->buckets, d->next_bucket, ready_lo)) {
        int i = d->next_bucket++;
        size_t lo = d->buckets.range[i][0], hi = d->buckets.range[i][1];
        int rc = dt_cuda_stream_after(d->cs, written_on, d->bucket_ev[i], "ordering a bucket after its gradients");
        if (!rc)
            rc = dt_nccl_allreduce_stream(d->c.comm, d->g + lo, hi - lo, DT_F32, DT_AVG, d->cs);
        if (rc)
            return dt_error_prefix("gradient bucket %d (floats %zu..%zu)", i, lo, hi);
    }
    return 0;
}

/* The model's backward (model_cuda.h), its buckets all-reduced as it
 * reports them when `communicate`; then the optimizer, on s, waits for the
 * communication stream. */
static int backward(struct dt_dev_model *d, int B, bool accumulate, bool communicate)
{
    d->next_bucket = 0;
    int rc = d->mo->backward(d->ms, B, accumulate, communicate ? start_buckets : NULL, d);
    if (!rc)
        rc = mark(d, 3);
    if (!rc && communicate) { /* the optimizer reads averaged gradients: compute waits for comm */
        rc = dt_cuda_stream_after(d->s, d->cs, d->join_ev, "ordering the optimizer after the buckets");
    }
    if (!rc)
        rc = mark(d, 4);
    return rc;
}

/* The slot's batch into x, y on the compute stream: images gathered from
 * the uploaded data set by index; tokens copied (inputs, then targets). */
static int load_batch(struct dt_dev_model *d, struct dt_engine_slot *sl, int B)
{
    if (!d->T)
        return dt_engine__gather(d->s, d->t, d->x, d->y, d->train_img, d->train_lbl, sl->d_idx, 0, B, d->px,
                                 d->lut);
    size_t bytes = (size_t)B * (size_t)d->T * sizeof(int32_t);
    int rc = cuda_call(cudaMemcpyAsync(d->x, sl->d_idx, bytes, cudaMemcpyDeviceToDevice, d->s),
                       "cudaMemcpyAsync (token inputs)");
    if (!rc)
        rc = cuda_call(cudaMemcpyAsync(d->y, sl->d_idx + (size_t)B * (size_t)d->T, bytes,
                                       cudaMemcpyDeviceToDevice, d->s),
                       "cudaMemcpyAsync (token targets)");
    return rc;
}

/* One micro-batch from the slot; `count_loss` false only for the
 * warm-up before a capture (it must leave the loss sum alone). */
static int micro(struct dt_dev_model *d, struct dt_engine_slot *sl, int B, float dscale, bool accumulate,
                 bool communicate, bool count_loss)
{
    struct dt_model_cuda_loss ls = {.backward = true,
                                    .dscale = dscale,
                                    .loss_scale = d->c.fp16 ? &d->sc->scale : NULL,
                                    .loss_sum = &d->sc->loss,
                                    .correct = &d->sc->correct,
                                    .loss_acc = count_loss ? &d->sc->loss_acc : NULL};
    int rc = mark(d, 0);
    if (!rc)
        rc = load_batch(d, sl, B);
    if (!rc)
        rc = mark(d, 1);
    if (!rc)
        rc = d->mo->forward_loss(d->ms, B, &ls);
    if (!rc)
        rc = mark(d, 2);
    if (!rc)
        rc = backward(d, B, accumulate, communicate);
    return rc;
}

/* ZeRO-1: every rank's updated shard of the parameters (and of their
 * 16-bit copy) to every rank, in place on the communication stream, which
 * waits for AdamW on s; s waits for it before anything reads them. */
static int gather_params(struct dt_dev_model *d)
{
    int rc = dt_cuda_stream_after(d->cs, d->s, d->zero_ev[0], "ordering the all-gather after AdamW");
    if (!rc)
        rc = dt_nccl_allgather_stream(d->c.comm, d->p, d->zper, DT_F32, d->cs);
    if (!rc && d->plow)
        rc = dt_nccl_allgather_stream(d->c.comm, d->plow, d->zper, d->c.fp16 ? DT_F16 : DT_BF16, d->cs);
    if (!rc)
        rc = dt_cuda_stream_after(d->s, d->cs, d->zero_ev[1], "ordering compute after the all-gather");
    return rc ? dt_error_prefix("ZeRO-1: all-gathering the parameters") : 0;
}

/* Gradient norm when clipping (the sum of squares feeds AdamW's clip
 * coefficient on the device; without clipping read_stats computes it from
 * the gradients left in the arena, only at metrics rows) and AdamW with lr,
 * beta1 from lr_beta1 (device); under ZeRO-1 AdamW over this rank's shard
 * (every rank has the whole averaged gradient, so the norm and the clip
 * coefficient are the same everywhere), then the all-gather. */
static int optimizer(struct dt_dev_model *d, const double *lr_beta1)
{
    struct dt_cuda_adamw_args a = {.beta2 = d->c.beta2,
                                   .eps = d->c.eps,
                                   .weight_decay = d->c.weight_decay,
                                   .grad_scale = 1.0f,
                                   .lowp_f16 = d->c.fp16,
                                   .nodecay = d->nodecay,
                                   .n_nodecay = d->n_nodecay};
    struct dt_engine_scalars *sc = d->sc;
    int rc = 0;
    /* fp16, as torch's GradScaler: unscale_ (g /= scale, found_inf), clip,
     * step (skipped on found_inf, AdamW's count unchanged), update (backoff
     * on inf, growth after growth_interval clean steps). */
    if (d->c.fp16)
        rc = dt_cuda_zero(d->k, &sc->found_inf, sizeof sc->found_inf);
    if (!rc && d->c.fp16)
        rc = dt_cuda_unscale_check(d->k, d->g, d->n, &sc->scale, &sc->found_inf);
    if (!rc && d->c.grad_clip > 0)
        rc = dt_cuda_sumsq(d->k, &sc->sumsq, d->g, d->n);
    size_t lo = d->zero ? d->zlo : 0, n = d->zero ? d->zn : d->n;
    void *plow = d->plow ? (void *)((uint16_t *)d->plow + lo) : NULL;
    if (!rc && n > 0)
        rc =
            dt_cuda_adamw_dev(d->k, d->p + lo, d->g + lo, d->m, d->v, plow, n, &a, lr_beta1, &sc->sumsq,
                              (float)d->c.grad_clip, &sc->adam_step, d->c.fp16 ? &sc->found_inf : NULL, NULL);
    if (!rc && d->zero)
        rc = gather_params(d);
    if (!rc && d->c.fp16 && d->c.dynamic_scale)
        rc = dt_cuda_scaler_update(d->k, &sc->scale, &sc->growth_tracker, &sc->found_inf,
                                   (float)d->c.growth_factor, (float)d->c.backoff_factor,
                                   d->c.growth_interval);
    if (!rc)
        rc = mark(d, DT_ENGINE_PHASES);
    return rc;
}

size_t dt_engine__slot_ints(const struct dt_dev_model *d, int rows)
{
    return d->T ? 2 * (size_t)rows * (size_t)d->T : (size_t)rows;
}

/* The next pinned slot, once its last copy has left it. */
static int next_slot(struct dt_dev_model *d, struct dt_engine_slot **out)
{
    int i = d->next_slot;
    d->next_slot = (i + 1) % DT_ENGINE_SLOTS;
    *out = &d->slot[i];
    return wait_event(d, d->slot[i].copied, "waiting for a free batch slot");
}

/* A token batch of the host's loader into the next pinned slot: inputs,
 * then targets, each [rows, T]. */
static int take_tokens(struct dt_dev_model *d, const struct dt_batch *b, int *rows,
                       struct dt_engine_slot **out)
{
    if (!b || b->kind != DT_BATCH_TOKENS || b->n < 1 || b->n > d->c.batch || b->T != d->T)
        return dt_error_set(
            DT_EINTERNAL,
            "cuda trainer: a training batch of %d rows of %d tokens for batches of at most %d "
            "rows of %d",
            b ? b->n : 0, b ? b->T : 0, d->c.batch, d->T);
    int rc = next_slot(d, out);
    if (rc)
        return rc;
    size_t n = (size_t)b->n * (size_t)d->T;
    memcpy((*out)->h_idx, b->inputs, n * sizeof(int32_t));
    memcpy((*out)->h_idx + n, b->targets, n * sizeof(int32_t));
    *rows = b->n;
    return 0;
}

/* This rank's indices of `batch` into the next pinned slot. */
static int take_slot(struct dt_dev_model *d, int64_t epoch, int64_t batch, int *rows,
                     struct dt_engine_slot **out)
{
    if (d->order_epoch != epoch) {
        dt_sampler_epoch(&d->sampler, epoch, d->order);
        d->order_epoch = epoch;
    }
    int64_t bs = d->c.batch, left = d->sampler.num_samples - batch * bs;
    int n = left < bs ? (int)left : (int)bs;
    if (n < 1 || batch < 0)
        return dt_error_set(DT_EINTERNAL,
                            "cuda trainer: batch %lld of epoch %lld is past this rank's %lld examples",
                            (long long)batch, (long long)epoch, (long long)d->sampler.num_samples);
    struct dt_engine_slot *sl = NULL;
    int rc = next_slot(d, &sl);
    if (rc)
        return rc;
    const int64_t *src = d->order + batch * bs;
    for (int r = 0; r < n; r++)
        sl->h_idx[r] = (int32_t)src[r];
    *rows = n;
    *out = sl;
    return 0;
}

/* The slot (lr, beta1 and the batch of n rows) host -> device on the copy
 * stream; compute waits for it. */
static int send_slot(struct dt_dev_model *d, struct dt_engine_slot *sl, int n)
{
    int rc = cuda_call(cudaStreamWaitEvent(d->copy, sl->consumed, 0), "cudaStreamWaitEvent (slot consumed)");
    if (!rc)
        rc = cuda_call(cudaMemcpyAsync(sl->d_buf, sl->h_buf,
                                       2 * sizeof(double) + dt_engine__slot_ints(d, n) * sizeof(int32_t),
                                       cudaMemcpyHostToDevice, d->copy),
                       "cudaMemcpyAsync (the batch)");
    if (!rc)
        rc = dt_cuda_stream_after(d->s, d->copy, sl->copied, "ordering the step after its batch's copy");
    return rc;
}

static int send_hyper(struct dt_dev_model *d, double lr, double beta1)
{
    int i = d->next_hyper;
    d->next_hyper = (i + 1) % DT_ENGINE_SLOTS;
    int rc = wait_event(d, d->hyper_copied[i], "waiting for a free lr slot");
    if (rc)
        return rc;
    d->h_hyper[i][0] = lr;
    d->h_hyper[i][1] = beta1;
    rc = cuda_call(
        cudaMemcpyAsync(d->d_hyper, d->h_hyper[i], 2 * sizeof(double), cudaMemcpyHostToDevice, d->s),
        "cudaMemcpyAsync (lr, beta1)");
    if (!rc)
        rc = cuda_call(cudaEventRecord(d->hyper_copied[i], d->s), "cudaEventRecord (lr copied)");
    return rc;
}

/* The whole step of this slot as a graph: a warm-up of the same shapes
 * first (cuBLASLt plans and the backward ways are chosen by timing, which a
 * capture must not do), then capture and instantiate. */
static int capture(struct dt_dev_model *d, struct dt_engine_slot *sl, int B, float dscale,
                   cudaGraphExec_t *exec)
{
    bool comm = d->cs != NULL;
    int rc = 0;
    if (!d->warmed) {
        bool marking = d->marking;
        d->marking = false;
        rc = micro(d, sl, B, dscale, false, false, false);
        d->marking = marking;
        if (!rc)
            rc = dt_engine__wait(d, "warming up before the graph capture");
        if (rc)
            return rc;
        d->warmed = true;
    }
    cudaGraph_t g = NULL;
    rc = cuda_call(cudaStreamBeginCapture(d->s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    if (rc)
        return rc;
    int erc = micro(d, sl, B, dscale, false, comm, true);
    if (!erc)
        erc = optimizer(d, sl->d_buf);
    cudaError_t e = cudaStreamEndCapture(d->s, &g);
    if (!erc && e != cudaSuccess)
        erc = dt_cuda_err(e, "cudaStreamEndCapture");
    if (!erc)
        erc = cuda_call(cudaGraphInstantiate(exec, g, 0), "cudaGraphInstantiate");
    if (g)
        cudaGraphDestroy(g);
    if (erc)
        return dt_error_prefix(
            "trainer.cuda_graph: capturing the training step (set cuda_graph: false to run "
            "without graphs)");
    return 0;
}

int dt_engine__train_batch(struct dt_dev_model *d, const struct dt_batch *b, int64_t epoch, int64_t batch,
                           int k, bool accumulate, bool last, int *rows)
{
    struct dt_engine_slot *sl = NULL;
    if (d->pending)
        return dt_error_set(DT_EINTERNAL, "cuda trainer: a micro-batch after the whole step was queued");
    int rc = d->T ? take_tokens(d, b, rows, &sl) : take_slot(d, epoch, batch, rows, &sl);
    if (rc)
        return rc;
    /* the mean over the step's examples or target tokens, as trainer_loop.c
     * scales the CPU model's loss (dt_batch_terms) */
    float dscale = 1.0f / ((float)*rows * (float)(d->T ? d->T : 1) * (float)k);
    if (!accumulate)
        d->marking = d->time_next && d->phase_ev[0]; /* this step is the timed one */
    if (d->c.cuda_graph && !accumulate && last && *rows == d->c.batch) {
        d->pending = true; /* update() launches the whole step once it knows lr */
        d->pending_slot = (int)(sl - d->slot);
        d->pending_rows = *rows;
        d->pending_dscale = dscale;
        return 0;
    }
    rc = send_slot(d, sl, *rows);
    if (!rc)
        rc = micro(d, sl, *rows, dscale, accumulate, last && d->cs, true);
    if (!rc)
        rc = cuda_call(cudaEventRecord(sl->consumed, d->s), "cudaEventRecord (slot consumed)");
    return rc;
}

int dt_engine__update(struct dt_dev_model *d, double lr, double beta1)
{
    int rc = 0;
    if (!d->pending) { /* eager: the indices went with the micro-batches; lr and beta1 on their own */
        rc = send_hyper(d, lr, beta1);
        if (!rc)
            rc = optimizer(d, d->d_hyper);
    } else {
        d->pending = false;
        struct dt_engine_slot *sl = &d->slot[d->pending_slot];
        cudaGraphExec_t *exec = d->marking ? &sl->timed : &sl->graph;
        sl->h_buf[0] = lr; /* the slot is free: take_slot waited for its last copy */
        sl->h_buf[1] = beta1;
        rc = send_slot(d, sl, d->pending_rows);
        if (!rc && !*exec)
            rc = capture(d, sl, d->pending_rows, d->pending_dscale, exec);
        if (!rc)
            rc = cuda_call(cudaGraphLaunch(*exec, d->s), "cudaGraphLaunch (training step)");
        if (!rc)
            rc = cuda_call(cudaEventRecord(sl->consumed, d->s), "cudaEventRecord (slot consumed)");
    }
    if (d->marking) {
        d->marking = d->time_next = false;
        d->timed_any = true;
    }
    if (!rc)
        dt_engine__profile_step(d);
    return rc;
}

/* Phase i lasts from mark i to mark i+1 of the last timed step (the first
 * step after the previous call; the marks cost time, so only it has them).
 * A step with gradient accumulation marks each micro-batch: the split is
 * then the last micro-batch's phases and the optimizer's. */
int dt_engine__read_split(struct dt_dev_model *d, double split_s[DT_ENGINE_PHASES])
{
    for (int i = 0; i < DT_ENGINE_PHASES; i++)
        split_s[i] = NAN;
    if (!d->phase_ev[0])
        return 0;
    d->time_next = true;
    if (!d->timed_any)
        return 0;
    int rc = wait_event(d, d->phase_ev[DT_ENGINE_PHASES], "waiting for the step to time its phases");
    if (rc)
        return rc;
    for (int i = 0; i < DT_ENGINE_PHASES; i++) {
        float ms = 0;
        if (cudaEventElapsedTime(&ms, d->phase_ev[i], d->phase_ev[i + 1]) == cudaSuccess)
            split_s[i] = 1e-3 * (double)ms;
    }
    cudaGetLastError(); /* a mark not yet recorded (no step yet) is not an error of the next call */
    return 0;
}
