/* trace.c - Chrome trace spans in a ring (see trace.h).
 *
 * Output, the Trace Event Format's JSON object form:
 *   {"displayTimeUnit": "ms",
 *    "otherData": {"rank": R, "steps": "F-L", "spans": n, "dropped_spans": d},
 *    "traceEvents": [
 *      {"ph": "M", "pid": R, "tid": 0, "name": "process_name", "args": {"name": "rank R"}},
 *      {"ph": "M", "pid": R, "tid": k, "name": "thread_name", "args": {"name": "compute"}}, ...
 *      {"ph": "X", "pid": R, "tid": k, "name": "forward", "ts": 1700000000123456.789,
 *       "dur": 812.250, "args": {"step": 12}}, ...]}
 * ts is wall-clock time in microseconds (so the ranks of a multi-node job
 * line up in a merged trace as well as their hosts' clocks agree), taken as
 * the monotonic span times plus the wall-minus-monotonic offset read at
 * create; it is printed from integer nanoseconds, because a double cannot hold
 * 1.7e15 microseconds to the nanosecond.  tid = track + 1 (tid 0 is left to
 * process metadata).  Events are sorted by track, start, then longest first,
 * so a parent precedes the children it encloses.
 */
#include "worker/trace.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"
#include "base/json_escape.h"
#include "base/clock.h"
#include "base/fs.h"

#define MAX_LAUNCH 64

struct span {
    const char *name, *arg_name;
    int64_t t0, t1, arg;
    int32_t step, track;
};

struct dt_trace {
    struct dt_trace_spec window;
    int rank;
    int64_t wall_minus_mono; /* ns */
    atomic_bool active;
    atomic_int_fast64_t step;
    atomic_size_t next, n_launch;
    size_t cap;
    struct span launch[MAX_LAUNCH];
    struct span ring[]; /* cap entries */
};

static const char *const track_names[DT_TRACE_N_TRACKS] = {"launch", "compute", "communication", "data"};

int dt_trace_parse_steps(const char *text, struct dt_trace_spec *out)
{
    char *end;
    errno = 0;
    long long first = strtoll(text, &end, 10), last = first;
    bool ok = end != text && text[0] >= '0' && text[0] <= '9' && errno == 0;
    if (ok && *end == '-') {
        const char *b = end + 1;
        last = strtoll(b, &end, 10);
        ok = end != b && b[0] >= '0' && b[0] <= '9' && errno == 0;
    }
    if (!ok || *end || first < 0 || last < first || last > 1000000000)
        return dt_error_set(DT_EINVAL, "trace steps \"%s\": expected a range like \"10-20\" (first <= last) "
                                       "or one step", text);
    out->first_step = (int)first;
    out->last_step = (int)last;
    return 0;
}

int dt_trace_create(const struct dt_trace_spec *window, int rank, size_t capacity, struct dt_trace **out)
{
    if (window->first_step < 0 || window->last_step < window->first_step)
        return dt_error_set(DT_EINVAL, "trace window %d-%d is empty", window->first_step, window->last_step);
    if (capacity == 0)
        capacity = 65536;
    struct dt_trace *t = calloc(1, sizeof *t + capacity * sizeof(struct span));
    if (!t)
        return dt_error_set(DT_ENOMEM, "no memory for a trace of %zu spans", capacity);
    t->window = *window;
    t->rank = rank;
    t->cap = capacity;
    t->wall_minus_mono = dt_clock_wall_ns() - dt_clock_ns();
    atomic_init(&t->active, false);
    atomic_init(&t->step, -1);
    atomic_init(&t->next, 0);
    atomic_init(&t->n_launch, 0);
    *out = t;
    return 0;
}

void dt_trace_destroy(struct dt_trace *t)
{
    free(t);
}

void dt_trace_set_step(struct dt_trace *t, int64_t step)
{
    if (!t)
        return;
    atomic_store_explicit(&t->step, step, memory_order_relaxed);
    bool in = step >= t->window.first_step && step <= t->window.last_step;
    atomic_store_explicit(&t->active, in, memory_order_relaxed);
}

bool dt_trace_active(const struct dt_trace *t)
{
    return t && atomic_load_explicit(&t->active, memory_order_relaxed);
}

void dt_trace_span_arg(struct dt_trace *t, enum dt_trace_track track, const char *name, int64_t t0, int64_t t1,
                       const char *arg_name, int64_t arg)
{
    if (!t || (unsigned)track >= DT_TRACE_N_TRACKS)
        return;
    struct span *s;
    if (track == DT_TRACE_LAUNCH) {
        size_t i = atomic_fetch_add_explicit(&t->n_launch, 1, memory_order_relaxed);
        if (i >= MAX_LAUNCH)
            return;
        s = &t->launch[i];
    } else {
        if (!atomic_load_explicit(&t->active, memory_order_relaxed))
            return;
        size_t i = atomic_fetch_add_explicit(&t->next, 1, memory_order_relaxed);
        s = &t->ring[i % t->cap];
    }
    *s = (struct span){.name = name, .arg_name = arg_name, .t0 = t0, .t1 = t1 > t0 ? t1 : t0, .arg = arg,
                       .step = (int32_t)atomic_load_explicit(&t->step, memory_order_relaxed), .track = track};
}

void dt_trace_span(struct dt_trace *t, enum dt_trace_track track, const char *name, int64_t t0, int64_t t1)
{
    dt_trace_span_arg(t, track, name, t0, t1, NULL, 0);
}

