/* obs_trace_write.c - test helper: records the spans of a simulated training
 * run with worker/trace.h, exactly as the trainer does (same tracks, same
 * nesting), and writes RUN_DIR/trace_rank<RANK>.json.
 *
 *   obs_trace_write RUN_DIR RANK STEPS NSTEPS [CAPACITY [SLOW]]
 *
 * STEPS is the window ("10-20"), NSTEPS how many steps run.  Each step: a
 * data wait, then step > forward, backward, optimizer on the compute track,
 * and four bucket all-reduces on the communication track, each starting when
 * its bucket is ready during backward (overlap), the last one after it; a checkpoint every 5
 * steps.  Times are synthetic (no sleeping): 1 ms units from the clock's now.
 * SLOW (ms) lengthens this rank's backward, as a straggler's.
 */
#include <stdio.h>
#include <stdlib.h>

#include "base/error.h"
#include "worker/trace.h"
#include "base/clock.h"

#define MS 1000000LL

static void launch_phases(struct dt_trace *t, int64_t t0)
{
    dt_trace_span(t, DT_TRACE_LAUNCH, "store connect", t0, t0 + 2 * MS);
    dt_trace_span(t, DT_TRACE_LAUNCH, "rendezvous", t0 + 2 * MS, t0 + 5 * MS);
    dt_trace_span(t, DT_TRACE_LAUNCH, "communicator init", t0 + 5 * MS, t0 + 9 * MS);
    dt_trace_span(t, DT_TRACE_LAUNCH, "trainer setup", t0 + 9 * MS, t0 + 20 * MS);
}

/* One step starting at t; returns when it ends. */
static int64_t step(struct dt_trace *t, int64_t s, int64_t at, int rank, int64_t slow)
{
    dt_trace_set_step(t, s);
    int64_t wait = (1 + rank % 2) * MS, fwd = 3 * MS, bwd = 6 * MS + slow;
    dt_trace_span(t, DT_TRACE_DATA, "data wait", at, at + wait);
    int64_t f0 = at + wait, b0 = f0 + fwd, b1 = b0 + bwd;
    dt_trace_span(t, DT_TRACE_COMPUTE, "forward", f0, b0);
    dt_trace_span(t, DT_TRACE_COMPUTE, "backward", b0, b1);
    int64_t c = 0;
    for (int k = 0; k < 4; k++) { /* bucket k is ready a quarter into backward; one all-reduce at a time */
        int64_t ready = b0 + (k + 1) * bwd / 4, c0 = ready > c ? ready : c;
        c = c0 + 2 * MS;
        dt_trace_span_arg(t, DT_TRACE_COMM, "allreduce", c0, c, "bucket", k);
    }
    int64_t o0 = c > b1 ? c : b1, o1 = o0 + MS, end = o1;
    dt_trace_span(t, DT_TRACE_COMPUTE, "optimizer", o0, o1);
    dt_trace_span(t, DT_TRACE_COMPUTE, "step", at, o1);
    if (s % 5 == 4) {
        dt_trace_span(t, DT_TRACE_COMPUTE, "checkpoint", o1, o1 + 4 * MS);
        end += 4 * MS;
    }
    return end;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: obs_trace_write RUN_DIR RANK STEPS NSTEPS [CAPACITY]\n");
        return 2;
    }
    struct dt_trace_spec w;
    struct dt_trace *t = NULL;
    int rank = atoi(argv[2]), n = atoi(argv[4]);
    int rc = dt_trace_parse_steps(argv[3], &w);
    if (!rc)
        rc = dt_trace_create(&w, rank, argc > 5 ? (size_t)atol(argv[5]) : 0, &t);
    if (!rc) {
        int64_t now = dt_clock_ns();
        launch_phases(t, now);
        int64_t at = now + 20 * MS;
        dt_trace_span(t, DT_TRACE_LAUNCH, "first step", at, at + 12 * MS);
        for (int s = 0; s < n; s++)
            at = step(t, s, at, rank, argc > 6 ? atoll(argv[6]) * MS : 0);
        rc = dt_trace_write_dir(t, argv[1]);
    }
    if (!rc)
        printf("rank %d: %zu spans, %zu dropped\n", rank, dt_trace_count(t), dt_trace_dropped(t));
    dt_trace_destroy(t);
    if (rc) {
        fprintf(stderr, "obs_trace_write: %s\n", dt_error_last());
        return 1;
    }
    return 0;
}
