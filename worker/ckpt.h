/* ckpt.h - training checkpoints: safetensors files a run can resume from.
 *
 * One file per checkpoint, <dir>/step_<8 digits>.safetensors, holding the
 * model's tensors under PyTorch's names (layers.0.weight, ...), AdamW's moments
 * (optimizer.exp_avg, optimizer.exp_avg_sq, flat in the arena's layout) and, in
 * the metadata, everything else that decides the next step: optimizer and
 * scheduler step counts, epoch and batch position of the sampler, the seed,
 * the AMP type and the loss scaler's state.
 * Files are written to a temporary name, fsync'd and renamed, so a crash
 * leaves either the old set or the new one, never a torn file.
 *
 * Not for choosing when to save: the trainer does (every_steps, at the end).
 */
#ifndef DT_CKPT_H
#define DT_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "worker/adamw.h"
#include "worker/grad_scaler.h"
#include "worker/model.h"

struct dt_ckpt_state {
    int64_t step;        /* optimizer steps done (also the scheduler's last_epoch) */
    int64_t epoch;       /* epoch of the next batch */
    int64_t batch;       /* index within that epoch of the next batch */
    uint64_t seed;
    int world, batch_size;
    enum dt_amp_dtype amp;         /* must match on load: the run's numbers depend on it */
    struct dt_grad_scaler scaler;  /* scale, growth tracker, skipped steps: saved and restored */
};

/* Writes the checkpoint for s->step into dir (created if missing) and
 * deletes all but the newest `keep` (keep <= 0 keeps all). */
int dt_ckpt_save(const char *dir, const struct dt_model *m, const struct dt_adamw *a,
                 const struct dt_ckpt_state *s, int keep);

/* Path of the newest checkpoint in dir; DT_ENOTFOUND when there is none. */
int dt_ckpt_latest(const char *dir, char *path, size_t len);

/* Restores model, optimizer and state; the model's shapes, the seed, world
 * size and batch size must match the file's (the data order depends on them).
 * A file refused for any reason leaves all three as they were. */
int dt_ckpt_load(const char *path, struct dt_model *m, struct dt_adamw *a, struct dt_ckpt_state *s);

#endif
