/* ckpt.c - checkpoint files (see ckpt.h). */
#include "worker/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm/error.h"
#include "worker/safetensors.h"

#define CKPT_FORMAT "dtrain-trainer-1"

static int mkdir_p(const char *dir)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", dir);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(tmp, 0777) && errno != EEXIST)
            return dt_error_set_errno(DT_EIO, errno, "cannot create checkpoint directory %s", tmp);
        *p = '/';
    }
    if (mkdir(tmp, 0777) && errno != EEXIST)
        return dt_error_set_errno(DT_EIO, errno, "cannot create checkpoint directory %s", tmp);
    return 0;
}

/* The model's tensors (views into the arena) and the two moment arrays. */
static int entries(const struct dt_model *m, const struct dt_adamw *a, struct dt_st_entry *e, char names[][64])
{
    int n = 0;
    for (int l = 0; l < m->n_layers; l++) {
        const struct dt_model_layer *L = &m->layer[l];
        dt_model_param_name(m, l, 0, names[n], 64);
        e[n] = (struct dt_st_entry){names[n], "F32", 2, {L->out, L->in}, m->params + L->w};
        n++;
        dt_model_param_name(m, l, 1, names[n], 64);
        e[n] = (struct dt_st_entry){names[n], "F32", 1, {L->out}, m->params + L->b};
        n++;
    }
    e[n++] = (struct dt_st_entry){"optimizer.exp_avg", "F32", 1, {(int64_t)a->n}, a->m};
    e[n++] = (struct dt_st_entry){"optimizer.exp_avg_sq", "F32", 1, {(int64_t)a->n}, a->v};
    return n;
}

static const char *const amp_names[] = {[DT_AMP_OFF] = "off", [DT_AMP_BF16] = "bf16", [DT_AMP_FP16] = "fp16"};

/* The AMP metadata: type, and the scaler's scale (%.9g reads back the same
 * float), growth tracker and skipped steps. */
static void amp_meta(const struct dt_ckpt_state *s, char v[3][32], const char **meta)
{
    snprintf(v[0], 32, "%.9g", (double)s->scaler.scale);
    snprintf(v[1], 32, "%d", (int)s->scaler.growth_tracker);
    snprintf(v[2], 32, "%lld", (long long)s->scaler.skipped);
    const char *m[] = {"amp", amp_names[s->amp], "loss_scale", v[0], "growth_tracker", v[1], "skipped_steps", v[2]};
    memcpy(meta, m, sizeof m);
}

static int fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        return dt_error_set_errno(DT_EIO, errno, "cannot open %s to sync it", dir);
    int rc = fsync(fd) ? dt_error_set_errno(DT_EIO, errno, "fsync %s", dir) : 0;
    close(fd);
    return rc;
}

static int is_ckpt_name(const char *name, long long *step)
{
    char tail[32];
    return sscanf(name, "step_%lld.%31s", step, tail) == 2 && strcmp(tail, "safetensors") == 0 &&
           strlen(name) == strlen("step_00000000.safetensors");
}

/* Newest-first listing of checkpoint steps; returns how many (at most max). */
static int list_steps(const char *dir, long long *steps, int max)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < max) {
        long long s;
        if (is_ckpt_name(de->d_name, &s))
            steps[n++] = s;
    }
    closedir(d);
    for (int i = 1; i < n; i++) /* insertion sort, descending */
        for (int j = i; j > 0 && steps[j] > steps[j - 1]; j--) {
            long long t = steps[j];
            steps[j] = steps[j - 1];
            steps[j - 1] = t;
        }
    return n;
}

static void prune(const char *dir, int keep)
{
    long long steps[1024];
    int n = list_steps(dir, steps, 1024);
    for (int i = keep; keep > 0 && i < n; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/step_%08lld.safetensors", dir, steps[i]);
        unlink(path);
    }
}

static int write_file(const char *tmp, const struct dt_st_entry *e, int n, const char *const *meta, int nm)
{
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return dt_error_set_errno(DT_EIO, errno, "cannot create checkpoint %s", tmp);
    int rc = dt_safetensors_write_fd(fd, tmp, e, n, meta, nm);
    if (rc == 0 && fsync(fd))
        rc = dt_error_set_errno(DT_EIO, errno, "fsync %s", tmp);
    if (close(fd) && rc == 0)
        rc = dt_error_set_errno(DT_EIO, errno, "close %s", tmp);
    return rc;
}

int dt_ckpt_save(const char *dir, const struct dt_model *m, const struct dt_adamw *a,
                 const struct dt_ckpt_state *s, int keep)
{
    int rc = mkdir_p(dir);
    if (rc)
        return rc;
    struct dt_st_entry e[2 * DT_MODEL_MAX_LAYERS + 2];
    char names[2 * DT_MODEL_MAX_LAYERS][64];
    int n = entries(m, a, e, names);
    char v[7][32];
    snprintf(v[0], 32, "%lld", (long long)s->step);
    snprintf(v[1], 32, "%lld", (long long)s->epoch);
    snprintf(v[2], 32, "%lld", (long long)s->batch);
    snprintf(v[3], 32, "%llu", (unsigned long long)s->seed);
    snprintf(v[4], 32, "%d", s->world);
    snprintf(v[5], 32, "%d", s->batch_size);
    snprintf(v[6], 32, "%lld", (long long)a->step);
    char va[3][32];
    const char *meta[24] = {"format", CKPT_FORMAT, "step", v[0], "epoch", v[1], "batch", v[2], "seed", v[3],
                            "world", v[4], "batch_size", v[5], "adamw_step", v[6]};
    amp_meta(s, va, meta + 16);
    char path[4200], tmp[4250];
    snprintf(path, sizeof path, "%s/step_%08lld.safetensors", dir, (long long)s->step);
    snprintf(tmp, sizeof tmp, "%s/.step_%08lld.safetensors.tmp", dir, (long long)s->step);
    rc = write_file(tmp, e, n, meta, (int)(sizeof meta / sizeof meta[0] / 2));
    if (rc == 0 && rename(tmp, path))
        rc = dt_error_set_errno(DT_EIO, errno, "cannot rename %s to %s", tmp, path);
    if (rc == 0)
        rc = fsync_dir(dir);
    if (rc) {
        unlink(tmp);
        return rc;
    }
    prune(dir, keep);
    return 0;
}

