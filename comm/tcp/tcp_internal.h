/* tcp_internal.h - what the files of the `tcp` backend share; not a public
 * header (users see comm/comm.h, comm.c sees dt_comm_backend_tcp).
 *
 * The backend in three files:
 *   tcp_mesh.c    the transport: the full mesh of connections bootstrapped
 *                 through the store, the state's lifetime, and the lanes
 *                 (more meshes, one thread each, for large allreduces);
 *   tcp_engine.c  runs one step: streams the plan's out blocks to one peer
 *                 while receiving (and reducing) in blocks from another, the
 *                 spin-or-sleep policy, and the failure notices that name the
 *                 rank that died or stalled;
 *   tcp_coll.c    the collectives as plans for the engine (recursive
 *                 doubling, ring, halving-doubling, chain, tree,
 *                 dissemination) and the backend's ops table.
 *
 * The transport is a full mesh of TCP connections, one per pair of ranks,
 * non-blocking, driven by one engine call per collective step: dt_tcp__run()
 * streams a list of "out" blocks to one peer while receiving a list of "in"
 * blocks from another (possibly the same) peer, reducing incoming data
 * segment by segment.  An out block may depend on an in block: it is sent only
 * as far as that in block has been processed, which is what pipelines a ring
 * (byte j of step s leaves as soon as byte j of step s-1 has been reduced),
 * and since the sender never waits for the receiver's reduction, several
 * segments are in flight in the socket buffers at once.
 *
 * Framing: each collective step starts with a 32-byte header per direction
 * (magic, kind, seq, count, dtype, op, root), checked against what this rank
 * is running, so ranks that call collectives in different orders get a clear
 * error instead of garbage.  The payload that follows is raw elements.
 */
#ifndef DT_TCP_INTERNAL_H
#define DT_TCP_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <netinet/in.h>

#include "comm/comm.h"
#include "comm/comm_backend.h"

#define DT_TCP__MAGIC 0x31435444u /* "DTC1": hellos and step headers */
#define DT_TCP__MAX_SLICES 128    /* ring allreduce slices per call */

struct dt_tcp__hdr {
    uint32_t magic;
    uint16_t kind, dtype;
    uint64_t seq;
    uint64_t count;
    int32_t op, root;
};

enum dt_tcp__in_kind { DT_TCP__IN_DIRECT, DT_TCP__IN_REDUCE };

/* One contiguous piece of a step's byte stream. */
struct dt_tcp__blk {
    char *ptr;           /* out: bytes to send; in: where the (reduced) bytes go */
    const char *src;     /* in REDUCE: this rank's operand: ptr = src op incoming */
    size_t len;          /* bytes, a multiple of the element size */
    int dep;             /* out: in-block index bounding how far it may be sent; -1 none */
    int after_out;       /* in: out-block index that must be fully sent before writing ptr; -1 */
    uint8_t kind;        /* in: enum dt_tcp__in_kind */
    bool incoming_first; /* in REDUCE: ptr = incoming op src (else src op incoming) */
    bool finish;         /* in REDUCE: apply dt_reduce_finish (AVG) to the final sums */
};

struct dt_tcp__plan {
    int out_peer, in_peer;             /* -1: no out or no in side */
    struct dt_tcp__blk *out, *in;
    int nout, nin;
    bool check_hdr;                    /* in[0] is a header to check against *hdr */
    const struct dt_tcp__hdr *hdr;
    enum dt_dtype dtype;               /* of REDUCE in-blocks */
    enum dt_redop op;
};

