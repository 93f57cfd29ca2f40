/* test_ckpt.c - checkpoint files under damage: a save/load round trip is exact;
 * a truncated, bit-flipped or foreign newest file is rejected with a sentence
 * naming it and the previous one is used; all damaged is an error, not a
 * fresh start; metadata out of range is refused and leaves the model alone; a writer SIGKILLed at random
 * instants mid-save never leaves a directory whose newest usable checkpoint fails to load, and its temporary
 * leftovers are ignored and later cleaned up.  Issue 26: a flipped bit in the
 * metadata, a name whose step is not the metadata's, junk or a FIFO named as
 * the newest checkpoint, more than 1024 checkpoints, counters past the step,
 * a diverged (NaN) state, a symlink at the temporary name; files from before
 * the metadata's checksum still load.  Issue 45: a negative second moment;
 * keep removes only this run's checkpoints. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/crc32c.h"
#include "base/error.h"
#include "base/log.h"
#include "worker/optim/adamw.h"
#include "worker/ckpt.h"
#include "worker/safetensors.h"
#include "mlp_fixture.h"

struct fx {
    char dir[64];
    struct dt_model *m;
    struct dt_adamw a;
};

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof *f);
    strcpy(f->dir, "/tmp/dtrain-ckpt-test.XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    const int hidden[2] = {256, 128};
    if (mlp_fixture(784, hidden, 2, 10, DT_ACT_RELU, 4, 1, &f->m) ||
        dt_adamw_init(&f->a, &dt_kernels_cpu, f->m->n_params, 0.999, 1e-8, 0.01))
        return -1;
    dt_log_set_level(DT_LOG_ERROR); /* the rejections are expected here */
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", f->dir);
    int rc = system(cmd);
    dt_model_destroy(f->m);
    dt_adamw_release(&f->a);
    free(f);
    return rc == 0 ? 0 : -1;
}

static struct dt_ckpt_state state_at(int64_t step)
{
    return (struct dt_ckpt_state){
        .step = step, .epoch = step / 10, .batch = step % 10, .seed = 5, .world = 4, .batch_size = 32};
}

/* Parameters and moments that differ per step, so a load shows which file it read. */
static void fill(struct fx *f, int64_t step)
{
    for (size_t i = 0; i < f->m->n_params; i++)
        f->m->params[i] = (float)step + (float)i * 1e-6f;
    for (size_t i = 0; i < f->a.n; i++) {
        f->a.m[i] = (float)step * 0.5f;
        f->a.v[i] = (float)step * 0.25f;
    }
    f->a.step = step;
}

static void save(struct fx *f, int64_t step)
{
    fill(f, step);
    struct dt_ckpt_state s = state_at(step);
    assert_int_equal(dt_ckpt_save(f->dir, f->m, &f->a, &s, 0), 0);
}

/* Loads the newest usable file into a zeroed model; returns its step. */
static int64_t load_latest(struct fx *f)
{
    struct dt_ckpt_file c;
    if (dt_ckpt_read_latest(f->dir, &c) != 0)
        fail_msg("%s", dt_error_last());
    memset(f->m->params, 0, f->m->n_params * sizeof(float));
    struct dt_ckpt_state s = state_at(0);
    assert_int_equal(dt_ckpt_apply(&c, f->m, &f->a, &s), 0);
    dt_ckpt_release(&c);
    assert_true(f->m->params[0] == (float)s.step);
    assert_true(f->a.v[f->a.n - 1] == (float)s.step * 0.25f);
    assert_int_equal(f->a.step, s.step);
    return s.step;
}

static void path_of(struct fx *f, int64_t step, char *out, size_t n)
{
    snprintf(out, n, "%s/step_%08lld.safetensors", f->dir, (long long)step);
}

static void round_trip(void **state)
{
    struct fx *f = *state;
    save(f, 3);
    save(f, 7);
    assert_int_equal(load_latest(f), 7);
    assert_true(f->m->params[12345] == 7.0f + 12345 * 1e-6f);
}

/* The data order of images depends on the world size and the batch size
 * each; of tokens on their product only (global_batch_order): 4 ranks of 32
 * resume as 2 ranks of 64 or 8 of 16, but not as 4 of 16, and an image run
 * refuses all three. */
