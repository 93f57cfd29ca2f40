/* engine_cuda.c - the CUDA trainer engine: setting it up, evaluation, state
 * to and from the host, and the table kernels.h's trainer loop calls.
 *
 * Memory (all cudaMalloc, once, after engine_memory.c found that it fits):
 * the fp32 parameter, gradient and AdamW arenas in the host model's layout
 * (so checkpoints are plain copies), a 16-bit copy of the parameters for
 * bf16/fp16 GEMMs, the batch, for images the data set as bytes with the
 * loader's normalisation table (token batches come from the host's loader,
 * engine_step.c), AdamW's no-decay ranges, and the step scalars; the
 * model's activations are its GPU half's (model_cuda.h), made here through
 * the model's ops.  Not for the step itself: engine_step.c.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "base/error.h"
#include "comm/nccl/nccl_comm.h"
#include "worker/cuda/cuda_internal.h"
#include "worker/cuda/engine_internal.h"
#include "worker/data/batch.h"
#include "worker/data/idx.h"
#include "worker/models/model.h"

#define FMNIST_MEAN 0.2860f /* worker/data/loader.c's Normalize((0.2860,), (0.3530,)) */
#define FMNIST_STD 0.3530f

static int up(void *dst, const void *src, size_t bytes, const char *what)
{
    cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
    return e == cudaSuccess ? 0 : dt_cuda_err(e, what);
}

static int alloc_arenas(struct dt_dev_model *d)
{
    size_t B = (size_t)d->c.max_batch;
    /* images: [B, px] values in t and B labels; tokens: [B, T] ids each */
    size_t xb = d->T ? B * (size_t)d->T * sizeof(int32_t) : B * (size_t)d->px * dt_cuda_dtype_size(d->t);
    size_t yb = d->T ? xb : B * sizeof(int32_t);
    int rc = dt_cuda_alloc((void **)&d->p, (2 * d->stride + 2 * d->mlen) * sizeof(float),
                           "the parameter, gradient and AdamW arenas");
    if (rc)
        return rc;
    d->g = d->p + d->stride, d->m = d->g + d->stride, d->v = d->m + d->mlen;
    /* ZeRO-1 all-gathers whole shards: the padding past n must read 0 */
    size_t low = d->zero ? d->stride * 2 : d->n * 2;
    if (d->t != DT_CUDA_F32 && (rc = dt_cuda_alloc(&d->plow, low, "the 16-bit parameters")))
        return rc;
    if (cudaMemset(d->p, 0, d->stride * sizeof(float)) != cudaSuccess ||
        (d->plow && cudaMemset(d->plow, 0, low) != cudaSuccess))
        return dt_error_set(DT_EIO, "cudaMemset (parameters)");
    if ((rc = dt_cuda_alloc(&d->x, xb, d->T ? "the input tokens" : "the input batch")) ||
        (rc = dt_cuda_alloc((void **)&d->y, yb, d->T ? "the target tokens" : "the labels")))
        return rc;
    if ((rc = dt_cuda_alloc((void **)&d->sc, sizeof *d->sc, "the step scalars")) ||
        (rc = dt_cuda_alloc((void **)&d->d_hyper, 2 * sizeof(double), "lr and beta1")))
        return rc;
    return cudaMemset(d->sc, 0, sizeof *d->sc) == cudaSuccess ? 0
                                                              : dt_error_set(DT_EIO, "cudaMemset (scalars)");
}

/* The model's GPU half over the arenas and the batch (model_cuda.h). */
static int make_model(struct dt_dev_model *d)
{
    struct dt_model_cuda_env env = {.k = d->k,
                                    .kw = d->kw,
                                    .t = d->t,
                                    .max_batch = d->c.max_batch,
                                    .p = d->p,
                                    .plow = d->plow,
                                    .g = d->g,
                                    .x = d->x,
                                    .y = d->y,
                                    .seq_len = d->T};
    return d->mo->create(d->c.model, &env, &d->ms);
}

