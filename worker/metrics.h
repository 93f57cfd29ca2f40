/* metrics.h - what a run tells about itself: metrics.jsonl and trainer_summary.json.
 *
 * metrics.jsonl has one JSON object per line: a training row every
 * log_every_steps steps {"step", "epoch", "loss", "lr", "beta1", "grad_norm",
 * "samples_per_s", "time_s", "total_steps", then rank 0's step-time split in
 * seconds per step: "data_s", "forward_s", "backward_s", "comm_wait_s",
 * "optimizer_s"; under AMP also "loss_scale" (after this step's update) and
 * "skipped_steps" (optimizer steps skipped for inf/NaN so far); on a GPU
 * per-rank lists "gpu_util_pct", "gpu_mem_mib" (NVML: the whole device) and
 * "gpu_alloc_mib" (what the engine and the model took)} and an
 * evaluation row after each evaluation
 * {"step", "epoch", "test_loss", "test_accuracy"} (token runs: "tokens_per_s"
 * in training rows, and on a GPU whose peak is known "mfu", the fraction of
 * it the model's FLOPs reach; "val_loss" and "val_accuracy" in evaluation
 * rows).  Lines are flushed as they
 * are written, so a live console or `tail -f` sees them.  Only rank 0 writes.
 *
 * Not for the launcher's summary.json: trainer_summary.json carries the
 * trainer's figures (final_loss, test_accuracy, steps, samples_per_s, ...) for
 * the launcher to fold in.
 */
#ifndef DT_METRICS_H
#define DT_METRICS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define DT_METRICS_SPLIT 5
#define DT_METRICS_GPU_RANKS 64
#define DT_METRICS_GPU_VALUES 3 /* per rank: utilisation %, memory in use MiB, engine's memory MiB */
/* "data_s", "forward_s", "backward_s", "comm_wait_s", "optimizer_s" */
extern const char *const dt_metrics_split_names[DT_METRICS_SPLIT];

struct dt_metrics {
    FILE *f;
    char path[4200];                 /* for write errors */
    int64_t total_steps;             /* written in training rows, for the launcher's progress line */
    double split[DT_METRICS_SPLIT];  /* seconds per step, written in the next training row */
    bool amp;                        /* write loss_scale and skipped_steps in training rows */
    double loss_scale;
    int64_t skipped_steps;
    /* GPU runs: per rank utilisation (percent) and memory in use (MiB) as NVML
     * reads them, and the most memory the engine and the model's device half
     * took (MiB), written in the next training row as "gpu_util_pct",
     * "gpu_mem_mib" and "gpu_alloc_mib" lists (rank order); gpu_ranks 0 = none */
    int gpu_ranks;
    double gpu[DT_METRICS_GPU_VALUES * DT_METRICS_GPU_RANKS];
    /* model FLOPs utilisation (0..1) for the next training row; NAN: no "mfu" key */
    double mfu;
    /* token runs: tokens per row; training rows add "tokens_per_s"
     * (samples_per_s * seq_len), evaluation rows are "val_loss" and
     * "val_accuracy" (target tokens predicted by argmax); 0: an image run */
    int seq_len;
};

/* trainer_summary.json lists each rank's work time up to this world size. */
#define DT_METRICS_WORK_RANKS 4096

struct dt_metrics_summary {
    double final_loss, test_loss, test_accuracy, samples_per_s, train_s, data_wait_s, comm_wait_s;
    int64_t steps, total_steps;
    double epochs;
    int world, batch_size;
    int64_t resumed_from; /* step of the checkpoint resumed from, -1 when none */
    double allreduce_s;   /* one step's bucketed all-reduce alone (bench_allreduce), NAN if not measured */
    /* Each rank's work: training time less its waits for data and for the
     * all-reduce, in seconds (n_work ranks, NULL when not gathered).  A rank
     * that works longer than the others makes them wait: a straggler. */
    const double *work_s;
    int n_work;
    /* token runs (seq_len > 0): test_loss and test_accuracy are written as
     * "val_loss" and "val_accuracy" (the validation set's), null under their
     * own names (there is no test set), and "tokens_per_s" is added */
    int seq_len;
};

/* Opens <run_dir>/metrics.jsonl for appending (a resumed run continues it);
 * a symlink at that name is refused, not followed. */
int dt_metrics_open(struct dt_metrics *m, const char *run_dir);
void dt_metrics_close(struct dt_metrics *m);

/* Each writes one row and flushes it; a write error is returned, naming the
 * file and the system's reason (a full disk). */
int dt_metrics_step(struct dt_metrics *m, int64_t step, double epoch, double loss, double lr, double beta1,
                    double grad_norm, double samples_per_s, double time_s);
/* v[3r], v[3r+1], v[3r+2]: rank r's utilisation, memory in use and memory
 * the engine took (NAN: unknown). */
void dt_metrics_set_gpu(struct dt_metrics *m, const double *v, int ranks);
int dt_metrics_eval(struct dt_metrics *m, int64_t step, double epoch, double test_loss, double test_accuracy);

/* Writes <run_dir>/trainer_summary.json (temp file + rename). */
int dt_metrics_write_summary(const char *run_dir, const struct dt_metrics_summary *s);

#endif
