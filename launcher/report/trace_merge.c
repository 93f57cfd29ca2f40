/* trace_merge.c - the merge of `dtrain trace merge` (see trace_merge.h): one
 * Chrome trace out of every rank's.
 *
 * Each rank of a traced run writes <run dir>/trace_rank<N>.json
 * (worker/trace.h).  Merging gives every rank its own process row (pid = rank,
 * named "rank N"), keeps each rank's tracks (launch, compute, communication,
 * data) and adds, when the run directory holds the launcher's summary.json, a
 * "dtrain launch" row with each attempt and each rank's life from spawn to
 * exit, so a slow start-up shows where it went.  It then prints each rank's
 * time per step and names a straggler.  Timestamps are wall-clock
 * microseconds in every input, so nothing is shifted.  Events are written
 * back member by member as jansson read them: integers exactly, reals as the
 * double nearest their text, in 17 digits (a timestamp of today in µs keeps
 * a quarter of a µs; the per-rank files have the nanosecond).
 *
 * Not for the command line (cmd_trace.c), recording spans (worker/trace.c) or
 * reading JSON (base/json.h).
 */
#include "launcher/report/trace_merge.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/error.h"
#include "base/fs.h"
#include "base/json.h"
#include "base/json_escape.h"

#define MAX_INPUTS 4096
#define MAX_FILE_BYTES ((size_t)2 << 30)
/* Ranks and attempt numbers beyond are garbage, and kept below INT_MAX the
 * pid after the last rank and the tid of a rank's row are ints. */
#define MAX_RANK 1000000

struct input {
    char path[4200];
    int rank;
    bool found;   /* found in a run directory, not named: a link there is not followed */
    json_t *doc;
};

struct merge {
    struct input *in;
    int n, cap;
    const char *run_dir;   /* the one directory given, for summary.json */
    const char *out;
};

/* N from ".../trace_rank<N>.json", or -1 (also for an N beyond MAX_RANK). */
static int rank_from_name(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (strncmp(base, "trace_rank", 10) != 0 || base[10] < '0' || base[10] > '9')
        return -1;
    char *end;
    errno = 0;
    long rank = strtol(base + 10, &end, 10); /* not sscanf's %d: overflow is undefined there */
    if (errno || rank > MAX_RANK || strcmp(end, ".json") != 0)
        return -1;
    return (int)rank;
}

static int add_input(struct merge *m, const char *path, bool found)
{
    if (m->n >= MAX_INPUTS)
        return dt_error_set(DT_EINVAL, "more than %d trace files", MAX_INPUTS);
    if (m->n == m->cap) { /* grown, not a static table: most runs have a few ranks */
        int cap = m->cap ? 2 * m->cap : 8;
        struct input *in = realloc(m->in, (size_t)cap * sizeof *in);
        if (!in)
            return dt_error_set(DT_ENOMEM, "no memory for %d trace files", cap);
        m->in = in;
        m->cap = cap;
    }
    struct input *in = &m->in[m->n++];
    snprintf(in->path, sizeof in->path, "%s", path);
    in->rank = rank_from_name(path);
    in->found = found;
    in->doc = NULL;
    return 0;
}

static int by_rank(const void *a, const void *b)
{
    const struct input *x = a, *y = b;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

/* Every trace_rank<N>.json in dir, in rank order. */
static int add_dir(struct merge *m, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return dt_error_set_errno(errno == ENOENT ? DT_ENOTFOUND : DT_EIO, errno, "cannot open the run directory %s",
                                  dir);
    int first = m->n, rc = 0;
    struct dirent *e;
    while (!rc && (e = readdir(d))) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (rank_from_name(e->d_name) >= 0)
            rc = add_input(m, path, true);
    }
    closedir(d);
    if (!rc && m->n == first)
        rc = dt_error_set(DT_ENOTFOUND, "%s holds no trace_rank<N>.json (run the job with --trace or "
                                        "trace: {steps: \"10-20\"} in its trainer: section)", dir);
    if (!rc) /* m->in is still NULL when nothing was added */
        qsort(m->in + first, (size_t)(m->n - first), sizeof *m->in, by_rank);
    return rc;
}

