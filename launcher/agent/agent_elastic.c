/* agent_elastic.c - the rounds node 0 forms: which agents take part in each
 * round and as which node, and what ends a round.  Two kinds of job use them:
 *
 *   elastic (nodes: MIN:MAX)   agents come and go: a round has MIN to MAX of
 *                              them; a membership change restarts the ranks
 *                              without counting against max_restarts
 *   fixed size with restarts   every round has all N nodes; a node that is
 *   (nodes: N, max_restarts>0) lost (its agent killed, its host gone) ends
 *                              the round, which counts as a restart, and the
 *                              next round waits (rendezvous.timeout) for a
 *                              new agent of the same node rank: the Job
 *                              controller's new pod, Slurm's restarted step,
 *                              a `dtrain agent --node-rank N` by hand
 *
 * torchrun's c10d rendezvous on dtrain's coordinator.  Node 0's agent (it
 * hosts the coordinator) decides; the others JOIN (an elastic job's without a
 * node rank: the coordinator gives a slot, coord_rendezvous.c; a fixed-size
 * job's as their node rank, which is their slot), count their incarnation,
 * and follow the keys node 0 writes:
 *
 *   dtrain/incarnation/<slot>  agents that joined as that slot so far: the
 *                          count right after an agent's JOIN is its own
 *   dtrain/joins           agents that joined the job so far (after the above)
 *   dtrain/round/<k>       "<restarts> <n> <slot>:<incarnation> ...": round
 *                          k's nodes in node-rank order (slot 0, node 0's,
 *                          first); restarts = those counted so far
 *   dtrain/latest          k of the newest dtrain/round/<k>
 *   dtrain/change/<k>      why round k stops for a change of its nodes
 *   dtrain/end/<k>/<slot>  "0": that node's ranks of round k all exited 0
 *                          by themselves; "1" otherwise
 *   dtrain/verdict/<k>     "next" (round k+1 follows) or "done <status>"
 *
 * Forming round k (node 0).  Elastic: wait until MIN agents are joined (at
 * most rendezvous.timeout), then until MAX are or
 * rendezvous.last_call_timeout has passed; the joined slots, lowest first and
 * at most MAX, are the round.  Fixed: wait until every node rank is joined
 * (at most rendezvous.timeout, torchrun's join timeout); a node whose agent
 * was lost takes part only through a newer incarnation, so an agent that
 * joined but has not counted itself yet is not mistaken for the lost one.
 *
 * The incarnation fences: an agent runs only in a round that names its own
 * incarnation; one that finds a newer incarnation of its slot in a round (it
 * was cut off, the job went on and replaced it) stops its ranks and exits 1
 * without writing anything for the job (agent_state.h: REPLACED).  Node 0
 * counts a node's end of a round only from that round's incarnation.
 *
 * While a round runs node 0 writes change/<k> when one of its nodes is lost
 * (connection closed, or unacknowledged for heartbeat_timeout) or replaced
 * (dtrain/joins moved and its incarnation with it), or, elastic, when an
 * agent outside it waits and the round has fewer than MAX; every node then
 * stops its ranks, as for another node's failure (fail/<k>, agent_rounds.c).
 * After the round every node writes end/<k>/<slot>; node 0 waits for each
 * of its nodes' key, or its loss, and decides:
 *   every node's ranks finished                 done 0 (an agent waiting to
 *                                               join does not restart a job
 *                                               that is over, as in torchrun)
 *   a node of the round was lost, or change/<k> elastic: next, not counted;
 *                                               fixed: next, counted, while
 *                                               restarts are left, else done 1
 *   a failure restart_policy retries, restarts  next, counted
 *   left (max_restarts)
 *   any other failure                           done <the rank's status>
 * An agent that is not in the newest round (it came late, MAX were there, or
 * it replaces a lost node) waits for that round's verdict and the next round;
 * a job that ends without it ends it too, with the job's status.
 *
 * The records' layouts are agent_records.h's.  Not for what every round
 * does (agent_rounds.c publishes a failure to fail/<k> and calls these
 * after), nor for what the ranks do with a new world size (the trainer
 * resumes from its newest checkpoint: docs/elastic.md).
 */
#include "launcher/agent/agent_rounds.h"

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "base/proc.h"
#include "comm/store.h"
#include "launcher/coordinator/coordinator.h"
#include "spec/jobspec.h"
#include "spec/placement.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define WAIT_S 0.1

struct dt_agent__elastic {
    struct dt_agent__link *l;
    struct dt_agent__hb_relay *hb;
    int min, max;
    bool fixed;      /* nodes: N with restarts: slot = node rank, every round has all N */
    int restarts;    /* restarts counted against max_restarts so far */
    int n;           /* nodes of the current round */
    int *slots;      /* their slots, max entries */
    int *incarns;    /* their incarnations, max entries */
    bool *ready;     /* node 0, forming: by slot, it may take part now (room entries) */
    int *joined_inc; /* node 0, forming: by slot, its incarnation now (room entries) */
    int room;        /* entries of ready and joined_inc: slots past MAX are given in an elastic job */
    bool *renew;     /* node 0, fixed: the slot's agent was lost since its last round: only a newer one
                        takes its place */
    long long joins; /* node 0: dtrain/joins when it last looked for a replaced node */
    int next;        /* the round begin looks for; -1: the newest */
    bool change_set; /* node 0: change/<k> written for the current round */
    bool told;       /* this round's stop was said */
    bool told_wait;  /* "waiting for a place" was said */
};

