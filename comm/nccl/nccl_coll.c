/* nccl_coll.c - the NCCL backend's collectives: enqueue on the communication
 * stream behind the compute stream's "input ready" event, then either wait
 * (blocking forms) or hand the request to the watcher thread (async forms),
 * which reports it finished through dt_comm_req_finish().
 *
 * Every wait polls three things until the op's deadline: the op's event, the
 * communicator's asynchronous error (ncclCommGetAsyncError: a peer's network
 * failure shows up there) and dt_comm_abort().  On an error, an abort or the
 * deadline the communicator is aborted (ncclCommAbort ends the kernels that
 * wait for a dead peer), so every surviving rank returns instead of hanging,
 * and the failure is sticky: every later op returns the first cause.
 *
 * Not for bootstrap or teardown (nccl_backend.c).
 */
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "comm/nccl/nccl_internal.h"
#include "base/clock.h"

ncclDataType_t dt_nccl__type(enum dt_dtype t)
{
    switch (t) {
    case DT_F64: return ncclFloat64;
    case DT_F16: return ncclFloat16;
    case DT_BF16: return ncclBfloat16;
    case DT_I32: return ncclInt32;
    case DT_I64: return ncclInt64;
    default: return ncclFloat32;
    }
}

ncclRedOp_t dt_nccl__op(enum dt_redop op)
{
    switch (op) {
    case DT_AVG: return ncclAvg;
    case DT_MAX: return ncclMax;
    case DT_MIN: return ncclMin;
    default: return ncclSum;
    }
}

static int sticky(struct dt_nccl *st)
{
    return dt_error_set(st->failed ? st->failed : DT_EABORTED, "%s",
                        st->why[0] ? st->why : "nccl: the communicator was aborted");
}

struct coll {
    enum dt_coll_kind kind;
    const void *send;
    void *recv;
    size_t count;
    enum dt_dtype t;
    enum dt_redop op;
    int root;
};

static ncclResult_t issue(struct dt_nccl *st, const struct coll *c)
{
    ncclDataType_t t = dt_nccl__type(c->t);
    switch (c->kind) {
    case DT_COLL_ALLREDUCE:
        return ncclAllReduce(c->send, c->recv, c->count, t, dt_nccl__op(c->op), st->comm, st->stream);
    case DT_COLL_BROADCAST: return ncclBroadcast(c->recv, c->recv, c->count, t, c->root, st->comm, st->stream);
    case DT_COLL_ALLGATHER: return ncclAllGather(c->send, c->recv, c->count, t, st->comm, st->stream);
    case DT_COLL_REDUCE_SCATTER:
        return ncclReduceScatter(c->send, c->recv, c->count, t, dt_nccl__op(c->op), st->comm, st->stream);
    default: /* barrier: a one-int all-reduce, ordered like any other op */
        return ncclAllReduce(st->scratch, st->scratch, 1, ncclInt32, ncclSum, st->comm, st->stream);
    }
}

/* Queues one collective behind the compute stream's current work.  Caller
 * holds st->mu. */
static int enqueue_locked(struct dt_nccl *st, const struct coll *c, uint64_t *seq, double deadline)
{
    if (st->failed || !st->comm)
        return sticky(st);
    *seq = ++st->seq;
    cudaError_t e = cudaSetDevice(st->device);
    if (e == cudaSuccess)
        e = cudaEventRecord(st->ready, st->compute);
    if (e == cudaSuccess)
        e = cudaStreamWaitEvent(st->stream, st->ready, 0);
    if (e != cudaSuccess)
        return dt_nccl__cuda_error(e, st->rank, "cudaEventRecord/cudaStreamWaitEvent (input ready)");
    ncclResult_t r = issue(st, c);
    char what[64];
    snprintf(what, sizeof what, "%s #%llu", dt_coll_name(c->kind), (unsigned long long)*seq);
    if (r == ncclInProgress)
        return dt_nccl__settle_locked(st, what, deadline);
    if (r != ncclSuccess) {
        int rc = dt_nccl__nccl_error(r, st->rank, what);
        dt_nccl__abort_locked(st, rc, dt_error_last());
        return rc;
    }
    return 0;
}

