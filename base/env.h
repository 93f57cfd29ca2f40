/* env.h - whole numbers from the environment (tuning knobs such as
 * DTRAIN_TCP_SEGMENT_BYTES, torchrun's RANK and WORLD_SIZE), checked: a
 * malformed or out-of-range value is an error that names the variable and
 * the range, never a silent fallback to the default.  Unset or empty means
 * the default.  Not for strings (addresses, paths, tokens).
 */
#ifndef DT_ENV_H
#define DT_ENV_H

#include <stdint.h>

/* *out = the value of `name` in [lo, hi], or def when unset; DT_EINVAL with
 * "NAME=\"value\": expected a whole number from lo to hi" otherwise. */
int dt_env_u64(const char *name, uint64_t def, uint64_t lo, uint64_t hi, uint64_t *out);

/* The same into an int: ranks, world sizes, counts. */
int dt_env_int(const char *name, int def, int lo, int hi, int *out);

#endif