/* --- joining ------------------------------------------------------------- */

static void say_joined(const struct dt_agent__elastic *el)
{
    const struct dt_agent__link *l = el->l;
    if (l->cfg.node_rank == 0)
        return;
    if (!el->fixed)
        dt_log_info("joined the elastic job at %s as slot %d; waiting for a place in a round", l->coord,
                    l->cfg.node_rank);
    else if (l->incarnation > 1)
        dt_log_info("joined the job at %s as node %d, replacing its lost agent (this is agent #%d of node %d); "
                    "waiting for the next round",
                    l->coord, l->cfg.node_rank, l->incarnation, l->cfg.node_rank);
}

int dt_agent__elastic_open(struct dt_agent__link *l, struct dt_agent__hb_relay *hb, int nodes_min,
                           struct dt_agent__elastic **out)
{
    struct dt_agent__elastic *el = calloc(1, sizeof *el);
    int max = l->cfg.nnodes;
    *out = NULL;
    if (el) {
        el->slots = calloc((size_t)max, sizeof *el->slots);
        el->incarns = calloc((size_t)max, sizeof *el->incarns);
        el->renew = calloc((size_t)max, sizeof *el->renew);
    }
    if (!el || !el->slots || !el->incarns || !el->renew) {
        dt_agent__elastic_free(el);
        return dt_error_set(DT_ENOMEM, "out of memory for a job of %d nodes", max);
    }
    el->l = l;
    el->hb = hb;
    el->min = nodes_min < max ? nodes_min : max;
    el->max = max;
    el->fixed = nodes_min >= max;
    el->next = l->cfg.node_rank == 0 ? 0 : -1;
    el->joins = -1;
    *out = el;
    char host[256] = "?";
    gethostname(host, sizeof host);
    int rc = el->fixed || l->cfg.node_rank == 0
                 ? dt_store_join(l->store, l->cfg.node_rank, max, l->cfg.nproc, host)
                 : dt_store_join_any(l->store, max, l->cfg.nproc, host, &l->cfg.node_rank);
    if (rc)
        return el->fixed ? dt_error_prefix("node %d", l->cfg.node_rank)
                         : dt_error_prefix("elastic job (nodes %d:%d)", nodes_min, max);
    dt_agent__link_short_calls(l); /* every call from here is short and made at least every WAIT_S */
    if ((rc = dt_agent__link_register(l)) != 0)
        return rc;
    say_joined(el);
    return 0;
}

void dt_agent__elastic_free(struct dt_agent__elastic *el)
{
    if (!el)
        return;
    free(el->slots);
    free(el->incarns);
    free(el->ready);
    free(el->joined_inc);
    free(el->renew);
    free(el);
}

/* --- waiting ------------------------------------------------------------- */

/* One pause between looks: 1 when a signal came (left in sig_fd for the agent). */
static int pause_for(int sig_fd)
{
    return dt_proc_signals_wait(sig_fd, (int)(WAIT_S * 1000)) > 0;
}

/* Between looks while waiting: 0 to look again, 1 to stop with *status
 * (-1: a signal; else an abort, or the coordinator gone). */
static int between(struct dt_agent__elastic *el, int sig_fd, int *status)
{
    if (pause_for(sig_fd)) {
        *status = -1;
        return 1;
    }
    int rc = dt_agent__link_aborted(el->l, status);
    if (rc < 0)
        dt_agent__link_lost(el->l, status);
    return rc != 0;
}

/* --- forming a round (node 0) -------------------------------------------- */

static int publish_round(struct dt_agent__elastic *el, int k)
{
    struct dt_agent__rec_round round = {.restarts = el->restarts, .n = el->n, .slots = el->slots,
                                        .incarns = el->incarns};
    struct dt_agent__text t = {0}, latest = {0};
    char key[DT_AGENT__KEY_MAX];
    int rc = dt_agent__rec_round_encode(&round, &t);
    if (rc == 0)
        rc = dt_agent__rec_round_number_encode(k, &latest);
    if (rc == 0)
        rc = dt_agent__link_set(el->l, dt_agent__key(key, DT_AGENT__K_ROUND, k, 0), &t);
    if (rc == 0)
        rc = dt_agent__link_set(el->l, DT_AGENT__KEY_LATEST, &latest);
    if (rc == 0)
        rc = dt_agent__link_joins(el->l, &el->joins);
    for (int i = 0; i < el->max; i++)
        el->renew[i] = false;
    dt_agent__text_free(&t);
    dt_agent__text_free(&latest);
    return rc;
}

/* Room in ready and joined_inc for every slot given so far (an elastic
 * job's slots are never given twice, so they may number past MAX). */
