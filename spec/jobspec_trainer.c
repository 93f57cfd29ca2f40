/* jobspec_trainer.c - the key tables of the `trainer:` section (struct dt_trainer_spec).
 *
 * Ranges follow what PyTorch accepts for the same settings (AdamW betas in
 * [0, 1), OneCycle pct_start in [0, 1], GradScaler factors), so a spec that
 * loads here means what it would mean there; defaults are PyTorch's where
 * PyTorch has the same setting (AdamW, OneCycleLR, DDP bucket sizes,
 * GradScaler).  dt_trainer_spec_defaults (spec/trainer_spec.c) reads them
 * from here.
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
static const char *const elastic_batches[] = {"auto", "keep_per_rank", "keep_global", NULL};
static const char *const elastic_lrs[] = {"fixed", "linear", NULL};
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

#define RANGE(a, b) .lo = (a), .hi = (b), .flags = DT_KF_LO | DT_KF_HI

static const struct dt_spec_key model_keys[] = {
    DT_KEY("type", DT_KT_CHARS, struct dt_model_spec, type, .aux = 16, .names = model_types, .def = "mlp",
           .help = "Model family: `mlp` reads images, `gpt2` token sequences."),
    DT_KEY("hidden", DT_KT_CUSTOM, struct dt_model_spec, hidden, .set = set_hidden, .print = print_hidden,
           RANGE(1, 65536), .def = "[1024, 1024]", .form = "list of 1–16 integers 1–65536",
           .help = "mlp: widths of the hidden layers.",
           .schema =
               "{\"type\": \"array\", \"items\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 65536},"
               " \"minItems\": 1, \"maxItems\": 16}"),
    DT_KEY("activation", DT_KT_ENUM, struct dt_model_spec, activation, .names = activations, .def = "relu",
           .help = "mlp: the activation between hidden layers (`gelu`: the exact erf GELU)."),
    DT_KEY("n_layer", DT_KT_INT, struct dt_model_spec, n_layer, RANGE(1, 1024), .def = "12",
           .help = "gpt2: transformer blocks."),
    DT_KEY("n_head", DT_KT_INT, struct dt_model_spec, n_head, RANGE(1, 1024), .def = "12",
           .help = "gpt2: attention heads, which must divide `n_embd`."),
    DT_KEY("n_embd", DT_KT_INT, struct dt_model_spec, n_embd, RANGE(1, 65536), .def = "768",
           .help = "gpt2: width of the residual stream."),
    DT_KEY("vocab_size", DT_KT_INT, struct dt_model_spec, vocab_size, RANGE(1, 1 << 24), .def = "50257",
           .help = "gpt2: token ids 0 to vocab_size-1 (256 for byte-level tokens); padded internally to a "
                   "multiple of 128."),
    DT_KEY("block_size", DT_KT_INT, struct dt_model_spec, block_size, RANGE(1, 65536), .def = "1024",
           .help = "gpt2: longest sequence (rows of the learned position embedding)."),
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
    DT_KEY("dataset", DT_KT_CHARS, struct dt_data_spec, dataset, .aux = 32, .names = datasets,
           .def = "fashion-mnist",
           .help =
               "Data set: images for `mlp`, llm.c token shards for `gpt2` (any other pairing is refused)."),
    DT_KEY("path", DT_KT_STR, struct dt_data_spec, path, .unset = "`/usr/share/datasets/fashion-mnist`",
           .example = "/usr/share/datasets/fashion-mnist",
           .help = "fashion-mnist: directory of the IDX gzip files."),
    DT_KEY("batch_size", DT_KT_INT, struct dt_data_spec, batch_size, RANGE(1, 1 << 20), .def = "64",
           .help = "Samples per rank per step (tokens: sequences of `seq_len`)."),
    DT_KEY("workers", DT_KT_INT, struct dt_data_spec, workers, RANGE(0, 64), .def = "2",
           .help = "Loader threads; 0 loads on the training thread."),
    DT_KEY("prefetch", DT_KT_INT, struct dt_data_spec, prefetch, RANGE(1, 64), .def = "2",
           .help = "Batches queued per loader thread."),
    DT_KEY("shuffle", DT_KT_BOOL, struct dt_data_spec, shuffle, .def = "true",
           .help =
               "Reshuffle every epoch (DistributedSampler semantics); tokens: `false` is llm.c's DataLoader "
               "order."),
    DT_KEY("drop_last", DT_KT_BOOL, struct dt_data_spec, drop_last, .def = "false",
           .help = "Drop the last incomplete batch."),
    DT_KEY("train", DT_KT_STR, struct dt_data_spec, train, .example = "data/kjv/train_*.bin",
           .doc = DT_DOC_REF_COMMENT, .form = "glob",
           .help =
               "tokens (required): the training shards, in sorted order; relative to the working directory, "
               "as `path` is. Each shard is checked when the job starts (magic, version, size, every token "
               "below `vocab_size`); an error names the file and the byte offset."),
    DT_KEY("val", DT_KT_STR, struct dt_data_spec, val, .example = "data/kjv/val_*.bin",
           .doc = DT_DOC_REF_COMMENT, .form = "glob", .unset = "none",
           .help = "tokens: the validation shards; without them there is no validation loss."),
    DT_KEY("seq_len", DT_KT_INT, struct dt_data_spec, seq_len, .lo = 1, .hi = 1 << 20,
           .flags = DT_KF_LO | DT_KF_HI | DT_KF_ZERO_UNSET, .example = "1024", .doc = DT_DOC_REF_COMMENT,
           .help = "tokens (required): T, tokens per sequence, at most `model.block_size`; `batch_size` is "
                   "sequences per rank."),
    /* llmc, the default, is left out by --print: a fashion-mnist spec may not name format */
    DT_KEY("format", DT_KT_ENUM, struct dt_data_spec, format, .names = token_formats,
           .flags = DT_KF_ZERO_UNSET, .def = "llmc", .doc = DT_DOC_REF_COMMENT,
           .help =
               "tokens: how shards are laid out. `llmc`: llm.c's shards, a header of 256 int32 (magic "
               "20240520, version 1, token count) then uint16 tokens. `uint16`: bare little-endian uint16 "
               "arrays, as nanoGPT's `prepare.py` writes `train.bin` and `val.bin`; the token count is the "
               "size over 2."),
};
static const struct dt_spec_section data_section = {.keys = data_keys, .n_keys = DT_NKEYS(data_keys)};

