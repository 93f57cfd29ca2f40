/* trainer.c - setting a trainer up, checkpoints and evaluation (see trainer.h).
 *
 * Everything the step loop touches is allocated here, before the first step.
 * Not for the loop itself: trainer_loop.c.
 */
#include "worker/trainer_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"
#include "base/clock.h"
#include "worker/hf_weights.h"

#define DEFAULT_DATA "/usr/share/datasets/fashion-mnist"

static int check_spec(const struct dt_trainer_spec *s)
{
    if (strcmp(s->data.dataset, "fashion-mnist") && !dt_trainer__is_tokens(s))
        return dt_error_set(DT_EUNSUPPORTED,
                            "trainer.data.dataset '%s': this trainer reads 'fashion-mnist' and 'tokens'",
                            s->data.dataset);
    if (s->device == DT_DEVICE_CUDA && s->amp.dtype == DT_AMP_FP16 && !strcmp(s->model.type, "gpt2"))
        return dt_error_set(DT_EUNSUPPORTED, "trainer.amp.dtype fp16 is not offered for gpt2 on device: cuda (its "
                                             "GPU half is built for bf16 and fp32): use dtype bf16 or off");
    if (s->tf32 && s->device != DT_DEVICE_CUDA)
        return dt_error_set(DT_EINVAL, "trainer.tf32 is the GPU's fp32-on-tensor-cores mode; on device: cpu GEMMs "
                                       "are plain fp32: set device: cuda or drop tf32");
    if (s->device == DT_DEVICE_CUDA && !dt_trainer__device_kernels(s->device))
        return dt_error_set(DT_EUNSUPPORTED, "trainer.device cuda: this dtrain was built without CUDA (nvcc was "
                                             "not found at build time); rebuild with CUDA=1 or use device: cpu");
    if (s->data.batch_size < 1 || s->ddp.grad_accum < 1)
        return dt_error_set(DT_EINVAL, "trainer: batch_size %d and grad_accum %d must be >= 1", s->data.batch_size,
                            s->ddp.grad_accum);
    if ((s->epochs > 0) == (s->steps > 0))
        return dt_error_set(DT_EINVAL, "trainer: give exactly one of epochs and steps (epochs %d, steps %lld)",
                            s->epochs, (long long)s->steps);
    return 0;
}

static void paths(struct dt_trainer *t)
{
    snprintf(t->run_dir, sizeof t->run_dir, "%s", t->o.run_dir && *t->o.run_dir ? t->o.run_dir : ".");
    const char *d = t->spec.checkpoint.dir ? t->spec.checkpoint.dir : "checkpoints";
    if (d[0] == '/')
        snprintf(t->ckpt_dir, sizeof t->ckpt_dir, "%s", d);
    else
        snprintf(t->ckpt_dir, sizeof t->ckpt_dir, "%s/%s", t->run_dir, d);
}

static void set_threads(struct dt_trainer *t)
{
    int n = t->o.threads;
    if (n <= 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        int lw = t->o.local_world > 0 ? t->o.local_world : 1;
        n = cores > lw ? (int)(cores / lw) : 1;
    }
    t->k->set_threads(n);
}

/* trainer.init_from: every rank reads the weights (so they need no
 * broadcast), before the initial broadcast; a checkpoint found later
 * (maybe_resume) replaces them. */
static int init_from(struct dt_trainer *t)
{
    if (dt_hf_load(t->spec.init_from, t->model))
        return dt_error_prefix("trainer.init_from");
    if (t->rank == 0)
        dt_log_info("read the Hugging Face weights in %s (a checkpoint to resume from replaces them)",
                    t->spec.init_from);
    return 0;
}

/* The model of trainer.model.type for the training set's shape, with room
 * for evaluation batches. */
