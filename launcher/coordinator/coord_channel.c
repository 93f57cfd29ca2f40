/* coord_channel.c - channels: the connections of a node's ranks, carried
 * over the one connection the node's store endpoint holds to the coordinator
 * (launcher/agent/agent_endpoint.c; the frames are in comm/store_wire.h).
 *
 * Why: the ranks of a PyTorch script cannot present the job token, so each
 * node's agent serves them a local endpoint that admits only processes of the
 * job, and forwards what they send over a connection that presented the token.
 * On that connection each rank's connection is a channel: a struct
 * dt_coord__conn without a socket, so everything a connection holds on the
 * coordinator (a pending WAIT, a barrier, the MULTI_GET cache's owner) is
 * held per rank exactly as for a direct client, and a WAIT's STOP_WAITING
 * comes back when its keys appear, never polled.  Its replies are wrapped in
 * DATA frames in the parent connection's output, so the replies of a node's
 * ranks woken by one SET leave in one write.  The coordinator holds one
 * connection per node instead of one per rank.
 *
 * A channel inherits its parent's token; its first request must still be
 * VALIDATE (the gate checks it, and an AUTH, as for a socket).  A request
 * that a socket's connection would be closed for ends the channel (an ENDED
 * frame saying why, and a log line), not the parent.  Agents' requests
 * (JOIN, LEAVE, MEMBERS) and channels inside a channel are refused.
 *
 * Not for sockets (coord_server.c) nor for what requests do (coord_store.c).
 */
#include "launcher/coordinator/coordinator_internal.h"

#include "base/error.h"
#include "base/log.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A slot whose channel the coordinator ended: DATA to it is dropped until
 * the endpoint's CHANNEL_CLOSE frees the id. */
static struct dt_coord__conn ended_slot;
#define ENDED (&ended_slot)

/* A channel's reply buffer larger than this is freed once forwarded. */
#define IDLE_KEEP ((size_t)4 << 10)

static void put_frame(struct dt_coord__conn *parent, uint32_t chan, uint8_t kind, const void *p, size_t len)
{
    dt_wire_put_chan_header(&parent->out, chan, kind, len);
    dt_wire_put_raw(&parent->out, p, len);
}

static void parent_flush(struct dt_coord__conn *parent)
{
    if (!parent->in_read)
        dt_coord__conn_flush(parent);
}

void dt_coord__channel_flush(struct dt_coord__conn *ch)
{
    struct dt_wire_buf *o = &ch->out;
    if (ch->closing || o->len == 0)
        return;
    struct dt_coord__conn *parent = ch->chan_parent;
    if (o->failed) {
        dt_coord__channel_end(ch, "out of memory for a reply");
        return;
    }
    put_frame(parent, ch->chan_id, DT_WIRE_CHAN_DATA, o->p, o->len);
    o->len = 0;
    if (o->cap > IDLE_KEEP)
        dt_wire_buf_free(o);
    parent_flush(parent);
}

/* What a socket's close undoes (coord_server.c's conn_close), for a channel. */
static void channel_free(struct dt_coord__conn *ch)
{
    dt_coord__wait_cancel(ch);
    dt_coord__barrier_leave(ch);
    dt_coord__store_conn_gone(ch);
    dt_wire_buf_free(&ch->out);
    free(ch);
}

void dt_coord__channel_end(struct dt_coord__conn *ch, const char *why)
{
    if (ch->closing)
        return;
    ch->closing = true;
    struct dt_coord__conn *parent = ch->chan_parent;
    dt_log_warn("coordinator: closed the connection of %s: %s", ch->peer, why);
    /* Answers to the requests before the bad one still go out, then why. */
    if (ch->out.len && !ch->out.failed)
        put_frame(parent, ch->chan_id, DT_WIRE_CHAN_DATA, ch->out.p, ch->out.len);
    put_frame(parent, ch->chan_id, DT_WIRE_CHAN_ENDED, why, strlen(why));
    parent->chans[ch->chan_id] = ENDED;
    channel_free(ch);
    parent_flush(parent);
}

void dt_coord__channels_close(struct dt_coord__conn *parent)
{
    for (uint32_t i = 0; i < parent->nchans_cap; i++)
        if (parent->chans[i] && parent->chans[i] != ENDED)
            channel_free(parent->chans[i]);
    free(parent->chans);
    parent->chans = NULL;
    parent->nchans_cap = 0;
}

static int slot_for(struct dt_coord__conn *parent, uint32_t id)
{
    if (id >= DT_COORD__CHANNELS)
        return dt_error_set(DT_EPROTO, "channel %" PRIu32 " is past the %u channels of a connection", id,
                            DT_COORD__CHANNELS);
    if (id < parent->nchans_cap)
        return 0;
    uint32_t cap = parent->nchans_cap ? parent->nchans_cap : 16;
    while (cap <= id)
        cap *= 2;
    struct dt_coord__conn **p = realloc(parent->chans, cap * sizeof *p);
    if (!p)
        return dt_error_set(DT_ENOMEM, "coordinator: out of memory for channels");
    memset(p + parent->nchans_cap, 0, (cap - parent->nchans_cap) * sizeof *p);
    parent->chans = p;
    parent->nchans_cap = cap;
    return 0;
}

