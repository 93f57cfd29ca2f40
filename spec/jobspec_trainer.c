/* jobspec_trainer.c - the key tables of the `trainer:` section (struct dt_trainer_spec).
 *
 * Ranges follow what PyTorch accepts for the same settings (AdamW betas in
 * [0, 1), OneCycle pct_start in [0, 1], GradScaler factors), so a spec that
 * loads here means what it would mean there.  Defaults come from
 * dt_trainer_spec_defaults (spec/trainer_spec.c), not from here.
 *
 * Not for the top level or the scheduler sections.
 */
#include "base/error.h"
#include "spec/jobspec_keys.h"
#include "spec/trainer_spec.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RANGE_GT0 .lo = 0, .flags = DT_KF_LO | DT_KF_LO_X
#define RANGE_GE0 .lo = 0, .flags = DT_KF_LO

static const char *const model_types[] = {"mlp", "gpt2", NULL};
static const char *const activations[] = {"relu", "gelu", NULL};
static const char *const datasets[] = {"fashion-mnist", "tokens", NULL};
static const char *const token_formats[] = {"llmc", "uint16", NULL};
static const char *const optimizers[] = {"adamw", NULL};
static const char *const sched_types[] = {"constant", "onecycle", "cosine", NULL};
static const char *const anneals[] = {"cos", "linear", NULL};
static const char *const resumes[] = {"auto", "never", NULL};
static const char *const devices[] = {"cpu", "cuda", NULL};
static const char *const amp_dtypes[] = {"off", "bf16", "fp16", NULL};
static const char *const recomputes[] = {"none", "gelu", "block", NULL};

/* A list of plain numbers: hidden widths, betas. */
static int number_list(struct dt_spec_ctx *ctx, const struct dt_spec_key *k, const struct dt_ynode *v,
                       size_t min, size_t max, int integer, double *out)
{
    char q[96];
    const char *what = integer ? "a list of integers" : "a list of numbers";
    if (v->kind != DT_Y_SEQ)
        return dt_spec_fail(ctx, v, k->name, "expected %s like %s, got %s", what,
                            integer ? "[1024, 1024]" : "[0.9, 0.999]", dt_ynode_kind_name(v));
    if (v->n < min || v->n > max)
        return min == max
                   ? dt_spec_fail(ctx, v, k->name, "expected exactly %zu numbers, got %zu", min, v->n)
                   : dt_spec_fail(ctx, v, k->name, "expected from %zu to %zu items, got %zu", min, max, v->n);
    for (size_t i = 0; i < v->n; i++) {
        const struct dt_ynode *it = v->items[i];
        long long n;
        int bad = it->kind != DT_Y_SCALAR || !it->plain ||
                  (integer ? dt_spec_parse_int(it->text, &n) : dt_spec_parse_num(it->text, &out[i]));
        if (bad)
            return dt_spec_fail(ctx, it, k->name, "expected %s, got %s", what, dt_spec_got(it, q, sizeof q));
        if (integer)
            out[i] = (double)n;
        if (dt_spec_check_range(ctx, k, it, out[i], integer))
            return DT_EINVAL;
    }
    return 0;
}

static int set_hidden(struct dt_spec_ctx *ctx, const struct dt_spec_key *k, const struct dt_ynode *v,
                      void *obj)
{
    struct dt_model_spec *m = obj;
    double w[DT_MLP_MAX_HIDDEN];
    if (number_list(ctx, k, v, 1, DT_MLP_MAX_HIDDEN, 1, w))
        return DT_EINVAL;
    for (size_t i = 0; i < v->n; i++)
        m->hidden[i] = (int)w[i];
    m->n_hidden = (int)v->n;
    return 0;
}

static int set_betas(struct dt_spec_ctx *ctx, const struct dt_spec_key *k, const struct dt_ynode *v,
                     void *obj)
{
    struct dt_optimizer_spec *o = obj;
    double b[2];
    if (number_list(ctx, k, v, 2, 2, 0, b))
        return DT_EINVAL;
    o->beta1 = b[0];
    o->beta2 = b[1];
    return 0;
}

