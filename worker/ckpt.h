/* ckpt.h - training checkpoints: safetensors files a run can resume from.
 *
 * One file per checkpoint, <dir>/step_<8 digits>.safetensors, holding the
 * model's named tensors (worker/models/model.h: PyTorch's names and shapes,
 * layers.0.weight, ... for the MLP), AdamW's moments (optimizer.exp_avg,
 * optimizer.exp_avg_sq, flat in the parameter arena's layout) and, in
 * the metadata, everything else that decides the next step: optimizer and
 * scheduler step counts, epoch and batch position of the sampler, the seed,
 * the AMP type and the loss scaler's state, and which model it is ("model":
 * trainer.model as JSON, {"type":"gpt2","n_layer":12,...}), so that
 * `dtrain export hf` and `dtrain sample` can rebuild it from the file alone,
 * and a resume (dt_ckpt_apply) into another model is refused even where the
 * tensors' shapes agree (another n_head); a file without the entry, saved
 * before it existed, is checked by its shapes alone.
 * Files are written to a temporary name, fsync'd and renamed, so a crash
 * leaves either the old set or the new one, never a torn file.
 *
 * Not for choosing when to save: the trainer does (every_steps, at the end).
 */
#ifndef DT_CKPT_H
#define DT_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "worker/optim/adamw.h"
#include "worker/optim/grad_scaler.h"
#include "worker/models/model.h"
#include "worker/safetensors.h"

/* The trainer's checkpoint dir (two 4 KiB paths joined) and a file name. */
#define DT_CKPT_PATH_MAX 8400

struct dt_ckpt_state {
    int64_t step;        /* optimizer steps done (also the scheduler's last_epoch) */
    int64_t epoch;       /* epoch of the next batch */
    int64_t batch;       /* index within that epoch of the next batch */
    uint64_t seed;
    int world, batch_size;
    /* in, for dt_ckpt_apply: the data order depends on world * batch_size
     * only, not on each (token shards, worker/data/tokens.h: one sample is
     * W*B*T tokens and rank r reads rows r*B.. of it) */
    bool global_batch_order;
    enum dt_amp_dtype amp;         /* must match on load: the run's numbers depend on it */
    struct dt_grad_scaler scaler;  /* scale, growth tracker, skipped steps: saved and restored */
    /* dataset tokens (worker/data/tokens.h): where the next batch is read,
     * "data_shard" (index in the sorted shard set) and "data_offset" (rank
     * 0's token offset there) in the metadata; false writes neither, so
     * other runs' files are as they were */
    bool has_data_pos;
    int64_t data_shard, data_offset;
    /* out: the run's accumulation, written as "grad_accum" (0: not written);
     * the file's batch is world * batch_size * grad_accum samples */
    int grad_accum;
    /* in, for dt_ckpt_apply: an elastic round (docs/elastic.md) may resume a
     * file of another world size (images and tokens); the trainer then maps
     * its data position */
    bool elastic;
};

/* Writes the checkpoint for s->step into dir (created if missing) and
 * deletes all but the newest `keep` checkpoints of this run (keep <= 0 keeps
 * all).  Only files that are this run's checkpoints count and are deleted,
 * each known by its header (dtrain's format, the metadata's checksum, the
 * step its name says, s->seed and m's model entry); anything else named
 * step_<N>.safetensors stays, with a warning.  The moments must be whole (a
 * ZeRO-1 shard is gathered first: worker/zero.h); a state with an inf or
 * NaN, or a negative second moment, is not written. */
int dt_ckpt_save(const char *dir, const struct dt_model *m, const struct dt_adamw *a,
                 const struct dt_ckpt_state *s, int keep);

/* A checkpoint file read into memory and verified (format, counters, every
 * tensor's CRC-32C) but not yet applied: the bytes that were checked are the
 * bytes dt_ckpt_apply() copies, and a resume reads the file once. */
struct dt_ckpt_file {
    char path[DT_CKPT_PATH_MAX];
    struct dt_safetensors st;
    int64_t step, epoch, batch, world, batch_size, adamw_step; /* the metadata's counters */
    uint64_t seed;
    const char *amp;  /* the file's AMP type (in st), NULL: saved before AMP, an fp32 run */
    const char *model; /* the "model" entry (JSON, in st); NULL: saved before dtrain recorded it */
    float loss_scale; /* with amp: the loss scaler's state */
    int32_t growth_tracker;
    int64_t skipped_steps;
    bool has_data_pos; /* the token position, when the file has one */
    int64_t data_shard, data_offset;
    int64_t grad_accum; /* the writer's accumulation; 0: the file does not say */
};

/* Reads and verifies one file; release it even on failure. */
int dt_ckpt_read(const char *path, struct dt_ckpt_file *c);

/* The newest checkpoint in dir that reads and verifies; a damaged newer one
 * (or a symbolic link at a checkpoint's name, which is not followed) is
 * skipped with a warning.  DT_ENOTFOUND when dir holds none, DT_EINVAL
 * when every one is damaged.  Release it even on failure. */
int dt_ckpt_read_latest(const char *dir, struct dt_ckpt_file *c);

/* Restores model, optimizer and state from a file read above (an optimizer
 * holding a ZeRO-1 shard of the moments takes its part of the whole ones,
 * whatever shards the writer had); every named
 * tensor of the model must be in the file with its shape, and the seed,
 * world size and batch size must match the file's (the data order depends
 * on them; with s->global_batch_order, the product of world size and batch
 * size: a token run may resume on other ranks that read the same global
 * batches).  A file refused for any reason leaves all three as they were. */
int dt_ckpt_apply(const struct dt_ckpt_file *c, struct dt_model *m, struct dt_adamw *a, struct dt_ckpt_state *s);

void dt_ckpt_release(struct dt_ckpt_file *c);

/* A checkpoint file, or the newest intact one of a directory: a run
 * directory's checkpoints/ when it has one, else the directory itself
 * (`dtrain export hf`, `dtrain sample`).  Release it even on failure. */
int dt_ckpt_read_any(const char *path, struct dt_ckpt_file *c);

/* The model the file holds, from its "model" entry; DT_ENOTFOUND with a
 * sentence for a file saved before the entry existed, DT_EINVAL for an
 * entry that does not describe a model, or (gpt2) that describes one whose
 * tensors the file does not hold: each of the model's named tensors must be
 * in the file, F32, of its shape, and no other besides the optimizer's.  So
 * a caller that builds the model from the entry (`dtrain sample`) allocates
 * no more than the file's own tensors hold: a 33 KB file declaring GPT-2
 * 124M cost 2.4 GB before its tensors were looked at.  An MLP's entry has
 * no input or class count, so its tensors are checked where a model is
 * there to compare (dt_ckpt_apply, dt_ckpt_apply_weights). */
int dt_ckpt_model_spec(const struct dt_ckpt_file *c, struct dt_model_spec *out);

/* The model's tensors only (no optimizer, no counters): every named tensor
 * of m must be in the file with its shape, and the file's model entry, if
 * it has one, must be m's.  A refused file leaves m as it was. */
int dt_ckpt_apply_weights(const struct dt_ckpt_file *c, struct dt_model *m);

/* dt_ckpt_read, dt_ckpt_apply and dt_ckpt_release of one path. */
int dt_ckpt_load(const char *path, struct dt_model *m, struct dt_adamw *a, struct dt_ckpt_state *s);

#endif
