/* tcp_engine.c - runs one step of a `tcp` collective: non-blocking send of
 * the plan's out blocks to one peer and receive of its in blocks from
 * another, reducing each incoming segment as soon as it is complete; when to
 * spin instead of sleeping; and, when a step fails, the failure notices that
 * let every survivor name the rank that died or stalled.
 *
 * Progress rule: try to send (as far as dependencies allow) and to receive;
 * when neither moved, keep retrying while the spin policy allows (up to 1 ms
 * when the machine has a CPU to spare), and only then poll() the sockets, the
 * abort eventfd and the failure notices with the time left before the
 * deadline.  The deadline is one of stalling, not of duration: every byte
 * moved puts it timeout_s (less the grace period) ahead again, so a slow
 * link that keeps moving never fails a large collective, while a peer that
 * stops is named about timeout_s (the job's heartbeat_timeout) after it did.
 * Reductions run on this thread between syscalls, while the peer keeps
 * filling our socket buffer: the kernel's buffers are the pipeline.
 * On failure every exit goes through fault(), which tells the other ranks and
 * names the rank that failed.  A peer that announced a pause (dt_comm_busy:
 * rank 0 writing a checkpoint) is not a stall while its notices keep coming.
 *
 * Not for choosing algorithms (tcp_coll.c) or setting connections up
 * (tcp_mesh.c).
 */
#include "comm/tcp/tcp_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "comm/reduce.h"

#define DT_TCP_SPIN_BACKOFF_S 0.1 /* no spinning this long after being preempted in a spin */
#define DT_TCP_LOAD_CHECK_S 0.05  /* how often spinning re-reads the machine's load */

/* ---- step headers ---- */

void dt_tcp__hdr_make(struct dt_tcp *t, struct dt_tcp__hdr *h, size_t count, enum dt_dtype dt,
                      enum dt_redop op, int root)
{
    memset(h, 0, sizeof *h);
    h->magic = DT_TCP__MAGIC;
    h->kind = (uint16_t)t->cur;
    h->dtype = (uint16_t)dt;
    h->seq = t->seq;
    h->count = count;
    h->op = op;
    h->root = root;
}

/* Compares a received header with the expected one; names `peer` on mismatch. */
static int hdr_check(struct dt_tcp *t, int peer, const struct dt_tcp__hdr *got,
                     const struct dt_tcp__hdr *want)
{
    if (got->magic != DT_TCP__MAGIC)
        return dt_error_set(DT_EPROTO, "rank %d: %s #%llu (tcp): peer rank %d sent a corrupt frame", t->rank,
                            dt_coll_name(t->cur), (unsigned long long)t->seq, peer);
    if (memcmp(got, want, sizeof *got) != 0)
        return dt_error_set(DT_EPROTO,
                            "rank %d: %s #%llu (tcp, count %llu, %s, %s, root %d): peer rank %d is running %s #%llu "
                            "(count %llu, %s, %s, root %d); every rank must call the same collectives in the same order",
                            t->rank, dt_coll_name(t->cur), (unsigned long long)t->seq,
                            (unsigned long long)want->count, dt_dtype_name(want->dtype), dt_redop_name(want->op),
                            want->root, peer, dt_coll_name(got->kind), (unsigned long long)got->seq,
                            (unsigned long long)got->count, dt_dtype_name(got->dtype), dt_redop_name(got->op),
                            got->root);
    return 0;
}

/* ---- spin policy ---- */

/* When a wait may busy-poll instead of sleeping in poll().
 *
 * Why spin: on the 2-core VM a poll() sleep and the peer's wake-up cost
 * 20-40 us each way, several times a 1 KiB exchange (measured: a 2-rank 1 KiB
 * allreduce ~45 us sleeping, ~6 us spinning; Open MPI's progress engine never
 * sleeps).  Why not always: a spinning rank that shares its CPU holds it from
 * the peer it waits for, or from another job, for a whole time slice
 * (measured: 1 KiB took > 200 us with a 200 us spin on the loaded VM).  So a
 * wait spins for up to DTRAIN_TCP_SPIN_US (default 1 ms) only
 *  - when the host does not run more ranks than this process has CPUs (else
 *    the default is 0, tcp_mesh.c),
 *  - while /proc/loadavg shows no more runnable tasks than CPUs (re-read every
 *    DT_TCP_LOAD_CHECK_S, without allocating: steady state allocates nothing),
 *  - and not for DT_TCP_SPIN_BACKOFF_S after a spin during which the scheduler
 *    preempted us (the thread's involuntary context switches went up).
 */