static const struct dt_spec_key optimizer_keys[] = {
    DT_KEY("type", DT_KT_CHARS, struct dt_optimizer_spec, type, .aux = 16, .names = optimizers,
           .def = "adamw", .help = "Optimizer: `torch.optim.AdamW` exactly."),
    DT_KEY("lr", DT_KT_NUM, struct dt_optimizer_spec, lr, RANGE_GT0, .def = "1e-3", .help = "Learning rate."),
    DT_KEY("betas", DT_KT_CUSTOM, struct dt_optimizer_spec, beta1, .set = set_betas, .print = print_betas,
           .lo = 0, .hi = 1, .flags = DT_KF_LO | DT_KF_HI | DT_KF_HI_X, .def = "[0.9, 0.999]",
           .form = "two numbers in [0, 1)", .help = "AdamW betas.",
           .schema = "{\"type\": \"array\", \"items\": {\"type\": \"number\", \"minimum\": 0, "
                     "\"exclusiveMaximum\": 1},"
                     " \"minItems\": 2, \"maxItems\": 2}"),
    DT_KEY("eps", DT_KT_NUM, struct dt_optimizer_spec, eps, RANGE_GE0, .def = "1e-8",
           .help = "Term added to the denominator."),
    DT_KEY("weight_decay", DT_KT_NUM, struct dt_optimizer_spec, weight_decay, RANGE_GE0, .def = "0.01",
           .help =
               "Decoupled weight decay, on the tensors the model marks (gpt2: those of 2 or more dimensions; "
               "the MLP: all)."),
    DT_KEY("grad_clip", DT_KT_NUM, struct dt_optimizer_spec, grad_clip, RANGE_GE0, .def = "0",
           .help = "Max global L2 norm of the gradients; 0 = off."),
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
    DT_KEY("type", DT_KT_ENUM, struct dt_scheduler_spec, type, .names = sched_types, .def = "constant",
           .help =
               "Learning-rate schedule: `constant` keeps `optimizer.lr`; `onecycle` (OneCycleLR) requires "
               "`max_lr`; `cosine` warms up linearly to `optimizer.lr` over `warmup_steps` and decays to "
               "`min_lr` (llm.c, nanoGPT)."),
    DT_KEY("max_lr", DT_KT_NUM, struct dt_scheduler_spec, max_lr, .lo = 0,
           .flags = DT_KF_LO | DT_KF_LO_X | DT_KF_ZERO_UNSET, .example = "3e-3",
           .help = "onecycle: the peak rate."),
    DT_KEY("pct_start", DT_KT_NUM, struct dt_scheduler_spec, pct_start, RANGE(0, 1), .def = "0.3",
           .help = "onecycle: fraction of the cycle spent rising; at most 0.5 with `three_phase`."),
    DT_KEY("anneal", DT_KT_ENUM, struct dt_scheduler_spec, anneal, .names = anneals, .def = "cos",
           .help = "onecycle: annealing strategy."),
    DT_KEY("div_factor", DT_KT_NUM, struct dt_scheduler_spec, div_factor, RANGE_GT0, .def = "25",
           .help = "onecycle: initial rate = max_lr / div_factor."),
    DT_KEY("final_div_factor", DT_KT_NUM, struct dt_scheduler_spec, final_div_factor, RANGE_GT0, .def = "1e4",
           .help = "onecycle: final rate = initial rate / final_div_factor."),
    DT_KEY("three_phase", DT_KT_BOOL, struct dt_scheduler_spec, three_phase, .def = "false",
           .help = "onecycle: PyTorch's three-phase variant."),
    DT_KEY("cycle_momentum", DT_KT_BOOL, struct dt_scheduler_spec, cycle_momentum, .def = "true",
           .help = "onecycle: cycle beta1 inversely to the rate."),
    DT_KEY("base_momentum", DT_KT_NUM, struct dt_scheduler_spec, base_momentum, .lo = 0, .hi = 1,
           .flags = DT_KF_LO | DT_KF_HI | DT_KF_HI_X, .def = "0.85",
           .help = "onecycle: lowest beta1; not above `max_momentum`."),
    DT_KEY("max_momentum", DT_KT_NUM, struct dt_scheduler_spec, max_momentum, .lo = 0, .hi = 1,
           .flags = DT_KF_LO | DT_KF_HI | DT_KF_HI_X, .def = "0.95", .help = "onecycle: highest beta1."),
    DT_KEY("warmup_steps", DT_KT_I64, struct dt_scheduler_spec, warmup_steps, RANGE(0, 1e12), .def = "0",
           .help = "cosine: steps of linear warmup, lr·(s+1)/N for steps s < N; N at or past the job's steps "
                   "warms up throughout."),
    DT_KEY("min_lr", DT_KT_NUM, struct dt_scheduler_spec, min_lr, RANGE_GE0, .def = "0",
           .form = "number in [0, `optimizer.lr`]",
           .help = "cosine: the rate it decays to, min_lr + (lr − min_lr)(1 + cos(π(s − N)/(S − N)))/2 after "
                   "warmup."),
};
/* The one rule the schema can say: onecycle needs max_lr. */
static const struct dt_spec_section scheduler_section = {
    .keys = scheduler_keys,
    .n_keys = DT_NKEYS(scheduler_keys),
    .check = check_scheduler,
    .schema = "{\"if\": {\"properties\": {\"type\": {\"const\": \"onecycle\"}}, \"required\": [\"type\"]},"
              " \"then\": {\"required\": [\"max_lr\"]}}"};

