/* report.h - `dtrain report`: what a run directory says, as one HTML page.
 *
 * dt_report_load reads <run dir>/metrics.jsonl (required), summary.json (the
 * launcher's) and trainer_summary.json (the trainer's), both optional;
 * dt_report_write renders a self-contained page: no script, no stylesheet or
 * font from the network, curves as inline SVG polylines.
 *
 * metrics.jsonl is read strictly: every line one JSON object with a numeric
 * "step"; a truncated or garbled line is an error naming the file and line.
 * Every other numeric member becomes a series over steps, so fields the
 * trainer adds later (forward_s, ...) show up without a change here; a list of
 * numbers (one per rank: gpu_util_pct, gpu_mem_mib) becomes a series of its mean over
 * ranks plus each rank's mean over the run (struct dt_report_ranks).
 *
 * Not for live progress (the launcher's console) or for TensorBoard.
 */
#ifndef DT_REPORT_H
#define DT_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "base/json.h"

#define DT_REPORT_MAX_SERIES 48
#define DT_REPORT_MAX_LISTS 4
#define DT_REPORT_MAX_RANKS 64

/* A member that holds one number per rank ("gpu_util_pct": [..]): each
 * rank's mean over the rows, NaN where a rank never had a number. */
struct dt_report_ranks {
    char name[48];
    int ranks;
    double sum[DT_REPORT_MAX_RANKS];
    int count[DT_REPORT_MAX_RANKS];
};

struct dt_report_series {
    char name[48];
    double *step, *value;
    size_t n, cap;
};

struct dt_report {
    char run_dir[4096];
    struct dt_report_series series[DT_REPORT_MAX_SERIES];
    int n_series;
    struct dt_report_ranks lists[DT_REPORT_MAX_LISTS];
    int n_lists;
    size_t rows;                         /* lines of metrics.jsonl */
    json_t *summary;                     /* summary.json (an object) or NULL */
    json_t *trainer;                     /* trainer_summary.json (an object) or NULL */
};

/* Reads a run directory; on error the message names the file (and line). */
int dt_report_load(const char *run_dir, struct dt_report *r);
void dt_report_free(struct dt_report *r);

/* The series called name, or NULL. */
const struct dt_report_series *dt_report_series(const struct dt_report *r, const char *name);

/* The step-time split: data_s, forward_s, backward_s, comm_wait_s, optimizer_s. */
#define DT_REPORT_SPLIT 5
/* The mean of a series' finite values (NaN if none; s may be NULL). */
double dt_report_mean(const struct dt_report_series *s);
/* Mean seconds per step of each part of the split (NaN: not logged) and their
 * sum; false if the rows have none. */
bool dt_report_split(const struct dt_report *r, double *part, double *total);

/* The whole HTML page. */
int dt_report_write(const struct dt_report *r, FILE *f);

/* One chart as an <svg> element: each named series that exists becomes a
 * <polyline class="curve" data-series="name">; returns how many were drawn. */
int dt_report_svg_chart(FILE *f, const struct dt_report *r, const char *title, const char *const *names, int n_names);

/* The per-rank list called name, or NULL. */
const struct dt_report_ranks *dt_report_ranks(const struct dt_report *r, const char *name);
/* Rank k's mean of a per-rank list (NaN if it has none). */
double dt_report_rank_mean(const struct dt_report_ranks *l, int k);

/* What limits the run, one finding per line into buf, each with the figure
 * that shows it; returns how many (a "no bottleneck" line counts).  The
 * rules and thresholds are in report_diagnose.c. */
int dt_report_diagnose(const struct dt_report *r, char *buf, size_t size);

#endif