static void global_batch_order_allows_another_world_size(void **state)
{
    struct fx *f = *state;
    save(f, 7);
    char p[128];
    path_of(f, 7, p, sizeof p);
    const int worlds[] = {2, 8, 4}, batches[] = {64, 16, 16};
    for (int i = 0; i < 3; i++) {
        for (int tokens = 0; tokens < 2; tokens++) {
            memset(f->m->params, 0, f->m->n_params * sizeof(float));
            struct dt_ckpt_state s = state_at(0);
            s.world = worlds[i];
            s.batch_size = batches[i];
            s.global_batch_order = tokens;
            bool same = tokens && worlds[i] * batches[i] == 4 * 32;
            assert_int_equal(dt_ckpt_load(p, f->m, &f->a, &s), same ? 0 : DT_EINVAL);
            assert_true(f->m->params[0] == (same ? 7.0f : 0.0f));
            if (!same)
                assert_non_null(strstr(dt_error_last(), tokens ? "a token run needs the seed and ranks x batch_size"
                                                               : "(the data order would differ;"));
        }
    }
}

static void truncated_newest_falls_back(void **state)
{
    struct fx *f = *state;
    save(f, 3);
    save(f, 7);
    char p[4300];
    path_of(f, 7, p, sizeof p);
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal(truncate(p, st.st_size / 2), 0);
    struct dt_ckpt_file got;
    assert_int_equal(dt_ckpt_read_latest(f->dir, &got), 0);
    path_of(f, 3, p, sizeof p);
    assert_string_equal(got.path, p);
    dt_ckpt_release(&got);
    assert_int_equal(load_latest(f), 3);
    /* Loading the damaged file by name is a clear error, not a crash. */
    path_of(f, 7, p, sizeof p);
    struct dt_ckpt_state s = state_at(0);
    assert_true(dt_ckpt_load(p, f->m, &f->a, &s) < 0);
    assert_non_null(strstr(dt_error_last(), "step_00000007.safetensors"));
}

static void flipped_bit_is_caught_by_the_checksum(void **state)
{
    struct fx *f = *state;
    save(f, 3);
    save(f, 7);
    char p[4300];
    path_of(f, 7, p, sizeof p);
    int fd = open(p, O_RDWR);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    unsigned char b;
    off_t at = st.st_size - 1000; /* inside the tensor data, past the header */
    assert_int_equal(pread(fd, &b, 1, at), 1);
    b ^= 0x10;
    assert_int_equal(pwrite(fd, &b, 1, at), 1);
    close(fd);
    struct dt_ckpt_state s = state_at(0);
    assert_true(dt_ckpt_load(p, f->m, &f->a, &s) < 0);
    assert_non_null(strstr(dt_error_last(), "is damaged: CRC-32C"));
    assert_int_equal(load_latest(f), 3);
}

static void all_damaged_is_an_error(void **state)
{
    struct fx *f = *state;
    save(f, 3);
    save(f, 7);
    for (int64_t s = 3; s <= 7; s += 4) {
        char p[4300];
        path_of(f, s, p, sizeof p);
        assert_int_equal(truncate(p, 100), 0);
    }
    struct dt_ckpt_file got;
    int rc = dt_ckpt_read_latest(f->dir, &got);
    dt_ckpt_release(&got);
    assert_int_equal(rc, DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "no usable checkpoint"));
    assert_non_null(strstr(dt_error_last(), "all 2 are damaged"));
    /* An empty directory is different: nothing to resume from. */
    char empty[80];
    snprintf(empty, sizeof empty, "%s/none", f->dir);
    assert_int_equal(dt_ckpt_read_latest(empty, &got), DT_ENOTFOUND);
    dt_ckpt_release(&got);
}

/* Rewrites a checkpoint with one metadata value replaced; the tensors and
 * their checksums stay as they were.  The metadata's own checksum then
 * disagrees, but the range checks come before it, so their sentences show. */
