/* store_wire.h - the one encoder/decoder of the store's wire protocol.
 *
 * The protocol is PyTorch's TCPStore protocol (torch/csrc/distributed/c10d/
 * TCPStoreBackend.hpp, TCPStore.cpp, TCPStoreLibUvBackend.cpp, PyTorch 2.x):
 *
 *   request  = op:u8 then the op's fields, no length prefix and no framing:
 *              a request ends where its last field ends.
 *   u32/i64  = little-endian (PyTorch writes native order; every platform it
 *              ships on is little-endian).
 *   string   = len:u64 then len bytes (keys and values alike).
 *   list     = count:u64 then count strings (CHECK, WAIT, MULTI_GET) or
 *              count (key, value) pairs (MULTI_SET).
 *
 *   op  name         fields                        reply
 *    0  VALIDATE     magic:u32 (0x3C85F7CE)        none; must be the first request
 *    1  SET          key, value                    none
 *    2  COMPARE_SET  key, expected, desired        value (string)
 *    3  GET          key                           value (string; empty if absent)
 *    4  ADD          key, delta:i64                new value:i64
 *    5  CHECK        list of keys                  u8: 0 READY, 1 NOT_READY
 *    6  WAIT         list of keys                  u8: 0 STOP_WAITING once all exist
 *    7  GETNUMKEYS   -                             i64
 *    8  DELETE_KEY   key                           i64 (number deleted, 0 or 1)
 *    9  APPEND       key, value                    none
 *   10  MULTI_GET    list of keys                  one string per key
 *   11  MULTI_SET    list of (key, value)          none
 *   12  CANCEL_WAIT  -                             u8: 1 WAIT_CANCELED
 *   13  PING         nonce:u32                     nonce:u32
 *   14  QUEUE_PUSH   key, value                    none; wakes one client WAITing on key
 *   15  QUEUE_POP    key                           len:i64 (before the pop), then the
 *                                                  front value (string) when len > 0
 *   16  QUEUE_LEN    key                           i64
 *   17  LIST_KEYS    -                             count:i64, then every key (string)
 *   18  STORE_BARRIER key, world:i64               u8: 0 STOP_WAITING once the counter kept
 *                                                  under key reaches world (PyTorch's
 *                                                  Store::barrier; torch 2.15 sends it)
 *   (queues are a key space of their own; CHECK and WAIT count a key whose
 *   queue is not empty as present, so a blocking pop is WAIT then POP)
 *
 * dtrain's additions sit at 0xD0 and up, far from PyTorch's range:
 *   0xD0 AUTH       token (string, 64 hex chars)   u8: 0 accepted, 1 refused (then closed)
 *   0xD1 BARRIER    name (string), world:i64       u8: 0 passed, 2 world differs
 *   0xD2 HEARTBEAT  rank:i64, step:i64             u8: 0
 *   0xD3 JOIN       node_rank:i64, nnodes:i64,     u8: 0 joined, 3 taken, 4 out of range,
 *                   nproc:i64, pid:i64, host       then a message (string, empty when 0)
 *   0xD4 LEAVE      -                              u8: 0
 *   0xD5 MEMBERS    -                              count:u64, then per member node_rank:i64,
 *                                                  nproc:i64, pid:i64, state:u8, host (string)
 *   A member is the connection that JOINed: closing it without LEAVE marks
 *   the member lost (state 3), LEAVE marks it left (2); joined is 1.
 *   JOIN with node_rank -2 (DT_WIRE_ANY_NODE: an elastic job's agent) is
 *   given a free slot, which the OK answer's message holds in decimal.
 *
 * Channels: a node's store endpoint (launcher/agent/agent_endpoint.c)
 * carries its ranks' connections over one connection of its own, which has
 * presented the token; each rank's connection is a channel, a connection of
 * its own on the coordinator (its WAITs, barrier, MULTI_GET cache):
 *   0xD6 CHANNEL_OPEN   chan:u32, name (string)    none
 *   0xD7 CHANNEL        chan:u32, request (string: none of its own: the request's
 *                       one whole TCPStore request) reply comes as a frame of the channel
 *   0xD8 CHANNEL_CLOSE  chan:u32                   a CLOSED frame of the channel
 * Once a connection opened a channel, every reply on it is a frame:
 *   chan:u32, kind:u8, bytes (string)
 *   kind 0 DATA    reply bytes of the channel's requests, in order; a reply
 *                  may span frames
 *   kind 1 CLOSED  the answer to CHANNEL_CLOSE: nothing of the channel
 *                  follows, and its id may be opened again
 *   kind 2 ENDED   the coordinator closed the channel (bytes: why); the
 *                  endpoint closes the rank's connection and still sends
 *                  CHANNEL_CLOSE, whose CLOSED frees the id
 *   and the connection may send only the three channel requests.
 *
 * Not for sockets: this file only turns bytes into requests and back.
 */
