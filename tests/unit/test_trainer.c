/* test_trainer.c - the training loop on one process: resuming from a
 * checkpoint gives the same parameters bit for bit as never stopping (across
 * an epoch boundary) and reads the checkpoint once, gradient accumulation equals one big batch, the
 * clipping norm summed behind backward equals one pass after it, the bucket
 * layout, metrics files, and the spec checks.  Issue 26: a NaN loss or
 * gradient norm fails the run naming the step and saves nothing of it, an
 * empty test set is refused at start-up, a checkpoint or a metrics row that
 * cannot be written fails the run naming the file and the reason, and a
 * symlink at metrics.jsonl is not followed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <zlib.h>

#include "worker/reducer.h"
#include "trainer_fixture.h"

/* The binary puts its own fopen, open and openat in front of the C library's
 * to count opens of checkpoint files (the safetensors reader's way in:
 * dt_fs_open_read's openat(2), which refuses a FIFO without blocking on it;
 * open and fopen before): resuming
 * read the newest file twice, once to find an intact one and once to load it. */
static atomic_int ckpt_opens;

FILE *fopen(const char *path, const char *mode)
{
    static FILE *(*_Atomic next)(const char *, const char *);
    if (!next)
        next = (FILE * (*)(const char *, const char *)) dlsym(RTLD_NEXT, "fopen");
    if (strstr(path, "/checkpoints/step_"))
        atomic_fetch_add(&ckpt_opens, 1);
    return next(path, mode);
}

int open(const char *path, int flags, ...)
{
    static int (*_Atomic next)(const char *, int, ...);
    if (!next)
        next = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open");
    va_list ap;
    va_start(ap, flags);
    mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, mode_t) : 0;
    va_end(ap);
    if (strstr(path, "/checkpoints/step_"))
        atomic_fetch_add(&ckpt_opens, 1);
    return next(path, flags, mode);
}

int openat(int dfd, const char *path, int flags, ...)
{
    static int (*_Atomic next)(int, const char *, int, ...);
    if (!next)
        next = (int (*)(int, const char *, int, ...))dlsym(RTLD_NEXT, "openat");
    va_list ap;
    va_start(ap, flags);
    mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, mode_t) : 0;
    va_end(ap);
    if (strstr(path, "/checkpoints/step_"))
        atomic_fetch_add(&ckpt_opens, 1);
    return next(dfd, path, flags, mode);
}

static void train(const struct dt_trainer_spec *s, const char *dir, int64_t stop_after,
                  struct dt_metrics_summary *res)
{
    struct dt_trainer_options o = {.run_dir = dir, .threads = 1, .stop_after = stop_after, .quiet = true};
    struct dt_trainer *t;
    if (dt_trainer_create(s, &o, &t))
        fail_msg("create: %s", dt_error_last());
    if (dt_trainer_run(t, res))
        fail_msg("run: %s", dt_error_last());
    dt_trainer_destroy(t);
}

static int count_files(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    if (d)
        closedir(d);
    return n;
}

static void resume_equals_uninterrupted(void **state)
{
    (void)state;
    /* batch 512: 118 batches per epoch, so steps 100..130 cross into epoch 1. */
    struct dt_trainer_spec s;
    small_spec(&s, 130, 512);
    s.checkpoint.every_steps = 50;
    s.checkpoint.keep = 2;
    s.checkpoint.resume = DT_RESUME_AUTO;
    s.log_every_steps = 10; /* loss windows line up with the resume point */
    char a[64], b[64];
    scratch_dir(a, sizeof a, "resume-a");
    scratch_dir(b, sizeof b, "resume-b");
    struct dt_metrics_summary ra, rb;
    train(&s, a, 0, &ra);
    train(&s, b, 110, &rb);   /* "killed" at 110: the newest checkpoint is step 100 */
    assert_int_equal(rb.steps, 110);
    atomic_store(&ckpt_opens, 0);
    train(&s, b, 0, &rb);     /* resumes from 100 */
    assert_int_equal(rb.resumed_from, 100);
    /* the resume reads step 100 once; the save at 130 then reads the header
     * of each file there (130, 100, 50) to know it for one of this run's
     * before keep removes 50 */
    assert_int_equal(atomic_load(&ckpt_opens), 1 + 3);
    assert_int_equal(rb.steps, 130);
    assert_true(assert_same_params(a, b, 130) > 50000);
    assert_true(ra.final_loss == rb.final_loss);
    /* keep: 2 -> steps 100 and 130 remain. */
    char ck[96];
    snprintf(ck, sizeof ck, "%s/checkpoints", b);
    assert_int_equal(count_files(ck, "step_"), 2);
    rm_rf(a);
    rm_rf(b);
}

