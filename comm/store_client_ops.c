/* store_client_ops.c - the store operations of store.h, one request each:
 * PyTorch's TCPStore operations and queues, and dtrain's barrier and
 * heartbeat (agent membership is in store_client_members.c).
 *
 * GET and MULTI_GET send a WAIT first, as PyTorch's client does, since the
 * server answers an absent key with an empty value.  A WAIT that times out
 * is cancelled the PyTorch way: CANCEL_WAIT, then read up to the
 * WAIT_CANCELED byte (a STOP_WAITING may arrive first if the key appeared
 * meanwhile), so the connection stays usable.  A BARRIER that times out
 * drops the connection instead; the coordinator then stops counting it.
 *
 * Not for sockets (store_client.c) or encoding (store_wire.c).
 */
#include "comm/store_client_internal.h"

#include "base/error.h"
#include "base/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* PyTorch's TCPStore client puts this in front of every user key; dtrain's
 * client does the same so both see one key space on one coordinator. */
#define P "/"

/* ---- TCPStore operations ---- */

static int put_keys(struct dt_store *s, const char *const *keys, int n)
{
    if (n < 0)
        return dt_error_set(DT_EINVAL, "store: negative key count");
    dt_wire_put_u64(&s->req, (uint64_t)n);
    for (int i = 0; i < n; i++)
        dt_wire_put_key(&s->req, P, keys[i], strlen(keys[i]));
    return 0;
}

static int recv_u8(struct dt_store *s, uint8_t *v, double deadline)
{
    return dt_store__recv(s, v, 1, deadline);
}

/* SET, APPEND and QUEUE_PUSH share one request shape: op, key, value; none has
 * a reply. */
static int send_key_value(struct dt_store *s, uint8_t op, const char *key, const void *value, size_t len)
{
    int rc = dt_store__begin(s, op, key, 1);
    if (rc)
        return rc;
    dt_wire_put_key(&s->req, P, key, strlen(key));
    dt_wire_put_bytes(&s->req, value, len);
    return dt_store__send(s, dt_clock_s() + s->timeout_s);
}

int dt_store_set(struct dt_store *s, const char *key, const void *value, size_t len)
{
    return send_key_value(s, DT_WIRE_SET, key, value, len);
}

/* Cancels a timed-out WAIT and leaves the connection in step. */
static int cancel_wait(struct dt_store *s)
{
    s->req.len = 0;
    dt_wire_put_u8(&s->req, DT_WIRE_CANCEL_WAIT);
    double deadline = dt_clock_s() + (s->timeout_s < 10 ? s->timeout_s : 10);
    int rc = dt_store__send(s, deadline);
    uint8_t b = DT_WIRE_STOP_WAITING;
    while (rc == 0 && b == DT_WIRE_STOP_WAITING)
        rc = recv_u8(s, &b, deadline);
    if (rc == 0 && b != DT_WIRE_WAIT_CANCELED) {
        dt_store__drop(s);
        rc = dt_error_set(DT_EPROTO, "coordinator %s answered CANCEL_WAIT with %u", s->peer, b);
    }
    return rc;
}

static int do_wait(struct dt_store *s, const char *const *keys, int n, double timeout_s)
{
    int rc = dt_store__begin(s, DT_WIRE_WAIT, n > 0 ? keys[0] : NULL, n);
    if (rc || (rc = put_keys(s, keys, n)) != 0)
        return rc;
    s->op_timeout_s = timeout_s;
    double deadline = dt_clock_s() + timeout_s;
    if ((rc = dt_store__send(s, deadline)) != 0)
        return rc;
    uint8_t b;
    /* A WAIT timeout is routine enough (check-then-wait loops) to be worth
     * keeping the connection: cancel rather than drop. */
    s->keep_on_timeout = true;
    rc = recv_u8(s, &b, deadline);
    s->keep_on_timeout = false;
    if (rc == DT_ETIMEDOUT) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s (the key was not set)", dt_error_last());
        if (cancel_wait(s) != 0)
            dt_store__drop(s);
        return dt_error_set(DT_ETIMEDOUT, "%s", msg);
    }
    if (rc == 0 && b != DT_WIRE_STOP_WAITING) {
        dt_store__drop(s);
        return dt_error_set(DT_EPROTO, "coordinator %s answered WAIT with %u", s->peer, b);
    }
    return rc;
}

int dt_store_wait(struct dt_store *s, const char *const *keys, int n, double timeout_s)
{
    return do_wait(s, keys, n, timeout_s > 0 ? timeout_s : s->timeout_s);
}