static int set_loss_scale(struct dt_spec_ctx *ctx, const struct dt_spec_key *k, const struct dt_ynode *v,
                          void *obj)
{
    struct dt_amp_spec *a = obj;
    char q[96];
    double x;
    if (v->kind == DT_Y_SCALAR && strcmp(v->text, "dynamic") == 0) {
        a->dynamic = true;
        return 0;
    }
    if (v->kind == DT_Y_SCALAR && v->plain && dt_spec_parse_num(v->text, &x) == 0) {
        if (dt_spec_check_range(ctx, k, v, x, 0))
            return DT_EINVAL;
        a->dynamic = false;
        a->loss_scale = x;
        return 0;
    }
    return dt_spec_fail(ctx, v, k->name, "expected dynamic or a number > 0, got %s",
                        dt_spec_got(v, q, sizeof q));
}

/* trace.steps: "10-20" (inclusive), or one step. */
static int set_trace_steps(struct dt_spec_ctx *ctx, const struct dt_spec_key *k, const struct dt_ynode *v,
                           void *obj)
{
    struct dt_trace_spec *t = obj;
    char q[96], a[32] = "", b[32] = "";
    long long first = -1, last = -1;
    if (v->kind == DT_Y_SCALAR && v->len < sizeof a) {
        const char *dash = strchr(v->text, '-');
        if (dash && dash != v->text) {
            snprintf(a, sizeof a, "%.*s", (int)(dash - v->text), v->text);
            snprintf(b, sizeof b, "%s", dash + 1);
        } else {
            snprintf(a, sizeof a, "%s", v->text);
            snprintf(b, sizeof b, "%s", v->text);
        }
    }
    if (dt_spec_parse_int(a, &first) || dt_spec_parse_int(b, &last) || first < 0 || last < first ||
        last > 1000000000)
        return dt_spec_fail(ctx, v, k->name,
                            "expected a step range like \"10-20\" (first <= last) or one step, "
                            "got %s",
                            dt_spec_got(v, q, sizeof q));
    t->first_step = (int)first;
    t->last_step = (int)last;
    return 0;
}

/* init_from: Hugging Face GPT-2 weights, so a gpt2 model and a path; the
 * file itself is read by the trainer (worker/hf_weights.c), on the nodes. */
static int check_init_from(struct dt_spec_ctx *ctx, const struct dt_ynode *map, const struct dt_trainer_spec *t)
{
    const struct dt_ynode *v = dt_ymap_get(map, "init_from");
    if (!t->init_from) /* "" is refused as every string key's is */
        return 0;
    if (strcmp(t->model.type, "gpt2"))
        return dt_spec_fail(ctx, v, "init_from",
                            "loads Hugging Face GPT-2 weights, and model.type is %s; set model: {type: gpt2, ...}",
                            t->model.type);
    return 0;
}