static int build_model(struct dt_trainer *t)
{
    const struct dt_trainer_spec *s = &t->spec;
    t->eval_batch = s->data.batch_size > 1000 ? s->data.batch_size : 1000;
    struct dt_model_config c = {.spec = &s->model,
                                .recompute = s->recompute,
                                .k = t->k,
                                .max_batch = t->eval_batch,
                                .seed = s->seed,
                                .data = {.kind = DT_BATCH_IMAGES,
                                         .features = t->train.rows * t->train.cols,
                                         .classes = t->train.classes}};
    if (t->tokens) { /* sequences of B, for training and validation alike */
        t->eval_batch = s->data.batch_size;
        /* on a device the host model only samples (one row at a time); the
         * engine sizes the batches on the GPU */
        c.max_batch = s->device == DT_DEVICE_CPU ? t->eval_batch : 1;
        c.data = (struct dt_batch_shape){
            .kind = DT_BATCH_TOKENS, .seq_len = s->data.seq_len, .vocab = s->model.vocab_size};
    }
    int rc = dt_model_create(&c, &t->model);
    if (rc)
        return rc;
    if (s->init_from && (rc = init_from(t)))
        return rc;
    static const enum dt_kprec prec[] = {[DT_AMP_OFF] = DT_KPREC_F32, [DT_AMP_BF16] = DT_KPREC_BF16,
                                         [DT_AMP_FP16] = DT_KPREC_F16};
    if ((rc = dt_model_set_precision(t->model, prec[s->amp.dtype])))
        return rc;
    t->eval.x = t->tokens ? NULL : calloc((size_t)t->eval_batch * (size_t)c.data.features, sizeof(float));
    t->eval.y = t->tokens ? NULL : calloc((size_t)t->eval_batch, sizeof(int32_t));
    if (!t->tokens && (!t->eval.x || !t->eval.y))
        return dt_error_set(DT_ENOMEM, "trainer: no memory for evaluation batches");
    /* DDP starts from rank 0's parameters; with one seed they agree anyway.
     * On a device the engine broadcasts its own copy. */
    if (t->comm && t->world > 1 && s->device == DT_DEVICE_CPU &&
        dt_comm_broadcast(t->comm, t->model->params, t->model->n_params, DT_F32, 0))
        return dt_error_prefix("broadcasting the initial parameters");
    return 0;
}

/* Buckets follow the ranges backward reports: with overlap, each chunk of a
 * tensor written in row chunks (worker/models/model.h) is its own bucket, so
 * the first layer's weight, written last in backward, is not one all-reduce
 * that nothing can hide; only its first 64 rows are. */
static int build_reducer(struct dt_trainer *t)
{
    const double MiB = 1024.0 * 1024.0;
    const struct dt_ddp_spec *d = &t->spec.ddp;
    int n = dt_model_grad_segments(t->model, NULL, NULL);
    size_t *bounds = malloc((size_t)(n + 1) * sizeof *bounds);
    bool *cut = malloc((size_t)(n + 1) * sizeof *cut);
    int rc = bounds && cut ? 0 : dt_error_set(DT_ENOMEM, "trainer: no memory for %d gradient segments", n);
    if (!rc) {
        dt_model_grad_segments(t->model, bounds, cut);
        rc = dt_reducer_init(&t->red, t->comm, t->model->grads, bounds, d->overlap ? cut : NULL, n, d->first_bucket_mb * MiB,
                             d->bucket_cap_mb * MiB, d->overlap);
    }
    free(bounds);
    free(cut);
    return rc;
}

/* AdamW's weight decay per tensor (dt_model_tensor.decay): nanoGPT's two
 * param groups. */
static int optimizer_decay(struct dt_trainer *t)
{
    int n = t->model->n_tensors;
    size_t *start = malloc((size_t)(n > 0 ? n : 1) * sizeof *start);
    bool *decay = malloc((size_t)(n > 0 ? n : 1) * sizeof *decay);
    int rc = start && decay ? 0 : dt_error_set(DT_ENOMEM, "trainer: no memory for %d tensors' weight decay", n);
    for (int i = 0; i < n && !rc; i++) {
        start[i] = t->model->tensors[i].offset;
        decay[i] = t->model->tensors[i].decay;
    }
    if (!rc)
        rc = dt_adamw_set_decay(&t->opt, start, decay, n);
    free(start);
    free(decay);
    return rc;
}

