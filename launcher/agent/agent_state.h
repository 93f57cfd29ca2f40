/* agent_state.h - the states of the agent's run on one node, the events that
 * move it, the deadline of each state, and how the job ends (agent_state.c).
 *
 * One attempt, then what comes between attempts:
 *
 *   IDLE ──spawned──► RUNNING ──first failure───────────────────► STOPPING ──grace over──► KILLING
 *    │                 │   └───first failure, on_exit may elect──► SETTLING   (SIGTERM sent)  (SIGKILL)
 *    │                 │        another (window over ──► STOPPING)
 *    │                 └─ stop, abort, coordinator lost, a signal, every rank gone ──► STOPPING
 *    └──spawn failed────────────────────────────────────────────────────────────────► KILLING
 *
 *   RUNNING, SETTLING, STOPPING, KILLING ──no process left──► DRAINING ──pipes read, or DRAIN_S──► DECIDING
 *   KILLING for UNKILLABLE_S (stuck in the kernel) ──► DECIDING
 *   DECIDING ──restart──► IDLE          PLACING ──placed──► IDLE
 *            ──over, decided, abort, replaced, a signal──► DONE    (PLACING and IDLE alike)
 *   IDLE ──place──► PLACING: node 0 forms the round first (an elastic job's; a fixed-size
 *                   job's with restarts, which may wait there for a lost node's replacement)
 *   RUNNING, SETTLING ──replaced──► STOPPING: a newer agent holds this node's place (this
 *                   one was cut off and came back): its ranks stop, the job goes on without it
 *
 * Deadlines are a function of the state alone: SETTLING lasts the election's
 * window (DT_AGENT__CAUSE_WINDOW_S), STOPPING the grace period, KILLING
 * UNKILLABLE_S, DRAINING DRAIN_S, each from when it was entered; the others
 * wait for an event.
 *
 * How the job ends is the machine's too (`end`): a signal to the agent
 * overrides every other reason; otherwise the weightier reason stands, the
 * first of two alike: INTERRUPTED > REPLACED > COORD_LOST > ABORTED > REQUEUED > DECIDED > NONE.
 * dt_agent__sm_outcome turns it, with the last attempt's failure and a
 * requeue, into the exit status.
 *
 * Pure: no clock is read, no signal sent.  The step returns what to do
 * (agent_procs.c's dt_agent__act does it); agent_supervise.c feeds the
 * events.  Not for which failure is first (agent_policy.c) nor for the
 * rounds across nodes (agent_rounds.h).
 */
#ifndef DT_AGENT_STATE_H
#define DT_AGENT_STATE_H

#include <stdbool.h>

/* How long after the first failure another may still be elected first
 * (agent_policy.c), and SIGTERM waits when on_exit lists statuses. */
#define DT_AGENT__CAUSE_WINDOW_S 1.0
#define DT_AGENT__UNKILLABLE_S 10.0 /* after SIGKILL: what is still there is stuck in the kernel (D state) */
/* Once no process is left, the pipes hold a finite rest; the bound matters
 * only if something outside the job tree kept a pipe open. */
#define DT_AGENT__DRAIN_S 1.0
#define DT_AGENT__SWEEP_MS 20 /* how often to look for what the ranks left, once they are gone */
#define DT_AGENT__KILL_MS 100 /* while killing: to notice processes that even SIGKILL does not end */

enum dt_agent__state {
    DT_AGENT__IDLE,     /* no process of the attempt yet */
    DT_AGENT__PLACING,  /* waiting for a place in a round the others form (an elastic job) */
    DT_AGENT__RUNNING,  /* the ranks run undisturbed; the watchdog looks at them */
    DT_AGENT__SETTLING, /* a rank failed; the others may end by themselves within the window */
    DT_AGENT__STOPPING, /* SIGTERM (or the agent's signal) sent; SIGKILL when the grace period is over */
    DT_AGENT__KILLING,  /* SIGKILL sent */
    DT_AGENT__DRAINING, /* no process left: the rest of their output is read */
    DT_AGENT__DECIDING, /* the attempt is over: whether the job restarts is being decided */
    DT_AGENT__DONE,     /* the job is over on this node */
};

enum dt_agent__event {
    DT_AGENT__EV_PLACE,        /* the attempt waits for its round: IDLE -> PLACING */
    DT_AGENT__EV_PLACED,       /* it has its place: PLACING -> IDLE */
    DT_AGENT__EV_SPAWNED,      /* every process of the attempt started */
    DT_AGENT__EV_SPAWN_FAILED, /* one could not start: the others must not wait for it */
    DT_AGENT__EV_FAILED,       /* the attempt's first failure: stop the others now */
    DT_AGENT__EV_FAILED_ELECT, /* the same, but a status on_exit lists may still be elected first */
    DT_AGENT__EV_STOP,         /* stop the attempt, the job may go on: another node failed, a hang */
    DT_AGENT__EV_ABORT,        /* stop, and the job ends with arg as its status */
    DT_AGENT__EV_COORD_LOST,   /* stop, and the job ends: the coordinator stopped answering */
    DT_AGENT__EV_REPLACED,     /* stop, and end here: a newer agent of this node's took its place */
    DT_AGENT__EV_INTERRUPT,    /* signal arg came to the agent: passed on, the job ends; a second kills */
    DT_AGENT__EV_REQUEUE,      /* SIGUSR1 (arg; 0: SIGUSR1) came and went on to the ranks: an exit 75
                                  is no failure */
    DT_AGENT__EV_REQUEUE_STOP, /* signal arg (SIGUSR1) came and some rank would die of it: stop them,
                                  the job ends to be requeued */
    DT_AGENT__EV_TICK,         /* time passed: the state's deadline may be due */
    DT_AGENT__EV_RANKS_GONE,   /* every rank reaped, what they left still runs (sent again each look) */
    DT_AGENT__EV_NO_CHILDREN,  /* no process of the attempt is left */
    DT_AGENT__EV_DRAINED,      /* every output pipe reached end of file */
    DT_AGENT__EV_ABANDON,      /* the agent cannot watch them any more (poll failed): the attempt ends */
    DT_AGENT__EV_RESTART,      /* the job runs another attempt: DECIDING -> IDLE */
    DT_AGENT__EV_DECIDED,      /* the job ends with arg, as the nodes agreed (or without this node) */
    DT_AGENT__EV_OVER,         /* nothing more to run: the job is over */
};