static const struct dt_spec_key ddp_keys[] = {
    DT_KEY("bucket_cap_mb", DT_KT_SIZE_MB, struct dt_ddp_spec, bucket_cap_mb, .lo = 0, .hi = 4096,
           .flags = DT_KF_LO | DT_KF_LO_X | DT_KF_HI, .def = "25",
           .help = "Gradient bucket size (PyTorch DDP's `bucket_cap_mb`)."),
    DT_KEY("first_bucket_mb", DT_KT_SIZE_MB, struct dt_ddp_spec, first_bucket_mb, .lo = 0, .hi = 4096,
           .flags = DT_KF_LO | DT_KF_LO_X | DT_KF_HI, .def = "1", .help = "Size of the first bucket."),
    DT_KEY("overlap", DT_KT_BOOL, struct dt_ddp_spec, overlap, .def = "true",
           .help = "All-reduce buckets while backward runs."),
    DT_KEY("grad_accum", DT_KT_INT, struct dt_ddp_spec, grad_accum, RANGE(1, 65536), .def = "1",
           .help = "Micro-batches per optimizer step."),
    DT_KEY("desync_check_every", DT_KT_INT, struct dt_ddp_spec, desync_check_every, RANGE(0, 1e9),
           .def = "100", .help = "Steps between cross-rank parameter-hash checks; 0 = off."),
    DT_KEY("share_state", DT_KT_BOOL, struct dt_ddp_spec, share_state, .def = "true",
           .help =
               "Ranks on one host (shm): one copy of the parameters and AdamW moments for all of them, each "
               "rank stepping its slice (the same bits as a copy per rank)."),
    DT_KEY("zero", DT_KT_INT, struct dt_ddp_spec, zero, RANGE(0, 1), .def = "0",
           .hint = "0: every rank holds all of AdamW's state; 1: each rank holds its shard (ZeRO stage 1)",
           .help =
               "ZeRO stage: with 1 each rank keeps AdamW's moments for its shard of the parameters only (1/W "
               "of the optimizer's memory), steps its shard and all-gathers the parameters; the same bits as "
               "0, and checkpoints stay whole. Turns `share_state`'s one copy off. On `device: cuda` the GPU "
               "engine shards its AdamW state the same way."),
    DT_KEY("elastic_batch", DT_KT_ENUM, struct dt_ddp_spec, elastic_batch, .names = elastic_batches,
           .def = "auto",
           .help =
               "An elastic job (nodes: MIN:MAX) on a round of fewer nodes than MAX. `keep_per_rank`: each rank "
               "keeps `batch_size` x `grad_accum`, so the global batch follows the world size, as under "
               "torchrun with DDP; it holds at every node count. `keep_global`: the global batch of MAX nodes "
               "is kept by changing `grad_accum`, which must divide at every node count in the range (`dtrain "
               "validate` names one where it does not). `auto`: `keep_per_rank`, or `keep_global` for `dataset: "
               "tokens`, whose order is one of whole global batches (docs/elastic.md)."),
    DT_KEY("elastic_lr", DT_KT_ENUM, struct dt_ddp_spec, elastic_lr, .names = elastic_lrs, .def = "fixed",
           .help =
               "`keep_per_rank` on fewer nodes than MAX: `fixed` keeps the learning rate; `linear` scales it by "
               "the global batch over MAX nodes' (the linear scaling rule: `optimizer.lr` is the rate of the "
               "full job)."),
};
static const struct dt_spec_section ddp_section = {.keys = ddp_keys, .n_keys = DT_NKEYS(ddp_keys)};