static int build_data(struct dt_trainer *t)
{
    const struct dt_trainer_spec *s = &t->spec;
    if (dt_trainer__is_tokens(s))
        return dt_trainer__tokens_build(t);
    const char *dir = s->data.path ? s->data.path : DEFAULT_DATA;
    /* An empty test set is refused here too (idx.h): its loss would be 0/0. */
    if (dt_data_load_fashion_mnist(dir, 1, &t->train))
        return dt_error_prefix("the training set");
    if (dt_data_load_fashion_mnist(dir, 0, &t->test))
        return dt_error_prefix("the test set");
    struct dt_loader_options lo = {.batch_size = s->data.batch_size, .drop_last = s->data.drop_last,
                                   .shuffle = s->data.shuffle, .seed = s->seed, .rank = t->rank,
                                   .world = t->world, .workers = s->data.workers, .prefetch = s->data.prefetch};
    int rc = dt_loader_create(&t->train, &lo, &t->loader);
    if (rc)
        return rc;
    t->batches_per_epoch = dt_loader_batches_per_epoch(t->loader);
    if (t->batches_per_epoch < 1)
        return dt_error_set(DT_EINVAL, "trainer: no batch of %d per rank fits in %lld examples over %d ranks",
                            s->data.batch_size, (long long)t->train.n, t->world);
    int64_t accum = s->ddp.grad_accum;
    t->steps_per_epoch = (t->batches_per_epoch + accum - 1) / accum;
    t->total_steps = s->steps > 0 ? s->steps : (int64_t)s->epochs * t->steps_per_epoch;
    return 0;
}

/* Rank 0 reads the newest intact checkpoint and keeps it in *ck; the step it
 * broadcasts (-1: none, -2: all damaged) tells the other ranks which file to
 * read.  Each rank reads and checks the file once. */
static int read_checkpoint(struct dt_trainer *t, struct dt_ckpt_file *ck, int64_t *step)
{
    *step = -1;
    int found = t->rank == 0 ? dt_ckpt_read_latest(t->ckpt_dir, ck) : DT_ENOTFOUND;
    if (found == 0) {
        *step = ck->step; /* the name's step too: dt_ckpt_read checks that they agree */
    } else if (found != DT_ENOTFOUND) {
        *step = -2;
        /* Said before the broadcast: the other ranks stop as soon as they hear,
         * and the agent may stop this one before its own exit message. */
        dt_log_error("%s", dt_error_last());
    }
    if (t->comm && t->world > 1 && dt_comm_broadcast(t->comm, step, 1, DT_I64, 0))
        return dt_error_prefix("agreeing on the checkpoint to resume from");
    if (*step == -2)
        return t->rank == 0 ? found
                            : dt_error_set(DT_EINVAL, "rank 0 found no usable checkpoint in %s", t->ckpt_dir);
    if (*step < 0 || t->rank == 0)
        return 0;
    char path[sizeof ck->path];
    snprintf(path, sizeof path, "%s/step_%08lld.safetensors", t->ckpt_dir, (long long)*step);
    return dt_ckpt_read(path, ck);
}

/* keep_per_rank on W' ranks after a checkpoint of W: each rank keeps B x A,
 * and the epoch goes on from the last whole batch of the new interleave at
 * or before global sample g (DistributedSampler's order is one permutation
 * whatever the world), so fewer than B x W' samples of it are read again. */
static int elastic_resume_per_rank(struct dt_trainer *t, const struct dt_ckpt_file *ck, struct dt_ckpt_state *st)
{
    int64_t B = t->spec.data.batch_size, per = B * t->world, g = st->batch * ck->batch_size * ck->world;
    st->batch = g / per;
    if (t->rank == 0 && ck->world != t->world)
        dt_log_info("elastic: %lld ranks before, %d now: each rank keeps batch_size %lld x grad_accum %d (a global "
                    "batch of %lld); epoch %lld goes on at global sample %lld, %lld of its samples read again",
                    (long long)ck->world, t->world, (long long)B, t->spec.ddp.grad_accum,
                    (long long)(per * t->spec.ddp.grad_accum), (long long)st->epoch, (long long)(st->batch * per),
                    (long long)(g - st->batch * per));
    return 0;
}

/* A checkpoint of W ranks resumed on W' (an elastic round): the global
 * batch B x A x W is kept with A' = B x A x W / (B x W') micro-batches, and
 * the epoch goes on from global sample g = batch x B x W, which is batch
 * g / (B x W') of the new interleave (DistributedSampler's order is one
 * permutation whatever the world: only the padding at its end differs).
 * For tokens a sample is a sequence of T and the order's unit a step's
 * global batch (tokens.h: accum), so the same numbers hold and the token
 * loader is made again for A'.
 * Refused, with the numbers, when either does not divide. */
