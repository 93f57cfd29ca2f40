/* profile_cuda.c - DTRAIN_CUDA_PROFILE: every GPU kernel, copy and memset of
 * the run recorded through CUPTI's activity API and summed into the table of
 * worker/kernel_profile.h, written when the engine is destroyed
 * (docs/gpu.md).  CUPTI is loaded with dlopen when the variable is set
 * (DTRAIN_CUPTI, then libcupti.so.13, then libcupti.so), so neither the
 * build nor a run without the variable needs it; anything that fails is one
 * warning and the run goes on without a profile.  Not for timing phases of
 * the step (engine_step.c's events do that) nor for tracing the host.
 *
 * Kernels inside a CUDA graph replay come as records of their own: that is
 * what CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL gives for graph launches (the
 * record's graphNodeId names the node); enabled before the first capture,
 * which engine_create's call ensures.  CONCURRENT_KERNEL, unlike KIND_KERNEL,
 * does not serialise kernels, though tracing each one still costs a few us.
 *
 * The first DTRAIN_CUDA_PROFILE_SKIP steps (default 10: graph capture,
 * cuBLASLt's autotuning, the allocator warming) are left out: at that step
 * the engine waits for the device once, and records that started before
 * CUPTI's timestamp at that moment are dropped.  Work that is not a training
 * step (evaluation, the state copied out for a checkpoint) is set aside the
 * same way: the engine waits before and after it, and records that started
 * between the two timestamps are dropped, so the table per step is the
 * step's (a checkpoint's 500 MB of DtoH copies would otherwise read as
 * milliseconds per step of "copies").
 *
 * The few CUPTI declarations are written out here, the stable ABI of CUPTI
 * 12 and 13 (record prefixes only grow at their end); when the toolkit's
 * header is found they are checked against it at compile time.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/env.h"
#include "base/error.h"
#include "base/log.h"
#include "worker/cuda/engine_internal.h"
#include "worker/kernel_profile.h"

/* ---- CUPTI's ABI: the calls and the record fields read ---- */

enum {
    CUPTI_OK = 0,
    KIND_MEMCPY = 1,
    KIND_MEMSET = 2,
    KIND_KERNEL = 3,
    KIND_CONCURRENT_KERNEL = 10,
    FLUSH_FORCED = 1,
    /* CUpti_ActivityKernel10 (CUDA 13; Kernel9 of CUDA 12 has the same prefix) */
    K_START = 16,
    K_END = 24,
    K_NAME = 104,
    /* CUpti_ActivityMemcpy6 and CUpti_ActivityMemset4 */
    M_COPYKIND = 4,
    M_START = 16,
    M_END = 24,
};

#if __has_include(<cupti_activity.h>)
#include <stddef.h>
#include <cupti_activity.h>
_Static_assert(offsetof(CUpti_ActivityKernel10, start) == K_START &&
                   offsetof(CUpti_ActivityKernel10, end) == K_END &&
                   offsetof(CUpti_ActivityKernel10, name) == K_NAME,
               "CUPTI's kernel record moved");
_Static_assert(offsetof(CUpti_ActivityMemcpy6, copyKind) == M_COPYKIND &&
                   offsetof(CUpti_ActivityMemcpy6, start) == M_START &&
                   offsetof(CUpti_ActivityMemcpy6, end) == M_END &&
                   offsetof(CUpti_ActivityMemset4, start) == M_START &&
                   offsetof(CUpti_ActivityMemset4, end) == M_END,
               "CUPTI's copy records moved");
_Static_assert((int)CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL == (int)KIND_CONCURRENT_KERNEL &&
                   (int)CUPTI_ACTIVITY_KIND_MEMCPY == (int)KIND_MEMCPY &&
                   (int)CUPTI_ACTIVITY_KIND_MEMSET == (int)KIND_MEMSET &&
                   (int)CUPTI_ACTIVITY_FLAG_FLUSH_FORCED == (int)FLUSH_FORCED,
               "CUPTI's enums changed");
#endif

typedef void (*buffer_requested_fn)(uint8_t **buf, size_t *size, size_t *max_records);
typedef void (*buffer_completed_fn)(void *ctx, uint32_t stream, uint8_t *buf, size_t size, size_t valid);

static struct {
    int (*result_string)(int, const char **);
    int (*register_callbacks)(buffer_requested_fn, buffer_completed_fn);
    int (*enable)(int kind);
    int (*disable)(int kind);
    int (*flush_all)(uint32_t flag);
    int (*next_record)(uint8_t *buf, size_t valid, void **record);
    int (*dropped)(void *ctx, uint32_t stream, size_t *n);
    int (*timestamp)(uint64_t *ns);
} cupti;

