/* arena.h - zeroed allocations for the trainer's large flat arenas
 * (parameters and gradients, AdamW's moments, activations) on huge pages.
 *
 * Why: an optimizer step streams ~28 bytes per parameter through memory
 * (AdamW reads p, g, m, v and writes p, m, v); with 4 KiB pages a 7.5 MB
 * arena is ~1800 pages per array, and the page walks of the TLB misses add to
 * the traffic.  Linux's transparent huge pages are often in "madvise" mode
 * (Debian and Ubuntu's default), so the arena asks for them: 2 MiB aligned,
 * madvise(MADV_HUGEPAGE) before the first touch.  Where the kernel says no
 * (THP off, not Linux) the memory is the same, only on small pages.
 *
 * Free with dt_arena_free().
 */
#ifndef DT_ARENA_H
#define DT_ARENA_H

#include <stddef.h>

/* n * size zeroed bytes, or NULL (out of memory or n * size overflows). */
void *dt_arena_calloc(size_t n, size_t size);
void dt_arena_free(void *p);

#endif