static int elastic_resume(struct dt_trainer *t, const struct dt_ckpt_file *ck, struct dt_ckpt_state *st)
{
    if (dt_trainer_elastic_batch(&t->spec) == DT_ELASTIC_BATCH_PER_RANK)
        return elastic_resume_per_rank(t, ck, st);
    int64_t B = t->spec.data.batch_size, A = ck->grad_accum > 0 ? ck->grad_accum : t->spec.ddp.grad_accum;
    int64_t global = ck->batch_size * A * ck->world, per = B * t->world, g = st->batch * ck->batch_size * ck->world;
    if (global % per)
        return dt_error_set(DT_EINVAL,
                            "%s: the run's global batch is %lld samples (%lld ranks x batch_size %lld x grad_accum "
                            "%lld), which %d ranks x batch_size %lld cannot keep (not a multiple of %lld): run on a "
                            "node count whose ranks divide it",
                            ck->path, (long long)global, (long long)ck->world, (long long)ck->batch_size,
                            (long long)A, t->world, (long long)B, (long long)per);
    if (g % per)
        return dt_error_set(DT_EINVAL,
                            "%s: saved after %lld samples of epoch %lld, which is no whole batch of %d ranks x "
                            "batch_size %lld",
                            ck->path, (long long)g, (long long)st->epoch, t->world, (long long)B);
    if (t->dev && global / per != t->spec.ddp.grad_accum)
        return dt_error_set(DT_EUNSUPPORTED,
                            "%s: keeping the global batch on %d ranks needs grad_accum %lld, which a GPU trainer "
                            "cannot change after start-up",
                            ck->path, t->world, (long long)(global / per));
    t->spec.ddp.grad_accum = (int)(global / per);
    if (t->tokens && t->spec.ddp.grad_accum != A) {
        int rc = dt_trainer__tokens_regroup(t);
        if (rc)
            return rc;
    }
    t->steps_per_epoch = (t->batches_per_epoch + t->spec.ddp.grad_accum - 1) / t->spec.ddp.grad_accum;
    if (t->spec.steps <= 0)
        t->total_steps = (int64_t)t->spec.epochs * t->steps_per_epoch;
    st->batch = g / per;
    if (t->rank == 0 && ck->world != t->world)
        dt_log_info("elastic: %lld ranks before, %d now: grad_accum %lld -> %d keeps the global batch of %lld; "
                    "epoch %lld goes on at global sample %lld",
                    (long long)ck->world, t->world, (long long)A, t->spec.ddp.grad_accum, (long long)global,
                    (long long)st->epoch, (long long)g);
    return 0;
}

static int apply_checkpoint(struct dt_trainer *t, const struct dt_ckpt_file *ck)
{
    struct dt_ckpt_state st = {.seed = t->spec.seed, .world = t->world, .batch_size = t->spec.data.batch_size,
                               .global_batch_order = t->tokens != NULL, .amp = t->spec.amp.dtype,
                               .scaler = t->scaler, .elastic = t->o.elastic};
    int rc = dt_ckpt_apply(ck, t->model, &t->opt, &st);
    /* also on the same world: a round after one of another size runs on its
     * grad_accum, not the spec's */
    if (rc == 0 && st.elastic && (ck->world != t->world || ck->grad_accum > 0))
        rc = elastic_resume(t, ck, &st);
    if (rc)
        return rc;
    if (st.step > t->total_steps)
        return dt_error_set(DT_EINVAL, "%s: step %lld is past this job's %lld steps", ck->path, (long long)st.step,
                            (long long)t->total_steps);
    if (st.batch > t->batches_per_epoch) /* the loader would run dry, which reads as a bug of dtrain */
        return dt_error_set(DT_EINVAL, "%s: batch %lld is past this job's %lld batches per epoch", ck->path,
                            (long long)st.batch, (long long)t->batches_per_epoch);
    if ((rc = dt_trainer__data_resume(t, &st, ck->path)))
        return rc;
    t->step = st.step;
    t->epoch = st.epoch;
    t->batch = st.batch;
    t->resumed_from = st.step;
    t->scaler = st.scaler;
    if (t->rank == 0)
        dt_log_info("resuming from %s (step %lld, epoch %lld, batch %lld)", ck->path, (long long)st.step,
                    (long long)st.epoch, (long long)st.batch);
    return dt_lr_schedule_seek(&t->sched, t->step);
}

