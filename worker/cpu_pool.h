/* cpu_pool.h - fork-join threads for the CPU kernels' elementwise loops.
 *
 * OpenBLAS brings its own threads for the GEMMs; the memory-bound loops
 * (AdamW over every parameter) need theirs too when a rank has more than one
 * core, or the optimizer step runs on one core while the others idle.  Only
 * loops whose elements are independent go here, so the result does not depend
 * on the thread count.
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

#endif
