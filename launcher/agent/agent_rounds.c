/* agent_rounds.c - restart rounds across the nodes of a job, on the coordinator's store,
 * and the relay of the ranks' heartbeats to the other nodes' watchdogs.
 *
 * Every node's agent holds one store connection for the job: it JOINs on it
 * (its membership, launcher/coordinator/coord_rendezvous.c) and polls
 * through it.  Attempt k of the job is attempt k on every node (the round,
 * as torchrun's rendezvous rounds; ranks see it as
 * TORCHELASTIC_RESTART_COUNT), kept in step by a few keys:
 *
 *   dtrain/fail/<k>      "<rank> <wstatus> <node> <hung>": the first rank that
 *                        failed in round k, wherever it ran (COMPARE_SET on an
 *                        absent key: the first writer wins, the coordinator
 *                        orders them), except that a rank the watchdog declared
 *                        hung replaces an ordinary exit: the hung rank's peers
 *                        fail when the agent kills it, often before its own
 *                        node publishes, and the cause must not lose to them
 *   dtrain/failinfo/<k>/<node>  that node's failure of round k in full (host,
 *                        wall-clock time, hang, error message, last stderr
 *                        lines); node 0 reads the one fail/<k> names
 *   dtrain/ranks/<node>  that node's rank records of every round, written as it
 *                        leaves, for node 0's summary.json (times as wall-clock
 *                        seconds: each agent's monotonic clock is its own)
 *   dtrain/end/<k>       a counter: nodes whose ranks of round k are all gone
 *   dtrain/abort         "<status> <sentence>": the job ends with this status
 *                        (a signal to one agent, refused PyTorch ranks)
 *
 * While ranks run, each agent polls (every 0.1 s): a local failure is
 * published to fail/<k>; another node's fail/<k> stops this node's ranks;
 * dtrain/abort, or a member lost (its agent's connection closed without
 * LEAVE, or unacknowledged for heartbeat_timeout: its host or the network
 * went away, dt_store_set_liveness), ends the job; node 0 keeps who and why
 * for summary.json's lost_node.  Once every node has joined, each store call
 * has heartbeat_timeout too: a node whose coordinator went silent stops.
 * After its ranks are gone a node adds itself to end/<k> and waits for
 * every node; then all read fail/<k> and decide alike: no failure, the job
 * succeeded; a failure whose exit status the restart_policy retries, with
 * restarts left (max_restarts counts rounds, for the whole job), every node
 * starts round k+1; otherwise every agent exits with the failed rank's
 * status.  Publishing before adding to end/<k> is what makes every node read
 * the same fail/<k>.
 *
 * Heartbeats reach the other nodes' watchdogs through node 0's relay
 * (agent_hb_relay.c), which the polls here drive.
 *
 * Not for spawning or stopping ranks (agent_supervise.c does, told through
 * the hooks of agent.h), the watchdog's rule (agent_watchdog.c), nor for the
 * coordinator itself (coordinator.h).
 */
#include "launcher/agent/agent_internal.h"

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "base/proc.h"
#include "base/run_dir.h"
#include "comm/store.h"
#include "launcher/coordinator/coordinator.h"
#include "spec/jobspec.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* --- the rounds ---------------------------------------------------------- */

#define POLL_S 0.1
#define MAX_ROUNDS DT_AGENT__MAX_ROUNDS

static void key(char *out, size_t n, const char *what, int k)
{
    snprintf(out, n, "dtrain/%s/%d", what, k);
}

/* A store call failed: the coordinator (node 0's agent) is gone or broken. */
enum dt_agent_verdict dt_agent__round_lost_coordinator(struct dt_agent__round *r, int *status)
{
    if (!r->dead)
        dt_log_error("node %d: lost the coordinator at %s (hosted by node 0's agent, which has exited or "
                     "was killed, or the network went away): %s; stopping this node's ranks",
                     r->cfg.node_rank, r->coord, dt_error_last());
    r->dead = true;
    *status = 1;
    return DT_AGENT_ABORT;
}

