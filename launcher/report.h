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
 * trainer adds later (forward_s, gpu_util, ...) show up without a change here.
 *
 * Not for live progress (the launcher's console) or for TensorBoard.
 */
#ifndef DT_REPORT_H
#define DT_REPORT_H

#include <stddef.h>
#include <stdio.h>

#include "launcher/report_json.h"

#define DT_REPORT_MAX_SERIES 48

struct dt_report_series {
    char name[48];
    double *step, *value;
    size_t n, cap;
};

struct dt_report {
    char run_dir[4096];
    struct dt_json_arena arena;
    struct dt_report_series series[DT_REPORT_MAX_SERIES];
    int n_series;
    size_t rows;                         /* lines of metrics.jsonl */
    const struct dt_json *summary;       /* summary.json or NULL */
    const struct dt_json *trainer;       /* trainer_summary.json or NULL */
};

/* Reads a run directory; on error the message names the file (and line). */
int dt_report_load(const char *run_dir, struct dt_report *r);
void dt_report_free(struct dt_report *r);

/* The series called name, or NULL. */
const struct dt_report_series *dt_report_series(const struct dt_report *r, const char *name);

/* The whole HTML page. */
int dt_report_write(const struct dt_report *r, FILE *f);

/* One chart as an <svg> element: each named series that exists becomes a
 * <polyline class="curve" data-series="name">; returns how many were drawn. */
int dt_report_svg_chart(FILE *f, const struct dt_report *r, const char *title, const char *const *names, int n_names);

/* Findings from the step-time split ("data wait is 23% of step time: ..."),
 * one per line into buf; returns how many. */
int dt_report_diagnose(const struct dt_report *r, char *buf, size_t size);

#endif
