/* coordinator.h - the coordinator: the rendezvous point of a job.
 *
 * One libuv event loop on a thread of its own (in the launcher, in node 0's
 * agent, or in `dtrain coordinator`), serving the key-value store of store.h
 * over PyTorch's TCPStore wire protocol plus dtrain's operations (barrier,
 * heartbeats, membership).  Every connection must present the job token
 * before anything it sends is applied, unless the job runs with auth: none.
 * Malformed, truncated or oversized frames close that one connection and are
 * logged; everyone else keeps being served.
 *
 * Not for spawning or supervising processes (that is the agent).
 */
#ifndef DT_COORDINATOR_H
#define DT_COORDINATOR_H

#include <stddef.h>
#include <stdint.h>

struct dt_coord;

struct dt_coord_config {
    const char *bind_host;   /* default "0.0.0.0" */
    int port;                /* 0: the kernel picks one; read it back with dt_coord_port() */
    const char *token;       /* 64 hex chars; NULL means auth: none (the host says so, once a job) */
    size_t max_frame_bytes;  /* 0: defaults (coordinator_internal.h, docs/security.md) */
    size_t max_key_bytes;
    size_t max_value_bytes;
    size_t max_total_bytes;
    unsigned handshake_timeout_ms; /* 0: 10 s to finish VALIDATE and AUTH */
    unsigned request_timeout_ms;   /* 0: 30 s for a started request to arrive whole */
    unsigned max_conns;            /* 0: half of RLIMIT_NOFILE, at most 65536 */
    unsigned max_preauth_conns;    /* 0: half of max_conns, at most 1024 */
    /* An agent's membership connection (JOIN) whose host or network went
     * away is closed, and the member lost, about this long after its last
     * acknowledged byte (dt_store_liveness_fd); 0: the kernel's own TCP
     * timeouts (minutes).  Node 0's agent gives rendezvous.heartbeat_timeout. */
    double member_liveness_s;
    /* A member whose host still acknowledges but whose agent sends nothing
     * (stopped by SIGSTOP, hung) is invisible to TCP: with this > 0, the
     * connection of a member other than node 0 (whose agent hosts this
     * coordinator) that neither sends a request nor gets a reply for this
     * long, while no WAIT or BARRIER of its is pending, is closed and the
     * member lost ("went silent").  0: off.  Only for agents that call at
     * least every few seconds in every phase of a job (dtrain's poll every
     * 0.1 s; node 0's agent gives max(heartbeat_timeout, 5 s)). */
    double member_silence_s;
};

/* Binds, listens and starts the loop thread; returns once clients can connect. */
int dt_coord_start(const struct dt_coord_config *cfg, struct dt_coord **out);

/* The port actually listened on. */
int dt_coord_port(const struct dt_coord *c);

/* Reads the step counter last reported by `rank` (and when, in monotonic
 * seconds); returns DT_ENOTFOUND if that rank never reported. */
int dt_coord_heartbeat(struct dt_coord *c, int rank, int64_t *step, double *when_s);

/* Why node `node`'s agent was lost (a sentence naming its host, address
 * and pid, and how: its connection closed, or it stopped acknowledging),
 * and when (monotonic seconds, may be NULL); DT_ENOTFOUND while it was
 * never lost.  Safe from any thread. */
int dt_coord_member_lost(struct dt_coord *c, int node, char *why, size_t n, double *when_s);

/* How many clients that are processes of this job (this host, this user,
 * the coordinator's process or its descendants: coord_gate.c) were turned
 * away for lack of the job token, and the last reason (into `last`, may be
 * NULL).  PyTorch's client retries such a refusal for as long as its timeout
 * (30 minutes by default), so a launcher that sees this grow can stop the
 * job and say "set rendezvous: {auth: none}" instead of letting it hang;
 * clients from outside the job are refused too but not counted, so they
 * cannot stop it.  Safe from any thread. */
unsigned long dt_coord_refusals(struct dt_coord *c, char *last, size_t n);

/* Stops the loop, closes every connection, frees everything. */
void dt_coord_stop(struct dt_coord *c);

#endif
