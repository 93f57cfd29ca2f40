/* report_html.c - the page of `dtrain report` (see report.h).
 *
 * Sections: run (summary.json), trainer figures (trainer_summary.json),
 * findings (what limits the run), step-time split, curves.  The page carries
 * its own small stylesheet and no script, so it opens from a file on a
 * machine with no network.  Not for the charts' geometry (report_svg.c).
 */
#include "launcher/report.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "comm/error.h"

/* The parts of a step the trainer may log per row (seconds per step). */
static const char *const split_names[] = {"data_s", "forward_s", "backward_s", "comm_wait_s", "optimizer_s"};
static const char *const split_labels[] = {"data wait", "forward", "backward", "communication wait", "optimizer"};
#define N_SPLIT 5
static const char *const split_colors[] = {"#ff7f0e", "#1f77b4", "#9467bd", "#d62728", "#2ca02c"};

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
static void cell(FILE *f, const struct dt_json *v)
{
    if (v->type == DT_JSON_STRING) {
        esc(f, v->str);
    } else if (v->type == DT_JSON_NUMBER) {
        fprintf(f, "%.6g", v->num);
    } else if (v->type == DT_JSON_ARRAY) {
        for (const struct dt_json *c = v->child; c; c = c->next) {
            cell(f, c);
            fputs(c->next ? " " : "", f);
        }
    } else if (v->type == DT_JSON_OBJECT) {
        fputs("{", f);
        for (const struct dt_json *c = v->child; c; c = c->next) {
            esc(f, c->key);
            fputs(": ", f);
            cell(f, c);
            fputs(c->next ? ", " : "", f);
        }
        fputs("}", f);
    } else {
        fputs(v->type == DT_JSON_NULL ? "&mdash;" : v->type == DT_JSON_TRUE ? "true" : "false", f);
    }
}

/* Every top-level member except those named in skip (NULL-terminated). */
static void table(FILE *f, const char *id, const struct dt_json *obj, const char *const *skip)
{
    fprintf(f, "<table id=\"%s\">\n", id);
    for (const struct dt_json *m = obj->child; m; m = m->next) {
        bool skipped = false;
        for (int i = 0; skip && skip[i]; i++)
            skipped |= strcmp(skip[i], m->key) == 0;
        if (skipped)
            continue;
        fputs("<tr><th>", f);
        esc(f, m->key);
        fputs("</th><td>", f);
        cell(f, m);
        fputs("</td></tr>\n", f);
    }
    fputs("</table>\n", f);
}

static double mean_of(const struct dt_report_series *s)
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

/* Mean seconds per step of each part of the split; false if the rows have none. */
static bool split_means(const struct dt_report *r, double *part, double *total)
{
    bool any = false;
    *total = 0;
    for (int i = 0; i < N_SPLIT; i++) {
        part[i] = mean_of(dt_report_series(r, split_names[i]));
        any |= isfinite(part[i]);
        *total += isfinite(part[i]) ? part[i] : 0;
    }
    return any && *total > 0;
}

/* Shares of step time spent waiting for data and for communication: from the
 * per-row split when the trainer logs one, else from trainer_summary.json. */
