/* ckpt.c - checkpoint files (see ckpt.h).
 *
 * Atomic writes: the file goes to .step_N.safetensors.tmp, is fsync'd, renamed
 * over its final name, and the directory is fsync'd, so after a crash at any
 * instant the directory holds the old set or the new one; a dot-name is never
 * taken for a checkpoint, and later saves remove such leftovers.  The
 * temporary file is created by dt_fs_write_atomic (base/fs.h): O_EXCL and
 * O_NOFOLLOW, so nothing planted at its name is written through.
 * Damage after the fact (a truncated copy, a flipped bit, a full disk that a
 * file system did not report) is caught on reading: the safetensors reader
 * rejects a file whose sizes disagree with its fstat size before reading its
 * data, every tensor carries its CRC-32C in the metadata ("crc32c.<name>",
 * 8 hex digits), and the metadata itself carries one ("crc32c.__metadata__",
 * over every other pair, sorted by key, each as key NUL value NUL), so a
 * flipped step, epoch or seed is refused rather than resumed.  Files written
 * before that key existed are read as they were (the tensors' checksums
 * only) as long as they hold no key this reader does not know.  The step in
 * the file name must be the metadata's.  dt_ckpt_read_latest() skips a
 * damaged newest file with a warning and keeps the newest intact one in
 * memory, so resuming reads and checks the file once.
 *
 * A state holding a non-finite number (a diverged run) or a negative
 * second moment is never written, and a file holding one is refused like a
 * damaged one.  Checksums are not keys: a file made by hand passes them, so
 * what the reader checks besides them (counters in range, moments AdamW can
 * reach) is what a crafted file cannot get past.  Pruning (checkpoint.keep)
 * deletes only what a header shows is a checkpoint of this run.
 *
 * The tensors written and read are the model's named tensors (worker/models/model.h) and
 * AdamW's moments, whatever the model: nothing here knows what a layer is.
 *
 * Not for choosing when to save (the trainer), the file format
 * (safetensors.c) nor the model entry (ckpt_model.c).
 */
#include "worker/ckpt.h"
#include "worker/ckpt_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"
#include "base/crc32c.h"
#include "base/env.h"
#include "worker/safetensors.h"
#include "base/fs.h"

#define CKPT_FORMAT "dtrain-trainer-1"
#define CRC_PREFIX "crc32c."
#define META_CRC_KEY CRC_PREFIX "__metadata__" /* no tensor has that name: safetensors reserves it */
#define RUN_META 13 /* metadata pairs besides the checksums: format, 7 counters, 4 of AMP, the model */

/* The metadata keys of a file without META_CRC_KEY besides the tensors'
 * checksums: anything else there is damage (a flipped bit in a key's name).
 * "model" came after the metadata's checksum, but a file rewritten without
 * the checksum (an old-style file made from a new one) may hold it. */
static const char *const known_keys[] = {"format",     "step",          "epoch",          "batch",
                                         "seed",       "world",         "batch_size",     "adamw_step",
                                         "amp",        "loss_scale",    "growth_tracker", "skipped_steps",
                                         "model"};

/* The model's named tensors (views into the parameter arena), then AdamW's
 * two moment arrays, whole (the arena's n_params; an optimizer holding a
 * ZeRO-1 shard, worker/zero.h, reads its part of them): m->n_tensors + 2
 * entries. */
static struct dt_st_entry *entries(const struct dt_model *m, const struct dt_adamw *a, int *n)
{
    *n = m->n_tensors + 2;
    struct dt_st_entry *e = calloc((size_t)*n, sizeof *e);
    if (!e) {
        dt_error_set(DT_ENOMEM, "checkpoint: no memory for %d tensors", *n);
        return NULL;
    }
    for (int i = 0; i < m->n_tensors; i++) {
        const struct dt_model_tensor *t = &m->tensors[i];
        e[i] = (struct dt_st_entry){
            .name = t->name, .dtype = "F32", .ndim = t->ndim, .data = m->params + t->offset};
        memcpy(e[i].shape, t->shape, (size_t)t->ndim * sizeof *t->shape);
    }
    e[*n - 2] = (struct dt_st_entry){"optimizer.exp_avg", "F32", 1, {(int64_t)m->n_params}, a->m};
    e[*n - 1] = (struct dt_st_entry){"optimizer.exp_avg_sq", "F32", 1, {(int64_t)m->n_params}, a->v};
    return e;
}