static void edit_meta(const char *path, const char *key, const char *value)
{
    struct dt_safetensors st;
    assert_int_equal(dt_safetensors_read(path, &st), 0);
    struct dt_st_entry *e = calloc((size_t)st.n, sizeof *e);
    for (int i = 0; i < st.n; i++) {
        const struct dt_st_tensor *t = &st.tensors[i];
        e[i] = (struct dt_st_entry){t->name, t->dtype, t->ndim, {0}, t->data};
        memcpy(e[i].shape, t->shape, sizeof t->shape);
    }
    const char **meta = calloc(2 * (size_t)st.n_meta, sizeof *meta);
    int found = 0;
    for (int i = 0; i < st.n_meta; i++) {
        meta[2 * i] = st.meta[2 * i];
        found += strcmp(st.meta[2 * i], key) == 0;
        meta[2 * i + 1] = strcmp(st.meta[2 * i], key) ? st.meta[2 * i + 1] : value;
    }
    assert_int_equal(found, 1);
    int fd = open(path, O_WRONLY | O_TRUNC);
    assert_true(fd >= 0);
    assert_int_equal(dt_safetensors_write_fd(fd, path, e, st.n, meta, st.n_meta), 0);
    close(fd);
    free(meta);
    free(e);
    dt_safetensors_release(&st);
}

/* What fuzz_ckpt found: metadata the trainer cannot resume from (a negative
 * batch indexes the loader's slots backwards; a NaN loss scale skips every
 * step) was taken, and a file refused after the tensors were checked
 * had already overwritten the model. */
static void bad_metadata_is_refused_and_leaves_the_model(void **state)
{
    struct fx *f = *state;
    static const struct {
        const char *key, *value, *why;
    } bad[] = {
        {"batch", "-2", "metadata 'batch' is -2, outside 0..9223372036854775807"},
        {"step", "", "metadata 'step' missing or bad"},
        {"epoch", "99999999999999999999", "metadata 'epoch' missing or bad"},
        {"adamw_step", "-1", "metadata 'adamw_step' is -1"},
        {"loss_scale", "nan", "loss_scale nan is not a finite number >= 0"},
        {"loss_scale", "-1", "loss_scale -1 is not a finite number >= 0"},
        {"loss_scale", "inf", "loss_scale inf is not a finite number >= 0"},
        {"loss_scale", "", "without a readable loss scaler state"},
        {"growth_tracker", "-5", "metadata 'growth_tracker' is -5"},
        {"growth_tracker", "4294967296", "outside 0..2147483647"},
        {"skipped_steps", "-1", "metadata 'skipped_steps' is -1"},
    };
    char p[4300];
    path_of(f, 7, p, sizeof p);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        save(f, 7);
        edit_meta(p, bad[i].key, bad[i].value);
        fill(f, 1);
        struct dt_ckpt_state s = state_at(0);
        assert_int_equal(dt_ckpt_load(p, f->m, &f->a, &s), DT_EINVAL);
        assert_non_null(strstr(dt_error_last(), p));
        if (!strstr(dt_error_last(), bad[i].why))
            fail_msg("%s=\"%s\": wanted '%s' in: %s", bad[i].key, bad[i].value, bad[i].why, dt_error_last());
        assert_true(f->m->params[0] == 1.0f && f->a.m[0] == 0.5f); /* step 1's values, not the file's */
        assert_int_equal(s.step, 0);
        assert_int_equal(f->a.step, 1);
    }
}

/* The seed is a uint64 written with %llu: one above INT64_MAX was read back
 * as a signed number, refused as "missing or bad", and a mismatch printed
 * it as a negative.  A sign or a space before the digits is not a seed. */
static void seed_above_int64_max_round_trips(void **state)
{
    struct fx *f = *state;
    const uint64_t big = 18446744073709551615ull;
    fill(f, 7);
    struct dt_ckpt_state s = state_at(7);
    s.seed = big;
    assert_int_equal(dt_ckpt_save(f->dir, f->m, &f->a, &s, 0), 0);
    char p[4300];
    path_of(f, 7, p, sizeof p);
    s = state_at(0);
    s.seed = big;
    if (dt_ckpt_load(p, f->m, &f->a, &s))
        fail_msg("%s", dt_error_last());
    assert_int_equal(s.step, 7);
    s = state_at(0);
    assert_int_equal(dt_ckpt_load(p, f->m, &f->a, &s), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "saved with seed 18446744073709551615,"));
    static const char *const bad[] = {"-1", " 5", "+5", "18446744073709551616", "5x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        edit_meta(p, "seed", bad[i]);
        s = state_at(0);
        assert_int_equal(dt_ckpt_load(p, f->m, &f->a, &s), DT_EINVAL);
        if (!strstr(dt_error_last(), "metadata 'seed' missing or bad"))
            fail_msg("seed \"%s\": %s", bad[i], dt_error_last());
    }
}