static const struct dt_spec_key checkpoint_keys[] = {
    DT_KEY("every_steps", DT_KT_INT, struct dt_checkpoint_spec, every_steps, RANGE(0, 1e9), .def = "500",
           .help = "Steps between checkpoints (safetensors); 0 = only at the end."),
    DT_KEY("dir", DT_KT_STR, struct dt_checkpoint_spec, dir, .unset = "`checkpoints`",
           .example = "checkpoints", .help = "Directory, relative to the run directory unless absolute."),
    DT_KEY("keep", DT_KT_INT, struct dt_checkpoint_spec, keep, RANGE(1, 10000), .def = "3",
           .help = "Newest checkpoints kept."),
    DT_KEY("resume", DT_KT_ENUM, struct dt_checkpoint_spec, resume, .names = resumes, .def = "auto",
           .help = "`auto` continues from the newest checkpoint; `never` starts afresh."),
};
static const struct dt_spec_section checkpoint_section = {.keys = checkpoint_keys,
                                                          .n_keys = DT_NKEYS(checkpoint_keys)};

static const struct dt_spec_key amp_keys[] = {
    DT_KEY("dtype", DT_KT_ENUM, struct dt_amp_spec, dtype, .names = amp_dtypes, .def = "off",
           .help = "Mixed precision: the low-precision type of the GEMMs' inputs and of activations."),
    DT_KEY("loss_scale", DT_KT_CUSTOM, struct dt_amp_spec, loss_scale, .set = set_loss_scale,
           .print = print_loss_scale, RANGE_GT0, .def = "dynamic", .form = "`dynamic` or number > 0",
           .help = "GradScaler-style dynamic scaling, or a fixed scale.",
           .schema =
               "{\"anyOf\": [{\"const\": \"dynamic\"}, {\"type\": \"number\", \"exclusiveMinimum\": 0}]}"),
    DT_KEY("init_scale", DT_KT_NUM, struct dt_amp_spec, init_scale, RANGE_GT0, .def = "65536",
           .help = "Initial dynamic scale."),
    DT_KEY("growth_factor", DT_KT_NUM, struct dt_amp_spec, growth_factor, .lo = 1,
           .flags = DT_KF_LO | DT_KF_LO_X, .def = "2", .help = "Scale growth."),
    DT_KEY("backoff_factor", DT_KT_NUM, struct dt_amp_spec, backoff_factor, .lo = 0, .hi = 1,
           .flags = DT_KF_LO | DT_KF_LO_X | DT_KF_HI | DT_KF_HI_X, .def = "0.5",
           .help = "Scale backoff on overflow."),
    DT_KEY("growth_interval", DT_KT_INT, struct dt_amp_spec, growth_interval, RANGE(1, 1e9), .def = "2000",
           .help = "Overflow-free steps before growth."),
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
    DT_KEY("every_epochs", DT_KT_INT, struct eval_view, every_epochs, RANGE(0, 1e6), .def = "1",
           .help = "Epochs between test-set evaluations; 0 = only at the end."),
    DT_KEY(
        "batches", DT_KT_INT, struct eval_view, batches, RANGE(0, 1e9), .def = "20",
        .help =
            "tokens: global batches of `val` per evaluation (llm.c's `val_max_steps`), read from its start "
            "and split across ranks; 0 = all of `val` once."),
    DT_KEY("every_steps", DT_KT_I64, struct eval_view, every_steps, RANGE(0, 1e12), .def = "0",
           .help = "Also evaluate every N steps (for tokens, where an epoch is long); 0 = off."),
};
static const struct dt_spec_section eval_section = {.keys = eval_keys, .n_keys = DT_NKEYS(eval_keys)};

