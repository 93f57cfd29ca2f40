/* trainer_device.c - the trainer on an accelerator: which accelerator tables
 * this build has, and the engine of kernels.h (struct dt_device_kernels)
 * built from what setup made for the CPU: the host model (its layout, initial
 * or resumed parameters and, through its ops, its device half), AdamW's
 * state, the reducer's buckets, the data sets and the sampler's settings
 * (token runs keep their loaders on the host: the loop hands each batch
 * over), and the model's training FLOPs per token for MFU.
 *
 * The loop (trainer_loop.c) then calls the engine at the points where it
 * would call the CPU model; the CPU arenas stay as the host mirror that
 * checkpoints and desync checks read.  Not for the loop itself.
 */
#include "worker/trainer_internal.h"

#include <math.h>
#include <stdlib.h>

#include "base/error.h"
#include "base/log.h"

/* The CUDA table exists only when nvcc built worker/cuda/; without it a
 * trainer.device: cuda job gets a sentence (trainer.c), not a link error. */
#ifdef DT_HAVE_CUDA
extern const struct dt_device_kernels dt_device_kernels_cuda;
#endif

const struct dt_device_kernels *dt_trainer__device_kernels(enum dt_device device)
{
#ifdef DT_HAVE_CUDA
    if (device == DT_DEVICE_CUDA)
        return &dt_device_kernels_cuda;
#else
    (void)device;
#endif
    return NULL;
}

/* fp16: the host scaler mirrors the device's (metrics rows, checkpoints);
 * optimizer steps not taken by AdamW were skipped. */
int dt_trainer__device_scaler(struct dt_trainer *t)
{
    if (!t->dev || !t->scaler.enabled)
        return 0;
    float scale = 0;
    int tracker = 0;
    int64_t taken = 0;
    int rc = t->devk->read_scaler(t->dev, &scale, &tracker, &taken);
    if (rc)
        return dt_error_prefix("reading the loss scale at step %lld", (long long)t->step);
    t->scaler.scale = scale;
    t->scaler.growth_tracker = tracker;
    t->scaler.skipped = t->step - taken;
    return 0;
}

int dt_trainer__device_create(struct dt_trainer *t)
{
    const struct dt_trainer_spec *s = &t->spec;
    const char *name = s->device == DT_DEVICE_CUDA ? "cuda" : "?";
    t->devk = dt_trainer__device_kernels(s->device);
    if (!t->devk)
        return dt_error_set(DT_EUNSUPPORTED, "trainer.device %s: not built into this dtrain", name);
    /* bf16 has fp32's range: no loss scaling on the device (torch's bf16
     * autocast runs without a GradScaler), so metrics carry no loss_scale. */
    if (s->amp.dtype == DT_AMP_BF16)
        t->scaler.enabled = false;
    const struct dt_model *m = t->model;
    struct dt_dev_config c = {.device = -1,
                              .model = m,
                              .batch = s->data.batch_size,
                              .max_batch =
                                  t->eval_batch > s->data.batch_size ? t->eval_batch : s->data.batch_size,
                              .bf16 = s->amp.dtype == DT_AMP_BF16,
                              .fp16 = s->amp.dtype == DT_AMP_FP16,
                              .dynamic_scale = t->scaler.dynamic,
                              .scale = t->scaler.scale,
                              .growth_tracker = t->scaler.growth_tracker,
                              .growth_factor = t->scaler.growth_factor,
                              .backoff_factor = t->scaler.backoff_factor,
                              .growth_interval = t->scaler.growth_interval,
                              .cuda_graph = s->cuda_graph,
                              .tf32 = s->tf32,
                              .recompute = (int)s->recompute,
                              .grad_accum = s->ddp.grad_accum,
                              .seq_len = t->tokens ? s->data.seq_len : 0,
                              .beta2 = s->optimizer.beta2,
                              .eps = s->optimizer.eps,
                              .weight_decay = s->optimizer.weight_decay,
                              .grad_clip = s->optimizer.grad_clip,
                              .train = &t->train,
                              .test = &t->test,
                              .rank = t->rank,
                              .world = t->world,
                              .shuffle = s->data.shuffle,
                              .drop_last = s->data.drop_last,
                              .seed = s->seed,
                              .comm = t->comm,
                              .zero = s->ddp.zero == 1,
                              .buckets = &t->red.plan,
                              .m = t->opt.m,
                              .v = t->opt.v,
                              .adam_step = t->opt.step};
    int rc = t->devk->create(&c, &t->dev); /* the engine keeps its own copy of the buckets */
    if (!rc && t->rank == 0)
        dt_log_info("training on %s: %s, CUDA graphs %s", name,
                    c.bf16   ? "bf16 GEMMs, fp32 master weights"
                    : c.fp16 ? "fp16 GEMMs, fp32 master weights, loss scaling on the device"
                    : c.tf32 ? "fp32, GEMMs in tf32"
                             : "fp32",
                    c.cuda_graph ? "on" : "off");
    return rc;
}

/* Training FLOPs per token of a language model, llm.c's estimate
 * (gpt2_estimate_mfu, after Kaplan et al. 2.1): 6 N for the parameters'
 * GEMMs forward and backward, 6 L C T for attention's scores and mix.  N
 * counts the arena (the padded vocabulary included, as llm.c).  NAN for a
 * model without token sequences. */
double dt_trainer__flops_per_token(const struct dt_trainer *t)
{
    if (!t->tokens)
        return NAN;
    const struct dt_model_spec *m = &t->spec.model;
    return 6.0 * (double)t->model->n_params + 6.0 * m->n_layer * (double)m->n_embd * t->spec.data.seq_len;
}