static int make_room(struct dt_agent__elastic *el, const struct dt_store_member *m, int count)
{
    int need = el->max;
    for (int i = 0; i < count; i++)
        need = m[i].node_rank >= need ? m[i].node_rank + 1 : need;
    if (need <= el->room)
        return 0;
    bool *ready = realloc(el->ready, (size_t)need * sizeof *ready);
    if (ready)
        el->ready = ready;
    int *inc = realloc(el->joined_inc, (size_t)need * sizeof *inc);
    if (inc)
        el->joined_inc = inc;
    if (!ready || !inc)
        return dt_error_set(DT_ENOMEM, "out of memory for the slots of %d agents", need);
    el->room = need;
    return 0;
}

/* Whether slot's member may take part now: joined, and counted (a
 * fixed-size job's lost node: by a newer incarnation than the lost one);
 * its incarnation into joined_inc.  1, 0, or -1 on a store error. */
static int slot_ready(struct dt_agent__elastic *el, const struct dt_store_member *m)
{
    int slot = m->node_rank, inc = 0;
    bool joined = m->state == DT_STORE_MEMBER_JOINED, renew = false;
    if (el->fixed) { /* slot = node rank < max: incarns and renew are by slot */
        if (!joined && el->incarns[slot] > 0)
            el->renew[slot] = true; /* seen gone: the agent that joins next is its replacement */
        renew = el->renew[slot];
    }
    if (!joined)
        return 0;
    if (dt_agent__link_incarnation(el->l, slot, &inc) != 0)
        return -1;
    el->joined_inc[slot] = inc;
    return inc >= 1 && !(renew && inc <= el->incarns[slot]); /* else joined, not yet counted: a moment more */
}

/* Node 0: which slots may take part now, into el->ready; returns how many,
 * -1 on a store error, DT_ENOMEM.  *nproc_differs: a joined slot whose rank
 * count is not node 0's, or -1. */
static int ready_slots(struct dt_agent__elastic *el, int *nproc_differs)
{
    struct dt_store_member *m;
    int count, n = 0;
    if (dt_store_members(el->l->store, &m, &count) != 0)
        return -1;
    if (make_room(el, m, count) < 0) {
        free(m);
        return DT_ENOMEM;
    }
    *nproc_differs = -1;
    memset(el->ready, 0, (size_t)el->room * sizeof *el->ready);
    for (int i = 0; i < count && n >= 0; i++) {
        if (m[i].node_rank < 0)
            continue;
        if (m[i].state == DT_STORE_MEMBER_JOINED && m[i].nproc != el->l->cfg.nproc)
            *nproc_differs = m[i].node_rank;
        int r = slot_ready(el, &m[i]);
        n = r < 0 ? -1 : n + r;
        el->ready[m[i].node_rank] = r == 1;
    }
    free(m);
    return n;
}

/* The slots of a fixed-size job that are not ready, as "1, 3", into out. */
static void missing_nodes(const struct dt_agent__elastic *el, char *out, size_t size)
{
    size_t len = 0;
    out[0] = 0;
    for (int i = 0; i < el->max && len < size; i++)
        if (!el->ready[i])
            len += (size_t)snprintf(out + len, size - len, "%s%d", len ? ", " : "", i);
}

/* Node 0 gives up forming round k: the job ends everywhere, saying why. */
static int give_up(struct dt_agent__elastic *el, int code)
{
    dt_agent__link_abort(el->l, 1, dt_error_last());
    return code;
}

/* One look while forming round k: 0 to wait on, 1 formed (n ready), or
 * what begin returns (1 with *status, negative: the job ends). */
static int look_ready(struct dt_agent__elastic *el, int *n, int *status)
{
    int differs;
    *n = ready_slots(el, &differs);
    if (*n == DT_ENOMEM)
        return DT_ENOMEM;
    if (*n < 0)
        return dt_agent__link_lost(el->l, status), 1;
    if (differs < 0)
        return 0;
    dt_error_set(DT_EINVAL,
                 "node %s%d runs another number of ranks than node 0 (%d): nproc_per_node must come out the same "
                 "on every node (WORLD_SIZE = nnodes x nproc_per_node)",
                 el->fixed ? "" : "slot ", differs, el->l->cfg.nproc);
    return give_up(el, DT_EINVAL);
}

static void say_timeout(const struct dt_agent__elastic *el, int k, int n, const char *missing)
{
    const struct dt_agent__link *l = el->l;
    const char *s = strchr(missing, ',') ? "s" : "";
    if (!el->fixed)
        dt_error_set(DT_ETIMEDOUT,
                     "round %d: only %d of the %d nodes the job needs (nodes %d:%d) joined the coordinator at %s "
                     "within rendezvous.timeout (%gs)",
                     k, n, el->min, el->min, el->max, l->coord, l->cfg.timeout_s);
    else if (k == 0)
        dt_error_set(DT_ETIMEDOUT,
                     "only %d of %d nodes joined the coordinator at %s within rendezvous.timeout (%gs); missing "
                     "node%s %s",
                     n, el->max, l->coord, l->cfg.timeout_s, s, missing);
    else
        dt_error_set(DT_ETIMEDOUT,
                     "round %d: no new agent for node%s %s joined within rendezvous.timeout (%gs) after it was "
                     "lost: start `dtrain agent --node-rank N` for it (what a scheduler does for a lost pod or "
                     "node), or raise rendezvous.timeout",
                     k, s, missing, l->cfg.timeout_s);
}