/* Printable, without quotes: the endpoint names the rank's process. */
static void name_of(const struct dt_wire_bytes *b, char *out, size_t n)
{
    size_t k = b->len < n - 1 ? b->len : n - 1;
    for (size_t i = 0; i < k; i++)
        out[i] = b->p[i] >= 0x20 && b->p[i] < 0x7f ? (char)b->p[i] : '?';
    out[k] = 0;
}

static int channel_open(struct dt_coord__conn *parent, const struct dt_wire_request *r)
{
    int rc = slot_for(parent, r->u32);
    if (rc)
        return rc;
    if (parent->chans[r->u32])
        return dt_error_set(DT_EPROTO, "CHANNEL_OPEN of channel %" PRIu32 ", which is open", r->u32);
    struct dt_coord__conn *ch = calloc(1, sizeof *ch);
    if (!ch)
        return dt_error_set(DT_ENOMEM, "coordinator: out of memory for a channel");
    ch->coord = parent->coord;
    ch->chan_parent = parent;
    ch->chan_id = r->u32;
    ch->member = -1;
    ch->gate.authed = true; /* its parent presented the token */
    char name[96];
    name_of(&r->key, name, sizeof name);
    snprintf(ch->peer, sizeof ch->peer, "%.60s via %.60s", name, parent->peer);
    dt_wire_buf_init(&ch->out);
    parent->chans[r->u32] = ch;
    parent->chan_mode = true;
    return 0;
}

static int channel_close(struct dt_coord__conn *parent, const struct dt_wire_request *r)
{
    if (r->u32 >= parent->nchans_cap || !parent->chans[r->u32])
        return dt_error_set(DT_EPROTO, "CHANNEL_CLOSE of channel %" PRIu32 ", which is not open", r->u32);
    struct dt_coord__conn *ch = parent->chans[r->u32];
    parent->chans[r->u32] = NULL;
    if (ch != ENDED)
        channel_free(ch);
    put_frame(parent, r->u32, DT_WIRE_CHAN_CLOSED, NULL, 0);
    return 0;
}

/* One request of the channel, as coord_server.c serves a socket's: the
 * gate's while the handshake is unfinished, the store's after. */
static int serve(struct dt_coord__conn *ch, const struct dt_wire_bytes *req)
{
    struct dt_coord *c = ch->coord;
    size_t used = 0;
    int rc;
    if (req->len == 0)
        return dt_error_set(DT_EPROTO, "an empty request");
    uint8_t op = req->p[0];
    if (op == DT_WIRE_JOIN || op == DT_WIRE_LEAVE || op == DT_WIRE_MEMBERS || dt_wire_op_channel(op))
        return dt_error_set(DT_EPROTO, "%s through a node's store endpoint (only an agent's own connection may send it)",
                            dt_wire_op_name(op));
    struct dt_wire_progress pg = {0};
    if (dt_coord__gate_wants(&ch->gate, op)) {
        int reply;
        rc = dt_coord__gate_step(&ch->gate, c->auth ? c->token : NULL, req->p, req->len, &pg, &used, &reply);
        if (reply >= 0)
            dt_wire_put_u8(&ch->out, (uint8_t)reply);
    } else {
        struct dt_wire_request inner;
        rc = dt_wire_decode_step(req->p, req->len, &c->lim, &pg, &inner);
        if (rc == 0) {
            used = inner.frame_len;
            rc = dt_coord__handle(ch, &inner);
        }
    }
    if (rc == DT_WIRE_INCOMPLETE || (rc == 0 && used != req->len))
        return dt_error_set(DT_EPROTO, "a CHANNEL frame that is not one whole %s request", dt_wire_op_name(op));
    return rc;
}

static int channel_data(struct dt_coord__conn *parent, const struct dt_wire_request *r)
{
    struct dt_coord__conn *ch = r->u32 < parent->nchans_cap ? parent->chans[r->u32] : NULL;
    if (ch == ENDED)
        return 0;
    if (!ch)
        return dt_error_set(DT_EPROTO, "CHANNEL for channel %" PRIu32 ", which is not open", r->u32);
    ch->in_read = true;
    int rc = serve(ch, &r->v1);
    ch->in_read = false;
    if (rc < 0) {
        char why[1100];
        snprintf(why, sizeof why, "%s", dt_error_last());
        dt_coord__channel_end(ch, why);
        return 0;
    }
    dt_coord__channel_flush(ch);
    return 0;
}

int dt_coord__channel_request(struct dt_coord__conn *conn, const struct dt_wire_request *r)
{
    if (conn->chan_parent)
        return dt_error_set(DT_EPROTO, "%s inside a channel", dt_wire_op_name(r->op));
    switch (r->op) {
    case DT_WIRE_CHANNEL_OPEN:
        return channel_open(conn, r);
    case DT_WIRE_CHANNEL_CLOSE:
        return channel_close(conn, r);
    default:
        return channel_data(conn, r);
    }
}