/* A wait's spin. */
struct spin {
    double start;   /* 0: not spinning */
    long csw;       /* involuntary context switches when it started */
};

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

static void spin_end(struct dt_tcp *t, struct spin *s)
{
    if (s->start == 0)
        return;
    double now = dt_clock_s();
    if (now - s->start > 20e-6 && involuntary_switches() != s->csw)
        t->spin_off_until = now + DT_TCP_SPIN_BACKOFF_S;
    s->start = 0;
}

static bool spin_again(struct dt_tcp *t, struct spin *s)
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
    spin_end(t, s);
    return false;
}

/* ---- failure notices ---- */

/* Who failed: failure notices, so that every surviving rank names the rank
 * that died or stalled, not only the ring neighbour it happened to be waiting
 * for.
 *
 * Why a side channel: a rank sees a failure first hand only on the
 * connections it is using, and its neighbours shut their connections down as
 * soon as they fail themselves, so "peer rank 3 closed the connection" may
 * just mean rank 3 gave up first.  The TCP streams cannot carry the cause
 * (they may be cut in the middle of a payload), so each rank also binds a UDP
 * socket, published with its TCP address, and a failing rank
 *   1. sends every peer a notice {rank, suspect, collective, message},
 *   2. shuts its connections down (peers fail fast on EOF),
 *   3. collects the other ranks' notices until every peer has reported in,
 *      or every rank that has not is suspected by someone (a dead or stopped
 *      process sends nothing, and its neighbours suspect it first hand), or
 *      the grace period ends: a quarter of the timeout, at most 2 s, taken off
 *      the end of every collective's deadline (tcp_coll.c begin()), so the
 *      survivors have named the culprit when the deadline expires.
 * The silent, suspected ranks are the culprits: a rank without first-hand
 * evidence against them rewrites its message to name them and quotes the
 * rank that saw it.  A lost datagram only weakens the message (back to the
 * neighbour it saw), never delays it past the grace period.
 *
 * With lanes (tcp_mesh.c) the notice socket and what it has heard belong to
 * the communicator, not to a lane: every lane of a rank sends and reads
 * through lane 0's socket under notice_mu, so a failure seen on any lane is
 * known to all of them, and a rank whose lanes all finished the collective
 * still hears about it in the next one.
 */
#define NOTICE_MAGIC 0x31465444u /* "DTF1" */
#define BUSY_MAGIC 0x31425444u   /* "DTB1": a pause notice (announced pauses, below) */

struct notice {
    uint32_t magic, nonce, world;
    int32_t rank, suspect;   /* sender; the peer it saw fail, -1 none */
    int32_t code;            /* the sender's DT_E* code */
    uint32_t kind;
    uint64_t seq;
    char msg[480];           /* the sender's own error message */
};

void dt_tcp__set_timeout(struct dt_tcp *t, double timeout_s)
{
    t->timeout_s = timeout_s;
    /* with two ranks the one peer is the only suspect: nothing to wait for */
    /* A quarter, not less: on a loaded machine the survivors' notices can take
     * a few hundred ms to be scheduled, and a rank that settles early keeps
     * blaming its neighbour instead of the culprit. */
    t->grace_s = t->world < 3 ? 0 : t->timeout_s / 4 < 2.0 ? t->timeout_s / 4 : 2.0;
}

int dt_tcp__fault_open(struct dt_tcp *t, int *port)
{
    dt_tcp__set_timeout(t, t->timeout_s);
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || getsockname(fd, (struct sockaddr *)&a, &len) < 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return dt_error_set_errno(DT_EIO, e, "rank %d: tcp bootstrap: cannot bind the failure-notice socket",
                                  t->rank);
    }
    t->ufd = fd;
    *port = ntohs(a.sin_port);
    return 0;
}

static void notices_lock(struct dt_tcp *t)
{
    if (t->notice_mu)
        pthread_mutex_lock(t->notice_mu);
}