static void accumulation_equals_big_batch(void **state)
{
    (void)state;
    struct dt_trainer_spec s;
    small_spec(&s, 6, 256);
    char a[64], b[64], pa[128], pb[128];
    scratch_dir(a, sizeof a, "accum-a");
    scratch_dir(b, sizeof b, "accum-b");
    train(&s, a, 0, NULL);
    s.data.batch_size = 64;
    s.ddp.grad_accum = 4;
    train(&s, b, 0, NULL);
    snprintf(pa, sizeof pa, "%s/checkpoints/step_00000006.safetensors", a);
    snprintf(pb, sizeof pb, "%s/checkpoints/step_00000006.safetensors", b);
    size_t n;
    float *xa = ckpt_params(pa, &n), *xb = ckpt_params(pb, &n);
    double worst = 0, differ = 0;
    for (size_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs((double)xa[i] - xb[i]));
        differ += xa[i] != xb[i];
    }
    /* Same samples, different summation order: AdamW moves each parameter by
     * at most ~lr per step, so agreement far below lr means the same gradients. */
    if (worst > 1e-5)
        fail_msg("accumulated and big-batch parameters differ by %.3g", worst);
    free(xa);
    free(xb);
    rm_rf(a);
    rm_rf(b);
}

static void leave_alone(void *ctx, struct dt_model *m, int64_t step)
{
    (void)ctx, (void)m, (void)step;
}

/* One rank sums the clipping norm behind backward, block by block; a hook
 * after the (absent) all-reduce makes it one pass after backward instead.
 * The two must train the same parameters bit for bit (grad_norm.h). */
static void norm_behind_backward_same_bits(void **state)
{
    (void)state;
    struct dt_trainer_spec s;
    small_spec(&s, 8, 128);
    s.optimizer.grad_clip = 0.05; /* clips every step: the norm's bits reach the parameters */
    char a[64], b[64];
    scratch_dir(a, sizeof a, "norm-a");
    scratch_dir(b, sizeof b, "norm-b");
    train(&s, a, 0, NULL);
    struct dt_trainer_options o = {.run_dir = b, .threads = 1, .quiet = true, .after_reduce = leave_alone};
    struct dt_trainer *t;
    if (dt_trainer_create(&s, &o, &t) || dt_trainer_run(t, NULL))
        fail_msg("%s", dt_error_last());
    dt_trainer_destroy(t);
    assert_same_params(a, b, 8);
    rm_rf(a);
    rm_rf(b);
}

static void metrics_and_summary(void **state)
{
    (void)state;
    struct dt_trainer_spec s;
    small_spec(&s, 20, 128);
    s.log_every_steps = 5;
    char d[64], path[128], line[512];
    scratch_dir(d, sizeof d, "metrics");
    struct dt_metrics_summary r;
    train(&s, d, 0, &r);
    snprintf(path, sizeof path, "%s/metrics.jsonl", d);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    int rows = 0, evals = 0;
    while (fgets(line, sizeof line, f)) {
        if (strstr(line, "\"test_accuracy\""))
            evals++;
        else if (strstr(line, "\"loss\"") && strstr(line, "\"lr\"") && strstr(line, "\"beta1\"") &&
                 strstr(line, "\"grad_norm\"") && strstr(line, "\"samples_per_s\""))
            rows++;
    }
    fclose(f);
    assert_int_equal(rows, 4);
    assert_int_equal(evals, 1);
    snprintf(path, sizeof path, "%s/trainer_summary.json", d);
    assert_int_equal(access(path, R_OK), 0);
    assert_true(r.test_accuracy > 0.5 && r.test_accuracy <= 1);
    assert_true(r.final_loss > 0 && r.final_loss < 2.3);
    assert_true(r.samples_per_s > 0);
    rm_rf(d);
}

