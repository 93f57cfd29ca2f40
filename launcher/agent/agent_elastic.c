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
 * Not for the rounds of a job of fixed nodes (agent_rounds.c, whose keys
 * fail/<k> and abort this file shares), nor for what the ranks do with a new
 * world size (the trainer resumes from its newest checkpoint: docs/elastic.md).
 */
#include "launcher/agent/agent_internal.h"

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
    int min, max;
    int restarts;    /* restarts after failures so far */
    int n;           /* nodes of the current round */
    int *slots;      /* their slots, max entries */
    int next;        /* the round begin looks for; -1: the newest */
    bool change_set; /* node 0: change/<k> written for the current round */
    bool told;       /* this round's stop was said */
    bool told_wait;  /* "waiting for a place" was said */
};

static void key2(char *out, size_t n, const char *what, int k)
{
    snprintf(out, n, "dtrain/%s/%d", what, k);
}

/* --- joining ------------------------------------------------------------- */

int dt_agent__elastic_open(struct dt_agent__round *r, int nodes_min)
{
    struct dt_agent__elastic *el = calloc(1, sizeof *el);
    int max = r->cfg.nnodes;
    if (!el || !(el->slots = calloc((size_t)max, sizeof *el->slots))) {
        free(el);
        return dt_error_set(DT_ENOMEM, "out of memory for an elastic job of %d nodes", max);
    }
    el->min = nodes_min;
    el->max = max;
    el->next = r->cfg.node_rank == 0 ? 0 : -1;
    r->el = el;
    char host[256] = "?";
    gethostname(host, sizeof host);
    int rc = r->cfg.node_rank == 0 ? dt_store_join(r->store, 0, max, r->cfg.nproc, host)
                                   : dt_store_join_any(r->store, max, r->cfg.nproc, host, &r->cfg.node_rank);
    if (rc)
        return dt_error_prefix("elastic job (nodes %d:%d)", nodes_min, max);
    if (r->cfg.liveness_s > 0) { /* every call from here is short and made at least every WAIT_S */
        dt_store_set_timeout(r->store, r->cfg.liveness_s);
        dt_store_set_liveness(r->store, r->cfg.liveness_s);
    }
    if (r->cfg.node_rank != 0)
        dt_log_info("joined the elastic job at %s as slot %d; waiting for a place in a round", r->coord,
                    r->cfg.node_rank);
    return 0;
}

void dt_agent__elastic_free(struct dt_agent__round *r)
{
    if (r->el)
        free(r->el->slots);
    free(r->el);
    r->el = NULL;
}

/* --- waiting ------------------------------------------------------------- */

/* One pause between looks: 1 when a signal came (left in sig_fd for the agent). */
static int pause_for(int sig_fd)
{
    return dt_proc_signals_wait(sig_fd, (int)(WAIT_S * 1000)) > 0;
}

/* Between looks while waiting: 0 to look again, 1 to stop with *status
 * (-1: a signal; else an abort, or the coordinator gone). */
static int between(struct dt_agent__round *r, int sig_fd, int *status)
{
    if (pause_for(sig_fd)) {
        *status = -1;
        return 1;
    }
    int rc = dt_agent__round_aborted(r, status);
    if (rc < 0)
        dt_agent__round_lost_coordinator(r, status);
    return rc != 0;
}

/* The joined slots (state joined), lowest first, into out (at most max);
 * returns how many there are in all. */
static int joined_slots(struct dt_agent__round *r, int *out, int max, int *nproc_differs)
{
    struct dt_store_member *m;
    int count, n = 0;
    if (dt_store_members(r->store, &m, &count) != 0)
        return -1;
    *nproc_differs = -1;
    for (int i = 0; i < count; i++) {
        if (m[i].state != DT_STORE_MEMBER_JOINED)
            continue;
        if (m[i].nproc != r->cfg.nproc)
            *nproc_differs = m[i].node_rank;
        if (n < max)
            out[n] = m[i].node_rank;
        n++;
    }
    free(m);
    return n;
}

/* --- forming a round (node 0) -------------------------------------------- */