static int upload_data(struct dt_dev_model *d)
{
    if (d->T) /* token batches come from the host's loader, one per step */
        return 0;
    const struct dt_dataset *tr = d->c.train, *te = d->c.test;
    size_t ntr = (size_t)tr->n * (size_t)d->px, nte = (size_t)te->n * (size_t)d->px;
    float lut[256];
    for (int p = 0; p < 256; p++) /* worker/data/loader.c's make_lut, the same float expression */
        lut[p] = ((float)p / 255.0f - FMNIST_MEAN) / FMNIST_STD;
    int rc = dt_cuda_alloc((void **)&d->train_img, ntr + nte + (size_t)tr->n + (size_t)te->n, "the data set");
    if (!rc)
        rc = dt_cuda_alloc((void **)&d->lut, sizeof lut, "the normalisation table");
    if (rc)
        return rc;
    d->test_img = d->train_img + ntr;
    d->train_lbl = d->test_img + nte;
    d->test_lbl = d->train_lbl + tr->n;
    if (!rc)
        rc = up(d->train_img, tr->images, ntr, "uploading the training images");
    if (!rc)
        rc = up(d->test_img, te->images, nte, "uploading the test images");
    if (!rc)
        rc = up(d->train_lbl, tr->labels, (size_t)tr->n, "uploading the training labels");
    if (!rc)
        rc = up(d->test_lbl, te->labels, (size_t)te->n, "uploading the test labels");
    if (!rc)
        rc = up(d->lut, lut, sizeof lut, "uploading the normalisation table");
    return rc;
}

static int make_slots(struct dt_dev_model *d)
{
    cudaError_t e = cudaStreamCreateWithFlags(&d->copy, cudaStreamNonBlocking);
    int rows = d->T ? d->c.batch : d->c.max_batch; /* a token slot carries training batches only */
    for (int i = 0; i < DT_ENGINE_SLOTS && e == cudaSuccess; i++) {
        struct dt_engine_slot *s = &d->slot[i];
        size_t bytes = 2 * sizeof(double) + dt_engine__slot_ints(d, rows) * sizeof(int32_t);
        e = cudaMallocHost((void **)&s->h_buf, bytes);
        if (e == cudaSuccess && dt_cuda_alloc((void **)&s->d_buf, bytes, "a batch slot"))
            return dt_error_prefix("cuda trainer");
        if (e == cudaSuccess)
            s->h_idx = (int32_t *)(s->h_buf + 2), s->d_idx = (int32_t *)(s->d_buf + 2);
        if (e == cudaSuccess)
            e = cudaEventCreateWithFlags(&s->copied, cudaEventDisableTiming);
        if (e == cudaSuccess)
            e = cudaEventCreateWithFlags(&s->consumed, cudaEventDisableTiming);
        if (e == cudaSuccess)
            e = cudaMallocHost((void **)&d->h_hyper[i], 2 * sizeof(double));
        if (e == cudaSuccess)
            e = cudaEventCreateWithFlags(&d->hyper_copied[i], cudaEventDisableTiming);
    }
    for (int i = 0; i < DT_ENGINE_MAX_BUCKETS && e == cudaSuccess; i++)
        e = cudaEventCreateWithFlags(&d->bucket_ev[i], cudaEventDisableTiming);
    for (int i = 0; i < 2 && d->zero && e == cudaSuccess; i++)
        e = cudaEventCreateWithFlags(&d->zero_ev[i], cudaEventDisableTiming);
    if (e == cudaSuccess)
        e = cudaEventCreateWithFlags(&d->join_ev, cudaEventDisableTiming);
    return e == cudaSuccess ? 0 : dt_cuda_err(e, "cuda trainer: streams, pinned buffers and events");
}

