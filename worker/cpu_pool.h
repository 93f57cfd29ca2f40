/* cpu_pool.h - fork-join threads for the CPU kernels' loops.
 *
 * Every parallel loop of the CPU kernels runs here, the GEMMs included: a
 * GEMM is cut into tiles fixed by its shape, one single-threaded BLAS call
 * each (worker/kernels_cpu.c), and gpt2 adds its attention and row loops
 * (worker/models/gpt2_layers.c).  Only loops whose items are independent go
 * here, so the result does not depend on the thread count.
 *
 * Not for reductions whose summation order would change with the threads; a
 * reduction in fixed blocks, one sum per block (align = the block), is fine.
 */
#ifndef DT_CPU_POOL_H
#define DT_CPU_POOL_H

#include <stddef.h>

/* Uses n threads in all (the caller and n-1 helpers, started on first need). */
void dt_cpu_pool_set_threads(int n);

/* Runs fn(ctx, lo, hi) over [0, n) split into contiguous pieces (multiples of
 * `align` elements), one per thread, and returns when all are done. */
void dt_cpu_pool_run(void (*fn)(void *ctx, size_t lo, size_t hi), void *ctx, size_t n, size_t align);

/* The same over n items of `cost` elements' work each (a row of C floats: C;
 * a GEMM tile: its multiply-adds / 8): the threads used grow with n * cost,
 * not n, so a few long rows are split as a long array is. */
void dt_cpu_pool_run_cost(void (*fn)(void *ctx, size_t lo, size_t hi), void *ctx, size_t n, size_t align,
                          size_t cost);

#endif
