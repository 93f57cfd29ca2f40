/* kernel_profile.h - the per-kernel time table of a GPU run
 * (DTRAIN_CUDA_PROFILE, docs/gpu.md): records of GPU activity (a kernel, a
 * copy, a memset, each a name and a duration) summed by name, then written
 * as a table sorted by total time with a summary by category.  Pure C, no
 * CUDA: the CUPTI collector (worker/cuda/profile_cuda.c) feeds it, and the
 * unit test feeds it by hand.  Not thread-safe: the collector serialises. */
#ifndef DT_KERNEL_PROFILE_H
#define DT_KERNEL_PROFILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct dt_kprof;

struct dt_kprof *dt_kprof_new(void);
void dt_kprof_free(struct dt_kprof *p);
/* One record of `ns` nanoseconds under its raw (possibly mangled) name.
 * Returns 0, or -1 when out of memory (the record is lost). */
int dt_kprof_add(struct dt_kprof *p, const char *name, uint64_t ns);

/* A readable name: the C++ mangled ones (_Z...) reduced to their qualified
 * name without template arguments or parameters (`_ZN7cutlass6KernelI...`
 * -> "cutlass::Kernel"); others copied; always NUL-terminated in buf. */
const char *dt_kprof_short_name(const char *name, char *buf, size_t n);

/* The category of a raw name: "GEMM", "attention", "layernorm",
 * "cross-entropy", "AdamW", "NCCL", "copies" or "other". */
const char *dt_kprof_category(const char *name);

/* The table (the `top` largest rows, all when top <= 0) and the summary by
 * category; per-step figures divide by `steps` (none printed when <= 0). */
void dt_kprof_write(const struct dt_kprof *p, FILE *f, int64_t steps, int top);

#endif