static void notices_unlock(struct dt_tcp *t)
{
    if (t->notice_mu)
        pthread_mutex_unlock(t->notice_mu);
}

static void send_notices(struct dt_tcp *t, int suspect)
{
    struct notice n = {NOTICE_MAGIC, t->nonce, (uint32_t)t->world, t->rank, suspect, dt_error_code(),
                       (uint32_t)t->cur, t->seq, ""};
    snprintf(n.msg, sizeof n.msg, "%s", dt_error_last());
    for (int p = 0; p < t->world; p++)
        if (p != t->rank && t->uaddr[p].sin_port)
            sendto(t->ufd, &n, sizeof n, MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&t->uaddr[p],
                   sizeof t->uaddr[p]);
}

void dt_tcp__fail(struct dt_tcp *t)
{
    t->failed = true;
    for (int p = 0; p < t->world; p++)
        if (t->fd[p] >= 0)
            shutdown(t->fd[p], SHUT_RDWR);
}

/* Reads pending notices into t->heard / t->suspected; returns the rank of the
 * first new one (its text in *first and its code in *code if given), or -1. */
static int read_notices(struct dt_tcp *t, char *first, size_t first_len, int *code)
{
    int got = -1;
    struct notice n;
    notices_lock(t);
    for (;;) {
        ssize_t r = recv(t->ufd, &n, sizeof n, MSG_DONTWAIT);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            notices_unlock(t);
            return got;
        }
        if (r == (ssize_t)sizeof n && n.magic == BUSY_MAGIC && n.nonce == t->nonce &&
            (int)n.world == t->world && n.rank >= 0 && n.rank < t->world && n.rank != t->rank) {
            /* busy (code 1) or back (0): either way alive now.  "Back" does not
             * end the excuse at once: its data may arrive after our deadline. */
            t->busy_from[n.rank] = dt_clock_s();
            continue;
        }
        if (r != (ssize_t)sizeof n || n.magic != NOTICE_MAGIC || n.nonce != t->nonce ||
            (int)n.world != t->world || n.rank < 0 || n.rank >= t->world || n.rank == t->rank)
            continue; /* not one of ours */
        n.msg[sizeof n.msg - 1] = 0;
        if (!t->heard[n.rank]) {
            t->heard[n.rank] = 1;
            snprintf(t->notice_msg[n.rank], sizeof t->notice_msg[n.rank], "%s", n.msg);
        }
        if (n.suspect >= 0 && n.suspect < t->world &&
            (t->suspected[n.suspect] < 0 || t->suspected[n.suspect] == t->rank)) /* another's word first */
            t->suspected[n.suspect] = n.rank;
        if (got < 0) {
            got = n.rank;
            if (first)
                snprintf(first, first_len, "%s", n.msg);
            if (code)
                *code = n.code;
        }
    }
}

/* The notice socket is readable during a step: 0, or the failure a peer reported. */
static int fault_check(struct dt_tcp *t)
{
    char msg[480];
    int code = DT_ECONN, from = read_notices(t, msg, sizeof msg, &code);
    if (from < 0)
        return 0;
    const char *m = msg, *c = strstr(msg, "): ");
    if (c)
        m = c + 3; /* drop the sender's "rank R: allreduce #S (tcp)" prefix: we print ours */
    t->suspect = -1;
    /* a mismatch stays a protocol error everywhere; anything else is a peer gone */
    return dt_error_set(code == DT_EPROTO ? DT_EPROTO : DT_ECONN, "rank %d: %s #%llu (tcp): peer rank %d (%s) reported a failure: %s", t->rank,
                        dt_coll_name(t->cur), (unsigned long long)t->seq, from, t->addr[from], m);
}

/* Every peer reported in, or every one that did not is suspected by another
 * rank.  Our own suspicion does not settle it: under load the neighbour we
 * timed out on is often alive, itself waiting on the culprit, and its notice
 * is merely late; settling on our own word then named that neighbour.  A
 * peer only we can see dead costs at most the grace period. */
static bool settled(const struct dt_tcp *t)
{
    for (int p = 0; p < t->world; p++)
        if (p != t->rank && !t->heard[p] && (t->suspected[p] < 0 || t->suspected[p] == t->rank))
            return false;
    return true;
}