static int publish_round(struct dt_agent__round *r, int k)
{
    struct dt_agent__elastic *el = r->el;
    char v[64 + 12 * 1024], k1[64], latest[24];
    size_t len = (size_t)snprintf(v, sizeof v, "%d %d", el->restarts, el->n);
    for (int i = 0; i < el->n && len < sizeof v - 12; i++)
        len += (size_t)snprintf(v + len, sizeof v - len, " %d", el->slots[i]);
    key2(k1, sizeof k1, "round", k);
    snprintf(latest, sizeof latest, "%d", k);
    int rc = dt_store_set(r->store, k1, v, len);
    return rc ? rc : dt_store_set(r->store, "dtrain/latest", latest, strlen(latest));
}

static int form(struct dt_agent__round *r, int k, int sig_fd, int *status)
{
    struct dt_agent__elastic *el = r->el;
    const struct dt_job *job = r->cfg.job;
    double deadline = dt_clock_s() + r->cfg.timeout_s, min_at = 0;
    for (;;) {
        int differs, n = joined_slots(r, el->slots, el->max, &differs);
        if (n < 0)
            return dt_agent__round_lost_coordinator(r, status), 1;
        if (differs >= 0) {
            dt_error_set(DT_EINVAL,
                         "node slot %d runs another number of ranks than node 0 (%d): nproc_per_node must "
                         "come out the same on every node",
                         differs, r->cfg.nproc);
            dt_agent__round_abort(r, 1, dt_error_last());
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
                         k, n, el->min, el->min, el->max, r->coord, r->cfg.timeout_s);
            dt_agent__round_abort(r, 1, dt_error_last());
            return DT_ETIMEDOUT;
        }
        if (pause_for(sig_fd)) {
            *status = -1;
            return 1;
        }
    }
    if (publish_round(r, k) != 0)
        return dt_agent__round_lost_coordinator(r, status), 1;
    return 0;
}

/* --- finding this node's place (the others) ------------------------------ */

/* Round k's record into el; 1 when this node is in it, 0 when not, -1
 * when it cannot be read. */
static int read_round(struct dt_agent__round *r, int k)
{
    struct dt_agent__elastic *el = r->el;
    char k1[64], v[64 + 12 * 1024];
    key2(k1, sizeof k1, "round", k);
    if (dt_agent__round_get_text(r, k1, v, sizeof v) != 0)
        return -1;
    int used, n = 0;
    char *p = v;
    if (sscanf(p, "%d %d%n", &el->restarts, &n, &used) != 2 || n < 1 || n > el->max)
        return dt_error_set(DT_EPROTO, "round %d's record '%.60s' is not one node 0 writes", k, v), -1;
    p += used;
    el->n = n;
    int in = 0;
    for (int i = 0; i < n && sscanf(p, "%d%n", &el->slots[i], &used) == 1; i++) {
        p += used;
        in |= el->slots[i] == r->cfg.node_rank;
    }
    return in;
}

/* Round k's verdict: 1 "next", 0 "done" (*status), 2 not yet, -1 on error. */
static int read_verdict(struct dt_agent__round *r, int k, int *status)
{
    char k1[64], v[32];
    key2(k1, sizeof k1, "verdict", k);
    int rc = dt_agent__round_exists(r, k1);
    if (rc <= 0)
        return rc < 0 ? -1 : 2;
    if (dt_agent__round_get_text(r, k1, v, sizeof v) != 0)
        return -1;
    if (strncmp(v, "next", 4) == 0)
        return 1;
    *status = 1;
    sscanf(v, "done %d", status);
    return 0;
}

