/* tcp.h - internals shared by the TCP transport (tcp.c) and the collectives
 * built on it (tcp_coll.c).  Not a public header.
 *
 * The transport is a full mesh of TCP connections, one per pair of ranks,
 * non-blocking, driven by one engine call per collective step: dt_tcp_run()
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
#ifndef DT_TCP_H
#define DT_TCP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <netinet/in.h>

#include "comm/comm.h"
#include "comm/comm_backend.h"

#define DT_TCP_MAGIC 0x31435444u /* "DTC1" */
#define DT_TCP_MAX_SLICES 128     /* ring allreduce slices per call */
#define DT_TCP_SPIN_US 1000       /* default busy-poll before sleeping */
#define DT_TCP_SPIN_BACKOFF_S 0.1 /* no spinning this long after being preempted in a spin */
#define DT_TCP_LOAD_CHECK_S 0.05  /* how often spinning re-reads the machine's load */

struct dt_tcp_hdr {
    uint32_t magic;
    uint16_t kind, dtype;
    uint64_t seq;
    uint64_t count;
    int32_t op, root;
};

enum dt_tcp_in_kind { DT_TCP_IN_DIRECT, DT_TCP_IN_REDUCE };

/* One contiguous piece of a step's byte stream. */
struct dt_tcp_blk {
    char *ptr;           /* out: bytes to send; in: where the (reduced) bytes go */
    const char *src;     /* in REDUCE: this rank's operand: ptr = src op incoming */
    size_t len;          /* bytes, a multiple of the element size */
    int dep;             /* out: in-block index bounding how far it may be sent; -1 none */
    int after_out;       /* in: out-block index that must be fully sent before writing ptr; -1 */
    uint8_t kind;        /* in: enum dt_tcp_in_kind */
    bool incoming_first; /* in REDUCE: ptr = incoming op src (else src op incoming) */
    bool finish;         /* in REDUCE: apply dt_reduce_finish (AVG) to the final sums */
};

struct dt_tcp_plan {
    int out_peer, in_peer;             /* -1: no out or no in side */
    struct dt_tcp_blk *out, *in;
    int nout, nin;
    bool check_hdr;                    /* in[0] is a header to check against *hdr */
    const struct dt_tcp_hdr *hdr;
    enum dt_dtype dtype;               /* of REDUCE in-blocks */
    enum dt_redop op;
};

struct dt_tcp {
    int rank, world;
    double timeout_s;
    int *fd;                  /* per peer; -1 for self */
    char (*addr)[64];         /* per peer "ip:port", for messages */
    int abort_fd;             /* eventfd: written by abort() to wake poll() */
    atomic_int aborted;
    bool failed;
    uint64_t seq;             /* collectives run so far (header check, messages) */
    enum dt_coll_kind cur;    /* the collective running, for messages */
    double deadline;          /* of the current collective */
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
    struct dt_tcp_blk *out, *in; /* block arrays for one step, max_blocks each */
    int max_blocks;
    int *last_pos;            /* ring_blocks(): latest block of each ring step, 2*world */
    /* failure notices (tcp_fault.c) */
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
    /* lanes (tcp_lanes.c): more connections per peer for large allreduces */
    int nlanes;               /* connections per peer pair; 1: no lanes */
    size_t lane_bytes;        /* allreduces from this size on are striped over the lanes */
    struct dt_tcp_lanes *lanes; /* NULL when nlanes == 1, and in a lane itself */
};

/* Runs one step to completion, or fails naming the peer and the collective.
 * On failure every connection is shut down so that peers fail fast too. */
int dt_tcp_run(struct dt_tcp *t, const struct dt_tcp_plan *p);

/* Fills a header for the running collective. */
void dt_tcp_hdr_make(struct dt_tcp *t, struct dt_tcp_hdr *h, size_t count, enum dt_dtype dt,
                     enum dt_redop op, int root);
/* Compares a received header with the expected one; names `peer` on mismatch. */
int dt_tcp_hdr_check(struct dt_tcp *t, int peer, const struct dt_tcp_hdr *got, const struct dt_tcp_hdr *want);

/* Binds the failure-notice socket; *port is published with the TCP address. */
int dt_tcp_fault_open(struct dt_tcp *t, int *port);
/* The notice socket is readable during a step: 0, or the failure a peer reported. */
int dt_tcp_fault_check(struct dt_tcp *t);
/* A step failed with rc (message set, t->suspect the peer it blames): tells
 * every peer, shuts the connections down, waits briefly for the other ranks'
 * notices and rewrites the message to name the rank that died or stalled.
 * Returns rc. */
int dt_tcp_fault(struct dt_tcp *t, int rc);

/* A wait's spin (tcp_spin.c). */
struct dt_tcp_spin {
    double start;   /* 0: not spinning */
    long csw;       /* involuntary context switches when it started */
};
/* Nothing moved: true to retry at once (spin), false to sleep in poll(). */
bool dt_tcp_spin_again(struct dt_tcp *t, struct dt_tcp_spin *s);
/* Something moved (or the spin gave up): ends the spin, backing off if we
 * were preempted during it. */
void dt_tcp_spin_end(struct dt_tcp *t, struct dt_tcp_spin *s);

/* Rabenseifner allreduce (tcp_halving.c): send -> recv (may be equal). */
int dt_tcp_halving_allreduce(struct dt_tcp *t, const struct dt_tcp_hdr *h, const char *send, char *recv, size_t n,
                             enum dt_dtype dt, enum dt_redop op);

/* Marks the communicator failed and shuts every connection down. */
void dt_tcp_fail(struct dt_tcp *t);

/* Grows t->scratch to at least `bytes` (touched once; only the first call of
 * a larger size allocates). */
int dt_tcp_scratch(struct dt_tcp *t, size_t bytes);

/* One allreduce on this communicator's own connections (the algorithm by
 * size); tcp_allreduce() stripes large ones over the lanes first. */
int dt_tcp_allreduce_one(struct dt_tcp *t, const void *send, void *recv, size_t n, enum dt_dtype dt,
                         enum dt_redop op);

/* Lanes (tcp_lanes.c).  How many, and from what size: rank 0's choice,
 * published under "<prefix>tcp/lanes" before its address (choose, before
 * the bootstrap), read by the others once they have that address (init). */
int dt_tcp_lanes_choose(struct dt_tcp *t, const struct dt_comm_options *o);
/* Reads rank 0's choice, then builds lanes 1..nlanes-1 (a tcp communicator
 * each, under "<prefix>lane<i>/") and their threads. */
int dt_tcp_lanes_init(struct dt_tcp *t, const struct dt_comm_options *o);
int dt_tcp_lanes_allreduce(struct dt_tcp *t, const void *send, void *recv, size_t n, enum dt_dtype dt,
                           enum dt_redop op);
void dt_tcp_lanes_abort(struct dt_tcp *t);
void dt_tcp_lanes_destroy(struct dt_tcp *t);

/* A tcp communicator; with_lanes false for a lane itself. */
int dt_tcp_create(const struct dt_comm_options *o, bool with_lanes, struct dt_tcp **out);
int dt_tcp_init(const struct dt_comm_options *o, void **state);
void dt_tcp_abort(void *st);
void dt_tcp_destroy(void *st);

#endif