/* 1 when the key exists, 0 when not, negative on a store error. */
int dt_agent__round_exists(struct dt_agent__round *r, const char *k)
{
    bool ready = false;
    int rc = dt_store_check(r->store, &k, 1, &ready);
    return rc < 0 ? rc : ready;
}

int dt_agent__round_get_text(struct dt_agent__round *r, const char *k, char *out, size_t n)
{
    void *v = NULL;
    size_t len = 0;
    int rc = dt_store_get(r->store, k, &v, &len);
    if (rc == 0)
        snprintf(out, n, "%.*s", (int)len, (const char *)v);
    free(v);
    return rc;
}

int dt_agent__round_abort(struct dt_agent__round *r, int status, const char *why)
{
    if (r->dead)
        return 0;
    char v[600];
    snprintf(v, sizeof v, "%d node %d: %s", status, r->cfg.node_rank, why);
    void *got = NULL;
    size_t len = 0;
    /* The first abort stands: its status is the job's. */
    int rc = dt_store_compare_set(r->store, "dtrain/abort", "", 0, v, strlen(v), &got, &len);
    free(got);
    return rc;
}

/* dtrain/abort exists: *status and the sentence from it. */
static int read_abort(struct dt_agent__round *r, int *status, char *why, size_t n)
{
    char v[600];
    int rc = dt_agent__round_get_text(r, "dtrain/abort", v, sizeof v);
    if (rc)
        return rc;
    char *sp = strchr(v, ' ');
    *status = atoi(v);
    snprintf(why, n, "%s", sp ? sp + 1 : v);
    return 0;
}

/* Another node's abort, said as what it is: a requeue stop (every node's ranks
 * checkpointed on SIGUSR1 and exit DT_AGENT_EXIT_REQUEUE) is expected, not an error. */
static void say_abort(int status, const char *why)
{
    if (status == DT_AGENT_EXIT_REQUEUE)
        dt_log_info("the job is stopping to be requeued: %s", why);
    else
        dt_log_error("the job is ending: %s", why);
}

int dt_agent__round_aborted(struct dt_agent__round *r, int *status)
{
    char why[600];
    int rc = dt_agent__round_exists(r, "dtrain/abort");
    if (rc == 1 && (rc = read_abort(r, status, why, sizeof why)) == 0) {
        say_abort(*status, why);
        return 1;
    }
    return rc;
}

bool dt_agent__round_keep_lost(struct dt_agent__round *r, const struct dt_store_member *m)
{
    double when = 0;
    if (!r->cfg.coord || r->lost.node >= 0 ||
        dt_coord_member_lost(r->cfg.coord, m->node_rank, r->lost.reason, sizeof r->lost.reason, &when) != 0)
        return false;
    r->lost.node = m->node_rank;
    snprintf(r->lost.host, sizeof r->lost.host, "%s", m->host);
    r->lost_unix = dt_clock_wall_s() - (dt_clock_s() - when);
    return true;
}

/* Node 0 keeps the first lost member for summary.json and ends the job
 * everywhere with the coordinator's words. */
static void note_lost(struct dt_agent__round *r, const struct dt_store_member *m, char *why, size_t n)
{
    if (!dt_agent__round_keep_lost(r, m))
        return;
    snprintf(why, n, "%s", r->lost.reason);
    dt_agent__round_abort(r, 1, why);
}

/* 1 when a member was lost (its agent's connection closed without LEAVE, or
 * its host stopped acknowledging); why says which and how. */