/* ---- the collector's state (CUPTI's callbacks carry no user pointer) ---- */

#define PROFILE_BUFFER (8u << 20) /* bytes per activity buffer: ~38k kernel records */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct dt_kprof *table; /* NULL when not profiling; under mu */
static uint64_t counted_from;  /* CUPTI ns: records starting earlier are warm-up; under mu */
static struct aside {
    uint64_t from, to; /* CUPTI ns; to = UINT64_MAX while open */
} *asides;             /* non-step work, in time order; under mu */
static size_t n_asides, cap_asides;
static uint64_t dropped, incomplete, set_aside, not_set_aside; /* records; stretches */
static int64_t steps, skip;
static char out_path[4096];

static const char *cupti_why(int r)
{
    const char *s = NULL;
    if (cupti.result_string && cupti.result_string(r, &s) == CUPTI_OK && s)
        return s;
    return "unknown CUPTI error";
}

static const char *copy_name(uint8_t kind)
{
    switch (kind) {
    case 1:
        return "[memcpy HtoD]";
    case 2:
        return "[memcpy DtoH]";
    case 8:
        return "[memcpy DtoD]";
    case 9:
        return "[memcpy HtoH]";
    case 10:
        return "[memcpy PtoP]";
    default:
        return "[memcpy other]";
    }
}

static uint64_t u64_at(const uint8_t *r, size_t off)
{
    uint64_t v;
    memcpy(&v, r + off, sizeof v);
    return v;
}

/* One record into the table: its name and duration (under mu). */
static void take_record(const uint8_t *r)
{
    uint32_t kind;
    memcpy(&kind, r, sizeof kind);
    const char *name;
    uint64_t start, end;
    if (kind == KIND_CONCURRENT_KERNEL || kind == KIND_KERNEL) {
        memcpy(&name, r + K_NAME, sizeof name);
        start = u64_at(r, K_START), end = u64_at(r, K_END);
    } else if (kind == KIND_MEMCPY || kind == KIND_MEMSET) {
        name = kind == KIND_MEMSET ? "[memset]" : copy_name(r[M_COPYKIND]);
        start = u64_at(r, M_START), end = u64_at(r, M_END);
    } else {
        return;
    }
    if (start < counted_from)
        return;
    for (size_t i = n_asides; i--;) { /* the latest first: records come roughly in time order */
        if (start >= asides[i].to)
            break; /* after this stretch, so after every earlier one: a step's record, one test */
        if (start >= asides[i].from) {
            set_aside++;
            return;
        }
    }
    if (end <= start) { /* a record flushed before it completed */
        incomplete++;
        return;
    }
    if (dt_kprof_add(table, name, end - start))
        incomplete++;
}

/* ---- CUPTI's buffer callbacks ---- */

static void buffer_requested(uint8_t **buf, size_t *size, size_t *max_records)
{
    *buf = aligned_alloc(8, PROFILE_BUFFER); /* CUPTI asks for 8-byte alignment */
    *size = *buf ? PROFILE_BUFFER : 0;       /* no memory: CUPTI drops the records and counts them */
    *max_records = 0;                        /* as many as fit */
}

static void buffer_completed(void *ctx, uint32_t stream, uint8_t *buf, size_t size, size_t valid)
{
    (void)size;
    pthread_mutex_lock(&mu);
    if (table && buf) {
        void *rec = NULL;
        while (cupti.next_record(buf, valid, &rec) == CUPTI_OK)
            take_record(rec);
        size_t n = 0;
        if (cupti.dropped(ctx, stream, &n) == CUPTI_OK)
            dropped += n;
    }
    pthread_mutex_unlock(&mu);
    free(buf);
}

/* ---- loading ---- */

static void *open_cupti(char *why, size_t n)
{
    const char *env = getenv("DTRAIN_CUPTI");
    char path[4096];
    struct stat st;
    void *lib = NULL;
    if (env && *env) { /* the library, or the folder that holds it */
        if (!stat(env, &st) && S_ISDIR(st.st_mode))
            snprintf(path, sizeof path, "%s/libcupti.so.13", env);
        else
            snprintf(path, sizeof path, "%s", env);
        if (!(lib = dlopen(path, RTLD_NOW | RTLD_LOCAL)))
            snprintf(why, n, "DTRAIN_CUPTI: %s", dlerror()); /* dlerror names the file */
        return lib;
    }
    if (!(lib = dlopen("libcupti.so.13", RTLD_NOW | RTLD_LOCAL)) &&
        !(lib = dlopen("libcupti.so", RTLD_NOW | RTLD_LOCAL)))
        snprintf(why, n,
                 "cannot load libcupti.so.13 or libcupti.so (%s); set DTRAIN_CUPTI to the library or "
                 "its folder, or add it to LD_LIBRARY_PATH",
                 dlerror());
    return lib;
}