static int count_tmp(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)))
        n += de->d_name[0] == '.' && strstr(de->d_name, ".tmp") != NULL;
    if (d)
        closedir(d);
    return n;
}

/* A child saves step after step; the parent SIGKILLs it at a random instant
 * within a few saves' time, then checks the directory: the newest usable file
 * loads, and it is never older than one already seen. */
static void killed_writer_leaves_a_usable_checkpoint(void **state)
{
    struct fx *f = *state;
    unsigned seed = (unsigned)time(NULL);
    printf("# kill-during-write seed %u\n", seed);
    srand(seed);
    int torn = 0;
    save(f, 1); /* a checkpoint from before the writer, which must survive whatever the kills do */
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    save(f, 2);
    clock_gettime(CLOCK_MONOTONIC, &b);
    long save_us = (b.tv_sec - a.tv_sec) * 1000000L + (b.tv_nsec - a.tv_nsec) / 1000 + 500;
    printf("# one save takes about %ld us\n", save_us);
    if (save_us > 50000) /* a slow disk: kills mid-write anyway, and the test stays short */
        save_us = 50000;
    int64_t base = 3, newest = 2;
    for (int round = 0; round < 12; round++) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            for (int64_t s = base;; s++) {
                fill(f, s);
                struct dt_ckpt_state st = state_at(s);
                if (dt_ckpt_save(f->dir, f->m, &f->a, &st, 3))
                    _exit(3);
            }
        }
        long us = rand() % (4 * save_us) + 100;
        struct timespec ts = {us / 1000000, us % 1000000 * 1000L};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(WIFSIGNALED(st));
        torn += count_tmp(f->dir) > 0;
        int64_t got = load_latest(f);
        assert_true(got >= newest); /* a finished save is never lost */
        newest = got;
        base = got + 1;
    }
    printf("# the newest usable checkpoint after the last kill: step %lld\n", (long long)newest);
    printf("# %d of 12 kills left a half-written temporary file behind\n", torn);
    /* The next finished save removes the leftovers. */
    save(f, 1000);
    assert_int_equal(count_tmp(f->dir), 0);
}

/* ---- issue 26 ---- */

/* Flips one bit of the first occurrence of `what` in the file, at byte `at` of it. */
static void flip_in_file(const char *path, const char *what, size_t at, unsigned char bit)
{
    FILE *in = fopen(path, "r+b");
    assert_non_null(in);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, in);
    char *hit = memmem(buf, n, what, strlen(what));
    assert_non_null(hit);
    unsigned char b = (unsigned char)hit[at] ^ bit;
    assert_int_equal(fseek(in, (long)(hit - buf + (long)at), SEEK_SET), 0);
    assert_int_equal(fwrite(&b, 1, 1, in), 1);
    assert_int_equal(fclose(in), 0);
}

/* The issue's own case: step 40 -> 41 by one bit was resumed at step 41. */
static void flipped_bit_in_the_metadata_is_refused(void **state)
{
    struct fx *f = *state;
    save(f, 30);
    save(f, 40);
    char p[4300];
    path_of(f, 40, p, sizeof p);
    flip_in_file(p, "\"step\":\"40\"", 9, 0x01); /* '0' -> '1' */
    struct dt_ckpt_state s = state_at(0);
    assert_int_equal(dt_ckpt_load(p, f->m, &f->a, &s), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), p));
    assert_non_null(strstr(dt_error_last(), "the metadata is damaged: CRC-32C"));
    assert_int_equal(s.step, 0);
    assert_int_equal(load_latest(f), 30);
    /* a flip in a value no counter check reads (the seed) is caught too */
    save(f, 40);
    flip_in_file(p, "\"seed\":\"5\"", 8, 0x02); /* '5' -> '7' */
    assert_int_equal(dt_ckpt_load(p, f->m, &f->a, &s), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "the metadata is damaged"));
}

