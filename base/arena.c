/* arena.c - zeroed, huge-page backed allocations (arena.h). */
#include "base/arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define DT_ARENA_HUGE (2u << 20)

void *dt_arena_calloc(size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size)
        return NULL;
    size_t bytes = n * size;
    if (bytes < DT_ARENA_HUGE) /* not worth a huge page */
        return calloc(1, bytes ? bytes : 1);
    size_t rounded = (bytes + DT_ARENA_HUGE - 1) / DT_ARENA_HUGE * DT_ARENA_HUGE;
    void *p = NULL;
    if (posix_memalign(&p, DT_ARENA_HUGE, rounded))
        return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, rounded, MADV_HUGEPAGE); /* advice: a refusal leaves small pages */
#endif
    memset(p, 0, bytes);
    return p;
}

void dt_arena_free(void *p) { free(p); }
