/* agent_link.c - one node's link to the other nodes of a job: its
 * connection to the coordinator's store, and the records every kind of round
 * reads alike (dtrain/abort, a round's first failure and its report).
 *
 * Every node's agent holds one store connection for the job: it JOINs on it
 * (its membership, launcher/coordinator/coord_rendezvous.c) and polls
 * through it.  A store call that fails means the coordinator (node 0's
 * agent) is gone or cut off: dt_agent__link_lost says so once and marks the
 * link dead, and nothing more is asked of it.
 *
 * Not for when the rounds read and write (agent_rounds.c, agent_elastic.c),
 * nor for the records' layout (agent_records.h).
 */
#include "launcher/agent/agent_rounds.h"

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "comm/store.h"
#include "launcher/coordinator/coordinator.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int dt_agent__link_open(struct dt_agent__link *l, const struct dt_agent__round_config *cfg)
{
    *l = (struct dt_agent__link){.cfg = *cfg};
    l->lost.node = -1;
    snprintf(l->coord, sizeof l->coord, "%s:%d", cfg->coord_host, cfg->coord_port);
    struct dt_store_options o = {
        .host = cfg->coord_host, .port = cfg->coord_port, .token = cfg->token, .timeout_s = cfg->timeout_s};
    int rc = dt_store_connect(&o, &l->store);
    if (rc && dt_error_code() == DT_EAUTH)
        dt_error_prefix("node %d: the coordinator at %s (node 0's agent) holds another job token than this "
                        "node; every node of a job needs the same one (DTRAIN_JOB_TOKEN, the file "
                        "DTRAIN_JOB_TOKEN_FILE names, or dtrain run --token-file)",
                        cfg->node_rank, l->coord);
    else if (rc)
        dt_error_prefix("node %d: cannot reach the coordinator at %s (node 0's agent hosts it) within "
                        "rendezvous.timeout (%gs)",
                        cfg->node_rank, l->coord, cfg->timeout_s);
    return rc;
}

void dt_agent__link_close(struct dt_agent__link *l)
{
    dt_store_close(l->store);
    l->store = NULL;
}

void dt_agent__link_short_calls(struct dt_agent__link *l)
{
    if (l->cfg.liveness_s <= 0)
        return;
    dt_store_set_timeout(l->store, l->cfg.liveness_s);
    dt_store_set_liveness(l->store, l->cfg.liveness_s);
}

enum dt_agent_verdict dt_agent__link_lost(struct dt_agent__link *l, int *status)
{
    if (!l->dead)
        dt_log_error("node %d: lost the coordinator at %s (hosted by node 0's agent, which has exited or "
                     "was killed, or the network went away): %s; stopping this node's ranks",
                     l->cfg.node_rank, l->coord, dt_error_last());
    l->dead = true;
    *status = 1;
    return DT_AGENT_ABORT;
}

/* --- keys ---------------------------------------------------------------- */

int dt_agent__link_exists(struct dt_agent__link *l, const char *key)
{
    bool ready = false;
    int rc = dt_store_check(l->store, &key, 1, &ready);
    return rc < 0 ? rc : ready;
}

int dt_agent__link_get(struct dt_agent__link *l, const char *key, char **v, size_t *len)
{
    void *got = NULL;
    int rc = dt_store_get(l->store, key, &got, len);
    *v = got;
    return rc;
}

int dt_agent__link_get_text(struct dt_agent__link *l, const char *key, char *out, size_t n)
{
    char *v = NULL;
    size_t len = 0;
    int rc = dt_agent__link_get(l, key, &v, &len);
    if (rc == 0)
        snprintf(out, n, "%.*s", (int)(len < n ? len : n - 1), v);
    free(v);
    return rc;
}

int dt_agent__link_set(struct dt_agent__link *l, const char *key, const struct dt_agent__text *t)
{
    return dt_store_set(l->store, key, t->p ? t->p : "", t->len);
}

/* The key's record when it is there: 1 with *v (free it), 0 when absent. */
static int fetch(struct dt_agent__link *l, const char *key, char **v, size_t *len)
{
    *v = NULL;
    int rc = dt_agent__link_exists(l, key);
    if (rc == 1 && (rc = dt_agent__link_get(l, key, v, len)) == 0)
        rc = 1;
    return rc;
}

/* --- the job's abort ----------------------------------------------------- */

int dt_agent__link_abort(struct dt_agent__link *l, int status, const char *why)
{
    if (l->dead || l->fenced) /* a fenced agent's job goes on without it: it must not end it */
        return 0;
    struct dt_agent__rec_abort a = {.status = status};
    snprintf(a.why, sizeof a.why, "node %d: %s", l->cfg.node_rank, why);
    struct dt_agent__text t = {0};
    int rc = dt_agent__rec_abort_encode(&a, &t);
    void *got = NULL;
    size_t len = 0;
    /* The first abort stands: its status is the job's. */
    if (rc == 0)
        rc = dt_store_compare_set(l->store, DT_AGENT__KEY_ABORT, "", 0, t.p, t.len, &got, &len);
    free(got);
    dt_agent__text_free(&t);
    return rc;
}

/* Another node's abort, said as what it is: a requeue stop (every node's ranks
 * checkpointed on SIGUSR1 and exit DT_AGENT_EXIT_REQUEUE) is expected, not an error. */
static void say_abort(const struct dt_agent__rec_abort *a)
{
    if (a->status == DT_AGENT_EXIT_REQUEUE)
        dt_log_info("the job is stopping to be requeued: %s", a->why);
    else
        dt_log_error("the job is ending: %s", a->why);
}