/* The host's state; under ZeRO-1 this rank's shard of the moments. */
static int upload_state(struct dt_dev_model *d)
{
    size_t b = d->n * sizeof(float), off = d->zero ? d->zlo : 0,
           mb = (d->zero ? d->zn : d->n) * sizeof(float);
    int rc = up(d->p, d->c.model->params, b, "uploading the parameters");
    if (!rc)
        rc = cudaMemset(d->m, 0, 2 * d->mlen * sizeof(float)) == cudaSuccess
                 ? 0
                 : dt_error_set(DT_EIO, "cudaMemset (moments)");
    if (!rc && d->c.m && d->c.v && mb > 0)
        rc = up(d->m, d->c.m + off, mb, "uploading AdamW's first moments");
    if (!rc && d->c.m && d->c.v && mb > 0)
        rc = up(d->v, d->c.v + off, mb, "uploading AdamW's second moments");
    if (!rc)
        rc = up(&d->sc->adam_step, &d->c.adam_step, sizeof(int64_t), "uploading AdamW's step");
    if (!rc && d->c.comm && d->c.world > 1 && dt_comm_broadcast(d->c.comm, d->p, d->n, DT_F32, 0))
        rc = dt_error_prefix("cuda trainer: broadcasting rank 0's parameters");
    if (!rc && d->plow)
        rc = dt_cuda_cast(d->k, d->t, d->plow, DT_CUDA_F32, d->p, d->n);
    if (!rc && d->c.fp16)
        rc = up(&d->sc->scale, &d->c.scale, sizeof d->c.scale, "uploading the loss scale");
    if (!rc && d->c.fp16)
        rc = up(&d->sc->growth_tracker, &d->c.growth_tracker, sizeof(int),
                "uploading the scale's growth tracker");
    return rc ? rc : dt_cuda_sync(d->k);
}

struct decay_run {
    size_t lo;
    bool decay;
};

static int by_lo(const void *a, const void *b)
{
    size_t x = ((const struct decay_run *)a)->lo, y = ((const struct decay_run *)b)->lo;
    return x < y ? -1 : x > y;
}

/* AdamW's no-decay ranges (kernels_cuda.h: nanoGPT's second param group)
 * from the model's tensors, cut as worker/optim/adamw.c's
 * dt_adamw_set_decay cuts the arena for the CPU: a tensor runs from its
 * offset to the next tensor's (padding goes with the tensor below it), the
 * lowest from 0.  Adjacent ranges are merged; none: every element decays.
 * Under ZeRO-1, the ranges inside this rank's shard, counted from its start. */
static int upload_nodecay(struct dt_dev_model *d)
{
    const struct dt_model *m = d->c.model;
    int nt = m->n_tensors;
    struct decay_run *r = malloc((size_t)(nt > 0 ? nt : 1) * sizeof *r);
    uint64_t *pairs = malloc(2 * (size_t)(nt > 0 ? nt : 1) * sizeof *pairs);
    int rc =
        r && pairs ? 0 : dt_error_set(DT_ENOMEM, "cuda trainer: no memory for %d tensors' weight decay", nt);
    for (int i = 0; i < nt && !rc; i++)
        r[i] = (struct decay_run){m->tensors[i].offset, m->tensors[i].decay};
    if (!rc)
        qsort(r, (size_t)nt, sizeof *r, by_lo);
    int n = 0;
    uint64_t base = d->zero ? d->zlo : 0, end = d->zero ? d->zlo + d->zn : d->n; /* AdamW's range */
    for (int i = 0; i < nt && !rc; i++) {
        uint64_t lo = i ? r[i].lo : 0, hi = i + 1 < nt ? r[i + 1].lo : d->n;
        lo = (lo > base ? lo : base) - base; /* counted from AdamW's p (kernels_cuda.h) */
        hi = (hi < end ? hi : end);
        hi = hi > base ? hi - base : 0;
        if (r[i].decay || lo >= hi)
            continue;
        if (n && pairs[2 * n - 1] == lo)
            pairs[2 * n - 1] = hi;
        else
            pairs[2 * n] = lo, pairs[2 * n + 1] = hi, n++;
    }
    if (!rc && n > 0 &&
        !(rc = dt_cuda_alloc((void **)&d->nodecay, 2 * (size_t)n * sizeof *pairs, "AdamW's no-decay ranges")))
        rc = up(d->nodecay, pairs, 2 * (size_t)n * sizeof *pairs, "uploading AdamW's no-decay ranges");
    if (!rc)
        d->n_nodecay = n;
    free(r);
    free(pairs);
    return rc;
}

