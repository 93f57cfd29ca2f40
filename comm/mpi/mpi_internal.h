/* mpi_internal.h - the MPI backend's state, shared by its files only.
 *
 * mpi_backend.c starts MPI, checks that MPI's ranks are dtrain's ranks, and
 * tears down; mpi_coll.c runs the collectives through MPI's nonblocking calls
 * under a deadline; mpi_ops.c holds the reductions MPI lacks (f16 and bf16).
 * Not for users: they see comm.h only.
 */
#ifndef DT_MPI_INTERNAL_H
#define DT_MPI_INTERNAL_H

#include <stdatomic.h>
#include <stdint.h>

#include <mpi.h>

#include "comm/comm_backend.h"

struct dt_mpi {
    MPI_Comm comm; /* a duplicate of MPI_COMM_WORLD: our traffic never meets the program's */
    int rank, world;
    double timeout_s;
    uint64_t seq;      /* collectives started, for messages */
    atomic_int abort_requested;
    int failed;        /* sticky: after a failure only destroy() is allowed */
};

/* The MPI datatype and reduction for a dtrain dtype and op.  f16 and bf16
 * travel as 16-bit words and reduce through user-defined operations; AVG
 * reduces as SUM (the caller divides afterwards). */
MPI_Datatype dt_mpi__datatype(enum dt_dtype t);
MPI_Op dt_mpi__op(enum dt_dtype t, enum dt_redop op);
/* Creates the user-defined operations; once per process, after MPI_Init. */
int dt_mpi__ops_create(void);

/* A DT_E* error for an MPI return code, naming the rank and the call. */
int dt_mpi__error(int mpirc, int rank, const char *what);

/* Waits for `req` until it completes, the op's deadline passes or abort is
 * requested.  On failure marks the communicator failed and returns the code. */
int dt_mpi__wait(struct dt_mpi *st, MPI_Request *req, enum dt_coll_kind kind, uint64_t seq);

/* True when some communicator of this process failed or was aborted: the
 * process must then not call MPI_Finalize (it would wait for peers that wait
 * for it); leaving without it makes mpirun end the whole job. */
extern atomic_int dt_mpi__tainted;

int dt_mpi__allreduce(void *st, const void *send, void *recv, size_t count, enum dt_dtype t, enum dt_redop op);
int dt_mpi__broadcast(void *st, void *buf, size_t count, enum dt_dtype t, int root);
int dt_mpi__allgather(void *st, const void *send, void *recv, size_t count, enum dt_dtype t);
int dt_mpi__reduce_scatter(void *st, const void *send, void *recv, size_t count, enum dt_dtype t,
                          enum dt_redop op);
int dt_mpi__barrier(void *st);

#endif
