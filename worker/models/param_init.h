/* param_init.h - initial parameters drawn in parallel, with bits that depend
 * on the seed and the element's place only: not on threads, chunking or the
 * machine.
 *
 * Each value comes from a counter-based generator, Philox4x32-10 (Salmon,
 * Moraes, Dror, Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC'11;
 * PyTorch's CUDA generator and JAX use it): out = philox(counter, key) is a
 * pure function, so element pair j of stream s is drawn from counter
 * (j, s, 0) under key = seed without any state, by whichever thread has it.
 * The normal draws are Box-Muller over two 53-bit uniforms, with log, sin and
 * cos written here as polynomials in plain double arithmetic (no libm call, no
 * fused multiply-add: C11's default contraction is off), so every x86-64 CPU
 * gives the same bits, and the loop vectorises.
 *
 * Not for data order (worker/data/sampler.h: MT19937, as PyTorch's
 * DistributedSampler) or for sampling tokens (worker/sample.c).
 */
#ifndef DT_PARAM_INIT_H
#define DT_PARAM_INIT_H

#include <stddef.h>
#include <stdint.h>

/* Philox4x32-10: four 32-bit words from a 128-bit counter and a 64-bit key. */
void dt_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* x[0, n) ~ N(0, std): x[2j] and x[2j+1] are r cos t and r sin t of
 * Box-Muller over philox((j, stream, 0), seed); on the CPU pool
 * (worker/cpu_pool.h). */
void dt_param_init_normal(float *x, size_t n, double std, uint64_t seed, uint32_t stream);

/* x[0, n) = v, on the CPU pool (a large arena's first touch is its page
 * faults: spread over the threads too). */
void dt_param_init_fill(float *x, size_t n, float v);

#endif
