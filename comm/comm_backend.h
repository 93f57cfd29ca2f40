/* comm_backend.h - the ops table every communicator backend fills in.
 *
 * comm.c validates arguments, owns the request pool and the communication
 * thread, and calls one of these tables; a backend (a folder: comm/tcp/,
 * comm/shm/, comm/nccl/, comm/mpi/) only moves and reduces bytes.  Adding a
 * backend is adding a folder whose files define one
 * `const struct dt_comm_backend dt_comm_backend_<name>`, and one line in
 * comm.c's list (and one wildcard in the Makefile's sources).
 *
 * Contract for a backend:
 *  - init() bootstraps through opts->store under opts->key_prefix and returns
 *    its state; it fails (never hangs) after opts->timeout_s.
 *  - The blocking forms run one collective to completion on the calling thread
 *    and are called one at a time, in the same order on every rank.  world >= 2
 *    (any world for a device_buffers backend) and count >= 0 are guaranteed;
 *    buffers are valid for count elements.
 *  - Each op has its own deadline of opts->timeout_s.  On any failure the op
 *    returns DT_ECONN / DT_ETIMEDOUT / DT_EABORTED / DT_EPROTO with a message
 *    "rank R: <op> #<seq> (<backend>): ... peer rank P ..." and makes its
 *    peers fail fast too (closes sockets, raises a shared flag).
 *  - The async forms (iallreduce, ibarrier: both or neither) may be NULL:
 *    comm.c then runs the blocking form on its communication thread, in
 *    submission order (the CPU backends do this).  A GPU backend sets them to
 *    enqueue on its stream and finish `req` later through
 *    dt_comm_req_finish(); comm.c then calls its blocking forms on the
 *    caller's thread even while requests are pending, since the stream
 *    orders them.
 *  - abort() may be called from any thread while an op runs: the op returns
 *    DT_EABORTED promptly.  destroy() frees everything; it is called once.
 *
 * Not for users: they see comm.h only.
 */
#ifndef DT_COMM_BACKEND_H
#define DT_COMM_BACKEND_H

#include "comm/comm.h"

struct dt_comm_backend {
    const char *name;
    int (*init)(const struct dt_comm_options *opts, void **state);

    int (*allreduce)(void *st, const void *send, void *recv, size_t count, enum dt_dtype t, enum dt_redop op);
    int (*broadcast)(void *st, void *buf, size_t count, enum dt_dtype t, int root);
    int (*allgather)(void *st, const void *send, void *recv, size_t count, enum dt_dtype t);
    int (*reduce_scatter)(void *st, const void *send, void *recv, size_t count, enum dt_dtype t,
                          enum dt_redop op);
    int (*barrier)(void *st);

    int (*iallreduce)(void *st, const void *send, void *recv, size_t count, enum dt_dtype t,
                      enum dt_redop op, struct dt_comm_req *req);
    int (*ibarrier)(void *st, struct dt_comm_req *req);

    void (*abort)(void *st);
    void (*destroy)(void *st);
    /* Optional (NULL: a no-op): dt_comm_busy(), see comm.h. */
    void (*busy)(void *st, bool on);

    /* Optional (NULL: no shared memory; comm.c then reports none).
     * alloc_shared is collective, called with nothing in flight, and maps
     * `bytes` that the backend's collectives may read on the peers' side, or
     * with `common` one buffer that every rank maps; free_shared is local and
     * takes what alloc_shared returned. */
    int (*alloc_shared)(void *st, size_t bytes, bool common, void **out);
    void (*free_shared)(void *st, void *p);

    /* Buffers live in device memory (nccl): comm.c cannot copy them itself, so
     * a world of one still goes through the backend, and the store may then be
     * NULL. */
    bool device_buffers;

    /* The backend's runtime wires the ranks itself (mpi: mpirun did), so
     * init() needs no store even for a world of several ranks. */
    bool self_bootstrap;
};

/* The backend state of `c` when its backend is `be`, else NULL: how a
 * backend's own extension header (comm/nccl/nccl_comm.h: streams) reaches it. */
void *dt_comm_backend_state(struct dt_comm *c, const struct dt_comm_backend *be);

/* For backends with native async forms: reports that `req` finished with rc
 * (and, if rc < 0, the current thread's error message). */
void dt_comm_req_finish(struct dt_comm_req *req, int rc);

/* CPUs the local ranks can share, for a backend's spin-or-sleep policy.  A
 * process pinned to one CPU of several was pinned by a launcher (bench
 * --bind, mpirun, Slurm --cpu-bind), which gives each rank its own: the
 * machine's CPUs count then, or every pinned rank would think itself
 * oversubscribed and yield instead of spinning (measured with shm: 8 B
 * allreduce 0.8-1.3 us instead of ~0.4 us). */
int dt_comm_cpus_available(void);

/* Names used in messages: "allreduce", "broadcast", ... */
enum dt_coll_kind { DT_COLL_ALLREDUCE, DT_COLL_BROADCAST, DT_COLL_ALLGATHER, DT_COLL_REDUCE_SCATTER,
                    DT_COLL_BARRIER, DT_COLL_KIND_COUNT };
const char *dt_coll_name(enum dt_coll_kind k);

extern const struct dt_comm_backend dt_comm_backend_tcp;
extern const struct dt_comm_backend dt_comm_backend_shm;
#ifdef DT_HAVE_CUDA
extern const struct dt_comm_backend dt_comm_backend_nccl;
#endif
#ifdef DT_HAVE_MPI
extern const struct dt_comm_backend dt_comm_backend_mpi;
#endif

#endif
