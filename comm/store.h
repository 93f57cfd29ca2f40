/* store.h - client of the coordinator's key-value store (PyTorch TCPStore semantics).
 *
 * The wire protocol is PyTorch's TCPStore protocol (comm/store_wire.h holds the
 * one encoder/decoder used by this client and by the coordinator), so PyTorch's
 * own TCPStore client can talk to dtrain's coordinator and this client could
 * talk to PyTorch's server.  dtrain's additions (job-token authentication, a
 * one-round-trip barrier, heartbeats) use opcodes outside PyTorch's range.
 *
 * Every call blocks until the answer arrives or the client's timeout passes;
 * failures name the coordinator, the operation and the key:
 * "coordinator 10.0.0.3:41223 did not answer WAIT for key 'x' in 60s".
 * A client is used by one thread at a time.
 *
 * Not for collectives: the communicator uses the store only to bootstrap.
 */
#ifndef DT_STORE_H
#define DT_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct dt_store;

struct dt_store_options {
    const char *host;        /* name or address of the coordinator */
    int port;
    const char *token;       /* job token (64 hex chars); NULL when the job runs with auth: none */
    double timeout_s;        /* per-operation deadline, also bounds connect retries; default 60 */
};

/* Connects (retrying until the deadline while the coordinator is not up yet),
 * validates like PyTorch's client does, then presents the token. */
int dt_store_connect(const struct dt_store_options *opts, struct dt_store **out);

/* Connects with the DTRAIN_COORD_ADDR ("host:port") and DTRAIN_JOB_TOKEN a rank
 * receives from its agent; missing or malformed variables are a clear error. */
int dt_store_connect_env(double timeout_s, struct dt_store **out);

void dt_store_close(struct dt_store *s);

/* Closes the client but keeps its connection, validated and with the token
 * presented: returns the socket (non-blocking, close-on-exec), now the caller's;
 * -1 when the last operation failed and dropped it.  A node's store
 * endpoint (launcher/agent/agent_endpoint.c) carries its ranks' requests
 * over such a connection. */
int dt_store_detach(struct dt_store *s);

/* The per-operation deadline from now on (ignored when <= 0); returns the
 * one it replaces, so a caller can bound one call and put it back. */
double dt_store_set_timeout(struct dt_store *s, double timeout_s);

/* A connection whose peer's host or network went away fails in about
 * `seconds` (DT_ECONN), however idle it is: TCP keepalive probes every
 * second after a second of silence, TCP_USER_TIMEOUT of `seconds` for
 * unanswered data and probes, and retransmissions at least every second
 * (TCP_RTO_MAX_MS, Linux 6.15+; ignored before) so a link that comes back
 * within `seconds` is used again at once.  A peer that is only slow to
 * answer (its process busy) is not affected: its kernel acknowledges.
 * The agents' membership connections use it (launcher/agent/agent_rounds.c),
 * applied by the coordinator to its end of them too. */
void dt_store_set_liveness(struct dt_store *s, double seconds);
/* The same settings on a connected TCP socket; 0, or errno of the setting
 * that failed (TCP_RTO_MAX_MS missing is no failure). */
int dt_store_liveness_fd(int fd, double seconds);

/* --- TCPStore operations ------------------------------------------------ */
int dt_store_set(struct dt_store *s, const char *key, const void *value, size_t len);
/* Blocks until the key exists (or the timeout); *value is malloc'd, NUL-terminated
 * one past len for convenience; free() it. */
int dt_store_get(struct dt_store *s, const char *key, void **value, size_t *len);
/* Atomic add to an integer counter stored as decimal text; *result is the new value. */
int dt_store_add(struct dt_store *s, const char *key, int64_t delta, int64_t *result);
/* Sets key to desired if its value equals expected (an absent key matches an empty
 * expected); *current (malloc'd) receives the value after the operation. */
int dt_store_compare_set(struct dt_store *s, const char *key, const void *expected, size_t expected_len,
                         const void *desired, size_t desired_len, void **current, size_t *current_len);
/* Non-blocking: *ready is true when all keys exist. */
int dt_store_check(struct dt_store *s, const char *const *keys, int n, bool *ready);
/* Blocks until all keys exist or timeout_s passes (DT_ETIMEDOUT). */
int dt_store_wait(struct dt_store *s, const char *const *keys, int n, double timeout_s);
int dt_store_delete_key(struct dt_store *s, const char *key, bool *deleted);
int dt_store_num_keys(struct dt_store *s, int64_t *n);
int dt_store_append(struct dt_store *s, const char *key, const void *value, size_t len);
/* values[i]/lens[i] are malloc'd; the caller frees each. */
int dt_store_multi_get(struct dt_store *s, const char *const *keys, int n, void **values, size_t *lens);
int dt_store_multi_set(struct dt_store *s, const char *const *keys, const void *const *values,
                       const size_t *lens, int n);

/* --- dtrain's additions ------------------------------------------------- */
/* Returns when `world` clients have entered barrier `name`: one request and one
 * reply per client, whatever the world size. */
int dt_store_barrier(struct dt_store *s, const char *name, int world, double timeout_s);
/* Reports that `rank` is alive at training step `step`. */
int dt_store_heartbeat(struct dt_store *s, int rank, int64_t step);

/* --- PyTorch's queues (2.6+) ----------------------------------------- */
int dt_store_queue_push(struct dt_store *s, const char *key, const void *value, size_t len);
/* Pops the front item; with `block`, first waits (up to the client's timeout)
 * until the queue has one.  An empty queue without `block` is DT_ENOTFOUND.
 * *value is malloc'd; free() it. */
int dt_store_queue_pop(struct dt_store *s, const char *key, bool block, void **value, size_t *len);
int dt_store_queue_len(struct dt_store *s, const char *key, int64_t *n);

/* --- agent membership --------------------------------------------------- */
/* An agent joins once per job, on a connection it keeps: the connection
 * closing without dt_store_leave() shows as DT_STORE_MEMBER_LOST.  (The
 * client reconnects after a failure, but a new connection is not a member
 * until it joins again.) */
enum dt_store_member_state {
    DT_STORE_MEMBER_JOINED = 1,
    DT_STORE_MEMBER_LEFT = 2,
    DT_STORE_MEMBER_LOST = 3,
};

struct dt_store_member {
    int node_rank;
    int nproc;
    long pid;
    enum dt_store_member_state state;
    char host[256];
};

/* Joins as node `node_rank` of `nnodes` with `nproc` ranks, from `host`
 * (this process's pid is sent along).  A node rank out of range, another
 * node count than the first agent's, or a node rank another connected agent
 * holds is DT_EINVAL with the coordinator's sentence saying which. */
int dt_store_join(struct dt_store *s, int node_rank, int nnodes, int nproc, const char *host);
/* An elastic job's agent without a node rank: joins into the slot the
 * coordinator picks (>= 1, never given twice), returned in *slot. */
int dt_store_join_any(struct dt_store *s, int nnodes, int nproc, const char *host, int *slot);
int dt_store_leave(struct dt_store *s);
/* Every node rank that ever joined, by node rank; *out is malloc'd (free()). */
int dt_store_members(struct dt_store *s, struct dt_store_member **out, int *n);

/* "host:port" of the coordinator, for messages. */
const char *dt_store_peer(const struct dt_store *s);

#endif
