/* mpi_allreduce.c - the Open MPI peer of bench/allreduce.sh: MPI_Allreduce
 * (float, sum, MPI_IN_PLACE) over a size sweep, timed like dtrain bench
 * (warm-up, barrier, `iters` back-to-back calls, mean per call averaged over
 * ranks), printing "size time_us busbw_GBps" rows.  One buffer, allocated
 * and touched once; whatever MPI allocates inside is MPI's business (that is
 * what the GLIBC_TUNABLES variant of the benchmark is about).
 *
 *   mpirun -np N mpi_allreduce MIN_BYTES MAX_BYTES FACTOR ITERS WARMUP
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (argc != 6) {
        if (rank == 0)
            fprintf(stderr, "usage: mpi_allreduce MIN_BYTES MAX_BYTES FACTOR ITERS WARMUP\n");
        MPI_Finalize();
        return 2;
    }
    size_t lo = strtoull(argv[1], 0, 10), hi = strtoull(argv[2], 0, 10);
    int factor = atoi(argv[3]), iters = atoi(argv[4]), warmup = atoi(argv[5]);
    float *buf = malloc(hi);
    memset(buf, 0, hi);
    for (size_t bytes = lo; bytes <= hi; bytes *= (size_t)factor) {
        int count = (int)(bytes / 4);
        for (int i = 0; i < count; i++)
            buf[i] = (float)((i + rank) % 7);
        for (int i = 0; i < warmup; i++)
            MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < iters; i++)
            MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double t = (MPI_Wtime() - t0) / iters, avg;
        MPI_Allreduce(&t, &avg, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        avg /= world;
        double busbw = (double)bytes / avg / 1e9 * 2.0 * (world - 1) / world;
        if (rank == 0)
            printf("%12zu %12.2f %8.3f\n", bytes, avg * 1e6, busbw);
    }
    free(buf);
    MPI_Finalize();
    return 0;
}