static const struct dt_spec_key sample_keys[] = {
    DT_KEY("tokens", DT_KT_INT, struct dt_sample_spec, tokens, RANGE(0, 1 << 20), .def = "0",
           .help = "Tokens the language model writes at each evaluation, printed by rank 0; 0 = no sample."),
    DT_KEY("prompt", DT_KT_STR, struct dt_sample_spec, prompt, .unset = "a newline",
           .example = "And God said", .doc = DT_DOC_REF_COMMENT,
           .help =
               "Vocabulary of 256: the bytes the sample starts from (larger vocabularies start from token "
               "vocab_size-1, GPT-2's <|endoftext|>, print ids and refuse a prompt)."),
    DT_KEY("temperature", DT_KT_NUM, struct dt_sample_spec, temperature, RANGE_GE0, .def = "1",
           .help = "Softmax temperature of the sample; 0 takes the most likely token."),
    DT_KEY("top_k", DT_KT_INT, struct dt_sample_spec, top_k, RANGE(0, 1 << 20), .def = "0",
           .help = "Sample from the k most likely tokens; 0 = all."),
};
static const struct dt_spec_section sample_section = {.keys = sample_keys, .n_keys = DT_NKEYS(sample_keys)};

/* No trace unless asked: last_step below first_step. */
static void trace_init(void *obj)
{
    ((struct dt_trace_spec *)obj)->last_step = -1;
}

static const struct dt_spec_key trace_keys[] = {
    DT_KEY("steps", DT_KT_CUSTOM, struct dt_trace_spec, first_step, .set = set_trace_steps,
           .print = print_trace_steps, .unset = "off", .example = "\"10-20\"",
           .form = "`\"10-20\"` or one step", .help = "Steps written to the Chrome trace (inclusive).",
           .schema = "{\"anyOf\": [{\"type\": \"string\", \"pattern\": \"^[0-9]+(-[0-9]+)?$\"},"
                     " {\"type\": \"integer\", \"minimum\": 0}]}"),
};
static const struct dt_spec_section trace_section = {
    .keys = trace_keys, .n_keys = DT_NKEYS(trace_keys), .init = trace_init};

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

