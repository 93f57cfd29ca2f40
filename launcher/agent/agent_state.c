/* agent_state.c - the agent's state machine: its one transition function,
 * the deadline of each state, and the job's outcome (agent_state.h draws it).
 *
 * Every flag and deadline of an attempt used to be a field of its own
 * (stopping, killing, kill_at, settle_until, ...), assigned wherever an
 * event was noticed; here each event moves one state, and what the caller
 * must send follows from the move.  Nothing here reads the clock or signals
 * a process, so every transition is a unit test (tests/unit/test_agent_state.c).
 */
#include "launcher/agent/agent_state.h"

#include "launcher/agent/agent.h"

#include <signal.h>
#include <stddef.h>
#include <sys/wait.h>

static const struct dt_agent__act NOTHING = {DT_AGENT__DO_NOTHING, 0};

static struct dt_agent__act act(enum dt_agent__do what, int sig)
{
    return (struct dt_agent__act){what, sig};
}

static void enter(struct dt_agent__sm *m, enum dt_agent__state s, double now)
{
    m->state = s;
    m->since = now;
}

static bool in(const struct dt_agent__sm *m, enum dt_agent__state a, enum dt_agent__state b)
{
    return m->state == a || m->state == b;
}

/* Between attempts: nothing runs, an ending ends the job at once. */
static bool between(const struct dt_agent__sm *m)
{
    return in(m, DT_AGENT__IDLE, DT_AGENT__PLACING) || m->state == DT_AGENT__DECIDING;
}

/* The weightier reason stands; a signal overrides any other. */
static void set_end(struct dt_agent__sm *m, enum dt_agent__end why, int status)
{
    if (why > m->end) {
        m->end = why;
        m->end_status = status;
    }
}

static void start_attempt(struct dt_agent__sm *m)
{
    m->stop_sig = 0;
    m->killed = m->swept = false;
    m->requeue_exits = 0;
}

/* RUNNING or SETTLING -> STOPPING: sig to the ranks, SIGKILL after the grace period. */
static struct dt_agent__act stop(struct dt_agent__sm *m, int sig, double now)
{
    if (!in(m, DT_AGENT__RUNNING, DT_AGENT__SETTLING))
        return NOTHING;
    enter(m, DT_AGENT__STOPPING, now);
    m->stop_sig = sig;
    return act(DT_AGENT__DO_SIGNAL, sig);
}

static struct dt_agent__act kill_all(struct dt_agent__sm *m, double now)
{
    if (!in(m, DT_AGENT__RUNNING, DT_AGENT__SETTLING) && m->state != DT_AGENT__STOPPING)
        return NOTHING;
    enter(m, DT_AGENT__KILLING, now);
    m->killed = true;
    return act(DT_AGENT__DO_SIGNAL, SIGKILL);
}

/* An ending: between attempts the job is over; during one, its ranks stop first. */
static struct dt_agent__act end_job(struct dt_agent__sm *m, int sig, double now)
{
    if (!between(m))
        return stop(m, sig, now);
    enter(m, DT_AGENT__DONE, now);
    return NOTHING;
}

static struct dt_agent__act tick(struct dt_agent__sm *m, double now)
{
    double d = dt_agent__sm_deadline(m);
    if (d < 0 || now < d)
        return NOTHING;
    switch (m->state) {
    case DT_AGENT__SETTLING:
        return stop(m, SIGTERM, now);
    case DT_AGENT__STOPPING:
        return kill_all(m, now);
    case DT_AGENT__KILLING:
        enter(m, DT_AGENT__DECIDING, now);
        return act(DT_AGENT__DO_GIVE_UP, 0);
    case DT_AGENT__DRAINING:
        enter(m, DT_AGENT__DECIDING, now);
        return NOTHING;
    default:
        return NOTHING;
    }
}

/* Every rank is gone and something they started is not: it is stopped as
 * they would have been, SIGTERM then SIGKILL, again at each look (each kill
 * can orphan a new generation). */
static struct dt_agent__act ranks_gone(struct dt_agent__sm *m, double now)
{
    if (in(m, DT_AGENT__RUNNING, DT_AGENT__SETTLING)) {
        enter(m, DT_AGENT__STOPPING, now);
        m->stop_sig = SIGTERM;
    }
    if (!in(m, DT_AGENT__STOPPING, DT_AGENT__KILLING))
        return NOTHING;
    int sig = m->state == DT_AGENT__KILLING ? SIGKILL : SIGTERM;
    if (m->swept)
        return act(DT_AGENT__DO_SWEEP, sig);
    m->swept = true;
    return act(DT_AGENT__DO_FIRST_SWEEP, sig);
}

