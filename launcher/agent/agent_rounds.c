/* agent_rounds.c - the restart rounds of a multi-node job: what each node's
 * agent does so that every node restarts its ranks together or not at all,
 * and the hooks (agent.h) that put it into dt_agent_run.
 *
 * Attempt k of the job is attempt k on every node (the round, as torchrun's
 * rendezvous rounds; ranks see it as TORCHELASTIC_RESTART_COUNT), kept in
 * step by a few records in the coordinator's store (agent_records.h has
 * their layouts):
 *
 *   dtrain/fail/<k>      the first rank that failed in round k, wherever it
 *                        ran (COMPARE_SET on an absent key: the first writer
 *                        wins, the coordinator orders them), except that a
 *                        rank the watchdog declared hung replaces an ordinary
 *                        exit: the hung rank's peers fail when the agent kills
 *                        it, often before its own node publishes, and the
 *                        cause must not lose to them
 *   dtrain/failinfo/<k>/<node>  that node's failure of round k in full; node
 *                        0 reads the one fail/<k> names, for summary.json
 *   dtrain/ranks/<node>  that node's rank records of every round, written as
 *                        it leaves, for node 0's summary.json
 *   dtrain/end/<k>       a counter: nodes whose ranks of round k are all gone
 *   dtrain/abort         the job ends with this status (a signal to one
 *                        agent, refused PyTorch ranks, a failure at the end)
 *
 * While ranks run, each agent polls (every 0.1 s): a local failure is
 * published to fail/<k> (once its election is over, agent_policy.c);
 * another node's fail/<k> stops this node's ranks; dtrain/abort, or a member
 * lost (its agent's connection closed without LEAVE, or unacknowledged for
 * heartbeat_timeout: its host or the network went away), ends the job; node
 * 0 keeps who and why for summary.json's lost_node, and relays heartbeats
 * (agent_hb_relay.c).  After its ranks are gone a node adds itself to
 * end/<k> and waits for every node; then all read fail/<k> and decide alike:
 * no failure, the job succeeded; a failure whose exit status the
 * restart_policy retries, with restarts left (max_restarts counts rounds,
 * for the whole job), every node starts round k+1; otherwise every agent
 * exits with the failed rank's status.  Publishing before adding to end/<k>
 * is what makes every node read the same fail/<k>.
 *
 * That is a job of fixed nodes without restarts (max_restarts: 0), where a
 * lost node ends the job at once.  An elastic job (nodes: MIN:MAX), and a
 * job of fixed nodes with restarts, whose lost node is replaced by a new
 * agent, publish their failures the same way and leave the rest to
 * agent_elastic.c: node 0 forms each round (who is in it, a lost node's
 * replacement) and decides how it ends.
 *
 * Not for spawning or stopping ranks (agent_supervise.c does, told through
 * the hooks), the connection and the records every round shares
 * (agent_link.c), nor for the coordinator itself (coordinator.h).
 */
#include "launcher/agent/agent_rounds.h"

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "base/proc.h"
#include "base/run_dir.h"
#include "comm/store.h"
#include "launcher/coordinator/coordinator.h"
#include "spec/jobspec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define POLL_S 0.1
#define MAX_ROUNDS DT_AGENT__MAX_ROUNDS

struct dt_agent__round {
    struct dt_agent__link link;
    struct dt_agent__hb_relay *hb; /* heartbeats: node 0 relays them, the others read them */
    struct dt_agent__elastic *el;  /* an elastic job's rounds; NULL otherwise */
    bool published[MAX_ROUNDS];    /* this node's failure of round k is in fail/<k> (or lost to another's) */
    bool told_stop;
    bool decided; /* a round's end everywhere decided the job's end: every node decides it alike */
    bool leaving; /* a stop signal came to this agent (not node 0's) of rounds node 0 forms: this node
                     leaves, the job goes on without it (as torchrun's agents do) */
};

/* --- while ranks run ----------------------------------------------------- */

