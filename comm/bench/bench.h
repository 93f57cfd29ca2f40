/* bench.h - the communicator self-test (`dtrain bench <collective>`), in the
 * shape of NVIDIA's nccl-tests: one harness (bench.c) and one short file per
 * collective (bench_allreduce.c, ...), one output format for all.
 *
 * Each rank of a job runs the same command; rank 0 prints the table.  Data
 * are small integers chosen so every sum is exact in every dtype (bf16 holds
 * integers to 256; |value| <= 5 and world <= 8 keeps sums within 40), so the
 * check is bitwise and #wrong must be 0.
 *
 * Not for correctness tests of edge cases (tests/unit/test_comm*.c).
 */
#ifndef DT_BENCH_H
#define DT_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "comm/comm.h"

struct dt_bench_args {
    const char *coll;            /* "allreduce", "allgather", "reduce_scatter", "broadcast" */
    size_t min_bytes, max_bytes; /* -b, -e */
    size_t step_bytes;           /* -i (used when step_factor is 0) */
    double step_factor;          /* -f */
    int iters, warmup, check;    /* -n, -w, -c */
    int dtype;                   /* -d: enum dt_dtype, or -1 for all */
    int op;                      /* -o: enum dt_redop, or -1 for all */
    int root;                    /* -r */
    const char *backend;         /* --backend */
    double min_bw;               /* --min-bw GB/s; 0 = no check */
    double timeout_s;            /* --timeout */
    bool bind;                   /* --bind: pin this rank to one core (as mpirun does by default) */
};

/* What one collective's file provides to the harness. */
struct dt_bench_ctx {
    struct dt_comm *comm;
    int rank, world, root;
    int local_rank;              /* LOCAL_RANK, for the preamble's device list */
    enum dt_dtype dtype;
    enum dt_redop op;
    size_t send_n, recv_n;       /* elements in this rank's send and recv buffers */
    char *send, *recv;
};

struct dt_bench_coll {
    const char *name;            /* "allreduce" */
    const char *program;         /* "all_reduce_perf": the nccl-tests program it mirrors */
    bool has_op, rooted;
    double (*bus_factor)(int world);
    /* For a row of about `bytes`: elements per rank sent and received, and the
     * size column (nccl-tests: the whole gathered / scattered buffer). */
    void (*counts)(size_t bytes, size_t es, int world, size_t *send_n, size_t *recv_n, size_t *size);
    void (*fill)(struct dt_bench_ctx *x, int seed);
    int (*run)(struct dt_bench_ctx *x, bool in_place);
    /* Wrong elements in this rank's result of the last run with `seed`. */
    size_t (*check)(struct dt_bench_ctx *x, int seed, bool in_place);
};

extern const struct dt_bench_coll dt_bench_allreduce, dt_bench_allgather, dt_bench_reduce_scatter,
    dt_bench_broadcast;

/* The value rank `rank` contributes at element i for a seed: an integer in [-5, 5]. */
double dt_bench_value(int rank, size_t i, int seed);
/* The reduction of dt_bench_value over all ranks at element i, rounded like the
 * library rounds (AVG divides the exact sum once, in the dtype's arithmetic). */
double dt_bench_reduced(enum dt_dtype t, enum dt_redop op, int world, size_t i, int seed);
/* Wrong elements of buf[0..n) against want(i) = the value put by `expect`. */
size_t dt_bench_count_wrong(enum dt_dtype t, const char *buf, size_t n, size_t first,
                            double (*expect)(const struct dt_bench_ctx *x, size_t i, int seed),
                            const struct dt_bench_ctx *x, int seed);

/* "1K", "64M", "8": 1024-based suffixes like nccl-tests' parsesize. */
int dt_bench_parse_size(const char *s, size_t *out);

/* Runs the sweep as one rank of the job described by RANK, WORLD_SIZE,
 * LOCAL_RANK, LOCAL_WORLD_SIZE and DTRAIN_COORD_ADDR/DTRAIN_JOB_TOKEN (one
 * rank without them).  Returns 0, 1 if a check failed (#wrong > 0 or the
 * average bus bandwidth under --min-bw), or a negative DT_E* code. */
int dt_bench_run(const struct dt_bench_args *a, FILE *out);

#endif