/* The events array of a trace: the object form {"traceEvents": [...]} or a bare array. */
static json_t *events_of(json_t *doc)
{
    json_t *ev = json_is_array(doc) ? doc : json_object_get(doc, "traceEvents");
    return json_is_array(ev) ? ev : NULL;
}

/* otherData.rank, when the trace has one, as the input's rank. */
static int take_rank(struct input *in)
{
    const json_t *r = json_object_get(json_object_get(in->doc, "otherData"), "rank");
    double k = json_number_value(r);
    if (!json_is_number(r))
        return 0;
    if (!(k >= 0 && k <= MAX_RANK && k == floor(k))) {
        char text[48];
        if (json_is_integer(r))
            snprintf(text, sizeof text, "%" JSON_INTEGER_FORMAT, json_integer_value(r));
        else
            snprintf(text, sizeof text, "%.15g", k);
        return dt_error_set(DT_EINVAL, "%s: otherData.rank is %s, not a rank (a whole number from 0 to %d)",
                            in->path, text, MAX_RANK);
    }
    in->rank = (int)k;
    return 0;
}

static int load(struct input *in, int index)
{
    json_t *ev, *e;
    size_t i;
    int rc = in->found ? dt_json_load_run_file(in->path, MAX_FILE_BYTES, &in->doc)
                       : dt_json_load_file(in->path, MAX_FILE_BYTES, &in->doc);
    if (rc)
        return rc;
    if (!(ev = events_of(in->doc)))
        return dt_error_set(DT_EINVAL, "%s: not a Chrome trace (no \"traceEvents\" array)", in->path);
    json_array_foreach (ev, i, e)
        if (!json_is_string(json_object_get(e, "ph")))
            return dt_error_set(DT_EINVAL,
                                "%s: traceEvents[%zu]: a trace event must be an object with a \"ph\" string",
                                in->path, i);
    rc = take_rank(in);
    if (!rc && in->rank < 0)
        in->rank = index;
    return rc;
}

/* One event with its pid replaced by the rank (added if it had none). */
static void write_event(FILE *f, json_t *e, int pid)
{
    const char *key;
    json_t *v;
    fprintf(f, "{\"pid\": %d", pid);
    json_object_foreach (e, key, v) {
        if (strcmp(key, "pid") == 0)
            continue;
        fputs(", ", f);
        dt_json_put_str(f, key, DT_JSON_U);
        fputs(": ", f);
        json_dumpf(v, f, JSON_ENCODE_ANY | JSON_REAL_PRECISION(17));
    }
    fputc('}', f);
}

/* The launcher's start as Unix seconds: "started_unix" when summary.json has
 * it, else "started_at" (whole seconds, so the row is aligned only that well). */
static bool launch_anchor(const json_t *s, double *unix_s, bool *coarse)
{
    *coarse = false;
    if (dt_json_get_num(s, "started_unix", unix_s))
        return true;
    const char *at = json_string_value(json_object_get(s, "started_at"));
    struct tm tm = {0};
    if (!at || !strptime(at, "%Y-%m-%dT%H:%M:%SZ", &tm))
        return false;
    *unix_s = (double)timegm(&tm);
    *coarse = true;
    return true;
}

/* A span of the launch row; none when a garbled summary.json puts it beyond
 * a double (1e308 s), as printf would write "inf", which is not JSON. */
static void write_x(FILE *f, int pid, int tid, const char *name, double t0_us, double t1_us, const char *args)
{
    double dur = t1_us > t0_us ? t1_us - t0_us : 0;
    if (!isfinite(t0_us) || !isfinite(dur))
        return;
    fprintf(f, ",\n{\"ph\": \"X\", \"pid\": %d, \"tid\": %d, \"name\": \"%s\", \"ts\": %.3f, \"dur\": %.3f, "
               "\"args\": {%s}}", pid, tid, name, t0_us, dur, args);
}

static void write_meta(FILE *f, int pid, int tid, const char *what, const char *key, const char *value)
{
    fprintf(f, ",\n{\"ph\": \"M\", \"pid\": %d, \"tid\": %d, \"name\": \"%s\", \"args\": {\"%s\": %s}}", pid, tid,
            what, key, value);
}

