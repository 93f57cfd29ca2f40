/* trainer_spec.h - the `trainer:` section of a job spec, as the bundled trainer reads it.
 *
 * The job-spec parser (spec/jobspec.c) fills this struct and validates every
 * value, and frees its strings with the job; the trainer (worker/) only reads
 * it.  Defaults are each key's `def` in spec/jobspec_trainer.c (PyTorch's
 * where PyTorch has the same setting); the comments here do not repeat them.
 *
 * Not for parsing: no YAML here.
 */
#ifndef DT_TRAINER_SPEC_H
#define DT_TRAINER_SPEC_H

#include <stdbool.h>
#include <stdint.h>

enum dt_activation { DT_ACT_RELU, DT_ACT_GELU };
enum dt_sched_type { DT_SCHED_CONSTANT, DT_SCHED_ONECYCLE, DT_SCHED_COSINE };
enum dt_anneal { DT_ANNEAL_COS, DT_ANNEAL_LINEAR };
enum dt_resume { DT_RESUME_AUTO, DT_RESUME_NEVER };
/* ddp.elastic_batch: what a round of another world size keeps (docs/elastic.md). */
enum dt_elastic_batch {
    DT_ELASTIC_BATCH_AUTO,     /* keep_per_rank, keep_global for token data sets */
    DT_ELASTIC_BATCH_PER_RANK, /* batch_size x grad_accum per rank: the global batch follows the world */
    DT_ELASTIC_BATCH_GLOBAL,   /* the global batch at the most nodes, through grad_accum */
};
/* ddp.elastic_lr: keep_per_rank's learning rate on a world of another size. */
enum dt_elastic_lr { DT_ELASTIC_LR_FIXED, DT_ELASTIC_LR_LINEAR };
enum dt_amp_dtype { DT_AMP_OFF, DT_AMP_BF16, DT_AMP_FP16 };
enum dt_device { DT_DEVICE_CPU, DT_DEVICE_CUDA };
/* How token files are laid out: llm.c's header + uint16, or bare uint16 (nanoGPT's prepare.py). */
enum dt_token_format { DT_TOKENS_LLMC, DT_TOKENS_UINT16 };
/* trainer.recompute: what backward recomputes instead of keeping (gradient checkpointing) */
enum dt_recompute { DT_RECOMPUTE_NONE, DT_RECOMPUTE_GELU, DT_RECOMPUTE_BLOCK };

#define DT_MLP_MAX_HIDDEN 16

struct dt_model_spec {
    char type[16];                 /* "mlp" or "gpt2" */
    int hidden[DT_MLP_MAX_HIDDEN]; /* widths of the hidden layers */
    int n_hidden;
    enum dt_activation activation;
    /* gpt2 (the defaults are GPT-2 124M's) */
    int n_layer, n_head, n_embd, vocab_size, block_size;
};

struct dt_data_spec {
    char dataset[32];   /* "fashion-mnist" or "tokens" */
    char *path;         /* fashion-mnist; NULL: /usr/share/datasets/fashion-mnist */
    int batch_size;     /* per rank (tokens: sequences, B) */
    int workers;        /* loader threads */
    int prefetch;       /* batches queued per loader thread */
    bool shuffle;
    bool drop_last;
    /* dataset tokens (worker/data/tokens.h): globs of llm.c shards, relative
     * to the worker's working directory as path is; val NULL: no validation */
    char *train, *val;
    int seq_len;        /* T, required with tokens, <= model block_size */
    enum dt_token_format format;
};

struct dt_optimizer_spec {
    char type[16];      /* "adamw" */
    double lr;
    double beta1, beta2;
    double eps;
    double weight_decay;
    double grad_clip; /* max global L2 norm; 0 = off */
};

struct dt_scheduler_spec {
    enum dt_sched_type type;
    double max_lr;           /* onecycle: required */
    double pct_start;
    enum dt_anneal anneal;
    double div_factor;
    double final_div_factor;
    bool three_phase;
    bool cycle_momentum;
    double base_momentum;
    double max_momentum;
    int64_t warmup_steps; /* cosine: linear warmup steps */
    double min_lr;        /* cosine: the floor it decays to, in [0, optimizer.lr] */
};

struct dt_ddp_spec {
    double bucket_cap_mb;
    double first_bucket_mb;
    bool overlap;
    int grad_accum;         /* micro-batches per optimizer step */
    int desync_check_every; /* steps between parameter-hash comparisons; 0 = off */
    bool share_state;       /* one host: one copy of parameters and moments, AdamW split (host_state.h) */
    int zero;               /* ZeRO stage: 0, or 1 = AdamW's moments sharded over the ranks (worker/zero.h) */
    enum dt_elastic_batch elastic_batch;
    enum dt_elastic_lr elastic_lr;
};


struct dt_checkpoint_spec {
    int every_steps; /* 0 = only at the end */
    char *dir;       /* relative to the run directory unless absolute; NULL: "checkpoints" */
    int keep;        /* newest N kept */
    enum dt_resume resume;
};

struct dt_amp_spec {
    enum dt_amp_dtype dtype;
    bool dynamic;             /* loss_scale: dynamic, or the fixed number below */
    double loss_scale;        /* the fixed scale when !dynamic */
    double init_scale;
    double growth_factor;
    double backoff_factor;
    int growth_interval;
};

/* sample: text the model writes at each evaluation (tokens data only). */
struct dt_sample_spec {
    int tokens;         /* tokens generated; 0 = no sample */
    char *prompt;       /* vocab 256: its bytes start the sample; NULL: "\n" */
    double temperature; /* 0 = the most likely token each time */
    int top_k;          /* 0 = the whole vocabulary */
};

struct dt_trace_spec {
    int first_step, last_step; /* steps traced, inclusive; last < first: off */
};

struct dt_trainer_spec {
    struct dt_model_spec model;
    char *init_from;     /* Hugging Face GPT-2 weights to start from (worker/hf_weights.h); NULL: none */
    struct dt_data_spec data;
    int epochs;          /* exactly one of epochs and steps is > 0 */
    int64_t steps;
    struct dt_optimizer_spec optimizer;
    struct dt_scheduler_spec scheduler;
    struct dt_ddp_spec ddp;
    struct dt_checkpoint_spec checkpoint;
    /* eval: {every_epochs, batches, every_steps}; the three stay together in
     * this order (the section is laid over them, jobspec_trainer.c) */
    int eval_every_epochs;    /* 0 = only at the end */
    int eval_batches;         /* tokens: global batches of val per evaluation, 0 = all of val once */
    int64_t eval_every_steps; /* also every N steps; 0 = off */
    uint64_t seed;
    enum dt_device device;
    struct dt_amp_spec amp;
    struct dt_trace_spec trace;
    bool cuda_graph;     /* capture the whole step once and replay it (cuda) */
    bool tf32;           /* cuda: fp32 GEMMs on the tensor cores (torch's allow_tf32) */
    int log_every_steps; /* metrics.jsonl rows and console updates */
    struct dt_sample_spec sample;
    enum dt_recompute recompute;
};

/* Fills every field with its default: the `def` of its key in the trainer's
 * key table (spec/jobspec_trainer.c), or the "not set" value. */
void dt_trainer_spec_defaults(struct dt_trainer_spec *t);

/* ddp.elastic_batch with auto resolved: token data sets keep their place in
 * the shards' order by whole global batches (worker/data/tokens.h), so they
 * keep the global batch; the others keep the per-rank batch, which holds at
 * every world size. */
enum dt_elastic_batch dt_trainer_elastic_batch(const struct dt_trainer_spec *t);

#endif
