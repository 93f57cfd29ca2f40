/* coordinator_internal.h - what the coordinator's files share; not a public
 * API (that is coordinator.h).
 *
 * The coordinator in five files:
 *   coord_server.c      start and stop, the loop thread, connections
 *                       (accept, read, frame, write, close), their limits
 *                       and deadlines;
 *   coord_gate.c        the handshake every connection passes first
 *                       (VALIDATE, the job token) and which refusals count;
 *   coord_store.c       the TCPStore half: what each request does and
 *                       answers, the key-value table and its memory budget,
 *                       clients blocked in WAIT;
 *   coord_queue.c       PyTorch's queues, a key space beside the table;
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

/* ---- limits and timeouts ----
 *
 * What a client can make the coordinator hold, and for how long; the store's
 * own limits (frame, key, value, stored bytes) are in struct dt_coord_config.
 * docs/security.md gives the same table for operators.  The aim: a client
 * without the job token costs at most a connection slot and ~1 KiB for at
 * most DT_COORD__HANDSHAKE_MS, and nothing it sends is applied.
 *
 * Before the handshake (VALIDATE, then AUTH with the token) is finished:
 *   PREAUTH_FRAME    128 B   a request: VALIDATE is 5 bytes, AUTH with a
 *                            64-char token 73; any other request is refused
 *                            by its first byte, before its fields are read
 *   PREAUTH_TOKEN     64 B   the token AUTH carries
 *   HANDSHAKE_MS      10 s   from accept to a finished handshake (dtrain's
 *                            and PyTorch's clients send theirs with the
 *                            connect); then the connection is closed
 *   PREAUTH_CONNS   1024     connections in their handshake at once (and at
 *                            most half the connection cap); at the cap, the
 *                            oldest that had EVICT_AGE_MS (100 ms) and has
 *                            no unread bytes is closed to make room: a real
 *                            client's handshake comes with its connect and
 *                            is read within a loop turn, so what stays is
 *                            silent or dribbling.  A flood of N connects a
 *                            second then costs at most N/10 slots, and the
 *                            backlog, where a rank's connect would wait
 *                            behind it, keeps moving
 * Connections:
 *   MAX_CONNS      65536     and at most half of RLIMIT_NOFILE: the process
 *                            hosting the coordinator (the launcher, an agent)
 *                            keeps the other half for its ranks' pipes and
 *                            logs.  At a cap, a connection still in its
 *                            handshake is closed to make room as above; if
 *                            none qualifies, the new one waits in the
 *                            kernel's backlog and the accept is retried when
 *                            the oldest will (a timer, not the 1 s sweep).
 * After the handshake:
 *   REQUEST_MS        30 s   a request must arrive whole within this of its
 *                            first byte (or of the last whole request before
 *                            it); an idle connection may stay open (a rank
 *                            holds its connection for the whole job)
 *   IN_TOTAL     256 MiB     incomplete requests buffered for all connections
 *                            (one is at most max_frame_bytes, 64 MiB)
 *   OUT_PAUSE      4 MiB     a connection's requests are not read while this
 *                            much of its replies is unsent (it resumes at
 *                            half), so pipelined requests wait in the kernel
 *   one reply               at most max_frame_bytes (64 MiB), as a request
 *   OUT_TOTAL    256 MiB     unsent replies of all connections
 *   MGET_CACHE    16 MiB     the MULTI_GET answer kept for the next asker;
 *                            freed when its client leaves or the store changes
 * A client that passes a limit is disconnected with a log line naming it.
 */
#define DT_COORD__PREAUTH_FRAME 128u
#define DT_COORD__PREAUTH_TOKEN 64u
#define DT_COORD__HANDSHAKE_MS 10000u
#define DT_COORD__PREAUTH_CONNS 1024u
#define DT_COORD__MAX_CONNS 65536u
#define DT_COORD__EVICT_AGE_MS 100u
#define DT_COORD__EVICT_SCAN 64 /* pre-auth connections looked at for one eviction */
#define DT_COORD__REQUEST_MS 30000u
#define DT_COORD__IN_TOTAL ((size_t)256 << 20)
#define DT_COORD__OUT_PAUSE ((size_t)4 << 20)
#define DT_COORD__OUT_TOTAL ((size_t)256 << 20)
#define DT_COORD__MGET_CACHE ((size_t)16 << 20)

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
    struct dt_coord__conn *owner; /* its memory goes when this client does */
};

/* Where a connection is in the handshake (coord_gate.c). */
struct dt_coord__gate {
    bool validated; /* VALIDATE with PyTorch's magic came */
    bool authed;    /* the token came, or auth is none */
};

