/* trainer_internal.h - the trainer's state, shared by trainer.c (set-up,
 * checkpoints) and trainer_loop.c (the step loop, evaluation, logging).
 * Not a public header. */
#ifndef DT_TRAINER_INTERNAL_H
#define DT_TRAINER_INTERNAL_H

#include "worker/optim/adamw.h"
#include "worker/ckpt.h"
#include "worker/optim/grad_norm.h"
#include "worker/host_state.h"
#include "worker/optim/grad_scaler.h"
#include "worker/data/idx.h"
#include "worker/data/loader.h"
#include "worker/data/tokens.h"
#include "worker/metrics.h"
#include "worker/models/model.h"
#include "worker/optim/lr_schedule.h"
#include "worker/reducer.h"
#include "worker/tbevents.h"
#include "worker/trace.h"
#include "worker/trainer.h"
#include "worker/zero.h"

struct dt_trainer;

/* Where a step's averaged gradients and the optimizer's state live
 * (trainer_update.c: device, zero1, host, own), chosen once at set-up. */
struct dt_trainer_home {
    const char *name;
    /* after the step's micro-batches: norm, clipping, AMP, AdamW, schedule;
     * *norm NAN where not computed, *skipped for a step AMP skipped */
    int (*update)(struct dt_trainer *t, bool want_norm, double *norm, bool *skipped);
    /* host homes, for update: norm^2 of the averages, and AdamW on this rank's part */
    int (*norm2)(struct dt_trainer *t, double *norm2);
    int (*adamw)(struct dt_trainer *t, bool skip, float coef);
};

struct dt_trainer {
    struct dt_trainer_spec spec;   /* shallow copy; strings owned by the caller */
    struct dt_trainer_options o;
    struct dt_comm *comm;
    int rank, world;
    const struct dt_kernels *k;
    /* trainer.device other than cpu: the model, optimizer and data live on the
     * accelerator and the loop hands it whole steps (kernels.h); NULL on cpu */
    const struct dt_device_kernels *devk;
    struct dt_dev_model *dev;
    struct dt_dataset train, test;
    struct dt_model *model;
    struct dt_host_state hs;       /* shared gradients; one copy of parameters and moments per host */
    struct dt_adamw opt;           /* with ddp.zero 1: the moments of this rank's shard (zero.h) */
    struct dt_zero zero;           /* ZeRO-1's shards; off (zero.comm NULL) with zero 0 or one rank */
    const struct dt_trainer_home *home; /* where averaged gradients and moments live (set-up's choice) */
    float *avg_part;               /* this rank's part of the averaged gradients, which AMP unscales */
    size_t avg_n;
    struct dt_lr_schedule sched;
    struct dt_grad_scaler scaler;  /* loss scaling under trainer.amp (disabled when off) */
    struct dt_reducer red;
    struct dt_grad_norm gnorm;     /* clipping's norm, in blocks (worker/optim/grad_norm.h) */
    struct dt_loader *loader;
    struct dt_metrics metrics;
    struct dt_tb_writer *tb;       /* rank 0's TensorBoard scalars (NULL on other ranks) */
    struct dt_trace *trace;        /* spans of the trace: window (NULL when tracing is off) */
    char run_dir[4096], ckpt_dir[4096 + 4096 + 2];
    int64_t batches_per_epoch, steps_per_epoch, total_steps;
    int eval_batch;                /* rows per evaluation batch */
    struct dt_batch eval;          /* its buffers */
    /* position */
    int64_t step, epoch, batch;
    int64_t resumed_from;
    FILE *sample_log;              /* o.sample_log opened, or NULL */
    /* figures */
    double last_loss, test_loss, test_acc, train_s, samples;
    int64_t split_ns[DT_METRICS_SPLIT]; /* this rank's step-time split since the last metrics row */
    int64_t split_steps;
    int64_t evaluated_at;          /* step of the last evaluation, -1 none */
    bool stopping;                 /* every rank saw a stop request at the last metrics row */
    /* dataset tokens (trainer_data.c): the shard sets, this rank's readers
     * (tokens NULL: an image run), global val batches per evaluation, the
     * sample's tokens */
    struct dt_token_set train_set, val_set;
    struct dt_tokens_loader *tokens, *val_loader;
    int64_t val_batches;
    int32_t *sample_buf;
};

/* trainer.c: evaluation over the test set, a checkpoint (rank 0) */
int dt_trainer__evaluate(struct dt_trainer *t);
int dt_trainer__save(struct dt_trainer *t);
/* trainer_data.c: the data set's loader behind one face for the loop, the
 * token run's set-up, validation, position in checkpoints and samples */
bool dt_trainer__is_tokens(const struct dt_trainer_spec *s);
int dt_trainer__tokens_build(struct dt_trainer *t);
/* the token loader made again for the current grad_accum (an elastic round) */
int dt_trainer__tokens_regroup(struct dt_trainer *t);
void dt_trainer__data_release(struct dt_trainer *t);
void dt_trainer__data_start(struct dt_trainer *t, int64_t epoch, int64_t first);
const struct dt_batch *dt_trainer__data_next(struct dt_trainer *t);
/* Why dt_trainer__data_next gave no batch where the epoch had one: a token
 * shard's token out of the vocabulary (its error, DT_EINVAL), else a bug. */
int dt_trainer__data_none(const struct dt_trainer *t);
double dt_trainer__data_wait_s(const struct dt_trainer *t);
void dt_trainer__data_position(struct dt_trainer *t, struct dt_ckpt_state *st);
int dt_trainer__data_resume(struct dt_trainer *t, const struct dt_ckpt_state *st, const char *path);
int dt_trainer__tokens_evaluate(struct dt_trainer *t);
int dt_trainer__sample(struct dt_trainer *t);
/* trainer_update.c: t->home and this rank's part of the averages, from
 * what set-up made (device, ZeRO-1, the host's one copy, or none of them) */
void dt_trainer__choose_home(struct dt_trainer *t);
/* trainer_device.c: the accelerator table of trainer.device (NULL when this
 * build has none), the engine made from the CPU model's state, the host
 * scaler refreshed from the device's, and a token model's training FLOPs
 * per token (MFU; NAN for images) */
const struct dt_device_kernels *dt_trainer__device_kernels(enum dt_device device);
int dt_trainer__device_create(struct dt_trainer *t);
int dt_trainer__device_scaler(struct dt_trainer *t);
double dt_trainer__flops_per_token(const struct dt_trainer *t);

#endif
