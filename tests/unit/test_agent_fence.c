/* test_agent_fence.c - the rounds node 0 forms for a job of fixed nodes with
 * restarts (launcher/agent/agent_elastic.c), step by step against a real
 * coordinator in this process: node 1's agent loses its membership, a new
 * agent for node 1 joins as its second incarnation and takes its place in
 * the next round, which counts as a restart; the agent it replaced, whose
 * connection still answers (a partitioned host that came back), finds a
 * newer incarnation in that round, is fenced out and can no longer end the
 * job; with no restarts left a lost node fails the job, status 1. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "comm/store.h"
#include "launcher/agent/agent_rounds.h"
#include "launcher/coordinator/coordinator.h"
#include "spec/jobspec.h"

static const char spec[] = "name: fence\n"
                           "nodes: 2\n"
                           "max_restarts: 1\n"
                           "command: [\"true\"]\n"
                           "rendezvous: {auth: none, timeout: 5s, heartbeat_timeout: 5s}\n";

/* One agent: its link, heartbeat relay and rounds. */
struct agent {
    struct dt_agent__link l;
    struct dt_agent__hb_relay *hb;
    struct dt_agent__elastic *el;
};

struct fx {
    struct dt_job *job;
    struct dt_coord *coord;
    int sig[2]; /* the agents' signal pipe: never written, so no signal comes */
    struct dt_agent_result res;
    struct dt_agent_attempt attempts[2];
};

static void join(struct fx *f, struct agent *a, int node)
{
    struct dt_agent__round_config cfg = {.job = f->job,
                                         .node_rank = node,
                                         .nnodes = 2,
                                         .nproc = 1,
                                         .coord_host = "127.0.0.1",
                                         .coord_port = dt_coord_port(f->coord),
                                         .timeout_s = 5,
                                         .liveness_s = 5,
                                         .grace_s = 1,
                                         .coord = node == 0 ? f->coord : NULL,
                                         .nnodes_min = 2};
    assert_int_equal(dt_agent__link_open(&a->l, &cfg), 0);
    assert_non_null(a->hb = dt_agent__hb_new(node, 2, 1));
    if (dt_agent__elastic_open(&a->l, a->hb, 2, &a->el) != 0)
        fail_msg("node %d: %s", node, dt_error_last());
}

static void leave(struct agent *a)
{
    dt_agent__elastic_free(a->el);
    dt_agent__hb_free(a->hb);
    dt_agent__link_close(&a->l);
}

static void value_is(struct agent *a, const char *key, const char *want)
{
    char got[256] = "";
    assert_int_equal(dt_agent__link_get_text(&a->l, key, got, sizeof got), 0);
    assert_string_equal(got, want);
}

/* begin_attempt's answer, and the round and place it gave. */
static int begin(struct fx *f, struct agent *a, int *k, struct dt_agent_place *place)
{
    int status = -7;
    int rc = dt_agent__elastic_begin(a->el, k, f->sig[0], place, &status);
    if (rc == 2)
        assert_int_equal(status, 1);
    return rc;
}

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof *f);
    assert_non_null(f);
    assert_int_equal(dt_job_load_string_with(spec, sizeof spec - 1, "fence.yaml", NULL, &f->job), 0);
    struct dt_coord_config cc = {.bind_host = "127.0.0.1", .member_liveness_s = 5};
    assert_int_equal(dt_coord_start(&cc, &f->coord), 0);
    assert_int_equal(pipe(f->sig), 0);
    for (int k = 0; k < 2; k++)
        f->attempts[k].first_failed = f->attempts[k].hung = -1;
    f->res = (struct dt_agent_result){.attempts = f->attempts, .max_attempts = 2, .n_attempts = 1};
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    dt_coord_stop(f->coord);
    dt_job_free(f->job);
    close(f->sig[0]);
    close(f->sig[1]);
    free(f);
    return 0;
}