static bool wait_shares(const struct dt_report *r, double *data, double *comm, const char **source)
{
    double part[N_SPLIT], total, train, dw, cw;
    if (split_means(r, part, &total)) {
        *data = isfinite(part[0]) ? part[0] / total : 0;
        *comm = isfinite(part[3]) ? part[3] / total : 0;
        *source = "per-step split in metrics.jsonl";
        return true;
    }
    if (dt_json_get_num(r->trainer, "train_seconds", &train) && train > 0 &&
        dt_json_get_num(r->trainer, "data_wait_seconds", &dw) && dt_json_get_num(r->trainer, "comm_wait_seconds", &cw)) {
        *data = dw / train;
        *comm = cw / train;
        *source = "trainer_summary.json";
        return true;
    }
    return false;
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

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The rank whose work (train time less its waits, trainer_summary.json's
 * rank_work_seconds) is the largest, and how far it is over the median rank:
 * in a synchronous job every other rank waits that long for it each step. */
static bool straggler(const struct dt_report *r, int *rank, double *excess, double *median)
{
    const struct dt_json *w = dt_json_get(r->trainer, "rank_work_seconds");
    if (!w || w->type != DT_JSON_ARRAY || w->n < 2 || w->n > 4096)
        return false;
    double v[4096] = {0}, sorted[4096] = {0};
    size_t n = 0;
    for (const struct dt_json *e = w->child; e; e = e->next) {
        if (e->type != DT_JSON_NUMBER || !isfinite(e->num) || e->num <= 0)
            return false;
        v[n] = sorted[n] = e->num;
        n++;
    }
    qsort(sorted, n, sizeof *sorted, cmp_double);
    *median = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
    size_t worst = 0;
    for (size_t i = 1; i < n; i++)
        worst = v[i] > v[worst] ? i : worst;
    *rank = (int)worst;
    *excess = v[worst] / *median - 1;
    return true;
}

int dt_report_diagnose(const struct dt_report *r, char *buf, size_t size)
{
    struct says s = {buf, size, 0, 0};
    double data = 0, comm = 0, gpu = mean_of(dt_report_series(r, "gpu_util"));
    const char *src = "";
    buf[0] = 0;
    bool have = wait_shares(r, &data, &comm, &src);
    if (have && data > 0.10)
        say(&s, "Data loading limits the run: %.0f%% of step time is spent waiting for batches (%s). "
                "Raise data.workers or data.prefetch.\n", 100 * data, src);
    if (have && comm > 0.10)
        say(&s, "Communication is exposed: %.0f%% of step time is spent waiting for the gradient all-reduce "
                "(%s). Keep ddp.overlap on, try a larger ddp.bucket_cap_mb, or a faster backend.\n", 100 * comm, src);
    if (isfinite(gpu) && gpu < 50)
        say(&s, "The GPU is underused: %.0f%% utilisation on average (gpu_util). Raise data.batch_size or look "
                "for data waits.\n", gpu);
    int slow = -1;
    double excess = 0, median = 0;
    if (straggler(r, &slow, &excess, &median) && excess > 0.10)
        say(&s, "Rank %d is a straggler: %.1f s of work against a median rank's %.1f s (+%.0f%%), and the other "
                "ranks wait for it at every all-reduce (rank_work_seconds in trainer_summary.json). Look for "
                "other load on its host or core.\n", slow, (1 + excess) * median, median, 100 * excess);
    if (s.n == 0 && have)
        say(&s, "No bottleneck found: data wait %.1f%%, communication wait %.1f%% of step time (%s).\n",
            100 * data, 100 * comm, src);
    if (s.n == 0)
        say(&s, "No step-time figures in this run (no trainer_summary.json and no per-step split).\n");
    return s.n;
}

/* A horizontal bar of the step split with the share of each part. */
static void split_bar(FILE *f, const struct dt_report *r)
{
    double part[N_SPLIT], total, train, dw, cw;
    if (!split_means(r, part, &total)) {
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
        fprintf(f, "<text class=\"legend\" x=\"%.1f\" y=\"52\">%s %.0f%%</text>\n", x + 2, w > 60 ? label : "",
                100 * part[i] / total);
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
    {"Loss", {"loss", "test_loss"}},
    {"Test accuracy", {"test_accuracy"}},
    {"Learning rate", {"lr"}},
    {"Momentum (beta1)", {"beta1"}},
    {"Gradient norm", {"grad_norm"}},
    {"Throughput (samples/s)", {"samples_per_s"}},
    {"Step time split (s per step)", {"data_s", "forward_s", "backward_s", "comm_wait_s", "optimizer_s"}},
    {"Loss scale", {"loss_scale"}},
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
    const char *name = dt_json_get_str(r->summary, "name"), *id = dt_json_get_str(r->summary, "run_id");
    const char *status = dt_json_get_str(r->summary, "status");
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
        const char *why = dt_json_get_str(dt_json_get(r->summary, "first_failure"), "description");
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
    static const char *const summary_skip[] = {"attempts", "first_failure", "version", NULL};
    char findings[2048];
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