/* Node 0 keeps the first lost member for summary.json and ends the job
 * everywhere with the coordinator's words. */
static void note_lost(struct dt_agent__round *r, const struct dt_store_member *m, char *why, size_t n)
{
    if (!dt_agent__link_keep_lost(&r->link, m))
        return;
    snprintf(why, n, "%s", r->link.lost.reason);
    dt_agent__link_abort(&r->link, 1, why);
}

/* 1 when a member was lost (its agent's connection closed without LEAVE, or
 * its host stopped acknowledging); why says which and how. */
static int member_lost(struct dt_agent__round *r, char *why, size_t n)
{
    struct dt_store_member *m;
    int count;
    int rc = dt_store_members(r->link.store, &m, &count);
    if (rc)
        return rc;
    int lost = 0;
    for (int i = 0; i < count && !lost; i++)
        if (m[i].state == DT_STORE_MEMBER_LOST) {
            snprintf(
                why, n,
                "node %d (%s, agent pid %ld) lost its connection to the coordinator: its agent was killed, "
                "or its host or the network went away",
                m[i].node_rank, m[i].host, m[i].pid);
            note_lost(r, &m[i], why, n);
            lost = 1;
        }
    free(m);
    return lost;
}

/* Publishes this node's first failure of round k; 1 if it is the round's first. */
static int publish_fail(struct dt_agent__round *r, const struct dt_agent_result *res, int k)
{
    const struct dt_agent_attempt *at = &res->attempts[k];
    const struct dt_agent_rank_result *rr = &at->ranks[at->first_failed];
    bool hung = at->hung >= 0 && at->hung == at->first_failed;
    /* A hung rank is published when the watchdog's verdict is, before its
     * SIGKILL is reaped: its status is that SIGKILL's, not the 0 of a rank
     * that has not exited (which every node would read as success). */
    struct dt_agent__rec_fail mine = {.rank = rr->rank,
                                      .wstatus = rr->exited || !hung ? rr->wstatus : SIGKILL,
                                      .node = r->link.cfg.node_rank,
                                      .hung = hung},
                              theirs;
    char key[DT_AGENT__KEY_MAX];
    struct dt_agent__text t = {0};
    void *got = NULL;
    size_t len = 0;
    int rc = dt_agent__rec_fail_encode(&mine, &t);
    if (rc == 0)
        rc = dt_store_compare_set(r->link.store, dt_agent__key(key, DT_AGENT__K_FAIL, k, 0), "", 0, t.p, t.len,
                                  &got, &len);
    int first = rc == 0 && len == t.len && memcmp(got, t.p, len) == 0;
    if (rc == 0 && !first && hung && dt_agent__rec_fail_decode(got, len, &theirs) == 0 && !theirs.hung) {
        /* Before any node passes end/<k>, so every node's decide reads this. */
        rc = dt_agent__link_set(&r->link, key, &t);
        first = rc == 0;
    }
    free(got);
    dt_agent__text_free(&t);
    r->published[k] = rc == 0;
    return rc < 0 ? rc : first;
}

/* Where the polls look: abort, a lost member, another node's failure. */
static enum dt_agent_verdict look(struct dt_agent__round *r, int k, int *status)
{
    char why[600], key[DT_AGENT__KEY_MAX];
    int rc = dt_agent__link_aborted(&r->link, status);
    if (rc == 1)
        return DT_AGENT_ABORT;
    if (rc == 0 && (rc = member_lost(r, why, sizeof why)) == 1) {
        dt_log_error("%s; stopping the job (max_restarts is 0: a lost node is not replaced)", why);
        *status = 1;
        return DT_AGENT_ABORT;
    }
    if (rc == 0 && (rc = dt_agent__link_exists(&r->link, dt_agent__key(key, DT_AGENT__K_FAIL, k, 0))) == 1)
        return DT_AGENT_STOP_ATTEMPT;
    return rc < 0 ? dt_agent__link_lost(&r->link, status) : DT_AGENT_GO_ON;
}

