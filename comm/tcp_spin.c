/* tcp_spin.c - when the tcp engine may busy-poll instead of sleeping in
 * poll().
 *
 * Why spin: on the 2-core VM a poll() sleep and the peer's wake-up cost
 * 20-40 us each way, several times a 1 KiB exchange (measured: a 2-rank 1 KiB
 * allreduce ~45 us sleeping, ~6 us spinning; Open MPI's progress engine never
 * sleeps).  Why not always: a spinning rank that shares its CPU holds it from
 * the peer it waits for, or from another job, for a whole time slice
 * (measured: 1 KiB took > 200 us with a 200 us spin on the loaded VM).  So a
 * wait spins for up to DTRAIN_TCP_SPIN_US (default 1 ms) only
 *  - when the host does not run more ranks than this process has CPUs (else
 *    the default is 0, tcp.c),
 *  - while /proc/loadavg shows no more runnable tasks than CPUs (re-read every
 *    DT_TCP_LOAD_CHECK_S, without allocating: steady state allocates nothing),
 *  - and not for DT_TCP_SPIN_BACKOFF_S after a spin during which the scheduler
 *    preempted us (the thread's involuntary context switches went up).
 *
 * Not for the engine's progress loop itself (tcp_engine.c).
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "comm/tcp.h"
#include "base/clock.h"

static long involuntary_switches(void)
{
    struct rusage u;
    return getrusage(RUSAGE_THREAD, &u) == 0 ? u.ru_nivcsw : 0;
}

/* Runnable tasks on the machine now: the fourth field of /proc/loadavg,
 * "running/total" (0 when unreadable, which allows spinning). */
static int runnable_now(void)
{
    char buf[128];
    int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    char *p = buf;
    for (int field = 0; field < 3 && p; field++) {
        p = strchr(p, ' ');
        p = p ? p + 1 : NULL;
    }
    return p ? atoi(p) : 0;
}

static bool may_spin(struct dt_tcp *t, double now)
{
    if (t->spin_s <= 0 || now < t->spin_off_until)
        return false;
    if (now - t->load_checked > DT_TCP_LOAD_CHECK_S) {
        t->load_checked = now;
        if (runnable_now() > t->ncpus)
            t->spin_off_until = now + DT_TCP_LOAD_CHECK_S;
    }
    return now >= t->spin_off_until;
}

bool dt_tcp_spin_again(struct dt_tcp *t, struct dt_tcp_spin *s)
{
    if (t->spin_s <= 0)
        return false;
    double now = dt_clock_s();
    if (s->start == 0) {
        if (!may_spin(t, now))
            return false;
        s->start = now;
        s->csw = involuntary_switches();
    }
    if (now < s->start + t->spin_s)
        return true;
    dt_tcp_spin_end(t, s);
    return false;
}

void dt_tcp_spin_end(struct dt_tcp *t, struct dt_tcp_spin *s)
{
    if (s->start == 0)
        return;
    double now = dt_clock_s();
    if (now - s->start > 20e-6 && involuntary_switches() != s->csw)
        t->spin_off_until = now + DT_TCP_SPIN_BACKOFF_S;
    s->start = 0;
}