static void collect(struct dt_tcp *t)
{
    double end = dt_clock_s() + t->grace_s;
    for (;;) {
        read_notices(t, NULL, 0, NULL);
        double left = end - dt_clock_s();
        notices_lock(t);
        bool done = settled(t);
        notices_unlock(t);
        if (done || left <= 0)
            return;
        /* another lane's thread may take the datagram we wait for: look again soon */
        int ms = (int)(left * 1000) + 1;
        struct pollfd pf = {.fd = t->ufd, .events = POLLIN};
        poll(&pf, 1, t->notice_mu && ms > 10 ? 10 : ms);
    }
}

/* The culprits: the silent ranks someone blamed, else every silent rank (a
 * stopped rank's neighbours may only have seen the ranks waiting on it). */
static bool culprit(const struct dt_tcp *t, int p, bool any_blamed)
{
    return p != t->rank && !t->heard[p] && (!any_blamed || t->suspected[p] >= 0);
}

/* Names the culprits when this rank's own evidence points elsewhere. */
static void rename_culprits(struct dt_tcp *t)
{
    bool blamed = false;
    for (int p = 0; p < t->world; p++)
        blamed |= p != t->rank && !t->heard[p] && t->suspected[p] >= 0;
    char list[160] = "", why[600] = "";
    int n = 0, witness = -1;
    for (int p = 0; p < t->world; p++) {
        if (!culprit(t, p, blamed))
            continue;
        if (p == t->suspect)
            return; /* we saw it ourselves: our message already names it */
        if (strlen(list) < sizeof list - 32)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%d (%s)", n ? ", rank " : "", p,
                     t->addr[p]);
        if (n++ == 0)
            witness = t->suspected[p];
    }
    if (n == 0)
        return;
    if (witness >= 0 && witness != t->rank) {
        const char *m = t->notice_msg[witness], *c = strstr(m, "): ");
        snprintf(why, sizeof why, "every other rank reported the failure; rank %d saw: %s", witness, c ? c + 3 : m);
    } else {
        const char *m = dt_error_last(), *c = strstr(m, "): ");
        snprintf(why, sizeof why, "every other rank reported the failure; this rank saw: %s", c ? c + 3 : m);
    }
    dt_error_set(dt_error_code(), "rank %d: %s #%llu (tcp): peer rank %s died or stalled (%s %s silent; %s)",
                 t->rank, dt_coll_name(t->cur), (unsigned long long)t->seq, list, n > 1 ? "they" : "it",
                 n > 1 ? "are" : "is", why);
}

/* A step failed with rc (message set, t->suspect the peer it blames): tells
 * every peer, shuts the connections down, waits briefly for the other ranks'
 * notices and rewrites the message to name the rank that died or stalled.
 * Returns rc. */
static int fault(struct dt_tcp *t, int rc)
{
    if (t->failed)
        return rc;
    read_notices(t, NULL, 0, NULL);
    notices_lock(t);
    if (t->suspect >= 0 && t->suspected[t->suspect] < 0)
        t->suspected[t->suspect] = t->rank;
    notices_unlock(t);
    send_notices(t, rc == DT_EABORTED ? -1 : t->suspect);
    dt_tcp__fail(t);
    if (rc == DT_EABORTED || t->world < 3)
        return rc; /* an abort names no peer; with two ranks the one peer is the only suspect */
    collect(t);
    notices_lock(t);
    rename_culprits(t);
    notices_unlock(t);
    return rc;
}

/* ---- announced pauses ---- */

/* dt_comm_busy() (comm.h): a rank about to leave the collectives for a while
 * (rank 0 writing a checkpoint while its peers already wait in the next
 * step) starts a thread that sends every peer a pause notice through the
 * failure-notice socket, at once and then every quarter of the stall
 * deadline (at most every second), until the pause ends (a last notice says
 * so) or busy_limit_s has passed.  A waiting peer whose deadline runs out
 * moves it on to the newest notice plus the stall deadline instead of
 * failing (the last notice too: the rank's data may come just after it).
 * Why notices and not the heartbeat: the heartbeat says the process lives,
 * not that its compute thread does; the deadline exists for a thread stuck
 * beside a live heartbeat, so only the rank itself can say that it is busy
 * on purpose.  What still fails: a rank that dies (its
 * connections close at once), a host or link that goes away (the notices
 * stop; the deadline runs from the last one), a pause longer than
 * busy_limit_s.  A notice read late (the peer was not waiting) moves a
 * deadline at most one stall period too far. */