static void buckets_first_small_then_cap(void **state)
{
    (void)state;
    /* Tensors of 300k, 1k, 300k, 1k, 10k, 10 floats (like a 2-layer MLP). */
    size_t sizes[6] = {300000, 1000, 300000, 1000, 10000, 10}, bounds[7] = {0};
    for (int i = 0; i < 6; i++)
        bounds[i + 1] = bounds[i] + sizes[i];
    struct dt_buckets b;
    /* first bucket 1 MiB = 262144 floats: closes after the 300k tensor (reverse order). */
    assert_int_equal(dt_buckets_plan(&b, bounds, NULL, 6, 1 << 20, 25 << 20), 0);
    assert_int_equal(b.n, 2);
    assert_int_equal(b.range[0][1], bounds[6]);
    assert_int_equal(b.range[0][0], bounds[2]);
    assert_int_equal(b.range[1][1], bounds[2]);
    assert_int_equal(b.range[1][0], 0);
    dt_buckets_release(&b);
    /* Tiny limits: every tensor its own bucket, last first. */
    assert_int_equal(dt_buckets_plan(&b, bounds, NULL, 6, 4, 4), 0);
    assert_int_equal(b.n, 6);
    for (int i = 0; i < 6; i++)
        assert_int_equal(b.range[i][0], bounds[5 - i]);
    dt_buckets_release(&b);
    /* A cut starts a bucket whatever its size: the 300k tensor in two chunks. */
    size_t cb[8] = {0, 100000, 300000, 301000, 601000, 602000, 612000, 612010};
    bool cut[8] = {true, true, false, false, false, false, false, false};
    assert_int_equal(dt_buckets_plan(&b, cb, cut, 7, 1 << 20, 25 << 20), 0);
    assert_int_equal(b.n, 3);
    assert_int_equal(b.range[0][0], cb[3]);
    assert_int_equal(b.range[1][0], cb[1]);
    assert_int_equal(b.range[1][1], cb[3]);
    assert_int_equal(b.range[2][0], 0);
    assert_int_equal(b.range[2][1], cb[1]);
    /* Ready: a bucket once backward's report covers it, in order, none past the last. */
    assert_false(dt_buckets_ready(&b, 0, cb[3] + 1));
    assert_true(dt_buckets_ready(&b, 0, cb[3]));
    assert_false(dt_buckets_ready(&b, 1, cb[3]));
    assert_true(dt_buckets_ready(&b, 1, cb[1]));
    assert_true(dt_buckets_ready(&b, 2, 0));
    assert_false(dt_buckets_ready(&b, 3, 0));
    /* A copy is the same table in its own memory (the CUDA engine keeps one). */
    struct dt_buckets c;
    assert_int_equal(dt_buckets_copy(&c, &b), 0);
    assert_int_equal(c.n, b.n);
    assert_ptr_not_equal(c.range, b.range);
    assert_memory_equal(c.range, b.range, (size_t)b.n * sizeof *b.range);
    dt_buckets_release(&c);
    dt_buckets_release(&b);
    /* Refused: no tensors, a first tensor not at 0, a size not positive. */
    assert_int_equal(dt_buckets_plan(&b, bounds, NULL, 0, 4, 4), DT_EINVAL);
    assert_int_equal(dt_buckets_plan(&b, bounds + 1, NULL, 5, 4, 4), DT_EINVAL);
    assert_int_equal(dt_buckets_plan(&b, bounds, NULL, 6, 0, 4), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "sizes must be positive"));
}

/* The reducer cuts the plan's buckets; with one process begin/ready/finish
 * send nothing and succeed. */