static size_t entry_bytes(const struct dt_st_entry *e)
{
    size_t n = 4; /* every tensor of a checkpoint is F32 */
    for (int d = 0; d < e->ndim; d++)
        n *= (size_t)e->shape[d];
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

/* step_<N>.safetensors as dt_ckpt_save names it (N as %08lld: digits only,
 * 8 or more), followed by `tail`; the step into *step. */
static bool is_ckpt_name_then(const char *name, const char *tail, long long *step)
{
    if (strncmp(name, "step_", 5) != 0)
        return false;
    const char *p = name + 5, *q = p;
    while (*q >= '0' && *q <= '9')
        q++;
    if (q - p < 8 || q - p > 18 || strncmp(q, ".safetensors", 12) != 0 || strcmp(q + 12, tail) != 0)
        return false;
    *step = strtoll(p, NULL, 10);
    char canon[32];
    return snprintf(canon, sizeof canon, "%08lld", *step) == (int)(q - p) &&
           strncmp(canon, p, (size_t)(q - p)) == 0;
}

static bool is_ckpt_name(const char *name, long long *step)
{
    return is_ckpt_name_then(name, "", step);
}

static int newest_first(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Every checkpoint step in dir, newest first, in *steps (malloc'd; NULL when
 * none).  All of them: a fixed 1024 made a resume pick whichever names
 * readdir gave first (step 1100 while step 3000 was there).  A directory
 * that is not there holds none; one that cannot be read is an error, not a
 * fresh start. */
static int list_steps(const char *dir, long long **steps, int *n)
{
    *steps = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT
                   ? 0
                   : dt_error_set_errno(DT_EIO, errno, "cannot list the checkpoint directory %s", dir);
    int cap = 0, rc = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        long long s;
        if (!is_ckpt_name(de->d_name, &s))
            continue;
        if (*n == cap) {
            long long *more =
                cap < INT_MAX / 4 ? realloc(*steps, (size_t)(cap = cap ? 2 * cap : 64) * sizeof *more) : NULL;
            if (!more) {
                rc = dt_error_set(DT_ENOMEM, "no memory to list the checkpoints of %s", dir);
                break;
            }
            *steps = more;
        }
        (*steps)[(*n)++] = s;
    }
    closedir(d);
    if (rc) {
        free(*steps);
        *steps = NULL;
        *n = 0;
        return rc;
    }
    if (*n)
        qsort(*steps, (size_t)*n, sizeof **steps, newest_first);
    return 0;
}

/* Temporary files of saves that never finished (the writer was killed). */
static void remove_leftovers(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        long long step;
        if (de->d_name[0] == '.' && is_ckpt_name_then(de->d_name + 1, ".tmp", &step)) {
            char path[4400];
            snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
            unlink(path); /* a link there is removed itself, not followed */
        }
    }
    closedir(d);
}

static bool of_this_run(const char *path, uint64_t seed, const char *model, char *why, size_t size);

/* All but the newest `keep` checkpoints of this run are removed.  Only
 * files that are this run's checkpoints count and are removed, each known
 * by its header (of_this_run): a file that merely has a checkpoint's name
 * (junk, a half-copied file, one of another run or model, a link) is not
 * dtrain's to delete, and stays, with a warning. */
static void prune(const char *dir, int keep, uint64_t seed, const char *model)
{
    remove_leftovers(dir);
    long long *steps;
    int n;
    if (keep <= 0)
        return;
    if (list_steps(dir, &steps, &n)) {
        dt_log_warn("old checkpoints not removed: %s", dt_error_last());
        return;
    }
    int kept = 0, other = 0;
    char first[1200] = "";
    for (int i = 0; i < n; i++) {
        char path[4200], why[1200];
        snprintf(path, sizeof path, "%s/step_%08lld.safetensors", dir, steps[i]);
        if (!of_this_run(path, seed, model, why, sizeof why)) {
            if (kept >= keep && !other++)
                snprintf(first, sizeof first, "%s", why);
        } else if (kept++ >= keep) {
            unlink(path);
        }
    }
    free(steps);
    if (other == 1)
        dt_log_warn("not removed by checkpoint.keep, which removes only this run's checkpoints: %s", first);
    else if (other > 1)
        dt_log_warn("not removed by checkpoint.keep, which removes only this run's checkpoints: %s; nor %d "
                    "more files named step_<N>.safetensors in %s",
                    first, other - 1, dir);
}

/* ---- the metadata's checksum and non-finite values ---- */

struct pair {
    const char *k, *v;
};

static int by_key(const void *a, const void *b)
{
    return strcmp(((const struct pair *)a)->k, ((const struct pair *)b)->k);
}

/* CRC-32C of every pair but META_CRC_KEY, sorted by key, each as key NUL
 * value NUL: the order the header happens to have does not matter, and
 * no two different sets of pairs give the same bytes. */
static int meta_crc(const char *const *meta, int n, uint32_t *out)
{
    struct pair *p = malloc((size_t)(n ? n : 1) * sizeof *p);
    if (!p)
        return dt_error_set(DT_ENOMEM, "checkpoint: no memory for %d metadata pairs", n);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (strcmp(meta[2 * i], META_CRC_KEY) != 0)
            p[m++] = (struct pair){meta[2 * i], meta[2 * i + 1]};
    qsort(p, (size_t)m, sizeof *p, by_key);
    uint32_t c = 0;
    for (int i = 0; i < m; i++) {
        c = dt_crc32c(c, p[i].k, strlen(p[i].k) + 1);
        c = dt_crc32c(c, p[i].v, strlen(p[i].v) + 1);
    }
    free(p);
    *out = c;
    return 0;
}

