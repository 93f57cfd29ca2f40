/* agent_hb_relay.c - the ranks' heartbeats relayed from node 0 to the
 * other nodes' watchdogs, through the coordinator's store.
 *
 * Every rank sends its heartbeats to the coordinator, which
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
 * Not for the watchdog's rule (agent_watchdog.c), the rounds whose polls
 * drive the relay (agent_rounds.c), the record's layout (agent_records.h),
 * nor the coordinator's heartbeat table (coordinator.h).
 */
#include "launcher/agent/agent_rounds.h"

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "comm/store.h"
#include "launcher/coordinator/coordinator.h"
#include "spec/jobspec.h"
#include "spec/placement.h"

#include <stdio.h>
#include <stdlib.h>

#define RELAY_S 0.25

struct dt_agent__hb_relay {
    int node, nnodes, nproc;
    double last_s;          /* node 0: last write; others: last read */
    unsigned long long seq; /* node 0: writes so far; others: the seq last seen */
    double seen_s;          /* others: when that seq was first seen */
    struct dt_agent__rec_hb_entry *entries; /* node 0: one node's, being written; others: this node's ranks */
    int n_entries;
};

struct dt_agent__hb_relay *dt_agent__hb_new(int node, int nnodes, int nproc)
{
    struct dt_agent__hb_relay *h = calloc(1, sizeof *h);
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

void dt_agent__hb_free(struct dt_agent__hb_relay *h)
{
    if (h)
        free(h->entries);
    free(h);
}

void dt_agent__hb_place(struct dt_agent__hb_relay *h, int node, int nnodes)
{
    h->node = node;
    h->nnodes = nnodes;
    h->seen_s = 0;
    h->n_entries = 0;
}

/* --- node 0 writes ------------------------------------------------------- */

/* One node's record, from the coordinator's table, appended to t. */
static int node_record(struct dt_agent__hb_relay *h, struct dt_coord *c, int node, double now,
                       struct dt_agent__text *t)
{
    struct dt_agent__rec_hb r = {.seq = h->seq, .e = h->entries};
    for (int i = 0; i < h->nproc; i++) {
        struct dt_agent__rec_hb_entry *e = &h->entries[r.n];
        double when;
        e->rank = dt_placement_rank_of(h->nproc, node, i);
        if (dt_coord_heartbeat(c, e->rank, &e->step, &when) == 0) {
            e->age_s = now - when;
            r.n++;
        }
    }
    return dt_agent__rec_hb_encode(&r, t);
}

/* Every other node's key in one MULTI_SET; the values lie end to end in t. */
static int write_all(struct dt_agent__hb_relay *h, struct dt_agent__link *l, double now)
{
    int n = h->nnodes - 1;
    struct dt_agent__text t = {0};
    char(*keys)[DT_AGENT__KEY_MAX] = calloc((size_t)n, sizeof *keys);
    const char **kp = calloc((size_t)n, sizeof *kp);
    const void **vals = calloc((size_t)n, sizeof *vals);
    size_t *lens = calloc((size_t)n, sizeof *lens), *at = calloc((size_t)n + 1, sizeof *at);
    int rc = keys && kp && vals && lens && at ? 0 : dt_error_set(DT_ENOMEM, "out of memory relaying heartbeats");
    for (int k = 0; rc == 0 && k < n; k++) {
        at[k] = t.len;
        rc = node_record(h, l->cfg.coord, k + 1, now, &t);
        kp[k] = dt_agent__key(keys[k], DT_AGENT__K_HB, 0, k + 1);
        lens[k] = t.len - at[k];
    }
    for (int k = 0; rc == 0 && k < n; k++) /* t.p is where it is once every record is in */
        vals[k] = t.p + at[k];
    if (rc == 0)
        rc = dt_store_multi_set(l->store, kp, vals, lens, n);
    dt_agent__text_free(&t);
    free(keys);
    free(kp);
    free(vals);
    free(lens);
    free(at);
    return rc;
}

int dt_agent__hb_relay(struct dt_agent__hb_relay *h, struct dt_agent__link *l)
{
    double now = dt_clock_s();
    if (!l->cfg.job->trainer || h->node != 0 || h->nnodes < 2 || !l->cfg.coord || now - h->last_s < RELAY_S)
        return 0;
    h->last_s = now;
    h->seq++;
    return write_all(h, l, now);
}

/* --- the others read ----------------------------------------------------- */

/* Reads this node's key: new entries when its seq changed.  A record no
 * agent writes is left unread (the entries age, as if the relay had stopped). */
static int refresh(struct dt_agent__hb_relay *h, struct dt_agent__link *l, double now)
{
    char key[DT_AGENT__KEY_MAX], *v = NULL;
    size_t len = 0;
    int rc = dt_agent__link_exists(l, dt_agent__key(key, DT_AGENT__K_HB, 0, h->node));
    if (rc <= 0) /* absent: no rank has been relayed yet */
        return rc;
    if ((rc = dt_agent__link_get(l, key, &v, &len)) < 0)
        return rc;
    struct dt_agent__rec_hb_entry *e = malloc((size_t)(h->nproc > 0 ? h->nproc : 1) * sizeof *e);
    struct dt_agent__rec_hb r = {.e = e};
    if (!e) {
        rc = dt_error_set(DT_ENOMEM, "out of memory reading heartbeats");
    } else if (dt_agent__rec_hb_decode(v, len, h->nproc, &r) < 0) {
        dt_log_debug("%s: %s", key, dt_error_last());
    } else if (r.seq != h->seq || h->seen_s <= 0) {
        h->seq = r.seq;
        h->seen_s = now;
        h->n_entries = r.n;
        for (int i = 0; i < r.n; i++)
            h->entries[i] = r.e[i];
    }
    free(e);
    free(v);
    return rc;
}

int dt_agent__hb_read(struct dt_agent__hb_relay *h, struct dt_agent__link *l, int rank, int64_t *step,
                      double *age_s)
{
    if (l->dead)
        return dt_error_set(DT_EIO, "the coordinator at %s is gone", l->coord);
    double now = dt_clock_s();
    int rc = 0;
    if (now - h->last_s >= RELAY_S) {
        h->last_s = now;
        rc = refresh(h, l, now);
    }
    for (int i = 0; rc == 0 && i < h->n_entries; i++)
        if (h->entries[i].rank == rank) {
            *step = h->entries[i].step;
            *age_s = h->entries[i].age_s + (now - h->seen_s);
            return 0;
        }
    if (rc == 0)
        return dt_error_set(DT_ENOTFOUND, "rank %d has not sent a heartbeat", rank);
    if (rc == DT_ENOTFOUND)
        return rc;
    /* The store failed: the next poll ends the job. */
    int status;
    dt_agent__link_lost(l, &status);
    return dt_error_set(rc, "the coordinator at %s is gone", l->coord);
}
