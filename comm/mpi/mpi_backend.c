/* mpi_backend.c - `backend: mpi`: the communicator on top of an MPI library
 * (Open MPI 4.1), for clusters where MPI is the network stack people trust.
 *
 * MPI wires its ranks itself, so this backend does not bootstrap through the
 * store: the ranks must be MPI processes that mpirun (or srun --mpi=pmix)
 * started, and MPI's rank and size must be dtrain's rank and world, which
 * `scheduler: mpirun` arranges (-np = world size).  init() says so plainly
 * instead of letting MPI fall back to a one-rank "singleton".
 *
 * Lifetime.  MPI can be initialised once per process, so MPI_Init_thread runs
 * at the first communicator and MPI_Finalize at exit (on_exit), and each
 * communicator is a duplicate of MPI_COMM_WORLD (made with MPI_Comm_idup,
 * under the deadline).  MPI_Finalize waits for every rank to reach it, so a
 * process leaving after a failure (non-zero status, or any communicator that
 * failed or was aborted) skips it: mpirun sees a rank end without finalizing
 * and ends the whole job, which is the failure semantics comm.h wants.
 *
 * Not for the collectives (mpi_coll.c) or the 16-bit reductions (mpi_ops.c).
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "comm/mpi/mpi_internal.h"

atomic_int dt_mpi__tainted;

static void finalize_at_exit(int status, void *arg)
{
    (void)arg;
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (inited && !finalized && status == 0 && !atomic_load(&dt_mpi__tainted))
        MPI_Finalize();
}

/* Started by an MPI launcher?  Open MPI's mpirun sets OMPI_COMM_WORLD_SIZE,
 * PMIx launchers (srun --mpi=pmix, prterun) PMIX_RANK, MPICH's Hydra PMI_RANK. */
static bool launched_by_mpi(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK");
}

static int start_mpi(int rank)
{
    int inited = 0, finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized)
        return dt_error_set(DT_EUNSUPPORTED, "rank %d: mpi: MPI was already finalized in this process", rank);
    MPI_Initialized(&inited);
    if (!inited) {
        int provided = 0;
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
        if (rc != MPI_SUCCESS)
            return dt_mpi__error(rc, rank, "MPI_Init_thread");
        on_exit(finalize_at_exit, NULL);
        if (provided < MPI_THREAD_SERIALIZED)
            return dt_error_set(DT_EUNSUPPORTED,
                                "rank %d: mpi: the MPI library gives thread level %d, but dtrain's communication "
                                "thread needs MPI_THREAD_SERIALIZED (%d)",
                                rank, provided, MPI_THREAD_SERIALIZED);
    }
    /* Errors come back as codes (then messages), not as MPI's default abort. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    return dt_mpi__ops_create();
}

static int check_world(const struct dt_comm_options *o)
{
    int mrank = -1, msize = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &mrank);
    MPI_Comm_size(MPI_COMM_WORLD, &msize);
    if (mrank != o->rank || msize != o->world)
        return dt_error_set(DT_EINVAL,
                            "rank %d: mpi: MPI says this process is rank %d of %d, but dtrain was told rank %d of "
                            "%d; with backend: mpi, mpirun must start every rank itself (-np = world size)",
                            o->rank, mrank, msize, o->rank, o->world);
    return 0;
}

static int mpi_init(const struct dt_comm_options *o, void **out)
{
    if (!launched_by_mpi())
        return dt_error_set(DT_EUNSUPPORTED,
                            "rank %d: mpi: this process was not started by mpirun (no OMPI_COMM_WORLD_SIZE, "
                            "PMIX_RANK or PMI_RANK in its environment); backend: mpi needs scheduler: mpirun",
                            o->rank);
    int rc = start_mpi(o->rank);
    if (rc == 0)
        rc = check_world(o);
    if (rc)
        return rc;
    struct dt_mpi *st = calloc(1, sizeof *st);
    if (!st)
        return dt_error_set(DT_ENOMEM, "rank %d: mpi: out of memory", o->rank);
    st->rank = o->rank;
    st->world = o->world;
    st->timeout_s = o->timeout_s;
    MPI_Request req;
    rc = MPI_Comm_idup(MPI_COMM_WORLD, &st->comm, &req);
    rc = rc != MPI_SUCCESS ? dt_mpi__error(rc, o->rank, "MPI_Comm_idup") : dt_mpi__wait(st, &req, DT_COLL_BARRIER, 0);
    if (rc) {
        atomic_store(&dt_mpi__tainted, 1);
        free(st);
        return dt_error_prefix("rank %d: mpi: duplicating MPI_COMM_WORLD", o->rank);
    }
    *out = st;
    return 0;
}

static void mpi_abort(void *p)
{
    struct dt_mpi *st = p;
    atomic_store(&st->abort_requested, 1);
    atomic_store(&dt_mpi__tainted, 1);
}

static void mpi_destroy(void *p)
{
    struct dt_mpi *st = p;
    /* After a failure a request may still be pending on comm: leave it. */
    if (!st->failed && !atomic_load(&st->abort_requested))
        MPI_Comm_free(&st->comm);
    free(st);
}

const struct dt_comm_backend dt_comm_backend_mpi = {
    .name = "mpi",
    .init = mpi_init,
    .allreduce = dt_mpi__allreduce,
    .broadcast = dt_mpi__broadcast,
    .allgather = dt_mpi__allgather,
    .reduce_scatter = dt_mpi__reduce_scatter,
    .barrier = dt_mpi__barrier,
    .abort = mpi_abort,
    .destroy = mpi_destroy,
    .self_bootstrap = true,
};