/* A non-finite value as a message shows it: "nan" whatever its sign bit. */
static double shown(float v)
{
    return isnan(v) ? NAN : (double)v;
}

/* Index of the first inf or NaN of v[0, n), n when there is none: the
 * exponent bits all set, tested on the bits so the loop vectorizes. */
static size_t first_nonfinite(const float *v, size_t n)
{
    const size_t block = 4096;
    for (size_t lo = 0; lo < n; lo += block) {
        size_t hi = n - lo < block ? n : lo + block;
        uint32_t bad = 0;
        for (size_t i = lo; i < hi; i++) {
            uint32_t b;
            memcpy(&b, &v[i], 4);
            bad |= (uint32_t)((b & 0x7f800000u) == 0x7f800000u);
        }
        if (bad)
            for (size_t i = lo; i < hi; i++)
                if (!isfinite(v[i]))
                    return i;
    }
    return n;
}

/* ---- writing ---- */

/* What dt_fs_write_atomic writes: the safetensors bytes, straight to the descriptor. */
struct ckpt_bytes {
    const char *path;
    const struct dt_st_entry *e;
    int n, nm;
    const char *const *meta;
};

static int write_bytes(void *ctx, FILE *f)
{
    const struct ckpt_bytes *b = ctx;
    return dt_safetensors_write_fd(fileno(f), b->path, b->e, b->n, b->meta, b->nm);
}

/* ---- the token position (dataset tokens) ---- */

#define DATA_META 3 /* data_shard, data_offset, grad_accum */

/* The position's pairs into meta when the state has one, and the
 * accumulation an elastic resume needs (the global batch, docs/elastic.md);
 * returns how many. */
static int data_meta(const struct dt_ckpt_state *s, char v[DATA_META][32], const char **meta)
{
    int n = 0;
    if (s->has_data_pos) {
        snprintf(v[0], 32, "%lld", (long long)s->data_shard);
        snprintf(v[1], 32, "%lld", (long long)s->data_offset);
        const char *m[] = {"data_shard", v[0], "data_offset", v[1]};
        memcpy(meta, m, sizeof m);
        n = 2;
    }
    if (s->grad_accum > 0) {
        snprintf(v[2], 32, "%d", s->grad_accum);
        meta[2 * n] = "grad_accum";
        meta[2 * n + 1] = v[2];
        n++;
    }
    return n;
}

/* The file of the n entries: the run's metadata, a checksum per tensor,
 * then the checksum of all that metadata. */
static int write_file(const char *path, const struct dt_st_entry *e, int n, const struct dt_adamw *a,
                      const struct dt_ckpt_state *s, const char *model)
{
    const char **meta = calloc(2 * (size_t)(RUN_META + n + DATA_META + 1), sizeof *meta);
    char(*crc)[2][DT_ST_MAX_NAME + 16] = calloc((size_t)n, sizeof *crc); /* key, value */
    if (!meta || !crc) {
        free(meta);
        free(crc);
        return dt_error_set(DT_ENOMEM, "checkpoint: no memory for the metadata of %d tensors", n);
    }
    char v[7][32];
    snprintf(v[0], 32, "%lld", (long long)s->step);
    snprintf(v[1], 32, "%lld", (long long)s->epoch);
    snprintf(v[2], 32, "%lld", (long long)s->batch);
    snprintf(v[3], 32, "%llu", (unsigned long long)s->seed);
    snprintf(v[4], 32, "%d", s->world);
    snprintf(v[5], 32, "%d", s->batch_size);
    snprintf(v[6], 32, "%lld", (long long)a->step);
    const char *run[] = {"format", CKPT_FORMAT, "step",  v[0], "epoch",      v[1], "batch",      v[2],
                         "seed",   v[3],        "world", v[4], "batch_size", v[5], "adamw_step", v[6]};
    memcpy(meta, run, sizeof run);
    char va[3][32];
    amp_meta(s, va, meta + 16);
    meta[24] = "model";
    meta[25] = model;
    for (int i = 0; i < n; i++) {
        snprintf(crc[i][0], sizeof crc[i][0], CRC_PREFIX "%s", e[i].name);
        snprintf(crc[i][1], sizeof crc[i][1], "%08x", dt_crc32c(0, e[i].data, entry_bytes(&e[i])));
        meta[2 * (RUN_META + i)] = crc[i][0];
        meta[2 * (RUN_META + i) + 1] = crc[i][1];
    }
    char vd[DATA_META][32];
    int nm = RUN_META + n + data_meta(s, vd, meta + 2 * (RUN_META + n));
    uint32_t all;
    char whole[16];
    int rc = meta_crc(meta, nm, &all);
    snprintf(whole, sizeof whole, "%08x", all);
    meta[2 * nm] = META_CRC_KEY;
    meta[2 * nm + 1] = whole;
    struct ckpt_bytes b = {.path = path, .e = e, .n = n, .nm = nm + 1, .meta = meta};
    if (rc == 0)
        rc = dt_fs_write_atomic(path, true, write_bytes, &b);
    free(meta);
    free(crc);
    return rc;
}