static int setup_comm(struct dt_dev_model *d)
{
    if (!d->c.comm || d->c.world <= 1)
        return 0;
    d->cs = dt_nccl_comm_stream(d->c.comm);
    if (!d->cs)
        return dt_error_set(DT_EINVAL,
                            "trainer.device cuda with %d ranks needs the nccl backend (backend: nccl "
                            "or auto)",
                            d->c.world);
    if (d->buckets.n > DT_ENGINE_MAX_BUCKETS)
        return dt_error_set(DT_EINVAL,
                            "cuda trainer: %d gradient buckets, at most %d (raise ddp.bucket_cap_mb)",
                            d->buckets.n, DT_ENGINE_MAX_BUCKETS);
    return dt_nccl_set_compute_stream(d->c.comm, d->s);
}

static void engine_destroy(struct dt_dev_model *d);
static void engine_sample(struct dt_dev_model *d, double *util_pct, double *mem_mib, double *alloc_mib);
static int make_wgrad_stream(struct dt_dev_model *d, bool autotune);
static int make_phase_events(struct dt_dev_model *d);

static int engine_create(const struct dt_dev_config *c, struct dt_dev_model **out)
{
    *out = NULL;
    if (!c->model->ops->cuda)
        return dt_error_set(DT_EUNSUPPORTED,
                            "trainer.model.type %s has no GPU implementation; use device: cpu",
                            c->model->ops->name);
    int ngpu = 0;
    cudaError_t ge = cudaGetDeviceCount(&ngpu);
    if (ge != cudaSuccess || ngpu < 1) {
        cudaGetLastError();
        return dt_error_set(DT_EUNSUPPORTED,
                            "trainer.device cuda: no usable CUDA GPU on this machine (%s); use "
                            "device: cpu here",
                            ge != cudaSuccess ? cudaGetErrorString(ge) : "no device found");
    }
    struct dt_dev_model *d = calloc(1, sizeof *d);
    if (!d)
        return dt_error_set(DT_ENOMEM, "cuda trainer: no memory");
    d->c = *c;
    d->c.buckets = NULL; /* our own copy below, d->buckets */
    d->mo = c->model->ops->cuda;
    d->n = c->model->n_params;
    /* Each arena starts on 256 bytes: cuBLASLt picks its fast kernels for
     * aligned outputs (the weight gradients), AdamW loads 16 bytes at a time.
     * ZeRO-1: world shards of zper floats, each on 256 bytes too. */
    d->stride = (d->n + 63) / 64 * 64;
    d->zero = c->zero && c->comm && c->world > 1;
    if (d->zero) {
        size_t w = (size_t)c->world;
        d->zper = ((d->n + w - 1) / w + 63) / 64 * 64;
        d->zlo = (size_t)c->rank * d->zper;
        d->zn = d->zlo >= d->n ? 0 : d->n - d->zlo < d->zper ? d->n - d->zlo : d->zper;
        d->stride = w * d->zper;
    }
    d->mlen = d->zero ? d->zper : d->stride;
    d->T = c->seq_len > 0 ? c->seq_len : 0;
    d->px = d->T ? 0 : c->train->rows * c->train->cols;
    if (d->c.device < 0) /* the NCCL communicator's GPU (local_rank), else the first */
        d->c.device = c->comm && dt_nccl_device(c->comm) >= 0 ? dt_nccl_device(c->comm) : 0;
    d->t = c->bf16 ? DT_CUDA_BF16 : c->fp16 ? DT_CUDA_F16 : DT_CUDA_F32;
    d->peak_flops = dt_engine__peak_flops(d->c.device, d->t != DT_CUDA_F32, c->tf32);
    d->order_epoch = -1;
    int rc = dt_buckets_copy(&d->buckets, c->buckets);
    if (!rc)
        rc = dt_engine__check_memory(d);
    if (!rc)
        dt_engine__profile_start(d); /* before the first kernel and graph capture */
    if (!rc)
        rc = dt_cuda_ctx_create(d->c.device, 0, &d->k);
    int tune = 1; /* DTRAIN_CUDA_TUNE=0: bit-reproducible runs (kernels_cuda.h) */
    if (!rc)
        rc = dt_env_int("DTRAIN_CUDA_TUNE", 1, 0, 1, &tune);
    if (!rc) {
        d->s = dt_cuda_stream(d->k);
        dt_cuda_set_autotune(d->k, tune == 1);
        dt_cuda_set_tf32(d->k, c->tf32);
        rc = make_wgrad_stream(d, tune == 1);
    }
    if (!rc)
        rc = make_phase_events(d);
    if (!rc)
        rc = alloc_arenas(d);
    if (!rc)
        rc = make_model(d);
    if (!rc)
        rc = upload_nodecay(d);
    if (!rc)
        rc = upload_data(d);
    if (!rc)
        rc = make_slots(d);
    if (!rc)
        rc = setup_comm(d);
    if (!rc)
        rc = upload_state(d);
    if (!rc && !d->T) /* images: this rank's order, made here (tokens: the host's loader orders them) */
        rc = dt_sampler_init(&d->sampler, c->train->n, c->rank, c->world, c->shuffle, c->drop_last, c->seed);
    if (!rc && !d->T && !(d->order = malloc((size_t)d->sampler.num_samples * sizeof *d->order)))
        rc = dt_error_set(DT_ENOMEM, "cuda trainer: no memory for the epoch order");
    if (rc) {
        rc = dt_error_prefix("trainer.device cuda (GPU %d)", d->c.device);
        engine_destroy(d);
        return rc;
    }
    d->nvml = dt_engine__nvml_open(d->c.device);
    double util, mem, alloc; /* the first reading of alloc_mib: everything create made */
    engine_sample(d, &util, &mem, &alloc);
    *out = d;
    return 0;
}