/* Why the job ends, lightest first (a heavier one replaces a lighter). */
enum dt_agent__end {
    DT_AGENT__END_NONE,        /* nothing has ended it: a failure restarts while restart_policy allows */
    DT_AGENT__END_DECIDED,     /* status: what the nodes agreed on at an attempt's end */
    DT_AGENT__END_REQUEUED,    /* the ranks were stopped on a signal (status holds it) to be requeued:
                                  DT_AGENT_EXIT_REQUEUE */
    DT_AGENT__END_ABORTED,     /* status: a hook's ABORT, a log that could not be written, the agent's error */
    DT_AGENT__END_COORD_LOST,  /* the coordinator stopped answering: status 1 */
    DT_AGENT__END_REPLACED,    /* this agent was fenced out by a newer one of its node: status 1; nothing
                                  of it may reach the other nodes, whose job goes on */
    DT_AGENT__END_INTERRUPTED, /* a signal to the agent (status holds it): 128 + signal */
};

/* What the step asks of the caller. */
enum dt_agent__do {
    DT_AGENT__DO_NOTHING,
    DT_AGENT__DO_SIGNAL,      /* sig to every rank's process group and to what they left */
    DT_AGENT__DO_SWEEP,       /* sig to what the ranks left (they are gone) and to their groups */
    DT_AGENT__DO_FIRST_SWEEP, /* the same, the attempt's first: count them and say so */
    DT_AGENT__DO_GIVE_UP,     /* processes outlived SIGKILL: say so and stop waiting for them */
};

struct dt_agent__act {
    enum dt_agent__do what;
    int sig;
};

struct dt_agent__sm {
    enum dt_agent__state state;
    double since;   /* when it was entered (CLOCK_MONOTONIC seconds) */
    double grace_s; /* how long STOPPING lasts */
    /* this attempt (reset on entering IDLE) */
    int stop_sig;      /* what STOPPING sent the ranks; 0 while they were not stopped */
    bool killed;       /* SIGKILL went to them */
    bool swept;        /* what they left was looked for */
    int requeue_exits; /* ranks that exited DT_AGENT_EXIT_REQUEUE after SIGUSR1 */
    /* the job */
    enum dt_agent__end end;
    int end_status;     /* DECIDED, ABORTED: the exit status; INTERRUPTED: the signal */
    bool requeue_asked; /* SIGUSR1 came and was passed on to the ranks */
    int requeue_sig;    /* which signal that was (SIGUSR1, or SIGUSR2, SIGALRM: signals_to_handle) */
};

/* IDLE, with the job's grace period. */
void dt_agent__sm_init(struct dt_agent__sm *m, double grace_s);
/* The one transition function: event e (with arg, see the enum) at time now. */
struct dt_agent__act dt_agent__sm_step(struct dt_agent__sm *m, enum dt_agent__event e, int arg, double now);
/* When the state's time is up, or -1 for a state that waits for an event. */
double dt_agent__sm_deadline(const struct dt_agent__sm *m);
/* How long the supervision loop may sleep at `now` (ms, -1: until an event);
 * ranks_gone: every rank was reaped while processes are left. */
int dt_agent__sm_wait_ms(const struct dt_agent__sm *m, double now, bool ranks_gone);
/* The attempt still has processes to watch (RUNNING to DRAINING). */
bool dt_agent__sm_supervising(const struct dt_agent__sm *m);
/* A reason to end the job that no attempt's end changes (a requeue stop, an
 * abort, a lost coordinator, a signal). */
bool dt_agent__sm_ending(const struct dt_agent__sm *m);
/* Whether the agent sent sig to the ranks in this attempt (a death by it is no failure of theirs). */
bool dt_agent__sm_sent(const struct dt_agent__sm *m, int sig);
/* A rank's exit with wstatus: true (and counted) when it is its stop for a requeue. */
bool dt_agent__sm_requeue_exit(struct dt_agent__sm *m, int wstatus);

/* How the job ended on this node. */
struct dt_agent__outcome {
    bool failed, interrupted; /* neither: it succeeded */
    int exit_status;
    int signal; /* the signal that interrupted it (SIGUSR1 for a requeue), or 0 */
};
/* From the machine and the last attempt's failure: failed_status, its exit
 * status (-1 when it did not fail); rank_failed, a rank of it failed. */
struct dt_agent__outcome dt_agent__sm_outcome(const struct dt_agent__sm *m, int failed_status, bool rank_failed);

const char *dt_agent__state_name(enum dt_agent__state s);

#endif
