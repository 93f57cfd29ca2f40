/* nccl_internal.h - the NCCL backend's state, shared by its files only.
 *
 * nccl_backend.c bootstraps and tears down; nccl_coll.c enqueues the
 * collectives and watches them finish.  Not for users: see nccl_comm.h.
 */
#ifndef DT_NCCL_INTERNAL_H
#define DT_NCCL_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "comm/comm_backend.h"

/* Collectives in flight; comm.c never has more requests than this out. */
#define DT_NCCL__RING 512
/* Device bytes for blocking collectives on host buffers (control messages:
 * the bench's rank table and timings, a trainer's loss); payloads belong in
 * device memory. */
#define DT_NCCL__STAGE (4u << 20)

struct dt_nccl_pending {
    struct dt_comm_req *req;
    enum dt_coll_kind kind;
    uint64_t seq;
    double deadline;
    cudaEvent_t done;   /* recorded on the communication stream after the op */
};

struct dt_nccl {
    int rank, world, device;
    double timeout_s;
    /* mu guards comm, the ring and `failed`: every NCCL call on comm is made
     * holding it, so dt_comm_abort() from another thread never races an
     * enqueue or a status poll. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    ncclComm_t comm;          /* NULL once aborted */
    cudaStream_t stream;      /* communication stream */
    cudaStream_t compute;     /* the stream collectives wait for */
    cudaEvent_t ready;        /* input-ready point on `compute` */
    cudaEvent_t blocking_done;
    void *scratch;            /* one int on the device: the barrier's payload */
    void *stage;              /* DT_NCCL__STAGE bytes for host buffers */
    struct dt_nccl_pending ring[DT_NCCL__RING];
    int head, len;
    uint64_t seq;
    int failed;               /* sticky DT_E* code after a failure */
    char why[384];
    atomic_int abort_requested;
    pthread_t watcher;
    bool watcher_started, stopping;
};

/* Turns a CUDA or NCCL status into a DT_E* error with a sentence naming the call. */
int dt_nccl__cuda_error(cudaError_t e, int rank, const char *call);
int dt_nccl__nccl_error(ncclResult_t r, int rank, const char *call);

/* Aborts the NCCL communicator (once) so that kernels stuck on a dead peer
 * end; records `code`/`why` as the sticky failure.  Caller holds st->mu. */
void dt_nccl__abort_locked(struct dt_nccl *st, int code, const char *why);

/* Polls ncclCommGetAsyncError until it is no longer ncclInProgress or the
 * deadline passes (then aborts).  Caller holds st->mu. */
int dt_nccl__settle_locked(struct dt_nccl *st, const char *what, double deadline);

/* The end of a wait that has not finished: 0 while neither dt_comm_abort()
 * was called nor `deadline` passed; else aborts the communicator and returns
 * DT_EABORTED or DT_ETIMEDOUT with a sentence naming the rank and `what`,
 * and for a timeout `hint` (what to check).  Caller holds st->mu. */
int dt_nccl__give_up_locked(struct dt_nccl *st, const char *what, double deadline, const char *hint);

/* NCCL's datatype and reduction for dtrain's (nccl_coll.c). */
ncclDataType_t dt_nccl__type(enum dt_dtype t);
ncclRedOp_t dt_nccl__op(enum dt_redop op);

/* One step of a polling wait: yields at first, then sleeps 50 us. */
void dt_nccl__pause(int *spins);

/* The completion watcher (nccl_coll.c). */
void *dt_nccl__watcher_main(void *arg);

#endif
