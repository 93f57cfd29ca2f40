/* coordinator_internal.h - what the coordinator's files share; not a public API.
 *
 * The coordinator is split by purpose: coordinator.c (start/stop, the loop
 * thread, the job token), coordinator_conn.c (connections, reading, framing,
 * writing, closing), coordinator_ops.c (one request -> its effect and reply,
 * the auth gate), coordinator_kv.c (the key-value table, memory accounting),
 * coordinator_wait.c (clients blocked in WAIT), coordinator_barrier.c
 * (barriers and heartbeats), coordinator_queue.c (PyTorch's queues),
 * coordinator_members.c (agent membership).
 *
 * Everything here runs on the loop thread, except the heartbeat table, which
 * dt_coord_heartbeat() reads from other threads under hb_lock.
 */
#ifndef DT_COORDINATOR_INTERNAL_H
#define DT_COORDINATOR_INTERNAL_H

#include "comm/store_wire.h"
#include "launcher/coordinator.h"

#include <pthread.h>
#include <stdbool.h>
#include <uv.h>

struct coord_conn;

/* One key.  An entry that is not `present` exists only to hold the clients
 * waiting for it; it is removed when the last of them leaves. */
struct kv_entry {
    struct kv_entry *next;       /* hash chain */
    uint64_t hash;
    bool present;
    size_t klen;
    uint8_t *val;
    size_t vlen;
    struct wait_node *waiters;   /* doubly linked through prev/next */
    uint8_t key[];               /* in the entry: one cache miss less per lookup */
};

/* A client waiting for one key; it sits both on the key's list and on the
 * client's own list, so either side can drop it in O(1). */
struct wait_node {
    struct wait_node *prev, *next;
    struct wait_node *conn_next;
    struct kv_entry *entry;
    struct coord_conn *conn;
};

struct kv_table {
    struct kv_entry **slots;
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
struct mget_cache {
    uint8_t *keys;
    size_t keys_len;
    uint8_t *reply;
    size_t reply_len;
    uint64_t generation;
    bool valid;
};

struct coord_barrier {
    struct coord_barrier *next;
    uint8_t *name;
    size_t nlen;
    int64_t world;
    size_t n;
    size_t cap;
    struct coord_conn **waiters;
};

/* PyTorch's queues (QUEUE_PUSH/POP/LEN): a key space apart from the
 * key-value table; an empty queue is removed. */
struct coord_queue_item {
    struct coord_queue_item *next;
    size_t len;
    uint8_t data[];
};

struct coord_queue {
    struct coord_queue *next; /* hash chain */
    uint64_t hash;
    size_t klen;
    size_t n;
    struct coord_queue_item *head, *tail;
    uint8_t key[];
};

#define COORD_QUEUE_SLOTS 256

/* One agent of the job, by node rank. */
struct coord_member {
    uint8_t state; /* 0 never joined, else DT_WIRE_MEMBER_* */
    int64_t nproc, pid;
    char host[256];
    struct coord_conn *conn; /* while joined */
};

struct coord_heartbeat {
    int64_t step;
    double when_s;
    bool seen;
};

struct coord_conn {
    uv_tcp_t tcp;
    struct dt_coord *coord;
    struct coord_conn *prev, *next;
    char peer[64];
    uint8_t *rbuf;               /* an incomplete request's bytes (NULL when none) */
    size_t rlen, rcap;
    struct dt_wire_buf out;      /* replies gathered while a read is processed */
    bool validated, authed, closing, in_read;
    size_t waits_left;           /* keys of the pending WAIT still missing */
    bool waiting;
    struct wait_node *wait_nodes;
    struct coord_barrier *barrier;
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
    struct kv_table kv;
    struct mget_cache mget;
    struct coord_conn *conns;
    size_t nconns;
    struct coord_barrier *barriers;
    struct coord_queue *queues[COORD_QUEUE_SLOTS];
    struct coord_member *members; /* nnodes entries once the first agent joined */
    int64_t nnodes;
    bool stopping; /* dt_coord_stop is closing everything: members leaving is no news */
    unsigned long closes_logged;
    /* Under hb_lock too: read by dt_coord_refusals from the launcher's thread. */
    unsigned long refusals;
    char last_refusal[512];
    pthread_mutex_t hb_lock;
    struct coord_heartbeat *hb;
    size_t hb_cap;
};

/* coordinator_conn.c */
int coord_conn_accept(struct dt_coord *c);
/* Logs why (unless reason is NULL), drops its waits and barrier, closes. */
void coord_conn_close(struct coord_conn *conn, const char *reason);
/* Sends what is in conn->out now (replies to other clients' events). */
void coord_conn_flush(struct coord_conn *conn);
void coord_close_all(struct dt_coord *c);

/* coordinator_ops.c: 0, or negative with dt_error_last() saying why the
 * connection must close. */
int coord_handle(struct coord_conn *conn, const struct dt_wire_request *r);

/* coordinator_kv.c */
uint64_t kv_hash(const uint8_t *p, size_t n); /* FNV-1a */
int kv_init(struct kv_table *t);
void kv_free(struct kv_table *t);
struct kv_entry *kv_find(struct kv_table *t, const uint8_t *key, size_t klen);
/* Finds or makes the entry (not present when made). */
int kv_lookup_or_add(struct dt_coord *c, const uint8_t *key, size_t klen, struct kv_entry **out);
/* Replaces the value (making the key present); checks the memory limit. */
int kv_put(struct dt_coord *c, struct kv_entry *e, const uint8_t *val, size_t vlen);
int kv_append(struct dt_coord *c, struct kv_entry *e, const uint8_t *val, size_t vlen);
/* Removes an entry with no waiters. */
void kv_remove(struct kv_table *t, struct kv_entry *e);

/* coordinator_wait.c */
/* Registers conn for the missing keys of a WAIT; *ready when none is missing. */
int wait_register(struct coord_conn *conn, const struct dt_wire_request *r, bool *ready);
/* A key became present: answers every client that has nothing left to wait for. */
void wait_key_present(struct dt_coord *c, struct kv_entry *e);
void wait_cancel(struct coord_conn *conn);

/* coordinator_barrier.c */
int barrier_enter(struct coord_conn *conn, const struct dt_wire_request *r);
void barrier_leave(struct coord_conn *conn);
void barrier_free_all(struct dt_coord *c);
int heartbeat_record(struct dt_coord *c, int64_t rank, int64_t step);
/* Counts a client turned away for lack of the token (see dt_coord_refusals). */
void refusal_record(struct dt_coord *c, const char *why);

/* coordinator_queue.c */
int queue_push(struct dt_coord *c, const struct dt_wire_bytes *key, const struct dt_wire_bytes *val);
int queue_pop(struct coord_conn *conn, const struct dt_wire_bytes *key);
void queue_len(struct coord_conn *conn, const struct dt_wire_bytes *key);
bool queue_nonempty(struct dt_coord *c, const uint8_t *key, size_t klen);
void queue_free_all(struct dt_coord *c);

/* coordinator_wait.c: a queue got an item; answers one waiter of that key. */
void wait_wake_one(struct dt_coord *c, struct kv_entry *e);

/* coordinator_members.c */
int member_join(struct coord_conn *conn, const struct dt_wire_request *r);
void member_leave(struct coord_conn *conn);
/* The connection closed: a member that had not left is lost. */
void member_lost(struct coord_conn *conn);
void member_list(struct coord_conn *conn);
void member_free_all(struct dt_coord *c);

/* Printable form of a key for log lines: at most 64 chars, non-printables as '?'. */
const char *coord_key_str(const uint8_t *key, size_t len, char buf[80]);

#endif