static enum dt_agent_verdict poll_round(void *ctx, const struct dt_agent_result *res, int k, int *status)
{
    struct dt_agent__round *r = ctx;
    if (r->link.dead)
        return dt_agent__link_lost(&r->link, status);
    if (k >= MAX_ROUNDS)
        return DT_AGENT_GO_ON;
    if (res->attempts[k].first_failed >= 0 && !res->attempts[k].electing && !r->published[k] &&
        publish_fail(r, res, k) < 0)
        return dt_agent__link_lost(&r->link, status);
    if (dt_agent__hb_relay(r->hb, &r->link) < 0)
        return dt_agent__link_lost(&r->link, status);
    if (r->el)
        return dt_agent__elastic_poll(r->el, res, k, status);
    enum dt_agent_verdict v = look(r, k, status);
    if (v == DT_AGENT_STOP_ATTEMPT && res->attempts[k].first_failed < 0 && !r->told_stop) {
        dt_log_warn("node %d: a rank on another node failed in round %d; stopping this node's ranks",
                    r->link.cfg.node_rank, k);
        r->told_stop = true;
    }
    return v;
}

/* --- after the ranks ----------------------------------------------------- */

/* The round's failure in full, for node 0's summary.json (wall-clock times:
 * each agent's monotonic clock is its own). */
static void publish_failinfo(struct dt_agent__round *r, const struct dt_agent_result *res, int k)
{
    struct dt_agent__rec_failinfo *fi = malloc(sizeof *fi);
    struct dt_agent__text t = {0};
    char key[DT_AGENT__KEY_MAX];
    if (!fi)
        return;
    fi->f = res->first_failure;
    fi->f.node = r->link.cfg.node_rank;
    snprintf(fi->f.host, sizeof fi->f.host, "?");
    gethostname(fi->f.host, sizeof fi->f.host);
    fi->time_unix = res->started_unix + fi->f.time_s;
    fi->detected_unix = res->started_unix + fi->f.hang_detected_s;
    if (dt_agent__rec_failinfo_encode(fi, &t) == 0)
        dt_agent__link_set(&r->link, dt_agent__key(key, DT_AGENT__K_FAILINFO, k, fi->f.node), &t);
    dt_agent__text_free(&t);
    free(fi);
}

/* Adds this node to end/<k>, then waits for every node (or an abort, a lost
 * member, a signal).  0 when all ended, 1 on a signal, 2 on abort (*status set). */
static int wait_round_end(struct dt_agent__round *r, int k, int sig_fd, int *status)
{
    char key[DT_AGENT__KEY_MAX], why[600];
    dt_agent__key(key, DT_AGENT__K_END, k, 0);
    int64_t n = 0;
    int rc = dt_store_add(r->link.store, key, 1, &n);
    while (rc == 0 && n < r->link.cfg.nnodes) {
        if (dt_proc_signals_wait(sig_fd, (int)(POLL_S * 1000)) > 0)
            return 1;
        /* Another node's ranks may still run: their watchdog needs the relay. */
        dt_agent__hb_relay(r->hb, &r->link);
        /* Members before the counter: a node leaves only after it saw the
         * counter full, so a node seen lost or left here is no false alarm. */
        if ((rc = dt_agent__link_aborted(&r->link, status)) == 1)
            return 2;
        if (rc == 0 && (rc = member_lost(r, why, sizeof why)) == 1) {
            dt_log_error("%s; stopping the job (max_restarts is 0: a lost node is not replaced)", why);
            *status = 1;
            return 2;
        }
        if (rc == 0)
            rc = dt_store_add(r->link.store, key, 0, &n);
    }
    if (rc < 0) {
        dt_agent__link_lost(&r->link, status);
        return 2;
    }
    return 0;
}

/* Every node reads the same fail/<k> after the round ended everywhere, so
 * every node decides the same: succeeded, restart, or fail with its status. */