/* Index of the first element of v[0, n) below zero, n when there is none:
 * the sign bit set on a non-zero magnitude (-0 is not below zero), tested
 * on the bits so the loop vectorizes, as first_nonfinite's. */
static size_t first_negative(const float *v, size_t n)
{
    const size_t block = 4096;
    for (size_t lo = 0; lo < n; lo += block) {
        size_t hi = n - lo < block ? n : lo + block;
        uint32_t bad = 0;
        for (size_t i = lo; i < hi; i++) {
            uint32_t b;
            memcpy(&b, &v[i], 4);
            bad |= (uint32_t)(b > 0x80000000u);
        }
        if (bad)
            for (size_t i = lo; i < hi; i++)
                if (v[i] < 0)
                    return i;
    }
    return n;
}

#define EXP_AVG_SQ "optimizer.exp_avg_sq"

/* A diverged state (an inf or NaN anywhere in the parameters or moments)
 * is not saved: it would replace the good checkpoints before it.  Nor is a
 * negative second moment, which AdamW (a running mean of squares) never
 * makes: such a state could only be refused when it is read back. */
static int refuse_nonfinite(const char *path, const struct dt_st_entry *e, int n,
                            const struct dt_ckpt_state *s)
{
    for (int i = 0; i < n; i++) {
        size_t count = entry_bytes(&e[i]) / 4, at = first_nonfinite(e[i].data, count);
        if (at < count)
            return dt_error_set(
                DT_EINVAL,
                "training diverged by step %lld: tensor %s holds %g at element %zu; %s is not "
                "written, the checkpoints before it stay",
                (long long)s->step, e[i].name, shown(((const float *)e[i].data)[at]), at, path);
        if (strcmp(e[i].name, EXP_AVG_SQ) == 0 && (at = first_negative(e[i].data, count)) < count)
            return dt_error_set(DT_EINTERNAL,
                                "checkpoint at step %lld: %s holds %g at element %zu, and AdamW's second "
                                "moment is never negative (a bug, or memory damaged); %s is not written, "
                                "the checkpoints before it stay",
                                (long long)s->step, EXP_AVG_SQ, (double)((const float *)e[i].data)[at], at,
                                path);
    }
    return 0;
}

int dt_ckpt_save(const char *dir, const struct dt_model *m, const struct dt_adamw *a,
                 const struct dt_ckpt_state *s, int keep)
{
    if (a->base != 0 || a->n != m->n_params)
        return dt_error_set(DT_EINVAL,
                            "checkpoint at step %lld: the optimizer holds moments for arena elements %zu..%zu of %zu "
                            "(a ZeRO-1 shard); gather them first",
                            (long long)s->step, a->base, a->base + a->n, m->n_params);
    int rc = dt_fs_mkdir_p(dir, 0777, "checkpoint directory");
    if (rc)
        return rc;
    int n;
    struct dt_st_entry *e = entries(m, a, &n);
    if (!e)
        return DT_ENOMEM;
    char path[4200], model[DT_CKPT__MODEL_JSON_MAX];
    snprintf(path, sizeof path, "%s/step_%08lld.safetensors", dir, (long long)s->step);
    rc = dt_ckpt__model_json(&m->spec, model, sizeof model);
    if (rc == 0)
        rc = refuse_nonfinite(path, e, n, s);
    /* Tests only: a slow file system (a large model on network storage),
     * so the peers' wait for this write can be tested (test_netns_links.sh). */
    int delay_ms = 0;
    if (rc == 0 && (rc = dt_env_int("DTRAIN_TEST_CKPT_DELAY_MS", 0, 0, 600000, &delay_ms)) == 0 &&
        delay_ms > 0)
        usleep((useconds_t)delay_ms * 1000);
    if (rc == 0)
        rc = write_file(path, e, n, a, s, model);
    free(e);
    if (rc)
        return rc;
    prune(dir, keep, s->seed, model);
    return 0;
}

/* ---- reading and checking ---- */

/* An integer of the metadata in [lo, hi]: a negative batch would index the
 * loader's slots backwards, and files from before the metadata's checksum
 * have nothing else holding their counters to sense. */
static int meta_i64(const struct dt_safetensors *f, const char *path, const char *key, long long lo,
                    long long hi, long long *v)
{
    const char *s = dt_safetensors_meta(f, key);
    char *end = NULL;
    errno = 0;
    if (!s || !*s || (*v = strtoll(s, &end, 10), *end) || errno)
        return dt_error_set(DT_EINVAL, "%s: not a dtrain checkpoint (metadata '%s' missing or bad)", path,
                            key);
    if (*v < lo || *v > hi)
        return dt_error_set(DT_EINVAL, "%s: metadata '%s' is %lld, outside %lld..%lld", path, key, *v, lo,
                            hi);
    return 0;
}

/* The seed is a uint64, written with %llu, so it is read back unsigned: the
 * job spec caps it at 9.2e18, but the library takes any uint64.  Digits only,
 * since strtoull would take "-1" (or " 1") and wrap it. */