static int member_lost(struct dt_agent__round *r, char *why, size_t n)
{
    struct dt_store_member *m;
    int count;
    int rc = dt_store_members(r->store, &m, &count);
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
    char k1[64], v[64];
    bool hung = at->hung >= 0 && at->hung == at->first_failed;
    /* A hung rank is published when the watchdog's verdict is, before its
     * SIGKILL is reaped: its status is that SIGKILL's, not the 0 of a rank
     * that has not exited (which every node would read as success). */
    int wstatus = rr->exited || !hung ? rr->wstatus : SIGKILL;
    key(k1, sizeof k1, "fail", k);
    snprintf(v, sizeof v, "%d %d %d %d", rr->rank, wstatus, r->cfg.node_rank, hung);
    void *got = NULL;
    size_t len = 0;
    int rc = dt_store_compare_set(r->store, k1, "", 0, v, strlen(v), &got, &len);
    int first = rc == 0 && len == strlen(v) && memcmp(got, v, len) == 0;
    int other_hung = 0;
    if (rc == 0 && !first && got && sscanf(got, "%*d %*d %*d %d", &other_hung) == 1 && hung && !other_hung) {
        /* Before any node passes end/<k>, so every node's decide reads this. */
        rc = dt_store_set(r->store, k1, v, strlen(v));
        first = rc == 0;
    }
    free(got);
    r->published[k] = rc == 0;
    return rc < 0 ? rc : first;
}

/* Where the polls look: abort, a lost member, another node's failure. */
static enum dt_agent_verdict look(struct dt_agent__round *r, int k, int *status)
{
    char why[600], k1[64];
    int rc = dt_agent__round_exists(r, "dtrain/abort");
    if (rc == 1 && (rc = read_abort(r, status, why, sizeof why)) == 0) {
        say_abort(*status, why);
        return DT_AGENT_ABORT;
    }
    if (rc == 0 && (rc = member_lost(r, why, sizeof why)) == 1) {
        dt_log_error("%s; stopping the job", why);
        *status = 1;
        return DT_AGENT_ABORT;
    }
    key(k1, sizeof k1, "fail", k);
    if (rc == 0 && (rc = dt_agent__round_exists(r, k1)) == 1)
        return DT_AGENT_STOP_ATTEMPT;
    return rc < 0 ? dt_agent__round_lost_coordinator(r, status) : DT_AGENT_GO_ON;
}

static enum dt_agent_verdict poll_round(void *ctx, const struct dt_agent_result *res, int k, int *status)
{
    struct dt_agent__round *r = ctx;
    if (r->dead)
        return dt_agent__round_lost_coordinator(r, status);
    if (k >= MAX_ROUNDS)
        return DT_AGENT_GO_ON;
    if (res->attempts[k].first_failed >= 0 && !res->attempts[k].electing && !r->published[k] &&
        publish_fail(r, res, k) < 0)
        return dt_agent__round_lost_coordinator(r, status);
    if (r->cfg.job->trainer && dt_agent__hb_relay(r->hb, r->store, r->cfg.coord) < 0)
        return dt_agent__round_lost_coordinator(r, status);
    if (r->el)
        return dt_agent__elastic_poll(r, res, k, status);
    enum dt_agent_verdict v = look(r, k, status);
    if (v == DT_AGENT_STOP_ATTEMPT && res->attempts[k].first_failed < 0 && !r->told_stop) {
        dt_log_warn("node %d: a rank on another node failed in round %d; stopping this node's ranks",
                    r->cfg.node_rank, k);
        r->told_stop = true;
    }
    return v;
}

/* One line of the value: a line break inside (a Python traceback's message) would end it. */
static const char *one_line(const char *in, char *out, size_t n)
{
    snprintf(out, n, "%s", in);
    for (char *c = out; *c; c++)
        if (*c == '\n' || *c == '\r')
            *c = ' ';
    return out;
}

/* The round's failure in full, for node 0's summary.json: "<rank> <wstatus> <node> <n_tail>
 * <unix time> <hung> <hung step> <hang detected, unix> <oom killer> <final>\n<host>\n<error file>\n
 * <error message>\n<hang reason>\n<hang report>\n<tail lines>". */
static void failinfo_key(char *out, size_t n, int k, int node)
{
    snprintf(out, n, "dtrain/failinfo/%d/%d", k, node);
}

