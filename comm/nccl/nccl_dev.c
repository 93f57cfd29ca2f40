/* nccl_dev.c - the stream controls and device helpers of nccl_comm.h.
 *
 * The helpers exist so that comm/ users that must not link worker/ (the
 * all-reduce self-test, the GPU tests) can place buffers on the GPU.  Not for
 * the trainer's memory (worker/cuda/ owns that).
 */
#include <stdio.h>

#include "base/error.h"
#include "comm/nccl/nccl_comm.h"
#include "comm/nccl/nccl_internal.h"
#include "base/clock.h"

static struct dt_nccl *state_of(struct dt_comm *c)
{
    return dt_comm_backend_state(c, &dt_comm_backend_nccl);
}

int dt_nccl_set_compute_stream(struct dt_comm *c, cudaStream_t compute)
{
    struct dt_nccl *st = state_of(c);
    if (!st)
        return dt_error_set(DT_EINVAL, "dt_nccl_set_compute_stream: the communicator does not run on nccl");
    pthread_mutex_lock(&st->mu);
    st->compute = compute;
    pthread_mutex_unlock(&st->mu);
    return 0;
}

cudaStream_t dt_nccl_comm_stream(struct dt_comm *c)
{
    struct dt_nccl *st = state_of(c);
    return st ? st->stream : NULL;
}

int dt_nccl_device(struct dt_comm *c)
{
    struct dt_nccl *st = state_of(c);
    return st ? st->device : -1;
}

int dt_nccl_stream_wait_comm(struct dt_comm *c, cudaStream_t s)
{
    struct dt_nccl *st = state_of(c);
    if (!st)
        return dt_error_set(DT_EINVAL, "dt_nccl_stream_wait_comm: the communicator does not run on nccl");
    /* A fresh event per call would allocate; `ready` is free between ops
     * because cudaStreamWaitEvent captures the event's state when called. */
    pthread_mutex_lock(&st->mu);
    cudaError_t e = cudaEventRecord(st->ready, st->stream);
    if (e == cudaSuccess)
        e = cudaStreamWaitEvent(s, st->ready, 0);
    pthread_mutex_unlock(&st->mu);
    return e == cudaSuccess ? 0 : dt_nccl__cuda_error(e, st->rank, "cudaStreamWaitEvent (compute waits for comm)");
}

/* A collective enqueued on stream s under st->mu: refused on a failed or
 * aborted communicator; ncclInProgress (non-blocking communicators) settled
 * within the timeout; any other error aborts the communicator, so every later
 * call and wait fails at once instead of hanging on a half-launched step. */
enum stream_coll { COLL_ALLREDUCE, COLL_ALLGATHER };

static int enqueue_locked(struct dt_nccl *st, enum stream_coll k, void *buf, size_t count, enum dt_dtype t,
                          enum dt_redop op, cudaStream_t s)
{
    if (st->failed || !st->comm)
        return dt_error_set(st->failed ? st->failed : DT_EABORTED, "%s",
                            st->why[0] ? st->why : "nccl: the communicator was aborted");
    ncclResult_t r;
    if (k == COLL_ALLREDUCE) {
        r = ncclAllReduce(buf, buf, count, dt_nccl__type(t), dt_nccl__op(op), st->comm, s);
    } else { /* in place: this rank's shard is already at its offset of buf */
        const char *send = (const char *)buf + (size_t)st->rank * count * dt_dtype_size(t);
        r = ncclAllGather(send, buf, count, dt_nccl__type(t), st->comm, s);
    }
    const char *what = k == COLL_ALLREDUCE ? "gradient bucket all-reduce" : "parameter all-gather";
    if (r == ncclInProgress)
        return dt_nccl__settle_locked(st, what, dt_clock_s() + st->timeout_s);
    if (r == ncclSuccess)
        return 0;
    int rc = dt_nccl__nccl_error(r, st->rank,
                                 k == COLL_ALLREDUCE ? "ncclAllReduce (gradient bucket)"
                                                     : "ncclAllGather (parameter shards)");
    dt_nccl__abort_locked(st, rc, dt_error_last());
    return rc;
}

