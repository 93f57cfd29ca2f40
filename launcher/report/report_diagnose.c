/* report_diagnose.c - what limits a run, from its metrics (see report.h).
 *
 * The rules, each with the figure that shows it and what to change:
 *   data wait      mean data_s over 10% of the step: the loader does not keep
 *                  up (data.workers, data.prefetch);
 *   exposed comm   mean comm_wait_s over 10% of the step: the all-reduce is not
 *                  hidden behind backward (ddp.overlap, ddp.bucket_cap_mb);
 *   low GPU use    mean gpu_util_pct (NVML, per rank) under 70%;
 *   straggler      one rank's work (rank_work_seconds: its train time less its
 *                  data and all-reduce waits) 10% over the median of the others:
 *                  in synchronous data parallelism every rank waits for the
 *                  slowest one at each all-reduce, so its excess is every
 *                  other rank's loss.
 * The step is the sum of the split's means, the same on every rule.  A run
 * without the per-step split falls back on trainer_summary.json's totals.
 * Not for rendering (report_html.c) or loading (report_load.c).
 */
#include "launcher/report/report.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

#define DATA_SHARE 0.10
#define COMM_SHARE 0.10
#define GPU_UTIL_PCT 70.0
#define STRAGGLER_EXCESS 0.10

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

/* The rank with the most work against the median of the others: rank_work_seconds
 * of trainer_summary.json, each rank's train time less its data and all-reduce
 * waits, gathered once at the end of training (worker/metrics.h). */
/* Seconds under one are shown to the millisecond: a short run's straggler
 * read "0.0 s of work, 0.0 s (90%) more" with one decimal. */
static int decimals(double seconds)
{
    return fabs(seconds) >= 1 ? 1 : 3;
}

static bool straggler(const struct dt_report *r, int *rank, double *mine, double *median)
{
    const json_t *l = json_object_get(r->trainer, "rank_work_seconds");
    size_t ranks = json_array_size(l);
    if (ranks < 2)
        return false;
    double *v = malloc(2 * ranks * sizeof *v), *others = v + ranks;
    size_t n = 0, worst = 0;
    for (; v && n < ranks; n++) {
        const json_t *e = json_array_get(l, n);
        if (!json_is_number(e) || !isfinite(json_number_value(e)) || json_number_value(e) <= 0)
            break; /* a rank without a figure: no verdict */
        v[n] = json_number_value(e);
        worst = v[n] > v[worst] ? n : worst;
    }
    bool whole = v && n == ranks;
    size_t k = 0;
    for (size_t i = 0; whole && i < n; i++)
        if (i != worst)
            others[k++] = v[i];
    if (whole) {
        qsort(others, k, sizeof others[0], by_value);
        *median = k % 2 ? others[k / 2] : (others[k / 2 - 1] + others[k / 2]) / 2;
        *rank = (int)worst;
        *mine = v[worst];
    }
    free(v);
    return whole && *median > 0 && *mine > *median * (1 + STRAGGLER_EXCESS);
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
        say(&s, "Rank %d is a straggler: %.*f s of work, %.*f s (%.0f%%) more than the median of the other ranks "
                "(%.*f s; rank_work_seconds in trainer_summary.json: train time less data and all-reduce waits). "
                "Every other rank waits for it at each all-reduce: look for other load on its host or device.\n",
            slow, decimals(mine), mine, decimals(mine - median), mine - median, 100 * (mine / median - 1),
            decimals(median), median);
    if (s.n == 0 && have)
        say(&s, "No bottleneck found: data wait %.1f%%, communication wait %.1f%% of the step%s%s.\n",
            100 * w.data / w.total, 100 * w.comm / w.total, gpus ? ", GPU utilisation at least 70%" : "",
            json_object_get(r->trainer, "rank_work_seconds") ? ", no straggler rank" : "");
    if (s.n == 0)
        say(&s, "No step-time figures in this run (no trainer_summary.json and no per-step split).\n");
    return s.n;
}
