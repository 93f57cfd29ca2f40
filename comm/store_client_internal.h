/* store_client_internal.h - what the store client's files share; not public.
 *
 * store_client.c owns the socket (connect with retries, the handshake,
 * sending and receiving under a deadline, error messages);
 * store_client_ops.c (TCPStore operations, queues, barrier, heartbeat) and
 * store_client_members.c (agent membership) build each operation from those.
 * The bytes are store_wire.h's, shared with the coordinator.
 */
#ifndef DT_STORE_CLIENT_INTERNAL_H
#define DT_STORE_CLIENT_INTERNAL_H

#include "comm/store.h"
#include "comm/store_wire.h"

struct dt_store {
    int fd;                 /* -1 after a failure: the next operation reconnects */
    char host[256];
    int port;
    char peer[300];         /* "host:port" */
    char *token;
    double timeout_s;
    double liveness_s;      /* dt_store_set_liveness: applied to every connection; 0: the kernel's */
    double op_timeout_s;    /* the deadline of the operation under way, for messages */
    bool keep_on_timeout;   /* WAIT cancels instead of dropping the connection */
    struct dt_wire_buf req; /* the request being built */
    const char *op;         /* for messages: the operation under way... */
    char what[128];         /* ...and " for key 'x'" or "" */
};

/* Begins a request: makes sure the connection is up, clears the request
 * buffer, puts the op byte and notes op/key for messages. */
int dt_store__begin(struct dt_store *s, uint8_t op, const char *key, int nkeys);

/* Sends the built request. */
int dt_store__send(struct dt_store *s, double deadline);

/* Receives exactly n bytes before the deadline (absolute, dt_clock_s()). */
int dt_store__recv(struct dt_store *s, void *buf, size_t n, double deadline);
/* A reply's int64 (8 bytes, little-endian on the wire). */
int dt_store__recv_i64(struct dt_store *s, int64_t *v, double deadline);

/* Receives a string: len:u64 then bytes, malloc'd with a NUL after them. */
int dt_store__recv_bytes(struct dt_store *s, void **out, size_t *len, double deadline);

/* Drops the connection after a failure (the reply stream is out of step). */
void dt_store__drop(struct dt_store *s);

#endif
