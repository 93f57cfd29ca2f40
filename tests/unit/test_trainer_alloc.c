/* test_trainer_alloc.c - a steady-state training step allocates nothing.
 *
 * The test binary puts its own malloc family in front of glibc's (forwarding
 * to __libc_malloc and friends) and counts calls made from any thread while
 * steps 4..10 run, loader threads included.  Under AddressSanitizer, which
 * owns malloc itself, the count cannot be taken and the test says so. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdatomic.h>

#include "trainer_fixture.h"

static atomic_int counting, calls;

#if !defined(__SANITIZE_ADDRESS__)
#define COUNT_ALLOCS 1
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);

void *malloc(size_t n)
{
    if (atomic_load(&counting))
        atomic_fetch_add(&calls, 1);
    return __libc_malloc(n);
}

void *calloc(size_t a, size_t b)
{
    if (atomic_load(&counting))
        atomic_fetch_add(&calls, 1);
    return __libc_calloc(a, b);
}

void *realloc(void *p, size_t n)
{
    if (atomic_load(&counting))
        atomic_fetch_add(&calls, 1);
    return __libc_realloc(p, n);
}

void free(void *p)
{
    __libc_free(p);
}
#endif

static void window(void *ctx, struct dt_model *m, int64_t step)
{
    (void)ctx;
    (void)m;
    if (step == 3)
        atomic_store(&counting, 1);
    if (step == 10)
        atomic_store(&counting, 0);
}

static void steady_step_allocates_nothing(void **state)
{
    (void)state;
#ifndef COUNT_ALLOCS
    print_message("AddressSanitizer owns malloc here: allocation count not taken (run the plain build)\n");
    return;
#endif
    struct dt_trainer_spec s;
    small_spec(&s, 14, 64);
    s.data.workers = 2;
    s.log_every_steps = 2; /* metrics rows inside the window too */
    char d[64];
    scratch_dir(d, sizeof d, "alloc");
    struct dt_trainer_options o = {.run_dir = d, .threads = 1, .quiet = true, .after_step = window};
    struct dt_trainer *t;
    if (dt_trainer_create(&s, &o, &t))
        fail_msg("%s", dt_error_last());
    if (dt_trainer_run(t, NULL))
        fail_msg("%s", dt_error_last());
    dt_trainer_destroy(t);
    rm_rf(d);
    if (atomic_load(&calls) != 0)
        fail_msg("%d allocations during steps 4..10", atomic_load(&calls));
}

static void the_counter_counts(void **state)
{
    (void)state;
#ifdef COUNT_ALLOCS
    atomic_store(&counting, 1);
    void *volatile p = malloc(16);
    atomic_store(&counting, 0);
    free(p);
    assert_int_equal(atomic_load(&calls), 1);
    atomic_store(&calls, 0);
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_counter_counts),
        cmocka_unit_test(steady_step_allocates_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