struct dt_tcp__busy {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
};

static void send_busy(struct dt_tcp *t, bool on)
{
    struct notice n = {BUSY_MAGIC, t->nonce, (uint32_t)t->world, t->rank, -1, on, 0, 0, ""};
    for (int p = 0; p < t->world; p++)
        if (p != t->rank && t->uaddr[p].sin_port)
            sendto(t->ufd, &n, sizeof n, MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&t->uaddr[p],
                   sizeof t->uaddr[p]);
}

static void *busy_main(void *arg)
{
    struct dt_tcp *t = arg;
    struct dt_tcp__busy *b = t->busy;
    double stall = t->timeout_s - t->grace_s, every = stall / 4 < 1.0 ? stall / 4 : 1.0;
    double end = dt_clock_s() + t->busy_limit_s;
    pthread_mutex_lock(&b->mu);
    while (!b->stop && dt_clock_s() < end) {
        send_busy(t, true);
        struct timespec at;
        clock_gettime(CLOCK_MONOTONIC, &at);
        int64_t ns = (int64_t)at.tv_nsec + (int64_t)((every > 0.01 ? every : 0.01) * 1e9);
        at.tv_sec += (time_t)(ns / 1000000000);
        at.tv_nsec = (long)(ns % 1000000000);
        while (!b->stop && pthread_cond_timedwait(&b->cv, &b->mu, &at) == 0) {
        }
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

void dt_tcp__busy(void *st, bool on)
{
    struct dt_tcp *t = st;
    struct dt_tcp__busy *b = t->busy;
    if (on && !b && t->ufd >= 0 && !t->failed && (b = calloc(1, sizeof *b))) {
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&b->cv, &ca);
        pthread_condattr_destroy(&ca);
        pthread_mutex_init(&b->mu, NULL);
        t->busy = b;
        if (pthread_create(&b->thread, NULL, busy_main, t) == 0)
            return;
        t->busy = NULL; /* no thread: the pause goes unannounced, as before there were notices */
    } else if (!on && b) {
        pthread_mutex_lock(&b->mu);
        b->stop = true;
        pthread_cond_signal(&b->cv);
        pthread_mutex_unlock(&b->mu);
        pthread_join(b->thread, NULL);
        t->busy = NULL;
        send_busy(t, false);
    } else {
        return;
    }
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
    free(b);
}

/* The deadline ran out: true, with the deadline moved on, while a peer's
 * pause notices are recent (a failure notice read meanwhile is the caller's). */
static bool excused(struct dt_tcp *t)
{
    double newest = 0, stall = t->timeout_s - t->grace_s;
    notices_lock(t);
    for (int p = 0; p < t->world; p++)
        if (t->busy_from[p] > newest)
            newest = t->busy_from[p];
    notices_unlock(t);
    if (newest <= 0 || newest + stall <= dt_clock_s())
        return false;
    t->deadline = newest + stall;
    return true;
}

/* ---- the step engine ---- */

struct engine {
    struct dt_tcp *t;
    const struct dt_tcp__plan *p;
    int oi, ii;          /* current out / in block */
    size_t ooff, ioff;   /* bytes done within it */
    bool out_blocked;    /* the socket is full (EAGAIN) */
    bool in_gated;       /* waiting for an out block to drain before writing */
    bool progress;
    bool hdr_checked;
};

static int peer_error(struct dt_tcp *t, int code, int peer, const char *what)
{
    dt_error_set(code, "rank %d: %s #%llu (tcp): peer rank %d (%s) %s", t->rank, dt_coll_name(t->cur),
                 (unsigned long long)t->seq, peer, t->addr[peer], what);
    t->suspect = peer;
    return code;
}

static bool out_done(const struct engine *e, int idx)
{
    return e->oi > idx || (e->oi == idx && e->ooff == e->p->out[idx].len);
}

static int pump_out(struct engine *e)
{
    const struct dt_tcp__plan *p = e->p;
    int fd = p->out_peer >= 0 ? e->t->fd[p->out_peer] : -1;
    e->out_blocked = false;
    while (e->oi < p->nout) {
        const struct dt_tcp__blk *b = &p->out[e->oi];
        if (e->ooff == b->len) {
            e->oi++;
            e->ooff = 0;
            continue;
        }
        size_t avail = b->len;
        if (b->dep >= 0 && e->t->processed[b->dep] < avail)
            avail = e->t->processed[b->dep];
        if (e->ooff >= avail)
            return 0;
        ssize_t n = send(fd, b->ptr + e->ooff, avail - e->ooff, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                e->out_blocked = true;
                return 0;
            }
            if (errno == EINTR)
                continue;
            char what[128];
            snprintf(what, sizeof what, "could not be sent to: %s", strerror(errno));
            return peer_error(e->t, DT_ECONN, p->out_peer, what);
        }
        e->ooff += (size_t)n;
        e->progress = true;
    }
    return 0;
}

