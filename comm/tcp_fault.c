/* tcp_fault.c - who failed: the `tcp` backend's failure notices, so every
 * surviving rank names the rank that died or stalled, not only the ring
 * neighbour it happened to be waiting for.
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
 * With lanes (tcp_lanes.c) the notice socket and what it has heard belong to
 * the communicator, not to a lane: every lane of a rank sends and reads
 * through lane 0's socket under notice_mu, so a failure seen on any lane is
 * known to all of them, and a rank whose lanes all finished the collective
 * still hears about it in the next one.
 *
 * Not for detecting failures (tcp_engine.c) or for the connections (tcp.c).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/error.h"
#include "comm/tcp.h"
#include "base/clock.h"

#define NOTICE_MAGIC 0x31465444u /* "DTF1" */

struct notice {
    uint32_t magic, nonce, world;
    int32_t rank, suspect;   /* sender; the peer it saw fail, -1 none */
    int32_t code;            /* the sender's DT_E* code */
    uint32_t kind;
    uint64_t seq;
    char msg[480];           /* the sender's own error message */
};

int dt_tcp_fault_open(struct dt_tcp *t, int *port)
{
    /* with two ranks the one peer is the only suspect: nothing to wait for */
    /* A quarter, not less: on a loaded machine the survivors' notices can take
     * a few hundred ms to be scheduled, and a rank that settles early keeps
     * blaming its neighbour instead of the culprit. */
    t->grace_s = t->world < 3 ? 0 : t->timeout_s / 4 < 2.0 ? t->timeout_s / 4 : 2.0;
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

int dt_tcp_fault_check(struct dt_tcp *t)
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

int dt_tcp_fault(struct dt_tcp *t, int rc)
{
    if (t->failed)
        return rc;
    read_notices(t, NULL, 0, NULL);
    notices_lock(t);
    if (t->suspect >= 0 && t->suspected[t->suspect] < 0)
        t->suspected[t->suspect] = t->rank;
    notices_unlock(t);
    send_notices(t, rc == DT_EABORTED ? -1 : t->suspect);
    dt_tcp_fail(t);
    if (rc == DT_EABORTED || t->world < 3)
        return rc; /* an abort names no peer; with two ranks the one peer is the only suspect */
    collect(t);
    notices_lock(t);
    rename_culprits(t);
    notices_unlock(t);
    return rc;
}
