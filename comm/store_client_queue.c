/* store_client_queue.c - the client side of PyTorch's store queues (store.h).
 *
 * The same requests PyTorch's TCPStore client sends (TCPStore.cpp, 2.6+):
 * QUEUE_PUSH answers nothing; a blocking pop is a WAIT on the key (which the
 * coordinator counts as present while its queue has an item), then
 * QUEUE_POP, answered by the length before the pop and, when that was not
 * zero, the item.
 *
 * Not for the key-value operations (store_client_ops.c).
 */
#include "comm/store_client_internal.h"

#include "base/error.h"
#include "base/clock.h"

#include <stdlib.h>
#include <string.h>

#define P DT_STORE_KEY_PREFIX

int dt_store_queue_push(struct dt_store *s, const char *key, const void *value, size_t len)
{
    int rc = dt_store_begin(s, DT_WIRE_QUEUE_PUSH, key, 1);
    if (rc)
        return rc;
    dt_wire_put_key(&s->req, P, key, strlen(key));
    dt_wire_put_bytes(&s->req, value, len);
    return dt_store_send(s, dt_clock_s() + s->timeout_s);
}

/* QUEUE_POP and QUEUE_LEN: op, key; both answer an i64 first. */
static int send_key_get_i64(struct dt_store *s, uint8_t op, const char *key, int64_t *n, double deadline)
{
    int rc = dt_store_begin(s, op, key, 1);
    if (rc)
        return rc;
    dt_wire_put_key(&s->req, P, key, strlen(key));
    rc = dt_store_send(s, deadline);
    if (rc == 0)
        rc = dt_store_recv_i64(s, n, deadline);
    if (rc == 0 && *n < 0) {
        dt_store_drop(s);
        return dt_error_set(DT_EPROTO, "coordinator %s answered %s for key '%s' with length %lld", s->peer,
                            dt_wire_op_name(op), key, (long long)*n);
    }
    return rc;
}

int dt_store_queue_pop(struct dt_store *s, const char *key, bool block, void **value, size_t *len)
{
    *value = NULL;
    *len = 0;
    if (block) {
        int rc = dt_store_wait(s, &key, 1, s->timeout_s);
        if (rc)
            return rc;
    }
    double deadline = dt_clock_s() + s->timeout_s;
    int64_t n = 0;
    int rc = send_key_get_i64(s, DT_WIRE_QUEUE_POP, key, &n, deadline);
    if (rc)
        return rc;
    if (n == 0)
        return dt_error_set(DT_ENOTFOUND, "coordinator %s: queue '%s' is empty", s->peer, key);
    return dt_store_recv_bytes(s, value, len, deadline);
}

int dt_store_queue_len(struct dt_store *s, const char *key, int64_t *n)
{
    return send_key_get_i64(s, DT_WIRE_QUEUE_LEN, key, n, dt_clock_s() + s->timeout_s);
}