static int load_cupti(char *why, size_t n)
{
    void *lib = open_cupti(why, n);
    if (!lib)
        return -1;
    struct {
        void **fn;
        const char *name;
    } syms[] = {
        {(void **)&cupti.result_string, "cuptiGetResultString"},
        {(void **)&cupti.register_callbacks, "cuptiActivityRegisterCallbacks"},
        {(void **)&cupti.enable, "cuptiActivityEnable"},
        {(void **)&cupti.disable, "cuptiActivityDisable"},
        {(void **)&cupti.flush_all, "cuptiActivityFlushAll"},
        {(void **)&cupti.next_record, "cuptiActivityGetNextRecord"},
        {(void **)&cupti.dropped, "cuptiActivityGetNumDroppedRecords"},
        {(void **)&cupti.timestamp, "cuptiGetTimestamp"},
    };
    for (size_t i = 0; i < sizeof syms / sizeof *syms; i++)
        if (!(*syms[i].fn = dlsym(lib, syms[i].name))) {
            snprintf(why, n, "the CUPTI library has no %s", syms[i].name);
            memset(&cupti, 0, sizeof cupti);
            return -1; /* the library stays loaded: unloading CUPTI is not safe once touched */
        }
    return 0;
}

/* ---- the engine's hooks (engine_internal.h) ---- */

static const int kinds[] = {KIND_CONCURRENT_KERNEL, KIND_MEMCPY, KIND_MEMSET};
enum { N_KINDS = sizeof kinds / sizeof *kinds };
static const struct dt_dev_model *owner; /* the engine profiled: one per process */

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static char load_why[4096]; /* why CUPTI could not be loaded; empty when it was */

static void load(void)
{
    if (load_cupti(load_why, sizeof load_why) && !load_why[0])
        snprintf(load_why, sizeof load_why, "cannot load CUPTI");
}

/* Enables the record kinds; on a failure disables those enabled and says why. */
static int enable_all(char *why, size_t n)
{
    int r = cupti.register_callbacks(buffer_requested, buffer_completed);
    if (r != CUPTI_OK) {
        snprintf(why, n, "cuptiActivityRegisterCallbacks: %s", cupti_why(r));
        return -1;
    }
    for (int i = 0; i < N_KINDS; i++)
        if ((r = cupti.enable(kinds[i])) != CUPTI_OK) {
            snprintf(why, n, "cuptiActivityEnable(kind %d): %s", kinds[i], cupti_why(r));
            while (i--)
                cupti.disable(kinds[i]);
            return -1;
        }
    return 0;
}

void dt_engine__profile_start(const struct dt_dev_model *d)
{
    const char *path = getenv("DTRAIN_CUDA_PROFILE");
    if (!path || !*path || owner)
        return;
    uint64_t sk = 10;
    if (dt_env_u64("DTRAIN_CUDA_PROFILE_SKIP", 10, 0, 1000000000, &sk)) {
        dt_log_warn("%s; skipping the first 10 steps of the kernel profile", dt_error_last());
        sk = 10;
    }
    pthread_once(&load_once, load);
    char why[4096];
    struct dt_kprof *t = NULL;
    if (load_why[0])
        snprintf(why, sizeof why, "%s", load_why);
    else if (!(t = dt_kprof_new()))
        snprintf(why, sizeof why, "no memory for the table");
    else if (enable_all(why, sizeof why))
        dt_kprof_free(t), t = NULL;
    if (!t) {
        dt_log_warn("DTRAIN_CUDA_PROFILE: %s; this run goes on without a kernel profile", why);
        return;
    }
    if (d->c.world > 1 && strcmp(path, "-")) /* one file a rank */
        snprintf(out_path, sizeof out_path, "%s.rank%d", path, d->c.rank);
    else
        snprintf(out_path, sizeof out_path, "%s", path);
    pthread_mutex_lock(&mu);
    table = t;
    counted_from = sk ? UINT64_MAX : 0;
    dropped = incomplete = set_aside = not_set_aside = 0;
    n_asides = 0;
    pthread_mutex_unlock(&mu);
    steps = 0;
    skip = (int64_t)sk;
    owner = d;
}

