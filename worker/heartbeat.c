/* heartbeat.c - the heartbeat thread (see heartbeat.h).
 *
 * The thread sleeps on a condition variable (so stop is immediate), sends one
 * HEARTBEAT per interval, and measures the coordinator's silence from the
 * last answered one.  A failed send drops the connection; the store client
 * reconnects on the next call, retrying until its own timeout, which is set
 * to the time left before lost_after_s, so the thread never blocks past it.
 *
 * Not for the agent's side (launcher/agent/agent_watchdog.c).
 */
#include "worker/heartbeat.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "comm/store.h"
#include "base/clock.h"

struct dt_heartbeat {
    struct dt_heartbeat_options o;
    struct dt_store *store;
    _Atomic int64_t step;
    _Atomic int64_t sent;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond; /* CLOCK_MONOTONIC */
    bool stop;
};

static void default_on_lost(void *ctx, const char *why)
{
    (void)ctx;
    fprintf(stderr, "dtrain worker: %s\n", why);
    fflush(stderr);
    _exit(1);
}

/* Sleeps until `until` (monotonic) or stop; returns true when asked to stop. */
static bool sleep_until(struct dt_heartbeat *h, double until)
{
    struct timespec ts = {.tv_sec = (time_t)until, .tv_nsec = (long)((until - (double)(time_t)until) * 1e9)};
    pthread_mutex_lock(&h->lock);
    while (!h->stop && pthread_cond_timedwait(&h->cond, &h->lock, &ts) != ETIMEDOUT)
        ;
    bool stop = h->stop;
    pthread_mutex_unlock(&h->lock);
    return stop;
}

static void *run(void *arg)
{
    struct dt_heartbeat *h = arg;
    double last_ok = dt_clock_s(), next = last_ok;
    char last_err[512] = "";
    while (!sleep_until(h, next)) {
        double now = dt_clock_s(), left = h->o.lost_after_s - (now - last_ok);
        dt_store_set_timeout(h->store, left > 0.05 ? left : 0.05);
        int rc =
            dt_store_heartbeat(h->store, h->o.rank, atomic_load_explicit(&h->step, memory_order_relaxed));
        now = dt_clock_s();
        if (rc == 0) {
            last_ok = now;
            atomic_fetch_add_explicit(&h->sent, 1, memory_order_relaxed);
        } else {
            snprintf(last_err, sizeof last_err, "%s", dt_error_last());
        }
        if (now - last_ok >= h->o.lost_after_s) {
            char why[1024];
            snprintf(why, sizeof why,
                     "rank %d: lost the coordinator %s: no heartbeat answered for %.1f s "
                     "(rendezvous.timeout); last error: %s; exiting",
                     h->o.rank, dt_store_peer(h->store), now - last_ok, last_err[0] ? last_err : "none");
            h->o.on_lost(h->o.ctx, why);
            return NULL;
        }
        next += h->o.interval_s;
        if (next < now) /* a slow round must not turn into a burst */
            next = now;
        if (rc != 0 && next > now + 0.1)
            next = now + 0.1; /* retry soon: the coordinator may be back */
    }
    return NULL;
}

int dt_heartbeat_start(const struct dt_heartbeat_options *o, struct dt_store *store,
                       struct dt_heartbeat **out)
{
    *out = NULL;
    if (!(o->interval_s > 0) || !(o->lost_after_s > 0))
        return dt_error_set(DT_EINVAL, "heartbeat: interval %g s and lost-after %g s must be > 0",
                            o->interval_s, o->lost_after_s);
    struct dt_heartbeat *h = calloc(1, sizeof *h);
    if (!h)
        return dt_error_set(DT_ENOMEM, "out of memory for the heartbeat");
    h->o = *o;
    if (!h->o.on_lost)
        h->o.on_lost = default_on_lost;
    h->store = store;
    atomic_init(&h->step, o->first_step);
    atomic_init(&h->sent, 0);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&h->cond, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&h->lock, NULL);
    int err = pthread_create(&h->thread, NULL, run, h);
    if (err) {
        pthread_cond_destroy(&h->cond);
        pthread_mutex_destroy(&h->lock);
        free(h);
        return dt_error_set_errno(DT_EIO, err, "cannot start the heartbeat thread of rank %d", o->rank);
    }
    *out = h;
    return 0;
}

void dt_heartbeat_step(struct dt_heartbeat *h, int64_t step)
{
    if (h)
        atomic_store_explicit(&h->step, step, memory_order_relaxed);
}

int64_t dt_heartbeat_sent(const struct dt_heartbeat *h)
{
    return h ? atomic_load_explicit(&((struct dt_heartbeat *)h)->sent, memory_order_relaxed) : 0;
}

void dt_heartbeat_stop(struct dt_heartbeat *h)
{
    if (!h)
        return;
    pthread_mutex_lock(&h->lock);
    h->stop = true;
    pthread_cond_signal(&h->cond);
    pthread_mutex_unlock(&h->lock);
    pthread_join(h->thread, NULL);
    pthread_cond_destroy(&h->cond);
    pthread_mutex_destroy(&h->lock);
    dt_store_close(h->store);
    free(h);
}