static void reducer_uses_the_plan(void **state)
{
    (void)state;
    size_t cb[8] = {0, 100000, 300000, 301000, 601000, 602000, 612000, 612010};
    bool cut[8] = {true, true, false, false, false, false, false, false};
    float *g = calloc(cb[7], sizeof *g);
    struct dt_reducer r;
    struct dt_buckets b;
    assert_int_equal(dt_reducer_init(&r, NULL, g, cb, cut, 7, 1 << 20, 25 << 20, true), 0);
    assert_int_equal(dt_buckets_plan(&b, cb, cut, 7, 1 << 20, 25 << 20), 0);
    assert_int_equal(r.plan.n, b.n);
    assert_memory_equal(r.plan.range, b.range, (size_t)b.n * sizeof *b.range);
    dt_reducer_begin(&r, true);
    dt_reducer_ready(&r, 0, cb[7]);
    assert_int_equal(dt_reducer_finish(&r), 0);
    dt_reducer_release(&r);
    dt_buckets_release(&b);
    free(g);
}

static void bad_specs_refused(void **state)
{
    (void)state;
    struct dt_trainer_spec s;
    struct dt_trainer *t;
    struct dt_trainer_options o = {.run_dir = "/tmp", .threads = 1, .quiet = true};
    small_spec(&s, 5, 64);
    s.device = DT_DEVICE_CUDA;
    assert_int_equal(dt_trainer_create(&s, &o, &t), DT_EUNSUPPORTED);
    small_spec(&s, 5, 64);
    s.epochs = 2;
    assert_int_equal(dt_trainer_create(&s, &o, &t), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "exactly one of epochs and steps"));
    small_spec(&s, 5, 64);
    s.data.path = "/nonexistent-data";
    assert_int_equal(dt_trainer_create(&s, &o, &t), DT_ENOTFOUND);
    assert_non_null(strstr(dt_error_last(), "/nonexistent-data/train-images-idx3-ubyte.gz"));
    s.data.path = NULL;
    small_spec(&s, 5, 64);
    s.scheduler.max_lr = 0;
    assert_int_equal(dt_trainer_create(&s, &o, &t), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "max_lr"));
}

/* ---- issue 26 ---- */

struct poison {
    int64_t at;       /* the hook's step at which to put a NaN in */
    bool in_grads;    /* the averaged gradients (after_reduce), else a parameter (after_step) */
    bool first_layer; /* a weight of the first layer, whose NaN ReLU hides from the loss */
};

static void poison_param(void *ctx, struct dt_model *m, int64_t step)
{
    const struct poison *p = ctx;
    if (!p->in_grads && step == p->at)
        m->params[p->first_layer ? 3 : m->n_params - 1] = NAN; /* the last bias: a logit is NaN */
}

static void poison_grad(void *ctx, struct dt_model *m, int64_t step)
{
    const struct poison *p = ctx;
    if (p->in_grads && step == p->at)
        m->grads[m->n_params / 3] = NAN;
}

/* Runs s with a NaN put in at p; returns the run's code, the error in msg. */
static int run_poisoned(const struct dt_trainer_spec *s, const char *dir, struct poison *p, char *msg,
                        size_t n)
{
    struct dt_trainer_options o = {.run_dir = dir,
                                   .threads = 1,
                                   .quiet = true,
                                   .ctx = p,
                                   .after_step = poison_param,
                                   .after_reduce = poison_grad};
    struct dt_trainer *t;
    if (dt_trainer_create(s, &o, &t))
        fail_msg("create: %s", dt_error_last());
    int rc = dt_trainer_run(t, NULL);
    snprintf(msg, n, "%s", dt_error_last());
    dt_trainer_destroy(t);
    return rc;
}

/* A NaN run exited 0, printed "succeeded" and saved NaN checkpoints over the
 * good ones.  Now the step whose loss (or norm) is NaN ends the run, naming
 * the step, before its checkpoint; the ones before it stay. */