int dt_nccl_allreduce_stream(struct dt_comm *c, void *buf, size_t count, enum dt_dtype t, enum dt_redop op,
                             cudaStream_t s)
{
    struct dt_nccl *st = state_of(c);
    if (!st)
        return dt_error_set(DT_EINVAL, "dt_nccl_allreduce_stream: the communicator does not run on nccl");
    pthread_mutex_lock(&st->mu);
    int rc = enqueue_locked(st, COLL_ALLREDUCE, buf, count, t, op, s);
    pthread_mutex_unlock(&st->mu);
    return rc;
}

int dt_nccl_allgather_stream(struct dt_comm *c, void *buf, size_t count, enum dt_dtype t, cudaStream_t s)
{
    struct dt_nccl *st = state_of(c);
    if (!st)
        return dt_error_set(DT_EINVAL, "dt_nccl_allgather_stream: the communicator does not run on nccl");
    pthread_mutex_lock(&st->mu);
    int rc = enqueue_locked(st, COLL_ALLGATHER, buf, count, t, DT_SUM, s);
    pthread_mutex_unlock(&st->mu);
    return rc;
}

/* One poll: 1 done, 0 not yet, < 0 failed (the communicator is then aborted). */
static int wait_poll_locked(struct dt_nccl *st, cudaEvent_t ev, const char *what, double deadline)
{
    if (st->failed || !st->comm)
        return dt_error_set(st->failed ? st->failed : DT_EABORTED, "%s", st->why);
    cudaError_t e = cudaEventQuery(ev);
    if (e == cudaSuccess)
        return 1;
    char msg[384];
    if (e != cudaErrorNotReady) {
        int rc = dt_nccl__cuda_error(e, st->rank, what);
        dt_nccl__abort_locked(st, rc, dt_error_last());
        return rc;
    }
    ncclResult_t state = ncclSuccess;
    if (ncclCommGetAsyncError(st->comm, &state) != ncclSuccess || (state != ncclSuccess && state != ncclInProgress)) {
        snprintf(msg, sizeof msg, "rank %d: %s (nccl): NCCL reported %s (a peer rank may have died)", st->rank, what,
                 ncclGetErrorString(state));
        dt_nccl__abort_locked(st, DT_ECONN, msg);
        return dt_error_set(DT_ECONN, "%s", msg);
    }
    return dt_nccl__give_up_locked(st, what, deadline,
                                   "so this rank does not hang (a peer rank died or stopped calling collectives)");
}

int dt_nccl_wait_event(struct dt_comm *c, cudaEvent_t ev, const char *what)
{
    struct dt_nccl *st = state_of(c);
    if (!st)
        return dt_error_set(DT_EINVAL, "dt_nccl_wait_event: the communicator does not run on nccl");
    double deadline = dt_clock_s() + st->timeout_s;
    int spins = 0, rc;
    for (;;) {
        pthread_mutex_lock(&st->mu);
        rc = wait_poll_locked(st, ev, what, deadline);
        pthread_mutex_unlock(&st->mu);
        if (rc)
            break;
        dt_nccl__pause(&spins);
    }
    return rc < 0 ? rc : 0;
}

int dt_nccl_wait_stream(struct dt_comm *c, cudaStream_t s, const char *what)
{
    struct dt_nccl *st = state_of(c);
    if (!st)
        return dt_error_set(DT_EINVAL, "dt_nccl_wait_stream: the communicator does not run on nccl");
    cudaEvent_t ev;
    cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e == cudaSuccess && (e = cudaEventRecord(ev, s)) != cudaSuccess)
        cudaEventDestroy(ev);
    if (e != cudaSuccess)
        return dt_nccl__cuda_error(e, st->rank, "cudaEventRecord (waiting for the device)");
    int rc = dt_nccl_wait_event(c, ev, what);
    cudaEventDestroy(ev);
    return rc;
}

