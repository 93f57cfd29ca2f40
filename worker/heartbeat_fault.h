/* heartbeat_fault.h - fault injection for the fault-tolerance tests (DTRAIN_FAULT).
 *
 * DTRAIN_FAULT="ACTION:RANK:STEP[:ARG]" makes rank RANK of `dtrain worker`
 * misbehave right after it finishes optimizer step STEP (after that step's
 * checkpoint), on the first attempt only (DTRAIN_RESTART_COUNT 0 or unset),
 * so a restarted group runs clean:
 *   kill:R:S[:MS]  SIGKILL itself, MS milliseconds later (0 by default) from a
 *                  timer thread while training goes on, so the kill lands at
 *                  an arbitrary point of the following steps (mid all-reduce,
 *                  mid checkpoint write)
 *   stop:R:S       SIGSTOP itself (every thread stops: the heartbeat goes silent)
 *   hang:R:S       the compute thread sleeps for good; the heartbeat goes on
 * The faults are real (real signals, a real stuck thread): only their timing
 * is arranged.  Before stopping itself a rank prints one line on stderr with
 * the wall-clock time, so a test can measure how fast the agent reacts.
 *
 * Not for production use, and not for the heartbeat itself (heartbeat.h).
 */
#ifndef DT_HEARTBEAT_FAULT_H
#define DT_HEARTBEAT_FAULT_H

#include <stdbool.h>
#include <stdint.h>

enum dt_fault_action { DT_FAULT_NONE, DT_FAULT_KILL, DT_FAULT_STOP, DT_FAULT_HANG };

struct dt_heartbeat_fault {
    enum dt_fault_action action;
    int rank;
    int64_t step;
    int delay_ms; /* kill only */
};

/* Parses the DTRAIN_FAULT syntax above; errors name the bad part. */
int dt_heartbeat_fault_parse(const char *text, struct dt_heartbeat_fault *f);

/* Reads DTRAIN_FAULT for this rank and attempt: f->action is DT_FAULT_NONE
 * when it is unset, names another rank, or this is a restart. */
int dt_heartbeat_fault_from_env(int rank, int restart, struct dt_heartbeat_fault *f);

/* Acts when `step` is the fault's step (called after every optimizer step). */
void dt_heartbeat_fault_after_step(const struct dt_heartbeat_fault *f, int64_t step);

#endif
