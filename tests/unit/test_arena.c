/* test_arena.c - the trainer's arenas: zeroed, 2 MiB aligned when large,
 * advised for huge pages (the VMA's "hg" flag in /proc/self/smaps), small
 * ones plain, and a size that overflows refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/arena.h"

static int all_zero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

/* The VmFlags of the mapping that holds p, from /proc/self/smaps. */
static int vm_flags_of(const void *p, char *flags, size_t cap)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return -1;
    char line[512];
    int inside = 0, found = -1;
    uintptr_t a = (uintptr_t)p;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            inside = a >= lo && a < hi;
            continue;
        }
        if (inside && !strncmp(line, "VmFlags:", 8)) {
            strncpy(flags, line + 8, cap - 1);
            flags[cap - 1] = 0;
            found = 0;
            break;
        }
    }
    fclose(f);
    return found;
}

static void large_is_aligned_zeroed_and_advised(void **state)
{
    (void)state;
    size_t n = 5u << 20; /* 20 MB of floats: several huge pages */
    float *p = dt_arena_calloc(n, sizeof *p);
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % (2u << 20), 0);
    assert_true(all_zero((const unsigned char *)p, n * sizeof *p));
    p[n - 1] = 1.0f; /* the whole length is ours */
    char flags[512];
    assert_int_equal(vm_flags_of(p, flags, sizeof flags), 0);
    assert_non_null(strstr(flags, " hg")); /* MADV_HUGEPAGE took */
    dt_arena_free(p);
}

static void small_is_plain_and_zeroed(void **state)
{
    (void)state;
    unsigned char *p = dt_arena_calloc(100, 3);
    assert_non_null(p);
    assert_true(all_zero(p, 300));
    dt_arena_free(p);
    p = dt_arena_calloc(0, 4); /* like calloc(0): a pointer that can be freed */
    assert_non_null(p);
    dt_arena_free(p);
}

static void overflow_is_refused(void **state)
{
    (void)state;
    assert_null(dt_arena_calloc(SIZE_MAX / 2, 4));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(large_is_aligned_zeroed_and_advised),
        cmocka_unit_test(small_is_plain_and_zeroed),
        cmocka_unit_test(overflow_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