static int decide(struct dt_agent__round *r, struct dt_agent_result *res, int k, bool *restart, int *status)
{
    struct dt_agent__rec_fail f;
    char desc[160];
    int rc = dt_agent__link_read_fail(&r->link, k, &f);
    if (rc == 0) {
        *status = 0;
        return 0;
    }
    if (rc < 0 && dt_error_code() == DT_EPROTO) { /* every node reads it so, and ends alike */
        dt_log_error("the job failed in round %d: %s", k, dt_error_last());
        *status = 1;
        return 0;
    }
    if (rc < 0) {
        dt_agent__link_lost(&r->link, status);
        return 0;
    }
    int st = dt_proc_exit_status(f.wstatus);
    if (f.hung)
        snprintf(desc, sizeof desc, "was hung (killed by dtrain's watchdog)");
    else
        dt_proc_describe(f.wstatus, true, desc, sizeof desc);
    bool retry = dt_job_exit_action(r->link.cfg.job, st) == DT_EXIT_RETRY;
    /* Node 0's summary names the round's first failure wherever it was, as the
     * first failure of the last failed attempt of a one-node job. */
    if (r->link.cfg.node_rank == 0 && f.node != 0)
        dt_agent__link_read_failinfo(&r->link, res, k, f.node);
    if (r->link.cfg.node_rank == 0 && res->have_failure && res->first_failure.attempt == k)
        res->first_failure.final = !retry;
    if (retry && k < r->link.cfg.job->max_restarts) {
        dt_log_warn("round %d: rank %d on node %d %s first; every node restarts its ranks", k, f.rank, f.node,
                    desc);
        *restart = true;
        return 0;
    }
    *status = st;
    dt_log_error("the job failed in round %d: rank %d on node %d %s first%s", k, f.rank, f.node, desc,
                 retry ? " (no restarts left)" : " (restart_policy: fail)");
    return 0;
}

static int attempt_end(void *ctx, struct dt_agent_result *res, int k, int sig_fd, bool *restart, int *status)
{
    struct dt_agent__round *r = ctx;
    *restart = false;
    if (r->link.dead || k >= MAX_ROUNDS) {
        *status = 1;
        return 0;
    }
    /* Published before end/<k>: node 0 reads it after every node has passed. */
    if (res->attempts[k].first_failed >= 0) {
        if (!r->published[k])
            publish_fail(r, res, k);
        publish_failinfo(r, res, k);
    }
    if (r->el)
        return dt_agent__elastic_attempt_end(r->el, res, k, sig_fd, restart, status);
    int w = wait_round_end(r, k, sig_fd, status);
    if (w == 1)
        return 1;
    if (w == 2)
        return 0;
    int rc = decide(r, res, k, restart, status);
    r->decided = !*restart;
    return rc;
}

/* --- joining ------------------------------------------------------------- */

void dt_agent__round_close(struct dt_agent__round *r)
{
    if (!r)
        return;
    dt_agent__link_close(&r->link);
    dt_agent__hb_free(r->hb);
    dt_agent__elastic_free(r->el);
    free(r);
}

int dt_agent__round_open(const struct dt_agent__round_config *cfg, struct dt_agent__round **out)
{
    *out = NULL;
    struct dt_agent__round *r = calloc(1, sizeof *r);
    if (!r || !(r->hb = dt_agent__hb_new(cfg->node_rank, cfg->nnodes, cfg->nproc))) {
        free(r);
        return dt_error_set(DT_ENOMEM, "out of memory");
    }
    int rc = dt_agent__link_open(&r->link, cfg);
    bool elastic = cfg->nnodes_min > 0 && cfg->nnodes_min < cfg->nnodes;
    if (rc == 0 && (elastic || cfg->job->max_restarts > 0)) { /* node 0 forms each round */
        rc = dt_agent__elastic_open(&r->link, r->hb, elastic ? cfg->nnodes_min : cfg->nnodes, &r->el);
    } else if (rc == 0) {
        char host[256] = "?";
        gethostname(host, sizeof host);
        if ((rc = dt_store_join(r->link.store, cfg->node_rank, cfg->nnodes, cfg->nproc, host)) != 0)
            dt_error_prefix("node %d", cfg->node_rank);
    }
    if (rc) {
        dt_agent__round_close(r);
        return rc;
    }
    *out = r;
    return 0;
}