/* One poll of the communicator's health for op `seq`.  Caller holds st->mu. */
static int poll_locked(struct dt_nccl *st, enum dt_coll_kind kind, uint64_t seq, double deadline)
{
    if (st->failed || !st->comm)
        return sticky(st);
    char msg[384];
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(st->comm, &state);
    if (r != ncclSuccess)
        state = r;
    if (state != ncclSuccess && state != ncclInProgress) {
        snprintf(msg, sizeof msg, "rank %d: %s #%llu (nccl): NCCL reported %s: %s (a peer rank may have died)",
                 st->rank, dt_coll_name(kind), (unsigned long long)seq, ncclGetErrorString(state),
                 ncclGetLastError(st->comm));
        int code = state == ncclRemoteError || state == ncclSystemError ? DT_ECONN : DT_EIO;
        dt_nccl__abort_locked(st, code, msg);
        return dt_error_set(code, "%s", msg);
    }
    if (atomic_load(&st->abort_requested)) {
        snprintf(msg, sizeof msg, "rank %d: %s #%llu (nccl): the communicator was aborted", st->rank,
                 dt_coll_name(kind), (unsigned long long)seq);
        dt_nccl__abort_locked(st, DT_EABORTED, msg);
        return dt_error_set(DT_EABORTED, "%s", msg);
    }
    if (dt_clock_s() > deadline) {
        snprintf(msg, sizeof msg,
                 "rank %d: %s #%llu (nccl): not finished after %.0f s; aborted the NCCL communicator so this "
                 "rank does not hang (a peer rank died or stopped calling collectives)",
                 st->rank, dt_coll_name(kind), (unsigned long long)seq, st->timeout_s);
        dt_nccl__abort_locked(st, DT_ETIMEDOUT, msg);
        return dt_error_set(DT_ETIMEDOUT, "%s", msg);
    }
    return 0;
}

/* 1: the event fired; 0: not yet; < 0: a CUDA error (the comm is aborted). */
static int query_event(struct dt_nccl *st, cudaEvent_t ev, enum dt_coll_kind kind, uint64_t seq)
{
    cudaError_t e = cudaEventQuery(ev);
    if (e == cudaSuccess)
        return 1;
    if (e == cudaErrorNotReady)
        return 0;
    char call[64];
    snprintf(call, sizeof call, "%s #%llu: cudaEventQuery", dt_coll_name(kind), (unsigned long long)seq);
    int rc = dt_nccl__cuda_error(e, st->rank, call);
    pthread_mutex_lock(&st->mu);
    dt_nccl__abort_locked(st, rc, dt_error_last());
    pthread_mutex_unlock(&st->mu);
    return rc;
}

/* Host memory (plain malloc, or pinned) is not a buffer NCCL may be handed. */
static bool on_host(const void *p)
{
    if (!p)
        return false;
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError(); /* older drivers fail on unregistered memory */
        return true;
    }
    return a.type == cudaMemoryTypeUnregistered || a.type == cudaMemoryTypeHost;
}

/* Bytes sent and received by c on this rank (comm.h's count conventions). */
static void coll_bytes(const struct dt_nccl *st, const struct coll *c, size_t *sb, size_t *rb)
{
    size_t b = c->count * dt_dtype_size(c->t);
    *sb = c->kind == DT_COLL_REDUCE_SCATTER ? b * st->world : c->kind == DT_COLL_BARRIER ? 0 : b;
    *rb = c->kind == DT_COLL_ALLGATHER ? b * st->world : c->kind == DT_COLL_BARRIER ? 0 : b;
}