/* Round k's nodes, once enough are ready: a fixed-size job's are every
 * node rank, each by its newest agent; an elastic job's are MIN to MAX of
 * the agents there are, lowest slot first, MAX at once or those there are
 * rendezvous.last_call_timeout after MIN. */
static int form(struct dt_agent__elastic *el, int k, int sig_fd, int *status)
{
    struct dt_agent__link *l = el->l;
    double deadline = dt_clock_s() + l->cfg.timeout_s, min_at = 0;
    char missing[256] = "";
    bool said = false;
    for (;;) {
        int n, rc = look_ready(el, &n, status);
        if (rc != 0)
            return rc;
        double now = dt_clock_s();
        if (n >= el->min && min_at == 0)
            min_at = now;
        if (n >= el->max || (min_at > 0 && now - min_at >= l->cfg.job->rendezvous.last_call_timeout_s))
            break;
        if (el->fixed)
            missing_nodes(el, missing, sizeof missing);
        if (min_at == 0 && now >= deadline) {
            say_timeout(el, k, n, missing);
            return give_up(el, DT_ETIMEDOUT);
        }
        if (el->fixed && k > 0 && !said)
            dt_log_warn("round %d: waiting up to %gs (rendezvous.timeout) for a new agent of node%s %s to join "
                        "(`dtrain agent --node-rank N`, or the scheduler's replacement)",
                        k, l->cfg.timeout_s, strchr(missing, ',') ? "s" : "", missing);
        said = true;
        if (pause_for(sig_fd)) {
            *status = -1;
            return 1;
        }
    }
    el->n = 0;
    for (int s = 0; s < el->room && el->n < el->max; s++)
        if (el->ready[s]) {
            el->slots[el->n] = s;
            el->incarns[el->n++] = el->joined_inc[s];
        }
    return publish_round(el, k) != 0 ? (dt_agent__link_lost(l, status), 1) : 0;
}

/* --- finding this node's place (the others) ------------------------------ */

/* Round k's record into el; 1 when this agent is in it, 0 when not, 2 when
 * a newer incarnation of its slot is (this one is fenced out), -1 when it
 * cannot be read (a store error, or a record node 0 does not write). */
static int read_round(struct dt_agent__elastic *el, int k)
{
    char key[DT_AGENT__KEY_MAX], *v = NULL;
    size_t len = 0;
    struct dt_agent__rec_round round = {.slots = el->slots, .incarns = el->incarns};
    int rc = dt_agent__link_get(el->l, dt_agent__key(key, DT_AGENT__K_ROUND, k, 0), &v, &len);
    if (rc == 0 && (rc = dt_agent__rec_round_decode(v, len, el->max, &round)) < 0)
        dt_error_prefix("%s", key);
    free(v);
    if (rc < 0)
        return -1;
    el->restarts = round.restarts;
    el->n = round.n;
    int mine = el->l->incarnation;
    for (int i = 0; i < round.n; i++)
        if (round.slots[i] == el->l->cfg.node_rank)
            return round.incarns[i] == mine ? 1 : round.incarns[i] > mine ? 2 : 0;
    return 0;
}

/* Round k's verdict: 1 "next", 0 "done" (*status), 2 not yet, -1 on error. */
static int read_verdict(struct dt_agent__elastic *el, int k, int *status)
{
    char key[DT_AGENT__KEY_MAX], *v = NULL;
    size_t len = 0;
    int rc = dt_agent__link_exists(el->l, dt_agent__key(key, DT_AGENT__K_VERDICT, k, 0));
    if (rc <= 0)
        return rc < 0 ? -1 : 2;
    if (dt_agent__link_get(el->l, key, &v, &len) != 0)
        return -1;
    struct dt_agent__rec_verdict verdict;
    if (dt_agent__rec_verdict_decode(v, len, &verdict) < 0) { /* the job is over, in words no agent writes */
        dt_log_error("%s: %s; ending the job", key, dt_error_last());
        verdict = (struct dt_agent__rec_verdict){.next = false, .status = 1};
    }
    free(v);
    if (verdict.next)
        return 1;
    *status = verdict.status;
    return 0;
}

/* The newest round's number into *k; 0, or negative. */
static int read_latest(struct dt_agent__elastic *el, int *k)
{
    char *v = NULL;
    size_t len = 0;
    int rc = dt_agent__link_exists(el->l, DT_AGENT__KEY_LATEST);
    if (rc == 1 && (rc = dt_agent__link_get(el->l, DT_AGENT__KEY_LATEST, &v, &len)) == 0 &&
        (rc = dt_agent__rec_round_number_decode(v, len, DT_AGENT__MAX_ROUNDS - 1, k)) < 0)
        dt_error_prefix("%s", DT_AGENT__KEY_LATEST);
    free(v);
    return rc < 0 ? rc : 0;
}

static void say_not_in(struct dt_agent__elastic *el, int k)
{
    if (el->told_wait)
        return;
    el->told_wait = true;
    if (el->fixed)
        dt_log_info("round %d runs node %d with its earlier agent; this one (agent #%d of node %d) takes its "
                    "place in the next round",
                    k, el->l->cfg.node_rank, el->l->incarnation, el->l->cfg.node_rank);
    else
        dt_log_info("round %d runs with %d node%s without this one; waiting for the next", k, el->n,
                    el->n == 1 ? "" : "s");
}