/* resume: auto -> every rank loads the checkpoint rank 0 found. */
static int maybe_resume(struct dt_trainer *t)
{
    if (t->spec.checkpoint.resume != DT_RESUME_AUTO)
        return 0;
    struct dt_ckpt_file ck = {0};
    int64_t step;
    int rc = read_checkpoint(t, &ck, &step);
    if (rc == 0 && step >= 0)
        rc = apply_checkpoint(t, &ck);
    dt_ckpt_release(&ck);
    return rc;
}

/* Communication-thread hook: one span per collective, named by bucket when
 * it reduces one (a bucket's result is a view into the reducer's output: the
 * gradient arena, or the host's averaged gradients). */
static void comm_span(void *ctx, const char *op, const void *recv, int64_t t0, int64_t t1)
{
    struct dt_trainer *t = ctx;
    int64_t bucket = -1;
    for (int i = 0; i < t->red.plan.n; i++)
        if ((const float *)recv == t->red.out + t->red.plan.range[i][0])
            bucket = i;
    dt_trace_span_arg(t->trace, DT_TRACE_COMM, op, t0, t1, "bucket", bucket);
}

/* Tracing is on when the spec names a window (trace: {steps: "10-20"}). */
static int trace_start(struct dt_trainer *t)
{
    const struct dt_trace_spec *w = &t->spec.trace;
    if (w->first_step < 0 || w->last_step < w->first_step)
        return 0;
    return dt_trace_create(w, t->rank, 0, &t->trace);
}

static int setup(struct dt_trainer *t)
{
    int rc = check_spec(&t->spec);
    if (!rc)
        rc = build_data(t);
    if (!rc)
        rc = build_model(t);
    if (!rc) /* ZeRO-1 (or the whole arena): the optimizer's moments cover [zero.lo, zero.hi) */
        rc = dt_zero_init(&t->zero, t->comm, t->model, t->spec.ddp.zero == 1 && t->spec.device == DT_DEVICE_CPU);
    t->zero.trace = t->trace;
    if (!rc && t->zero.comm && t->rank == 0)
        dt_log_info("ZeRO-1: AdamW's moments in %d shards of %zu floats, %.1f MiB per rank instead of %.1f MiB",
                    t->world, t->zero.per, 8.0 * (double)t->zero.per / 1048576.0,
                    8.0 * (double)t->model->n_params / 1048576.0);
    if (!rc)
        rc = dt_adamw_init(&t->opt, t->k, t->zero.hi - t->zero.lo, t->spec.optimizer.beta2, t->spec.optimizer.eps,
                           t->spec.optimizer.weight_decay);
    t->opt.base = t->zero.lo;
    if (!rc)
        rc = optimizer_decay(t);
    if (!rc)
        rc = dt_lr_schedule_init(&t->sched, &t->spec.scheduler, t->total_steps, t->spec.optimizer.lr,
                              t->spec.optimizer.beta1);
    if (!rc)
        rc = dt_grad_scaler_init(&t->scaler, &t->spec.amp);
    if (!rc)
        rc = maybe_resume(t);
    if (!rc && t->spec.device == DT_DEVICE_CPU) /* after the resume: rank 0's values go to the host's copy */
        rc = dt_host_state_init(&t->hs, t->comm, t->model, &t->opt, /* the hook edits m->grads; zero 1 shards */
                                t->spec.ddp.share_state && !t->o.after_reduce && !t->zero.comm);
    t->hs.trace = t->trace;
    if (!rc)
        rc = build_reducer(t);
    if (!rc && t->hs.avg)
        dt_reducer_set_output(&t->red, t->hs.avg);
    if (!rc)
        rc = dt_grad_norm_init(&t->gnorm, t->k, t->hs.avg ? t->hs.avg : t->model->grads, t->model->n_params);
    if (!rc) {
        dt_host_state_share_norm(&t->hs, &t->gnorm);
        dt_zero_share_norm(&t->zero, &t->gnorm);
    }
    if (!rc && t->spec.device != DT_DEVICE_CPU)
        rc = dt_trainer__device_create(t);
    if (!rc)
        dt_trainer__choose_home(t);
    if (!rc && t->rank == 0)
        rc = dt_metrics_open(&t->metrics, t->run_dir);
    t->metrics.total_steps = t->total_steps;
    t->metrics.seq_len = t->tokens ? t->spec.data.seq_len : 0;
    if (!rc && t->rank == 0)
        rc = dt_tb_open(t->run_dir, &t->tb);
    return rc;
}