/* A "dtrain launch" process: tid 1 the attempts, tid 2 + r the life of rank r. */
static void write_launch_row(FILE *f, const json_t *s, int pid)
{
    double base, t0, t1, rank;
    bool coarse;
    json_t *attempts = json_object_get(s, "attempts"), *a, *r;
    size_t i, j;
    if (!launch_anchor(s, &base, &coarse) || !isfinite(base * 1e6) || !json_is_array(attempts))
        return;
    base *= 1e6;
    write_meta(f, pid, 0, "process_name", "name",
               coarse ? "\"dtrain launch (aligned to the second)\"" : "\"dtrain launch\"");
    write_meta(f, pid, 0, "process_sort_index", "sort_index", "-1");
    write_meta(f, pid, 1, "thread_name", "name", "\"attempts\"");
    /* Each rank's row is named once, and only the rows of ranks that ran:
     * naming every row up to the highest rank let one bogus rank of 999999 in
     * summary.json write a million names. */
    uint8_t *named = calloc(MAX_RANK / 8 + 1, 1);
    if (!named)
        return;
    json_array_foreach (attempts, i, a) {
        char args[64];
        double k = 0;
        if (dt_json_get_num(a, "attempt", &k) && k >= 0 && k <= MAX_RANK)
            snprintf(args, sizeof args, "\"attempt\": %d", (int)k);
        else
            args[0] = 0; /* the spans stay, unlabelled */
        if (dt_json_get_num(a, "start_s", &t0) && dt_json_get_num(a, "end_s", &t1))
            write_x(f, pid, 1, "attempt", base + t0 * 1e6, base + t1 * 1e6, args);
        json_array_foreach (json_object_get(a, "ranks"), j, r) {
            if (!dt_json_get_num(r, "rank", &rank) || rank < 0 || rank > MAX_RANK ||
                !dt_json_get_num(r, "spawn_s", &t0))
                continue;
            if (!dt_json_get_num(r, "exit_s", &t1))
                t1 = t0;
            int k = (int)rank;
            if (!(named[k / 8] & (1u << (k % 8)))) {
                char name[48];
                snprintf(name, sizeof name, "\"rank %d process\"", k);
                write_meta(f, pid, 2 + k, "thread_name", "name", name);
                named[k / 8] |= (uint8_t)(1u << (k % 8));
            }
            write_x(f, pid, 2 + k, "spawn to exit", base + t0 * 1e6, base + t1 * 1e6, args);
        }
    }
    free(named);
}

struct merged_out {
    struct merge *m;
    const json_t *summary;
};

static int write_merged_to(void *ctx, FILE *f)
{
    struct merge *m = ((struct merged_out *)ctx)->m;
    const json_t *summary = ((struct merged_out *)ctx)->summary;
    json_t *e;
    size_t k;
    fputs("{\"displayTimeUnit\": \"ms\", \"otherData\": {\"merged_from\": [", f);
    for (int i = 0; i < m->n; i++) {
        dt_json_put_str(f, m->in[i].path, DT_JSON_U);
        fputs(i + 1 < m->n ? ", " : "", f);
    }
    fputs("]},\n\"traceEvents\": [\n", f);
    int max_rank = -1, first = 1;
    for (int i = 0; i < m->n; i++) {
        max_rank = m->in[i].rank > max_rank ? m->in[i].rank : max_rank;
        json_array_foreach (events_of(m->in[i].doc), k, e) {
            fputs(first ? "" : ",\n", f);
            first = 0;
            write_event(f, e, m->in[i].rank);
        }
    }
    if (first) /* keep the launch row's leading commas valid */
        fputs("{\"ph\": \"M\", \"pid\": 0, \"tid\": 0, \"name\": \"process_name\", \"args\": {\"name\": \"rank 0\"}}", f);
    if (summary)
        write_launch_row(f, summary, max_rank + 1);
    fputs("\n]}\n", f);
    return 0;
}

static int write_merged(struct merge *m, const json_t *summary)
{
    struct merged_out o = {m, summary};
    return dt_fs_write_atomic(m->out, false, write_merged_to, &o);
}