static void name_must_match_the_metadata_step(void **state)
{
    struct fx *f = *state;
    save(f, 3);
    save(f, 7);
    char p7[4300], p9[4300];
    path_of(f, 7, p7, sizeof p7);
    path_of(f, 9, p9, sizeof p9);
    assert_int_equal(rename(p7, p9), 0);
    struct dt_ckpt_state s = state_at(0);
    assert_int_equal(dt_ckpt_load(p9, f->m, &f->a, &s), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "the name says step 9, the metadata step 7"));
    assert_int_equal(load_latest(f), 3);
}

/* Rewrites a file with its tensors' data changed by `edit` (their checksums
 * recomputed) and the metadata's checksum left out, or its key renamed: a
 * file as a dtrain from before the metadata's checksum wrote it. */
static void rewrite_old_style(const char *path, void (*edit)(const char *name, float *v, size_t n),
                              const char *rename_crc_key_to)
{
    struct dt_safetensors st;
    assert_int_equal(dt_safetensors_read(path, &st), 0);
    struct dt_st_entry *e = calloc((size_t)st.n, sizeof *e);
    for (int i = 0; i < st.n; i++) {
        const struct dt_st_tensor *t = &st.tensors[i];
        size_t bytes = t->end - t->begin;
        float *copy = malloc(bytes);
        memcpy(copy, t->data, bytes);
        if (edit)
            edit(t->name, copy, bytes / 4);
        e[i] = (struct dt_st_entry){t->name, t->dtype, t->ndim, {0}, copy};
        memcpy(e[i].shape, t->shape, sizeof t->shape);
    }
    const char **meta = calloc(2 * (size_t)st.n_meta, sizeof *meta);
    char(*crc)[16] = calloc((size_t)st.n_meta, sizeof *crc);
    int m = 0;
    for (int i = 0; i < st.n_meta; i++) {
        const char *k = st.meta[2 * i], *v = st.meta[2 * i + 1];
        if (strcmp(k, "crc32c.__metadata__") == 0) {
            if (!rename_crc_key_to)
                continue;
            k = rename_crc_key_to;
        }
        for (int j = 0; j < st.n && strncmp(k, "crc32c.", 7) == 0; j++)
            if (strcmp(k + 7, e[j].name) == 0) {
                snprintf(crc[i], sizeof crc[i], "%08x",
                         dt_crc32c(0, e[j].data, st.tensors[j].end - st.tensors[j].begin));
                v = crc[i];
            }
        meta[2 * m] = k;
        meta[2 * m + 1] = v;
        m++;
    }
    int fd = open(path, O_WRONLY | O_TRUNC);
    assert_true(fd >= 0);
    assert_int_equal(dt_safetensors_write_fd(fd, path, e, st.n, meta, m), 0);
    close(fd);
    for (int i = 0; i < st.n; i++)
        free((void *)e[i].data);
    free(e);
    free(meta);
    free(crc);
    dt_safetensors_release(&st);
}

/* Compatibility: a file without "crc32c.__metadata__" loads as before, on
 * its tensors' checksums; but a key that such files never had (here the
 * checksum's own name with a flipped bit) is damage, not an old file. */
static void files_from_before_the_metadata_checksum_load(void **state)
{
    struct fx *f = *state;
    save(f, 7);
    char p[4300];
    path_of(f, 7, p, sizeof p);
    rewrite_old_style(p, NULL, NULL);
    assert_int_equal(load_latest(f), 7);
    save(f, 7);
    rewrite_old_style(p, NULL, "crc32c.__metadatc__");
    struct dt_ckpt_state s = state_at(0);
    assert_int_equal(dt_ckpt_load(p, f->m, &f->a, &s), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "metadata key 'crc32c.__metadatc__' is unknown"));
}

static void put_nan(const char *name, float *v, size_t n)
{
    if (strcmp(name, "layers.2.weight") == 0)
        v[n / 2] = NAN;
}

/* A diverged run's state is never saved over the good checkpoints, and a
 * file holding one (an older dtrain saved them) is passed over on resume. */