int dt_agent__round_run_id(struct dt_agent__round *r, char *run_id, size_t n)
{
    int node = r->link.cfg.node_rank;
    if (run_id[0] && node != 0)
        return 0;
    if (node == 0) {
        int rc = run_id[0] ? 0 : dt_run_dir_make_id(run_id, n);
        return rc ? rc : dt_store_set(r->link.store, DT_AGENT__KEY_RUN_ID, run_id, strlen(run_id));
    }
    int rc = dt_agent__link_get_text(&r->link, DT_AGENT__KEY_RUN_ID, run_id, n);
    return rc ? dt_error_prefix("node %d: waiting for node 0 to publish the run id", node) : 0;
}

/* Missing node ranks into out, as "1, 3"; returns how many joined. */
static int joined(const struct dt_store_member *m, int count, int nnodes, char *missing, size_t n)
{
    int in = 0;
    size_t len = 0;
    missing[0] = 0;
    for (int node = 0; node < nnodes; node++) {
        bool here = false;
        for (int i = 0; i < count; i++)
            here |= m[i].node_rank == node && m[i].state == DT_STORE_MEMBER_JOINED;
        in += here;
        if (!here && len < n)
            len += (size_t)snprintf(missing + len, n - len, "%s%d", len ? ", " : "", node);
    }
    return in;
}

static int same_nproc(struct dt_agent__round *r, const struct dt_store_member *m, int count)
{
    for (int i = 0; i < count; i++)
        if (m[i].nproc != r->link.cfg.nproc)
            return dt_error_set(
                DT_EINVAL,
                "node %d (%s) runs %d ranks but node %d runs %d: nproc_per_node must come out "
                "the same on every node (WORLD_SIZE = nnodes x nproc_per_node)",
                m[i].node_rank, m[i].host, m[i].nproc, r->link.cfg.node_rank, r->link.cfg.nproc);
    return 0;
}

