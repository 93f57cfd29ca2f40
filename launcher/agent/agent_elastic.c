/* agent_elastic.c - the rounds of an elastic job (nodes: MIN:MAX): which
 * agents take part in each round and as which node, and the membership
 * changes that restart the ranks without counting against max_restarts.
 *
 * torchrun's c10d rendezvous on dtrain's coordinator.  Node 0's agent (it
 * hosts the coordinator, and was started with --node-rank 0) decides; the
 * others JOIN without a node rank, get a slot (coord_rendezvous.c) and
 * follow the keys node 0 writes:
 *
 *   dtrain/round/<k>       "<restarts> <n> <slot> ...": round k's nodes, in
 *                          node-rank order (slot 0, node 0's, first); restarts
 *                          = restarts after failures so far
 *   dtrain/latest          k of the newest dtrain/round/<k>
 *   dtrain/change/<k>      why round k stops for a membership change
 *   dtrain/end/<k>/<slot>  "0": that node's ranks of round k all exited 0
 *                          by themselves; "1" otherwise
 *   dtrain/verdict/<k>     "next" (round k+1 follows) or "done <status>"
 *
 * Forming round k (node 0): wait until MIN agents are joined (at most
 * rendezvous.timeout), then until MAX are or rendezvous.last_call_timeout
 * has passed; the joined slots, lowest first and at most MAX, are the round.
 * While it runs node 0 writes change/<k> when one of its nodes is lost
 * (connection closed, or unacknowledged for heartbeat_timeout), or when an
 * agent outside it waits and the round has fewer than MAX; every node then
 * stops its ranks, as for another node's failure (fail/<k>, agent_rounds.c).
 * After the round every node writes end/<k>/<slot>; node 0 waits for each
 * of its nodes' key, or its loss, and decides:
 *   every node's ranks finished                 done 0 (an agent waiting to
 *                                               join does not restart a job
 *                                               that is over, as in torchrun)
 *   a node of the round was lost, or change/<k> next, not counted
 *   a failure restart_policy retries, restarts  next, counted
 *   left (max_restarts counts failures only)
 *   any other failure                           done <the rank's status>
 * An agent that is not in the newest round (it came late, or MAX were
 * there) waits for that round's verdict and the next round; a job that ends
 * without it ends it too, with the job's status.
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
    int restarts;    /* restarts after failures so far */
    int n;           /* nodes of the current round */
    int *slots;      /* their slots, max entries */
    int next;        /* the round begin looks for; -1: the newest */
    bool change_set; /* node 0: change/<k> written for the current round */
    bool told;       /* this round's stop was said */
    bool told_wait;  /* "waiting for a place" was said */
};

/* --- joining ------------------------------------------------------------- */

int dt_agent__elastic_open(struct dt_agent__link *l, struct dt_agent__hb_relay *hb, int nodes_min,
                           struct dt_agent__elastic **out)
{
    struct dt_agent__elastic *el = calloc(1, sizeof *el);
    int max = l->cfg.nnodes;
    *out = NULL;
    if (!el || !(el->slots = calloc((size_t)max, sizeof *el->slots))) {
        free(el);
        return dt_error_set(DT_ENOMEM, "out of memory for an elastic job of %d nodes", max);
    }
    *el = (struct dt_agent__elastic){.l = l, .hb = hb, .min = nodes_min, .max = max, .slots = el->slots,
                                     .next = l->cfg.node_rank == 0 ? 0 : -1};
    *out = el;
    char host[256] = "?";
    gethostname(host, sizeof host);
    int rc = l->cfg.node_rank == 0 ? dt_store_join(l->store, 0, max, l->cfg.nproc, host)
                                   : dt_store_join_any(l->store, max, l->cfg.nproc, host, &l->cfg.node_rank);
    if (rc)
        return dt_error_prefix("elastic job (nodes %d:%d)", nodes_min, max);
    dt_agent__link_short_calls(l); /* every call from here is short and made at least every WAIT_S */
    if (l->cfg.node_rank != 0)
        dt_log_info("joined the elastic job at %s as slot %d; waiting for a place in a round", l->coord,
                    l->cfg.node_rank);
    return 0;
}

