/* mpi_ops.c - dtrain's dtypes and reductions as MPI datatypes and MPI_Ops.
 *
 * MPI has no 16-bit floats (MPI 4.1 names none; Open MPI 4.1 has no
 * MPIX_C_FLOAT16 we could rely on), so f16 and bf16 travel as MPI_UINT16_T and
 * reduce through user-defined, commutative operations that call comm/reduce.c:
 * each pairwise step widens to fp32, combines and rounds back to nearest-even,
 * exactly as the tcp and shm backends do.  MPI calls a user function as
 * f(in, inout, len): inout[i] = in[i] op inout[i].
 *
 * Not for running collectives (mpi_coll.c).
 */
#include "base/error.h"
#include "comm/mpi/mpi_internal.h"
#include "comm/reduce.h"

/* [0] f16, [1] bf16; x SUM, MAX, MIN (AVG uses SUM). */
static MPI_Op half_ops[2][3];
static int ops_ready;

#define HALF_OP(NAME, T, OP)                                                       \
    static void NAME(void *in, void *inout, int *len, MPI_Datatype *dt)            \
    {                                                                              \
        (void)dt;                                                                  \
        dt_reduce((T), (OP), inout, in, inout, (size_t)*len);                      \
    }
HALF_OP(f16_sum, DT_F16, DT_SUM)
HALF_OP(f16_max, DT_F16, DT_MAX)
HALF_OP(f16_min, DT_F16, DT_MIN)
HALF_OP(bf16_sum, DT_BF16, DT_SUM)
HALF_OP(bf16_max, DT_BF16, DT_MAX)
HALF_OP(bf16_min, DT_BF16, DT_MIN)

int dt_mpi__ops_create(void)
{
    if (ops_ready)
        return 0;
    MPI_User_function *fns[2][3] = {{f16_sum, f16_max, f16_min}, {bf16_sum, bf16_max, bf16_min}};
    for (int t = 0; t < 2; t++)
        for (int k = 0; k < 3; k++) {
            int rc = MPI_Op_create(fns[t][k], 1, &half_ops[t][k]);
            if (rc != MPI_SUCCESS)
                return dt_mpi__error(rc, -1, "MPI_Op_create (16-bit float reductions)");
        }
    ops_ready = 1;
    return 0;
}

MPI_Datatype dt_mpi__datatype(enum dt_dtype t)
{
    switch (t) {
    case DT_F32: return MPI_FLOAT;
    case DT_F64: return MPI_DOUBLE;
    case DT_I32: return MPI_INT32_T;
    case DT_I64: return MPI_INT64_T;
    case DT_F16:
    case DT_BF16: return MPI_UINT16_T;
    default: return MPI_DATATYPE_NULL;
    }
}

MPI_Op dt_mpi__op(enum dt_dtype t, enum dt_redop op)
{
    int k = op == DT_MAX ? 1 : op == DT_MIN ? 2 : 0;
    if (t == DT_F16 || t == DT_BF16)
        return half_ops[t == DT_BF16][k];
    return k == 1 ? MPI_MAX : k == 2 ? MPI_MIN : MPI_SUM;
}

int dt_mpi__error(int mpirc, int rank, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    if (MPI_Error_string(mpirc, msg, &len) != MPI_SUCCESS)
        msg[0] = 0;
    /* MPI reports a vanished peer as a communication failure; the rest are local. */
    int cls = 0;
    MPI_Error_class(mpirc, &cls);
    int code = cls == MPI_ERR_OTHER || cls == MPI_ERR_INTERN ? DT_EIO : cls == MPI_ERR_ARG ? DT_EINVAL : DT_ECONN;
    if (rank < 0)
        return dt_error_set(code, "mpi: %s failed: %s (MPI error %d)", what, msg, mpirc);
    return dt_error_set(code, "rank %d: %s (mpi) failed: %s (MPI error %d)", rank, what, msg, mpirc);
}