int dt_store_get(struct dt_store *s, const char *key, void **value, size_t *len)
{
    *value = NULL;
    *len = 0;
    int rc = do_wait(s, &key, 1, s->timeout_s);
    if (rc == 0)
        rc = dt_store__begin(s, DT_WIRE_GET, key, 1);
    if (rc)
        return rc;
    dt_wire_put_key(&s->req, P, key, strlen(key));
    double deadline = dt_clock_s() + s->timeout_s;
    rc = dt_store__send(s, deadline);
    return rc ? rc : dt_store__recv_bytes(s, value, len, deadline);
}

int dt_store_add(struct dt_store *s, const char *key, int64_t delta, int64_t *result)
{
    int rc = dt_store__begin(s, DT_WIRE_ADD, key, 1);
    if (rc)
        return rc;
    dt_wire_put_key(&s->req, P, key, strlen(key));
    dt_wire_put_i64(&s->req, delta);
    double deadline = dt_clock_s() + s->timeout_s;
    int64_t v = 0;
    rc = dt_store__send(s, deadline);
    if (rc == 0)
        rc = dt_store__recv_i64(s, &v, deadline);
    if (rc == 0 && result)
        *result = v;
    return rc;
}

int dt_store_compare_set(struct dt_store *s, const char *key, const void *expected, size_t expected_len,
                         const void *desired, size_t desired_len, void **current, size_t *current_len)
{
    *current = NULL;
    *current_len = 0;
    int rc = dt_store__begin(s, DT_WIRE_COMPARE_SET, key, 1);
    if (rc)
        return rc;
    dt_wire_put_key(&s->req, P, key, strlen(key));
    dt_wire_put_bytes(&s->req, expected, expected_len);
    dt_wire_put_bytes(&s->req, desired, desired_len);
    double deadline = dt_clock_s() + s->timeout_s;
    rc = dt_store__send(s, deadline);
    return rc ? rc : dt_store__recv_bytes(s, current, current_len, deadline);
}

int dt_store_check(struct dt_store *s, const char *const *keys, int n, bool *ready)
{
    int rc = dt_store__begin(s, DT_WIRE_CHECK, n > 0 ? keys[0] : NULL, n);
    if (rc || (rc = put_keys(s, keys, n)) != 0)
        return rc;
    double deadline = dt_clock_s() + s->timeout_s;
    uint8_t b = 0;
    rc = dt_store__send(s, deadline);
    if (rc == 0)
        rc = recv_u8(s, &b, deadline);
    if (rc == 0 && b != DT_WIRE_READY && b != DT_WIRE_NOT_READY) {
        dt_store__drop(s);
        return dt_error_set(DT_EPROTO, "coordinator %s answered CHECK with %u", s->peer, b);
    }
    *ready = b == DT_WIRE_READY;
    return rc;
}

int dt_store_delete_key(struct dt_store *s, const char *key, bool *deleted)
{
    int rc = dt_store__begin(s, DT_WIRE_DELETE_KEY, key, 1);
    if (rc)
        return rc;
    dt_wire_put_key(&s->req, P, key, strlen(key));
    double deadline = dt_clock_s() + s->timeout_s;
    int64_t n = 0;
    rc = dt_store__send(s, deadline);
    if (rc == 0)
        rc = dt_store__recv_i64(s, &n, deadline);
    if (deleted)
        *deleted = n == 1;
    return rc;
}

int dt_store_num_keys(struct dt_store *s, int64_t *n)
{
    int rc = dt_store__begin(s, DT_WIRE_GETNUMKEYS, NULL, 0);
    if (rc)
        return rc;
    double deadline = dt_clock_s() + s->timeout_s;
    rc = dt_store__send(s, deadline);
    return rc ? rc : dt_store__recv_i64(s, n, deadline);
}

int dt_store_append(struct dt_store *s, const char *key, const void *value, size_t len)
{
    return send_key_value(s, DT_WIRE_APPEND, key, value, len);
}

int dt_store_multi_get(struct dt_store *s, const char *const *keys, int n, void **values, size_t *lens)
{
    for (int i = 0; i < n; i++) {
        values[i] = NULL;
        lens[i] = 0;
    }
    int rc = do_wait(s, keys, n, s->timeout_s);
    if (rc == 0)
        rc = dt_store__begin(s, DT_WIRE_MULTI_GET, n > 0 ? keys[0] : NULL, n);
    if (rc || (rc = put_keys(s, keys, n)) != 0)
        return rc;
    double deadline = dt_clock_s() + s->timeout_s;
    rc = dt_store__send(s, deadline);
    for (int i = 0; rc == 0 && i < n; i++)
        rc = dt_store__recv_bytes(s, &values[i], &lens[i], deadline);
    if (rc) {
        for (int i = 0; i < n; i++) {
            free(values[i]);
            values[i] = NULL;
        }
    }
    return rc;
}