static const struct dt_spec_key trainer_keys[] = {
    DT_KEY("model", DT_KT_SECTION, struct dt_trainer_spec, model, .sub = &model_section,
           .help = "The model: an MLP, or GPT-2 as Hugging Face's `GPT2LMHeadModel` (its defaults are GPT-2 "
                   "124M)."),
    DT_KEY("init_from", DT_KT_STR, struct dt_trainer_spec, init_from, .unset = "none",
           .example = "/path/to/gpt2", .doc = DT_DOC_REF_COMMENT, .form = "path",
           .help =
               "Hugging Face GPT-2 weights to start from (`model.type: gpt2`): a directory holding "
               "model.safetensors (and config.json, checked against `trainer.model`) or a .safetensors file; "
               "fp32, fp16 or bf16. A checkpoint to resume from takes precedence."),
    DT_KEY("data", DT_KT_SECTION, struct dt_trainer_spec, data, .sub = &data_section,
           .help = "The data set and its loader."),
    DT_KEY("epochs", DT_KT_INT, struct dt_trainer_spec, epochs, .lo = 1, .hi = 1e6,
           .flags = DT_KF_LO | DT_KF_HI | DT_KF_ZERO_UNSET, .def = "1",
           .help = "Epochs to train; exclusive with `steps`."),
    DT_KEY("steps", DT_KT_I64, struct dt_trainer_spec, steps, .lo = 1, .hi = 1e12,
           .flags = DT_KF_LO | DT_KF_HI | DT_KF_ZERO_UNSET, .example = "1000", .doc = DT_DOC_REF_COMMENT,
           .help = "Optimizer steps to train; setting it turns `epochs` off."),
    DT_KEY("optimizer", DT_KT_SECTION, struct dt_trainer_spec, optimizer, .sub = &optimizer_section,
           .help = "AdamW, as PyTorch defines it."),
    DT_KEY("scheduler", DT_KT_SECTION, struct dt_trainer_spec, scheduler, .sub = &scheduler_section,
           .help = "The learning-rate schedule."),
    DT_KEY("ddp", DT_KT_SECTION, struct dt_trainer_spec, ddp, .sub = &ddp_section,
           .help = "Gradient buckets, their all-reduce and the optimizer state's placement."),
    DT_KEY("checkpoint", DT_KT_SECTION, struct dt_trainer_spec, checkpoint, .sub = &checkpoint_section,
           .help = "Checkpoints (safetensors)."),
    DT_KEY("eval", DT_KT_SECTION, struct dt_trainer_spec, eval_every_epochs, .sub = &eval_section,
           .help = "Evaluation on the test set (images) or `val` (tokens)."),
    DT_KEY("seed", DT_KT_U64, struct dt_trainer_spec, seed, RANGE(0, 9.2e18), .def = "0",
           .help = "Random seed."),
    DT_KEY("device", DT_KT_ENUM, struct dt_trainer_spec, device, .names = devices,
           .hint = "NVIDIA GPUs are device: cuda", .def = "cpu", .help = "Where the trainer computes."),
    DT_KEY("amp", DT_KT_SECTION, struct dt_trainer_spec, amp, .sub = &amp_section,
           .help = "Automatic mixed precision."),
    DT_KEY("trace", DT_KT_SECTION, struct dt_trainer_spec, trace, .sub = &trace_section,
           .help = "Chrome traces (docs/observability.md)."),
    DT_KEY("sample", DT_KT_SECTION, struct dt_trainer_spec, sample, .sub = &sample_section,
           .help = "Text the language model writes at each evaluation (dataset tokens)."),
    DT_KEY("cuda_graph", DT_KT_BOOL, struct dt_trainer_spec, cuda_graph, .def = "true",
           .help = "Capture the whole step once and replay it (cuda only)."),
    DT_KEY("tf32", DT_KT_BOOL, struct dt_trainer_spec, tf32, .def = "false",
           .help = "fp32 GEMMs on the GPU's tensor cores in TF32, as PyTorch's "
                   "torch.backends.cuda.matmul.allow_tf32; bf16 and fp16 GEMMs are unaffected. cuda only: "
                   "refused on device cpu."),
    DT_KEY("log_every_steps", DT_KT_INT, struct dt_trainer_spec, log_every_steps, RANGE(1, 1e9), .def = "10",
           .help = "Steps between metrics rows and console updates."),
    DT_KEY("recompute", DT_KT_ENUM, struct dt_trainer_spec, recompute, .names = recomputes, .def = "none",
           .help = "gpt2: activations backward recomputes instead of keeping (gradient checkpointing): each "
                   "block's GELU output, or all of each block but its input. Same results, bit for bit."),
};
const struct dt_spec_section dt_jobspec_trainer_section = {.keys = trainer_keys,
                                                           .n_keys = DT_NKEYS(trainer_keys),
                                                           .size = sizeof(struct dt_trainer_spec),
                                                           .check = check_trainer};
