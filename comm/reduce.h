/* reduce.h - element-wise reductions and dtype conversion for the CPU backends.
 *
 * The backends move bytes; these functions combine them.  Every function is a
 * plain loop over n elements that the compiler vectorizes; f16 and bf16 are
 * widened to fp32, combined, and rounded back to nearest-even, so a sum of
 * half values rounds once per pairwise step (as NCCL does).
 *
 * Determinism: dt_reduce(dst, a, b) always evaluates `a op b` in that operand
 * order, so a backend that feeds operands in a fixed rank order gets the same
 * bits on every rank.  AVG is a SUM during the exchange; the owner of the final
 * sum calls dt_reduce_finish() once, which divides by the world size (integer
 * division truncates toward zero).
 *
 * Not for communication, and not a general math library.
 */
#ifndef DT_REDUCE_H
#define DT_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"

/* dst[i] = a[i] op b[i] for i < n.  dst may alias a or b (but not partially
 * overlap them).  AVG combines like SUM. */
void dt_reduce(enum dt_dtype t, enum dt_redop op, void *dst, const void *a, const void *b, size_t n);

/* dst = srcs[0] op srcs[1] op ... op srcs[nsrc-1], left to right, in cache-sized
 * blocks so the inputs are read once.  dst may alias one of the sources. */
void dt_reduce_many(enum dt_dtype t, enum dt_redop op, void *dst, const void *const *srcs, int nsrc, size_t n);

/* Applies the end of a reduction: for AVG, buf[i] /= world; nothing otherwise. */
void dt_reduce_finish(enum dt_dtype t, enum dt_redop op, void *buf, size_t n, int world);

/* IEEE binary16 and bfloat16 <-> binary32, round to nearest even; NaN stays NaN. */
float dt_f16_to_f32(uint16_t h);
uint16_t dt_f32_to_f16(float f);
float dt_bf16_to_f32(uint16_t h);
uint16_t dt_f32_to_bf16(float f);

/* Converts n values of type t to or from double (for tests and the self-test's
 * data generator; not used on the hot path). */
double dt_dtype_get(enum dt_dtype t, const void *buf, size_t i);
void dt_dtype_put(enum dt_dtype t, void *buf, size_t i, double v);

#endif