static int print_hidden(const void *obj, char *buf, size_t size)
{
    const struct dt_model_spec *m = obj;
    size_t used = 0;
    for (int i = 0; i < m->n_hidden && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%d", i ? ", " : "[", m->hidden[i]);
    if (used < size)
        snprintf(buf + used, size - used, "]");
    return m->n_hidden > 0;
}

static int print_betas(const void *obj, char *buf, size_t size)
{
    const struct dt_optimizer_spec *o = obj;
    char a[40], b[40];
    snprintf(buf, size, "[%s, %s]", dt_spec_shortest(o->beta1, a, sizeof a),
             dt_spec_shortest(o->beta2, b, sizeof b));
    return 1;
}

static int print_loss_scale(const void *obj, char *buf, size_t size)
{
    const struct dt_amp_spec *a = obj;
    if (a->dynamic)
        snprintf(buf, size, "dynamic");
    else
        dt_spec_shortest(a->loss_scale, buf, size);
    return 1;
}

static int print_trace_steps(const void *obj, char *buf, size_t size)
{
    const struct dt_trace_spec *t = obj;
    if (t->last_step < t->first_step)
        return 0;
    snprintf(buf, size, "\"%d-%d\"", t->first_step, t->last_step);
    return 1;
}

static const struct dt_spec_key model_keys[] = {
    DT_KEY("type", DT_KT_CHARS, struct dt_model_spec, type, .aux = 16, .names = model_types),
    DT_KEY("hidden", DT_KT_CUSTOM, struct dt_model_spec, hidden, .set = set_hidden, .print = print_hidden,
           .lo = 1, .hi = 65536, .flags = DT_KF_LO | DT_KF_HI),
    DT_KEY("activation", DT_KT_ENUM, struct dt_model_spec, activation, .names = activations),
    DT_KEY("n_layer", DT_KT_INT, struct dt_model_spec, n_layer, .lo = 1, .hi = 1024, .flags = DT_KF_LO | DT_KF_HI),
    DT_KEY("n_head", DT_KT_INT, struct dt_model_spec, n_head, .lo = 1, .hi = 1024, .flags = DT_KF_LO | DT_KF_HI),
    DT_KEY("n_embd", DT_KT_INT, struct dt_model_spec, n_embd, .lo = 1, .hi = 65536, .flags = DT_KF_LO | DT_KF_HI),
    DT_KEY("vocab_size", DT_KT_INT, struct dt_model_spec, vocab_size, .lo = 1, .hi = 1 << 24,
           .flags = DT_KF_LO | DT_KF_HI),
    DT_KEY("block_size", DT_KT_INT, struct dt_model_spec, block_size, .lo = 1, .hi = 65536,
           .flags = DT_KF_LO | DT_KF_HI),
};

/* gpt2's heads split n_embd evenly (head_dim = n_embd / n_head). */
static int check_model(struct dt_spec_ctx *ctx, const struct dt_ynode *map, void *obj)
{
    const struct dt_model_spec *m = obj;
    if (strcmp(m->type, "gpt2") != 0 || m->n_embd % m->n_head == 0)
        return 0;
    const struct dt_ynode *at = dt_ymap_get(map, "n_embd") ? dt_ymap_get(map, "n_embd") : map;
    return dt_spec_fail(ctx, at, "n_embd", "must be a multiple of n_head (%d) for gpt2's heads, got %d", m->n_head,
                        m->n_embd);
}
static const struct dt_spec_section model_section = {
    .keys = model_keys, .n_keys = DT_NKEYS(model_keys), .check = check_model};

static const struct dt_spec_key data_keys[] = {
    DT_KEY("dataset", DT_KT_CHARS, struct dt_data_spec, dataset, .aux = 32, .names = datasets),
    DT_KEY("path", DT_KT_STR, struct dt_data_spec, path),
    DT_KEY("batch_size", DT_KT_INT, struct dt_data_spec, batch_size, .lo = 1, .hi = 1 << 20,
           .flags = DT_KF_LO | DT_KF_HI),
    DT_KEY("workers", DT_KT_INT, struct dt_data_spec, workers, .lo = 0, .hi = 64,
           .flags = DT_KF_LO | DT_KF_HI),
    DT_KEY("prefetch", DT_KT_INT, struct dt_data_spec, prefetch, .lo = 1, .hi = 64,
           .flags = DT_KF_LO | DT_KF_HI),
    DT_KEY("shuffle", DT_KT_BOOL, struct dt_data_spec, shuffle),
    DT_KEY("drop_last", DT_KT_BOOL, struct dt_data_spec, drop_last),
    DT_KEY("train", DT_KT_STR, struct dt_data_spec, train),
    DT_KEY("val", DT_KT_STR, struct dt_data_spec, val),
    DT_KEY("seq_len", DT_KT_INT, struct dt_data_spec, seq_len, .lo = 1, .hi = 1 << 20,
           .flags = DT_KF_LO | DT_KF_HI | DT_KF_ZERO_UNSET),
    /* llmc, the default, is left out by --print: a fashion-mnist spec may not name format */
    DT_KEY("format", DT_KT_ENUM, struct dt_data_spec, format, .names = token_formats, .flags = DT_KF_ZERO_UNSET),
};
static const struct dt_spec_section data_section = {.keys = data_keys, .n_keys = DT_NKEYS(data_keys)};

static const struct dt_spec_key optimizer_keys[] = {
    DT_KEY("type", DT_KT_CHARS, struct dt_optimizer_spec, type, .aux = 16, .names = optimizers),
    DT_KEY("lr", DT_KT_NUM, struct dt_optimizer_spec, lr, RANGE_GT0),
    DT_KEY("betas", DT_KT_CUSTOM, struct dt_optimizer_spec, beta1, .set = set_betas, .print = print_betas,
           .lo = 0, .hi = 1, .flags = DT_KF_LO | DT_KF_HI | DT_KF_HI_X),
    DT_KEY("eps", DT_KT_NUM, struct dt_optimizer_spec, eps, RANGE_GE0),
    DT_KEY("weight_decay", DT_KT_NUM, struct dt_optimizer_spec, weight_decay, RANGE_GE0),
    DT_KEY("grad_clip", DT_KT_NUM, struct dt_optimizer_spec, grad_clip, RANGE_GE0),
};
static const struct dt_spec_section optimizer_section = {.keys = optimizer_keys,
                                                         .n_keys = DT_NKEYS(optimizer_keys)};

/* OneCycle without max_lr has no schedule to follow; PyTorch refuses it too. */
static int check_scheduler(struct dt_spec_ctx *ctx, const struct dt_ynode *map, void *obj)
{
    const struct dt_scheduler_spec *s = obj;
    if (s->type != DT_SCHED_ONECYCLE)
        return 0;
    if (!dt_ymap_get(map, "max_lr"))
        return dt_spec_fail(ctx, map, NULL,
                            "type onecycle needs max_lr (the peak learning rate), e.g. max_lr: 3e-3");
    if (s->cycle_momentum && s->base_momentum > s->max_momentum)
        return dt_spec_fail(ctx, dt_ymap_get(map, "base_momentum") ? dt_ymap_get(map, "base_momentum") : map,
                            "base_momentum", "must not exceed max_momentum (%g), got %g", s->max_momentum,
                            s->base_momentum);
    if (s->three_phase && s->pct_start > 0.5)
        return dt_spec_fail(
            ctx, dt_ymap_get(map, "pct_start") ? dt_ymap_get(map, "pct_start") : map, "pct_start",
            "three_phase needs pct_start <= 0.5 (the phases would overlap), got %g", s->pct_start);
    return 0;
}

static const struct dt_spec_key scheduler_keys[] = {
    DT_KEY("type", DT_KT_ENUM, struct dt_scheduler_spec, type, .names = sched_types),
    DT_KEY("max_lr", DT_KT_NUM, struct dt_scheduler_spec, max_lr, .lo = 0,
           .flags = DT_KF_LO | DT_KF_LO_X | DT_KF_ZERO_UNSET),
    DT_KEY("pct_start", DT_KT_NUM, struct dt_scheduler_spec, pct_start, .lo = 0, .hi = 1,
           .flags = DT_KF_LO | DT_KF_HI),
    DT_KEY("anneal", DT_KT_ENUM, struct dt_scheduler_spec, anneal, .names = anneals),
    DT_KEY("div_factor", DT_KT_NUM, struct dt_scheduler_spec, div_factor, RANGE_GT0),
    DT_KEY("final_div_factor", DT_KT_NUM, struct dt_scheduler_spec, final_div_factor, RANGE_GT0),
    DT_KEY("three_phase", DT_KT_BOOL, struct dt_scheduler_spec, three_phase),
    DT_KEY("cycle_momentum", DT_KT_BOOL, struct dt_scheduler_spec, cycle_momentum),
    DT_KEY("base_momentum", DT_KT_NUM, struct dt_scheduler_spec, base_momentum, .lo = 0, .hi = 1,
           .flags = DT_KF_LO | DT_KF_HI | DT_KF_HI_X),
    DT_KEY("max_momentum", DT_KT_NUM, struct dt_scheduler_spec, max_momentum, .lo = 0, .hi = 1,
           .flags = DT_KF_LO | DT_KF_HI | DT_KF_HI_X),
    DT_KEY("warmup_steps", DT_KT_I64, struct dt_scheduler_spec, warmup_steps, .lo = 0, .hi = 1e12,
           .flags = DT_KF_LO | DT_KF_HI),
    DT_KEY("min_lr", DT_KT_NUM, struct dt_scheduler_spec, min_lr, RANGE_GE0),
};
static const struct dt_spec_section scheduler_section = {
    .keys = scheduler_keys, .n_keys = DT_NKEYS(scheduler_keys), .check = check_scheduler};

static const struct dt_spec_key ddp_keys[] = {
    DT_KEY("bucket_cap_mb", DT_KT_SIZE_MB, struct dt_ddp_spec, bucket_cap_mb, .lo = 0, .hi = 4096,
           .flags = DT_KF_LO | DT_KF_LO_X | DT_KF_HI),
    DT_KEY("first_bucket_mb", DT_KT_SIZE_MB, struct dt_ddp_spec, first_bucket_mb, .lo = 0, .hi = 4096,
           .flags = DT_KF_LO | DT_KF_LO_X | DT_KF_HI),
    DT_KEY("overlap", DT_KT_BOOL, struct dt_ddp_spec, overlap),
    DT_KEY("grad_accum", DT_KT_INT, struct dt_ddp_spec, grad_accum, .lo = 1, .hi = 65536,
           .flags = DT_KF_LO | DT_KF_HI),
    DT_KEY("desync_check_every", DT_KT_INT, struct dt_ddp_spec, desync_check_every, .lo = 0, .hi = 1e9,
           .flags = DT_KF_LO | DT_KF_HI),
    DT_KEY("share_state", DT_KT_BOOL, struct dt_ddp_spec, share_state),
    DT_KEY("zero", DT_KT_INT, struct dt_ddp_spec, zero, .lo = 0, .hi = 1, .flags = DT_KF_LO | DT_KF_HI,
           .hint = "0: every rank holds all of AdamW's state; 1: each rank holds its shard (ZeRO stage 1)"),
};
static const struct dt_spec_section ddp_section = {.keys = ddp_keys, .n_keys = DT_NKEYS(ddp_keys)};

static const struct dt_spec_key checkpoint_keys[] = {
    DT_KEY("every_steps", DT_KT_INT, struct dt_checkpoint_spec, every_steps, .lo = 0, .hi = 1e9,
           .flags = DT_KF_LO | DT_KF_HI),
    DT_KEY("dir", DT_KT_STR, struct dt_checkpoint_spec, dir),
    DT_KEY("keep", DT_KT_INT, struct dt_checkpoint_spec, keep, .lo = 1, .hi = 10000,
           .flags = DT_KF_LO | DT_KF_HI),
    DT_KEY("resume", DT_KT_ENUM, struct dt_checkpoint_spec, resume, .names = resumes),
};
static const struct dt_spec_section checkpoint_section = {.keys = checkpoint_keys,
                                                          .n_keys = DT_NKEYS(checkpoint_keys)};

static const struct dt_spec_key amp_keys[] = {
    DT_KEY("dtype", DT_KT_ENUM, struct dt_amp_spec, dtype, .names = amp_dtypes),
    DT_KEY("loss_scale", DT_KT_CUSTOM, struct dt_amp_spec, loss_scale, .set = set_loss_scale,
           .print = print_loss_scale, RANGE_GT0),
    DT_KEY("init_scale", DT_KT_NUM, struct dt_amp_spec, init_scale, RANGE_GT0),
    DT_KEY("growth_factor", DT_KT_NUM, struct dt_amp_spec, growth_factor, .lo = 1,
           .flags = DT_KF_LO | DT_KF_LO_X),
    DT_KEY("backoff_factor", DT_KT_NUM, struct dt_amp_spec, backoff_factor, .lo = 0, .hi = 1,
           .flags = DT_KF_LO | DT_KF_LO_X | DT_KF_HI | DT_KF_HI_X),
    DT_KEY("growth_interval", DT_KT_INT, struct dt_amp_spec, growth_interval, .lo = 1, .hi = 1e9,
           .flags = DT_KF_LO | DT_KF_HI),
};
static const struct dt_spec_section amp_section = {.keys = amp_keys, .n_keys = DT_NKEYS(amp_keys)};

/* eval: {every_epochs, batches, every_steps} are three fields of the trainer
 * struct, in this order; the section is laid over them, so the table
 * machinery needs no special case (the asserts hold the layouts together). */
struct eval_view {
    int every_epochs;
    int batches;
    int64_t every_steps;
};
_Static_assert(offsetof(struct dt_trainer_spec, eval_batches) - offsetof(struct dt_trainer_spec, eval_every_epochs) ==
                       offsetof(struct eval_view, batches) &&
                   offsetof(struct dt_trainer_spec, eval_every_steps) -
                           offsetof(struct dt_trainer_spec, eval_every_epochs) ==
                       offsetof(struct eval_view, every_steps),
               "eval_view must lie over eval_every_epochs, eval_batches, eval_every_steps");
static const struct dt_spec_key eval_keys[] = {
    DT_KEY("every_epochs", DT_KT_INT, struct eval_view, every_epochs, .lo = 0, .hi = 1e6,
           .flags = DT_KF_LO | DT_KF_HI),
    DT_KEY("batches", DT_KT_INT, struct eval_view, batches, .lo = 0, .hi = 1e9, .flags = DT_KF_LO | DT_KF_HI),
    DT_KEY("every_steps", DT_KT_I64, struct eval_view, every_steps, .lo = 0, .hi = 1e12,
           .flags = DT_KF_LO | DT_KF_HI),
};
static const struct dt_spec_section eval_section = {.keys = eval_keys, .n_keys = DT_NKEYS(eval_keys)};

static const struct dt_spec_key sample_keys[] = {
    DT_KEY("tokens", DT_KT_INT, struct dt_sample_spec, tokens, .lo = 0, .hi = 1 << 20,
           .flags = DT_KF_LO | DT_KF_HI),
    DT_KEY("prompt", DT_KT_STR, struct dt_sample_spec, prompt),
    DT_KEY("temperature", DT_KT_NUM, struct dt_sample_spec, temperature, RANGE_GE0),
    DT_KEY("top_k", DT_KT_INT, struct dt_sample_spec, top_k, .lo = 0, .hi = 1 << 20,
           .flags = DT_KF_LO | DT_KF_HI),
};
static const struct dt_spec_section sample_section = {.keys = sample_keys, .n_keys = DT_NKEYS(sample_keys)};

static const struct dt_spec_key trace_keys[] = {
    DT_KEY("steps", DT_KT_CUSTOM, struct dt_trace_spec, first_step, .set = set_trace_steps,
           .print = print_trace_steps),
};
static const struct dt_spec_section trace_section = {.keys = trace_keys, .n_keys = DT_NKEYS(trace_keys)};

/* Rules between the optimizer's keys and others: cosine decays from
 * optimizer.lr down to min_lr, so min_lr may not exceed it. */
static int check_optim_rules(struct dt_spec_ctx *ctx, const struct dt_ynode *map,
                             const struct dt_trainer_spec *t)
{
    const struct dt_ynode *sched = dt_ymap_get(map, "scheduler");
    if (t->scheduler.type == DT_SCHED_COSINE && t->scheduler.min_lr > t->optimizer.lr)
        return dt_spec_fail(ctx, dt_ymap_get(sched, "min_lr") ? dt_ymap_get(sched, "min_lr") : sched,
                            "scheduler.min_lr", "must be in [0, optimizer.lr] (lr is %g), got %g", t->optimizer.lr,
                            t->scheduler.min_lr);
    return 0;
}

/* What only one device does: tf32 is a GPU's tensor-core mode (the CPU
 * computes fp32 as fp32); GPT-2's GPU half is built for bf16 and fp32 (as
 * llm.c, which has no fp16 either). */
static int check_device_rules(struct dt_spec_ctx *ctx, const struct dt_ynode *map, const struct dt_trainer_spec *t)
{
    const struct dt_ynode *amp = dt_ymap_get(map, "amp");
    if (t->tf32 && t->device != DT_DEVICE_CUDA)
        return dt_spec_fail(ctx, dt_ymap_get(map, "tf32") ? dt_ymap_get(map, "tf32") : map, "tf32",
                            "is the GPU's fp32-on-tensor-cores mode; on device: cpu GEMMs are plain fp32: "
                            "set device: cuda or drop tf32");
    if (t->device == DT_DEVICE_CUDA && t->amp.dtype == DT_AMP_FP16 && strcmp(t->model.type, "gpt2") == 0)
        return dt_spec_fail(ctx, amp && dt_ymap_get(amp, "dtype") ? dt_ymap_get(amp, "dtype") : map, "amp.dtype",
                            "fp16 is not offered for gpt2 on device: cuda (its GPU half computes in bf16 or "
                            "fp32): use dtype bf16 (same range as fp32, no loss scaling) or off");
    return 0;
}

/* The node of trainer.data.<key> when written, else of trainer.data, else the trainer map. */
static const struct dt_ynode *data_node(const struct dt_ynode *map, const char *key)
{
    const struct dt_ynode *d = dt_ymap_get(map, "data"), *k = d && key ? dt_ymap_get(d, key) : NULL;
    return k ? k : d ? d : map;
}

/* The data set and the model must read the same kind of batch, and each
 * data set takes only its own keys; said at validate time, not by a rank. */
static int check_data(struct dt_spec_ctx *ctx, const struct dt_ynode *map, const struct dt_trainer_spec *t)
{
    const struct dt_data_spec *d = &t->data;
    bool tokens = strcmp(d->dataset, "tokens") == 0, gpt = strcmp(t->model.type, "gpt2") == 0;
    if (tokens && !gpt)
        return dt_spec_fail(ctx, data_node(map, "dataset"), "data.dataset",
                            "tokens are read by a language model: set model.type: gpt2 (model %s reads images)",
                            t->model.type);
    if (!tokens && gpt)
        return dt_spec_fail(ctx, data_node(map, "dataset"), "data.dataset",
                            "model gpt2 reads token sequences, not the images of %s: set dataset: tokens with "
                            "train, val and seq_len",
                            d->dataset);
    if (tokens && !d->train)
        return dt_spec_fail(ctx, data_node(map, NULL), "data.train",
                            "dataset tokens needs train: a glob of llm.c token shards, e.g. data/kjv_train_*.bin");
    if (tokens && d->seq_len < 1)
        return dt_spec_fail(ctx, data_node(map, NULL), "data.seq_len",
                            "dataset tokens needs seq_len (T, tokens per sequence), e.g. seq_len: 1024");
    if (tokens && t->model.vocab_size > 65536)
        return dt_spec_fail(ctx, map, "model.vocab_size",
                            "%d: token shards hold uint16 tokens, so dataset tokens reads vocabularies up to 65536",
                            t->model.vocab_size);
    if (tokens && d->seq_len > t->model.block_size)
        return dt_spec_fail(ctx, data_node(map, "seq_len"), "data.seq_len",
                            "%d is longer than the model's block_size %d (its learned positions); shorten it "
                            "or raise model.block_size",
                            d->seq_len, t->model.block_size);
    if (tokens && d->path)
        return dt_spec_fail(ctx, data_node(map, "path"), "data.path",
                            "is the fashion-mnist directory; dataset tokens reads the train and val globs");
    static const char *const token_keys[] = {"train", "val", "seq_len", "format"};
    for (size_t i = 0; !tokens && i < sizeof token_keys / sizeof *token_keys; i++) {
        char key[32];
        snprintf(key, sizeof key, "data.%s", token_keys[i]);
        if (dt_ymap_get(data_node(map, NULL), token_keys[i]))
            return dt_spec_fail(ctx, data_node(map, token_keys[i]), key,
                                "is a key of dataset tokens; dataset %s does not read it", d->dataset);
    }
    if (!tokens && t->sample.tokens > 0)
        return dt_spec_fail(ctx, dt_ymap_get(map, "sample") ? dt_ymap_get(map, "sample") : map, "sample",
                            "a sample needs a language model on dataset tokens");
    const char *prompt = t->sample.prompt;
    const struct dt_ynode *sn = dt_ymap_get(map, "sample"), *pn = sn ? dt_ymap_get(sn, "prompt") : NULL;
    if (prompt && t->model.vocab_size > 256)
        return dt_spec_fail(ctx, pn ? pn : map, "sample.prompt",
                            "is text, read as bytes, for byte-level models (vocab_size 256); a vocabulary of %d "
                            "starts samples from token %d (<|endoftext|> for GPT-2): drop the prompt",
                            t->model.vocab_size, t->model.vocab_size - 1);
    if (prompt && (!*prompt || (int)strlen(prompt) > t->model.block_size))
        return dt_spec_fail(ctx, pn ? pn : map, "sample.prompt",
                            "must hold 1 to block_size (%d) bytes, got %zu", t->model.block_size, strlen(prompt));
    return 0;
}

/* Exactly one of epochs and steps counts: writing steps turns epochs off. */
static int check_trainer(struct dt_spec_ctx *ctx, const struct dt_ynode *map, void *obj)
{
    struct dt_trainer_spec *t = obj;
    if (check_init_from(ctx, map, t))
        return DT_EINVAL;
    const struct dt_ynode *e = dt_ymap_key_node(map, "epochs"), *s = dt_ymap_key_node(map, "steps");
    if (e && s) {
        const struct dt_ynode *later = s->line > e->line || (s->line == e->line && s->col > e->col) ? s : e;
        return dt_spec_fail(ctx, later, NULL, "set either epochs or steps, not both");
    }
    if (s)
        t->epochs = 0;
    if (check_optim_rules(ctx, map, t) || check_device_rules(ctx, map, t))
        return DT_EINVAL;
    return check_data(ctx, map, t);
}

static void trainer_init(void *obj)
{
    dt_trainer_spec_defaults(obj);
}

static const struct dt_spec_key trainer_keys[] = {
    DT_KEY("model", DT_KT_SECTION, struct dt_trainer_spec, model, .sub = &model_section),
    DT_KEY("init_from", DT_KT_STR, struct dt_trainer_spec, init_from),
    DT_KEY("data", DT_KT_SECTION, struct dt_trainer_spec, data, .sub = &data_section),
    DT_KEY("epochs", DT_KT_INT, struct dt_trainer_spec, epochs, .lo = 1, .hi = 1e6,
           .flags = DT_KF_LO | DT_KF_HI | DT_KF_ZERO_UNSET),
    DT_KEY("steps", DT_KT_I64, struct dt_trainer_spec, steps, .lo = 1, .hi = 1e12,
           .flags = DT_KF_LO | DT_KF_HI | DT_KF_ZERO_UNSET),
    DT_KEY("optimizer", DT_KT_SECTION, struct dt_trainer_spec, optimizer, .sub = &optimizer_section),
    DT_KEY("scheduler", DT_KT_SECTION, struct dt_trainer_spec, scheduler, .sub = &scheduler_section),
    DT_KEY("ddp", DT_KT_SECTION, struct dt_trainer_spec, ddp, .sub = &ddp_section),
    DT_KEY("checkpoint", DT_KT_SECTION, struct dt_trainer_spec, checkpoint, .sub = &checkpoint_section),
    DT_KEY("eval", DT_KT_SECTION, struct dt_trainer_spec, eval_every_epochs, .sub = &eval_section),
    DT_KEY("seed", DT_KT_U64, struct dt_trainer_spec, seed, .lo = 0, .hi = 9.2e18,
           .flags = DT_KF_LO | DT_KF_HI),
    DT_KEY("device", DT_KT_ENUM, struct dt_trainer_spec, device, .names = devices,
           .hint = "NVIDIA GPUs are device: cuda"),
    DT_KEY("amp", DT_KT_SECTION, struct dt_trainer_spec, amp, .sub = &amp_section),
    DT_KEY("trace", DT_KT_SECTION, struct dt_trainer_spec, trace, .sub = &trace_section),
    DT_KEY("sample", DT_KT_SECTION, struct dt_trainer_spec, sample, .sub = &sample_section),
    DT_KEY("cuda_graph", DT_KT_BOOL, struct dt_trainer_spec, cuda_graph),
    DT_KEY("tf32", DT_KT_BOOL, struct dt_trainer_spec, tf32),
    DT_KEY("log_every_steps", DT_KT_INT, struct dt_trainer_spec, log_every_steps, .lo = 1, .hi = 1e9,
           .flags = DT_KF_LO | DT_KF_HI),
    DT_KEY("recompute", DT_KT_ENUM, struct dt_trainer_spec, recompute, .names = recomputes),
};
const struct dt_spec_section dt_jobspec_trainer_section = {.keys = trainer_keys,
                                                           .n_keys = DT_NKEYS(trainer_keys),
                                                           .size = sizeof(struct dt_trainer_spec),
                                                           .init = trainer_init,
                                                           .check = check_trainer};