static int wait_place(struct dt_agent__round *r, int *k, int sig_fd, int *status)
{
    struct dt_agent__elastic *el = r->el;
    char k1[64], latest[24];
    for (;;) {
        int rc;
        if (*k < 0) {
            rc = dt_agent__round_exists(r, "dtrain/latest");
            if (rc == 1 && dt_agent__round_get_text(r, "dtrain/latest", latest, sizeof latest) == 0)
                *k = atoi(latest);
        } else {
            key2(k1, sizeof k1, "round", *k);
            rc = dt_agent__round_exists(r, k1);
            int in = rc == 1 ? read_round(r, *k) : 0;
            if (in == 1)
                return 0;
            int v = rc == 1 && in == 0 ? read_verdict(r, *k, status) : 2;
            if (rc == 1 && in == 0 && !el->told_wait) {
                dt_log_info("round %d runs with %d node%s without this one; waiting for the next", *k, el->n,
                            el->n == 1 ? "" : "s");
                el->told_wait = true;
            }
            if (in < 0 || v < 0)
                rc = -1;
            else if (v == 1)
                (*k)++;
            else if (v == 0) {
                dt_log_info("the job ended in round %d without this node (status %d)", *k, *status);
                return 1;
            }
        }
        if (rc < 0)
            return dt_agent__round_lost_coordinator(r, status), 1;
        if (between(r, sig_fd, status))
            return 1;
    }
}

