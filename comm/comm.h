/* comm.h - the communicator: collectives among the ranks of a job.
 *
 * One API over several backends (tcp, shm, nccl, mpi), each behind the ops
 * table of comm/comm_backend.h; the reducer and the trainer only ever see
 * this header.  A communicator is bootstrapped through the coordinator's store
 * (each rank publishes how to reach it, under a key prefix that is unique per
 * communicator, so a new one can be built in the same process after a failure);
 * collectives then go peer to peer.
 *
 * Semantics follow NCCL/Gloo: every rank calls the same collectives in the same
 * order with the same counts.  In-place is send == recv.  Every operation has a
 * deadline (the options' timeouts): a dead or stalled peer makes each surviving
 * rank return DT_ECONN or DT_ETIMEDOUT with a message naming the peer and the
 * operation, never hang.  After an error the communicator is only good for
 * dt_comm_destroy().
 *
 * Async forms start the operation on the backend's communication thread (CPU)
 * or stream (GPU) and return a request from a fixed pool; dt_comm_wait() ends it.
 * Steady-state collectives allocate nothing.
 */
#ifndef DT_COMM_H
#define DT_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct dt_store;
struct dt_comm;
struct dt_comm_req;

enum dt_dtype { DT_F32, DT_F64, DT_F16, DT_BF16, DT_I32, DT_I64, DT_DTYPE_COUNT };
enum dt_redop { DT_SUM, DT_AVG, DT_MAX, DT_MIN, DT_REDOP_COUNT };

struct dt_comm_options {
    const char *backend;      /* "tcp", "shm", "nccl", "mpi" or "auto" */
    int rank, world;          /* this rank and the number of ranks */
    int local_rank, local_world; /* within this host (shm, auto, GPU choice) */
    struct dt_store *store;   /* bootstrap only; must outlive dt_comm_init() */
    const char *key_prefix;   /* store namespace for this communicator, e.g. "comm/0/" */
    double timeout_s;         /* deadline of bootstrap and of each operation; default 60 */
    double op_timeout_s;      /* tcp: once bootstrapped, a peer that moves no data for this long fails
                                 the operation, named (the job's heartbeat_timeout); 0: timeout_s */
    double busy_limit_s;      /* tcp: the longest pause dt_comm_busy() announces (the job's
                                 rendezvous.timeout); 0: timeout_s */
    int cuda_device;          /* nccl: the GPU of this rank; -1 = local_rank */
};

int dt_comm_init(const struct dt_comm_options *opts, struct dt_comm **out);
int dt_comm_rank(const struct dt_comm *c);
int dt_comm_world(const struct dt_comm *c);
const char *dt_comm_backend_name(const struct dt_comm *c);

size_t dt_dtype_size(enum dt_dtype t);
const char *dt_dtype_name(enum dt_dtype t);   /* "float", "double", "half", "bfloat16", "int32", "int64" (nccl-tests names) */
const char *dt_redop_name(enum dt_redop op);  /* "sum", "avg", "max", "min" */

/* Blocking collectives.  `count` is in elements; for allgather and
 * reduce_scatter it is the count per rank (recv holds world*count for
 * allgather, send holds world*count for reduce_scatter). */
int dt_comm_allreduce(struct dt_comm *c, const void *send, void *recv, size_t count, enum dt_dtype t,
                      enum dt_redop op);
int dt_comm_broadcast(struct dt_comm *c, void *buf, size_t count, enum dt_dtype t, int root);
int dt_comm_allgather(struct dt_comm *c, const void *send, void *recv, size_t count, enum dt_dtype t);
int dt_comm_reduce_scatter(struct dt_comm *c, const void *send, void *recv, size_t count, enum dt_dtype t,
                           enum dt_redop op);
int dt_comm_barrier(struct dt_comm *c);

/* Async forms: *req is valid until dt_comm_wait(). */
int dt_comm_iallreduce(struct dt_comm *c, const void *send, void *recv, size_t count, enum dt_dtype t,
                       enum dt_redop op, struct dt_comm_req **req);
int dt_comm_ibarrier(struct dt_comm *c, struct dt_comm_req **req);
/* Waits for the request and returns its result; the request goes back to the pool. */
int dt_comm_wait(struct dt_comm_req *req);
/* Non-blocking: *done is set when the request finished (then call dt_comm_wait). */
int dt_comm_test(struct dt_comm_req *req, bool *done);

/* Shared buffers: memory the communicator's backend can reach on every rank
 * of the host.  Collective: every rank calls it with the same size, in the
 * same order, with no operation in flight.  With the shm backend each rank's
 * buffer is a shared mapping that its peers map too, and an in-place
 * allreduce of a range of it (the same offset on every rank) reads the peers'
 * ranges directly instead of copying through the segment: per rank, for S
 * bytes on p ranks, S + S/p to reduce and 2(p-1)/p S to copy the other
 * pieces back, instead of the segment's 2(p-1)/p S more on the way in and
 * the extra pass over the own piece (4.5 S -> 2.75 S at p = 4).  A backend
 * without it leaves *out NULL and returns 0: the caller keeps its own memory.
 * An allreduce from a shared buffer into a common one (below) leaves the
 * result there with no copy back at all: rank q writes piece q and every
 * rank reads the one result (S + S/p per rank).
 * The memory is zeroed and page aligned; give it back with
 * dt_comm_free_shared() (local, any order) before dt_comm_destroy(). */
int dt_comm_alloc_shared(struct dt_comm *c, size_t bytes, void **out);
/* One buffer for all the ranks of the host: every rank maps the same memory
 * (at its own address), so what one rank writes the others read after a
 * synchronization (a barrier).  For state the ranks would otherwise each hold
 * a copy of (the CPU trainer's parameters and AdamW moments); in
 * collectives only as the receive buffer of an allreduce from a shared
 * buffer (the same offsets on every rank).  Collective like
 * dt_comm_alloc_shared, and like it NULL and 0 from a backend without shared
 * memory; zeroed; dt_comm_free_shared frees it. */
int dt_comm_alloc_common(struct dt_comm *c, size_t bytes, void **out);
void dt_comm_free_shared(struct dt_comm *c, void *p);

/* Called on the communication thread after each asynchronous operation it ran:
 * the operation's name ("allreduce", ...), its receive buffer, and when it
 * started and ended (CLOCK_MONOTONIC nanoseconds).  Traces use it to show
 * communication as it really ran; NULL removes the hook.  Set it while no
 * operation is in flight. */
typedef void (*dt_comm_span_fn)(void *ctx, const char *op, const void *recv, int64_t t0_ns, int64_t t1_ns);
void dt_comm_set_span_hook(struct dt_comm *c, dt_comm_span_fn fn, void *ctx);

/* Announced pauses.  busy=true: this rank leaves the collectives for a while
 * but is alive (rank 0 writing a checkpoint while the others already wait in
 * the next step's allreduce); busy=false: it is back.  In between, the tcp
 * backend tells every peer so once a second from a thread of its own, and a
 * peer's stall deadline does not run out while such notices keep coming: a
 * rank that dies still closes its connections, and one whose host or
 * network goes away stops the notices, so either is named as before.  The
 * notices stop after busy_limit_s: a pause that long is a stall.  Call it
 * with no operation of this rank in flight; other backends ignore it. */
void dt_comm_busy(struct dt_comm *c, bool busy);

/* Makes every pending and future operation on this communicator fail at once
 * (used when another rank is known to have died). */
void dt_comm_abort(struct dt_comm *c);
void dt_comm_destroy(struct dt_comm *c);

#endif
