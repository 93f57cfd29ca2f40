/* nccl_comm.h - what a GPU program needs beyond comm.h when the communicator
 * runs on NCCL: which stream the collectives wait for, which stream they run
 * on, and device memory for programs (the all-reduce self-test, tests) that
 * must not depend on worker/.
 *
 * Streams.  Collectives run on a communication stream of their own (created
 * with the highest priority, non-blocking against the legacy stream), never on
 * the compute stream, so a bucket's all-reduce overlaps the backward pass of
 * earlier layers.  Each collective, blocking or async, first waits (on the
 * device, through an event) for the work queued so far on the compute stream:
 * that is the "input is ready" point, so a caller enqueues the kernels that
 * write a bucket, then calls dt_comm_iallreduce(), and nothing on the host
 * waits.  Before the optimizer reads the reduced gradients, the compute
 * stream waits for the communication stream (dt_nccl_stream_wait_comm), again
 * on the device.  dt_comm_wait() also works: it returns once the collective
 * finished on the device (a watcher thread observes the events).
 *
 * Only built with CUDA (DT_HAVE_CUDA).  Not for collectives: see comm.h.
 */
#ifndef DT_NCCL_COMM_H
#define DT_NCCL_COMM_H

#include <stddef.h>

#include <cuda_runtime_api.h>

#include "comm/comm.h"

/* Sets the stream whose queued work every later collective waits for
 * (default: the legacy default stream, 0).  Fails with DT_EINVAL when `c`
 * does not run on NCCL. */
int dt_nccl_set_compute_stream(struct dt_comm *c, cudaStream_t compute);

/* The communication stream of `c` (NULL when `c` is not an NCCL communicator). */
cudaStream_t dt_nccl_comm_stream(struct dt_comm *c);

/* Makes `s` wait, on the device, for every collective issued so far on `c`. */
int dt_nccl_stream_wait_comm(struct dt_comm *c, cudaStream_t s);

/* Enqueues an all-reduce of the device buffer buf[0..count) in place on
 * stream `s` with no input-ready event and no watcher: the caller orders it
 * (events) and may capture it in a CUDA graph.  The trainer's buckets use it
 * on the communication stream; dt_nccl_wait_stream() bounds the wait. */
int dt_nccl_allreduce_stream(struct dt_comm *c, void *buf, size_t count, enum dt_dtype t, enum dt_redop op,
                             cudaStream_t s);
/* The same for an all-gather in place: rank r's `count` elements at
 * buf + r * count, every rank's into buf[0, world * count) (ZeRO-1's
 * parameters after each rank updated its shard). */
int dt_nccl_allgather_stream(struct dt_comm *c, void *buf, size_t count, enum dt_dtype t, cudaStream_t s);

/* Waits for the work queued so far on `s`, polling NCCL's asynchronous error,
 * dt_comm_abort() and the communicator's timeout, so a dead peer makes this
 * rank abort its communicator and return DT_ETIMEDOUT, DT_ECONN or
 * DT_EABORTED (naming `what`) instead of hanging. */
int dt_nccl_wait_stream(struct dt_comm *c, cudaStream_t s, const char *what);
/* The same for an event already recorded (cudaEventSynchronize, bounded). */
int dt_nccl_wait_event(struct dt_comm *c, cudaEvent_t ev, const char *what);

/* The CUDA device the communicator uses. */
int dt_nccl_device(struct dt_comm *c);

/* Device memory for callers outside worker/ (bench, tests): plain cudaMalloc,
 * copies of any direction (cudaMemcpyDefault) that finish before returning. */
int dt_nccl_device_count(int *n);
int dt_nccl_mem_alloc(void **p, size_t bytes);
void dt_nccl_mem_free(void *p);
int dt_nccl_mem_copy(void *dst, const void *src, size_t bytes);
int dt_nccl_mem_set(void *p, int byte, size_t bytes);
/* "[0000:1a:00] NVIDIA H200": device `dev` as nccl-tests prints it. */
int dt_nccl_device_name(int dev, char *buf, size_t len);
/* Device twins of a harness's host buffers (the self-test fills and checks
 * host memory, and times the collectives on device memory): `in` copies the
 * host buffers to the device and points *send and *recv at the device copies,
 * `out` copies the results back and points them at the host buffers again. */
struct dt_nccl_mirror {
    char *host_send, *host_recv, *dev_send, *dev_recv;
    size_t bytes;
};
int dt_nccl_mirror_init(struct dt_nccl_mirror *m, char *host_send, char *host_recv, size_t bytes);
int dt_nccl_mirror_in(struct dt_nccl_mirror *m, char **send, char **recv, size_t send_bytes, size_t recv_bytes);
int dt_nccl_mirror_out(struct dt_nccl_mirror *m, char **send, char **recv, size_t send_bytes, size_t recv_bytes);
void dt_nccl_mirror_release(struct dt_nccl_mirror *m);

/* NCCL's version code as ncclGetVersion returns it (22809 for 2.28.9). */
int dt_nccl_version(void);

#endif