int dt_agent__elastic_begin(void *ctx, int *attempt, int sig_fd, struct dt_agent_place *place, int *status)
{
    struct dt_agent__round *r = ctx;
    struct dt_agent__elastic *el = r->el;
    if (r->dead) {
        *status = 1;
        return 1;
    }
    int k = el->next, rc;
    if (k >= DT_AGENT__MAX_ROUNDS)
        return dt_error_set(DT_ENOMEM, "an elastic job of more than %d rounds", DT_AGENT__MAX_ROUNDS);
    rc = r->cfg.node_rank == 0 ? form(r, k, sig_fd, status) : wait_place(r, &k, sig_fd, status);
    if (rc != 0)
        return rc;
    int node = 0;
    while (node < el->n && el->slots[node] != r->cfg.node_rank)
        node++;
    *place = (struct dt_agent_place){.node_rank = node, .nnodes = el->n, .restarts = el->restarts};
    *attempt = k;
    el->next = k + 1;
    el->change_set = el->told = el->told_wait = false;
    dt_agent__round_hb_place(r, node, el->n);
    dt_log_info("round %d: node %d of %d (nodes %d:%d), global ranks %d-%d, %d restart%s after failures so far",
                k, node, el->n, el->min, el->max, node * r->cfg.nproc, (node + 1) * r->cfg.nproc - 1,
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
static void say_lost(struct dt_agent__round *r, const struct dt_store_member *m, char *why, size_t n)
{
    char lost[512];
    dt_agent__round_keep_lost(r, m);
    if (!r->cfg.coord || dt_coord_member_lost(r->cfg.coord, m->node_rank, lost, sizeof lost, NULL) != 0)
        snprintf(lost, sizeof lost, "slot %d (%s, agent pid %ld) left", m->node_rank, m->host, m->pid);
    snprintf(why, n, "a node of the round was lost: %s", lost);
}

/* Node 0: why the round must stop for its membership, into why; 1 if so. */
static int membership_changed(struct dt_agent__round *r, char *why, size_t n)
{
    struct dt_agent__elastic *el = r->el;
    struct dt_store_member *m;
    int count, changed = 0;
    if (dt_store_members(r->store, &m, &count) != 0)
        return -1;
    for (int i = 0; i < count && !changed; i++) {
        bool part = in_round(el, m[i].node_rank);
        if (part && m[i].state != DT_STORE_MEMBER_JOINED) {
            say_lost(r, &m[i], why, n);
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

enum dt_agent_verdict dt_agent__elastic_poll(struct dt_agent__round *r, const struct dt_agent_result *res, int k,
                                             int *status)
{
    struct dt_agent__elastic *el = r->el;
    char why[700], k1[64];
    int rc = dt_agent__round_aborted(r, status);
    if (rc == 1)
        return DT_AGENT_ABORT;
    if (rc == 0 && r->cfg.node_rank == 0 && !el->change_set && (rc = membership_changed(r, why, sizeof why)) == 1) {
        key2(k1, sizeof k1, "change", k);
        rc = dt_store_set(r->store, k1, why, strlen(why));
        el->change_set = rc == 0;
    }
    key2(k1, sizeof k1, "change", k);
    int change = rc >= 0 ? dt_agent__round_exists(r, k1) : rc;
    key2(k1, sizeof k1, "fail", k);
    int fail = change == 0 ? dt_agent__round_exists(r, k1) : 0;
    if (change < 0 || fail < 0)
        return dt_agent__round_lost_coordinator(r, status);
    if (!change && !fail)
        return DT_AGENT_GO_ON;
    if (!el->told && change) {
        key2(k1, sizeof k1, "change", k);
        if (dt_agent__round_get_text(r, k1, why, sizeof why) == 0)
            dt_log_warn("round %d: %s; stopping this node's ranks to go on with the new membership", k, why);
    } else if (!el->told && res->attempts[k].first_failed < 0) {
        dt_log_warn("node %d: a rank on another node failed in round %d; stopping this node's ranks",
                    r->cfg.node_rank, k);
    }
    el->told = true;
    return DT_AGENT_STOP_ATTEMPT;
}

/* --- after a round ------------------------------------------------------- */

/* "0" when every rank of this node exited 0 by itself. */
static const char *finished(const struct dt_agent_result *res, int k)
{
    const struct dt_agent_attempt *at = &res->attempts[k];
    for (int i = 0; i < res->nproc; i++) {
        const struct dt_agent_rank_result *rr = &at->ranks[i];
        if (!rr->exited || rr->stopped_by_agent || !WIFEXITED(rr->wstatus) || WEXITSTATUS(rr->wstatus) != 0)
            return "1";
    }
    return at->first_failed >= 0 ? "1" : "0";
}

/* Node 0: waits until each node of the round ended it or was lost; *lost
 * and *all_done say how, why the first lost one (or "").  0, 1 on a signal
 * or abort (*status), negative. */
static int wait_ends(struct dt_agent__round *r, int k, int sig_fd, int *lost, bool *all_done, char *why,
                     size_t n, int *status)
{
    struct dt_agent__elastic *el = r->el;
    for (;;) {
        struct dt_store_member *m;
        int count, waiting = 0;
        *lost = 0;
        *all_done = true;
        if (dt_store_members(r->store, &m, &count) != 0)
            return dt_agent__round_lost_coordinator(r, status), 1;
        for (int i = 0; i < el->n; i++) {
            char k1[80], v[8] = "";
            snprintf(k1, sizeof k1, "dtrain/end/%d/%d", k, el->slots[i]);
            int ended = dt_agent__round_exists(r, k1);
            if (ended == 1)
                dt_agent__round_get_text(r, k1, v, sizeof v);
            bool joined = false;
            for (int j = 0; j < count; j++) {
                joined |= m[j].node_rank == el->slots[i] && m[j].state == DT_STORE_MEMBER_JOINED;
                if (m[j].node_rank == el->slots[i] && m[j].state != DT_STORE_MEMBER_JOINED && ended != 1 &&
                    !why[0])
                    say_lost(r, &m[j], why, n);
            }
            *all_done &= ended == 1 && v[0] == '0';
            *lost += ended != 1 && !joined;
            waiting += ended != 1 && joined;
        }
        free(m);
        if (waiting == 0)
            return 0;
        dt_agent__round_relay(r); /* another node's ranks may still run: their watchdog */
        if (between(r, sig_fd, status))
            return 1;
    }
}

/* Round k as summary.json tells it (agent.h: round_end). */
static void describe(struct dt_agent_result *res, int k, int nodes, const char *end, const char *why)
{
    struct dt_agent_attempt *at = &res->attempts[k];
    at->round_nodes = nodes;
    snprintf(at->round_end, sizeof at->round_end, "%s", end);
    snprintf(at->round_why, sizeof at->round_why, "%s", why);
}

/* Node 0: round k's verdict, from its failure (fail/<k>) and membership. */
static void decide(struct dt_agent__round *r, struct dt_agent_result *res, int k, int lost, const char *lost_why,
                   bool all_done, char *verdict, size_t n)
{
    struct dt_agent__elastic *el = r->el;
    char k1[64], v[64], desc[160], why[700] = "";
    key2(k1, sizeof k1, "fail", k);
    bool failed = dt_agent__round_exists(r, k1) == 1 && dt_agent__round_get_text(r, k1, v, sizeof v) == 0;
    key2(k1, sizeof k1, "change", k);
    bool change = dt_agent__round_exists(r, k1) == 1;
    if (change)
        dt_agent__round_get_text(r, k1, why, sizeof why);
    snprintf(verdict, n, "next");
    if (all_done) {
        snprintf(verdict, n, "done 0");
        describe(res, k, el->n, "finished", "every rank exited 0");
    } else if (lost > 0 || (change && !failed)) {
        dt_log_warn("round %d ends for a membership change (%d node%s lost): the next round starts with the "
                    "nodes there are; not counted against max_restarts",
                    k, lost, lost == 1 ? "" : "s");
        if (!why[0])
            snprintf(why, sizeof why, "%s", lost_why);
        describe(res, k, el->n, "membership", why);
    } else if (failed) {
        int rank = -1, wstatus = 0, node = -1;
        sscanf(v, "%d %d %d", &rank, &wstatus, &node);
        int st = dt_proc_exit_status(wstatus);
        dt_proc_describe(wstatus, true, desc, sizeof desc);
        if (node != 0)
            dt_agent__round_read_failinfo(r, res, k, node);
        bool retry = dt_job_exit_action(r->cfg.job, st) == DT_EXIT_RETRY;
        snprintf(why, sizeof why, "rank %d (node slot %d) %s first", rank, node, desc);
        if (retry && el->restarts < r->cfg.job->max_restarts) {
            el->restarts++;
            dt_log_warn("round %d: %s; every node restarts its ranks (restart %d of %d)", k, why, el->restarts,
                        r->cfg.job->max_restarts);
            describe(res, k, el->n, "restart", why);
        } else {
            if (res->have_failure && res->first_failure.attempt == k)
                res->first_failure.final = !retry;
            dt_log_error("the job failed in round %d: %s%s", k, why,
                         retry ? " (no restarts left)" : " (restart_policy: fail)");
            snprintf(verdict, n, "done %d", st);
            describe(res, k, el->n, "failed", why);
        }
    } else {
        snprintf(verdict, n, "done 0");
        describe(res, k, el->n, "finished", "every rank exited 0");
    }
}

int dt_agent__elastic_attempt_end(struct dt_agent__round *r, struct dt_agent_result *res, int k, int sig_fd,
                                  bool *restart, int *status)
{
    char k1[80], verdict[32];
    snprintf(k1, sizeof k1, "dtrain/end/%d/%d", k, r->cfg.node_rank);
    const char *done = finished(res, k);
    if (dt_store_set(r->store, k1, done, 1) != 0) {
        dt_agent__round_lost_coordinator(r, status);
        return 0;
    }
    int rc;
    if (r->cfg.node_rank == 0) {
        int lost;
        bool all_done;
        char lost_why[600] = "";
        if ((rc = wait_ends(r, k, sig_fd, &lost, &all_done, lost_why, sizeof lost_why, status)) != 0)
            return *status < 0 ? 1 : 0;
        decide(r, res, k, lost, lost_why, all_done, verdict, sizeof verdict);
        key2(k1, sizeof k1, "verdict", k);
        if (dt_store_set(r->store, k1, verdict, strlen(verdict)) != 0) {
            dt_agent__round_lost_coordinator(r, status);
            return 0;
        }
        rc = strncmp(verdict, "next", 4) == 0;
        if (!rc)
            sscanf(verdict, "done %d", status);
    } else {
        while ((rc = read_verdict(r, k, status)) == 2)
            if (between(r, sig_fd, status))
                return *status < 0 ? 1 : 0;
        if (rc < 0) {
            dt_agent__round_lost_coordinator(r, status);
            return 0;
        }
    }
    *restart = rc == 1;
    return 0;
}