int dt_agent__round_wait_all(struct dt_agent__round *r)
{
    const struct dt_agent__round_config *cfg = &r->link.cfg;
    if (r->el) /* each round forms as it starts (agent_elastic.c) */
        return 0;
    double deadline = dt_clock_s() + cfg->timeout_s;
    char missing[256];
    for (;;) {
        struct dt_store_member *m;
        int count;
        int rc = dt_store_members(r->link.store, &m, &count);
        if (rc)
            return dt_error_prefix("node %d: listing the job's nodes", cfg->node_rank);
        int in = joined(m, count, cfg->nnodes, missing, sizeof missing);
        rc = same_nproc(r, m, count);
        free(m);
        /* An agent for a node that was lost joins a job that already ended (no restarts). */
        int status, ended = rc ? 0 : dt_agent__link_aborted(&r->link, &status);
        if (ended)
            return ended < 0 ? dt_error_prefix("node %d: reading the job's state", cfg->node_rank)
                             : dt_error_set(DT_EABORTED, "node %d: the job ended before this agent could take part",
                                            cfg->node_rank);
        if (rc == 0 && in == cfg->nnodes)
            dt_agent__link_short_calls(&r->link); /* from here every call is made at least every POLL_S */
        if (rc || in == cfg->nnodes)
            return rc;
        if (dt_clock_s() >= deadline)
            return dt_error_set(DT_ETIMEDOUT,
                                "node %d: only %d of %d nodes joined the coordinator at %s within "
                                "rendezvous.timeout (%gs); missing node%s %s",
                                cfg->node_rank, in, cfg->nnodes, r->link.coord, cfg->timeout_s,
                                strchr(missing, ',') ? "s" : "", missing);
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* --- the hooks ----------------------------------------------------------- */

/* The hooks' interrupted: the job's abort, with the signal's status, is
 * published before this node's ranks get the signal (round_finish would
 * publish the same, but only once they are gone: too late for the other
 * nodes, whose ranks fail on losing theirs first).  Bounded: a node cut off
 * from the coordinator must not hold the signal back from its ranks (a
 * scheduler's SIGKILL follows its SIGTERM), so INTERRUPT_SAY_S.  A coordinator
 * silent that long drops the connection (store_client.c), as one silent for
 * heartbeat_timeout would: the node then ends as one that lost it.  The agent
 * that hosts the coordinator cannot be cut off from it, only starved of CPU
 * (a loaded 2-core machine): it waits INTERRUPT_SAY_HOST_S, since failing
 * here drops its member connection, and the other nodes, whose ranks fail at
 * once, would read "node 0 was lost" instead of the interruption. */
#define INTERRUPT_SAY_S 1.0
#define INTERRUPT_SAY_HOST_S 5.0

/* A stop signal to an agent other than node 0's, where node 0 forms the
 * rounds: only this node leaves (a pod evicted, a node drained: the
 * scheduler's SIGTERM before its SIGKILL), and node 0 takes it for a lost
 * node: an elastic job goes on with the others, a fixed-size one with a new
 * agent for it while restarts are left.  Stopping the whole job is node
 * 0's signal, or every agent's (scancel, a deleted Job). */
static bool leave_alone(struct dt_agent__round *r, const char *name)
{
    if (!r->el || r->link.cfg.node_rank == 0 || r->link.dead)
        return false;
    r->leaving = true;
    dt_log_warn("node %d: received %s: this node leaves the job; the others go on without it (%s)",
                r->link.cfg.node_rank, name,
                r->link.cfg.nnodes_min < r->link.cfg.nnodes
                    ? "an elastic job's next round"
                    : "node 0 waits for a new agent of this node while restarts are left");
    return true;
}

static void interrupted(void *ctx, int sig)
{
    struct dt_agent__round *r = ctx;
    char why[128], tmp[32];
    const char *name = dt_proc_signal_name(sig, tmp, sizeof tmp);
    if (leave_alone(r, name))
        return;
    snprintf(why, sizeof why, "its agent was interrupted by %s", name);
    double t0 = dt_clock_s();
    double was =
        dt_store_set_timeout(r->link.store, r->link.cfg.coord ? INTERRUPT_SAY_HOST_S : INTERRUPT_SAY_S);
    int rc = dt_agent__link_abort(&r->link, 128 + sig, why);
    dt_store_set_timeout(r->link.store, was);
    if (rc < 0)
        dt_log_warn("node %d: could not tell the other nodes of %s in %.1f s (they may report this node as "
                    "lost): %s",
                    r->link.cfg.node_rank, name, dt_clock_s() - t0, dt_error_last());
    else
        dt_log_debug("node %d: told the other nodes of %s in %.3f s", r->link.cfg.node_rank, name,
                     dt_clock_s() - t0);
}

/* One short call while the ranks stop, so the coordinator hears from this
 * node.  A failure is the coordinator lost, as in poll_round: said once, and
 * nothing more is asked of it (the ranks' SIGKILL is not held up again). */
static void keepalive(void *ctx)
{
    struct dt_agent__round *r = ctx;
    int status;
    if (!r->link.dead && dt_agent__link_exists(&r->link, DT_AGENT__KEY_ABORT) < 0)
        dt_agent__link_lost(&r->link, &status);
}

static int begin_attempt(void *ctx, int *attempt, int sig_fd, struct dt_agent_place *place, int *status)
{
    struct dt_agent__round *r = ctx;
    return dt_agent__elastic_begin(r->el, attempt, sig_fd, place, status);
}

void dt_agent__round_hooks(struct dt_agent__round *r, struct dt_agent_hooks *h)
{
    *h = (struct dt_agent_hooks){.ctx = r,
                                 .period_s = POLL_S,
                                 .poll = poll_round,
                                 .attempt_end = attempt_end,
                                 .begin_attempt = r->el ? begin_attempt : NULL,
                                 .interrupted = interrupted,
                                 .keepalive = keepalive};
}

int dt_agent__round_abort(struct dt_agent__round *r, int status, const char *why)
{
    return dt_agent__link_abort(&r->link, status, why);
}

int dt_agent__round_heartbeat(struct dt_agent__round *r, int rank, int64_t *step, double *age_s)
{
    return dt_agent__hb_read(r->hb, &r->link, rank, step, age_s);
}

/* --- the end ------------------------------------------------------------- */

/* Node 0 hosts the coordinator: it waits (bounded) until the other agents
 * have read the verdict and left, so none of them finds the store gone. */
static void wait_others_gone(struct dt_agent__round *r)
{
    double deadline = dt_clock_s() + r->link.cfg.grace_s + 10;
    while (!r->link.dead && dt_clock_s() < deadline) {
        struct dt_store_member *m;
        int count, here = 0;
        if (dt_store_members(r->link.store, &m, &count) != 0)
            return;
        for (int i = 0; i < count; i++)
            here += m[i].node_rank != 0 && m[i].state == DT_STORE_MEMBER_JOINED;
        free(m);
        if (here == 0)
            return;
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* This node's rank records of every round it had a place in. */
static void publish_ranks(struct dt_agent__round *r, const struct dt_agent_result *res)
{
    struct dt_agent__rec_rank *rec = calloc((size_t)res->n_attempts * (size_t)res->nproc + 1, sizeof *rec);
    struct dt_agent__text t = {0};
    char key[DT_AGENT__KEY_MAX];
    int n = 0, rc = rec ? 0 : dt_error_set(DT_ENOMEM, "out of memory");
    for (int k = 0; rec && k < res->n_attempts; k++)
        for (int i = 0; i < res->nproc; i++) {
            const struct dt_agent_rank_result *rr = &res->attempts[k].ranks[i];
            if (rr->pid == 0) /* an elastic round this node had no place in */
                continue;
            rec[n++] = (struct dt_agent__rec_rank){
                .round = k,
                .rank = rr->rank,
                .pid = rr->pid,
                .exited = rr->exited,
                .stopped = rr->stopped_by_agent,
                .wstatus = rr->wstatus,
                .spawn_unix = res->started_unix + rr->spawn_s,
                .exit_unix = rr->exited ? res->started_unix + rr->exit_s : 0.0,
            };
        }
    if (rc == 0)
        rc = dt_agent__rec_ranks_encode(rec, n, &t);
    if (rc == 0)
        rc = dt_agent__link_set(&r->link, dt_agent__key(key, DT_AGENT__K_RANKS, 0, r->link.cfg.node_rank), &t);
    if (rc != 0)
        dt_log_warn("node %d: cannot hand this node's rank records to node 0 (%s); its summary.json will "
                    "list node 0's ranks only",
                    r->link.cfg.node_rank, dt_error_last());
    dt_agent__text_free(&t);
    free(rec);
}

static void add_other(struct dt_agent_attempt *at, const struct dt_agent_rank_result *rr)
{
    struct dt_agent_rank_result *o = realloc(at->others, (size_t)(at->n_others + 1) * sizeof *o);
    if (!o)
        return;
    at->others = o;
    at->others[at->n_others++] = *rr;
}

/* One node's records into res->attempts[k].others; rounds past this
 * agent's are left out.  0, or why not in dt_error_last(). */
static int read_node_ranks(struct dt_agent__round *r, struct dt_agent_result *res, int node)
{
    char key[DT_AGENT__KEY_MAX], *v = NULL;
    size_t len = 0;
    struct dt_agent__rec_rank *rec = NULL;
    int n = 0;
    int rc = dt_agent__link_exists(&r->link, dt_agent__key(key, DT_AGENT__K_RANKS, 0, node));
    if (rc == 0)
        rc = dt_error_set(DT_ENOTFOUND, "%s is not there", key);
    if (rc == 1)
        rc = dt_agent__link_get(&r->link, key, &v, &len);
    if (rc == 0 && (rc = dt_agent__rec_ranks_decode(v, len, &rec, &n)) < 0)
        dt_error_prefix("%s", key);
    for (int i = 0; i < n; i++) {
        if (rec[i].round >= res->n_attempts)
            continue;
        struct dt_agent_rank_result rr = {
            .rank = rec[i].rank,
            .pid = rec[i].pid,
            .exited = rec[i].exited,
            .wstatus = rec[i].wstatus,
            .stopped_by_agent = rec[i].stopped,
            .spawn_s = rec[i].spawn_unix - res->started_unix,
            .exit_s = rec[i].exited ? rec[i].exit_unix - res->started_unix : 0,
        };
        add_other(&res->attempts[rec[i].round], &rr);
    }
    free(rec);
    free(v);
    return rc;
}

/* Node 0: every other node's records.  A node that left without them
 * (killed, lost) is named, not guessed at. */
static void read_ranks(struct dt_agent__round *r, struct dt_agent_result *res)
{
    int last = r->link.cfg.nnodes - 1;
    struct dt_store_member *m;
    int count;
    if (r->el && dt_store_members(r->link.store, &m, &count) == 0) { /* slots, maybe past nnodes */
        for (int i = 0; i < count; i++)
            last = m[i].node_rank > last ? m[i].node_rank : last;
        free(m);
    }
    for (int node = 1; node <= last; node++)
        if (read_node_ranks(r, res, node) < 0)
            dt_log_warn("node %d left no rank records (%s): summary.json lists its failure only if it was the "
                        "round's first",
                        node, dt_error_last());
}

void dt_agent__round_finish(struct dt_agent__round *r, struct dt_agent_result *res)
{
    char why[600];
    if (r->link.fenced) /* a newer agent holds this node's place: the job is not this one's to touch */
        return;
    /* Another node may have ended the job first (its abort, seen before the
     * member list): node 0's summary still names a node that was lost. */
    if (r->link.cfg.node_rank == 0 && !r->link.dead && res->status != DT_AGENT_SUCCEEDED && !r->el)
        member_lost(r, why, sizeof why);
    if (r->link.lost.node >= 0) {
        res->lost_node = r->link.lost;
        res->lost_node.detected_s = r->link.lost_unix - res->started_unix;
    }
    if (res->status == DT_AGENT_INTERRUPTED && res->exit_status == DT_AGENT_EXIT_REQUEUE) {
        char tmp[32];
        snprintf(why, sizeof why,
                 res->requeue_stopped ? "its ranks were stopped on %s (not all catch it) to be requeued"
                                      : "its ranks checkpointed and stopped on %s to be requeued",
                 dt_proc_signal_name(res->interrupt_signal, tmp, sizeof tmp));
        dt_agent__link_abort(&r->link, res->exit_status, why);
    } else if (res->status == DT_AGENT_INTERRUPTED && r->leaving) {
        /* this node alone leaves: no abort (leave_alone) */
    } else if (res->status == DT_AGENT_INTERRUPTED) {
        char tmp[32];
        snprintf(why, sizeof why, "its agent was interrupted by %s",
                 dt_proc_signal_name(res->interrupt_signal, tmp, sizeof tmp));
        dt_agent__link_abort(&r->link, res->exit_status, why);
    } else if (res->status != DT_AGENT_SUCCEEDED && !r->decided) {
        /* Whatever ended the job here must end it everywhere (a no-op when
         * an abort got there first).  Not when the round's decision did:
         * every node reaches it from the same fail/<k>, and an abort now
         * would overtake a node still waiting to see end/<k> full, which
         * would then say "the job is ending" instead of what failed. */
        dt_agent__link_abort(&r->link, res->exit_status, "the job failed");
    }
    if (r->link.dead)
        return;
    if (r->link.cfg.node_rank != 0)
        publish_ranks(r, res);
    if (r->link.cfg.node_rank == 0) {
        wait_others_gone(r);
        read_ranks(r, res);
    }
    dt_store_leave(r->link.store);
}