/* Looks once for round *k and this node's place in it: 0 in it, 1 the job
 * ended without it (*status), 2 look again, 3 fenced out, -1 on error. */
static int look_for_place(struct dt_agent__elastic *el, int *k, int *status)
{
    char key[DT_AGENT__KEY_MAX];
    if (*k < 0)
        return read_latest(el, k) < 0 ? -1 : 2;
    int rc = dt_agent__link_exists(el->l, dt_agent__key(key, DT_AGENT__K_ROUND, *k, 0));
    if (rc != 1)
        return rc < 0 ? -1 : 2;
    int in = read_round(el, *k);
    if (in == 2)
        return 3;
    if (in != 0)
        return in < 0 ? -1 : 0;
    say_not_in(el, *k);
    int v = read_verdict(el, *k, status);
    if (v == 1)
        (*k)++;
    if (v == 0)
        dt_log_info("the job ended in round %d without this node (status %d)", *k, *status);
    return v < 0 ? -1 : v == 0 ? 1 : 2;
}

/* 0 placed in round *k, 1 the job ended without this agent (*status), 2
 * fenced out by a newer agent of its slot. */
static int wait_place(struct dt_agent__elastic *el, int *k, int sig_fd, int *status)
{
    for (;;) {
        int rc = look_for_place(el, k, status);
        if (rc == 3) {
            dt_log_error("node %d: round %d runs this node with a newer agent than this one (agent #%d): this "
                         "agent was cut off from the job, which went on and replaced it; stopping without "
                         "touching the job",
                         el->l->cfg.node_rank, *k, el->l->incarnation);
            el->l->fenced = true;
            *status = 1;
            return 2;
        }
        if (rc == 0 || rc == 1)
            return rc;
        if (rc < 0)
            return dt_agent__link_lost(el->l, status), 1;
        if (between(el, sig_fd, status))
            return 1;
    }
}

int dt_agent__elastic_begin(struct dt_agent__elastic *el, int *attempt, int sig_fd, struct dt_agent_place *place,
                            int *status)
{
    struct dt_agent__link *l = el->l;
    if (l->dead) {
        *status = 1;
        return 1;
    }
    int k = el->next, rc;
    if (k >= DT_AGENT__MAX_ROUNDS)
        return dt_error_set(DT_ENOMEM, "a job of more than %d rounds", DT_AGENT__MAX_ROUNDS);
    if (l->cfg.node_rank == 0)
        rc = form(el, k, sig_fd, status);
    else
        rc = wait_place(el, &k, sig_fd, status);
    if (rc != 0)
        return rc;
    int node = 0;
    while (node < el->n && el->slots[node] != l->cfg.node_rank)
        node++;
    *place = (struct dt_agent_place){.node_rank = node, .nnodes = el->n, .restarts = el->restarts};
    *attempt = k;
    el->next = k + 1;
    el->change_set = el->told = el->told_wait = false;
    dt_agent__hb_place(el->hb, node, el->n);
    int first = dt_placement_rank_of(l->cfg.nproc, node, 0);
    int last = dt_placement_rank_of(l->cfg.nproc, node, l->cfg.nproc - 1);
    if (!el->fixed)
        dt_log_info("round %d: node %d of %d (nodes %d:%d), global ranks %d-%d, %d restart%s after failures "
                    "so far",
                    k, node, el->n, el->min, el->max, first, last, el->restarts, el->restarts == 1 ? "" : "s");
    else if (k > 0)
        dt_log_info("round %d: node %d of %d, global ranks %d-%d, restart %d of %d", k, node, el->n, first, last,
                    el->restarts, l->cfg.job->max_restarts);
    return 0;
}

/* --- while a round runs -------------------------------------------------- */

static bool in_round(const struct dt_agent__elastic *el, int slot)
{
    for (int i = 0; i < el->n; i++)
        if (el->slots[i] == slot)
            return true;
    return false;
}

/* Slot m, lost, as "a node of the round was lost: <the coordinator's words>"
 * into why (membership_changed says it so too); the first is kept for
 * summary.json. */
static void say_lost(struct dt_agent__elastic *el, const struct dt_store_member *m, char *why, size_t n)
{
    char lost[512];
    struct dt_agent__link *l = el->l;
    dt_agent__link_keep_lost(l, m);
    if (!l->cfg.coord || dt_coord_member_lost(l->cfg.coord, m->node_rank, lost, sizeof lost, NULL) != 0)
        snprintf(lost, sizeof lost, "%s %d (host %s, agent pid %ld) left the job mid-round: its agent was stopped",
                 el->fixed ? "node" : "slot", m->node_rank, m->host, m->pid);
    snprintf(why, n, "a node of the round was lost: %s", lost);
}

static void say_replaced(struct dt_agent__elastic *el, int i, int now, char *why, size_t n)
{
    snprintf(why, n,
             "a node of the round was lost: node %d's agent of this round (agent #%d) was replaced by a new one "
             "(agent #%d) before it was seen to go",
             el->slots[i], el->incarns[i], now);
}

