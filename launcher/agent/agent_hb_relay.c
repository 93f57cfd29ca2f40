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
 * drive the relay (agent_rounds.c), nor the coordinator's heartbeat table
 * (coordinator.h).
 */
#include "launcher/agent/agent_internal.h"

#include "base/clock.h"
#include "base/error.h"
#include "comm/store.h"
#include "launcher/coordinator/coordinator.h"
#include "spec/jobspec.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#define RELAY_S 0.25
#define LINE_MAX_CHARS 64 /* "<rank> <step> <age>\n" */

struct hb_entry {
    int rank;
    int64_t step;
    double age_s;
};

struct dt_agent__hb_relay {
    int node, nnodes, nproc;
    double last_s;            /* node 0: last write; others: last read */
    unsigned long long seq;   /* node 0: writes so far; others: the seq last seen */
    double seen_s;            /* others: when that seq was first seen */
    struct hb_entry *entries; /* others: this node's ranks as last read */
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

static void hb_key(char *out, size_t n, int node)
{
    snprintf(out, n, "dtrain/hb/%d", node);
}

/* One node's value: its ranks' entries from the coordinator's table. */
static size_t node_value(struct dt_agent__hb_relay *h, struct dt_coord *c, int node, double now, char *v,
                         size_t cap)
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

int dt_agent__hb_relay(struct dt_agent__hb_relay *h, struct dt_store *s, struct dt_coord *c)
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
static int refresh(struct dt_agent__hb_relay *h, struct dt_store *s, double now)
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

static int hb_read(struct dt_agent__hb_relay *h, struct dt_store *s, int rank, int64_t *step, double *age_s)
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

void dt_agent__round_hb_place(struct dt_agent__round *r, int node, int nnodes)
{
    r->hb->node = node;
    r->hb->nnodes = nnodes;
    r->hb->seen_s = 0;
    r->hb->n_entries = 0;
}

int dt_agent__round_relay(struct dt_agent__round *r)
{
    return r->cfg.job->trainer ? dt_agent__hb_relay(r->hb, r->store, r->cfg.coord) : 0;
}

int dt_agent__round_heartbeat(struct dt_agent__round *r, int rank, int64_t *step, double *age_s)
{
    if (r->dead)
        return dt_error_set(DT_EIO, "the coordinator at %s is gone", r->coord);
    int rc = hb_read(r->hb, r->store, rank, step, age_s);
    if (rc < 0 && rc != DT_ENOTFOUND) { /* the store failed: the next poll ends the job */
        int status;
        dt_agent__round_lost_coordinator(r, &status);
        dt_error_set(rc, "the coordinator at %s is gone", r->coord);
    }
    return rc;
}