int dt_ckpt_latest(const char *dir, char *path, size_t len)
{
    long long all[1024];
    int n = list_steps(dir, all, 1024);
    if (n == 0)
        return dt_error_set(DT_ENOTFOUND, "no checkpoint in %s", dir);
    snprintf(path, len, "%s/step_%08lld.safetensors", dir, all[0]);
    return 0;
}

static int meta_i64(const struct dt_safetensors *f, const char *path, const char *key, long long *v)
{
    const char *s = dt_safetensors_meta(f, key);
    char *end;
    if (!s || (*v = strtoll(s, &end, 10), *end))
        return dt_error_set(DT_EINVAL, "%s: not a dtrain checkpoint (metadata '%s' missing or bad)", path, key);
    return 0;
}

static int restore_tensor(const struct dt_safetensors *f, const char *path, const struct dt_st_entry *e)
{
    const struct dt_st_tensor *t = dt_safetensors_find(f, e->name);
    if (!t || strcmp(t->dtype, "F32") || t->ndim != e->ndim)
        return dt_error_set(DT_EINVAL, "%s: tensor %s missing or not F32 of %d dims", path, e->name, e->ndim);
    for (int d = 0; d < e->ndim; d++)
        if (t->shape[d] != e->shape[d])
            return dt_error_set(DT_EINVAL, "%s: tensor %s dim %d is %lld, this model has %lld", path, e->name, d,
                                (long long)t->shape[d], (long long)e->shape[d]);
    memcpy((void *)e->data, t->data, t->end - t->begin);
    return 0;
}

/* A checkpoint from before AMP has no "amp" key: it was an fp32 run. */
static int amp_restore(const struct dt_safetensors *f, const char *path, struct dt_ckpt_state *s)
{
    const char *amp = dt_safetensors_meta(f, "amp");
    if (strcmp(amp ? amp : "off", amp_names[s->amp]))
        return dt_error_set(DT_EINVAL, "%s: saved with trainer.amp.dtype %s, this run has %s (resume: never, or "
                            "another checkpoint dir)", path, amp ? amp : "off", amp_names[s->amp]);
    if (!amp)
        return 0;
    long long tracker, skipped;
    const char *scale = dt_safetensors_meta(f, "loss_scale");
    char *end = NULL;
    float v = scale ? strtof(scale, &end) : 0;
    if (!scale || *end || meta_i64(f, path, "growth_tracker", &tracker) ||
        meta_i64(f, path, "skipped_steps", &skipped))
        return dt_error_set(DT_EINVAL, "%s: AMP checkpoint without a readable loss scaler state", path);
    s->scaler.scale = v;
    s->scaler.growth_tracker = (int32_t)tracker;
    s->scaler.skipped = skipped;
    return 0;
}

int dt_ckpt_load(const char *path, struct dt_model *m, struct dt_adamw *a, struct dt_ckpt_state *s)
{
    struct dt_safetensors f;
    int rc = dt_safetensors_read(path, &f);
    if (rc)
        return rc;
    const char *fmt = dt_safetensors_meta(&f, "format");
    long long step = 0, epoch = 0, batch = 0, seed = 0, world = 0, bs = 0, astep = 0;
    if (!fmt || strcmp(fmt, CKPT_FORMAT))
        rc = dt_error_set(DT_EINVAL, "%s: not a %s checkpoint", path, CKPT_FORMAT);
    if (!rc && !(rc = meta_i64(&f, path, "step", &step)) && !(rc = meta_i64(&f, path, "epoch", &epoch)) &&
        !(rc = meta_i64(&f, path, "batch", &batch)) && !(rc = meta_i64(&f, path, "seed", &seed)) &&
        !(rc = meta_i64(&f, path, "world", &world)) && !(rc = meta_i64(&f, path, "batch_size", &bs)))
        rc = meta_i64(&f, path, "adamw_step", &astep);
    if (!rc && ((uint64_t)seed != s->seed || world != s->world || bs != s->batch_size))
        rc = dt_error_set(DT_EINVAL,
                          "%s: saved with seed %lld, %lld ranks, batch %lld; this run has seed %llu, %d ranks, batch %d "
                          "(the data order would differ; use another checkpoint dir or resume: never)",
                          path, seed, world, bs, (unsigned long long)s->seed, s->world, s->batch_size);
    struct dt_st_entry e[2 * DT_MODEL_MAX_LAYERS + 2];
    char names[2 * DT_MODEL_MAX_LAYERS][64];
    int n = entries(m, a, e, names);
    for (int i = 0; i < n && !rc; i++)
        rc = restore_tensor(&f, path, &e[i]);
    if (!rc)
        rc = amp_restore(&f, path, s);
    if (!rc) {
        s->step = step;
        s->epoch = epoch;
        s->batch = batch;
        a->step = astep;
    }
    dt_safetensors_release(&f);
    return rc;
}