static void diverged_state_is_neither_saved_nor_resumed(void **state)
{
    struct fx *f = *state;
    save(f, 7);
    fill(f, 9);
    f->m->params[f->m->n_params - 3] = NAN;
    struct dt_ckpt_state s = state_at(9);
    assert_int_equal(dt_ckpt_save(f->dir, f->m, &f->a, &s, 0), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "training diverged by step 9: tensor"));
    assert_non_null(strstr(dt_error_last(), "holds nan"));
    char p[4300];
    path_of(f, 9, p, sizeof p);
    assert_int_equal(access(p, F_OK), -1);
    assert_int_equal(count_tmp(f->dir), 0);
    fill(f, 9);
    f->a.v[5] = INFINITY;
    assert_int_equal(dt_ckpt_save(f->dir, f->m, &f->a, &s, 0), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "optimizer.exp_avg_sq holds inf at element 5"));
    assert_int_equal(load_latest(f), 7);
    save(f, 9);
    rewrite_old_style(p, put_nan, NULL);
    s = state_at(0);
    assert_int_equal(dt_ckpt_load(p, f->m, &f->a, &s), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "tensor layers.2.weight holds nan at element"));
    assert_non_null(strstr(dt_error_last(), "the state of a diverged run"));
    assert_int_equal(load_latest(f), 7);
}

static void put_negative_v(const char *name, float *v, size_t n)
{
    if (strcmp(name, "optimizer.exp_avg_sq") == 0)
        v[n - 2] = -0.25f;
}

/* Issue 45: a finite negative second moment, in a file whose checksums all
 * pass, was resumed at every restart (AdamW then takes the square root of
 * a negative: NaN).  It is refused naming the tensor and element, the
 * resume takes the checkpoint before it, and the writer never writes one. */
static void negative_second_moment_is_refused(void **state)
{
    struct fx *f = *state;
    save(f, 7);
    save(f, 9);
    char p[4300];
    path_of(f, 9, p, sizeof p);
    rewrite_old_style(p, put_negative_v, NULL);
    struct dt_ckpt_state s = state_at(0);
    assert_int_equal(dt_ckpt_load(p, f->m, &f->a, &s), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "tensor optimizer.exp_avg_sq holds -0.25 at element"));
    assert_non_null(strstr(dt_error_last(), "never negative"));
    assert_int_equal(s.step, 0);
    assert_int_equal(load_latest(f), 7);
    fill(f, 11);
    f->a.v[3] = -0.0f; /* -0 is zero: a square's mean may round to it */
    s = state_at(11);
    assert_int_equal(dt_ckpt_save(f->dir, f->m, &f->a, &s, 0), 0);
    fill(f, 12);
    f->a.v[3] = -1e-30f;
    s = state_at(12);
    assert_int_equal(dt_ckpt_save(f->dir, f->m, &f->a, &s, 0), DT_EINTERNAL);
    assert_non_null(strstr(dt_error_last(), "optimizer.exp_avg_sq holds -1e-30 at element 3"));
    path_of(f, 12, p, sizeof p);
    assert_int_equal(access(p, F_OK), -1);
    assert_int_equal(load_latest(f), 11);
}

/* adamw_step = INT64_MAX overflowed AdamW's step count; no counter that
 * counts steps may exceed the step. */
static void counters_past_the_step_are_refused(void **state)
{
    struct fx *f = *state;
    static const struct {
        const char *key, *value, *why;
    } bad[] = {
        {"adamw_step", "9223372036854775807", "metadata 'adamw_step' is 9223372036854775807, outside 0..7"},
        {"adamw_step", "8", "metadata 'adamw_step' is 8, outside 0..7"},
        {"epoch", "8", "metadata 'epoch' is 8, outside 0..7"},
        {"skipped_steps", "9", "metadata 'skipped_steps' is 9, outside 0..7"},
        {"skipped_steps", "1", "adamw_step 7 and skipped_steps 1 add up to more than the step, 7"},
    };
    char p[4300];
    path_of(f, 7, p, sizeof p);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        save(f, 7);
        edit_meta(p, bad[i].key, bad[i].value);
        struct dt_ckpt_state s = state_at(0);
        assert_int_equal(dt_ckpt_load(p, f->m, &f->a, &s), DT_EINVAL);
        if (!strstr(dt_error_last(), bad[i].why))
            fail_msg("%s=\"%s\": wanted '%s' in: %s", bad[i].key, bad[i].value, bad[i].why, dt_error_last());
    }
}

static void touch(const char *dir, long long step)
{
    char p[4300];
    snprintf(p, sizeof p, "%s/step_%08lld.safetensors", dir, step);
    int fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    close(fd);
}

static int count_ckpts(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)))
        n += strncmp(de->d_name, "step_", 5) == 0;
    if (d)
        closedir(d);
    return n;
}