/* Node 0: a node of the round whose agent was replaced by a newer
 * incarnation (it was lost and a new one joined between two looks); looked
 * for only when dtrain/joins moved.  1 with why, 0, -1 on a store error. */
static int replaced(struct dt_agent__elastic *el, char *why, size_t n)
{
    long long joins;
    if (dt_agent__link_joins(el->l, &joins) != 0)
        return -1;
    if (joins == el->joins)
        return 0;
    el->joins = joins; /* an incarnation is counted before the join: what moved is seen below */
    for (int i = 0; i < el->n; i++) {
        int now;
        if (dt_agent__link_incarnation(el->l, el->slots[i], &now) != 0)
            return -1;
        if (now != el->incarns[i]) {
            say_replaced(el, i, now, why, n);
            return 1;
        }
    }
    return 0;
}

/* Node 0: why the round must stop for its membership, into why; 1 if so. */
static int membership_changed(struct dt_agent__elastic *el, char *why, size_t n)
{
    struct dt_store_member *m;
    int count, changed = 0;
    if (dt_store_members(el->l->store, &m, &count) != 0)
        return -1;
    for (int i = 0; i < count && !changed; i++) {
        bool part = in_round(el, m[i].node_rank);
        if (part && m[i].state != DT_STORE_MEMBER_JOINED) {
            say_lost(el, &m[i], why, n);
            changed = 1;
        } else if (!part && m[i].state == DT_STORE_MEMBER_JOINED && el->n < el->max) {
            snprintf(why, n, "an agent waits to join (slot %d on %s, agent pid %ld) and the round has %d of at "
                             "most %d nodes",
                     m[i].node_rank, m[i].host, m[i].pid, el->n, el->max);
            changed = 1;
        }
    }
    free(m);
    return changed ? changed : replaced(el, why, n);
}

/* Node 0 writes change/<k> once the round's membership changed. */
static int note_change(struct dt_agent__elastic *el, int k)
{
    char why[700], key[DT_AGENT__KEY_MAX];
    int rc = membership_changed(el, why, sizeof why);
    if (rc != 1)
        return rc;
    struct dt_agent__text t = {.p = why, .len = strlen(why)};
    rc = dt_agent__link_set(el->l, dt_agent__key(key, DT_AGENT__K_CHANGE, k, 0), &t);
    el->change_set = rc == 0;
    return rc;
}

enum dt_agent_verdict dt_agent__elastic_poll(struct dt_agent__elastic *el, const struct dt_agent_result *res,
                                             int k, int *status)
{
    struct dt_agent__link *l = el->l;
    char why[700], key[DT_AGENT__KEY_MAX];
    int rc = dt_agent__link_aborted(l, status);
    if (rc == 1)
        return DT_AGENT_ABORT;
    if (rc == 0 && l->cfg.node_rank == 0 && !el->change_set)
        rc = note_change(el, k);
    int change = rc >= 0 ? dt_agent__link_exists(l, dt_agent__key(key, DT_AGENT__K_CHANGE, k, 0)) : rc;
    int fail = change == 0 ? dt_agent__link_exists(l, dt_agent__key(key, DT_AGENT__K_FAIL, k, 0)) : 0;
    if (change < 0 || fail < 0)
        return dt_agent__link_lost(l, status);
    if (!change && !fail)
        return DT_AGENT_GO_ON;
    if (!el->told && change) {
        if (dt_agent__link_get_text(l, dt_agent__key(key, DT_AGENT__K_CHANGE, k, 0), why, sizeof why) == 0)
            dt_log_warn("round %d: %s; stopping this node's ranks to go on with %s", k, why,
                        el->fixed ? "a new agent for that node" : "the new membership");
    } else if (!el->told && res->attempts[k].first_failed < 0) {
        dt_log_warn("node %d: a rank on another node failed in round %d; stopping this node's ranks",
                    l->cfg.node_rank, k);
    }
    el->told = true;
    return DT_AGENT_STOP_ATTEMPT;
}

/* --- after a round ------------------------------------------------------- */

/* Every rank of this node exited 0 by itself. */
static bool finished(const struct dt_agent_result *res, int k)
{
    const struct dt_agent_attempt *at = &res->attempts[k];
    for (int i = 0; i < res->nproc; i++) {
        const struct dt_agent_rank_result *rr = &at->ranks[i];
        if (!rr->exited || rr->stopped_by_agent || !WIFEXITED(rr->wstatus) || WEXITSTATUS(rr->wstatus) != 0)
            return false;
    }
    return at->first_failed < 0;
}

/* Slot's end of round k: 1 ended (*done: its ranks finished), 0 not yet,
 * negative on a store error.  A record no agent writes is an end, not a finish. */
static int slot_ended(struct dt_agent__elastic *el, int k, int slot, bool *done)
{
    char key[DT_AGENT__KEY_MAX], *v = NULL;
    size_t len = 0;
    struct dt_agent__rec_slot_end end = {.finished = false};
    int rc = dt_agent__link_exists(el->l, dt_agent__key(key, DT_AGENT__K_SLOT_END, k, slot));
    if (rc == 1 && dt_agent__link_get(el->l, key, &v, &len) == 0 && dt_agent__rec_slot_end_decode(v, len, &end) < 0)
        dt_log_warn("%s: %s", key, dt_error_last());
    free(v);
    *done = rc == 1 && end.finished;
    return rc;
}