#ifndef DT_STORE_WIRE_H
#define DT_STORE_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DT_WIRE_MAGIC 0x3C85F7CEu

enum dt_wire_op {
    DT_WIRE_VALIDATE = 0,
    DT_WIRE_SET = 1,
    DT_WIRE_COMPARE_SET = 2,
    DT_WIRE_GET = 3,
    DT_WIRE_ADD = 4,
    DT_WIRE_CHECK = 5,
    DT_WIRE_WAIT = 6,
    DT_WIRE_GETNUMKEYS = 7,
    DT_WIRE_DELETE_KEY = 8,
    DT_WIRE_APPEND = 9,
    DT_WIRE_MULTI_GET = 10,
    DT_WIRE_MULTI_SET = 11,
    DT_WIRE_CANCEL_WAIT = 12,
    DT_WIRE_PING = 13,
    DT_WIRE_QUEUE_PUSH = 14,
    DT_WIRE_QUEUE_POP = 15,
    DT_WIRE_QUEUE_LEN = 16,
    DT_WIRE_LIST_KEYS = 17,
    DT_WIRE_STORE_BARRIER = 18,
    DT_WIRE_AUTH = 0xD0,
    DT_WIRE_BARRIER = 0xD1,
    DT_WIRE_HEARTBEAT = 0xD2,
    DT_WIRE_JOIN = 0xD3,
    DT_WIRE_LEAVE = 0xD4,
    DT_WIRE_MEMBERS = 0xD5,
    DT_WIRE_CHANNEL_OPEN = 0xD6,
    DT_WIRE_CHANNEL = 0xD7,
    DT_WIRE_CHANNEL_CLOSE = 0xD8,
};

enum { DT_WIRE_READY = 0, DT_WIRE_NOT_READY = 1 };
enum { DT_WIRE_STOP_WAITING = 0, DT_WIRE_WAIT_CANCELED = 1 };
enum { DT_WIRE_OK = 0, DT_WIRE_REFUSED = 1, DT_WIRE_WORLD_DIFFERS = 2, DT_WIRE_TAKEN = 3,
       DT_WIRE_OUT_OF_RANGE = 4 };
enum { DT_WIRE_MEMBER_JOINED = 1, DT_WIRE_MEMBER_LEFT = 2, DT_WIRE_MEMBER_LOST = 3 };
#define DT_WIRE_ANY_NODE (-2) /* JOIN's node_rank: the coordinator picks a slot (-1 stays out of range) */
enum { DT_WIRE_CHAN_DATA = 0, DT_WIRE_CHAN_CLOSED = 1, DT_WIRE_CHAN_ENDED = 2 };
#define DT_WIRE_CHAN_HEADER 13 /* chan:u32, kind:u8, len:u64 before a frame's bytes */

/* Limits the decoder enforces; a request over any of them is an error
 * (DT_ENOMEM, "limit"), never a partial read. */
struct dt_wire_limits {
    size_t max_frame_bytes;  /* one whole request */
    size_t max_key_bytes;    /* one key (or barrier name, token) */
    size_t max_value_bytes;  /* one value */
    uint64_t max_keys;       /* entries in one list */
};

/* PyTorch's libuv server: keys 8 KiB, values 8 MiB, 128 Ki keys per list. */
#define DT_WIRE_DEFAULT_MAX_KEY ((size_t)8 << 10)
#define DT_WIRE_DEFAULT_MAX_VALUE ((size_t)8 << 20)
#define DT_WIRE_DEFAULT_MAX_FRAME ((size_t)64 << 20)
#define DT_WIRE_DEFAULT_MAX_KEYS ((uint64_t)128 << 10)

struct dt_wire_bytes {
    const uint8_t *p;
    size_t len;
};