/* An elastic round on W ranks of a job whose most nodes make W_max
 * (docs/elastic.md), before anything is built from the batch or the rate:
 * keep_global runs the global batch of W_max, B x A x W_max, with A' =
 * A x W_max / W micro-batches (a token run's loader reads on in the same
 * order of global batches); keep_per_rank keeps B x A per rank and, with
 * elastic_lr: linear, scales the learning rate by W / W_max, the linear
 * scaling rule: the spec's rate is the full job's. */
static int elastic_round(struct dt_trainer *t)
{
    struct dt_trainer_spec *s = &t->spec;
    int max = t->o.elastic_max_world;
    if (!t->o.elastic || max <= 0 || max == t->world)
        return 0;
    if (dt_trainer_elastic_batch(s) == DT_ELASTIC_BATCH_GLOBAL) {
        long long a = s->ddp.grad_accum, keep = (long long)max * a;
        if (keep % t->world)
            return dt_error_set(DT_EINVAL,
                                "trainer.ddp.elastic_batch keep_global: the global batch of %d ranks x batch_size %d "
                                "x grad_accum %lld cannot be kept by %d ranks (grad_accum %lld x %d / %d is no "
                                "whole number): run on a node count that divides it, or use keep_per_rank",
                                max, s->data.batch_size, a, t->world, a, max, t->world);
        s->ddp.grad_accum = (int)(keep / t->world);
        if (t->rank == 0)
            dt_log_info("elastic: %d ranks of at most %d: grad_accum %lld -> %d keeps the global batch of %lld",
                        t->world, max, a, s->ddp.grad_accum, keep * s->data.batch_size);
        return 0;
    }
    if (s->ddp.elastic_lr != DT_ELASTIC_LR_LINEAR)
        return 0;
    double f = (double)t->world / max;
    s->optimizer.lr *= f;
    s->scheduler.max_lr *= f;
    s->scheduler.min_lr *= f;
    if (t->rank == 0)
        dt_log_info("elastic: %d ranks of at most %d: the learning rate is scaled by %g to %g (ddp.elastic_lr: "
                    "linear)",
                    t->world, max, f, s->optimizer.lr);
    return 0;
}

int dt_trainer_create(const struct dt_trainer_spec *spec, const struct dt_trainer_options *o,
                      struct dt_trainer **out)
{
    *out = NULL;
    struct dt_trainer *t = calloc(1, sizeof *t);
    if (!t)
        return dt_error_set(DT_ENOMEM, "trainer: no memory");
    t->spec = *spec;
    t->o = *o;
    t->comm = o->comm;
    t->rank = o->comm ? dt_comm_rank(o->comm) : 0;
    t->world = o->comm ? dt_comm_world(o->comm) : 1;
    t->k = &dt_kernels_cpu;
    t->resumed_from = -1;
    t->evaluated_at = -1;
    t->test_loss = t->test_acc = t->last_loss = NAN;
    paths(t);
    set_threads(t);
    int rc = elastic_round(t);
    if (!rc)
        rc = trace_start(t);
    if (!rc && o->sample_log && !(t->sample_log = fopen(o->sample_log, "a")))
        rc = dt_error_set_errno(DT_EIO, errno, "trainer: cannot open the sample log %s", o->sample_log);
    int64_t t0 = dt_clock_ns();
    if (!rc)
        rc = setup(t);
    dt_trace_span(t->trace, DT_TRACE_LAUNCH, "trainer setup", t0, dt_clock_ns());
    if (!rc && t->trace && t->comm) /* after setup: the hook reads the model and the buckets */
        dt_comm_set_span_hook(t->comm, comm_span, t);
    if (rc) {
        dt_trainer_destroy(t);
        return rc;
    }
    *out = t;
    return 0;
}