static void publish_failinfo(struct dt_agent__round *r, const struct dt_agent_result *res, int k)
{
    const struct dt_agent_failure *ff = &res->first_failure;
    size_t cap = 16384 + sizeof ff->tail, len = 0;
    char *v = malloc(cap), host[256] = "?", k1[64], msg[sizeof ff->error_message],
         why[sizeof ff->hang_reason];
    if (!v)
        return;
    gethostname(host, sizeof host);
    len += (size_t)snprintf(v + len, cap - len, "%d %d %d %d %.6f %d %lld %.6f %d %d\n%s\n%s\n%s\n%s\n%s\n",
                            ff->rank, ff->wstatus, r->cfg.node_rank, ff->n_tail,
                            res->started_unix + ff->time_s, ff->hung, (long long)ff->hung_step,
                            res->started_unix + ff->hang_detected_s, ff->oom_killer, ff->final, host,
                            ff->error_file, one_line(ff->error_message, msg, sizeof msg),
                            one_line(ff->hang_reason, why, sizeof why), ff->hang_report);
    for (int i = 0; i < ff->n_tail && len < cap; i++)
        len += (size_t)snprintf(v + len, cap - len, "%s\n", ff->tail[i]);
    failinfo_key(k1, sizeof k1, k, r->cfg.node_rank);
    dt_store_set(r->store, k1, v, len < cap ? len : cap - 1);
    free(v);
}

static char *next_line(char **p)
{
    char *s = *p, *nl = s ? strchr(s, '\n') : NULL;
    if (!s)
        return "";
    if (nl) {
        *nl = 0;
        *p = nl + 1;
    } else {
        *p = NULL;
    }
    return s;
}

/* Node 0 puts another node's failure of round k where the summary reads it. */
void dt_agent__round_read_failinfo(struct dt_agent__round *r, struct dt_agent_result *res, int k, int from)
{
    char k1[64];
    failinfo_key(k1, sizeof k1, k, from);
    void *v = NULL;
    size_t len = 0;
    if (dt_agent__round_exists(r, k1) != 1 || dt_store_get(r->store, k1, &v, &len) != 0)
        return;
    struct dt_agent_failure *ff = &res->first_failure;
    char *p = v;
    int node = -1, n_tail = 0, hung = 0, oom = -1, final = 0;
    long long hung_step = -1;
    double when = 0, detected = 0;
    memset(ff, 0, sizeof *ff);
    if (sscanf(next_line(&p), "%d %d %d %d %lf %d %lld %lf %d %d", &ff->rank, &ff->wstatus, &node, &n_tail,
               &when, &hung, &hung_step, &detected, &oom, &final) == 10) {
        char *host = next_line(&p);
        ff->node = node;
        /* On node 0's clock, as the summary's other times. */
        ff->time_s = when - res->started_unix;
        ff->hung = hung;
        ff->hung_step = hung_step;
        ff->hang_detected_s = hung ? detected - res->started_unix : 0;
        ff->final = final;
        snprintf(ff->host, sizeof ff->host, "%s", host);
        snprintf(ff->error_file, sizeof ff->error_file, "%s", next_line(&p));
        snprintf(ff->error_message, sizeof ff->error_message, "%s", next_line(&p));
        snprintf(ff->hang_reason, sizeof ff->hang_reason, "%s", next_line(&p));
        snprintf(ff->hang_report, sizeof ff->hang_report, "%s", next_line(&p));
        for (int i = 0; i < n_tail && i < DT_AGENT_TAIL_LINES && p; i++)
            snprintf(ff->tail[ff->n_tail++], DT_AGENT_TAIL_WIDTH, "%s", next_line(&p));
        ff->attempt = k;
        ff->oom_killer = oom;
        res->have_failure = true;
        dt_log_debug("round %d failed first on node %d (%s)", k, node, host);
    }
    free(v);
}

/* Adds this node to end/<k>, then waits for every node (or an abort, a lost
 * member, a signal).  0 when all ended, 1 on a signal, 2 on abort (*status set). */