static int meta_u64(const struct dt_safetensors *f, const char *path, const char *key, uint64_t *v)
{
    const char *s = dt_safetensors_meta(f, key);
    char *end = NULL;
    unsigned long long x = 0;
    errno = 0;
    if (!s || *s < '0' || *s > '9' || (x = strtoull(s, &end, 10), *end) || errno)
        return dt_error_set(DT_EINVAL, "%s: not a dtrain checkpoint (metadata '%s' missing or bad)", path,
                            key);
    *v = x;
    return 0;
}

/* The counters, each in its range: none negative, and none that counts
 * steps (AdamW's, the scaler's skipped ones, epochs: each at least one
 * optimizer step) past the step itself, so no counter can overflow later
 * (adamw_step = INT64_MAX did in the bias correction). */
static int read_counters(struct dt_ckpt_file *c)
{
    const struct {
        const char *key;
        int64_t *v;
        bool below_step;
    } counters[] = {{"step", &c->step, false},
                    {"epoch", &c->epoch, true},
                    {"batch", &c->batch, false},
                    {"world", &c->world, false},
                    {"batch_size", &c->batch_size, false},
                    {"adamw_step", &c->adamw_step, true}};
    for (size_t k = 0; k < sizeof counters / sizeof counters[0]; k++) {
        long long v;
        if (meta_i64(&c->st, c->path, counters[k].key, 0, counters[k].below_step ? c->step : LLONG_MAX, &v))
            return DT_EINVAL;
        *counters[k].v = v;
    }
    return meta_u64(&c->st, c->path, "seed", &c->seed) ? DT_EINVAL : 0;
}

/* A file from before AMP has no "amp" key: it was an fp32 run.  The
 * scaler's state is the file's word, so it is held to what the scaler's
 * state machine can reach: a scale in [0, FLT_MAX] (backing off has no lower
 * clamp, growing stops short of inf), a tracker and a count not negative,
 * the count no more than the steps. */
static int read_scaler(struct dt_ckpt_file *c)
{
    const char *path = c->path;
    c->amp = dt_safetensors_meta(&c->st, "amp");
    if (!c->amp)
        return 0;
    long long tracker, skipped;
    const char *scale = dt_safetensors_meta(&c->st, "loss_scale");
    char *end = NULL;
    float v = scale ? strtof(scale, &end) : 0;
    if (!scale || !*scale || *end)
        return dt_error_set(DT_EINVAL, "%s: AMP checkpoint without a readable loss scaler state", path);
    if (!isfinite(v) || v < 0)
        return dt_error_set(DT_EINVAL, "%s: loss_scale %s is not a finite number >= 0", path, scale);
    if (meta_i64(&c->st, path, "growth_tracker", 0, INT32_MAX, &tracker) ||
        meta_i64(&c->st, path, "skipped_steps", 0, c->step, &skipped))
        return DT_EINVAL;
    if (skipped > c->step - c->adamw_step) /* each step is AdamW's or skipped, never both */
        return dt_error_set(DT_EINVAL,
                            "%s: adamw_step %lld and skipped_steps %lld add up to more than the step, %lld: "
                            "each step is AdamW's or a skipped one",
                            path, (long long)c->adamw_step, skipped, (long long)c->step);
    c->loss_scale = v;
    c->growth_tracker = (int32_t)tracker;
    c->skipped_steps = skipped;
    return 0;
}

static bool is_known_key(const struct dt_safetensors *f, const char *key)
{
    for (size_t i = 0; i < sizeof known_keys / sizeof known_keys[0]; i++)
        if (strcmp(key, known_keys[i]) == 0)
            return true;
    return strncmp(key, CRC_PREFIX, strlen(CRC_PREFIX)) == 0 &&
           dt_safetensors_find(f, key + strlen(CRC_PREFIX));
}

/* The metadata's own checksum; a file without one (written before it
 * existed) passes if it holds only the keys such files have, so a flipped
 * bit in the checksum's own name is not taken for an old file. */
static int verify_meta(const struct dt_ckpt_file *c)
{
    const struct dt_safetensors *f = &c->st;
    const char *want = dt_safetensors_meta(f, META_CRC_KEY);
    if (!want) {
        for (int i = 0; i < f->n_meta; i++)
            if (!is_known_key(f, f->meta[2 * i]))
                return dt_error_set(DT_EINVAL,
                                    "%s: metadata key '%.64s' is unknown, and the file has no metadata "
                                    "checksum ('%s') to vouch for it: damaged",
                                    c->path, f->meta[2 * i], META_CRC_KEY);
        return 0;
    }
    uint32_t got;
    int rc = meta_crc((const char *const *)f->meta, f->n_meta, &got);
    if (rc)
        return rc;
    char *end;
    unsigned long w = strtoul(want, &end, 16);
    if (*end || strlen(want) != 8 || got != (uint32_t)w)
        return dt_error_set(DT_EINVAL, "%s: the metadata is damaged: CRC-32C %08x, the file says %.16s",
                            c->path, got, want);
    return 0;
}

/* Each tensor's bytes against the CRC-32C its metadata key holds, and no
 * inf or NaN in them: such a state is a diverged run's, never resumed. */
