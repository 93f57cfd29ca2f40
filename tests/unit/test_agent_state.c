/* test_agent_state.c - the agent's state machine (launcher/agent/agent_state.c):
 * every transition and what it asks the caller to send, that every other
 * (state, event) pair changes nothing, the deadlines and waits of each state,
 * which reason ends the job, and the job's outcome from it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "launcher/agent/agent.h"
#include "launcher/agent/agent_state.h"

#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>

#define GRACE 5.0
#define T0 100.0 /* when the state under test was entered */
#define NSTATES (DT_AGENT__DONE + 1)
#define NEVENTS (DT_AGENT__EV_OVER + 1)

#define S_IDLE DT_AGENT__IDLE
#define S_PLACING DT_AGENT__PLACING
#define S_RUNNING DT_AGENT__RUNNING
#define S_SETTLING DT_AGENT__SETTLING
#define S_STOPPING DT_AGENT__STOPPING
#define S_KILLING DT_AGENT__KILLING
#define S_DRAINING DT_AGENT__DRAINING
#define S_DECIDING DT_AGENT__DECIDING
#define S_DONE DT_AGENT__DONE

static struct dt_agent__sm in_state(enum dt_agent__state s)
{
    struct dt_agent__sm m;
    dt_agent__sm_init(&m, GRACE);
    m.state = s;
    m.since = T0;
    return m;
}

/* The arg each event is fed with, and a time at which every deadline is due. */
static int arg_of(enum dt_agent__event e)
{
    return e == DT_AGENT__EV_INTERRUPT      ? SIGINT
           : e == DT_AGENT__EV_REQUEUE_STOP ? SIGUSR1
           : e == DT_AGENT__EV_ABORT        ? 3
           : e == DT_AGENT__EV_DECIDED      ? 4
                                            : 0;
}
#define LATE (T0 + 1000.0)

struct transition {
    enum dt_agent__state from;
    enum dt_agent__event e;
    enum dt_agent__state to;
    enum dt_agent__do what;
    int sig;
};