/* Points dc at the staging buffer and copies the host input in.  The copy
 * back waits until the op is known to be done (a stuck op must not block the
 * host inside cudaMemcpy, past the deadline). */
static int stage_in(struct dt_nccl *st, const struct coll *c, struct coll *dc, size_t *rb)
{
    size_t sb;
    coll_bytes(st, c, &sb, rb);
    size_t off = (sb + 255) / 256 * 256;
    if (off + *rb > DT_NCCL__STAGE)
        return dt_error_set(DT_EINVAL,
                            "rank %d: %s (nccl): %zu bytes in host memory; NCCL needs device buffers (host buffers "
                            "are staged only up to %u bytes)",
                            st->rank, dt_coll_name(c->kind), sb + *rb, DT_NCCL__STAGE);
    char *d = st->stage;
    dc->send = d;
    dc->recv = c->kind == DT_COLL_BROADCAST ? d : d + off;
    cudaError_t e = cudaMemcpyAsync(d, c->kind == DT_COLL_BROADCAST ? c->recv : c->send, sb,
                                    cudaMemcpyHostToDevice, st->stream);
    return e == cudaSuccess ? 0 : dt_nccl__cuda_error(e, st->rank, "cudaMemcpyAsync (host buffer in)");
}

static int run_blocking(struct dt_nccl *st, const struct coll *c)
{
    double deadline = dt_clock_s() + st->timeout_s;
    uint64_t seq = 0;
    struct coll dc = *c;
    size_t rb = 0;
    bool staged = c->kind != DT_COLL_BARRIER && (on_host(c->send) || on_host(c->recv));
    pthread_mutex_lock(&st->mu);
    int rc = staged ? stage_in(st, c, &dc, &rb) : 0;
    if (rc == 0)
        rc = enqueue_locked(st, &dc, &seq, deadline);
    if (rc == 0) {
        cudaError_t e = cudaEventRecord(st->blocking_done, st->stream);
        if (e != cudaSuccess)
            rc = dt_nccl__cuda_error(e, st->rank, "cudaEventRecord (op done)");
    }
    pthread_mutex_unlock(&st->mu);
    for (int spins = 0; rc == 0;) {
        int q = query_event(st, st->blocking_done, c->kind, seq);
        pthread_mutex_lock(&st->mu);
        /* An abort also lets the event fire (the kernels were killed): the
         * data is then not the result, so the sticky failure wins. */
        rc = q < 0 ? q : q == 1 ? (st->failed ? sticky(st) : 0) : poll_locked(st, c->kind, seq, deadline);
        pthread_mutex_unlock(&st->mu);
        if (q == 1 || rc < 0)
            break;
        dt_nccl__pause(&spins);
    }
    if (rc == 0 && staged && rb) {
        cudaError_t e = cudaMemcpy(c->recv, dc.recv, rb, cudaMemcpyDeviceToHost);
        if (e != cudaSuccess)
            rc = dt_nccl__cuda_error(e, st->rank, "cudaMemcpy (host buffer out)");
    }
    return rc;
}

static int run_async(struct dt_nccl *st, const struct coll *c, struct dt_comm_req *req)
{
    double deadline = dt_clock_s() + st->timeout_s;
    if (c->kind != DT_COLL_BARRIER && (on_host(c->send) || on_host(c->recv)))
        return dt_error_set(DT_EINVAL, "rank %d: %s (nccl): async collectives need device buffers", st->rank,
                            dt_coll_name(c->kind));
    pthread_mutex_lock(&st->mu);
    if (st->len == DT_NCCL__RING) {
        pthread_mutex_unlock(&st->mu);
        return dt_error_set(DT_ENOMEM, "rank %d: %s (nccl): more than %d operations in flight", st->rank,
                            dt_coll_name(c->kind), DT_NCCL__RING);
    }
    struct dt_nccl_pending *p = &st->ring[(st->head + st->len) % DT_NCCL__RING];
    int rc = enqueue_locked(st, c, &p->seq, deadline);
    if (rc == 0) {
        cudaError_t e = cudaEventRecord(p->done, st->stream);
        if (e != cudaSuccess)
            rc = dt_nccl__cuda_error(e, st->rank, "cudaEventRecord (op done)");
    }
    if (rc == 0) {
        p->req = req;
        p->kind = c->kind;
        p->deadline = deadline;
        st->len++;
        pthread_cond_signal(&st->cv);
    }
    pthread_mutex_unlock(&st->mu);
    return rc;
}