static int wait_round_end(struct dt_agent__round *r, int k, int sig_fd, int *status)
{
    char k1[64], why[600];
    key(k1, sizeof k1, "end", k);
    int64_t n = 0;
    int rc = dt_store_add(r->store, k1, 1, &n);
    while (rc == 0 && n < r->cfg.nnodes) {
        if (dt_proc_signals_wait(sig_fd, (int)(POLL_S * 1000)) > 0)
            return 1;
        /* Another node's ranks may still run: their watchdog needs the relay. */
        if (r->cfg.job->trainer)
            dt_agent__hb_relay(r->hb, r->store, r->cfg.coord);
        /* Members before the counter: a node leaves only after it saw the
         * counter full, so a node seen lost or left here is no false alarm. */
        if ((rc = dt_agent__round_exists(r, "dtrain/abort")) == 1) {
            if ((rc = read_abort(r, status, why, sizeof why)) == 0) {
                say_abort(*status, why);
                return 2;
            }
        } else if (rc == 0 && (rc = member_lost(r, why, sizeof why)) == 1) {
            dt_log_error("%s; stopping the job", why);
            *status = 1;
            return 2;
        }
        if (rc == 0)
            rc = dt_store_add(r->store, k1, 0, &n);
    }
    if (rc < 0) {
        dt_agent__round_lost_coordinator(r, status);
        return 2;
    }
    return 0;
}

/* Every node reads the same fail/<k> after the round ended everywhere, so
 * every node decides the same: succeeded, restart, or fail with its status. */
static int decide(struct dt_agent__round *r, struct dt_agent_result *res, int k, bool *restart, int *status)
{
    char k1[64], v[64], desc[160];
    key(k1, sizeof k1, "fail", k);
    int rc = dt_agent__round_exists(r, k1);
    if (rc == 0) {
        *status = 0;
        return 0;
    }
    if (rc == 1)
        rc = dt_agent__round_get_text(r, k1, v, sizeof v);
    if (rc < 0) {
        dt_agent__round_lost_coordinator(r, status);
        return 0;
    }
    int rank = -1, wstatus = 0, node = -1, hung = 0;
    sscanf(v, "%d %d %d %d", &rank, &wstatus, &node, &hung);
    int st = dt_proc_exit_status(wstatus);
    if (hung)
        snprintf(desc, sizeof desc, "was hung (killed by dtrain's watchdog)");
    else
        dt_proc_describe(wstatus, true, desc, sizeof desc);
    bool retry = dt_job_exit_action(r->cfg.job, st) == DT_EXIT_RETRY;
    /* Node 0's summary names the round's first failure wherever it was, as the
     * first failure of the last failed attempt of a one-node job. */
    if (r->cfg.node_rank == 0 && node != 0)
        dt_agent__round_read_failinfo(r, res, k, node);
    if (r->cfg.node_rank == 0 && res->have_failure && res->first_failure.attempt == k)
        res->first_failure.final = !retry;
    if (retry && k < r->cfg.job->max_restarts) {
        dt_log_warn("round %d: rank %d on node %d %s first; every node restarts its ranks", k, rank, node,
                    desc);
        *restart = true;
        return 0;
    }
    *status = st;
    r->verdict = true;
    dt_log_error("the job failed in round %d: rank %d on node %d %s first%s", k, rank, node, desc,
                 retry ? " (no restarts left)" : " (restart_policy: fail)");
    return 0;
}