static struct dt_agent__act interrupt(struct dt_agent__sm *m, int sig, double now)
{
    if (m->end == DT_AGENT__END_INTERRUPTED) /* the second: no more waiting */
        return kill_all(m, now);
    set_end(m, DT_AGENT__END_INTERRUPTED, sig);
    if (m->state == DT_AGENT__STOPPING) /* passed on too; SIGKILL stays due when it was */
        return act(DT_AGENT__DO_SIGNAL, sig);
    return end_job(m, sig, now);
}

struct dt_agent__act dt_agent__sm_step(struct dt_agent__sm *m, enum dt_agent__event e, int arg, double now)
{
    switch (e) {
    case DT_AGENT__EV_PLACE:
        if (m->state == DT_AGENT__IDLE)
            enter(m, DT_AGENT__PLACING, now);
        return NOTHING;
    case DT_AGENT__EV_PLACED:
        if (m->state == DT_AGENT__PLACING)
            enter(m, DT_AGENT__IDLE, now);
        return NOTHING;
    case DT_AGENT__EV_SPAWNED:
        if (m->state == DT_AGENT__IDLE) {
            start_attempt(m);
            enter(m, DT_AGENT__RUNNING, now);
        }
        return NOTHING;
    case DT_AGENT__EV_SPAWN_FAILED:
        if (m->state != DT_AGENT__IDLE)
            return NOTHING;
        start_attempt(m);
        enter(m, DT_AGENT__RUNNING, now);
        return kill_all(m, now);
    case DT_AGENT__EV_FAILED:
    case DT_AGENT__EV_STOP:
        return stop(m, SIGTERM, now);
    case DT_AGENT__EV_FAILED_ELECT:
        if (m->state == DT_AGENT__RUNNING)
            enter(m, DT_AGENT__SETTLING, now);
        return NOTHING;
    case DT_AGENT__EV_ABORT:
        set_end(m, DT_AGENT__END_ABORTED, arg);
        return end_job(m, SIGTERM, now);
    case DT_AGENT__EV_COORD_LOST:
        set_end(m, DT_AGENT__END_COORD_LOST, 1);
        return end_job(m, SIGTERM, now);
    case DT_AGENT__EV_REPLACED:
        set_end(m, DT_AGENT__END_REPLACED, 1);
        return end_job(m, SIGTERM, now);
    case DT_AGENT__EV_INTERRUPT:
        return interrupt(m, arg, now);
    case DT_AGENT__EV_REQUEUE:
        m->requeue_asked = true;
        m->requeue_sig = arg > 0 ? arg : SIGUSR1;
        return NOTHING;
    case DT_AGENT__EV_REQUEUE_STOP:
        set_end(m, DT_AGENT__END_REQUEUED, arg);
        return end_job(m, SIGTERM, now);
    case DT_AGENT__EV_TICK:
        return tick(m, now);
    case DT_AGENT__EV_RANKS_GONE:
        return ranks_gone(m, now);
    case DT_AGENT__EV_NO_CHILDREN:
        if (dt_agent__sm_supervising(m) && m->state != DT_AGENT__DRAINING)
            enter(m, DT_AGENT__DRAINING, now);
        return NOTHING;
    case DT_AGENT__EV_DRAINED:
        if (m->state == DT_AGENT__DRAINING)
            enter(m, DT_AGENT__DECIDING, now);
        return NOTHING;
    case DT_AGENT__EV_ABANDON:
        if (dt_agent__sm_supervising(m))
            enter(m, DT_AGENT__DECIDING, now);
        return NOTHING;
    case DT_AGENT__EV_RESTART:
        if (m->state == DT_AGENT__DECIDING)
            enter(m, DT_AGENT__IDLE, now);
        return NOTHING;
    case DT_AGENT__EV_DECIDED: /* only between attempts: the nodes decide once theirs are over */
        if (!between(m))
            return NOTHING;
        set_end(m, DT_AGENT__END_DECIDED, arg);
        enter(m, DT_AGENT__DONE, now);
        return NOTHING;
    case DT_AGENT__EV_OVER:
        if (between(m))
            enter(m, DT_AGENT__DONE, now);
        return NOTHING;
    }
    return NOTHING;
}

