/* coordinator_wait.c - clients blocked in WAIT until their keys exist.
 *
 * A WAIT names keys; the reply (one STOP_WAITING byte) goes out when the
 * last missing one appears.  Each missing key gets a wait_node on both the
 * key's list and the client's list, so a key appearing wakes its waiters in
 * O(waiters) and a client leaving (CANCEL_WAIT, timeout, disconnect) drops
 * its nodes in O(its keys).  One WAIT per client at a time: PyTorch's client
 * blocks on the reply, so a second one is a protocol error.
 *
 * Not for the key table (coordinator_kv.c).
 */
#include "launcher/coordinator_internal.h"

#include "base/error.h"

#include <stdlib.h>

static void unlink_node(struct dt_coord *c, struct wait_node *n)
{
    struct kv_entry *e = n->entry;
    if (!e) /* its key already appeared and emptied its list */
        return;
    if (n->prev)
        n->prev->next = n->next;
    else
        e->waiters = n->next;
    if (n->next)
        n->next->prev = n->prev;
    if (!e->present && !e->waiters)
        kv_remove(&c->kv, e);
}

void wait_cancel(struct coord_conn *conn)
{
    struct wait_node *n = conn->wait_nodes;
    while (n) {
        struct wait_node *next = n->conn_next;
        unlink_node(conn->coord, n);
        free(n);
        n = next;
    }
    conn->wait_nodes = NULL;
    conn->waits_left = 0;
    conn->waiting = false;
}

static int add_node(struct coord_conn *conn, const struct dt_wire_bytes *k)
{
    /* A key whose queue holds an item counts as present (a blocking pop). */
    if (queue_nonempty(conn->coord, k->p, k->len))
        return 0;
    struct kv_entry *e;
    int rc = kv_lookup_or_add(conn->coord, k->p, k->len, &e);
    if (rc)
        return rc;
    if (e->present)
        return 0;
    /* The same key twice in one WAIT counts once. */
    for (struct wait_node *m = e->waiters; m; m = m->next)
        if (m->conn == conn)
            return 0;
    struct wait_node *n = calloc(1, sizeof *n);
    if (!n) {
        if (!e->waiters)
            kv_remove(&conn->coord->kv, e);
        return dt_error_set(DT_ENOMEM, "coordinator: out of memory for a waiter");
    }
    n->entry = e;
    n->conn = conn;
    n->next = e->waiters;
    if (e->waiters)
        e->waiters->prev = n;
    e->waiters = n;
    n->conn_next = conn->wait_nodes;
    conn->wait_nodes = n;
    conn->waits_left++;
    return 0;
}

int wait_register(struct coord_conn *conn, const struct dt_wire_request *r, bool *ready)
{
    if (conn->waiting)
        return dt_error_set(DT_EPROTO, "WAIT while its previous WAIT is still pending");
    size_t pos = 0;
    struct dt_wire_bytes k;
    while (dt_wire_list_next(r, &pos, &k)) {
        int rc = add_node(conn, &k);
        if (rc) {
            wait_cancel(conn);
            return rc;
        }
    }
    *ready = conn->waits_left == 0;
    conn->waiting = !*ready;
    return 0;
}

/* PyTorch wakes one waiter per pushed item, so two blocked pops do not race
 * for one item: the first waiter in the list is answered; a waiter still
 * missing other keys counts this one as there and the next is tried. */
void wait_wake_one(struct dt_coord *c, struct kv_entry *e)
{
    while (e->waiters) {
        struct wait_node *n = e->waiters;
        e->waiters = n->next;
        if (e->waiters)
            e->waiters->prev = NULL;
        n->entry = NULL;
        struct coord_conn *conn = n->conn;
        if (--conn->waits_left == 0) {
            wait_cancel(conn);
            dt_wire_put_u8(&conn->out, DT_WIRE_STOP_WAITING);
            if (!conn->in_read)
                coord_conn_flush(conn);
            break;
        }
    }
    if (!e->present && !e->waiters)
        kv_remove(&c->kv, e);
}

/* The nodes stay linked from the client's list until that WAIT completes;
 * only the key's list is emptied here. */
void wait_key_present(struct dt_coord *c, struct kv_entry *e)
{
    struct wait_node *n = e->waiters;
    e->waiters = NULL;
    while (n) {
        struct wait_node *next = n->next;
        struct coord_conn *conn = n->conn;
        n->entry = NULL;
        if (--conn->waits_left == 0) {
            wait_cancel(conn);
            dt_wire_put_u8(&conn->out, DT_WIRE_STOP_WAITING);
            if (!conn->in_read)
                coord_conn_flush(conn);
        }
        n = next;
    }
    (void)c;
}