struct dt_coord__conn {
    uv_tcp_t tcp;
    struct dt_coord *coord;
    struct dt_coord__conn *prev, *next;
    /* Oldest first, while the handshake is unfinished (the first to evict). */
    struct dt_coord__conn *pa_prev, *pa_next;
    char peer[64];
    uint8_t *rbuf;               /* an incomplete request's bytes (NULL when none) */
    size_t rlen, rcap;           /* rcap is counted in dt_coord.in_bytes */
    struct dt_wire_progress pg;  /* how far decoding rbuf's first request got */
    struct dt_wire_buf out;      /* replies gathered while a read is processed */
    struct dt_coord__gate gate;
    bool preauth;                /* on the pa_ list */
    bool paused;                 /* not reading: too much of its replies is unsent */
    bool closing, in_read;
    uint64_t accepted_ms;        /* loop time */
    uint64_t deadline_ms;        /* closed when the loop time passes it; 0: none */
    uint64_t quiet_since_ms;     /* loop time of its last whole request or reply (a member's silence) */
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
    uv_timer_t sweep;  /* closes connections past their deadline */
    uv_timer_t retry_accept; /* a deferred accept, tried when a pre-auth connection becomes evictable */
    uv_thread_t thread;
    bool thread_started;
    int port;
    bool auth;
    char token[65];
    struct dt_wire_limits lim;
    size_t max_total_bytes;
    size_t max_reply;
    uint64_t handshake_ms, request_ms;
    double liveness_s;                  /* dt_coord_config.member_liveness_s */
    uint64_t silence_ms;                /* dt_coord_config.member_silence_s; 0: off */
    size_t conn_cap, preauth_cap;       /* in force now */
    unsigned cfg_conns, cfg_preauth;    /* from the configuration; 0: derived */
    bool accept_deferred;               /* a connection waits in the backlog for room */
    size_t in_bytes;                    /* request buffers of all connections */
    size_t out_bytes;                   /* replies handed to libuv, not yet written */
    struct dt_coord__conn *pa_head, *pa_tail;
    size_t npreauth;
    uint64_t peer_quiet_until;          /* coord_gate.c: no process scan before this */
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
    struct dt_coord__member *members; /* nnodes entries once the first agent joined; their lost_why
                                         and lost_s are read under hb_lock too */
    int64_t nnodes;  /* what the first JOIN said */
    int64_t nslots;  /* entries of members: nnodes, more once elastic JOINs took slots past it */
    bool stopping; /* dt_coord_stop is closing everything: members leaving is no news */
    unsigned long closes_logged;
    /* Under hb_lock too: read by dt_coord_refusals from the launcher's thread. */
    unsigned long refusals;
    char last_refusal[512];
    pthread_mutex_t hb_lock; /* the heartbeat table, the refusals, members' lost_why */
    struct dt_coord__heartbeat *hb;
    size_t hb_cap;
};

/* ---- coord_server.c ---- */

/* Sends what is in conn->out now (replies to other clients' events). */
void dt_coord__conn_flush(struct dt_coord__conn *conn);
/* Fails (closing reason in dt_error_last()) when a reply of `bytes` would
 * pass the reply limit; callers check before building a large one. */
int dt_coord__reply_fits(struct dt_coord__conn *conn, const char *op, size_t bytes);
/* Printable form of a key for log lines: at most 64 chars, non-printables as '?'. */
const char *dt_coord__key_str(const uint8_t *key, size_t len, char buf[80]);

/* ---- coord_gate.c ---- */

/* Whether a request starting with `op` goes to the gate: the handshake is
 * unfinished, or it is AUTH (checked again whenever it comes). */
bool dt_coord__gate_wants(const struct dt_coord__gate *g, uint8_t op);
/* One handshake request from buf[0..len), under the pre-authentication
 * limits, resuming at *pg.  `token` is the job token, NULL for auth: none.
 * Returns 0 with *used and *reply (a byte to answer with, or -1),
 * DT_WIRE_INCOMPLETE, or negative to close with dt_error_last() saying why:
 * DT_EAUTH is a refusal for lack of the token (*reply is DT_WIRE_REFUSED
 * for a wrong one), anything else a client that does not speak TCPStore.
 * Pure: no I/O, so tests/fuzz/fuzz_coord_preauth.c can drive it. */
int dt_coord__gate_step(struct dt_coord__gate *g, const char *token, const uint8_t *buf, size_t len,
                        struct dt_wire_progress *pg, size_t *used, int *reply);
/* Counts a refusal (dt_coord_refusals) when the client is a process of
 * this job; logs nothing (the close does). */
void dt_coord__refusal(struct dt_coord__conn *conn, const char *why);

/* ---- coord_store.c ---- */

int dt_coord__store_init(struct dt_coord *c);
/* Frees the table, the queues and the MULTI_GET cache. */
void dt_coord__store_free(struct dt_coord *c);
/* The connection is closing: the MULTI_GET answer it made is dropped. */
void dt_coord__store_conn_gone(struct dt_coord__conn *conn);
/* FNV-1a over a key's bytes, for the table and the queues. */
uint64_t dt_coord__hash(const uint8_t *p, size_t n);
/* Answers one client WAITing on the key (a queue item arrived). */
void dt_coord__wake_one(struct dt_coord *c, const uint8_t *key, size_t klen);

/* ---- coord_queue.c ---- */

/* A key whose queue holds an item counts as present for CHECK and WAIT. */
bool dt_coord__queue_nonempty(struct dt_coord *c, const uint8_t *key, size_t klen);
int dt_coord__queue_push(struct dt_coord *c, const struct dt_wire_bytes *key,
                         const struct dt_wire_bytes *val);
/* Answers the length before the pop, then the front item if there was one. */
void dt_coord__queue_pop(struct dt_coord__conn *conn, const struct dt_wire_bytes *key);
void dt_coord__queue_len(struct dt_coord__conn *conn, const struct dt_wire_bytes *key);
void dt_coord__queue_free_all(struct dt_coord *c);
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
/* The connection closed (reason: conn_close's, NULL at end of stream): a
 * member that had not left is lost, and why is kept (dt_coord_member_lost). */
void dt_coord__member_lost(struct dt_coord__conn *conn, const char *reason);
void dt_coord__member_list(struct dt_coord__conn *conn);
/* Frees the barriers, the members and the heartbeat table. */
void dt_coord__rendezvous_free(struct dt_coord *c);

#endif
