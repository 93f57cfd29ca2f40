/* clock.h - the two clocks dtrain reads, in the units it uses.
 *
 * Durations, deadlines, timeouts and trace spans use CLOCK_MONOTONIC: it never
 * jumps when NTP or a user sets the time.  The wall clock (CLOCK_REALTIME) is
 * only for what must be compared across processes or machines: TensorBoard
 * event times, the start of a run in summary.json, trace alignment.
 * Inline because traces read the clock twice per span in the step loop; it is
 * a vDSO read, no system call.
 */
#ifndef DT_CLOCK_H
#define DT_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t dt__clock_read_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* CLOCK_MONOTONIC in nanoseconds and in seconds. */
static inline int64_t dt_clock_ns(void) { return dt__clock_read_ns(CLOCK_MONOTONIC); }
static inline double dt_clock_s(void) { return (double)dt_clock_ns() * 1e-9; }

/* CLOCK_REALTIME (Unix time) in nanoseconds and in seconds. */
static inline int64_t dt_clock_wall_ns(void) { return dt__clock_read_ns(CLOCK_REALTIME); }
static inline double dt_clock_wall_s(void) { return (double)dt_clock_wall_ns() * 1e-9; }

#endif