struct dt_tcp {
    int rank, world;
    double timeout_s;         /* bootstrap's, then each step's: no data moved for this long fails it */
    int *fd;                  /* per peer; -1 for self */
    char (*addr)[64];         /* per peer "ip:port", for messages */
    int abort_fd;             /* eventfd: written by abort() to wake poll() */
    atomic_int aborted;
    bool failed;
    uint64_t seq;             /* collectives run so far (header check, messages) */
    enum dt_coll_kind cur;    /* the collective running, for messages */
    double deadline;          /* of the current step: moved on whenever data moves */
    size_t seg_bytes;         /* reduction segment (DTRAIN_TCP_SEGMENT_BYTES) */
    size_t small_bytes;       /* below: latency algorithms (DTRAIN_TCP_SMALL_BYTES) */
    size_t slice_bytes;       /* ring allreduce slice (DTRAIN_TCP_SLICE_BYTES) */
    size_t halving_bytes;     /* up to: halving-doubling allreduce, above: ring (DTRAIN_TCP_HALVING_BYTES) */
    size_t sockbuf;           /* SO_SNDBUF/SO_RCVBUF (DTRAIN_TCP_SOCKBUF_BYTES); 0: the kernel's autotuning */
    double spin_s;            /* retry this long before sleeping in poll() (DTRAIN_TCP_SPIN_US) */
    double spin_off_until;    /* no spinning before this (preempted while spinning, busy machine) */
    double load_checked;      /* when /proc/loadavg was last read */
    int ncpus;                /* CPUs this process may run on */
    char *stage;              /* seg_bytes + small_bytes + header: incoming data to reduce */
    char *small;              /* small_bytes + header: copy of what a small step sends */
    char *scratch;            /* reduce_scatter partials; grows, never shrinks */
    size_t scratch_bytes;
    size_t *processed;        /* per in block, bytes done */
    struct dt_tcp__blk *out, *in; /* block arrays for one step, max_blocks each */
    int max_blocks;
    int *last_pos;            /* ring_blocks(): latest block of each ring step, 2*world */
    /* failure notices (tcp_engine.c) */
    int ufd;                  /* UDP socket; -1 until bootstrap */
    uint32_t nonce;           /* hash of the key prefix: tells our notices from strays */
    struct sockaddr_in *uaddr; /* per peer: where its notices socket listens */
    int suspect;              /* the peer this rank saw fail in the current step, -1 */
    double grace_s;           /* end of each deadline kept for collecting notices */
    char *heard;              /* per peer: sent a notice */
    int *suspected;           /* per peer: a rank that blamed it, -1 none */
    char (*notice_msg)[480];  /* per peer: the message of its notice */
    pthread_mutex_t *notice_mu; /* with lanes: guards the notice state above, shared by all lanes */
    bool notices_borrowed;    /* a lane: ufd and the arrays above belong to lane 0 */
    double *busy_from;        /* per peer: when its last pause notice was read, 0 none (under notice_mu) */
    double busy_limit_s;      /* the longest pause this rank announces (dt_comm_busy) */
    struct dt_tcp__busy *busy; /* the thread announcing this rank's pause, or NULL */
    /* lanes (tcp_mesh.c): more connections per peer for large allreduces */
    int nlanes;               /* connections per peer pair; 1: no lanes */
    size_t lane_bytes;        /* allreduces from this size on are striped over the lanes */
    struct dt_tcp__lanes *lanes; /* NULL when nlanes == 1, and in a lane itself */
};

/* ---- tcp_mesh.c: the transport ---- */

/* The backend's init, abort and destroy (its ops table is in tcp_coll.c). */
int dt_tcp__init(const struct dt_comm_options *o, void **state);
void dt_tcp__abort(void *st);
void dt_tcp__destroy(void *st);
/* An allreduce striped over the lanes (t->lanes set, n * esize >= lane_bytes). */
int dt_tcp__lanes_allreduce(struct dt_tcp *t, const void *send, void *recv, size_t n, enum dt_dtype dt,
                            enum dt_redop op);

/* ---- tcp_engine.c: one step, failures ---- */

/* Runs one step to completion, or fails naming the peer and the collective.
 * On failure every connection is shut down so that peers fail fast too. */
int dt_tcp__run(struct dt_tcp *t, const struct dt_tcp__plan *p);
/* Fills a header for the running collective. */
void dt_tcp__hdr_make(struct dt_tcp *t, struct dt_tcp__hdr *h, size_t count, enum dt_dtype dt,
                      enum dt_redop op, int root);
/* Binds the failure-notice socket; *port is published with the TCP address. */
int dt_tcp__fault_open(struct dt_tcp *t, int *port);
/* Sets the deadline every step keeps (timeout_s) and the grace period taken
 * off its end for the failure notices. */
void dt_tcp__set_timeout(struct dt_tcp *t, double timeout_s);
/* Marks the communicator failed and shuts every connection down. */
void dt_tcp__fail(struct dt_tcp *t);
/* dt_comm_busy(): starts or stops announcing this rank's pause to its peers
 * (stopped by destroy too). */
void dt_tcp__busy(void *st, bool on);

/* ---- tcp_coll.c: the collectives ---- */

/* One allreduce on this communicator's own connections (the algorithm by
 * size); the backend's allreduce stripes large ones over the lanes first. */
int dt_tcp__allreduce_one(struct dt_tcp *t, const void *send, void *recv, size_t n, enum dt_dtype dt,
                          enum dt_redop op);

#endif
