/* nccl_backend.c - the NCCL backend's life: bootstrap through the store,
 * non-blocking communicator creation under a deadline, abort, teardown, and
 * the small device helpers of nccl_comm.h.
 *
 * Bootstrap: rank 0 calls ncclGetUniqueId and publishes the 128 bytes under
 * <prefix>nccl/id; the others wait for that key (bounded by the options'
 * timeout) and read it.  The communicator is created with blocking = 0, so
 * ncclCommInitRankConfig returns at once and we poll ncclCommGetAsyncError
 * against the deadline: a rank that never arrives makes the others fail with
 * DT_ETIMEDOUT after ncclCommAbort, never hang inside NCCL.
 *
 * Not for the collectives themselves (nccl_coll.c).
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"
#include "comm/nccl/nccl_comm.h"
#include "comm/nccl/nccl_internal.h"
#include "comm/store.h"
#include "base/clock.h"

int dt_nccl__cuda_error(cudaError_t e, int rank, const char *call)
{
    return dt_error_set(DT_EIO, "rank %d: nccl: %s failed: %s (%s)", rank, call, cudaGetErrorString(e),
                        cudaGetErrorName(e));
}

int dt_nccl__nccl_error(ncclResult_t r, int rank, const char *call)
{
    /* A remote error is a peer that went away; the rest are local faults. */
    int code = r == ncclRemoteError || r == ncclSystemError ? DT_ECONN
               : r == ncclInvalidArgument || r == ncclInvalidUsage ? DT_EINVAL
                                                            : DT_EIO;
    return dt_error_set(code, "rank %d: nccl: %s failed: %s (%s)", rank, call, ncclGetErrorString(r),
                        ncclGetLastError(NULL));
}

void dt_nccl__abort_locked(struct dt_nccl *st, int code, const char *why)
{
    if (!st->failed) {
        st->failed = code;
        snprintf(st->why, sizeof st->why, "%s", why);
    }
    if (st->comm) {
        /* Ends kernels that wait on a dead peer; the handle is gone after it. */
        ncclCommAbort(st->comm);
        st->comm = NULL;
    }
}

int dt_nccl__give_up_locked(struct dt_nccl *st, const char *what, double deadline, const char *hint)
{
    bool aborted = atomic_load(&st->abort_requested);
    if (!aborted && dt_clock_s() <= deadline)
        return 0;
    char msg[384];
    if (aborted)
        snprintf(msg, sizeof msg, "rank %d: %s (nccl): the communicator was aborted", st->rank, what);
    else
        snprintf(msg, sizeof msg, "rank %d: %s (nccl): not finished after %.0f s; aborted the NCCL communicator %s",
                 st->rank, what, st->timeout_s, hint);
    int rc = aborted ? DT_EABORTED : DT_ETIMEDOUT;
    dt_nccl__abort_locked(st, rc, msg);
    return dt_error_set(rc, "%s", msg);
}

void dt_nccl__pause(int *spins)
{
    /* Spin first (a collective of a few KiB ends in tens of microseconds),
     * then sleep so an idle wait does not eat a core. */
    if ((*spins)++ < 200) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, 50 * 1000};
    nanosleep(&ts, NULL);
}

int dt_nccl__settle_locked(struct dt_nccl *st, const char *what, double deadline)
{
    int spins = 0;
    for (;;) {
        if (!st->comm)
            return dt_error_set(st->failed ? st->failed : DT_EABORTED, "%s", st->why);
        ncclResult_t state = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError(st->comm, &state);
        if (r != ncclSuccess)
            state = r;
        if (state == ncclSuccess)
            return 0;
        if (state != ncclInProgress) {
            int rc = dt_nccl__nccl_error(state, st->rank, what);
            dt_nccl__abort_locked(st, rc, dt_error_last());
            return rc;
        }
        int rc = dt_nccl__give_up_locked(st, what, deadline, "(is every rank up and on its own GPU?)");
        if (rc)
            return rc;
        /* Let abort() from another thread in between polls. */
        pthread_mutex_unlock(&st->mu);
        dt_nccl__pause(&spins);
        pthread_mutex_lock(&st->mu);
    }
}