/* Node 0: whether node i of the round still has its agent of the round: its
 * slot joined, and (a fixed-size job, whose slots come back) by the same
 * incarnation.  1 there, 0 gone (why says so, the first time), -1 on error. */
static int still_there(struct dt_agent__elastic *el, int i, const struct dt_store_member *m, int count, char *why,
                       size_t n)
{
    const struct dt_store_member *mine = NULL;
    for (int j = 0; j < count; j++)
        if (m[j].node_rank == el->slots[i])
            mine = &m[j];
    if (mine && mine->state != DT_STORE_MEMBER_JOINED) {
        if (!why[0])
            say_lost(el, mine, why, n);
    } else if (mine && el->fixed) {
        int now;
        if (dt_agent__link_incarnation(el->l, el->slots[i], &now) != 0)
            return -1;
        if (now == el->incarns[i])
            return 1;
        if (!why[0])
            say_replaced(el, i, now, why, n);
    } else if (mine) {
        return 1;
    }
    if (el->fixed)
        el->renew[el->slots[i]] = true;
    return 0;
}

/* Node 0: waits until each node of the round ended it or was lost; *lost
 * and *all_done say how, why the first lost one (or "").  0, 1 on a signal
 * or abort (*status), negative. */
static int wait_ends(struct dt_agent__elastic *el, int k, int sig_fd, int *lost, bool *all_done, char *why,
                     size_t n, int *status)
{
    for (;;) {
        struct dt_store_member *m;
        int count, waiting = 0, rc = 0;
        *lost = 0;
        *all_done = true;
        if (dt_store_members(el->l->store, &m, &count) != 0)
            return dt_agent__link_lost(el->l, status), 1;
        for (int i = 0; i < el->n && rc >= 0; i++) {
            bool done = false;
            int ended = slot_ended(el, k, el->slots[i], &done);
            int there = ended == 1 ? 1 : ended == 0 ? still_there(el, i, m, count, why, n) : -1;
            rc = there < 0 ? -1 : 0;
            *all_done &= done;
            *lost += ended != 1 && there == 0;
            waiting += ended != 1 && there == 1;
        }
        free(m);
        if (rc < 0)
            return dt_agent__link_lost(el->l, status), 1;
        if (waiting == 0)
            return 0;
        dt_agent__hb_relay(el->hb, el->l); /* another node's ranks may still run: their watchdog */
        if (between(el, sig_fd, status))
            return 1;
    }
}

/* Round k as summary.json tells it (agent.h: round_end). */
static void describe(struct dt_agent_result *res, int k, int nodes, const char *end, const char *why)
{
    struct dt_agent_attempt *at = &res->attempts[k];
    at->round_nodes = nodes;
    snprintf(at->round_end, sizeof at->round_end, "%s", end);
    snprintf(at->round_why, sizeof at->round_why, "%.*s", (int)sizeof at->round_why - 1, why);
}

/* Node 0: round k's failure decides: restart (counted) or the job's end. */
static struct dt_agent__rec_verdict decide_failure(struct dt_agent__elastic *el, struct dt_agent_result *res, int k,
                                                   const struct dt_agent__rec_fail *f)
{
    char desc[160], why[700];
    const struct dt_job *job = el->l->cfg.job;
    int st = dt_proc_exit_status(f->wstatus);
    if (f->hung)
        snprintf(desc, sizeof desc, "was hung (killed by dtrain's watchdog)");
    else
        dt_proc_describe(f->wstatus, true, desc, sizeof desc);
    if (f->node != 0)
        dt_agent__link_read_failinfo(el->l, res, k, f->node);
    bool retry = dt_job_exit_action(job, st) == DT_EXIT_RETRY;
    if (el->fixed)
        snprintf(why, sizeof why, "rank %d on node %d %s first", f->rank, f->node, desc);
    else
        snprintf(why, sizeof why, "rank %d (node slot %d) %s first", f->rank, f->node, desc);
    if (retry && el->restarts < job->max_restarts) {
        el->restarts++;
        dt_log_warn("round %d: %s; every node restarts its ranks (restart %d of %d)", k, why, el->restarts,
                    job->max_restarts);
        describe(res, k, el->n, "restart", why);
        return (struct dt_agent__rec_verdict){.next = true};
    }
    if (res->have_failure && res->first_failure.attempt == k)
        res->first_failure.final = !retry;
    dt_log_error("the job failed in round %d: %s%s", k, why, retry ? " (no restarts left)" : " (restart_policy: fail)");
    describe(res, k, el->n, "failed", why);
    return (struct dt_agent__rec_verdict){.next = false, .status = st};
}

/* Node 0, a fixed-size job: a node of round k was lost.  The next round,
 * with its replacement, counts against max_restarts (torchrun's agents see
 * their workers fail when a peer's host goes, and restart as for any
 * failure); without restarts left the job fails, status 1. */