/* The weight-gradient stream's context (engine_internal.h says why);
 * DTRAIN_CUDA_WGRAD_STREAM=0 keeps the whole backward on the compute stream. */
static int make_wgrad_stream(struct dt_dev_model *d, bool autotune)
{
    const char *env = getenv("DTRAIN_CUDA_WGRAD_STREAM");
    if (env && *env && strcmp(env, "0") != 0 && strcmp(env, "1") != 0)
        return dt_error_set(DT_EINVAL, "DTRAIN_CUDA_WGRAD_STREAM=%s: expected 0 (one stream) or 1 (a second stream "
                                       "for the weight gradients, also for gpt2)",
                            env);
    if (env && !strcmp(env, "0"))
        return 0;
    int rc = dt_cuda_ctx_create(d->c.device, 0, &d->kw);
    if (rc)
        return rc;
    dt_cuda_set_autotune(d->kw, autotune);
    dt_cuda_set_tf32(d->kw, d->c.tf32);
    return 0;
}

/* The phase marks (engine_internal.h); DTRAIN_CUDA_PHASE_EVENTS=0 leaves them
 * out, to measure what they cost a step. */
static int make_phase_events(struct dt_dev_model *d)
{
    int on = 1;
    int rc = dt_env_int("DTRAIN_CUDA_PHASE_EVENTS", 1, 0, 1, &on);
    if (rc || !on)
        return rc;
    d->time_next = true; /* the first metrics row gets a split too */
    for (int i = 0; i <= DT_ENGINE_PHASES; i++) {
        cudaError_t e = cudaEventCreate(&d->phase_ev[i]);
        if (e != cudaSuccess)
            return dt_cuda_err(e, "cudaEventCreate (phase marks)");
    }
    return 0;
}