int dt_store_multi_set(struct dt_store *s, const char *const *keys, const void *const *values,
                       const size_t *lens, int n)
{
    int rc = dt_store__begin(s, DT_WIRE_MULTI_SET, n > 0 ? keys[0] : NULL, n);
    if (rc)
        return rc;
    if (n < 0)
        return dt_error_set(DT_EINVAL, "store: negative key count");
    dt_wire_put_u64(&s->req, (uint64_t)n);
    for (int i = 0; i < n; i++) {
        dt_wire_put_key(&s->req, P, keys[i], strlen(keys[i]));
        dt_wire_put_bytes(&s->req, values[i], lens[i]);
    }
    return dt_store__send(s, dt_clock_s() + s->timeout_s);
}

/* ---- PyTorch's queues ---- */

/* The same requests PyTorch's TCPStore client sends (TCPStore.cpp, 2.6+):
 * QUEUE_PUSH answers nothing; a blocking pop is a WAIT on the key (which the
 * coordinator counts as present while its queue has an item), then
 * QUEUE_POP, answered by the length before the pop and, when that was not
 * zero, the item. */

int dt_store_queue_push(struct dt_store *s, const char *key, const void *value, size_t len)
{
    return send_key_value(s, DT_WIRE_QUEUE_PUSH, key, value, len);
}

/* QUEUE_POP and QUEUE_LEN: op, key; both answer an i64 first. */
static int send_key_get_i64(struct dt_store *s, uint8_t op, const char *key, int64_t *n, double deadline)
{
    int rc = dt_store__begin(s, op, key, 1);
    if (rc)
        return rc;
    dt_wire_put_key(&s->req, P, key, strlen(key));
    rc = dt_store__send(s, deadline);
    if (rc == 0)
        rc = dt_store__recv_i64(s, n, deadline);
    if (rc == 0 && *n < 0) {
        dt_store__drop(s);
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
    return dt_store__recv_bytes(s, value, len, deadline);
}

int dt_store_queue_len(struct dt_store *s, const char *key, int64_t *n)
{
    return send_key_get_i64(s, DT_WIRE_QUEUE_LEN, key, n, dt_clock_s() + s->timeout_s);
}

/* ---- dtrain's additions ---- */

int dt_store_barrier(struct dt_store *s, const char *name, int world, double timeout_s)
{
    if (world < 1)
        return dt_error_set(DT_EINVAL, "store: barrier '%s' with world size %d", name, world);
    int rc = dt_store__begin(s, DT_WIRE_BARRIER, name, 1);
    if (rc)
        return rc;
    snprintf(s->what, sizeof s->what, " '%.80s' (%d ranks)", name, world);
    s->op_timeout_s = timeout_s > 0 ? timeout_s : s->timeout_s;
    dt_wire_put_bytes(&s->req, name, strlen(name));
    dt_wire_put_i64(&s->req, world);
    double deadline = dt_clock_s() + s->op_timeout_s;
    uint8_t b = 0;
    rc = dt_store__send(s, deadline);
    if (rc == 0)
        rc = recv_u8(s, &b, deadline);
    if (rc == 0 && b == DT_WIRE_WORLD_DIFFERS)
        return dt_error_set(DT_EINVAL, "barrier '%s': other ranks entered it with a different world "
                                       "size than %d", name, world);
    if (rc == 0 && b != DT_WIRE_OK) {
        dt_store__drop(s);
        return dt_error_set(DT_EPROTO, "coordinator %s answered BARRIER with %u", s->peer, b);
    }
    return rc;
}

int dt_store_heartbeat(struct dt_store *s, int rank, int64_t step)
{
    int rc = dt_store__begin(s, DT_WIRE_HEARTBEAT, NULL, 0);
    if (rc)
        return rc;
    dt_wire_put_i64(&s->req, rank);
    dt_wire_put_i64(&s->req, step);
    double deadline = dt_clock_s() + s->timeout_s;
    uint8_t b = 0;
    rc = dt_store__send(s, deadline);
    if (rc == 0)
        rc = recv_u8(s, &b, deadline);
    if (rc == 0 && b != DT_WIRE_OK) {
        dt_store__drop(s);
        return dt_error_set(DT_EPROTO, "coordinator %s answered HEARTBEAT with %u", s->peer, b);
    }
    return rc;
}