void dt_agent__elastic_free(struct dt_agent__elastic *el)
{
    if (el)
        free(el->slots);
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

/* The joined slots (state joined), lowest first, into out (at most max);
 * returns how many there are in all. */
static int joined_slots(struct dt_agent__elastic *el, int *out, int max, int *nproc_differs)
{
    struct dt_store_member *m;
    int count, n = 0;
    if (dt_store_members(el->l->store, &m, &count) != 0)
        return -1;
    *nproc_differs = -1;
    for (int i = 0; i < count; i++) {
        if (m[i].state != DT_STORE_MEMBER_JOINED)
            continue;
        if (m[i].nproc != el->l->cfg.nproc)
            *nproc_differs = m[i].node_rank;
        if (n < max)
            out[n] = m[i].node_rank;
        n++;
    }
    free(m);
    return n;
}

/* --- forming a round (node 0) -------------------------------------------- */

static int publish_round(struct dt_agent__elastic *el, int k)
{
    struct dt_agent__rec_round round = {.restarts = el->restarts, .n = el->n, .slots = el->slots};
    struct dt_agent__text t = {0}, latest = {0};
    char key[DT_AGENT__KEY_MAX];
    int rc = dt_agent__rec_round_encode(&round, &t);
    if (rc == 0)
        rc = dt_agent__rec_round_number_encode(k, &latest);
    if (rc == 0)
        rc = dt_agent__link_set(el->l, dt_agent__key(key, DT_AGENT__K_ROUND, k, 0), &t);
    if (rc == 0)
        rc = dt_agent__link_set(el->l, DT_AGENT__KEY_LATEST, &latest);
    dt_agent__text_free(&t);
    dt_agent__text_free(&latest);
    return rc;
}

static int form(struct dt_agent__elastic *el, int k, int sig_fd, int *status)
{
    struct dt_agent__link *l = el->l;
    const struct dt_job *job = l->cfg.job;
    double deadline = dt_clock_s() + l->cfg.timeout_s, min_at = 0;
    for (;;) {
        int differs, n = joined_slots(el, el->slots, el->max, &differs);
        if (n < 0)
            return dt_agent__link_lost(l, status), 1;
        if (differs >= 0) {
            dt_error_set(DT_EINVAL,
                         "node slot %d runs another number of ranks than node 0 (%d): nproc_per_node must "
                         "come out the same on every node",
                         differs, l->cfg.nproc);
            dt_agent__link_abort(l, 1, dt_error_last());
            return DT_EINVAL;
        }
        double now = dt_clock_s();
        if (n >= el->min && min_at == 0)
            min_at = now;
        if (n >= el->max || (min_at > 0 && now - min_at >= job->rendezvous.last_call_timeout_s)) {
            el->n = n < el->max ? n : el->max;
            break;
        }
        if (min_at == 0 && now >= deadline) {
            dt_error_set(DT_ETIMEDOUT,
                         "round %d: only %d of the %d nodes the job needs (nodes %d:%d) joined the "
                         "coordinator at %s within rendezvous.timeout (%gs)",
                         k, n, el->min, el->min, el->max, l->coord, l->cfg.timeout_s);
            dt_agent__link_abort(l, 1, dt_error_last());
            return DT_ETIMEDOUT;
        }
        if (pause_for(sig_fd)) {
            *status = -1;
            return 1;
        }
    }
    if (publish_round(el, k) != 0)
        return dt_agent__link_lost(l, status), 1;
    return 0;
}

/* --- finding this node's place (the others) ------------------------------ */

/* Round k's record into el; 1 when this node is in it, 0 when not, -1
 * when it cannot be read (a store error, or a record node 0 does not write). */
static int read_round(struct dt_agent__elastic *el, int k)
{
    char key[DT_AGENT__KEY_MAX], *v = NULL;
    size_t len = 0;
    struct dt_agent__rec_round round = {.slots = el->slots};
    int rc = dt_agent__link_get(el->l, dt_agent__key(key, DT_AGENT__K_ROUND, k, 0), &v, &len);
    if (rc == 0 && (rc = dt_agent__rec_round_decode(v, len, el->max, &round)) < 0)
        dt_error_prefix("%s", key);
    free(v);
    if (rc < 0)
        return -1;
    el->restarts = round.restarts;
    el->n = round.n;
    int in = 0;
    for (int i = 0; i < round.n; i++)
        in |= round.slots[i] == el->l->cfg.node_rank;
    return in;
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

/* Looks once for round *k and this node's place in it: 0 in it, 1 the job
 * ended without it (*status), 2 look again, -1 on error. */
static int look_for_place(struct dt_agent__elastic *el, int *k, int *status)
{
    char key[DT_AGENT__KEY_MAX];
    if (*k < 0)
        return read_latest(el, k) < 0 ? -1 : 2;
    int rc = dt_agent__link_exists(el->l, dt_agent__key(key, DT_AGENT__K_ROUND, *k, 0));
    if (rc != 1)
        return rc < 0 ? -1 : 2;
    int in = read_round(el, *k);
    if (in != 0)
        return in < 0 ? -1 : 0;
    if (!el->told_wait) {
        dt_log_info("round %d runs with %d node%s without this one; waiting for the next", *k, el->n,
                    el->n == 1 ? "" : "s");
        el->told_wait = true;
    }
    int v = read_verdict(el, *k, status);
    if (v == 1)
        (*k)++;
    if (v == 0)
        dt_log_info("the job ended in round %d without this node (status %d)", *k, *status);
    return v < 0 ? -1 : v == 0 ? 1 : 2;
}

static int wait_place(struct dt_agent__elastic *el, int *k, int sig_fd, int *status)
{
    for (;;) {
        int rc = look_for_place(el, k, status);
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
        return dt_error_set(DT_ENOMEM, "an elastic job of more than %d rounds", DT_AGENT__MAX_ROUNDS);
    rc = l->cfg.node_rank == 0 ? form(el, k, sig_fd, status) : wait_place(el, &k, sig_fd, status);
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
    dt_log_info("round %d: node %d of %d (nodes %d:%d), global ranks %d-%d, %d restart%s after failures so far",
                k, node, el->n, el->min, el->max, node * l->cfg.nproc, (node + 1) * l->cfg.nproc - 1,
                el->restarts, el->restarts == 1 ? "" : "s");
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
        snprintf(lost, sizeof lost, "slot %d (%s, agent pid %ld) left", m->node_rank, m->host, m->pid);
    snprintf(why, n, "a node of the round was lost: %s", lost);
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
    return changed;
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
            dt_log_warn("round %d: %s; stopping this node's ranks to go on with the new membership", k, why);
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

/* Node 0: waits until each node of the round ended it or was lost; *lost
 * and *all_done say how, why the first lost one (or "").  0, 1 on a signal
 * or abort (*status), negative. */
static int wait_ends(struct dt_agent__elastic *el, int k, int sig_fd, int *lost, bool *all_done, char *why,
                     size_t n, int *status)
{
    for (;;) {
        struct dt_store_member *m;
        int count, waiting = 0;
        *lost = 0;
        *all_done = true;
        if (dt_store_members(el->l->store, &m, &count) != 0)
            return dt_agent__link_lost(el->l, status), 1;
        for (int i = 0; i < el->n; i++) {
            bool done = false, joined = false;
            int ended = slot_ended(el, k, el->slots[i], &done);
            for (int j = 0; j < count; j++) {
                joined |= m[j].node_rank == el->slots[i] && m[j].state == DT_STORE_MEMBER_JOINED;
                if (m[j].node_rank == el->slots[i] && m[j].state != DT_STORE_MEMBER_JOINED && ended != 1 &&
                    !why[0])
                    say_lost(el, &m[j], why, n);
            }
            *all_done &= done;
            *lost += ended != 1 && !joined;
            waiting += ended != 1 && joined;
        }
        free(m);
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
    dt_proc_describe(f->wstatus, true, desc, sizeof desc);
    if (f->node != 0)
        dt_agent__link_read_failinfo(el->l, res, k, f->node);
    bool retry = dt_job_exit_action(job, st) == DT_EXIT_RETRY;
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
    if (lost > 0 || (change && failed != 1 && !unreadable[0])) {
        dt_log_warn("round %d ends for a membership change (%d node%s lost): the next round starts with the "
                    "nodes there are; not counted against max_restarts",
                    k, lost, lost == 1 ? "" : "s");
        if (!why[0])
            snprintf(why, sizeof why, "%s", lost_why);
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
