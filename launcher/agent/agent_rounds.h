/* agent_rounds.h - a node's part in the restart rounds of a multi-node job
 * (not a public interface: agent_node.c and the files below use it).
 *
 * Four files, each calling only those listed before it (and the records'
 * codec, agent_records.h, which calls none):
 *   agent_link.c      the connection to the coordinator's store; the job's
 *                     abort; a lost member; a round's first failure, read
 *   agent_hb_relay.c  the ranks' heartbeats, relayed by node 0 to the others
 *   agent_elastic.c   the rounds node 0 forms, of an elastic job (nodes:
 *                     MIN:MAX) and of a fixed-size job with restarts: which
 *                     agents take part in each, as which node; a lost node's
 *                     replacement
 *   agent_rounds.c    the rounds of every multi-node job: a failure published,
 *                     the round's end and the decision to restart, the hooks
 *                     that put them into dt_agent_run, the rank records at the end
 * Names carry dt_agent__.
 */
#ifndef DT_AGENT_ROUNDS_H
#define DT_AGENT_ROUNDS_H

#include "launcher/agent/agent.h"
#include "launcher/agent/agent_records.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct dt_coord;
struct dt_store;
struct dt_store_member;

struct dt_agent__round_config {
    const struct dt_job *job;
    int node_rank, nnodes, nproc;
    const char *coord_host; /* how this agent reaches the coordinator */
    int coord_port;
    const char *token; /* NULL with auth: none */
    double timeout_s;  /* rendezvous.timeout: connecting, every node joining */
    double liveness_s; /* once every node joined: each store call's deadline, and how long a
                          connection may go unacknowledged (dt_store_set_liveness) */
    double grace_s;
    struct dt_coord *coord; /* node 0: the coordinator it hosts (heartbeats to relay), else NULL */
    int nnodes_min;         /* below nnodes: an elastic job, node_rank 0 or -1 (agent_elastic.c) */
};

#define DT_AGENT__MAX_ROUNDS 1024

/* --- agent_link.c -------------------------------------------------------- */

struct dt_agent__link {
    struct dt_agent__round_config cfg; /* an elastic job's node_rank: its slot (agent_elastic.c) */
    struct dt_store *store;
    char coord[300]; /* host:port, for messages */
    bool dead;       /* the coordinator is gone: nothing more is asked of it */
    int incarnation; /* rounds node 0 forms: this agent is the incarnation-th to join as its slot; else 0 */
    bool fenced;     /* a newer incarnation holds this slot: nothing more is written for the job */
    struct dt_agent_lost_node lost; /* node 0: the member whose loss ended the job (or round); node -1 */
    double lost_unix;               /* when the coordinator noticed, wall clock */
};

/* Connects, retrying until cfg->timeout_s; an error names host:port. */
int dt_agent__link_open(struct dt_agent__link *l, const struct dt_agent__round_config *cfg);
void dt_agent__link_close(struct dt_agent__link *l);
/* Once every node has joined: every call is a short one, made at least every
 * poll, so a coordinator silent for liveness_s is gone. */
void dt_agent__link_short_calls(struct dt_agent__link *l);
/* A store call failed: says once that the coordinator is gone, marks the
 * link dead, *status 1; returns ABORT. */
enum dt_agent_verdict dt_agent__link_lost(struct dt_agent__link *l, int *status);
/* 1 when key exists, 0 when not, negative on a store error. */
int dt_agent__link_exists(struct dt_agent__link *l, const char *key);
/* key's value, malloc'd in *v (NUL-terminated; free it); or as text cut to n. */
int dt_agent__link_get(struct dt_agent__link *l, const char *key, char **v, size_t *len);
int dt_agent__link_get_text(struct dt_agent__link *l, const char *key, char *out, size_t n);
int dt_agent__link_set(struct dt_agent__link *l, const char *key, const struct dt_agent__text *t);
/* Ends the job everywhere with status (the first abort stands); nothing
 * once the link is dead or fenced. */
int dt_agent__link_abort(struct dt_agent__link *l, int status, const char *why);
/* Just after this agent joined as l->cfg.node_rank: counts it in
 * dtrain/incarnation/<slot>, then in dtrain/joins (that order: whoever sees
 * the joins move finds the slot's new incarnation), into l->incarnation. */
int dt_agent__link_register(struct dt_agent__link *l);
/* How many agents joined as slot so far (0: none yet), and the job's joins. */
int dt_agent__link_incarnation(struct dt_agent__link *l, int slot, int *inc);
int dt_agent__link_joins(struct dt_agent__link *l, long long *joins);
/* dtrain/abort: 1 (said, *status set) when it is there, 0 when not, negative on a store error. */
int dt_agent__link_aborted(struct dt_agent__link *l, int *status);
/* Node 0: keeps m, a lost member, as summary.json's lost_node in the
 * coordinator's words (how its connection ended: closed, or unacknowledged
 * for liveness_s), or, left mid-round, as stopped by a signal (an agent
 * other than node 0's leaves alone then, agent_rounds.c), when it is the
 * first; true if it was kept. */