/* The events of ev[0..n) that were created (NULL: never made). */
static void events_destroy(cudaEvent_t *ev, int n)
{
    for (int i = 0; i < n; i++)
        if (ev[i])
            cudaEventDestroy(ev[i]);
}

static void engine_destroy(struct dt_dev_model *d)
{
    if (!d)
        return;
    if (d->k && d->cs) /* bounded: a hung collective gets the communicator aborted first */
        dt_engine__wait(d, "finishing before freeing the GPU buffers");
    if (d->k)
        cudaStreamSynchronize(d->s);
    dt_engine__profile_finish(d);
    if (d->ms)
        d->mo->destroy(d->ms);
    for (int i = 0; i < DT_ENGINE_SLOTS; i++) {
        struct dt_engine_slot *s = &d->slot[i];
        if (s->graph)
            cudaGraphExecDestroy(s->graph);
        if (s->timed)
            cudaGraphExecDestroy(s->timed);
        cudaFreeHost(s->h_buf);
        cudaFree(s->d_buf);
        if (s->copied)
            cudaEventDestroy(s->copied);
        if (s->consumed)
            cudaEventDestroy(s->consumed);
        cudaFreeHost(d->h_hyper[i]);
        if (d->hyper_copied[i])
            cudaEventDestroy(d->hyper_copied[i]);
    }
    events_destroy(d->bucket_ev, DT_ENGINE_MAX_BUCKETS);
    events_destroy(&d->join_ev, 1);
    events_destroy(d->zero_ev, 2);
    if (d->copy)
        cudaStreamDestroy(d->copy);
    cudaFree(d->p);
    cudaFree(d->plow);
    cudaFree(d->x);
    cudaFree(d->y);
    cudaFree(d->sc);
    cudaFree(d->d_hyper);
    cudaFree(d->train_img);
    cudaFree(d->lut);
    cudaFree(d->nodecay);
    dt_sampler_release(&d->sampler);
    free(d->order);
    dt_buckets_release(&d->buckets);
    dt_engine__nvml_close(d->nvml);
    events_destroy(d->phase_ev, DT_ENGINE_PHASES + 1);
    dt_cuda_ctx_destroy(d->kw);
    dt_cuda_ctx_destroy(d->k);
    free(d);
}

int dt_engine__wait(struct dt_dev_model *d, const char *what)
{
    if (d->cs)
        return dt_nccl_wait_stream(d->c.comm, d->s, what);
    cudaError_t e = cudaStreamSynchronize(d->s);
    return e == cudaSuccess ? 0 : dt_error_set(DT_EIO, "cuda trainer: %s: %s", what, cudaGetErrorString(e));
}

static int read_scalars(struct dt_dev_model *d, struct dt_engine_scalars *h, const char *what)
{
    int rc = dt_engine__wait(d, what);
    if (rc)
        return rc;
    cudaError_t e = cudaMemcpy(h, d->sc, sizeof *h, cudaMemcpyDeviceToHost);
    return e == cudaSuccess ? 0 : dt_cuda_err(e, what);
}

static int engine_read_stats(struct dt_dev_model *d, double *loss_sum, double *grad_norm)
{
    struct dt_engine_scalars h;
    int rc = d->c.grad_clip > 0 ? 0 : dt_cuda_sumsq(d->k, &d->sc->sumsq, d->g, d->n); /* AdamW left g alone */
    if (!rc)
        rc = read_scalars(d, &h, "reading the training loss");
    if (rc)
        return rc;
    *loss_sum = h.loss_acc - d->loss_read;
    d->loss_read = h.loss_acc;
    *grad_norm = sqrt((double)h.sumsq);
    return 0;
}

