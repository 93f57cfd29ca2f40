/* cpu_pool.c - the CPU kernels' fork-join threads (see cpu_pool.h).
 *
 * One job at a time: the caller publishes it under a generation number, the
 * helpers run their piece and count down; helpers sleep on a condition
 * variable between jobs (no spinning: ranks may share cores).
 */
#include "worker/cpu_pool.h"

#include <pthread.h>
#include <stdbool.h>

#define POOL_MAX 64

static struct {
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    int want, started;            /* threads in all; helpers running */
    unsigned long gen;
    int pending;
    void (*fn)(void *, size_t, size_t);
    void *ctx;
    size_t n, align;
    int parts;
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, 1, 0, 0, 0,
          NULL, NULL, 0, 1, 1};

static void piece(int i, int parts, size_t n, size_t align, size_t *lo, size_t *hi)
{
    size_t blocks = (n + align - 1) / align;
    *lo = blocks * (size_t)i / (size_t)parts * align;
    *hi = blocks * (size_t)(i + 1) / (size_t)parts * align;
    if (*hi > n)
        *hi = n;
    if (*lo > n)
        *lo = n;
}

static void *helper(void *arg)
{
    int me = (int)(size_t)arg;
    unsigned long seen = 0;
    pthread_mutex_lock(&pool.mu);
    for (;;) {
        while (pool.gen == seen)
            pthread_cond_wait(&pool.go, &pool.mu);
        seen = pool.gen;
        if (me >= pool.parts)
            continue;
        void (*fn)(void *, size_t, size_t) = pool.fn;
        void *ctx = pool.ctx;
        size_t lo, hi;
        piece(me, pool.parts, pool.n, pool.align, &lo, &hi);
        pthread_mutex_unlock(&pool.mu);
        if (lo < hi)
            fn(ctx, lo, hi);
        pthread_mutex_lock(&pool.mu);
        if (--pool.pending == 0)
            pthread_cond_signal(&pool.done);
    }
    return NULL;
}

void dt_cpu_pool_set_threads(int n)
{
    pthread_mutex_lock(&pool.mu);
    pool.want = n < 1 ? 1 : n > POOL_MAX ? POOL_MAX : n;
    pthread_mutex_unlock(&pool.mu);
}

/* Helpers are started lazily and detached: they live as long as the process. */
static int ensure_helpers(int parts)
{
    while (pool.started < parts - 1) {
        pthread_t t;
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&t, &a, helper, (void *)(size_t)(pool.started + 1));
        pthread_attr_destroy(&a);
        if (rc != 0)
            break;
        pool.started++;
    }
    return pool.started + 1;
}

void dt_cpu_pool_run(void (*fn)(void *ctx, size_t lo, size_t hi), void *ctx, size_t n, size_t align)
{
    dt_cpu_pool_run_cost(fn, ctx, n, align, 1);
}

void dt_cpu_pool_run_cost(void (*fn)(void *ctx, size_t lo, size_t hi), void *ctx, size_t n, size_t align,
                          size_t cost)
{
    pthread_mutex_lock(&pool.mu);
    int parts = pool.want;
    /* Below ~64k elements of work a thread hand-off costs more than it saves;
     * and no more parts than pieces of `align` items. */
    size_t work = n * (cost ? cost : 1), blocks = (n + (align ? align : 1) - 1) / (align ? align : 1);
    if (work < 65536 * (size_t)parts)
        parts = (int)(work / 65536) > 0 ? (int)(work / 65536) : 1;
    if (blocks < (size_t)parts)
        parts = blocks > 0 ? (int)blocks : 1;
    if (parts > 1) {
        int have = ensure_helpers(parts);
        parts = have < parts ? have : parts;
    }
    if (parts == 1) {
        pthread_mutex_unlock(&pool.mu);
        fn(ctx, 0, n);
        return;
    }
    pool.fn = fn;
    pool.ctx = ctx;
    pool.n = n;
    pool.align = align ? align : 1;
    pool.parts = parts;
    pool.pending = parts - 1;
    pool.gen++;
    pthread_cond_broadcast(&pool.go);
    size_t lo, hi;
    piece(0, parts, n, pool.align, &lo, &hi);
    pthread_mutex_unlock(&pool.mu);
    fn(ctx, lo, hi);
    pthread_mutex_lock(&pool.mu);
    while (pool.pending > 0)
        pthread_cond_wait(&pool.done, &pool.mu);
    pthread_mutex_unlock(&pool.mu);
}
