/* report_diagnose.c - what limits a run, from its metrics (see report.h).
 *
 * The rules, each with the figure that shows it and what to change:
 *   data wait      mean data_s over 10% of the step: the loader does not keep
 *                  up (data.workers, data.prefetch);
 *   exposed comm   mean comm_wait_s over 10% of the step: the all-reduce is not
 *                  hidden behind backward (ddp.overlap, ddp.bucket_cap_mb);
 *   low GPU use    mean gpu_util_pct (NVML, per rank) under 70%;
 *   straggler      one rank's work per step (rank_work_s: its step less its
 *                  communication wait) 15% over the median of the others:
 *                  in synchronous data parallelism every rank waits for the
 *                  slowest one at each all-reduce, so its excess is every
 *                  other rank's loss.
 * The step is the sum of the split's means, the same on every rule.  A run
 * without the per-step split falls back on trainer_summary.json's totals.
 * Not for rendering (report_html.c) or loading (report_load.c).
 */
#include "launcher/report.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/error.h"
#include "comm/log.h"

#define DATA_SHARE 0.10
#define COMM_SHARE 0.10
#define GPU_UTIL_PCT 70.0
#define STRAGGLER_EXCESS 0.15

static const char *const split_names[DT_REPORT_SPLIT] = {"data_s", "forward_s", "backward_s", "comm_wait_s",
                                                         "optimizer_s"};

double dt_report_mean(const struct dt_report_series *s)
{
    double sum = 0;
    size_t n = 0;
    for (size_t k = 0; s && k < s->n; k++)
        if (isfinite(s->value[k])) {
            sum += s->value[k];
            n++;
        }
    return n ? sum / (double)n : NAN;
}

bool dt_report_split(const struct dt_report *r, double *part, double *total)
{
    bool any = false;
    *total = 0;
    for (int i = 0; i < DT_REPORT_SPLIT; i++) {
        part[i] = dt_report_mean(dt_report_series(r, split_names[i]));
        any |= isfinite(part[i]);
        *total += isfinite(part[i]) ? part[i] : 0;
    }
    return any && *total > 0;
}

/* Time spent waiting for data and for communication, and the time it is a
 * share of: seconds per step from the per-row split when the trainer logs
 * one (per_step), else whole-run seconds from trainer_summary.json. */
struct waits {
    double data, comm, total;
    bool per_step;
};

static bool wait_times(const struct dt_report *r, struct waits *w)
{
    double part[DT_REPORT_SPLIT];
    if (dt_report_split(r, part, &w->total)) {
        w->data = isfinite(part[0]) ? part[0] : 0;
        w->comm = isfinite(part[3]) ? part[3] : 0;
        w->per_step = true;
        return true;
    }
    w->per_step = false;
    return dt_json_get_num(r->trainer, "train_seconds", &w->total) && w->total > 0 &&
           dt_json_get_num(r->trainer, "data_wait_seconds", &w->data) &&
           dt_json_get_num(r->trainer, "comm_wait_seconds", &w->comm);
}

/* "12.1 ms of a 40.2 ms step, data_s" or "30.5 s of 120.0 s training, trainer_summary.json" */
static const char *figure(const struct waits *w, double part, const char *field, char *buf, size_t size)
{
    if (w->per_step)
        snprintf(buf, size, "%.1f ms of a %.1f ms step, mean %s in metrics.jsonl", 1e3 * part, 1e3 * w->total,
                 field);
    else
        snprintf(buf, size, "%.1f s of %.1f s training, trainer_summary.json", part, w->total);
    return buf;
}

struct says {
    char *buf;
    size_t size, used;
    int n;
};