static int engine_eval_batch(struct dt_dev_model *d, int64_t first, int n, double *loss_sum, int64_t *hits)
{
    if (n < 1 || n > d->c.max_batch || first < 0 || first + n > d->c.test->n)
        return dt_error_set(
            DT_EINVAL, "cuda trainer: test rows %lld..%lld outside 0..%lld (batch at most %d)",
            (long long)first, (long long)(first + n), (long long)d->c.test->n, d->c.max_batch);
    dt_engine__profile_aside(d, true);
    int rc =
        dt_engine__gather(d->s, d->t, d->x, d->y, d->test_img, d->test_lbl, NULL, first, n, d->px, d->lut);
    struct dt_model_cuda_loss ls = {.loss_sum = &d->sc->eval_loss, .correct = &d->sc->eval_correct};
    if (!rc)
        rc = d->mo->forward_loss(d->ms, n, &ls);
    struct dt_engine_scalars h;
    if (!rc)
        rc = read_scalars(d, &h, "evaluating");
    dt_engine__profile_aside(d, false);
    if (rc)
        return dt_error_prefix("cuda trainer: evaluation of test rows %lld..%lld", (long long)first,
                               (long long)(first + n));
    *loss_sum = h.eval_loss;
    *hits = h.eval_correct;
    return 0;
}

/* The validation loader's batch into x, y on the compute stream (behind
 * any step still queued there: a graph reads the same buffers), forward
 * and loss, then the one wait. */
static int engine_eval_tokens(struct dt_dev_model *d, const struct dt_batch *b, double *loss_sum,
                              int64_t *hits)
{
    if (!d->T || !b || b->kind != DT_BATCH_TOKENS || b->n < 1 || b->n > d->c.max_batch || b->T != d->T)
        return dt_error_set(
            DT_EINVAL,
            "cuda trainer: an evaluation batch of %d rows of %d tokens for batches of at most "
            "%d rows of %d",
            b ? b->n : 0, b ? b->T : 0, d->c.max_batch, d->T);
    size_t bytes = (size_t)b->n * (size_t)d->T * sizeof(int32_t);
    dt_engine__profile_aside(d, true);
    cudaError_t e = cudaMemcpyAsync(d->x, b->inputs, bytes, cudaMemcpyHostToDevice, d->s);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(d->y, b->targets, bytes, cudaMemcpyHostToDevice, d->s);
    int rc = e == cudaSuccess ? 0 : dt_cuda_err(e, "cudaMemcpyAsync (validation tokens)");
    struct dt_model_cuda_loss ls = {.loss_sum = &d->sc->eval_loss, .correct = &d->sc->eval_correct};
    if (!rc)
        rc = d->mo->forward_loss(d->ms, b->n, &ls);
    struct dt_engine_scalars h;
    if (!rc)
        rc = read_scalars(d, &h, "evaluating");
    dt_engine__profile_aside(d, false);
    if (rc)
        return dt_error_prefix("cuda trainer: validation batch %lld", (long long)b->index);
    *loss_sum = h.eval_loss;
    *hits = h.eval_correct;
    return 0;
}

/* ZeRO-1: every rank's shard of a moment (m or v) gathered into host's n
 * floats, through a whole-arena buffer on the device for the time of it. */
static int gather_moment(struct dt_dev_model *d, const float *shard, float *host)
{
    float *all = NULL;
    int rc =
        dt_cuda_alloc((void **)&all, d->stride * sizeof(float), "gathering AdamW's moments for the host");
    cudaError_t e = cudaSuccess;
    if (!rc && (e = cudaMemcpyAsync(all + d->zlo, shard, d->zper * sizeof(float), cudaMemcpyDeviceToDevice,
                                    d->s)) != cudaSuccess)
        rc = dt_cuda_err(e, "copying a moment's shard for the all-gather");
    if (!rc)
        rc = dt_cuda_stream_after(d->cs, d->s, d->zero_ev[0], "ordering the moments' all-gather");
    if (!rc)
        rc = dt_nccl_allgather_stream(d->c.comm, all, d->zper, DT_F32, d->cs);
    if (!rc)
        rc = dt_nccl_wait_stream(d->c.comm, d->cs, "gathering AdamW's moments");
    if (!rc && (e = cudaMemcpy(host, all, d->n * sizeof(float), cudaMemcpyDeviceToHost)) != cudaSuccess)
        rc = dt_cuda_err(e, "copying AdamW's moments to the host");
    cudaFree(all);
    return rc;
}

