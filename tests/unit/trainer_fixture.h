/* trainer_fixture.h - small trainer jobs for the trainer's tests: a narrow MLP,
 * a few steps, one thread, and a scratch run directory.  Header-only; not a test. */
#ifndef DT_TEST_TRAINER_FIXTURE_H
#define DT_TEST_TRAINER_FIXTURE_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "worker/models/model.h"
#include "worker/safetensors.h"
#include "worker/trainer.h"

static inline void small_spec(struct dt_trainer_spec *s, int64_t steps, int batch)
{
    dt_trainer_spec_defaults(s);
    s->model.hidden[0] = 64;
    s->model.hidden[1] = 32;
    s->model.n_hidden = 2;
    s->data.batch_size = batch;
    s->data.workers = 1;
    s->epochs = 0;
    s->steps = steps;
    s->optimizer.grad_clip = 1.0;
    s->scheduler.type = DT_SCHED_ONECYCLE;
    s->scheduler.max_lr = 3e-3;
    s->checkpoint.every_steps = 0;
    s->checkpoint.resume = DT_RESUME_NEVER;
    s->eval_every_epochs = 0;
    s->log_every_steps = 1000;
    s->ddp.desync_check_every = 1;
    s->ddp.first_bucket_mb = 0.01; /* several buckets even for this small model */
    s->ddp.bucket_cap_mb = 0.05;
}

/* A fresh directory under /tmp (removed by rm_rf at the end of the test). */
static inline void scratch_dir(char *buf, size_t len, const char *tag)
{
    snprintf(buf, len, "/tmp/dtrain-%s-XXXXXX", tag);
    if (!mkdtemp(buf))
        fail_msg("mkdtemp %s failed", buf);
}

static inline void rm_rf(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

/* Reads the model tensors of a checkpoint into one flat array (arena order). */
static inline float *ckpt_params(const char *path, size_t *n)
{
    struct dt_safetensors f;
    if (dt_safetensors_read(path, &f))
        fail_msg("%s", dt_error_last());
    size_t total = 0;
    for (int i = 0; i < f.n; i++)
        if (strncmp(f.tensors[i].name, "layers.", 7) == 0)
            total += (f.tensors[i].end - f.tensors[i].begin) / 4;
    float *out = malloc(total * sizeof *out);
    size_t at = 0;
    for (int l = 0; l < 8; l++)
        for (int bias = 0; bias < 2; bias++) {
            char name[64];
            snprintf(name, sizeof name, "layers.%d.%s", 2 * l, bias ? "bias" : "weight");
            const struct dt_st_tensor *t = dt_safetensors_find(&f, name);
            if (!t)
                continue;
            memcpy(out + at, t->data, t->end - t->begin);
            at += (t->end - t->begin) / 4;
        }
    dt_safetensors_release(&f);
    *n = total;
    return out;
}

/* The model parameters in runs a and b's checkpoints of `step` are the same
 * bits (resuming, or another way to the same step); returns how many. */
static inline size_t assert_same_params(const char *run_a, const char *run_b, int step)
{
    char pa[160], pb[160];
    snprintf(pa, sizeof pa, "%s/checkpoints/step_%08d.safetensors", run_a, step);
    snprintf(pb, sizeof pb, "%s/checkpoints/step_%08d.safetensors", run_b, step);
    size_t na, nb;
    float *xa = ckpt_params(pa, &na), *xb = ckpt_params(pb, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(xa, xb, na * sizeof(float));
    free(xa);
    free(xb);
    return na;
}

#endif