static int verify_tensors(const struct dt_safetensors *f, const char *path)
{
    for (int i = 0; i < f->n; i++) {
        const struct dt_st_tensor *t = &f->tensors[i];
        char key[DT_ST_MAX_NAME + 16];
        snprintf(key, sizeof key, CRC_PREFIX "%s", t->name);
        const char *want = dt_safetensors_meta(f, key);
        char *end;
        unsigned long w = want ? strtoul(want, &end, 16) : 0;
        if (!want || *end || strlen(want) != 8)
            return dt_error_set(DT_EINVAL, "%s: tensor %s has no checksum (metadata '%s' missing or bad)", path,
                                t->name, key);
        uint32_t got = dt_crc32c(0, t->data, t->end - t->begin);
        if (got != (uint32_t)w)
            return dt_error_set(DT_EINVAL, "%s: tensor %s is damaged: CRC-32C %08x, the file says %08lx", path,
                                t->name, got, w);
        size_t count = (t->end - t->begin) / 4;
        size_t at = strcmp(t->dtype, "F32") == 0 ? first_nonfinite(t->data, count) : count;
        if (at < count)
            return dt_error_set(DT_EINVAL,
                                "%s: tensor %s holds %g at element %zu: the state of a diverged run", path,
                                t->name, shown(((const float *)t->data)[at]), at);
        if (strcmp(t->name, EXP_AVG_SQ) == 0 && strcmp(t->dtype, "F32") == 0 &&
            (at = first_negative(t->data, count)) < count)
            return dt_error_set(DT_EINVAL,
                                "%s: tensor %s holds %g at element %zu; AdamW's second moment is a running "
                                "mean of squares and never negative, so this state was not written by a "
                                "training run (damaged, or made by hand)",
                                path, t->name, (double)((const float *)t->data)[at], at);
    }
    return 0;
}

/* What a file's header must pass: the format, the counters and the
 * scaler's state in range (into c), the metadata's checksum, the step its
 * name says.  The tensors' bytes are not needed (pruning reads no more). */
static int verify_header(struct dt_ckpt_file *c)
{
    const char *fmt = dt_safetensors_meta(&c->st, "format");
    if (!fmt || strcmp(fmt, CKPT_FORMAT))
        return dt_error_set(DT_EINVAL, "%s: not a %s checkpoint", c->path, CKPT_FORMAT);
    int rc = read_counters(c);
    if (!rc)
        rc = read_scaler(c);
    c->model = dt_safetensors_meta(&c->st, "model");
    if (!rc)
        rc = verify_meta(c);
    const char *slash = strrchr(c->path, '/');
    long long named;
    if (!rc && is_ckpt_name(slash ? slash + 1 : c->path, &named) && named != c->step)
        rc = dt_error_set(DT_EINVAL,
                          "%s: the name says step %lld, the metadata step %lld (renamed or damaged)", c->path,
                          named, (long long)c->step);
    return rc;
}

/* What a file must pass before dt_ckpt_apply() may use it: its header,
 * then each tensor's checksum and values. */
static int verify(struct dt_ckpt_file *c)
{
    int rc = verify_header(c);
    return rc ? rc : verify_tensors(&c->st, c->path);
}

/* The token position (dataset tokens): both keys or neither (a run on
 * another data set), in range; the metadata's checksum covers them. */
static int read_data_pos(struct dt_ckpt_file *c)
{
    bool shard = dt_safetensors_meta(&c->st, "data_shard"), offset = dt_safetensors_meta(&c->st, "data_offset");
    if (!shard && !offset)
        return 0;
    long long v[2];
    if (meta_i64(&c->st, c->path, "data_shard", 0, INT32_MAX, &v[0]) ||
        meta_i64(&c->st, c->path, "data_offset", 0, LLONG_MAX, &v[1]))
        return DT_EINVAL;
    c->has_data_pos = true;
    c->data_shard = v[0];
    c->data_offset = v[1];
    return 0;
}

/* grad_accum: written since elastic jobs; 0 when the file has none. */
static int read_grad_accum(struct dt_ckpt_file *c)
{
    long long v;
    if (!dt_safetensors_meta(&c->st, "grad_accum"))
        return 0;
    if (meta_i64(&c->st, c->path, "grad_accum", 1, INT32_MAX, &v))
        return DT_EINVAL;
    c->grad_accum = v;
    return 0;
}

/* dt_ckpt_read with the safetensors reader's flags: a file found by
 * listing a directory is not followed through a link (DT_ST_NOFOLLOW). */
static int read_with(const char *path, unsigned flags, struct dt_ckpt_file *c)
{
    memset(c, 0, sizeof *c);
    if ((size_t)snprintf(c->path, sizeof c->path, "%s", path) >= sizeof c->path)
        return dt_error_set(DT_EINVAL, "checkpoint path of %zu bytes is too long: %.80s...", strlen(path), path);
    int rc = dt_safetensors_read_with(path, flags, &c->st);
    if (rc == 0 && ((rc = verify(c)) || (rc = read_data_pos(c)) || (rc = read_grad_accum(c))))
        dt_safetensors_release(&c->st);
    return rc;
}