/* Every (state, event) that moves the machine or asks for something. */
static const struct transition transitions[] = {
    {S_IDLE, DT_AGENT__EV_PLACE, S_PLACING, DT_AGENT__DO_NOTHING, 0},
    {S_PLACING, DT_AGENT__EV_PLACED, S_IDLE, DT_AGENT__DO_NOTHING, 0},
    {S_IDLE, DT_AGENT__EV_SPAWNED, S_RUNNING, DT_AGENT__DO_NOTHING, 0},
    {S_IDLE, DT_AGENT__EV_SPAWN_FAILED, S_KILLING, DT_AGENT__DO_SIGNAL, SIGKILL},
    {S_RUNNING, DT_AGENT__EV_FAILED, S_STOPPING, DT_AGENT__DO_SIGNAL, SIGTERM},
    {S_SETTLING, DT_AGENT__EV_FAILED, S_STOPPING, DT_AGENT__DO_SIGNAL, SIGTERM},
    {S_RUNNING, DT_AGENT__EV_FAILED_ELECT, S_SETTLING, DT_AGENT__DO_NOTHING, 0},
    {S_RUNNING, DT_AGENT__EV_STOP, S_STOPPING, DT_AGENT__DO_SIGNAL, SIGTERM},
    {S_SETTLING, DT_AGENT__EV_STOP, S_STOPPING, DT_AGENT__DO_SIGNAL, SIGTERM},
    {S_RUNNING, DT_AGENT__EV_ABORT, S_STOPPING, DT_AGENT__DO_SIGNAL, SIGTERM},
    {S_SETTLING, DT_AGENT__EV_ABORT, S_STOPPING, DT_AGENT__DO_SIGNAL, SIGTERM},
    {S_IDLE, DT_AGENT__EV_ABORT, S_DONE, DT_AGENT__DO_NOTHING, 0},
    {S_PLACING, DT_AGENT__EV_ABORT, S_DONE, DT_AGENT__DO_NOTHING, 0},
    {S_DECIDING, DT_AGENT__EV_ABORT, S_DONE, DT_AGENT__DO_NOTHING, 0},
    {S_RUNNING, DT_AGENT__EV_COORD_LOST, S_STOPPING, DT_AGENT__DO_SIGNAL, SIGTERM},
    {S_SETTLING, DT_AGENT__EV_COORD_LOST, S_STOPPING, DT_AGENT__DO_SIGNAL, SIGTERM},
    {S_IDLE, DT_AGENT__EV_COORD_LOST, S_DONE, DT_AGENT__DO_NOTHING, 0},
    {S_PLACING, DT_AGENT__EV_COORD_LOST, S_DONE, DT_AGENT__DO_NOTHING, 0},
    {S_DECIDING, DT_AGENT__EV_COORD_LOST, S_DONE, DT_AGENT__DO_NOTHING, 0},
    {S_RUNNING, DT_AGENT__EV_REPLACED, S_STOPPING, DT_AGENT__DO_SIGNAL, SIGTERM},
    {S_SETTLING, DT_AGENT__EV_REPLACED, S_STOPPING, DT_AGENT__DO_SIGNAL, SIGTERM},
    {S_IDLE, DT_AGENT__EV_REPLACED, S_DONE, DT_AGENT__DO_NOTHING, 0},
    {S_PLACING, DT_AGENT__EV_REPLACED, S_DONE, DT_AGENT__DO_NOTHING, 0},
    {S_DECIDING, DT_AGENT__EV_REPLACED, S_DONE, DT_AGENT__DO_NOTHING, 0},
    {S_RUNNING, DT_AGENT__EV_INTERRUPT, S_STOPPING, DT_AGENT__DO_SIGNAL, SIGINT},
    {S_SETTLING, DT_AGENT__EV_INTERRUPT, S_STOPPING, DT_AGENT__DO_SIGNAL, SIGINT},
    {S_STOPPING, DT_AGENT__EV_INTERRUPT, S_STOPPING, DT_AGENT__DO_SIGNAL, SIGINT},
    {S_IDLE, DT_AGENT__EV_INTERRUPT, S_DONE, DT_AGENT__DO_NOTHING, 0},
    {S_PLACING, DT_AGENT__EV_INTERRUPT, S_DONE, DT_AGENT__DO_NOTHING, 0},
    {S_DECIDING, DT_AGENT__EV_INTERRUPT, S_DONE, DT_AGENT__DO_NOTHING, 0},
    {S_RUNNING, DT_AGENT__EV_REQUEUE_STOP, S_STOPPING, DT_AGENT__DO_SIGNAL, SIGTERM},
    {S_SETTLING, DT_AGENT__EV_REQUEUE_STOP, S_STOPPING, DT_AGENT__DO_SIGNAL, SIGTERM},
    {S_IDLE, DT_AGENT__EV_REQUEUE_STOP, S_DONE, DT_AGENT__DO_NOTHING, 0},
    {S_PLACING, DT_AGENT__EV_REQUEUE_STOP, S_DONE, DT_AGENT__DO_NOTHING, 0},
    {S_DECIDING, DT_AGENT__EV_REQUEUE_STOP, S_DONE, DT_AGENT__DO_NOTHING, 0},
    {S_SETTLING, DT_AGENT__EV_TICK, S_STOPPING, DT_AGENT__DO_SIGNAL, SIGTERM},
    {S_STOPPING, DT_AGENT__EV_TICK, S_KILLING, DT_AGENT__DO_SIGNAL, SIGKILL},
    {S_KILLING, DT_AGENT__EV_TICK, S_DECIDING, DT_AGENT__DO_GIVE_UP, 0},
    {S_DRAINING, DT_AGENT__EV_TICK, S_DECIDING, DT_AGENT__DO_NOTHING, 0},
    {S_RUNNING, DT_AGENT__EV_RANKS_GONE, S_STOPPING, DT_AGENT__DO_FIRST_SWEEP, SIGTERM},
    {S_SETTLING, DT_AGENT__EV_RANKS_GONE, S_STOPPING, DT_AGENT__DO_FIRST_SWEEP, SIGTERM},
    {S_STOPPING, DT_AGENT__EV_RANKS_GONE, S_STOPPING, DT_AGENT__DO_FIRST_SWEEP, SIGTERM},
    {S_KILLING, DT_AGENT__EV_RANKS_GONE, S_KILLING, DT_AGENT__DO_FIRST_SWEEP, SIGKILL},
    {S_RUNNING, DT_AGENT__EV_NO_CHILDREN, S_DRAINING, DT_AGENT__DO_NOTHING, 0},
    {S_SETTLING, DT_AGENT__EV_NO_CHILDREN, S_DRAINING, DT_AGENT__DO_NOTHING, 0},
    {S_STOPPING, DT_AGENT__EV_NO_CHILDREN, S_DRAINING, DT_AGENT__DO_NOTHING, 0},
    {S_KILLING, DT_AGENT__EV_NO_CHILDREN, S_DRAINING, DT_AGENT__DO_NOTHING, 0},
    {S_DRAINING, DT_AGENT__EV_DRAINED, S_DECIDING, DT_AGENT__DO_NOTHING, 0},
    {S_RUNNING, DT_AGENT__EV_ABANDON, S_DECIDING, DT_AGENT__DO_NOTHING, 0},
    {S_SETTLING, DT_AGENT__EV_ABANDON, S_DECIDING, DT_AGENT__DO_NOTHING, 0},
    {S_STOPPING, DT_AGENT__EV_ABANDON, S_DECIDING, DT_AGENT__DO_NOTHING, 0},
    {S_KILLING, DT_AGENT__EV_ABANDON, S_DECIDING, DT_AGENT__DO_NOTHING, 0},
    {S_DRAINING, DT_AGENT__EV_ABANDON, S_DECIDING, DT_AGENT__DO_NOTHING, 0},
    {S_DECIDING, DT_AGENT__EV_RESTART, S_IDLE, DT_AGENT__DO_NOTHING, 0},
    {S_IDLE, DT_AGENT__EV_DECIDED, S_DONE, DT_AGENT__DO_NOTHING, 0},
    {S_PLACING, DT_AGENT__EV_DECIDED, S_DONE, DT_AGENT__DO_NOTHING, 0},
    {S_DECIDING, DT_AGENT__EV_DECIDED, S_DONE, DT_AGENT__DO_NOTHING, 0},
    {S_IDLE, DT_AGENT__EV_OVER, S_DONE, DT_AGENT__DO_NOTHING, 0},
    {S_PLACING, DT_AGENT__EV_OVER, S_DONE, DT_AGENT__DO_NOTHING, 0},
    {S_DECIDING, DT_AGENT__EV_OVER, S_DONE, DT_AGENT__DO_NOTHING, 0},
};
#define NTRANSITIONS (sizeof transitions / sizeof transitions[0])

