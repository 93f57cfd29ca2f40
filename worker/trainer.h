/* trainer.h - the bundled trainer: one rank's training loop.
 *
 * Reads the `trainer:` section (spec/trainer_spec.h) and trains the model of
 * trainer.model.type (worker/models/: the MLP today) on Fashion-MNIST with
 * data parallelism over a communicator: each rank draws its
 * share of every epoch (DistributedSampler order), gradients are averaged in
 * buckets while backward runs, AdamW with OneCycle (or a constant lr) steps
 * the same way on every rank.  Rank 0 writes metrics.jsonl, checkpoints and
 * trainer_summary.json into the run directory.
 *
 * Not for process setup: worker/rank.c (where a rank starts) connects the store and builds
 * the communicator; tests pass their own (or none for one process).
 */
#ifndef DT_TRAINER_H
#define DT_TRAINER_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "comm/comm.h"
#include "worker/metrics.h"
#include "spec/trainer_spec.h"

struct dt_trainer;
struct dt_model;
struct dt_trace;

struct dt_trainer_options {
    struct dt_comm *comm;     /* NULL: a single process */
    const char *run_dir;      /* metrics, summary and relative checkpoint dirs; NULL = "." */
    int threads;              /* kernel threads for this rank; 0 = online cores / local_world */
    int local_world;          /* ranks on this host (for the automatic thread count); 0 = 1 */
    int64_t stop_after;       /* stop after this many optimizer steps, as if killed (tests); 0 = never */
    bool quiet;               /* no progress lines on stdout */
    int bench_allreduce;      /* after training, time this many all-reduces of the gradient
                               * buckets with nothing else running (benchmarks); 0 = none */
    /* Non-NULL: once *stop_request is non-zero (a SIGUSR1 handler sets it when a scheduler's
     * time limit is near), every rank stops at the next metrics row (they agree on it in the
     * loss all-reduce), a checkpoint is written, and dt_trainer_stopped() is true. */
    volatile sig_atomic_t *stop_request;
    /* Called after every optimizer step (tests: perturb a rank, record parameters). */
    void (*after_step)(void *ctx, struct dt_model *m, int64_t step);
    /* Called as soon as optimizer step `step` is done, before its evaluation
     * and checkpoint (the heartbeat's step): rank 0 writing a checkpoint has
     * done the step its peers already wait beyond, and must not look behind
     * them to the agent's watchdog. */
    void (*step_done)(void *ctx, int64_t step);
    /* Called once the step's gradients are averaged, before the AMP check and
     * the optimizer (tests: an overflow on one rank only). */
    void (*after_reduce)(void *ctx, struct dt_model *m, int64_t step);
    void *ctx;
    /* An elastic job's round (docs/elastic.md): a checkpoint of another
     * world size is resumed, its global batch kept by changing grad_accum
     * and its place in the data mapped by global sample count. */
    bool elastic;
    /* The world of the elastic job's most nodes (ddp.elastic_batch keeps its
     * global batch, ddp.elastic_lr scales to it); 0: this world. */
    int elastic_max_world;
    /* Non-NULL: every training sample this rank reads is appended to this
     * file as "<step> <epoch> <position in the epoch's global order> <index>"
     * (tests check that no sample is lost or read twice across rounds). */
    const char *sample_log;
};

int dt_trainer_create(const struct dt_trainer_spec *spec, const struct dt_trainer_options *o,
                      struct dt_trainer **out);

/* Trains to the end (or stop_after) and fills *res (may be NULL). */
int dt_trainer_run(struct dt_trainer *t, struct dt_metrics_summary *res);

/* True when the run ended early on stop_request, after its checkpoint. */
bool dt_trainer_stopped(const struct dt_trainer *t);

struct dt_model *dt_trainer_model(struct dt_trainer *t);

/* The trace being recorded (NULL when the spec has no trace window), for the
 * caller's own start-up spans (store connect, communicator init). */
struct dt_trace *dt_trainer_trace(struct dt_trainer *t);
void dt_trainer_destroy(struct dt_trainer *t);

#endif
