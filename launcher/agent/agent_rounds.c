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
 * Heartbeats.  Every rank sends its heartbeats to the coordinator, which
 * node 0's agent hosts and reads in-process (dt_coord_heartbeat).  The other
 * agents reach it only through a store client, so node 0 relays: while ranks
 * run (and while it waits for a round's end), at most every RELAY_S it
 * writes one key per other node,
 *
 *   dtrain/hb/<node>   "<seq>\n" then "<rank> <step> <age>\n" per rank that
 *                      has sent one; age = seconds since it arrived, on
 *                      node 0's clock at the moment of writing
 *
 * in one MULTI_SET.  A node's agent reads its key at most every RELAY_S and
 * ages each entry by the time since it first saw that <seq>: no wall clocks
 * are compared across hosts, and a relay that stops (node 0 busy or gone)
 * makes the heartbeats older, never younger, so a hang is still found, at
 * worst RELAY_S plus one read later than on node 0.
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
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* --- heartbeats for the other nodes' watchdogs --------------------------- */

#define RELAY_S 0.25
#define LINE_MAX_CHARS 64 /* "<rank> <step> <age>\n" */

struct hb_entry {
    int rank;
    int64_t step;
    double age_s;
};

struct hb_relay {
    int node, nnodes, nproc;
    double last_s;            /* node 0: last write; others: last read */
    unsigned long long seq;   /* node 0: writes so far; others: the seq last seen */
    double seen_s;            /* others: when that seq was first seen */
    struct hb_entry *entries; /* others: this node's ranks as last read */
    int n_entries;
};

static struct hb_relay *hb_new(int node, int nnodes, int nproc)
{
    struct hb_relay *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->node = node;
    h->nnodes = nnodes;
    h->nproc = nproc;
    h->entries = calloc((size_t)(nproc > 0 ? nproc : 1), sizeof *h->entries);
    if (!h->entries) {
        free(h);
        return NULL;
    }
    return h;
}

static void hb_free(struct hb_relay *h)
{
    if (h)
        free(h->entries);
    free(h);
}

static void hb_key(char *out, size_t n, int node)
{
    snprintf(out, n, "dtrain/hb/%d", node);
}

/* One node's value: its ranks' entries from the coordinator's table. */
static size_t node_value(struct hb_relay *h, struct dt_coord *c, int node, double now, char *v, size_t cap)
{
    size_t len = (size_t)snprintf(v, cap, "%llu\n", h->seq);
    for (int i = 0; i < h->nproc && len < cap; i++) {
        int rank = node * h->nproc + i;
        int64_t step;
        double when;
        if (dt_coord_heartbeat(c, rank, &step, &when) == 0)
            len += (size_t)snprintf(v + len, cap - len, "%d %" PRId64 " %.3f\n", rank, step, now - when);
    }
    return len < cap ? len : cap - 1;
}

static int hb_relay(struct hb_relay *h, struct dt_store *s, struct dt_coord *c)
{
    double now = dt_clock_s();
    if (h->node != 0 || h->nnodes < 2 || !c || now - h->last_s < RELAY_S)
        return 0;
    h->last_s = now;
    h->seq++;
    int n = h->nnodes - 1;
    size_t cap = 32 + (size_t)h->nproc * LINE_MAX_CHARS;
    char *buf = malloc((size_t)n * (cap + 32));
    const char **keys = calloc((size_t)n, sizeof *keys);
    const void **vals = calloc((size_t)n, sizeof *vals);
    size_t *lens = calloc((size_t)n, sizeof *lens);
    int rc = buf && keys && vals && lens ? 0 : dt_error_set(DT_ENOMEM, "out of memory relaying heartbeats");
    for (int k = 0; rc == 0 && k < n; k++) {
        char *slot = buf + (size_t)k * (cap + 32), *key = slot + cap;
        hb_key(key, 32, k + 1);
        lens[k] = node_value(h, c, k + 1, now, slot, cap);
        keys[k] = key;
        vals[k] = slot;
    }
    if (rc == 0)
        rc = dt_store_multi_set(s, keys, vals, lens, n);
    free(buf);
    free(keys);
    free(vals);
    free(lens);
    return rc;
}

/* Reads this node's key: new entries when its seq changed. */
static int refresh(struct hb_relay *h, struct dt_store *s, double now)
{
    char key[32];
    hb_key(key, sizeof key, h->node);
    const char *k = key;
    bool ready = false;
    int rc = dt_store_check(s, &k, 1, &ready);
    if (rc < 0 || !ready) /* not ready: no rank has been relayed yet */
        return rc;
    void *v = NULL;
    size_t len = 0;
    if ((rc = dt_store_get(s, key, &v, &len)) < 0)
        return rc;
    char *p = v; /* NUL-terminated by dt_store_get */
    unsigned long long seq = strtoull(p, &p, 10);
    if (seq != h->seq || h->seen_s <= 0) {
        h->seq = seq;
        h->seen_s = now;
        h->n_entries = 0;
        struct hb_entry e;
        int used;
        while (h->n_entries < h->nproc &&
               sscanf(p, "%d %" SCNd64 " %lf%n", &e.rank, &e.step, &e.age_s, &used) == 3) {
            h->entries[h->n_entries++] = e;
            p += used;
        }
    }
    free(v);
    return 0;
}

static int hb_read(struct hb_relay *h, struct dt_store *s, int rank, int64_t *step, double *age_s)
{
    double now = dt_clock_s();
    if (now - h->last_s >= RELAY_S) {
        h->last_s = now;
        int rc = refresh(h, s, now);
        if (rc < 0)
            return rc;
    }
    for (int i = 0; i < h->n_entries; i++)
        if (h->entries[i].rank == rank) {
            *step = h->entries[i].step;
            *age_s = h->entries[i].age_s + (now - h->seen_s);
            return 0;
        }
    return dt_error_set(DT_ENOTFOUND, "rank %d has not sent a heartbeat", rank);
}

/* --- the rounds ---------------------------------------------------------- */

#define POLL_S 0.1
#define MAX_ROUNDS 1024

struct dt_agent__round {
    struct dt_agent__round_config cfg;
    struct dt_store *store;
    char coord[300]; /* host:port, for messages */
    bool dead;       /* the coordinator is gone: nothing more is asked of it */
    bool published[MAX_ROUNDS];
    bool told_stop;
    struct hb_relay *hb; /* heartbeats: node 0 relays them, the others read them */
    struct dt_agent_lost_node lost; /* node 0: the member whose loss ended the job; node -1 */
    double lost_unix;               /* when the coordinator noticed, wall clock */
};

static void key(char *out, size_t n, const char *what, int k)
{
    snprintf(out, n, "dtrain/%s/%d", what, k);
}

/* A store call failed: the coordinator (node 0's agent) is gone or broken. */
static enum dt_agent_verdict lost_coordinator(struct dt_agent__round *r, int *status)
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
static int exists(struct dt_agent__round *r, const char *k)
{
    bool ready = false;
    int rc = dt_store_check(r->store, &k, 1, &ready);
    return rc < 0 ? rc : ready;
}

static int get_text(struct dt_agent__round *r, const char *k, char *out, size_t n)
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
    int rc = get_text(r, "dtrain/abort", v, sizeof v);
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

/* Node 0 keeps the first lost member for summary.json, in the coordinator's
 * words (how its connection ended: closed, or unacknowledged for
 * liveness_s), and ends the job everywhere with them. */
static void note_lost(struct dt_agent__round *r, const struct dt_store_member *m, char *why, size_t n)
{
    double when = 0;
    if (!r->cfg.coord || r->lost.node >= 0 ||
        dt_coord_member_lost(r->cfg.coord, m->node_rank, r->lost.reason, sizeof r->lost.reason, &when) != 0)
        return;
    r->lost.node = m->node_rank;
    snprintf(r->lost.host, sizeof r->lost.host, "%s", m->host);
    r->lost_unix = dt_clock_wall_s() - (dt_clock_s() - when);
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
    int rc = exists(r, "dtrain/abort");
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
    if (rc == 0 && (rc = exists(r, k1)) == 1)
        return DT_AGENT_STOP_ATTEMPT;
    return rc < 0 ? lost_coordinator(r, status) : DT_AGENT_GO_ON;
}

static enum dt_agent_verdict poll_round(void *ctx, const struct dt_agent_result *res, int k, int *status)
{
    struct dt_agent__round *r = ctx;
    if (r->dead)
        return lost_coordinator(r, status);
    if (k >= MAX_ROUNDS)
        return DT_AGENT_GO_ON;
    if (res->attempts[k].first_failed >= 0 && !r->published[k] && publish_fail(r, res, k) < 0)
        return lost_coordinator(r, status);
    if (r->cfg.job->trainer && hb_relay(r->hb, r->store, r->cfg.coord) < 0)
        return lost_coordinator(r, status);
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
static void read_failinfo(struct dt_agent__round *r, struct dt_agent_result *res, int k, int from)
{
    char k1[64];
    failinfo_key(k1, sizeof k1, k, from);
    void *v = NULL;
    size_t len = 0;
    if (exists(r, k1) != 1 || dt_store_get(r->store, k1, &v, &len) != 0)
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
        struct pollfd p = {.fd = sig_fd, .events = POLLIN};
        if (poll(&p, 1, (int)(POLL_S * 1000)) > 0)
            return 1;
        /* Another node's ranks may still run: their watchdog needs the relay. */
        if (r->cfg.job->trainer)
            hb_relay(r->hb, r->store, r->cfg.coord);
        /* Members before the counter: a node leaves only after it saw the
         * counter full, so a node seen lost or left here is no false alarm. */
        if ((rc = exists(r, "dtrain/abort")) == 1) {
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
        lost_coordinator(r, status);
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
    int rc = exists(r, k1);
    if (rc == 0) {
        *status = 0;
        return 0;
    }
    if (rc == 1)
        rc = get_text(r, k1, v, sizeof v);
    if (rc < 0) {
        lost_coordinator(r, status);
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
        read_failinfo(r, res, k, node);
    if (r->cfg.node_rank == 0 && res->have_failure && res->first_failure.attempt == k)
        res->first_failure.final = !retry;
    if (retry && k < r->cfg.job->max_restarts) {
        dt_log_warn("round %d: rank %d on node %d %s first; every node restarts its ranks", k, rank, node,
                    desc);
        *restart = true;
        return 0;
    }
    *status = st;
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
    r->hb = hb_new(cfg->node_rank, cfg->nnodes, cfg->nproc);
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
        hb_free(r->hb);
        free(r);
        return rc;
    }
    char host[256] = "?";
    gethostname(host, sizeof host);
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
    int rc = get_text(r, "dtrain/run_id", run_id, n);
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

void dt_agent__round_hooks(struct dt_agent__round *r, struct dt_agent_hooks *h)
{
    *h =
        (struct dt_agent_hooks){.ctx = r, .period_s = POLL_S, .poll = poll_round, .attempt_end = attempt_end};
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
    for (int node = 1; node < r->cfg.nnodes; node++) {
        char k1[64];
        void *v = NULL;
        size_t len = 0;
        key(k1, sizeof k1, "ranks", node);
        if (exists(r, k1) != 1 || dt_store_get(r->store, k1, &v, &len) != 0) {
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
    if (r->cfg.node_rank == 0 && !r->dead && res->status != DT_AGENT_SUCCEEDED)
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
    } else if (res->status != DT_AGENT_SUCCEEDED) {
        /* Whatever ended the job here must end it everywhere (a no-op when
         * an abort or the round's verdict got there first). */
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
    hb_free(r->hb);
    free(r);
}

int dt_agent__round_heartbeat(struct dt_agent__round *r, int rank, int64_t *step, double *age_s)
{
    if (r->dead)
        return dt_error_set(DT_EIO, "the coordinator at %s is gone", r->coord);
    int rc = hb_read(r->hb, r->store, rank, step, age_s);
    if (rc < 0 && rc != DT_ENOTFOUND) { /* the store failed: the next poll ends the job */
        int status;
        lost_coordinator(r, &status);
        dt_error_set(rc, "the coordinator at %s is gone", r->coord);
    }
    return rc;
}