bool dt_agent__link_keep_lost(struct dt_agent__link *l, const struct dt_store_member *m);
/* Round k's first failure: 1 with *f, 0 when none, negative on a store error
 * or a record no agent writes. */
int dt_agent__link_read_fail(struct dt_agent__link *l, int k, struct dt_agent__rec_fail *f);
/* Node 0: node `from`'s report of round k's failure into res->first_failure. */
void dt_agent__link_read_failinfo(struct dt_agent__link *l, struct dt_agent_result *res, int k, int from);

/* --- agent_hb_relay.c ---------------------------------------------------- */

struct dt_agent__hb_relay;
/* The relay of node `node` of `nnodes` with nproc ranks each; NULL when out of memory. */
struct dt_agent__hb_relay *dt_agent__hb_new(int node, int nnodes, int nproc);
void dt_agent__hb_free(struct dt_agent__hb_relay *h);
/* This node's place in a new round: another node number, another count. */
void dt_agent__hb_place(struct dt_agent__hb_relay *h, int node, int nnodes);
/* Node 0 of a trainer: job writes every other node's key, at most every
 * RELAY_S; 0 elsewhere, or a store error. */
int dt_agent__hb_relay(struct dt_agent__hb_relay *h, struct dt_agent__link *l);
/* `rank`'s step and age as node 0 relays them (DT_ENOTFOUND: none yet); a
 * store error marks the link lost. */
int dt_agent__hb_read(struct dt_agent__hb_relay *h, struct dt_agent__link *l, int rank, int64_t *step,
                      double *age_s);

/* --- agent_elastic.c ----------------------------------------------------- */

struct dt_agent__elastic;
/* The rounds node 0 forms, of an elastic job (nodes_min below l->cfg.nnodes)
 * or of a fixed-size one with restarts (nodes_min equal to it).  Joins: node
 * 0 as slot 0; in an elastic job the others into the slot the coordinator
 * gives (it becomes l->cfg.node_rank), in a fixed-size one as their node
 * rank; then counts this agent's incarnation. */
int dt_agent__elastic_open(struct dt_agent__link *l, struct dt_agent__hb_relay *hb, int nodes_min,
                           struct dt_agent__elastic **out);
void dt_agent__elastic_free(struct dt_agent__elastic *el);
/* The hooks' parts (agent.h), after agent_rounds.c did what every round does. */
int dt_agent__elastic_begin(struct dt_agent__elastic *el, int *attempt, int sig_fd, struct dt_agent_place *place,
                            int *status);
enum dt_agent_verdict dt_agent__elastic_poll(struct dt_agent__elastic *el, const struct dt_agent_result *res,
                                             int k, int *status);
int dt_agent__elastic_attempt_end(struct dt_agent__elastic *el, struct dt_agent_result *res, int k, int sig_fd,
                                  bool *restart, int *status);

/* --- agent_rounds.c ------------------------------------------------------ */

/* One node of a multi-node job: its link, the heartbeat relay, an elastic
 * job's rounds, and what it has published. */
struct dt_agent__round;

/* Connects (retrying until timeout_s) and joins as cfg->node_rank; a
 * coordinator that cannot be reached is an error naming host:port. */
int dt_agent__round_open(const struct dt_agent__round_config *cfg, struct dt_agent__round **out);
/* The run id every node uses: run_id as given (node 0 publishes it), or
 * node 0 makes one and the others read it. */
int dt_agent__round_run_id(struct dt_agent__round *r, char *run_id, size_t n);
/* Returns when all nnodes nodes joined; an error naming the missing ones
 * after rendezvous.timeout. */
int dt_agent__round_wait_all(struct dt_agent__round *r);
/* The hooks that make dt_agent_run restart in step with the other nodes. */
void dt_agent__round_hooks(struct dt_agent__round *r, struct dt_agent_hooks *h);
/* Ends the job everywhere with `status` (the first abort stands). */
int dt_agent__round_abort(struct dt_agent__round *r, int status, const char *why);
/* After dt_agent_run: passes an interruption or failure on to the other
 * nodes, then leaves (node 0 first waits, bounded, for the others to go).
 * The others publish their ranks' records before they leave; node 0 adds
 * them to res (attempts[k].others) for its summary.json. */
void dt_agent__round_finish(struct dt_agent__round *r, struct dt_agent_result *res);
void dt_agent__round_close(struct dt_agent__round *r);
/* The watchdog's heartbeat source on a node other than 0 (agent.h's
 * dt_agent_config.heartbeat): `rank`'s step and age as node 0 relays them. */
int dt_agent__round_heartbeat(struct dt_agent__round *r, int rank, int64_t *step, double *age_s);

#endif
