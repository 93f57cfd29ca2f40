/* report_load.c - reads a run directory for `dtrain report` (see report.h).
 *
 * metrics.jsonl rows come in two shapes (worker/metrics.h): training rows
 * {"step", "epoch", "loss", "lr", ...} and evaluation rows {"step", "epoch",
 * "test_loss", "test_accuracy"}.  Each numeric member other than "step" is
 * appended to the series of its name at x = step; null (the trainer's
 * spelling of a non-finite value) is kept as NaN, a gap in the curve.  Lines
 * are parsed one at a time (base/json.h) and each tree freed after its row,
 * so a long run costs its numbers, not its JSON trees.
 */
#include "launcher/report/report.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

#define MAX_METRICS_BYTES ((size_t)1 << 30)

/* Names go into the page as they are, so only plain ones become series. */
static bool plain_name(const char *s)
{
    for (; *s; s++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./-", *s))
            return false;
    return true;
}

static struct dt_report_series *series_for(struct dt_report *r, const char *name)
{
    for (int i = 0; i < r->n_series; i++)
        if (strcmp(r->series[i].name, name) == 0)
            return &r->series[i];
    if (r->n_series == DT_REPORT_MAX_SERIES || strlen(name) >= sizeof r->series[0].name || !plain_name(name))
        return NULL; /* beyond what a page can show; the known series come first in every row */
    struct dt_report_series *s = &r->series[r->n_series++];
    snprintf(s->name, sizeof s->name, "%s", name);
    return s;
}

static int append(struct dt_report_series *s, double step, double value)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 256;
        double *a = realloc(s->step, cap * sizeof *a), *b = a ? realloc(s->value, cap * sizeof *b) : NULL;
        if (a)
            s->step = a;
        if (!b)
            return dt_error_set(DT_ENOMEM, "no memory for the %s series", s->name);
        s->value = b;
        s->cap = cap;
    }
    s->step[s->n] = step;
    s->value[s->n++] = value;
    return 0;
}

static struct dt_report_ranks *list_for(struct dt_report *r, const char *name)
{
    for (int i = 0; i < r->n_lists; i++)
        if (strcmp(r->lists[i].name, name) == 0)
            return &r->lists[i];
    if (r->n_lists == DT_REPORT_MAX_LISTS || strlen(name) >= sizeof r->lists[0].name || !plain_name(name))
        return NULL;
    struct dt_report_ranks *l = &r->lists[r->n_lists++];
    memset(l, 0, sizeof *l);
    snprintf(l->name, sizeof l->name, "%s", name);
    return l;
}

/* A per-rank list: each rank's number into its mean, and the mean over the
 * ranks that have one into the series of the list's name (the chart). */
static int take_list(struct dt_report *r, const char *key, const json_t *list, double step)
{
    struct dt_report_ranks *l = list_for(r, key);
    double sum = 0;
    int n = 0;
    size_t ranks = json_array_size(list) < DT_REPORT_MAX_RANKS ? json_array_size(list) : DT_REPORT_MAX_RANKS;
    for (size_t k = 0; l && k < ranks; k++) {
        const json_t *c = json_array_get(list, k);
        if (!json_is_number(c) || !isfinite(json_number_value(c)))
            continue;
        l->sum[k] += json_number_value(c);
        l->count[k]++;
        sum += json_number_value(c);
        n++;
    }
    if (l && (int)ranks > l->ranks)
        l->ranks = (int)ranks;
    struct dt_report_series *s = l ? series_for(r, key) : NULL;
    return s ? append(s, step, n ? sum / n : NAN) : 0;
}

static int take_row(struct dt_report *r, json_t *row, const char *path, int line)
{
    double step;
    const char *key;
    json_t *m;
    if (!json_is_object(row))
        return dt_error_set(DT_EINVAL, "%s:%d: a metrics line must be a JSON object", path, line);
    if (!dt_json_get_num(row, "step", &step))
        return dt_error_set(DT_EINVAL, "%s:%d: the row has no numeric \"step\"", path, line);
    json_object_foreach (row, key, m) {
        if (json_is_array(m)) {
            int rc = take_list(r, key, m, step);
            if (rc)
                return rc;
            continue;
        }
        if ((!json_is_number(m) && !json_is_null(m)) || strcmp(key, "step") == 0)
            continue;
        struct dt_report_series *s = series_for(r, key);
        int rc = s ? append(s, step, json_is_number(m) ? json_number_value(m) : NAN) : 0;
        if (rc)
            return rc;
    }
    r->rows++;
    return 0;
}