static int attempt_end(void *ctx, struct dt_agent_result *res, int k, int sig_fd, bool *restart, int *status)
{
    struct dt_agent__round *r = ctx;
    *restart = false;
    if (r->dead || k >= MAX_ROUNDS) {
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
        return dt_agent__elastic_attempt_end(r, res, k, sig_fd, restart, status);
    int w = wait_round_end(r, k, sig_fd, status);
    if (w == 1)
        return 1;
    if (w == 2)
        return 0;
    return decide(r, res, k, restart, status);
}

int dt_agent__round_open(const struct dt_agent__round_config *cfg, struct dt_agent__round **out)
{
    *out = NULL;
    struct dt_agent__round *r = calloc(1, sizeof *r);
    if (!r)
        return dt_error_set(DT_ENOMEM, "out of memory");
    r->cfg = *cfg;
    r->lost.node = -1;
    r->hb = dt_agent__hb_new(cfg->node_rank, cfg->nnodes, cfg->nproc);
    if (!r->hb) {
        free(r);
        return dt_error_set(DT_ENOMEM, "out of memory");
    }
    snprintf(r->coord, sizeof r->coord, "%s:%d", cfg->coord_host, cfg->coord_port);
    struct dt_store_options o = {
        .host = cfg->coord_host, .port = cfg->coord_port, .token = cfg->token, .timeout_s = cfg->timeout_s};
    int rc = dt_store_connect(&o, &r->store);
    if (rc) {
        dt_error_prefix("node %d: cannot reach the coordinator at %s (node 0's agent hosts it) within "
                        "rendezvous.timeout (%gs)",
                        cfg->node_rank, r->coord, cfg->timeout_s);
        dt_agent__hb_free(r->hb);
        free(r);
        return rc;
    }
    char host[256] = "?";
    gethostname(host, sizeof host);
    if (cfg->nnodes_min > 0 && cfg->nnodes_min < cfg->nnodes) {
        if ((rc = dt_agent__elastic_open(r, cfg->nnodes_min)) != 0)
            dt_agent__round_close(r);
        else
            *out = r;
        return rc;
    }
    rc = dt_store_join(r->store, cfg->node_rank, cfg->nnodes, cfg->nproc, host);
    if (rc) {
        dt_agent__round_close(r);
        return dt_error_prefix("node %d", cfg->node_rank);
    }
    *out = r;
    return 0;
}

int dt_agent__round_run_id(struct dt_agent__round *r, char *run_id, size_t n)
{
    if (run_id[0] && r->cfg.node_rank != 0)
        return 0;
    if (r->cfg.node_rank == 0) {
        int rc = run_id[0] ? 0 : dt_run_dir_make_id(run_id, n);
        return rc ? rc : dt_store_set(r->store, "dtrain/run_id", run_id, strlen(run_id));
    }
    int rc = dt_agent__round_get_text(r, "dtrain/run_id", run_id, n);
    return rc ? dt_error_prefix("node %d: waiting for node 0 to publish the run id", r->cfg.node_rank) : 0;
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
        if (m[i].nproc != r->cfg.nproc)
            return dt_error_set(
                DT_EINVAL,
                "node %d (%s) runs %d ranks but node %d runs %d: nproc_per_node must come out "
                "the same on every node (WORLD_SIZE = nnodes x nproc_per_node)",
                m[i].node_rank, m[i].host, m[i].nproc, r->cfg.node_rank, r->cfg.nproc);
    return 0;
}

int dt_agent__round_wait_all(struct dt_agent__round *r)
{
    if (r->el) /* each round forms as it starts (agent_elastic.c) */
        return 0;
    double deadline = dt_clock_s() + r->cfg.timeout_s;
    char missing[256];
    for (;;) {
        struct dt_store_member *m;
        int count;
        int rc = dt_store_members(r->store, &m, &count);
        if (rc)
            return dt_error_prefix("node %d: listing the job's nodes", r->cfg.node_rank);
        int in = joined(m, count, r->cfg.nnodes, missing, sizeof missing);
        rc = same_nproc(r, m, count);
        free(m);
        if (rc == 0 && in == r->cfg.nnodes && r->cfg.liveness_s > 0) {
            /* From here every call is a short one, made at least every POLL_S:
             * a coordinator silent for liveness_s is gone. */
            dt_store_set_timeout(r->store, r->cfg.liveness_s);
            dt_store_set_liveness(r->store, r->cfg.liveness_s);
        }
        if (rc || in == r->cfg.nnodes)
            return rc;
        if (dt_clock_s() >= deadline)
            return dt_error_set(DT_ETIMEDOUT,
                                "node %d: only %d of %d nodes joined the coordinator at %s within "
                                "rendezvous.timeout (%gs); missing node%s %s",
                                r->cfg.node_rank, in, r->cfg.nnodes, r->coord, r->cfg.timeout_s,
                                strchr(missing, ',') ? "s" : "", missing);
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

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

static void interrupted(void *ctx, int sig)
{
    struct dt_agent__round *r = ctx;
    char why[128], tmp[32];
    const char *name = dt_proc_signal_name(sig, tmp, sizeof tmp);
    snprintf(why, sizeof why, "its agent was interrupted by %s", name);
    double t0 = dt_clock_s();
    double was = dt_store_set_timeout(r->store, r->cfg.coord ? INTERRUPT_SAY_HOST_S : INTERRUPT_SAY_S);
    int rc = dt_agent__round_abort(r, 128 + sig, why);
    dt_store_set_timeout(r->store, was);
    if (rc < 0)
        dt_log_warn("node %d: could not tell the other nodes of %s in %.1f s (they may report this node as "
                    "lost): %s",
                    r->cfg.node_rank, name, dt_clock_s() - t0, dt_error_last());
    else
        dt_log_debug("node %d: told the other nodes of %s in %.3f s", r->cfg.node_rank, name, dt_clock_s() - t0);
}

void dt_agent__round_hooks(struct dt_agent__round *r, struct dt_agent_hooks *h)
{
    *h = (struct dt_agent_hooks){.ctx = r,
                                 .period_s = POLL_S,
                                 .poll = poll_round,
                                 .attempt_end = attempt_end,
                                 .begin_attempt = r->el ? dt_agent__elastic_begin : NULL,
                                 .interrupted = interrupted};
}

/* Node 0 hosts the coordinator: it waits (bounded) until the other agents
 * have read the verdict and left, so none of them finds the store gone. */
static void wait_others_gone(struct dt_agent__round *r)
{
    double deadline = dt_clock_s() + r->cfg.grace_s + 10;
    while (!r->dead && dt_clock_s() < deadline) {
        struct dt_store_member *m;
        int count, here = 0;
        if (dt_store_members(r->store, &m, &count) != 0)
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

/* This node's rank records, one line per rank and round:
 * "<round> <rank> <pid> <exited> <wstatus> <stopped by agent> <spawn unix> <exit unix>". */
static void publish_ranks(struct dt_agent__round *r, const struct dt_agent_result *res)
{
    size_t cap = 64 + (size_t)res->n_attempts * (size_t)res->nproc * 96, len = 0;
    char *v = malloc(cap), k1[64];
    if (!v)
        return;
    v[0] = 0;
    for (int k = 0; k < res->n_attempts; k++)
        for (int i = 0; i < res->nproc && len < cap; i++) {
            const struct dt_agent_rank_result *rr = &res->attempts[k].ranks[i];
            if (rr->pid == 0) /* an elastic round this node had no place in */
                continue;
            len += (size_t)snprintf(v + len, cap - len, "%d %d %d %d %d %d %.6f %.6f\n", k, rr->rank, rr->pid,
                                    rr->exited, rr->wstatus, rr->stopped_by_agent,
                                    res->started_unix + rr->spawn_s,
                                    rr->exited ? res->started_unix + rr->exit_s : 0.0);
        }
    key(k1, sizeof k1, "ranks", r->cfg.node_rank);
    if (dt_store_set(r->store, k1, v, len < cap ? len : cap - 1) != 0)
        dt_log_warn("node %d: cannot hand this node's rank records to node 0 (%s); its summary.json will "
                    "list node 0's ranks only",
                    r->cfg.node_rank, dt_error_last());
    free(v);
}

static void add_other(struct dt_agent_attempt *at, const struct dt_agent_rank_result *rr)
{
    struct dt_agent_rank_result *o = realloc(at->others, (size_t)(at->n_others + 1) * sizeof *o);
    if (!o)
        return;
    at->others = o;
    at->others[at->n_others++] = *rr;
}

/* Node 0: every other node's records into res->attempts[k].others.  A node
 * that left without them (killed, lost) is named, not guessed at. */
static void read_ranks(struct dt_agent__round *r, struct dt_agent_result *res)
{
    int last = r->cfg.nnodes - 1;
    struct dt_store_member *m;
    int count;
    if (r->el && dt_store_members(r->store, &m, &count) == 0) { /* slots, maybe past nnodes */
        for (int i = 0; i < count; i++)
            last = m[i].node_rank > last ? m[i].node_rank : last;
        free(m);
    }
    for (int node = 1; node <= last; node++) {
        char k1[64];
        void *v = NULL;
        size_t len = 0;
        key(k1, sizeof k1, "ranks", node);
        if (dt_agent__round_exists(r, k1) != 1 || dt_store_get(r->store, k1, &v, &len) != 0) {
            dt_log_warn("node %d left no rank records: summary.json lists its failure only if it was the "
                        "round's first",
                        node);
            free(v);
            continue;
        }
        char *p = v; /* NUL-terminated by dt_store_get */
        while (p && *p) {
            struct dt_agent_rank_result rr = {0};
            int k, exited, stopped;
            double spawn_u, exit_u;
            if (sscanf(next_line(&p), "%d %d %d %d %d %d %lf %lf", &k, &rr.rank, &rr.pid, &exited,
                       &rr.wstatus, &stopped, &spawn_u, &exit_u) != 8 ||
                k < 0 || k >= res->n_attempts)
                continue;
            rr.exited = exited;
            rr.stopped_by_agent = stopped;
            rr.spawn_s = spawn_u - res->started_unix;
            rr.exit_s = exited ? exit_u - res->started_unix : 0;
            add_other(&res->attempts[k], &rr);
        }
        free(v);
    }
}

void dt_agent__round_finish(struct dt_agent__round *r, struct dt_agent_result *res)
{
    char why[600];
    /* Another node may have ended the job first (its abort, seen before the
     * member list): node 0's summary still names a node that was lost. */
    if (r->cfg.node_rank == 0 && !r->dead && res->status != DT_AGENT_SUCCEEDED && !r->el)
        member_lost(r, why, sizeof why);
    if (r->lost.node >= 0) {
        res->lost_node = r->lost;
        res->lost_node.detected_s = r->lost_unix - res->started_unix;
    }
    if (res->status == DT_AGENT_INTERRUPTED && res->exit_status == DT_AGENT_EXIT_REQUEUE) {
        dt_agent__round_abort(r, res->exit_status,
                              "its ranks checkpointed and stopped on SIGUSR1 to be requeued");
    } else if (res->status == DT_AGENT_INTERRUPTED) {
        char why[128], tmp[32];
        snprintf(why, sizeof why, "its agent was interrupted by %s",
                 dt_proc_signal_name(res->interrupt_signal, tmp, sizeof tmp));
        dt_agent__round_abort(r, res->exit_status, why);
    } else if (res->status != DT_AGENT_SUCCEEDED && !r->verdict) {
        /* Whatever ended the job here must end it everywhere (a no-op when
         * an abort got there first).  Not the round's verdict: every node
         * has passed end/<k> and reaches it too, and an abort published
         * now would overtake it on a node still polling the counter (node
         * 1 of test_netns_ckpt, under load, said "the job is ending: node
         * 0: the job failed" instead of which rank failed first). */
        dt_agent__round_abort(r, res->exit_status, "the job failed");
    }
    if (r->dead)
        return;
    if (r->cfg.node_rank != 0)
        publish_ranks(r, res);
    if (r->cfg.node_rank == 0) {
        wait_others_gone(r);
        read_ranks(r, res);
    }
    dt_store_leave(r->store);
}

void dt_agent__round_close(struct dt_agent__round *r)
{
    if (!r)
        return;
    dt_store_close(r->store);
    dt_agent__hb_free(r->hb);
    dt_agent__elastic_free(r);
    free(r);
}