int dt_nccl_device_count(int *n)
{
    *n = 0;
    cudaError_t e = cudaGetDeviceCount(n);
    if (e != cudaSuccess) {
        *n = 0;
        return dt_error_set(DT_EUNSUPPORTED, "no usable CUDA device: cudaGetDeviceCount: %s", cudaGetErrorString(e));
    }
    return 0;
}

int dt_nccl_mem_alloc(void **p, size_t bytes)
{
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        *p = NULL;
        return dt_error_set(DT_ENOMEM, "cudaMalloc of %zu bytes failed: %s", bytes, cudaGetErrorString(e));
    }
    return 0;
}

void dt_nccl_mem_free(void *p)
{
    if (p)
        cudaFree(p);
}

int dt_nccl_mem_copy(void *dst, const void *src, size_t bytes)
{
    cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
    return e == cudaSuccess ? 0 : dt_error_set(DT_EIO, "cudaMemcpy of %zu bytes failed: %s", bytes,
                                               cudaGetErrorString(e));
}

int dt_nccl_mem_set(void *p, int byte, size_t bytes)
{
    cudaError_t e = cudaMemset(p, byte, bytes);
    if (e == cudaSuccess)
        e = cudaDeviceSynchronize();
    return e == cudaSuccess ? 0 : dt_error_set(DT_EIO, "cudaMemset of %zu bytes failed: %s", bytes,
                                               cudaGetErrorString(e));
}

int dt_nccl_device_name(int dev, char *buf, size_t len)
{
    struct cudaDeviceProp prop;
    cudaError_t e = cudaGetDeviceProperties(&prop, dev);
    if (e != cudaSuccess)
        return dt_error_set(DT_EINVAL, "cudaGetDeviceProperties(%d) failed: %s", dev, cudaGetErrorString(e));
    snprintf(buf, len, "[%04x:%02x:%02x] %s", prop.pciDomainID, prop.pciBusID, prop.pciDeviceID, prop.name);
    return 0;
}

int dt_nccl_version(void)
{
    int v = 0;
    return ncclGetVersion(&v) == ncclSuccess ? v : 0;
}

int dt_nccl_mirror_init(struct dt_nccl_mirror *m, char *host_send, char *host_recv, size_t bytes)
{
    *m = (struct dt_nccl_mirror){.host_send = host_send, .host_recv = host_recv, .bytes = bytes};
    int rc = dt_nccl_mem_alloc((void **)&m->dev_send, bytes);
    if (rc == 0)
        rc = dt_nccl_mem_alloc((void **)&m->dev_recv, bytes);
    if (rc == 0)
        rc = dt_nccl_mem_set(m->dev_send, 0, bytes);
    if (rc == 0)
        rc = dt_nccl_mem_set(m->dev_recv, 0, bytes);
    if (rc < 0)
        dt_nccl_mirror_release(m);
    return rc;
}

int dt_nccl_mirror_in(struct dt_nccl_mirror *m, char **send, char **recv, size_t send_bytes, size_t recv_bytes)
{
    int rc = dt_nccl_mem_copy(m->dev_send, m->host_send, send_bytes);
    if (rc == 0)
        rc = dt_nccl_mem_copy(m->dev_recv, m->host_recv, recv_bytes);
    *send = m->dev_send;
    *recv = m->dev_recv;
    return rc;
}

int dt_nccl_mirror_out(struct dt_nccl_mirror *m, char **send, char **recv, size_t send_bytes, size_t recv_bytes)
{
    int rc = dt_nccl_mem_copy(m->host_send, m->dev_send, send_bytes);
    if (rc == 0)
        rc = dt_nccl_mem_copy(m->host_recv, m->dev_recv, recv_bytes);
    *send = m->host_send;
    *recv = m->host_recv;
    return rc;
}

void dt_nccl_mirror_release(struct dt_nccl_mirror *m)
{
    dt_nccl_mem_free(m->dev_send);
    dt_nccl_mem_free(m->dev_recv);
    m->dev_send = m->dev_recv = NULL;
}