int dt_ckpt_read(const char *path, struct dt_ckpt_file *c)
{
    return read_with(path, 0, c);
}

/* Whether path is a checkpoint of this run, by its header alone (read
 * without its tensors, and not through a link): dtrain's format, the
 * counters, the metadata's checksum and the step its name says
 * (verify_header), then this run's seed and model entry (a file from
 * before the entry is taken by its seed).  Else *why says what it is. */
static bool of_this_run(const char *path, uint64_t seed, const char *model, char *why, size_t size)
{
    struct dt_ckpt_file c;
    memset(&c, 0, sizeof c);
    snprintf(c.path, sizeof c.path, "%s", path);
    int rc = dt_safetensors_read_with(path, DT_ST_NOFOLLOW | DT_ST_HEADER_ONLY, &c.st);
    if (rc == 0)
        rc = verify_header(&c);
    if (rc == 0 && c.seed != seed)
        rc = dt_error_set(DT_EINVAL, "%s: saved with seed %llu, this run has seed %llu", path,
                          (unsigned long long)c.seed, (unsigned long long)seed);
    if (rc == 0 && c.model && strcmp(c.model, model))
        rc = dt_error_set(DT_EINVAL, "%s: saved from the model %.200s, this run's is %s", path, c.model, model);
    if (rc)
        snprintf(why, size, "%s", dt_error_last());
    dt_safetensors_release(&c.st);
    return rc == 0;
}

void dt_ckpt_release(struct dt_ckpt_file *c)
{
    dt_safetensors_release(&c->st);
}

int dt_ckpt_read_latest(const char *dir, struct dt_ckpt_file *c)
{
    memset(c, 0, sizeof *c);
    long long *all;
    int n;
    int rc = list_steps(dir, &all, &n);
    if (rc)
        return rc;
    if (n == 0)
        return dt_error_set(DT_ENOTFOUND, "no checkpoint in %s", dir);
    char first_err[1024] = "", path[sizeof c->path];
    for (int i = 0; i < n; i++) {
        if ((size_t)snprintf(path, sizeof path, "%s/step_%08lld.safetensors", dir, all[i]) >= sizeof path) {
            free(all);
            return dt_error_set(DT_EINVAL, "checkpoint directory name of %zu bytes is too long: %.80s...",
                                strlen(dir), dir);
        }
        if (read_with(path, DT_ST_NOFOLLOW, c) == 0) {
            free(all);
            return 0;
        }
        if (!first_err[0])
            snprintf(first_err, sizeof first_err, "%s", dt_error_last());
        dt_log_warn("checkpoint rejected: %s; %s", dt_error_last(),
                    i + 1 < n ? "trying the one before it" : "it was the oldest");
    }
    free(all);
    return dt_error_set(DT_EINVAL,
                        "no usable checkpoint in %s: all %d are damaged (the newest: %s); move them away to start "
                        "over, or set checkpoint.resume: never",
                        dir, n, first_err);
}

/* ---- applying ---- */

/* A model tensor in the file: present, F32, of the model's shape.  Checked
 * for all before any is copied, so a refused file leaves the model as it was. */
static const struct dt_st_tensor *file_tensor(const struct dt_safetensors *f, const char *path,
                                              const struct dt_st_entry *e)
{
    const struct dt_st_tensor *t = dt_safetensors_find(f, e->name);
    if (!t || strcmp(t->dtype, "F32") || t->ndim != e->ndim) {
        dt_error_set(DT_EINVAL, "%s: tensor %s missing or not F32 of %d dims", path, e->name, e->ndim);
        return NULL;
    }
    for (int d = 0; d < e->ndim; d++)
        if (t->shape[d] != e->shape[d]) {
            dt_error_set(DT_EINVAL, "%s: tensor %s dim %d is %lld, this model has %lld", path, e->name, d,
                         (long long)t->shape[d], (long long)e->shape[d]);
            return NULL;
        }
    return t;
}

/* The file's AMP type must be the run's (no "amp" key: an fp32 run); the
 * scaler's state, checked on reading, replaces the run's. */
static int amp_restore(const struct dt_ckpt_file *c, enum dt_amp_dtype want, struct dt_grad_scaler *sc)
{
    if (strcmp(c->amp ? c->amp : "off", amp_names[want]))
        return dt_error_set(DT_EINVAL,
                            "%s: saved with trainer.amp.dtype %s, this run has %s (resume: never, or "
                            "another checkpoint dir)",
                            c->path, c->amp ? c->amp : "off", amp_names[want]);
    if (c->amp) {
        sc->scale = c->loss_scale;
        sc->growth_tracker = c->growth_tracker;
        sc->skipped = c->skipped_steps;
    }
    return 0;
}