static void a_lost_node_is_replaced_and_its_old_agent_fenced_out(void **state)
{
    struct fx *f = *state;
    struct agent n0 = {0}, old = {0}, new = {0};
    struct dt_agent_place place;
    int k = -1, status = -1;
    bool restart = false;
    join(f, &n0, 0);
    join(f, &old, 1);
    assert_int_equal(n0.l.incarnation, 1);
    assert_int_equal(old.l.incarnation, 1);

    /* Round 0: both nodes, each by its first agent. */
    assert_int_equal(begin(f, &n0, &k, &place), 0);
    assert_int_equal(k, 0);
    value_is(&n0, "dtrain/round/0", "0 2 0:1 1:1");
    assert_int_equal(begin(f, &old, &k, &place), 0);
    assert_int_equal(k, 0);
    assert_int_equal(place.node_rank, 1);
    assert_int_equal(place.nnodes, 2);

    /* Node 1's membership goes; its connection still answers. */
    assert_int_equal(dt_store_leave(old.l.store), 0);
    assert_int_equal(dt_agent__elastic_poll(n0.el, &f->res, 0, &status), DT_AGENT_STOP_ATTEMPT);
    char why[512] = "";
    assert_int_equal(dt_agent__link_get_text(&n0.l, "dtrain/change/0", why, sizeof why), 0);
    assert_non_null(strstr(why, "a node of the round was lost: node 1"));

    /* Its replacement joins as node 1's second incarnation. */
    join(f, &new, 1);
    assert_int_equal(new.l.incarnation, 2);

    /* Node 0 ends round 0: a restart, counted. */
    assert_int_equal(dt_agent__elastic_attempt_end(n0.el, &f->res, 0, f->sig[0], &restart, &status), 0);
    assert_true(restart);
    assert_string_equal(f->attempts[0].round_end, "restart");
    value_is(&n0, "dtrain/verdict/0", "next");

    /* Round 1 names the replacement; the restart is counted in it. */
    f->res.n_attempts = 2;
    assert_int_equal(begin(f, &n0, &k, &place), 0);
    assert_int_equal(k, 1);
    assert_int_equal(place.restarts, 1);
    value_is(&n0, "dtrain/round/1", "1 2 0:1 1:2");
    assert_int_equal(begin(f, &new, &k, &place), 0);
    assert_int_equal(k, 1);
    assert_int_equal(place.node_rank, 1);
    assert_int_equal(place.restarts, 1);

    /* The old agent comes back: round 1 has a newer agent of its node. */
    assert_false(old.l.fenced);
    assert_int_equal(begin(f, &old, &k, &place), 2);
    assert_true(old.l.fenced);
    /* ... and nothing it does ends the job: its abort is not written. */
    assert_int_equal(dt_agent__link_abort(&old.l, 1, "the fenced agent's failure"), 0);
    assert_int_equal(dt_agent__link_exists(&n0.l, DT_AGENT__KEY_ABORT), 0);

    /* No restart is left: node 1 lost again fails the job, status 1. */
    assert_int_equal(dt_store_leave(new.l.store), 0);
    assert_int_equal(dt_agent__elastic_poll(n0.el, &f->res, 1, &status), DT_AGENT_STOP_ATTEMPT);
    restart = true;
    status = -1;
    assert_int_equal(dt_agent__elastic_attempt_end(n0.el, &f->res, 1, f->sig[0], &restart, &status), 0);
    assert_false(restart);
    assert_int_equal(status, 1);
    assert_string_equal(f->attempts[1].round_end, "failed");
    value_is(&n0, "dtrain/verdict/1", "done 1");
    leave(&new);
    leave(&old);
    leave(&n0);
}

/* An agent that joined but has not counted itself yet is not taken for the
 * lost one it replaces: round k+1 waits for a newer incarnation. */
static void a_round_waits_for_the_replacement_to_count_itself(void **state)
{
    struct fx *f = *state;
    struct agent n0 = {0}, old = {0};
    struct dt_agent_place place;
    int k = -1, status = -1;
    bool restart = false;
    join(f, &n0, 0);
    join(f, &old, 1);
    assert_int_equal(begin(f, &n0, &k, &place), 0);
    assert_int_equal(begin(f, &old, &k, &place), 0);
    assert_int_equal(dt_store_leave(old.l.store), 0);
    assert_int_equal(dt_agent__elastic_attempt_end(n0.el, &f->res, 0, f->sig[0], &restart, &status), 0);
    assert_true(restart);
    /* A second client joins as node 1 and stops there, uncounted. */
    struct dt_store_options o = {.host = "127.0.0.1", .port = dt_coord_port(f->coord), .timeout_s = 5};
    struct dt_store *half = NULL;
    assert_int_equal(dt_store_connect(&o, &half), 0);
    assert_int_equal(dt_store_join(half, 1, 2, 1, "half"), 0);
    /* Node 0 gives up on round 1 after rendezvous.timeout (5 s), naming node 1. */
    f->res.n_attempts = 2;
    assert_true(begin(f, &n0, &k, &place) < 0);
    assert_non_null(strstr(dt_error_last(), "no new agent for node 1 joined within rendezvous.timeout"));
    assert_int_equal(dt_agent__link_exists(&n0.l, "dtrain/round/1"), 0);
    dt_store_close(half);
    leave(&old);
    leave(&n0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(a_lost_node_is_replaced_and_its_old_agent_fenced_out, setup, teardown),
        cmocka_unit_test_setup_teardown(a_round_waits_for_the_replacement_to_count_itself, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
