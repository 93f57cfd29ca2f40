/* mpi_coll.c - the collectives of the MPI backend: MPI_Iallreduce and
 * friends, waited for under the operation's deadline.
 *
 * Why the nonblocking calls even for blocking collectives: MPI's blocking
 * calls have no deadline and cannot be interrupted, while comm.h promises
 * that every operation ends (DT_ETIMEDOUT, DT_EABORTED) instead of hanging.
 * So each collective is started with MPI_I* and polled with MPI_Test, which is
 * also what drives Open MPI's progress engine.  A peer that dies is noticed by
 * mpirun, which ends every rank of the job; a peer that only stalls makes the
 * others fail at the deadline.
 *
 * MPI counts are ints: allreduce and broadcast are split into pieces of at
 * most 2^30 elements; allgather and reduce_scatter refuse counts past INT_MAX.
 * comm.c runs the async forms on its communication thread, one at a time, so
 * MPI needs only MPI_THREAD_SERIALIZED.
 *
 * Not for bootstrap or teardown (mpi_backend.c) or the f16/bf16 reductions
 * (mpi_ops.c).
 */
#include <limits.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "comm/mpi/mpi_internal.h"
#include "comm/reduce.h"
#include "base/clock.h"

#define PIECE ((size_t)1 << 30)

static void pause_step(void)
{
    /* MPI_Test is Open MPI's progress engine: a large message moves only
     * while some call polls, so this waits as MPI_Wait does, polling and
     * yielding the core (what Open MPI itself does when oversubscribed),
     * never sleeping: a sleep between polls stalls every fragment of a
     * pipelined transfer (measured: 256 KiB over shared memory took 50x
     * longer with a 20 us sleep). */
    sched_yield();
}

static int fail(struct dt_mpi *st, int code)
{
    st->failed = code;
    atomic_store(&dt_mpi__tainted, 1);
    return code;
}

int dt_mpi__wait(struct dt_mpi *st, MPI_Request *req, enum dt_coll_kind kind, uint64_t seq)
{
    double deadline = dt_clock_s() + st->timeout_s;
    for (;;) {
        int done = 0;
        int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
            char what[64];
            snprintf(what, sizeof what, "%s #%llu", dt_coll_name(kind), (unsigned long long)seq);
            return fail(st, dt_mpi__error(rc, st->rank, what));
        }
        if (done)
            return 0;
        if (atomic_load(&st->abort_requested))
            return fail(st, dt_error_set(DT_EABORTED, "rank %d: %s #%llu (mpi): the communicator was aborted",
                                         st->rank, dt_coll_name(kind), (unsigned long long)seq));
        if (dt_clock_s() > deadline)
            return fail(st, dt_error_set(DT_ETIMEDOUT,
                                         "rank %d: %s #%llu (mpi): not finished after %.0f s; some peer rank of "
                                         "the %d is stalled or stuck (MPI does not say which)",
                                         st->rank, dt_coll_name(kind), (unsigned long long)seq, st->timeout_s,
                                         st->world));
        pause_step();
    }
}

/* Common start of every collective: refuses to run after a failure. */
static int begin(struct dt_mpi *st, enum dt_coll_kind kind, uint64_t *seq)
{
    *seq = ++st->seq;
    if (st->failed)
        return dt_error_set(st->failed, "rank %d: %s #%llu (mpi): the communicator failed earlier", st->rank,
                            dt_coll_name(kind), (unsigned long long)*seq);
    if (atomic_load(&st->abort_requested))
        return fail(st, dt_error_set(DT_EABORTED, "rank %d: %s #%llu (mpi): the communicator was aborted",
                                     st->rank, dt_coll_name(kind), (unsigned long long)*seq));
    return 0;
}

static int started(struct dt_mpi *st, int mpirc, MPI_Request *req, enum dt_coll_kind kind, uint64_t seq)
{
    if (mpirc != MPI_SUCCESS) {
        char what[64];
        snprintf(what, sizeof what, "%s #%llu", dt_coll_name(kind), (unsigned long long)seq);
        return fail(st, dt_mpi__error(mpirc, st->rank, what));
    }
    return dt_mpi__wait(st, req, kind, seq);
}