static int copy_state(struct dt_dev_model *d, float *params, float *m, float *v, int64_t *step)
{
    int rc = dt_engine__wait(d, "copying the parameters to the host");
    size_t b = d->n * sizeof(float);
    cudaError_t e = cudaSuccess;
    if (!rc && params)
        e = cudaMemcpy(params, d->p, b, cudaMemcpyDeviceToHost);
    if (!rc && e == cudaSuccess && d->zero && m)
        rc = gather_moment(d, d->m, m);
    if (!rc && e == cudaSuccess && d->zero && v)
        rc = gather_moment(d, d->v, v);
    if (!rc && e == cudaSuccess && !d->zero && m)
        e = cudaMemcpy(m, d->m, b, cudaMemcpyDeviceToHost);
    if (!rc && e == cudaSuccess && !d->zero && v)
        e = cudaMemcpy(v, d->v, b, cudaMemcpyDeviceToHost);
    if (!rc && e == cudaSuccess && step)
        e = cudaMemcpy(step, &d->sc->adam_step, sizeof *step, cudaMemcpyDeviceToHost);
    return rc ? rc : e == cudaSuccess ? 0 : dt_cuda_err(e, "cuda trainer: copying the state to the host");
}

static int engine_get_state(struct dt_dev_model *d, float *params, float *m, float *v, int64_t *step)
{
    dt_engine__profile_aside(d, true);
    int rc = copy_state(d, params, m, v, step);
    dt_engine__profile_aside(d, false);
    return rc;
}

static int engine_read_scaler(struct dt_dev_model *d, float *scale, int *growth_tracker, int64_t *adam_step)
{
    struct dt_engine_scalars h;
    int rc = read_scalars(d, &h, "reading the loss scale");
    if (rc)
        return rc;
    *scale = h.scale;
    *growth_tracker = h.growth_tracker;
    *adam_step = h.adam_step;
    return 0;
}

/* alloc_mib: free memory when the engine began less free memory now, the
 * most seen (every allocation is made at creation but a graph's, which the
 * first steps instantiate).  It counts what the process took on the GPU
 * since the engine began: the engine's and the model's cudaMalloc,
 * cuBLASLt's workspaces, the graphs, and buffers NCCL makes at its first
 * collectives; not the CUDA context nor what the communicator's set-up
 * took before. */
static void engine_sample(struct dt_dev_model *d, double *util_pct, double *mem_mib, double *alloc_mib)
{
    dt_engine__nvml_sample(d->nvml, util_pct, mem_mib);
    size_t free_b = 0, total = 0;
    if (d->free0 && cudaMemGetInfo(&free_b, &total) == cudaSuccess && free_b < d->free0 &&
        d->free0 - free_b > d->taken_peak)
        d->taken_peak = d->free0 - free_b;
    cudaGetLastError();
    *alloc_mib = d->free0 ? (double)d->taken_peak / (1024.0 * 1024.0) : NAN;
}

static double engine_peak_flops(struct dt_dev_model *d)
{
    return d->peak_flops;
}

const struct dt_device_kernels dt_device_kernels_cuda = {
    .name = "cuda",
    .create = engine_create,
    .destroy = engine_destroy,
    .train_batch = dt_engine__train_batch,
    .update = dt_engine__update,
    .read_stats = engine_read_stats,
    .eval_batch = engine_eval_batch,
    .eval_tokens = engine_eval_tokens,
    .read_scaler = engine_read_scaler,
    .get_state = engine_get_state,
    .sample = engine_sample,
    .peak_flops = engine_peak_flops,
    .read_split = dt_engine__read_split,
};