/* A REDUCE block's segment [s0, s1) is in t->stage: fold it into place. */
static void reduce_segment(struct engine *e, const struct dt_tcp__blk *b, size_t s0, size_t s1)
{
    const struct dt_tcp__plan *p = e->p;
    size_t es = dt_dtype_size(p->dtype), n = (s1 - s0) / es;
    const void *mine = b->src + s0, *inc = e->t->stage;
    if (b->incoming_first)
        dt_reduce(p->dtype, p->op, b->ptr + s0, inc, mine, n);
    else
        dt_reduce(p->dtype, p->op, b->ptr + s0, mine, inc, n);
    if (b->finish)
        dt_reduce_finish(p->dtype, p->op, b->ptr + s0, n, e->t->world);
}

/* The header is checked as soon as it is in (block 0 may carry data after
 * it), so a mismatch is reported before the payload lengths disagree. */
static int check_header(struct engine *e)
{
    const struct dt_tcp__plan *p = e->p;
    if (!p->check_hdr || e->hdr_checked || e->ii != 0 || e->ioff < sizeof(struct dt_tcp__hdr))
        return 0;
    e->hdr_checked = true;
    int rc = hdr_check(e->t, p->in_peer, (const struct dt_tcp__hdr *)p->in[0].ptr, p->hdr);
    if (rc < 0)
        e->t->suspect = p->in_peer;
    return rc;
}

/* Called when in block ii is complete. */
static int in_block_done(struct engine *e)
{
    const struct dt_tcp__plan *p = e->p;
    e->t->processed[e->ii] = p->in[e->ii].len;
    e->ii++;
    e->ioff = 0;
    return 0;
}

static int pump_in(struct engine *e)
{
    const struct dt_tcp__plan *p = e->p;
    struct dt_tcp *t = e->t;
    int fd = p->in_peer >= 0 ? t->fd[p->in_peer] : -1;
    e->in_gated = false;
    while (e->ii < p->nin) {
        const struct dt_tcp__blk *b = &p->in[e->ii];
        int rc;
        if (e->ioff == b->len) {
            if ((rc = in_block_done(e)) < 0)
                return rc;
            continue;
        }
        if (b->after_out >= 0 && !out_done(e, b->after_out)) {
            e->in_gated = true;
            return 0;
        }
        size_t s0 = 0, s1 = b->len;
        char *dst = b->ptr + e->ioff;
        if (b->kind == DT_TCP__IN_REDUCE) {
            s0 = e->ioff / t->seg_bytes * t->seg_bytes;
            s1 = s0 + t->seg_bytes < b->len ? s0 + t->seg_bytes : b->len;
            dst = t->stage + (e->ioff - s0);
        }
        ssize_t n = recv(fd, dst, s1 - e->ioff, MSG_DONTWAIT);
        if (n == 0)
            return peer_error(t, DT_ECONN, p->in_peer, "closed the connection (it exited, failed or aborted)");
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            if (errno == EINTR)
                continue;
            char what[128];
            snprintf(what, sizeof what, "could not be read from: %s", strerror(errno));
            return peer_error(t, DT_ECONN, p->in_peer, what);
        }
        e->ioff += (size_t)n;
        e->progress = true;
        if ((rc = check_header(e)) < 0)
            return rc;
        if (b->kind == DT_TCP__IN_DIRECT)
            t->processed[e->ii] = e->ioff;
        else if (e->ioff == s1) {
            reduce_segment(e, b, s0, s1);
            t->processed[e->ii] = s1;
        }
    }
    return 0;
}