/* Mean per-step time of a rank's "step" spans and of its "comm wait" spans (µs). */
static bool step_means(json_t *doc, double *step_us, double *wait_us)
{
    double sum[2] = {0, 0}, dur;
    int n = 0;
    size_t i;
    json_t *e;
    json_array_foreach (events_of(doc), i, e) {
        const char *name = json_string_value(json_object_get(e, "name"));
        const char *ph = json_string_value(json_object_get(e, "ph"));
        if (!name || strcmp(ph, "X") || !dt_json_get_num(e, "dur", &dur))
            continue;
        if (strcmp(name, "step") == 0) {
            sum[0] += dur;
            n++;
        } else if (strcmp(name, "comm wait") == 0) {
            sum[1] += dur;
        }
    }
    *step_us = n ? sum[0] / n : 0;
    *wait_us = n ? sum[1] / n : 0;
    return n > 0;
}

static int by_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* In data-parallel training every rank's step lasts as long as the slowest
 * rank's work, the others wait in "comm wait"; so the work per step (step
 * minus comm wait) tells a straggler: named when 10% over the median rank. */
static void say_stragglers(const struct merge *m, FILE *says)
{
    double work[MAX_INPUTS], sorted[MAX_INPUTS], step, wait;
    int n = 0;
    for (int i = 0; i < m->n; i++) {
        work[i] = step_means(m->in[i].doc, &step, &wait) ? step - wait : NAN;
        if (!isnan(work[i])) {
            sorted[n++] = work[i];
            fprintf(says, "rank %d: %.3f ms per step, of which %.3f ms waiting for communication\n",
                    m->in[i].rank, step / 1000, wait / 1000);
        }
    }
    if (n < 2)
        return;
    qsort(sorted, (size_t)n, sizeof *sorted, by_double);
    double median = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
    for (int i = 0; i < m->n; i++)
        if (!isnan(work[i]) && median > 0 && work[i] > 1.1 * median)
            fprintf(says,
                    "rank %d is a straggler: %.3f ms of work per step against a median of %.3f ms (+%.0f%%); "
                    "the other ranks wait for it\n",
                    m->in[i].rank, work[i] / 1000, median / 1000, 100 * (work[i] / median - 1));
}

/* summary.json of the run directory, if there is one; a broken one is an error. */
static int load_summary(struct merge *m, json_t **out)
{
    *out = NULL;
    if (!m->run_dir)
        return 0;
    char path[4200];
    snprintf(path, sizeof path, "%s/summary.json", m->run_dir);
    int rc = dt_json_load_run_file(path, 64 << 20, out);
    return rc == DT_ENOTFOUND ? 0 : rc;
}

static int merge(struct merge *m, char *const *inputs, int n_inputs, FILE *says)
{
    int rc = 0;
    struct stat st;
    for (int i = 0; !rc && i < n_inputs; i++) {
        if (stat(inputs[i], &st) != 0)
            rc = dt_error_set_errno(DT_ENOTFOUND, errno, "%s", inputs[i]);
        else if (S_ISDIR(st.st_mode))
            rc = add_dir(m, inputs[i]);
        else
            rc = add_input(m, inputs[i], false);
    }
    for (int i = 0; !rc && i < m->n; i++)
        rc = load(&m->in[i], i);
    for (int i = 0; !rc && i < m->n; i++)
        for (int j = 0; !rc && j < i; j++)
            if (m->in[i].rank == m->in[j].rank)
                rc = dt_error_set(DT_EINVAL, "%s and %s are both rank %d's trace", m->in[j].path, m->in[i].path,
                                  m->in[i].rank);
    json_t *summary = NULL;
    if (!rc)
        rc = load_summary(m, &summary);
    if (!rc)
        rc = write_merged(m, summary);
    if (!rc)
        say_stragglers(m, says);
    json_decref(summary);
    return rc;
}

int dt_trace_merge(char *const *inputs, int n_inputs, const char *run_dir, const char *out, FILE *says,
                   int *merged)
{
    struct merge m = {.run_dir = run_dir, .out = out};
    int rc = merge(&m, inputs, n_inputs, says);
    *merged = m.n;
    for (int i = 0; i < m.n; i++)
        json_decref(m.in[i].doc);
    free(m.in);
    return rc;
}
