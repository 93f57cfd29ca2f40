/* report_html.c - the page of `dtrain report` (see report.h).
 *
 * Sections: run (summary.json), trainer figures (trainer_summary.json),
 * findings (what limits the run: report_diagnose.c), step-time split, curves.  The page carries
 * its own small stylesheet and no script, so it opens from a file on a
 * machine with no network.  Not for the charts' geometry (report_svg.c).
 */
#include "launcher/report/report.h"

#include <math.h>
#include <string.h>

#include "base/error.h"

/* The parts of a step the trainer may log per row (seconds per step). */
static const char *const split_labels[] = {"data wait", "forward", "backward", "communication wait", "optimizer"};
#define N_SPLIT DT_REPORT_SPLIT
/* the colours report_svg.c gives these series in the "Step time split" chart */
static const char *const split_colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd"};

static void esc(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

/* A JSON value as table text: strings bare, arrays space-joined, objects compact. */
static void cell(FILE *f, json_t *v)
{
    const char *key;
    json_t *c;
    size_t i, n = json_is_array(v) ? json_array_size(v) : json_object_size(v);
    if (json_is_string(v)) {
        esc(f, json_string_value(v));
    } else if (json_is_number(v)) {
        /* %g would print a Unix time as 1.79627e+09 */
        double x = json_number_value(v);
        fprintf(f, fabs(x) >= 1e6 && fabs(x) < 1e15 ? "%.3f" : "%.6g", x);
    } else if (json_is_array(v)) {
        json_array_foreach (v, i, c) {
            cell(f, c);
            fputs(i + 1 < n ? " " : "", f);
        }
    } else if (json_is_object(v)) {
        fputs("{", f);
        i = 0;
        json_object_foreach (v, key, c) {
            esc(f, key);
            fputs(": ", f);
            cell(f, c);
            fputs(++i < n ? ", " : "", f);
        }
        fputs("}", f);
    } else {
        fputs(json_is_null(v) ? "&mdash;" : json_is_true(v) ? "true" : "false", f);
    }
}

/* Every top-level member except those named in skip (NULL-terminated). */
static void table(FILE *f, const char *id, json_t *obj, const char *const *skip)
{
    const char *key;
    json_t *m;
    fprintf(f, "<table id=\"%s\">\n", id);
    json_object_foreach (obj, key, m) {
        bool skipped = false;
        for (int i = 0; skip && skip[i]; i++)
            skipped |= strcmp(skip[i], key) == 0;
        if (skipped)
            continue;
        fputs("<tr><th>", f);
        esc(f, key);
        fputs("</th><td>", f);
        cell(f, m);
        fputs("</td></tr>\n", f);
    }
    fputs("</table>\n", f);
}

/* A horizontal bar of the step split with the share of each part. */
static void split_bar(FILE *f, const struct dt_report *r)
{
    double part[N_SPLIT], total, train, dw, cw;
    if (!dt_report_split(r, part, &total)) {
        if (!dt_json_get_num(r->trainer, "train_seconds", &train) || train <= 0 ||
            !dt_json_get_num(r->trainer, "data_wait_seconds", &dw) ||
            !dt_json_get_num(r->trainer, "comm_wait_seconds", &cw))
            return;
        /* only waits are known: the rest of the step is computation */
        part[0] = dw;
        part[1] = fmax(train - dw - cw, 0);
        part[2] = part[4] = NAN;
        part[3] = cw;
        total = train;
    }
    fputs("<h2>Step time</h2>\n<svg id=\"split\" class=\"chart\" viewBox=\"0 0 640 70\" width=\"640\" height=\"70\" "
          "xmlns=\"http://www.w3.org/2000/svg\">\n", f);
    double x = 0;
    for (int i = 0; i < N_SPLIT; i++) {
        if (!isfinite(part[i]) || part[i] <= 0)
            continue;
        double w = part[i] / total * 640;
        const char *label = i == 1 && isnan(part[2]) ? "computation" : split_labels[i];
        fprintf(f, "<rect class=\"part\" data-part=\"%s\" x=\"%.1f\" y=\"4\" width=\"%.1f\" height=\"30\" "
                   "fill=\"%s\"><title>%s: %.1f%%</title></rect>\n", label, x, w, split_colors[i], label,
                100 * part[i] / total);
        /* 11 px text is about 6.2 px a character; a part too thin for its text keeps it in the tooltip */
        bool named = w > 6.2 * (double)(strlen(label) + 5);
        if (w > 28)
            fprintf(f, "<text class=\"legend\" x=\"%.1f\" y=\"52\">%s%s%.0f%%</text>\n", x + 2, named ? label : "",
                    named ? " " : "", 100 * part[i] / total);
        x += w;
    }
    fputs("</svg>\n", f);
}

static const char style[] =
    "body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1340px;padding:0 16px;color:#222}"
    "h1{font-size:20px}h2{font-size:16px;margin-top:28px}table{border-collapse:collapse;margin:8px 0}"
    "th,td{padding:2px 10px;border-bottom:1px solid #eee;text-align:left;vertical-align:top}"
    "th{font-weight:600;color:#555}.charts{display:flex;flex-wrap:wrap;gap:12px}"
    ".chart{background:#fff;border:1px solid #ddd}.plot{fill:#fafafa;stroke:#ccc}"
    ".grid{stroke:#e4e4e4}.tick,.legend,.axis{font-size:11px;fill:#444}.title{font-size:13px;font-weight:600}"
    ".curve{fill:none;stroke-width:1.6}.finding{background:#fff8e1;border-left:4px solid #f0a500;padding:6px 10px;"
    "margin:6px 0}.failed{color:#b00020;font-weight:600}";

struct chart_def {
    const char *title;
    const char *names[5];
};

static const struct chart_def charts[] = {
    {"Loss", {"loss", "test_loss", "val_loss"}},
    {"Test accuracy", {"test_accuracy"}},
    {"Learning rate", {"lr"}},
    {"Momentum (beta1)", {"beta1"}},
    {"Gradient norm", {"grad_norm"}},
    {"Throughput (samples/s)", {"samples_per_s"}},
    {"Throughput (tokens/s)", {"tokens_per_s"}},
    {"Step time split (s per step)", {"data_s", "forward_s", "backward_s", "comm_wait_s", "optimizer_s"}},
    {"Loss scale", {"loss_scale"}},
    {"GPU utilisation (%, mean over ranks)", {"gpu_util_pct"}},
    {"GPU memory in use (MiB, mean over ranks)", {"gpu_mem_mib"}},
};

static bool charted(const char *name)
{
    static const char *const not_charted[] = {"epoch", "time_s", "total_steps"};
    for (size_t i = 0; i < sizeof charts / sizeof charts[0]; i++)
        for (int k = 0; k < 5 && charts[i].names[k]; k++)
            if (strcmp(charts[i].names[k], name) == 0)
                return true;
    for (size_t i = 0; i < sizeof not_charted / sizeof not_charted[0]; i++)
        if (strcmp(name, not_charted[i]) == 0)
            return true;
    return false;
}

static void curves(FILE *f, const struct dt_report *r)
{
    fputs("<h2>Curves</h2>\n<div class=\"charts\">\n", f);
    for (size_t i = 0; i < sizeof charts / sizeof charts[0]; i++) {
        int n = 0;
        while (n < 5 && charts[i].names[n])
            n++;
        dt_report_svg_chart(f, r, charts[i].title, charts[i].names, n);
    }
    for (int i = 0; i < r->n_series; i++) /* whatever else the trainer logs, one chart each */
        if (!charted(r->series[i].name)) {
            const char *one[1] = {r->series[i].name};
            dt_report_svg_chart(f, r, r->series[i].name, one, 1);
        }
    fputs("</div>\n", f);
}

static void heading(FILE *f, const struct dt_report *r)
{
    const char *name = json_string_value(json_object_get(r->summary, "name"));
    const char *id = json_string_value(json_object_get(r->summary, "run_id"));
    const char *status = json_string_value(json_object_get(r->summary, "status"));
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>dtrain report: ", f);
    esc(f, name ? name : r->run_dir);
    fprintf(f, "</title>\n<style>%s</style></head>\n<body>\n<h1>dtrain report: ", style);
    esc(f, name ? name : r->run_dir);
    if (id) {
        fputs(" <small>", f);
        esc(f, id);
        fputs("</small>", f);
    }
    fputs("</h1>\n", f);
    if (status && strcmp(status, "succeeded") != 0) {
        const json_t *first = json_object_get(r->summary, "first_failure");
        const char *why = json_string_value(json_object_get(first, "description"));
        fputs("<p class=\"failed\">The run ", f);
        esc(f, status);
        if (why) {
            fputs(": ", f);
            esc(f, why);
        }
        fputs("</p>\n", f);
    }
}

int dt_report_write(const struct dt_report *r, FILE *f)
{
    /* "trainer" is trainer_summary.json again: it has its own table */
    static const char *const summary_skip[] = {"attempts", "first_failure", "version", "trainer", NULL};
    char findings[4096];
    heading(f, r);
    fputs("<h2>Findings</h2>\n", f);
    dt_report_diagnose(r, findings, sizeof findings);
    for (char *line = strtok(findings, "\n"); line; line = strtok(NULL, "\n")) {
        fputs("<p class=\"finding\">", f);
        esc(f, line);
        fputs("</p>\n", f);
    }
    split_bar(f, r);
    curves(f, r);
    if (r->summary) {
        fputs("<h2>Run</h2>\n", f);
        table(f, "summary", r->summary, summary_skip);
    }
    if (r->trainer) {
        fputs("<h2>Trainer</h2>\n", f);
        table(f, "trainer", r->trainer, NULL);
    }
    fprintf(f, "<p><small>%zu metrics rows from ", r->rows);
    esc(f, r->run_dir);
    fputs("/metrics.jsonl</small></p>\n</body></html>\n", f);
    return ferror(f) ? dt_error_set(DT_EIO, "writing the report failed (disk full?)") : 0;
}