static int wait_events(struct engine *e)
{
    struct dt_tcp *t = e->t;
    const struct dt_tcp__plan *p = e->p;
    struct pollfd pf[4] = {{.fd = t->abort_fd, .events = POLLIN}, {.fd = t->ufd, .events = POLLIN}};
    int n = 2;
    if (e->ii < p->nin && !e->in_gated)
        pf[n++] = (struct pollfd){.fd = t->fd[p->in_peer], .events = POLLIN};
    /* While we still owe the out peer data it cannot have finished the step,
     * so a hang-up on its socket means it died: watch for that too, or a rank
     * waiting on a dependency would only hear of the death second hand. */
    int outi = -1;
    if (e->oi < p->nout) {
        short ev = (short)(POLLRDHUP | (e->out_blocked ? POLLOUT : 0));
        if (n == 3 && p->out_peer == p->in_peer)
            pf[2].events |= ev;
        else {
            outi = n;
            pf[n++] = (struct pollfd){.fd = t->fd[p->out_peer], .events = ev};
        }
    }
    double left = t->deadline - dt_clock_s();
    if (left <= 0) {
        int rc = fault_check(t); /* reads pause notices, or a failure a peer reported */
        if (rc < 0 || excused(t))
            return rc;
        char what[160];
        if (e->ii < p->nin && !e->in_gated) {
            snprintf(what, sizeof what, "sent nothing for %.1f s (it, or a rank it waits for, stalled or died)",
                     t->timeout_s - t->grace_s);
            return peer_error(t, DT_ETIMEDOUT, p->in_peer, what);
        }
        snprintf(what, sizeof what, "took no data for %.1f s (stalled or dead)",
                 t->timeout_s - t->grace_s);
        return peer_error(t, DT_ETIMEDOUT, p->out_peer, what);
    }
    if (poll(pf, (nfds_t)n, (int)(left * 1000) + 1) < 0 && errno != EINTR)
        return dt_error_set_errno(DT_EIO, errno, "rank %d: %s (tcp): poll", t->rank, dt_coll_name(t->cur));
    if (outi >= 0 && (pf[outi].revents & (POLLRDHUP | POLLHUP | POLLERR)))
        return peer_error(t, DT_ECONN, p->out_peer, "closed the connection (it exited, failed or aborted)");
    if (atomic_load(&t->aborted))
        return dt_error_set(DT_EABORTED, "rank %d: %s #%llu (tcp): aborted", t->rank, dt_coll_name(t->cur),
                            (unsigned long long)t->seq);
    return pf[1].revents & POLLIN ? fault_check(t) : 0;
}

static int run(struct dt_tcp *t, const struct dt_tcp__plan *p)
{
    struct engine e = {.t = t, .p = p};
    for (int i = 0; i < p->nin; i++)
        t->processed[i] = 0;
    if (atomic_load(&t->aborted))
        return dt_error_set(DT_EABORTED, "rank %d: %s #%llu (tcp): aborted", t->rank, dt_coll_name(t->cur),
                            (unsigned long long)t->seq);
    struct spin spin = {0};
    for (;;) {
        e.progress = false;
        int rc = pump_out(&e);
        if (rc == 0)
            rc = pump_in(&e);
        if (rc < 0)
            return rc;
        bool done = e.oi >= p->nout && e.ii >= p->nin;
        if (e.progress || done) {
            if (e.progress)
                t->deadline = dt_clock_s() + t->timeout_s - t->grace_s;
            spin_end(t, &spin);
            if (done)
                return 0;
            continue;
        }
        if (spin_again(t, &spin))
            continue;
        if ((rc = wait_events(&e)) < 0)
            return rc;
    }
}

int dt_tcp__run(struct dt_tcp *t, const struct dt_tcp__plan *p)
{
    t->suspect = -1;
    int rc = run(t, p);
    return rc < 0 ? fault(t, rc) : rc;
}