static void divergence_fails_the_run_and_saves_nothing_of_it(void **state)
{
    (void)state;
    struct dt_trainer_spec s;
    small_spec(&s, 40, 128);
    s.checkpoint.every_steps = 5;
    s.optimizer.grad_clip = 0; /* the loss alone shows it */
    char d[64], ck[96], msg[1024];
    scratch_dir(d, sizeof d, "nan-loss");
    struct poison p = {.at = 14}; /* after step 14: step 15's forward meets the NaN */
    assert_int_equal(run_poisoned(&s, d, &p, msg, sizeof msg), DT_EINVAL);
    if (!strstr(msg, "training diverged at step 15: loss is nan"))
        fail_msg("%s", msg);
    snprintf(ck, sizeof ck, "%s/checkpoints", d);
    assert_int_equal(count_files(ck, "step_"), 2); /* 5 and 10; 15 was never written */
    assert_int_equal(count_files(ck, ".step_"), 0);
    rm_rf(d);
    /* gradients NaN after averaging, the loss still finite: the norm shows it */
    s.optimizer.grad_clip = 1.0;
    scratch_dir(d, sizeof d, "nan-norm");
    p = (struct poison){.at = 9, .in_grads = true}; /* step 10's gradients */
    assert_int_equal(run_poisoned(&s, d, &p, msg, sizeof msg), DT_EINVAL);
    if (!strstr(msg, "training diverged at step 10: the gradient norm is nan"))
        fail_msg("%s", msg);
    snprintf(ck, sizeof ck, "%s/checkpoints", d);
    assert_int_equal(count_files(ck, "step_"), 1); /* 5 */
    rm_rf(d);
    /* a NaN the loss does not show (ReLU passes 0 for it): the checkpoint refuses the state */
    scratch_dir(d, sizeof d, "nan-hidden");
    p = (struct poison){.at = 12, .first_layer = true};
    assert_int_equal(run_poisoned(&s, d, &p, msg, sizeof msg), DT_EINVAL);
    if (!strstr(msg, "training diverged by step 15: tensor layers.0.weight holds nan at element 3;"))
        fail_msg("%s", msg);
    snprintf(ck, sizeof ck, "%s/checkpoints", d);
    assert_int_equal(count_files(ck, "step_"), 2); /* 5 and 10 */
    assert_int_equal(count_files(ck, ".step_"), 0);
    rm_rf(d);
}

static void write_gz_idx(const char *path, const unsigned char *b, size_t n)
{
    gzFile f = gzopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(gzwrite(f, b, (unsigned)n), (int)n);
    assert_int_equal(gzclose(f), Z_OK);
}

