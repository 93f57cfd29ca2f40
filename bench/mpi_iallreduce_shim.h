/* mpi_iallreduce_shim.h - turns bench/mpi_allreduce.c into the nonblocking
 * peer of bench/mpi_backend.sh: with `mpicc -include` this header, every
 * MPI_Allreduce there becomes MPI_Iallreduce + MPI_Wait, i.e. Open MPI's
 * nonblocking algorithms (coll/libnbc), the ones dtrain's MPI backend runs
 * (it starts each collective nonblocking so it can keep a deadline).
 */
#include <mpi.h>

static inline int dt_bench_iallreduce_wait(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c)
{
    MPI_Request q;
    int rc = MPI_Iallreduce(s, r, n, t, op, c, &q);
    return rc == MPI_SUCCESS ? MPI_Wait(&q, MPI_STATUS_IGNORE) : rc;
}
#define MPI_Allreduce dt_bench_iallreduce_wait