/* Rank 0 makes the id and publishes it; the others wait for it. */
static int exchange_id(const struct dt_comm_options *o, ncclUniqueId *id, double deadline)
{
    char key[256];
    snprintf(key, sizeof key, "%snccl/id", o->key_prefix);
    if (o->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(id);
        if (r != ncclSuccess)
            return dt_nccl__nccl_error(r, o->rank, "ncclGetUniqueId");
        if (o->world == 1 && !o->store)
            return 0;
        int rc = dt_store_set(o->store, key, id, sizeof *id);
        return rc < 0 ? dt_error_prefix("rank 0: nccl: publishing the unique id under %s", key) : 0;
    }
    const char *keys[1] = {key};
    double left = deadline - dt_clock_s();
    int rc = dt_store_wait(o->store, keys, 1, left > 0 ? left : 0.001);
    if (rc < 0)
        return dt_error_prefix("rank %d: nccl: waiting for rank 0's unique id under %s", o->rank, key);
    void *v = NULL;
    size_t len = 0;
    if ((rc = dt_store_get(o->store, key, &v, &len)) < 0)
        return dt_error_prefix("rank %d: nccl: reading the unique id under %s", o->rank, key);
    if (len != sizeof *id) {
        free(v);
        return dt_error_set(DT_EPROTO, "rank %d: nccl: the unique id under %s has %zu bytes, expected %zu",
                            o->rank, key, len, sizeof *id);
    }
    memcpy(id, v, sizeof *id);
    free(v);
    return 0;
}

static int pick_device(const struct dt_comm_options *o, int *dev)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess)
        return dt_error_set(DT_EUNSUPPORTED, "rank %d: nccl: no usable CUDA device (cudaGetDeviceCount: %s)",
                            o->rank, cudaGetErrorString(e));
    *dev = o->cuda_device >= 0 ? o->cuda_device : o->local_rank;
    if (*dev >= n)
        return dt_error_set(DT_EINVAL,
                            "rank %d: nccl: wants CUDA device %d but this host has %d (local rank %d of %d); "
                            "NCCL needs one GPU per rank",
                            o->rank, *dev, n, o->local_rank, o->local_world);
    if ((e = cudaSetDevice(*dev)) != cudaSuccess)
        return dt_nccl__cuda_error(e, o->rank, "cudaSetDevice");
    return 0;
}

static int make_cuda_objects(struct dt_nccl *st)
{
    int lo = 0, hi = 0;
    cudaError_t e = cudaDeviceGetStreamPriorityRange(&lo, &hi);
    if (e == cudaSuccess)
        e = cudaStreamCreateWithPriority(&st->stream, cudaStreamNonBlocking, hi);
    if (e != cudaSuccess)
        return dt_nccl__cuda_error(e, st->rank, "cudaStreamCreateWithPriority (communication stream)");
    if ((e = cudaEventCreateWithFlags(&st->ready, cudaEventDisableTiming)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&st->blocking_done, cudaEventDisableTiming)) != cudaSuccess)
        return dt_nccl__cuda_error(e, st->rank, "cudaEventCreateWithFlags");
    for (int i = 0; i < DT_NCCL__RING; i++)
        if ((e = cudaEventCreateWithFlags(&st->ring[i].done, cudaEventDisableTiming)) != cudaSuccess)
            return dt_nccl__cuda_error(e, st->rank, "cudaEventCreateWithFlags");
    if ((e = cudaMalloc(&st->scratch, 64)) != cudaSuccess)
        return dt_nccl__cuda_error(e, st->rank, "cudaMalloc (barrier scratch)");
    if ((e = cudaMalloc(&st->stage, DT_NCCL__STAGE)) != cudaSuccess)
        return dt_nccl__cuda_error(e, st->rank, "cudaMalloc (staging for host buffers)");
    if ((e = cudaMemset(st->scratch, 0, 64)) != cudaSuccess)
        return dt_nccl__cuda_error(e, st->rank, "cudaMemset");
    return 0;
}

static int create_comm(struct dt_nccl *st, ncclUniqueId id, double deadline)
{
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    cfg.commName = "dtrain";
    pthread_mutex_lock(&st->mu);
    ncclResult_t r = ncclCommInitRankConfig(&st->comm, st->world, id, st->rank, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) {
        int rc = dt_nccl__nccl_error(r, st->rank, "ncclCommInitRankConfig");
        if (st->comm)
            ncclCommAbort(st->comm);
        st->comm = NULL;
        pthread_mutex_unlock(&st->mu);
        return rc;
    }
    char what[64];
    snprintf(what, sizeof what, "communicator setup of %d ranks", st->world);
    int rc = dt_nccl__settle_locked(st, what, deadline);
    pthread_mutex_unlock(&st->mu);
    return rc;
}

static void nccl_destroy(void *p);