/* Only the first 1024 names readdir gave were listed: a resume took step
 * 1100 while step 3000 was there, and pruning left the rest. */
static void every_checkpoint_is_listed(void **state)
{
    struct fx *f = *state;
    save(f, 3000);
    for (long long s = 1; s <= 2000; s++)
        touch(f->dir, s); /* names only: the newest, 3000, is the one that must be found */
    assert_int_equal(load_latest(f), 3000);
    fill(f, 3001);
    struct dt_ckpt_state s = state_at(3001);
    assert_int_equal(dt_ckpt_save(f->dir, f->m, &f->a, &s, 3), 0);
    /* 3001 and 3000, and the 2000 empty files: names only, which keep leaves alone */
    assert_int_equal(count_ckpts(f->dir), 2002);
    assert_int_equal(load_latest(f), 3001);
    /* past 99999999 steps the name has more digits, and is still found */
    save(f, 123456789);
    assert_int_equal(load_latest(f), 123456789);
}

static long max_rss_kib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* A 3 GB junk file named as the newest checkpoint was read whole (13 s,
 * 3.2 GB) before it was refused; a FIFO of that name blocked open(2).  Now
 * each is refused from its fstat and at most its header: the junk's first
 * bytes, as a header length, are past the file or the 100 MB limit; a file
 * whose header describes 3 GB of tensors is refused for its size; the FIFO
 * and the directory for what they are. */
static void junk_or_fifo_named_as_the_newest_is_refused_cheaply(void **state)
{
    struct fx *f = *state;
    save(f, 3);
    char p[4300];
    path_of(f, 9, p, sizeof p); /* 3 GB, sparse, junk at the front */
    int fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    unsigned char junk[64];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (unsigned char)(i * 37 + 11);
    assert_int_equal(write(fd, junk, sizeof junk), (ssize_t)sizeof junk);
    assert_int_equal(ftruncate(fd, 3LL << 30), 0);
    close(fd);
    path_of(f, 10, p, sizeof p); /* a header that claims 3 GB of data in a file of a few bytes */
    const char *h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[805306368],\"data_offsets\":[0,3221225472]}}";
    uint64_t hl = strlen(h);
    fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0600);
    assert_int_equal(write(fd, &hl, 8), 8);
    assert_int_equal(write(fd, h, hl), (ssize_t)hl);
    assert_int_equal(write(fd, junk, 16), 16);
    close(fd);
    path_of(f, 11, p, sizeof p);
    assert_int_equal(mkfifo(p, 0600), 0);
    path_of(f, 12, p, sizeof p);
    assert_int_equal(mkdir(p, 0700), 0);
    long rss0 = max_rss_kib();
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    alarm(20); /* a blocked open(2) fails the test instead of hanging it */
    assert_int_equal(load_latest(f), 3);
    alarm(0);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double s = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
    printf("# four bad newest files refused in %.3f s, peak RSS grew %ld KiB\n", s, max_rss_kib() - rss0);
    assert_true(s < 2.0);
    assert_true(max_rss_kib() - rss0 < 64 * 1024);
    static const struct {
        int64_t step;
        const char *why;
    } why[] = {{9, "is larger than"},
               {10, "data bytes, the header describes"},
               {11, "not a regular file (a FIFO)"},
               {12, "not a regular file (a directory)"}};
    for (size_t i = 0; i < sizeof why / sizeof why[0]; i++) {
        path_of(f, why[i].step, p, sizeof p);
        struct dt_ckpt_state st = state_at(0);
        assert_true(dt_ckpt_load(p, f->m, &f->a, &st) < 0);
        if (!strstr(dt_error_last(), why[i].why) || !strstr(dt_error_last(), p))
            fail_msg("step %lld: wanted '%s' in: %s", (long long)why[i].step, why[i].why, dt_error_last());
    }
}

/* Issue 45: `keep` deleted every step_<N>.safetensors past the newest N,
 * whatever it held.  It removes only checkpoints of this run, each known by
 * its header: an empty file, junk, a checkpoint of another seed or model, a
 * link (even to one of this run's) stay, and do not count as kept. */