int dt_mpi__allreduce(void *p, const void *send, void *recv, size_t count, enum dt_dtype t, enum dt_redop op)
{
    struct dt_mpi *st = p;
    uint64_t seq;
    int rc = begin(st, DT_COLL_ALLREDUCE, &seq);
    size_t es = dt_dtype_size(t);
    for (size_t at = 0; rc == 0 && at < count; at += PIECE) {
        size_t n = count - at < PIECE ? count - at : PIECE;
        char *dst = (char *)recv + at * es;
        const void *src = send == recv ? MPI_IN_PLACE : (const char *)send + at * es;
        MPI_Request req;
        rc = started(st, MPI_Iallreduce(src, dst, (int)n, dt_mpi__datatype(t), dt_mpi__op(t, op), st->comm, &req),
                     &req, DT_COLL_ALLREDUCE, seq);
    }
    if (rc == 0)
        dt_reduce_finish(t, op, recv, count, st->world);
    return rc;
}

int dt_mpi__broadcast(void *p, void *buf, size_t count, enum dt_dtype t, int root)
{
    struct dt_mpi *st = p;
    uint64_t seq;
    int rc = begin(st, DT_COLL_BROADCAST, &seq);
    size_t es = dt_dtype_size(t);
    for (size_t at = 0; rc == 0 && at < count; at += PIECE) {
        size_t n = count - at < PIECE ? count - at : PIECE;
        MPI_Request req;
        rc = started(st, MPI_Ibcast((char *)buf + at * es, (int)n, dt_mpi__datatype(t), root, st->comm, &req),
                     &req, DT_COLL_BROADCAST, seq);
    }
    return rc;
}

static int too_many(struct dt_mpi *st, enum dt_coll_kind kind, uint64_t seq, size_t count)
{
    return dt_error_set(DT_EINVAL, "rank %d: %s #%llu (mpi): %zu elements per rank is more than MPI's int count "
                                   "allows (%d)",
                        st->rank, dt_coll_name(kind), (unsigned long long)seq, count, INT_MAX);
}

int dt_mpi__allgather(void *p, const void *send, void *recv, size_t count, enum dt_dtype t)
{
    struct dt_mpi *st = p;
    uint64_t seq;
    int rc = begin(st, DT_COLL_ALLGATHER, &seq);
    if (rc || count == 0)
        return rc;
    if (count > INT_MAX)
        return too_many(st, DT_COLL_ALLGATHER, seq, count);
    size_t es = dt_dtype_size(t), bytes = count * es;
    char *mine = (char *)recv + (size_t)st->rank * bytes;
    /* If send lies inside recv, MPI's in-place form: our block already sits at
     * its place in recv once moved there. */
    const char *s = send;
    bool overlap = s < (char *)recv + bytes * (size_t)st->world && s + bytes > (char *)recv;
    if (overlap && s != mine)
        memmove(mine, s, bytes);
    MPI_Datatype dt = dt_mpi__datatype(t);
    MPI_Request req;
    return started(st,
                   MPI_Iallgather(overlap ? MPI_IN_PLACE : send, (int)count, dt, recv, (int)count, dt, st->comm,
                                  &req),
                   &req, DT_COLL_ALLGATHER, seq);
}

int dt_mpi__reduce_scatter(void *p, const void *send, void *recv, size_t count, enum dt_dtype t, enum dt_redop op)
{
    struct dt_mpi *st = p;
    uint64_t seq;
    int rc = begin(st, DT_COLL_REDUCE_SCATTER, &seq);
    if (rc || count == 0)
        return rc;
    if (count > INT_MAX)
        return too_many(st, DT_COLL_REDUCE_SCATTER, seq, count);
    /* In place (send == recv): MPI reads all blocks from recv and leaves this
     * rank's result at its start, which is where comm.h wants it. */
    MPI_Request req;
    rc = started(st,
                 MPI_Ireduce_scatter_block(send == recv ? MPI_IN_PLACE : send, recv, (int)count, dt_mpi__datatype(t),
                                           dt_mpi__op(t, op), st->comm, &req),
                 &req, DT_COLL_REDUCE_SCATTER, seq);
    if (rc == 0)
        dt_reduce_finish(t, op, recv, count, st->world);
    return rc;
}

int dt_mpi__barrier(void *p)
{
    struct dt_mpi *st = p;
    uint64_t seq;
    int rc = begin(st, DT_COLL_BARRIER, &seq);
    if (rc)
        return rc;
    MPI_Request req;
    return started(st, MPI_Ibarrier(st->comm, &req), &req, DT_COLL_BARRIER, seq);
}
