/* coordinator_internal.h - what the coordinator's files share; not a public
 * API (that is coordinator.h).
 *
 * The coordinator in three files:
 *   coord_server.c      start and stop, the loop thread, connections
 *                       (accept, read, frame, write, close) and the gate
 *                       every connection passes first (VALIDATE, the job
 *                       token);
 *   coord_store.c       the TCPStore half: what each request does and
 *                       answers, the key-value table and its memory budget,
 *                       clients blocked in WAIT, PyTorch's queues;
 *   coord_rendezvous.c  dtrain's additions: one-round-trip barriers,
 *                       heartbeats, agent membership.
 *
 * Everything runs on the loop thread, except the heartbeat table and the
 * refusal count, which dt_coord_heartbeat() and dt_coord_refusals() read
 * from other threads under hb_lock.
 */
#ifndef DT_COORDINATOR_INTERNAL_H
#define DT_COORDINATOR_INTERNAL_H

#include "comm/store_wire.h"
#include "launcher/coordinator/coordinator.h"

#include <pthread.h>
#include <stdbool.h>
#include <uv.h>

#define DT_COORD__QUEUE_SLOTS 256

/* The key-value table (coord_store.c): chained hashing over entries that
 * keep their address (waiting clients point at them). */
struct dt_coord__kv {
    struct dt_coord__entry **slots;
    size_t nslots;
    size_t nentries;   /* present or waited-for */
    size_t npresent;
    size_t bytes;      /* accounted against max_total_bytes */
    uint64_t generation; /* bumped by every change a reader could see */
};

/* The last MULTI_GET's key list and encoded answer: in a rendezvous every
 * rank asks for the same keys after the same barrier, so all but the first
 * are a compare and a copy instead of N lookups.  Valid while the table's
 * generation is unchanged. */
struct dt_coord__mget {
    uint8_t *keys;
    size_t keys_len;
    uint8_t *reply;
    size_t reply_len;
    uint64_t generation;
    bool valid;
};

struct dt_coord__conn {
    uv_tcp_t tcp;
    struct dt_coord *coord;
    struct dt_coord__conn *prev, *next;
    char peer[64];
    uint8_t *rbuf;               /* an incomplete request's bytes (NULL when none) */
    size_t rlen, rcap;
    struct dt_wire_buf out;      /* replies gathered while a read is processed */
    bool validated, authed, closing, in_read;
    size_t waits_left;           /* keys of the pending WAIT still missing */
    bool waiting;
    struct dt_coord__wait *wait_nodes;
    struct dt_coord__barrier *barrier;
    int64_t member; /* the node rank this connection joined as, or -1 */
};

struct dt_coord {
    uv_loop_t loop;
    uv_tcp_t listener;
    uv_async_t stop_async;
    uv_thread_t thread;
    bool thread_started;
    int port;
    bool auth;
    char token[65];
    struct dt_wire_limits lim;
    size_t max_total_bytes;
    size_t max_write_queue;
    /* Reads land here first; only an incomplete request's bytes are copied
     * to the connection's own buffer, so idle connections hold no buffer. */
    uint8_t *scratch;
    size_t scratch_cap;
    bool scratch_busy;
    struct dt_coord__kv kv;
    struct dt_coord__mget mget;
    struct dt_coord__conn *conns;
    size_t nconns;
    struct dt_coord__barrier *barriers;
    struct dt_coord__queue *queues[DT_COORD__QUEUE_SLOTS];
    struct dt_coord__member *members; /* nnodes entries once the first agent joined */
    int64_t nnodes;
    bool stopping; /* dt_coord_stop is closing everything: members leaving is no news */
    unsigned long closes_logged;
    /* Under hb_lock too: read by dt_coord_refusals from the launcher's thread. */
    unsigned long refusals;
    char last_refusal[512];
    pthread_mutex_t hb_lock;
    struct dt_coord__heartbeat *hb;
    size_t hb_cap;
};

/* ---- coord_server.c ---- */

/* Sends what is in conn->out now (replies to other clients' events). */
void dt_coord__conn_flush(struct dt_coord__conn *conn);
/* Printable form of a key for log lines: at most 64 chars, non-printables as '?'. */
const char *dt_coord__key_str(const uint8_t *key, size_t len, char buf[80]);

/* ---- coord_store.c ---- */

int dt_coord__store_init(struct dt_coord *c);
/* Frees the table, the queues and the MULTI_GET cache. */
void dt_coord__store_free(struct dt_coord *c);
/* Serves one request that passed the gate: 0, or negative with
 * dt_error_last() saying why the connection must close. */
int dt_coord__handle(struct dt_coord__conn *conn, const struct dt_wire_request *r);
/* Drops the connection's pending WAIT (CANCEL_WAIT, or it is closing). */
void dt_coord__wait_cancel(struct dt_coord__conn *conn);

/* ---- coord_rendezvous.c ---- */

int dt_coord__barrier_enter(struct dt_coord__conn *conn, const struct dt_wire_request *r);
/* The connection closed: it no longer counts towards its barrier. */
void dt_coord__barrier_leave(struct dt_coord__conn *conn);
int dt_coord__heartbeat_record(struct dt_coord *c, int64_t rank, int64_t step);
int dt_coord__member_join(struct dt_coord__conn *conn, const struct dt_wire_request *r);
void dt_coord__member_leave(struct dt_coord__conn *conn);
/* The connection closed: a member that had not left is lost. */
void dt_coord__member_lost(struct dt_coord__conn *conn);
void dt_coord__member_list(struct dt_coord__conn *conn);
/* Frees the barriers, the members and the heartbeat table. */
void dt_coord__rendezvous_free(struct dt_coord *c);

#endif