static void keep_removes_only_checkpoints_of_this_run(void **state)
{
    struct fx *f = *state;
    char p[4300], elsewhere[4300];
    for (int64_t step = 1; step <= 4; step++)
        save(f, step);
    touch(f->dir, 5); /* empty */
    path_of(f, 6, p, sizeof p);
    FILE *j = fopen(p, "w");
    fputs("not a checkpoint, but the user's notes\n", j);
    fclose(j);
    fill(f, 7); /* another run's: another seed */
    struct dt_ckpt_state other = state_at(7);
    other.seed = 6;
    assert_int_equal(dt_ckpt_save(f->dir, f->m, &f->a, &other, 0), 0);
    snprintf(elsewhere, sizeof elsewhere, "%s/kept-elsewhere", f->dir);
    assert_int_equal(mkdir(elsewhere, 0700), 0);
    fill(f, 8);
    struct dt_ckpt_state s8 = state_at(8);
    assert_int_equal(dt_ckpt_save(elsewhere, f->m, &f->a, &s8, 0), 0);
    snprintf(elsewhere + strlen(elsewhere), sizeof elsewhere - strlen(elsewhere), "/step_00000008.safetensors");
    path_of(f, 8, p, sizeof p);
    assert_int_equal(symlink(elsewhere, p), 0);
    save(f, 9); /* keep 0: nothing removed */
    assert_int_equal(count_ckpts(f->dir), 9);
    fill(f, 10);
    struct dt_ckpt_state s = state_at(10);
    assert_int_equal(dt_ckpt_save(f->dir, f->m, &f->a, &s, 2), 0);
    const bool stays[11] = {[5] = true, [6] = true, [7] = true, [8] = true, [9] = true, [10] = true};
    for (int64_t step = 1; step <= 10; step++) {
        struct stat st;
        path_of(f, step, p, sizeof p);
        if ((lstat(p, &st) == 0) != stays[step])
            fail_msg("step %lld: %s after keep 2", (long long)step, stays[step] ? "removed" : "still there");
    }
    struct stat st;
    assert_int_equal(stat(elsewhere, &st), 0); /* the link's target, untouched */
}

/* The attack of issue 26: a link at the temporary name made the trainer
 * overwrite its target. */
static void symlink_at_the_temporary_name_is_not_written_through(void **state)
{
    struct fx *f = *state;
    char victim[128], link[4300];
    snprintf(victim, sizeof victim, "%s/victim", f->dir);
    snprintf(link, sizeof link, "%s/.step_00000010.safetensors.tmp", f->dir);
    FILE *v = fopen(victim, "w");
    fputs("precious\n", v);
    fclose(v);
    assert_int_equal(symlink(victim, link), 0);
    save(f, 10);
    struct stat st;
    assert_int_equal(stat(victim, &st), 0);
    assert_int_equal(st.st_size, strlen("precious\n"));
    assert_int_equal(load_latest(f), 10);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(truncated_newest_falls_back, setup, teardown),
        cmocka_unit_test_setup_teardown(global_batch_order_allows_another_world_size, setup, teardown),
        cmocka_unit_test_setup_teardown(flipped_bit_is_caught_by_the_checksum, setup, teardown),
        cmocka_unit_test_setup_teardown(all_damaged_is_an_error, setup, teardown),
        cmocka_unit_test_setup_teardown(bad_metadata_is_refused_and_leaves_the_model, setup, teardown),
        cmocka_unit_test_setup_teardown(seed_above_int64_max_round_trips, setup, teardown),
        cmocka_unit_test_setup_teardown(killed_writer_leaves_a_usable_checkpoint, setup, teardown),
        cmocka_unit_test_setup_teardown(flipped_bit_in_the_metadata_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(name_must_match_the_metadata_step, setup, teardown),
        cmocka_unit_test_setup_teardown(files_from_before_the_metadata_checksum_load, setup, teardown),
        cmocka_unit_test_setup_teardown(diverged_state_is_neither_saved_nor_resumed, setup, teardown),
        cmocka_unit_test_setup_teardown(counters_past_the_step_are_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(negative_second_moment_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(every_checkpoint_is_listed, setup, teardown),
        cmocka_unit_test_setup_teardown(junk_or_fifo_named_as_the_newest_is_refused_cheaply, setup, teardown),
        cmocka_unit_test_setup_teardown(symlink_at_the_temporary_name_is_not_written_through, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(keep_removes_only_checkpoints_of_this_run, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