size_t dt_trace_count(const struct dt_trace *t)
{
    if (!t)
        return 0;
    size_t n = atomic_load(&t->next), l = atomic_load(&t->n_launch);
    return (n < t->cap ? n : t->cap) + (l < MAX_LAUNCH ? l : MAX_LAUNCH);
}

size_t dt_trace_dropped(const struct dt_trace *t)
{
    if (!t)
        return 0;
    size_t n = atomic_load(&t->next), l = atomic_load(&t->n_launch);
    return (n > t->cap ? n - t->cap : 0) + (l > MAX_LAUNCH ? l - MAX_LAUNCH : 0);
}

/* ---- output ---- */

static int by_track_start_longest(const void *a, const void *b)
{
    const struct span *x = a, *y = b;
    if (x->track != y->track)
        return x->track < y->track ? -1 : 1;
    if (x->t0 != y->t0)
        return x->t0 < y->t0 ? -1 : 1;
    if (x->t1 != y->t1)
        return x->t1 > y->t1 ? -1 : 1;
    return 0;
}

/* Microseconds with three decimals from integer nanoseconds (non-negative). */
static void put_us(FILE *f, int64_t ns)
{
    fprintf(f, "%lld.%03lld", (long long)(ns / 1000), (long long)(ns % 1000));
}

static void put_metadata(FILE *f, int rank)
{
    fprintf(f, "  {\"ph\": \"M\", \"pid\": %d, \"tid\": 0, \"name\": \"process_name\", \"args\": "
               "{\"name\": \"rank %d\"}},\n", rank, rank);
    fprintf(f, "  {\"ph\": \"M\", \"pid\": %d, \"tid\": 0, \"name\": \"process_sort_index\", \"args\": "
               "{\"sort_index\": %d}}", rank, rank);
    for (int k = 0; k < DT_TRACE_N_TRACKS; k++) {
        fprintf(f, ",\n  {\"ph\": \"M\", \"pid\": %d, \"tid\": %d, \"name\": \"thread_name\", \"args\": "
                   "{\"name\": \"%s\"}},\n", rank, k + 1, track_names[k]);
        fprintf(f, "  {\"ph\": \"M\", \"pid\": %d, \"tid\": %d, \"name\": \"thread_sort_index\", \"args\": "
                   "{\"sort_index\": %d}}", rank, k + 1, k);
    }
}

static void put_span(FILE *f, const struct dt_trace *t, const struct span *s)
{
    fprintf(f, ",\n  {\"ph\": \"X\", \"pid\": %d, \"tid\": %d, \"name\": ", t->rank, s->track + 1);
    dt_json_put_str(f, s->name ? s->name : "?", DT_JSON_U);
    fputs(", \"ts\": ", f);
    put_us(f, s->t0 + t->wall_minus_mono);
    fputs(", \"dur\": ", f);
    put_us(f, s->t1 - s->t0);
    fputs(", \"args\": {", f);
    if (s->track != DT_TRACE_LAUNCH)
        fprintf(f, "\"step\": %d%s", s->step, s->arg_name ? ", " : "");
    if (s->arg_name) {
        dt_json_put_str(f, s->arg_name, DT_JSON_U);
        fprintf(f, ": %lld", (long long)s->arg);
    }
    fputs("}}", f);
}

/* The spans in time order per track: launch spans, then the ring's (oldest first). */
static struct span *collect(const struct dt_trace *t, size_t *n_out)
{
    size_t next = atomic_load(&t->next), nl = atomic_load(&t->n_launch);
    size_t nr = next < t->cap ? next : t->cap;
    nl = nl < MAX_LAUNCH ? nl : MAX_LAUNCH;
    struct span *all = malloc((nl + nr + 1) * sizeof *all);
    if (!all)
        return NULL;
    memcpy(all, t->launch, nl * sizeof *all);
    memcpy(all + nl, t->ring, nr * sizeof *all);
    qsort(all, nl + nr, sizeof *all, by_track_start_longest);
    *n_out = nl + nr;
    return all;
}

struct trace_out {
    const struct dt_trace *t;
    const struct span *all;
    size_t n;
};

static int put_trace(void *ctx, FILE *f)
{
    const struct trace_out *o = ctx;
    const struct dt_trace *t = o->t;
    fprintf(f,
            "{\"displayTimeUnit\": \"ms\",\n \"otherData\": {\"rank\": %d, \"steps\": \"%d-%d\", "
            "\"spans\": %zu, \"dropped_spans\": %zu},\n \"traceEvents\": [\n",
            t->rank, t->window.first_step, t->window.last_step, o->n, dt_trace_dropped(t));
    put_metadata(f, t->rank);
    for (size_t i = 0; i < o->n; i++)
        put_span(f, t, &o->all[i]);
    fputs("\n]}\n", f);
    return 0;
}

/* Through dt_fs_write_atomic: a reader (the launcher's merge) sees a whole
 * file, and nothing planted at the predictable name is written through. */
int dt_trace_write(const struct dt_trace *t, const char *path)
{
    if (!t)
        return 0;
    struct trace_out o = {.t = t};
    struct span *all = collect(t, &o.n);
    if (!all)
        return dt_error_set(DT_ENOMEM, "no memory to sort the trace for %s", path);
    o.all = all;
    int rc = dt_fs_write_atomic(path, false, put_trace, &o);
    free(all);
    return rc;
}

int dt_trace_write_dir(const struct dt_trace *t, const char *dir)
{
    if (!t)
        return 0;
    char path[4200];
    snprintf(path, sizeof path, "%s/trace_rank%d.json", dir ? dir : ".", t->rank);
    return dt_trace_write(t, path);
}