/* Every line of metrics.jsonl, each parsed and freed on its own. */
static int take_lines(struct dt_report *r, const char *path, const char *src, size_t len)
{
    const char *p = src, *end = src + len;
    int rc = 0;
    for (int line = 1; !rc && p < end; line++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *stop = nl ? nl : end;
        json_t *row = NULL;
        if (!nl)
            rc = dt_error_set(DT_EINVAL, "%s:%d: the last line has no newline (the file was cut short?)", path,
                              line);
        else if (stop == p)
            rc = dt_error_set(DT_EINVAL, "%s:%d: empty line", path, line);
        if (!rc)
            rc = dt_json_parse(p, (size_t)(stop - p), path, line, &row);
        if (!rc)
            rc = take_row(r, row, path, line);
        json_decref(row);
        p = stop + 1;
    }
    if (!rc && r->rows == 0)
        rc = dt_error_set(DT_EINVAL, "%s: empty (the run logged no step yet)", path);
    return rc;
}

static int load_metrics(struct dt_report *r)
{
    char path[4200], *src = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "%s/metrics.jsonl", r->run_dir);
    int rc = dt_json_read_run_file(path, MAX_METRICS_BYTES, &src, &len);
    if (rc == DT_ENOTFOUND)
        rc = dt_error_set(DT_ENOTFOUND, "%s: no metrics.jsonl (is this the run directory of a trainer job?)",
                          r->run_dir);
    if (!rc) /* only then: src is NULL when the file could not be read */
        rc = take_lines(r, path, src, len);
    free(src);
    return rc;
}

/* An optional JSON object of the run directory; absent is fine, broken is not. */
static int load_optional(struct dt_report *r, const char *name, json_t **out)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", r->run_dir, name);
    int rc = dt_json_load_run_file(path, 64 << 20, out);
    if (rc == DT_ENOTFOUND)
        return 0;
    if (!rc && !json_is_object(*out))
        rc = dt_error_set(DT_EINVAL, "%s: expected a JSON object", path);
    return rc;
}

int dt_report_load(const char *run_dir, struct dt_report *r)
{
    memset(r, 0, sizeof *r);
    if (snprintf(r->run_dir, sizeof r->run_dir, "%s", run_dir) >= (int)sizeof r->run_dir)
        return dt_error_set(DT_EINVAL, "run directory path too long");
    int rc = load_metrics(r);
    if (!rc)
        rc = load_optional(r, "summary.json", &r->summary);
    if (!rc)
        rc = load_optional(r, "trainer_summary.json", &r->trainer);
    if (rc)
        dt_report_free(r);
    return rc;
}

void dt_report_free(struct dt_report *r)
{
    for (int i = 0; i < r->n_series; i++) {
        free(r->series[i].step);
        free(r->series[i].value);
    }
    r->n_series = 0;
    r->n_lists = 0;
    json_decref(r->summary);
    json_decref(r->trainer);
    r->summary = r->trainer = NULL;
}

const struct dt_report_series *dt_report_series(const struct dt_report *r, const char *name)
{
    for (int i = 0; i < r->n_series; i++)
        if (strcmp(r->series[i].name, name) == 0 && r->series[i].n > 0)
            return &r->series[i];
    return NULL;
}

const struct dt_report_ranks *dt_report_ranks(const struct dt_report *r, const char *name)
{
    for (int i = 0; i < r->n_lists; i++)
        if (strcmp(r->lists[i].name, name) == 0 && r->lists[i].ranks > 0)
            return &r->lists[i];
    return NULL;
}

double dt_report_rank_mean(const struct dt_report_ranks *l, int k)
{
    return l && k >= 0 && k < l->ranks && l->count[k] ? l->sum[k] / l->count[k] : NAN;
}