void dt_agent__sm_init(struct dt_agent__sm *m, double grace_s)
{
    *m = (struct dt_agent__sm){.state = DT_AGENT__IDLE, .grace_s = grace_s};
}

double dt_agent__sm_deadline(const struct dt_agent__sm *m)
{
    switch (m->state) {
    case DT_AGENT__SETTLING:
        return m->since + DT_AGENT__CAUSE_WINDOW_S;
    case DT_AGENT__STOPPING:
        return m->since + m->grace_s;
    case DT_AGENT__KILLING:
        return m->since + DT_AGENT__UNKILLABLE_S;
    case DT_AGENT__DRAINING:
        return m->since + DT_AGENT__DRAIN_S;
    default:
        return -1;
    }
}

int dt_agent__sm_wait_ms(const struct dt_agent__sm *m, double now, bool ranks_gone)
{
    if (ranks_gone && m->state != DT_AGENT__DRAINING && dt_agent__sm_supervising(m))
        return DT_AGENT__SWEEP_MS;
    if (m->state == DT_AGENT__KILLING)
        return DT_AGENT__KILL_MS;
    double d = dt_agent__sm_deadline(m);
    if (d < 0)
        return -1;
    return d <= now ? 0 : (int)((d - now) * 1000) + 1;
}

bool dt_agent__sm_supervising(const struct dt_agent__sm *m)
{
    return m->state >= DT_AGENT__RUNNING && m->state <= DT_AGENT__DRAINING;
}

bool dt_agent__sm_ending(const struct dt_agent__sm *m)
{
    return m->end >= DT_AGENT__END_REQUEUED;
}

bool dt_agent__sm_sent(const struct dt_agent__sm *m, int sig)
{
    return (m->stop_sig != 0 && sig == m->stop_sig) || (m->killed && sig == SIGKILL);
}

bool dt_agent__sm_requeue_exit(struct dt_agent__sm *m, int wstatus)
{
    if (!m->requeue_asked || !WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != DT_AGENT_EXIT_REQUEUE)
        return false;
    m->requeue_exits++;
    return true;
}

/* Ranks that checkpointed and stopped on SIGUSR1 end the job as a requeue,
 * unless something else failed: an abort, a failed rank here, another
 * node's (a decided status other than 0 or the requeue's own). */
static bool requeued(const struct dt_agent__sm *m, bool rank_failed)
{
    bool other_failed =
        m->end == DT_AGENT__END_DECIDED && m->end_status > 0 && m->end_status != DT_AGENT_EXIT_REQUEUE;
    return m->requeue_exits > 0 && m->end != DT_AGENT__END_ABORTED && !other_failed && !rank_failed;
}

struct dt_agent__outcome dt_agent__sm_outcome(const struct dt_agent__sm *m, int failed_status, bool rank_failed)
{
    struct dt_agent__outcome o = {0};
    if (m->end == DT_AGENT__END_INTERRUPTED) {
        o.interrupted = true;
        o.signal = m->end_status;
        o.exit_status = 128 + m->end_status;
    } else if (m->end == DT_AGENT__END_COORD_LOST || m->end == DT_AGENT__END_REPLACED) {
        o.failed = true;
        o.exit_status = 1;
    } else if (m->end == DT_AGENT__END_REQUEUED) {
        o.interrupted = true;
        o.signal = m->end_status;
        o.exit_status = DT_AGENT_EXIT_REQUEUE;
    } else if (requeued(m, rank_failed)) {
        o.interrupted = true;
        o.signal = m->requeue_sig > 0 ? m->requeue_sig : SIGUSR1;
        o.exit_status = DT_AGENT_EXIT_REQUEUE;
    } else if (m->end == DT_AGENT__END_ABORTED || m->end == DT_AGENT__END_DECIDED) {
        o.exit_status = m->end_status;
        o.failed = m->end_status != 0;
    } else if (failed_status >= 0) {
        o.failed = true;
        o.exit_status = failed_status;
    }
    return o;
}

const char *dt_agent__state_name(enum dt_agent__state s)
{
    static const char *const names[] = {"idle",     "placing",  "running",  "settling", "stopping",
                                        "killing",  "draining", "deciding", "done"};
    return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "?";
}