static void say(struct says *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(struct says *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(s->buf + s->used, s->size - s->used, fmt, ap);
    va_end(ap);
    s->used += k < 0 ? 0 : (size_t)k;
    s->used = s->used < s->size ? s->used : s->size - 1;
    s->n++;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The rank with the most work per step against the median of the others. */
static bool straggler(const struct dt_report *r, int *rank, double *mine, double *median)
{
    const struct dt_report_ranks *l = dt_report_ranks(r, "rank_work_s");
    double others[DT_REPORT_MAX_RANKS];
    int n = 0, worst = -1;
    for (int k = 0; l && k < l->ranks; k++) {
        double w = dt_report_rank_mean(l, k);
        if (isfinite(w) && (worst < 0 || w > dt_report_rank_mean(l, worst)))
            worst = k;
    }
    for (int k = 0; worst >= 0 && k < l->ranks; k++)
        if (k != worst && isfinite(dt_report_rank_mean(l, k)))
            others[n++] = dt_report_rank_mean(l, k);
    if (n == 0)
        return false;
    qsort(others, (size_t)n, sizeof others[0], by_value);
    *median = n % 2 ? others[n / 2] : (others[n / 2 - 1] + others[n / 2]) / 2;
    *rank = worst;
    *mine = dt_report_rank_mean(l, worst);
    return *median > 0 && *mine > *median * (1 + STRAGGLER_EXCESS);
}

/* The mean utilisation over ranks and the least used rank. */
static bool gpu_use(const struct dt_report *r, double *mean, int *low_rank, double *low)
{
    const struct dt_report_ranks *l = dt_report_ranks(r, "gpu_util_pct");
    double sum = 0;
    int n = 0;
    *low_rank = -1;
    for (int k = 0; l && k < l->ranks; k++) {
        double u = dt_report_rank_mean(l, k);
        if (!isfinite(u))
            continue;
        sum += u;
        n++;
        if (*low_rank < 0 || u < *low)
            *low_rank = k, *low = u;
    }
    *mean = n ? sum / n : NAN;
    return n > 0;
}

int dt_report_diagnose(const struct dt_report *r, char *buf, size_t size)
{
    struct says s = {buf, size, 0, 0};
    struct waits w;
    double gpu = NAN, low = NAN, mine = 0, median = 0;
    int low_rank = -1, slow = -1;
    char fig[160];
    buf[0] = 0;
    bool have = wait_times(r, &w);
    bool lagging = straggler(r, &slow, &mine, &median), gpus = gpu_use(r, &gpu, &low_rank, &low);
    if (have && w.data > DATA_SHARE * w.total)
        say(&s, "Data loading limits the run: %.0f%% of the step is spent waiting for batches (%s). "
                "Raise data.workers or data.prefetch.\n", 100 * w.data / w.total,
            figure(&w, w.data, "data_s", fig, sizeof fig));
    if (have && w.comm > COMM_SHARE * w.total)
        say(&s, "Communication is exposed: %.0f%% of the step is spent waiting for the gradient all-reduce (%s). "
                "Keep ddp.overlap on and try another ddp.bucket_cap_mb (larger: fewer, longer messages; smaller: "
                "the first buckets start earlier in backward)%s.\n", 100 * w.comm / w.total,
            figure(&w, w.comm, "comm_wait_s", fig, sizeof fig),
            lagging ? "; part of this wait is for the straggler below" : "");
    if (gpus && gpu < GPU_UTIL_PCT)
        say(&s, "The GPUs are underused: %.0f%% utilisation on average, rank %d lowest at %.0f%% (gpu_util_pct, "
                "NVML). Raise data.batch_size, or look for data or communication waits.\n", gpu, low_rank, low);
    if (lagging)
        say(&s, "Rank %d is a straggler: %.1f ms of work per step, %.1f ms (%.0f%%) more than the median of the "
                "other ranks (%.1f ms; rank_work_s: its step less its communication wait). Every other rank waits "
                "for it at each all-reduce: look for other load on its host or device.\n", slow, 1e3 * mine,
            1e3 * (mine - median), 100 * (mine / median - 1), 1e3 * median);
    if (s.n == 0 && have)
        say(&s, "No bottleneck found: data wait %.1f%%, communication wait %.1f%% of the step%s%s.\n",
            100 * w.data / w.total, 100 * w.comm / w.total, gpus ? ", GPU utilisation at least 70%" : "",
            dt_report_ranks(r, "rank_work_s") ? ", no straggler rank" : "");
    if (s.n == 0)
        say(&s, "No step-time figures in this run (no trainer_summary.json and no per-step split).\n");
    return s.n;
}

void dt_report_print_findings(const char *run_dir)
{
    struct dt_report r;
    char path[4200], findings[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    if (access(path, F_OK) != 0)
        return;
    if (dt_report_load(run_dir, &r)) {
        dt_log_warn("no findings for this run: %s", dt_error_last());
        return;
    }
    dt_report_diagnose(&r, findings, sizeof findings);
    for (char *save = NULL, *line = strtok_r(findings, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
        dt_log_info("finding: %s", line);
    dt_report_free(&r);
}