static struct dt_agent__rec_verdict decide_lost(struct dt_agent__elastic *el, struct dt_agent_result *res, int k,
                                                const char *why)
{
    const struct dt_job *job = el->l->cfg.job;
    if (el->restarts < job->max_restarts) {
        el->restarts++;
        dt_log_warn("round %d: %s; every node restarts its ranks once a new agent for it has joined (restart %d "
                    "of %d)",
                    k, why, el->restarts, job->max_restarts);
        describe(res, k, el->n, "restart", why);
        return (struct dt_agent__rec_verdict){.next = true};
    }
    dt_log_error("the job failed in round %d: %s, and no restarts are left (max_restarts %d)", k, why,
                 job->max_restarts);
    describe(res, k, el->n, "failed", why);
    return (struct dt_agent__rec_verdict){.next = false, .status = 1};
}

/* Node 0: round k's verdict, from its failure (fail/<k>) and membership. */
static struct dt_agent__rec_verdict decide(struct dt_agent__elastic *el, struct dt_agent_result *res, int k,
                                           int lost, const char *lost_why, bool all_done)
{
    char key[DT_AGENT__KEY_MAX], why[700] = "", unreadable[600] = "";
    const struct dt_agent__rec_verdict next = {.next = true}, done = {.next = false, .status = 0};
    if (all_done) {
        describe(res, k, el->n, "finished", "every rank exited 0");
        return done;
    }
    struct dt_agent__rec_fail f;
    int failed = dt_agent__link_read_fail(el->l, k, &f);
    if (failed < 0 && dt_error_code() == DT_EPROTO)
        snprintf(unreadable, sizeof unreadable, "%s", dt_error_last());
    bool change = dt_agent__link_exists(el->l, dt_agent__key(key, DT_AGENT__K_CHANGE, k, 0)) == 1;
    if (change)
        dt_agent__link_get_text(el->l, key, why, sizeof why);
    if (!why[0])
        snprintf(why, sizeof why, "%s", lost_why);
    /* A lost node's peers fail too (their collectives lose it): the loss is the cause. */
    if (el->fixed && (lost > 0 || change))
        return decide_lost(el, res, k, why);
    if (lost > 0 || (change && failed != 1 && !unreadable[0])) {
        dt_log_warn("round %d ends for a membership change (%d node%s lost): the next round starts with the "
                    "nodes there are; not counted against max_restarts",
                    k, lost, lost == 1 ? "" : "s");
        describe(res, k, el->n, "membership", why);
        return next;
    }
    if (failed == 1)
        return decide_failure(el, res, k, &f);
    if (unreadable[0]) { /* a failure no agent wrote: the job cannot tell what to retry */
        dt_log_error("the job failed in round %d: %s", k, unreadable);
        describe(res, k, el->n, "failed", unreadable);
        return (struct dt_agent__rec_verdict){.next = false, .status = 1};
    }
    describe(res, k, el->n, "finished", "every rank exited 0");
    return done;
}

/* Node 0: waits for the round's end everywhere, decides and publishes. */
static int conclude(struct dt_agent__elastic *el, struct dt_agent_result *res, int k, int sig_fd, bool *restart,
                    int *status)
{
    int lost;
    bool all_done;
    char lost_why[600] = "", key[DT_AGENT__KEY_MAX];
    if (wait_ends(el, k, sig_fd, &lost, &all_done, lost_why, sizeof lost_why, status) != 0)
        return *status < 0 ? 1 : 0;
    struct dt_agent__rec_verdict verdict = decide(el, res, k, lost, lost_why, all_done);
    struct dt_agent__text t = {0};
    int rc = dt_agent__rec_verdict_encode(&verdict, &t);
    if (rc == 0)
        rc = dt_agent__link_set(el->l, dt_agent__key(key, DT_AGENT__K_VERDICT, k, 0), &t);
    dt_agent__text_free(&t);
    if (rc != 0) {
        dt_agent__link_lost(el->l, status);
        return 0;
    }
    *restart = verdict.next;
    if (!verdict.next)
        *status = verdict.status;
    return 0;
}

int dt_agent__elastic_attempt_end(struct dt_agent__elastic *el, struct dt_agent_result *res, int k, int sig_fd,
                                  bool *restart, int *status)
{
    char key[DT_AGENT__KEY_MAX];
    struct dt_agent__rec_slot_end end = {.finished = finished(res, k)};
    struct dt_agent__text t = {0};
    int rc = dt_agent__rec_slot_end_encode(&end, &t);
    if (rc == 0)
        rc = dt_agent__link_set(el->l, dt_agent__key(key, DT_AGENT__K_SLOT_END, k, el->l->cfg.node_rank), &t);
    dt_agent__text_free(&t);
    if (rc != 0) {
        dt_agent__link_lost(el->l, status);
        return 0;
    }
    if (el->l->cfg.node_rank == 0)
        return conclude(el, res, k, sig_fd, restart, status);
    while ((rc = read_verdict(el, k, status)) == 2)
        if (between(el, sig_fd, status))
            return *status < 0 ? 1 : 0;
    if (rc < 0) {
        dt_agent__link_lost(el->l, status);
        return 0;
    }
    *restart = rc == 1;
    return 0;
}