static int nccl_init(const struct dt_comm_options *o, void **out)
{
    double deadline = dt_clock_s() + o->timeout_s;
    struct dt_nccl *st = calloc(1, sizeof *st);
    if (!st)
        return dt_error_set(DT_ENOMEM, "rank %d: nccl: out of memory", o->rank);
    st->rank = o->rank;
    st->world = o->world;
    st->timeout_s = o->timeout_s;
    pthread_mutex_init(&st->mu, NULL);
    pthread_cond_init(&st->cv, NULL);
    ncclUniqueId id;
    int rc = pick_device(o, &st->device);
    if (rc == 0)
        rc = make_cuda_objects(st);
    if (rc == 0)
        rc = exchange_id(o, &id, deadline);
    if (rc == 0)
        rc = create_comm(st, id, deadline);
    if (rc == 0 && pthread_create(&st->watcher, NULL, dt_nccl__watcher_main, st) != 0)
        rc = dt_error_set(DT_ENOMEM, "rank %d: nccl: could not start the completion watcher", o->rank);
    else if (rc == 0)
        st->watcher_started = true;
    if (rc < 0) {
        int code = dt_error_code();
        char msg[512];
        snprintf(msg, sizeof msg, "%s", dt_error_last());
        nccl_destroy(st);
        return dt_error_set(code ? code : rc, "%s", msg);
    }
    *out = st;
    return 0;
}

static void nccl_abort(void *p)
{
    struct dt_nccl *st = p;
    atomic_store(&st->abort_requested, 1);
    pthread_mutex_lock(&st->mu);
    char msg[128];
    snprintf(msg, sizeof msg, "rank %d: nccl: the communicator was aborted", st->rank);
    dt_nccl__abort_locked(st, DT_EABORTED, msg);
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->mu);
}

/* A healthy communicator is finalized (flushes, bounded by the timeout) and
 * destroyed; a failed or stuck one is aborted. */
static void close_comm(struct dt_nccl *st)
{
    pthread_mutex_lock(&st->mu);
    if (st->comm && !st->failed) {
        ncclResult_t r = ncclCommFinalize(st->comm);
        if (r == ncclSuccess || r == ncclInProgress) {
            if (dt_nccl__settle_locked(st, "communicator finalize", dt_clock_s() + st->timeout_s) == 0 &&
                st->comm) {
                ncclCommDestroy(st->comm);
                st->comm = NULL;
            }
        }
    }
    if (st->comm)
        ncclCommAbort(st->comm);
    st->comm = NULL;
    pthread_mutex_unlock(&st->mu);
}

static void nccl_destroy(void *p)
{
    struct dt_nccl *st = p;
    if (!st)
        return;
    cudaSetDevice(st->device);
    if (st->watcher_started) {
        pthread_mutex_lock(&st->mu);
        st->stopping = true;
        pthread_cond_broadcast(&st->cv);
        pthread_mutex_unlock(&st->mu);
        pthread_join(st->watcher, NULL);
    }
    close_comm(st);
    if (st->stream)
        cudaStreamDestroy(st->stream);
    if (st->ready)
        cudaEventDestroy(st->ready);
    if (st->blocking_done)
        cudaEventDestroy(st->blocking_done);
    for (int i = 0; i < DT_NCCL__RING; i++)
        if (st->ring[i].done)
            cudaEventDestroy(st->ring[i].done);
    if (st->scratch)
        cudaFree(st->scratch);
    if (st->stage)
        cudaFree(st->stage);
    pthread_mutex_destroy(&st->mu);
    pthread_cond_destroy(&st->cv);
    free(st);
}

/* The ops table (the collectives are in nccl_coll.c). */
int dt_nccl_allreduce(void *st, const void *send, void *recv, size_t count, enum dt_dtype t, enum dt_redop op);
int dt_nccl_broadcast(void *st, void *buf, size_t count, enum dt_dtype t, int root);
int dt_nccl_allgather(void *st, const void *send, void *recv, size_t count, enum dt_dtype t);
int dt_nccl_reduce_scatter(void *st, const void *send, void *recv, size_t count, enum dt_dtype t,
                           enum dt_redop op);
int dt_nccl_barrier(void *st);
int dt_nccl_iallreduce(void *st, const void *send, void *recv, size_t count, enum dt_dtype t, enum dt_redop op,
                       struct dt_comm_req *req);
int dt_nccl_ibarrier(void *st, struct dt_comm_req *req);

const struct dt_comm_backend dt_comm_backend_nccl = {
    .name = "nccl",
    .init = nccl_init,
    .allreduce = dt_nccl_allreduce,
    .broadcast = dt_nccl_broadcast,
    .allgather = dt_nccl_allgather,
    .reduce_scatter = dt_nccl_reduce_scatter,
    .barrier = dt_nccl_barrier,
    .iallreduce = dt_nccl_iallreduce,
    .ibarrier = dt_nccl_ibarrier,
    .abort = nccl_abort,
    .destroy = nccl_destroy,
    .device_buffers = true,
};