/* A decoded request; byte ranges point into the caller's buffer. */
struct dt_wire_request {
    uint8_t op;
    uint32_t u32;               /* VALIDATE magic, PING nonce, a channel's id */
    int64_t i1, i2;             /* ADD delta; BARRIER and STORE_BARRIER world; HEARTBEAT rank, step;
                                   JOIN node_rank, nnodes */
    int64_t i3, i4;             /* JOIN nproc, pid */
    struct dt_wire_bytes key;   /* key, barrier name, token, JOIN host, CHANNEL_OPEN name */
    struct dt_wire_bytes v1;    /* SET/APPEND/QUEUE_PUSH value; COMPARE_SET expected; CHANNEL request
                                   (up to the frame limit less the channel's header) */
    struct dt_wire_bytes v2;    /* COMPARE_SET desired */
    uint64_t count;             /* entries of the list ops */
    struct dt_wire_bytes list;  /* the encoded entries, walked with dt_wire_list_next */
    size_t frame_len;           /* bytes the whole request took */
};

#define DT_WIRE_INCOMPLETE 1

/* Decodes one request from buf[0..len).  Returns 0 with *req filled,
 * DT_WIRE_INCOMPLETE when more bytes are needed, or a negative DT_E* code
 * with the reason in dt_error_last(): DT_EPROTO for an unknown op or a bad
 * field, DT_ENOMEM for a size over a limit.  Never reads past buf+len. */
int dt_wire_decode(const uint8_t *buf, size_t len, const struct dt_wire_limits *lim,
                   struct dt_wire_request *req);

/* How far decoding an incomplete request got, so that the call with more
 * bytes resumes there: started over from byte 0 on every read, a list of
 * 131072 keys sent a few bytes at a time costs O(n^2).  Zero it before the
 * first call for a request (and after each whole request); it describes the
 * request that starts at buf[0]. */
struct dt_wire_progress {
    size_t need;   /* decoding cannot advance until the request has this many bytes */
    uint64_t done; /* list entries already checked */
    size_t pos;    /* where entry `done` starts */
};

/* dt_wire_decode, resuming where *pg says and updating it when the request
 * is still incomplete.  Callers may skip the call while len < pg->need. */
int dt_wire_decode_step(const uint8_t *buf, size_t len, const struct dt_wire_limits *lim,
                        struct dt_wire_progress *pg, struct dt_wire_request *req);

/* True for every request type above: the gate refuses the others by their
 * first byte, before reading any field. */
bool dt_wire_op_known(uint8_t op);

/* Walks a decoded list: *pos starts at 0; fills the next string (for
 * MULTI_SET, call it twice per entry: key then value).  Returns false at the
 * end.  Safe only on lists dt_wire_decode accepted. */
bool dt_wire_list_next(const struct dt_wire_request *req, size_t *pos, struct dt_wire_bytes *out);

const char *dt_wire_op_name(uint8_t op);

/* CHANNEL_OPEN, CHANNEL, CHANNEL_CLOSE. */
bool dt_wire_op_channel(uint8_t op);

/* --- encoding ------------------------------------------------------------- */

/* A growable output buffer; after an allocation failure every put is a no-op
 * and `failed` stays set, so callers check once at the end. */
struct dt_wire_buf {
    uint8_t *p;
    size_t len, cap;
    bool failed;
};

void dt_wire_buf_init(struct dt_wire_buf *b);
/* Makes room for `more` bytes at once (a reply whose size is known), so a
 * large one is not grown by doubling to twice its size. */
void dt_wire_buf_reserve(struct dt_wire_buf *b, size_t more);
void dt_wire_buf_free(struct dt_wire_buf *b);
void dt_wire_put_u8(struct dt_wire_buf *b, uint8_t v);
void dt_wire_put_u32(struct dt_wire_buf *b, uint32_t v);
void dt_wire_put_i64(struct dt_wire_buf *b, int64_t v);
void dt_wire_put_u64(struct dt_wire_buf *b, uint64_t v);
/* len:u64 then bytes. */
void dt_wire_put_bytes(struct dt_wire_buf *b, const void *p, size_t len);
/* Bytes as they are, no length in front (an already encoded reply). */
void dt_wire_put_raw(struct dt_wire_buf *b, const void *p, size_t len);
/* One string made of prefix and key (PyTorch's client puts "/" in front of
 * every user key). */
void dt_wire_put_key(struct dt_wire_buf *b, const char *prefix, const void *key, size_t len);

/* The header of a channel's reply frame; `len` bytes follow it. */
void dt_wire_put_chan_header(struct dt_wire_buf *b, uint32_t chan, uint8_t kind, uint64_t len);
/* Reads one from p[0..DT_WIRE_CHAN_HEADER); false for an unknown kind. */
bool dt_wire_chan_header(const uint8_t *p, uint32_t *chan, uint8_t *kind, uint64_t *len);

uint32_t dt_wire_load_u32(const uint8_t *p);
uint64_t dt_wire_load_u64(const uint8_t *p);

#endif