/* CUPTI's clock once everything queued so far has run: records of the
 * queued work start before it, records of what comes next after it.  0 (and
 * one warning naming `what`) when the wait or the clock fails. */
static uint64_t device_now(struct dt_dev_model *d, const char *what)
{
    char ctx[160];
    snprintf(ctx, sizeof ctx, "DTRAIN_CUDA_PROFILE: waiting for the device (%s)", what);
    if (dt_engine__wait(d, ctx))
        dt_log_warn("%s; the kernel profile may put some work on the wrong side of it", dt_error_last());
    uint64_t now = 0;
    int r = cupti.timestamp(&now);
    if (r != CUPTI_OK)
        dt_log_warn("DTRAIN_CUDA_PROFILE: cuptiGetTimestamp (%s): %s", what, cupti_why(r)), now = 0;
    return now;
}

/* After each optimizer step is issued: the warm-up ends at step `skip`. */
void dt_engine__profile_step(struct dt_dev_model *d)
{
    if (owner != d || ++steps != skip)
        return;
    uint64_t now = device_now(d, "the end of the warm-up steps");
    pthread_mutex_lock(&mu);
    counted_from = now; /* 0 when the clock failed: the profile counts from the start */
    pthread_mutex_unlock(&mu);
}

void dt_engine__profile_aside(struct dt_dev_model *d, bool begin)
{
    if (owner != d)
        return;
    uint64_t now = device_now(d, begin ? "before work outside the steps" : "after work outside the steps");
    pthread_mutex_lock(&mu);
    if (begin && n_asides == cap_asides) {
        size_t cap = cap_asides ? 2 * cap_asides : 16;
        struct aside *a = realloc(asides, cap * sizeof *a);
        if (a)
            asides = a, cap_asides = cap;
    }
    if (begin && n_asides < cap_asides && now)
        asides[n_asides++] = (struct aside){.from = now, .to = UINT64_MAX};
    else if (begin) /* its records count; the table says so */
        not_set_aside++;
    else if (!begin && n_asides && asides[n_asides - 1].to == UINT64_MAX) {
        struct aside *a = &asides[n_asides - 1];
        if (now) {
            a->to = now;
        } else { /* no end: counting its records beats dropping every later step's */
            a->to = a->from;
            not_set_aside++;
        }
    }
    pthread_mutex_unlock(&mu);
}

static void write_table(const struct dt_kprof *t, uint64_t lost, uint64_t aside, uint64_t not_aside)
{
    bool to_stderr = !strcmp(out_path, "-");
    FILE *f = to_stderr ? stderr : fopen(out_path, "w");
    if (!f) {
        dt_log_warn("DTRAIN_CUDA_PROFILE: cannot write %s: %s", out_path, strerror(errno));
        return;
    }
    if (steps <= skip)
        fprintf(f,
                "dtrain kernel profile: the run ended after %lld steps, within the %lld left out "
                "(DTRAIN_CUDA_PROFILE_SKIP)\n",
                (long long)steps, (long long)skip);
    else
        dt_kprof_write(t, f, steps - skip, 0);
    if (lost)
        fprintf(f, "(%llu records lost: dropped by CUPTI for want of buffers, or incomplete)\n",
                (unsigned long long)lost);
    if (aside)
        fprintf(f, "(%llu records of work outside the steps, evaluation or checkpoints, left out)\n",
                (unsigned long long)aside);
    if (not_aside)
        fprintf(f, "(%llu stretches of evaluation or checkpoints could not be told apart and are counted)\n",
                (unsigned long long)not_aside);
    if (!to_stderr && fclose(f))
        dt_log_warn("DTRAIN_CUDA_PROFILE: writing %s: %s", out_path, strerror(errno));
}

/* At engine destroy, after the device finished: flush, stop, write. */
void dt_engine__profile_finish(const struct dt_dev_model *d)
{
    if (owner != d || !d)
        return;
    owner = NULL;
    int r = cupti.flush_all(FLUSH_FORCED);
    if (r != CUPTI_OK)
        dt_log_warn("DTRAIN_CUDA_PROFILE: cuptiActivityFlushAll: %s; the table may miss the last records",
                    cupti_why(r));
    for (int i = 0; i < N_KINDS; i++)
        cupti.disable(kinds[i]);
    pthread_mutex_lock(&mu);
    struct dt_kprof *t = table;
    table = NULL;
    uint64_t lost = dropped + incomplete, aside = set_aside, not_aside = not_set_aside;
    free(asides);
    asides = NULL, n_asides = cap_asides = 0;
    pthread_mutex_unlock(&mu);
    write_table(t, lost, aside, not_aside);
    dt_kprof_free(t);
}