int dt_agent__link_aborted(struct dt_agent__link *l, int *status)
{
    char *v;
    size_t len;
    int rc = fetch(l, DT_AGENT__KEY_ABORT, &v, &len);
    if (rc == 1) {
        struct dt_agent__rec_abort a;
        if (dt_agent__rec_abort_decode(v, len, &a) == 0) {
            say_abort(&a);
            *status = a.status;
        } else { /* someone wants the job ended, in words no agent writes: it ends, status 1 */
            dt_log_error("the job is ending: %s holds %s", DT_AGENT__KEY_ABORT, dt_error_last());
            *status = 1;
        }
    }
    free(v);
    return rc;
}

/* --- incarnations -------------------------------------------------------- */

/* An agent of a node that was lost and comes back (a partitioned host, a
 * pod the scheduler replaced while the old one still ran) joins again only
 * after the coordinator has seen the old connection go, so the JOIN, then
 * this count, orders them: a round names the incarnation that takes part. */
int dt_agent__link_register(struct dt_agent__link *l)
{
    char key[DT_AGENT__KEY_MAX];
    int64_t inc = 0, joins = 0;
    int rc = dt_store_add(l->store, dt_agent__key(key, DT_AGENT__K_INCARNATION, 0, l->cfg.node_rank), 1, &inc);
    if (rc == 0)
        rc = dt_store_add(l->store, DT_AGENT__KEY_JOINS, 1, &joins);
    if (rc == 0 && (inc < 1 || inc > INT32_MAX))
        rc = dt_error_set(DT_EPROTO, "%s holds %lld, which no agent counts to", key, (long long)inc);
    if (rc)
        return dt_error_prefix("node %d: counting this agent's incarnation", l->cfg.node_rank);
    l->incarnation = (int)inc;
    return 0;
}

int dt_agent__link_incarnation(struct dt_agent__link *l, int slot, int *inc)
{
    char key[DT_AGENT__KEY_MAX];
    int64_t v = 0;
    int rc = dt_store_add(l->store, dt_agent__key(key, DT_AGENT__K_INCARNATION, 0, slot), 0, &v);
    if (rc == 0 && (v < 0 || v > INT32_MAX))
        rc = dt_error_set(DT_EPROTO, "%s holds %lld, which no agent counts to", key, (long long)v);
    *inc = rc == 0 ? (int)v : 0;
    return rc;
}

int dt_agent__link_joins(struct dt_agent__link *l, long long *joins)
{
    int64_t v = 0;
    int rc = dt_store_add(l->store, DT_AGENT__KEY_JOINS, 0, &v);
    *joins = v;
    return rc;
}

/* --- lost members -------------------------------------------------------- */

bool dt_agent__link_keep_lost(struct dt_agent__link *l, const struct dt_store_member *m)
{
    double when = dt_clock_s();
    if (!l->cfg.coord || l->lost.node >= 0)
        return false;
    if (m->state == DT_STORE_MEMBER_LEFT) /* a stop signal made it leave mid-round (agent_rounds.c) */
        snprintf(l->lost.reason, sizeof l->lost.reason,
                 "node %d (host %s, agent pid %ld) left the job mid-round: its agent was stopped by a signal",
                 m->node_rank, m->host, m->pid);
    else if (dt_coord_member_lost(l->cfg.coord, m->node_rank, l->lost.reason, sizeof l->lost.reason, &when) != 0)
        return false;
    l->lost.node = m->node_rank;
    snprintf(l->lost.host, sizeof l->lost.host, "%s", m->host);
    l->lost_unix = dt_clock_wall_s() - (dt_clock_s() - when);
    return true;
}

/* --- a round's failure --------------------------------------------------- */

int dt_agent__link_read_fail(struct dt_agent__link *l, int k, struct dt_agent__rec_fail *f)
{
    char key[DT_AGENT__KEY_MAX], *v;
    size_t len;
    int rc = fetch(l, dt_agent__key(key, DT_AGENT__K_FAIL, k, 0), &v, &len);
    if (rc == 1 && dt_agent__rec_fail_decode(v, len, f) < 0)
        rc = dt_error_prefix("%s", key);
    free(v);
    return rc;
}

/* Node 0 puts another node's failure of round k where the summary reads it,
 * on node 0's clock as the summary's other times. */
void dt_agent__link_read_failinfo(struct dt_agent__link *l, struct dt_agent_result *res, int k, int from)
{
    char key[DT_AGENT__KEY_MAX], *v;
    size_t len;
    if (fetch(l, dt_agent__key(key, DT_AGENT__K_FAILINFO, k, from), &v, &len) != 1)
        return;
    struct dt_agent__rec_failinfo *r = malloc(sizeof *r);
    if (r && dt_agent__rec_failinfo_decode(v, len, r) == 0) {
        struct dt_agent_failure *ff = &res->first_failure;
        *ff = r->f;
        ff->attempt = k;
        ff->time_s = r->time_unix - res->started_unix;
        ff->hang_detected_s = ff->hung ? r->detected_unix - res->started_unix : 0;
        res->have_failure = true;
        dt_log_debug("round %d failed first on node %d (%s)", k, ff->node, ff->host);
    } else if (r) {
        dt_log_warn("node %d's report of round %d's failure cannot be read (%s: %s); summary.json names "
                    "what node 0 knows of it",
                    from, k, key, dt_error_last());
    }
    free(r);
    free(v);
}