/* Finishes the ring's head in order: the stream runs ops in order, so the
 * head is always the next to end.  On stop, what is left fails. */
void *dt_nccl__watcher_main(void *arg)
{
    struct dt_nccl *st = arg;
    cudaSetDevice(st->device);
    pthread_mutex_lock(&st->mu);
    for (int spins = 0;;) {
        while (!st->len && !st->stopping)
            pthread_cond_wait(&st->cv, &st->mu);
        if (!st->len)
            break;
        struct dt_nccl_pending p = st->ring[st->head];
        pthread_mutex_unlock(&st->mu);
        int q = query_event(st, p.done, p.kind, p.seq);
        pthread_mutex_lock(&st->mu);
        int rc = q < 0    ? q
                 : q == 1 ? (st->failed ? sticky(st) : 0)
                          : poll_locked(st, p.kind, p.seq, st->stopping ? 0 : p.deadline);
        if (q == 0 && rc == 0) {
            pthread_mutex_unlock(&st->mu);
            dt_nccl__pause(&spins);
            pthread_mutex_lock(&st->mu);
            continue;
        }
        spins = 0;
        st->head = (st->head + 1) % DT_NCCL__RING;
        st->len--;
        pthread_mutex_unlock(&st->mu);
        dt_comm_req_finish(p.req, rc);
        pthread_mutex_lock(&st->mu);
    }
    pthread_mutex_unlock(&st->mu);
    return NULL;
}

#define COLL(K, S, R, N, T, OP, ROOT) \
    (struct coll) { .kind = (K), .send = (S), .recv = (R), .count = (N), .t = (T), .op = (OP), .root = (ROOT) }

int dt_nccl_allreduce(void *st, const void *send, void *recv, size_t count, enum dt_dtype t, enum dt_redop op)
{
    return run_blocking(st, &COLL(DT_COLL_ALLREDUCE, send, recv, count, t, op, 0));
}

int dt_nccl_broadcast(void *st, void *buf, size_t count, enum dt_dtype t, int root)
{
    return run_blocking(st, &COLL(DT_COLL_BROADCAST, buf, buf, count, t, DT_SUM, root));
}

int dt_nccl_allgather(void *st, const void *send, void *recv, size_t count, enum dt_dtype t)
{
    return run_blocking(st, &COLL(DT_COLL_ALLGATHER, send, recv, count, t, DT_SUM, 0));
}

int dt_nccl_reduce_scatter(void *st, const void *send, void *recv, size_t count, enum dt_dtype t,
                           enum dt_redop op)
{
    return run_blocking(st, &COLL(DT_COLL_REDUCE_SCATTER, send, recv, count, t, op, 0));
}

int dt_nccl_barrier(void *st) { return run_blocking(st, &COLL(DT_COLL_BARRIER, NULL, NULL, 1, DT_I32, DT_SUM, 0)); }

int dt_nccl_iallreduce(void *st, const void *send, void *recv, size_t count, enum dt_dtype t, enum dt_redop op,
                       struct dt_comm_req *req)
{
    return run_async(st, &COLL(DT_COLL_ALLREDUCE, send, recv, count, t, op, 0), req);
}

int dt_nccl_ibarrier(void *st, struct dt_comm_req *req)
{
    return run_async(st, &COLL(DT_COLL_BARRIER, NULL, NULL, 1, DT_I32, DT_SUM, 0), req);
}