void dt_trainer_destroy(struct dt_trainer *t)
{
    if (!t)
        return;
    if (t->comm && t->trace)
        dt_comm_set_span_hook(t->comm, NULL, NULL);
    if (t->dev)
        t->devk->destroy(t->dev);
    dt_trace_destroy(t->trace);
    if (t->sample_log)
        fclose(t->sample_log);
    dt_tb_close(t->tb);
    dt_metrics_close(&t->metrics);
    dt_loader_destroy(t->loader);
    dt_reducer_release(&t->red);
    dt_grad_norm_release(&t->gnorm);
    dt_adamw_release(&t->opt);
    dt_model_destroy(t->model);
    dt_zero_release(&t->zero);
    dt_host_state_release(&t->hs);
    free(t->eval.x);
    free(t->eval.y);
    dt_data_release(&t->train);
    dt_data_release(&t->test);
    dt_trainer__data_release(t);
    free(t);
}

struct dt_model *dt_trainer_model(struct dt_trainer *t)
{
    return t->model;
}

struct dt_trace *dt_trainer_trace(struct dt_trainer *t)
{
    return t ? t->trace : NULL;
}

/* Test loss and accuracy over the whole test set (tokens: the validation
 * set, trainer_data.c): rank r takes the r-th
 * contiguous share, sums go through one all-reduce. */
int dt_trainer__evaluate(struct dt_trainer *t)
{
    if (t->tokens)
        return dt_trainer__tokens_evaluate(t);
    int64_t lo = t->test.n * t->rank / t->world, hi = t->test.n * (t->rank + 1) / t->world;
    double sums[3] = {0, 0, (double)(hi - lo)};
    for (int64_t at = lo; at < hi; at += t->eval_batch) {
        int n = hi - at < t->eval_batch ? (int)(hi - at) : t->eval_batch;
        int64_t hits = 0;
        if (t->dev) {
            double loss = 0;
            int rc = t->devk->eval_batch(t->dev, at, n, &loss, &hits);
            if (rc)
                return rc;
            sums[0] += loss;
        } else {
            dt_loader_fill_range(&t->test, at, n, &t->eval);
            sums[0] += dt_model_eval_batch(t->model, &t->eval, &hits);
        }
        sums[1] += (double)hits;
    }
    if (t->comm && t->world > 1 && dt_comm_allreduce(t->comm, sums, sums, 3, DT_F64, DT_SUM))
        return dt_error_prefix("summing the evaluation over ranks");
    t->test_loss = sums[0] / sums[2];
    t->test_acc = sums[1] / sums[2];
    t->evaluated_at = t->step;
    return 0;
}

/* Only rank 0 writes: parameters and moments are the same on every rank
 * (under ZeRO-1 every rank first sends rank 0 its shard of the moments). */
int dt_trainer__save(struct dt_trainer *t)
{
    struct dt_adamw whole = {0};
    if (t->zero.comm && dt_zero_gather_state(&t->zero, &t->opt, &whole))
        return dt_error_prefix("checkpoint at step %lld", (long long)t->step);
    /* on a device under ZeRO-1 the moments' gather is a collective: every rank copies the state */
    bool every = t->dev && t->spec.ddp.zero == 1 && t->world > 1;
    if (t->rank != 0 && !every)
        return 0;
    int rc = t->dev ? t->devk->get_state(t->dev, t->model->params, t->opt.m, t->opt.v, &t->opt.step) : 0;
    if (!rc && t->rank != 0)
        return 0;
    if (!rc)
        rc = dt_trainer__device_scaler(t);
    if (rc) {
        dt_adamw_release(&whole);
        return dt_error_prefix("checkpoint at step %lld", (long long)t->step);
    }
    struct dt_ckpt_state st = {.step = t->step, .epoch = t->epoch, .batch = t->batch, .seed = t->spec.seed,
                               .world = t->world, .batch_size = t->spec.data.batch_size,
                               .amp = t->spec.amp.dtype, .scaler = t->scaler,
                               .grad_accum = t->o.elastic ? t->spec.ddp.grad_accum : 0};
    dt_trainer__data_position(t, &st);
    /* The peers wait in the next step's collective meanwhile: a long write
     * is announced, so they do not take it for a stall (comm.h). */
    dt_comm_busy(t->comm, true);
    rc = dt_ckpt_save(t->ckpt_dir, t->model, t->zero.comm ? &whole : &t->opt, &st, t->spec.checkpoint.keep);
    dt_comm_busy(t->comm, false);
    dt_adamw_release(&whole);
    return rc;
}