static const struct transition *listed(enum dt_agent__state s, enum dt_agent__event e)
{
    for (size_t i = 0; i < NTRANSITIONS; i++)
        if (transitions[i].from == s && transitions[i].e == e)
            return &transitions[i];
    return NULL;
}

static void say(const char *what, enum dt_agent__state s, enum dt_agent__event e)
{
    print_message("%s: %s + event %d\n", what, dt_agent__state_name(s), (int)e);
}

/* Every listed transition, at a time when every deadline is due. */
static void each_transition(void **state)
{
    (void)state;
    for (size_t i = 0; i < NTRANSITIONS; i++) {
        const struct transition *t = &transitions[i];
        struct dt_agent__sm m = in_state(t->from);
        struct dt_agent__act a = dt_agent__sm_step(&m, t->e, arg_of(t->e), LATE);
        if (m.state != t->to || a.what != t->what || a.sig != t->sig)
            say("wrong transition", t->from, t->e);
        assert_int_equal(m.state, t->to);
        assert_int_equal(a.what, t->what);
        assert_int_equal(a.sig, t->sig);
        if (m.state != t->from)
            assert_true(m.since == LATE); /* a new state's deadlines count from its entry */
    }
}

/* Every pair the table does not list changes nothing and asks for nothing. */
static void every_other_pair_is_ignored(void **state)
{
    (void)state;
    int ignored = 0;
    for (int s = 0; s < NSTATES; s++)
        for (int e = 0; e < NEVENTS; e++) {
            if (listed((enum dt_agent__state)s, (enum dt_agent__event)e))
                continue;
            struct dt_agent__sm m = in_state((enum dt_agent__state)s);
            struct dt_agent__act a = dt_agent__sm_step(&m, (enum dt_agent__event)e, arg_of(e), LATE);
            if (m.state != (enum dt_agent__state)s || a.what != DT_AGENT__DO_NOTHING)
                say("not ignored", (enum dt_agent__state)s, (enum dt_agent__event)e);
            assert_int_equal(m.state, s);
            assert_true(m.since == T0);
            assert_int_equal(a.what, DT_AGENT__DO_NOTHING);
            ignored++;
        }
    assert_int_equal(ignored + (int)NTRANSITIONS, NSTATES * NEVENTS);
}

