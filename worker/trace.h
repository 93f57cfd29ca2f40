/* trace.h - per-rank Chrome trace of chosen steps and of start-up.
 *
 * The trainer records spans (data wait, forward, backward, each bucket's
 * all-reduce, optimizer, checkpoint) for the steps of the spec's
 * trace: {steps: "10-20"} window, and the start-up phases (store connect,
 * communicator ready, first step) always; dt_trace_write puts them in
 * <run dir>/trace_rank<N>.json as Chrome trace event JSON ("X" complete
 * events, ts and dur in microseconds), which chrome://tracing, Perfetto and
 * `dtrain trace merge` read.  Each track is its own thread row (tid), so the
 * communication row shows how all-reduces overlap backward.
 *
 * Cost: spans go into a ring allocated at create; recording one is a clock
 * read, an atomic increment and a 48-byte store, safe from any thread, no
 * allocation and no lock.  When the window holds more spans than the ring,
 * the oldest are overwritten and the file says how many were dropped.  Every
 * function accepts a NULL trace and does nothing, so call sites need no test.
 *
 * Names and argument names are stored as pointers: pass string literals.
 * Not for metrics (metrics.h) or for the launcher's own timeline.
 */
#ifndef DT_TRACE_H
#define DT_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spec/trainer_spec.h"

enum dt_trace_track {
    DT_TRACE_LAUNCH,  /* start-up phases, recorded whatever the window */
    DT_TRACE_COMPUTE, /* step > forward, backward, optimizer; checkpoint */
    DT_TRACE_COMM,    /* collectives (one span per bucket) */
    DT_TRACE_DATA,    /* waiting for the loader */
    DT_TRACE_N_TRACKS
};

struct dt_trace;

/* A trace of `window` (steps first..last inclusive) for `rank`; capacity is
 * the ring's size in spans (0: 65536).  Fails for an empty window. */
int dt_trace_create(const struct dt_trace_spec *window, int rank, size_t capacity, struct dt_trace **out);
void dt_trace_destroy(struct dt_trace *t);

/* Parses "10-20" or "15" into a window; the same rule as the job spec's trace.steps. */
int dt_trace_parse_steps(const char *text, struct dt_trace_spec *out);

/* Says which optimizer step runs next; spans are kept while it is in the window. */
void dt_trace_set_step(struct dt_trace *t, int64_t step);

/* True while spans are kept (lets a caller skip reading the clock). */
bool dt_trace_active(const struct dt_trace *t);

/* Records [t0, t1) on a track if the current step is in the window (the
 * launch track: always). */
void dt_trace_span(struct dt_trace *t, enum dt_trace_track track, const char *name, int64_t t0, int64_t t1);

/* The same with one integer argument shown in the viewer (e.g. "bucket", 3). */
void dt_trace_span_arg(struct dt_trace *t, enum dt_trace_track track, const char *name, int64_t t0, int64_t t1,
                       const char *arg_name, int64_t arg);

/* Spans recorded so far and spans lost to the ring wrapping. */
size_t dt_trace_count(const struct dt_trace *t);
size_t dt_trace_dropped(const struct dt_trace *t);

/* Writes the JSON file (whole or not at all: base/fs.h's
 * dt_fs_write_atomic); dt_trace_write_dir names it <dir>/trace_rank<N>.json.
 * Call when no thread records any more. */
int dt_trace_write(const struct dt_trace *t, const char *path);
int dt_trace_write_dir(const struct dt_trace *t, const char *dir);

#endif
