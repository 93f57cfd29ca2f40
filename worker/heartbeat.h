/* heartbeat.h - a rank's heartbeat: a thread that reports the training step to the coordinator.
 *
 * The compute thread publishes its step with dt_heartbeat_step() (one relaxed
 * atomic store, nothing else); a thread of its own, on a store connection of
 * its own, sends HEARTBEAT(rank, step) every interval_s.  The two failure
 * modes the agent must tell apart stay apart: a process that is stopped
 * (SIGSTOP), dead or wedged as a whole goes silent, while a compute thread
 * that is stuck leaves the heartbeat going with a step that no longer moves.
 *
 * The same thread notices the coordinator's death: when no heartbeat has been
 * answered for lost_after_s (the rendezvous timeout), it calls on_lost with a
 * sentence naming the coordinator and the last error; the default prints it
 * and ends the process with exit status 1, so no rank outlives its job.
 *
 * Not for deciding that a rank hangs: the agent does (launcher/agent/agent_watchdog.c).
 */
#ifndef DT_HEARTBEAT_H
#define DT_HEARTBEAT_H

#include <stdint.h>

struct dt_heartbeat;
struct dt_store;

struct dt_heartbeat_options {
    int rank;
    double interval_s;   /* between reports, > 0 */
    double lost_after_s; /* coordinator unanswered this long: on_lost; > 0 */
    int64_t first_step;  /* reported until the first dt_heartbeat_step() */
    /* Called once, on the heartbeat thread, with the reason; NULL: print it on
     * stderr and _exit(1). */
    void (*on_lost)(void *ctx, const char *why);
    void *ctx;
};

/* Starts the thread on `store`, which the heartbeat then owns and closes
 * (give it a connection of its own: a store client serves one thread). */
int dt_heartbeat_start(const struct dt_heartbeat_options *o, struct dt_store *store,
                       struct dt_heartbeat **out);

/* Publishes the step just finished; async-signal-safe, never blocks.  h may be NULL. */
void dt_heartbeat_step(struct dt_heartbeat *h, int64_t step);

/* Heartbeats answered so far (tests). */
int64_t dt_heartbeat_sent(const struct dt_heartbeat *h);

/* Stops and joins the thread, closes its store connection; h may be NULL. */
void dt_heartbeat_stop(struct dt_heartbeat *h);

#endif