int dt_ckpt_apply(const struct dt_ckpt_file *c, struct dt_model *m, struct dt_adamw *a, struct dt_ckpt_state *s)
{
    const char *path = c->path;
    int rc = dt_ckpt__same_model(c, m);
    if (rc)
        return rc;
    /* an elastic round maps the position itself (worker/trainer.c), for images and tokens alike */
    bool same_order = s->elastic                ? c->batch_size == s->batch_size
                      : s->global_batch_order ? c->world * c->batch_size == (int64_t)s->world * s->batch_size
                                              : c->world == s->world && c->batch_size == s->batch_size;
    if (c->seed != s->seed || !same_order)
        rc = dt_error_set(DT_EINVAL,
                          "%s: saved with seed %llu, %lld ranks, batch %lld; this run has seed %llu, %d ranks, batch %d "
                          "(the data order would differ%s; use another checkpoint dir or resume: never)",
                          path, (unsigned long long)c->seed, (long long)c->world, (long long)c->batch_size,
                          (unsigned long long)s->seed, s->world, s->batch_size,
                          s->global_batch_order ? ": a token run needs the seed and ranks x batch_size" : "");
    int n = 0;
    struct dt_st_entry *e = rc ? NULL : entries(m, a, &n);
    const struct dt_st_tensor **t = e ? calloc((size_t)n, sizeof *t) : NULL;
    if (!rc && !t)
        rc = e ? dt_error_set(DT_ENOMEM, "checkpoint: no memory for %d tensors", n) : DT_ENOMEM;
    for (int i = 0; i < n && !rc; i++)
        rc = (t[i] = file_tensor(&c->st, path, &e[i])) ? 0 : DT_EINVAL;
    struct dt_grad_scaler scaler = s->scaler;
    if (!rc)
        rc = amp_restore(c, s->amp, &scaler);
    for (int i = 0; i < n && !rc; i++) { /* a shard of the moments: its part of the whole */
        bool moment = i >= m->n_tensors;
        size_t skip = moment ? a->base * sizeof(float) : 0;
        size_t bytes = moment ? a->n * sizeof(float) : t[i]->end - t[i]->begin;
        memcpy((void *)e[i].data, (const char *)t[i]->data + skip, bytes);
    }
    free(e);
    free(t);
    if (!rc) {
        s->step = c->step;
        s->epoch = c->epoch;
        s->batch = c->batch;
        s->scaler = scaler;
        a->step = c->adamw_step;
        s->has_data_pos = c->has_data_pos;
        s->data_shard = c->data_shard;
        s->data_offset = c->data_offset;
    }
    return rc;
}

int dt_ckpt_apply_weights(const struct dt_ckpt_file *c, struct dt_model *m)
{
    int rc = dt_ckpt__same_model(c, m);
    const struct dt_st_tensor **t = rc ? NULL : calloc((size_t)m->n_tensors, sizeof *t);
    if (!rc && !t)
        rc = dt_error_set(DT_ENOMEM, "checkpoint: no memory for %d tensors", m->n_tensors);
    for (int i = 0; i < m->n_tensors && !rc; i++) {
        const struct dt_model_tensor *mt = &m->tensors[i];
        struct dt_st_entry e = {.name = mt->name, .dtype = "F32", .ndim = mt->ndim};
        memcpy(e.shape, mt->shape, (size_t)mt->ndim * sizeof *mt->shape);
        rc = (t[i] = file_tensor(&c->st, c->path, &e)) ? 0 : DT_EINVAL;
    }
    for (int i = 0; i < m->n_tensors && !rc; i++)
        memcpy(m->params + m->tensors[i].offset, t[i]->data, t[i]->end - t[i]->begin);
    free(t);
    return rc;
}

int dt_ckpt_read_any(const char *path, struct dt_ckpt_file *c)
{
    memset(c, 0, sizeof *c);
    struct stat st;
    if (stat(path, &st) != 0)
        return dt_error_set_errno(errno == ENOENT ? DT_ENOTFOUND : DT_EIO, errno, "cannot open %s", path);
    if (!S_ISDIR(st.st_mode))
        return dt_ckpt_read(path, c);
    char dir[DT_CKPT_PATH_MAX];
    if ((size_t)snprintf(dir, sizeof dir, "%s/checkpoints", path) >= sizeof dir)
        return dt_error_set(DT_EINVAL, "directory name of %zu bytes is too long: %.80s...", strlen(path), path);
    bool run_dir = stat(dir, &st) == 0 && S_ISDIR(st.st_mode);
    int rc = dt_ckpt_read_latest(run_dir ? dir : path, c);
    if (rc == DT_ENOTFOUND && !run_dir)
        return dt_error_set(DT_ENOTFOUND,
                            "no checkpoint in %s, and no checkpoints/ in it (a run whose trainer.checkpoint.dir "
                            "is elsewhere keeps them there: give that directory)",
                            path);
    return rc;
}

int dt_ckpt_load(const char *path, struct dt_model *m, struct dt_adamw *a, struct dt_ckpt_state *s)
{
    struct dt_ckpt_file c;
    int rc = dt_ckpt_read(path, &c);
    if (rc == 0)
        rc = dt_ckpt_apply(&c, m, a, s);
    dt_ckpt_release(&c);
    return rc;
}