static void deadlines_follow_the_state(void **state)
{
    (void)state;
    struct {
        enum dt_agent__state s;
        double deadline;
    } cases[] = {
        {S_IDLE, -1},
        {S_PLACING, -1},
        {S_RUNNING, -1},
        {S_SETTLING, T0 + DT_AGENT__CAUSE_WINDOW_S},
        {S_STOPPING, T0 + GRACE},
        {S_KILLING, T0 + DT_AGENT__UNKILLABLE_S},
        {S_DRAINING, T0 + DT_AGENT__DRAIN_S},
        {S_DECIDING, -1},
        {S_DONE, -1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct dt_agent__sm m = in_state(cases[i].s);
        assert_true(dt_agent__sm_deadline(&m) == cases[i].deadline);
        if (cases[i].deadline < 0)
            continue;
        /* Not yet due: a tick changes nothing. */
        struct dt_agent__act a = dt_agent__sm_step(&m, DT_AGENT__EV_TICK, 0, cases[i].deadline - 0.01);
        assert_int_equal(m.state, cases[i].s);
        assert_int_equal(a.what, DT_AGENT__DO_NOTHING);
    }
}

static void waits_follow_the_state(void **state)
{
    (void)state;
    struct dt_agent__sm m = in_state(S_RUNNING);
    assert_int_equal(dt_agent__sm_wait_ms(&m, T0 + 3, false), -1);
    assert_int_equal(dt_agent__sm_wait_ms(&m, T0 + 3, true), DT_AGENT__SWEEP_MS);
    m = in_state(S_STOPPING);
    assert_int_equal(dt_agent__sm_wait_ms(&m, T0 + 2, false), 3001); /* rounded up: never early */
    assert_int_equal(dt_agent__sm_wait_ms(&m, T0 + GRACE + 1, false), 0);
    assert_int_equal(dt_agent__sm_wait_ms(&m, T0, true), DT_AGENT__SWEEP_MS);
    m = in_state(S_KILLING);
    assert_int_equal(dt_agent__sm_wait_ms(&m, T0, false), DT_AGENT__KILL_MS);
    assert_int_equal(dt_agent__sm_wait_ms(&m, T0, true), DT_AGENT__SWEEP_MS);
    m = in_state(S_SETTLING);
    assert_int_equal(dt_agent__sm_wait_ms(&m, T0 + 0.5, false), 501);
    m = in_state(S_DRAINING);
    assert_int_equal(dt_agent__sm_wait_ms(&m, T0 + 0.25, true), 751);
    m = in_state(S_DECIDING);
    assert_int_equal(dt_agent__sm_wait_ms(&m, T0, false), -1);
}

/* A second signal kills at once; the first's SIGKILL stays due when it was. */
static void second_signal_kills(void **state)
{
    (void)state;
    struct dt_agent__sm m = in_state(S_RUNNING);
    struct dt_agent__act a = dt_agent__sm_step(&m, DT_AGENT__EV_INTERRUPT, SIGTERM, T0 + 1);
    assert_int_equal(a.sig, SIGTERM);
    assert_int_equal(m.state, S_STOPPING);
    assert_true(dt_agent__sm_deadline(&m) == T0 + 1 + GRACE);
    a = dt_agent__sm_step(&m, DT_AGENT__EV_INTERRUPT, SIGINT, T0 + 2);
    assert_int_equal(m.state, S_KILLING);
    assert_int_equal(a.what, DT_AGENT__DO_SIGNAL);
    assert_int_equal(a.sig, SIGKILL);
    a = dt_agent__sm_step(&m, DT_AGENT__EV_INTERRUPT, SIGINT, T0 + 3);
    assert_int_equal(m.state, S_KILLING);
    assert_int_equal(a.what, DT_AGENT__DO_NOTHING);
    assert_int_equal(m.end, DT_AGENT__END_INTERRUPTED);
    assert_int_equal(m.end_status, SIGTERM); /* the first signal's */

    /* A signal after a stop for another reason is passed on without moving the deadline. */
    m = in_state(S_RUNNING);
    dt_agent__sm_step(&m, DT_AGENT__EV_STOP, 0, T0);
    a = dt_agent__sm_step(&m, DT_AGENT__EV_INTERRUPT, SIGHUP, T0 + 4);
    assert_int_equal(a.what, DT_AGENT__DO_SIGNAL);
    assert_int_equal(a.sig, SIGHUP);
    assert_true(dt_agent__sm_deadline(&m) == T0 + GRACE);
}

/* What the ranks left is counted once per attempt; SIGKILL once killing. */
static void sweeps_count_once_per_attempt(void **state)
{
    (void)state;
    struct dt_agent__sm m = in_state(S_IDLE);
    dt_agent__sm_step(&m, DT_AGENT__EV_SPAWNED, 0, T0);
    assert_int_equal(dt_agent__sm_step(&m, DT_AGENT__EV_RANKS_GONE, 0, T0).what, DT_AGENT__DO_FIRST_SWEEP);
    struct dt_agent__act a = dt_agent__sm_step(&m, DT_AGENT__EV_RANKS_GONE, 0, T0);
    assert_int_equal(a.what, DT_AGENT__DO_SWEEP);
    assert_int_equal(a.sig, SIGTERM);
    dt_agent__sm_step(&m, DT_AGENT__EV_TICK, 0, T0 + GRACE);
    assert_int_equal(m.state, S_KILLING);
    a = dt_agent__sm_step(&m, DT_AGENT__EV_RANKS_GONE, 0, T0 + GRACE);
    assert_int_equal(a.what, DT_AGENT__DO_SWEEP);
    assert_int_equal(a.sig, SIGKILL);
    /* The next attempt starts afresh. */
    dt_agent__sm_step(&m, DT_AGENT__EV_NO_CHILDREN, 0, T0 + 6);
    dt_agent__sm_step(&m, DT_AGENT__EV_DRAINED, 0, T0 + 6);
    dt_agent__sm_step(&m, DT_AGENT__EV_RESTART, 0, T0 + 6);
    dt_agent__sm_step(&m, DT_AGENT__EV_SPAWNED, 0, T0 + 7);
    assert_false(m.swept);
    assert_int_equal(m.stop_sig, 0);
    assert_false(m.killed);
    assert_int_equal(dt_agent__sm_step(&m, DT_AGENT__EV_RANKS_GONE, 0, T0 + 8).what, DT_AGENT__DO_FIRST_SWEEP);
}

/* A death by a signal the agent sent is no failure of the rank's own. */
static void sent_signals(void **state)
{
    (void)state;
    struct dt_agent__sm m = in_state(S_IDLE);
    dt_agent__sm_step(&m, DT_AGENT__EV_SPAWNED, 0, T0);
    assert_false(dt_agent__sm_sent(&m, SIGTERM));
    assert_false(dt_agent__sm_sent(&m, SIGKILL));
    dt_agent__sm_step(&m, DT_AGENT__EV_INTERRUPT, SIGINT, T0);
    assert_true(dt_agent__sm_sent(&m, SIGINT));
    assert_false(dt_agent__sm_sent(&m, SIGTERM));
    assert_false(dt_agent__sm_sent(&m, SIGKILL));
    dt_agent__sm_step(&m, DT_AGENT__EV_TICK, 0, T0 + GRACE);
    assert_true(dt_agent__sm_sent(&m, SIGKILL));
    assert_false(dt_agent__sm_sent(&m, SIGSEGV));
}

static void the_weightier_end_stands(void **state)
{
    (void)state;
    struct dt_agent__sm m = in_state(S_DECIDING);
    assert_false(dt_agent__sm_ending(&m));
    dt_agent__sm_step(&m, DT_AGENT__EV_DECIDED, 2, T0);
    assert_false(dt_agent__sm_ending(&m)); /* decided: the job ends, but as the nodes agreed */
    assert_int_equal(m.end, DT_AGENT__END_DECIDED);

    /* a requeue stop outweighs the nodes' decision, an abort outweighs it */
    m = in_state(S_RUNNING);
    dt_agent__sm_step(&m, DT_AGENT__EV_REQUEUE_STOP, SIGUSR1, T0);
    assert_true(dt_agent__sm_ending(&m));
    dt_agent__sm_step(&m, DT_AGENT__EV_DECIDED, 0, T0);
    assert_int_equal(m.end, DT_AGENT__END_REQUEUED);
    assert_int_equal(m.end_status, SIGUSR1);
    dt_agent__sm_step(&m, DT_AGENT__EV_ABORT, 3, T0);
    assert_int_equal(m.end, DT_AGENT__END_ABORTED);

    m = in_state(S_RUNNING);
    dt_agent__sm_step(&m, DT_AGENT__EV_ABORT, 3, T0);
    dt_agent__sm_step(&m, DT_AGENT__EV_ABORT, 4, T0); /* the first abort stands */
    assert_int_equal(m.end_status, 3);
    dt_agent__sm_step(&m, DT_AGENT__EV_DECIDED, 0, T0);
    assert_int_equal(m.end, DT_AGENT__END_ABORTED);
    assert_true(dt_agent__sm_ending(&m));
    dt_agent__sm_step(&m, DT_AGENT__EV_COORD_LOST, 0, T0);
    assert_int_equal(m.end, DT_AGENT__END_COORD_LOST);
    dt_agent__sm_step(&m, DT_AGENT__EV_ABORT, 5, T0);
    assert_int_equal(m.end, DT_AGENT__END_COORD_LOST);
    /* fenced out by a newer agent of this node: that, not a lost coordinator, is why it ends */
    dt_agent__sm_step(&m, DT_AGENT__EV_REPLACED, 0, T0);
    assert_int_equal(m.end, DT_AGENT__END_REPLACED);
    assert_int_equal(m.end_status, 1);
    dt_agent__sm_step(&m, DT_AGENT__EV_COORD_LOST, 0, T0);
    assert_int_equal(m.end, DT_AGENT__END_REPLACED);
    dt_agent__sm_step(&m, DT_AGENT__EV_INTERRUPT, SIGTERM, T0); /* a signal overrides any */
    assert_int_equal(m.end, DT_AGENT__END_INTERRUPTED);
    assert_int_equal(m.end_status, SIGTERM);
    dt_agent__sm_step(&m, DT_AGENT__EV_ABORT, 6, T0);
    assert_int_equal(m.end, DT_AGENT__END_INTERRUPTED);
}

static void requeue_exits_count_after_usr1_only(void **state)
{
    (void)state;
    struct dt_agent__sm m = in_state(S_RUNNING);
    int w75 = DT_AGENT_EXIT_REQUEUE << 8, w1 = 1 << 8;
    assert_true(WIFEXITED(w75) && WEXITSTATUS(w75) == DT_AGENT_EXIT_REQUEUE);
    assert_false(dt_agent__sm_requeue_exit(&m, w75));
    dt_agent__sm_step(&m, DT_AGENT__EV_REQUEUE, 0, T0);
    assert_int_equal(m.state, S_RUNNING);
    assert_true(m.requeue_asked);
    assert_false(dt_agent__sm_requeue_exit(&m, w1));
    assert_true(dt_agent__sm_requeue_exit(&m, w75));
    assert_true(dt_agent__sm_requeue_exit(&m, w75));
    assert_int_equal(m.requeue_exits, 2);
}

/* sm_outcome's rule, case by case. */
static void outcome_of(enum dt_agent__end end, int end_status, int requeue_exits, int failed_status,
                       bool rank_failed, bool failed, bool interrupted, int exit_status, int sig)
{
    struct dt_agent__sm m = in_state(S_DONE);
    m.end = end;
    m.end_status = end_status;
    m.requeue_exits = requeue_exits;
    struct dt_agent__outcome o = dt_agent__sm_outcome(&m, failed_status, rank_failed);
    assert_int_equal(o.failed, failed);
    assert_int_equal(o.interrupted, interrupted);
    assert_int_equal(o.exit_status, exit_status);
    assert_int_equal(o.signal, sig);
}

static void outcomes(void **state)
{
    (void)state;
    /*          end                       st   rq  fail  rank   failed interr exit sig */
    outcome_of(DT_AGENT__END_NONE, 0, 0, -1, false, false, false, 0, 0);
    outcome_of(DT_AGENT__END_NONE, 0, 0, 7, true, true, false, 7, 0);
    outcome_of(DT_AGENT__END_INTERRUPTED, SIGINT, 1, 7, true, false, true, 128 + SIGINT, SIGINT);
    outcome_of(DT_AGENT__END_COORD_LOST, 1, 1, 7, true, true, false, 1, 0);
    outcome_of(DT_AGENT__END_REPLACED, 1, 1, 7, true, true, false, 1, 0); /* neither the rank's status nor a requeue */
    outcome_of(DT_AGENT__END_ABORTED, 0, 0, 7, true, false, false, 0, 0);
    outcome_of(DT_AGENT__END_ABORTED, 9, 2, -1, false, true, false, 9, 0); /* an abort beats a requeue */
    outcome_of(DT_AGENT__END_DECIDED, 3, 0, -1, false, true, false, 3, 0);
    outcome_of(DT_AGENT__END_NONE, 0, 1, -1, false, false, true, DT_AGENT_EXIT_REQUEUE, SIGUSR1);
    outcome_of(DT_AGENT__END_DECIDED, 0, 1, -1, false, false, true, DT_AGENT_EXIT_REQUEUE, SIGUSR1);
    outcome_of(DT_AGENT__END_DECIDED, DT_AGENT_EXIT_REQUEUE, 1, -1, false, false, true, DT_AGENT_EXIT_REQUEUE,
               SIGUSR1);
    outcome_of(DT_AGENT__END_DECIDED, 2, 1, -1, false, true, false, 2, 0); /* another node failed */
    outcome_of(DT_AGENT__END_NONE, 0, 1, 5, true, true, false, 5, 0);      /* a rank here failed */
    /* stopped because a rank would die of the signal: a requeue, whatever the ranks' statuses */
    outcome_of(DT_AGENT__END_REQUEUED, SIGUSR1, 0, 143, true, false, true, DT_AGENT_EXIT_REQUEUE, SIGUSR1);
    outcome_of(DT_AGENT__END_REQUEUED, SIGUSR2, 0, -1, false, false, true, DT_AGENT_EXIT_REQUEUE, SIGUSR2);
}

static void helpers_and_names(void **state)
{
    (void)state;
    for (int s = 0; s < NSTATES; s++) {
        struct dt_agent__sm m = in_state((enum dt_agent__state)s);
        assert_int_equal(dt_agent__sm_supervising(&m), s >= S_RUNNING && s <= S_DRAINING);
        assert_string_not_equal(dt_agent__state_name((enum dt_agent__state)s), "?");
    }
    assert_string_equal(dt_agent__state_name(DT_AGENT__SETTLING), "settling");
    assert_string_equal(dt_agent__state_name((enum dt_agent__state)99), "?");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(each_transition),
        cmocka_unit_test(every_other_pair_is_ignored),
        cmocka_unit_test(deadlines_follow_the_state),
        cmocka_unit_test(waits_follow_the_state),
        cmocka_unit_test(second_signal_kills),
        cmocka_unit_test(sweeps_count_once_per_attempt),
        cmocka_unit_test(sent_signals),
        cmocka_unit_test(the_weightier_end_stands),
        cmocka_unit_test(requeue_exits_count_after_usr1_only),
        cmocka_unit_test(outcomes),
        cmocka_unit_test(helpers_and_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