/* An empty test set gave test_loss -nan and exit 0. */
static void empty_test_set_is_refused_at_start(void **state)
{
    (void)state;
    char d[64], p[160], want[320];
    scratch_dir(d, sizeof d, "empty-test");
    static const char *const train[] = {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"};
    for (int i = 0; i < 2; i++) {
        char real[160];
        snprintf(real, sizeof real, "/usr/share/datasets/fashion-mnist/%s", train[i]);
        snprintf(p, sizeof p, "%s/%s", d, train[i]);
        assert_int_equal(symlink(real, p), 0);
    }
    const unsigned char images[16] = {0, 0, 8, 3, 0, 0, 0, 0, 0, 0, 0, 28, 0, 0, 0, 28},
                        labels[8] = {0, 0, 8, 1};
    snprintf(p, sizeof p, "%s/t10k-images-idx3-ubyte.gz", d);
    write_gz_idx(p, images, sizeof images);
    snprintf(p, sizeof p, "%s/t10k-labels-idx1-ubyte.gz", d);
    write_gz_idx(p, labels, sizeof labels);
    struct dt_trainer_spec s;
    small_spec(&s, 5, 64);
    s.data.path = d;
    struct dt_trainer_options o = {.run_dir = d, .threads = 1, .quiet = true};
    struct dt_trainer *t;
    assert_int_equal(dt_trainer_create(&s, &o, &t), DT_EINVAL);
    snprintf(want, sizeof want,
             "the test set: %s/t10k-images-idx3-ubyte.gz and %s/t10k-labels-idx1-ubyte.gz hold no "
             "examples",
             d, d);
    if (!strstr(dt_error_last(), want))
        fail_msg("wanted '%s' in: %s", want, dt_error_last());
    rm_rf(d);
}

/* A checkpoint the file system will not take (here a file-size limit, in a
 * child: SIGXFSZ ignored as dtrain worker ignores it) fails the run with the
 * file's name and the system's reason, instead of training on. */
static void checkpoint_write_error_fails_the_run(void **state)
{
    (void)state;
    struct dt_trainer_spec s;
    small_spec(&s, 10, 64);
    s.checkpoint.every_steps = 5;
    char d[64], want[128];
    scratch_dir(d, sizeof d, "ckpt-efbig");
    snprintf(want, sizeof want, "%s/checkpoints/step_00000005.safetensors: write:", d);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {256 * 1024, 256 * 1024}; /* the model's checkpoint is about 630 KB */
        struct dt_trainer_options o = {.run_dir = d, .threads = 1, .quiet = true};
        struct dt_trainer *t;
        if (setrlimit(RLIMIT_FSIZE, &rl) || dt_trainer_create(&s, &o, &t))
            _exit(1);
        int rc = dt_trainer_run(t, NULL);
        fprintf(stderr, "# %s\n", dt_error_last());
        _exit(rc == DT_EIO && strstr(dt_error_last(), want) && strstr(dt_error_last(), "File too large") ? 0
                                                                                                         : 2);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    char ck[96];
    snprintf(ck, sizeof ck, "%s/checkpoints", d);
    assert_int_equal(count_files(ck, "step_"), 0);
    assert_int_equal(count_files(ck, ".step_"), 0);
    rm_rf(d);
}

/* metrics.jsonl rows were written with their errors dropped: a full disk cut
 * the file short and the run went on.  Here rows of a few hundred bytes each
 * meet a 2 KiB file-size limit. */
static void metrics_write_error_fails_the_run(void **state)
{
    (void)state;
    struct dt_trainer_spec s;
    small_spec(&s, 40, 64);
    s.log_every_steps = 1;
    char d[64], want[128];
    scratch_dir(d, sizeof d, "metrics-efbig");
    snprintf(want, sizeof want, "writing %s/metrics.jsonl failed: File too large", d);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {2048, 2048};
        struct dt_trainer_options o = {.run_dir = d, .threads = 1, .quiet = true};
        struct dt_trainer *t;
        if (setrlimit(RLIMIT_FSIZE, &rl) || dt_trainer_create(&s, &o, &t))
            _exit(1);
        int rc = dt_trainer_run(t, NULL);
        fprintf(stderr, "# %s\n", dt_error_last());
        _exit(rc == DT_EIO && strstr(dt_error_last(), want) ? 0 : 2);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    rm_rf(d);
}

/* metrics.jsonl's name is predictable: a link there is refused, its target untouched. */
static void symlink_at_metrics_is_not_followed(void **state)
{
    (void)state;
    char d[64], victim[96], link[96];
    scratch_dir(d, sizeof d, "metrics-link");
    snprintf(victim, sizeof victim, "%s/victim", d);
    snprintf(link, sizeof link, "%s/metrics.jsonl", d);
    FILE *v = fopen(victim, "w");
    fputs("precious\n", v);
    fclose(v);
    assert_int_equal(symlink(victim, link), 0);
    struct dt_trainer_spec s;
    small_spec(&s, 5, 64);
    struct dt_trainer_options o = {.run_dir = d, .threads = 1, .quiet = true};
    struct dt_trainer *t;
    assert_int_equal(dt_trainer_create(&s, &o, &t), DT_EIO);
    assert_non_null(strstr(dt_error_last(), "metrics.jsonl (a symbolic link, which is not followed)"));
    struct stat st;
    assert_int_equal(stat(victim, &st), 0);
    assert_int_equal(st.st_size, strlen("precious\n"));
    rm_rf(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(buckets_first_small_then_cap),
        cmocka_unit_test(reducer_uses_the_plan),
        cmocka_unit_test(bad_specs_refused),
        cmocka_unit_test(metrics_and_summary),
        cmocka_unit_test(accumulation_equals_big_batch),
        cmocka_unit_test(norm_behind_backward_same_bits),
        cmocka_unit_test(resume_equals_uninterrupted),
        cmocka_unit_test(divergence_fails_the_run_and_saves_nothing_of_it),
        cmocka_unit_test(empty_test_set_is_refused_at_start),
        cmocka_unit_test(checkpoint_write_error_fails_the_run),
        cmocka_unit_test(metrics_write_error_fails_the_run),
        cmocka_unit_test(symlink_at_metrics_is_not_followed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
