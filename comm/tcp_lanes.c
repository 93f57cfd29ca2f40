/* tcp_lanes.c - large allreduces striped over several TCP connections per
 * peer, each lane driven by its own thread.
 *
 * Why: one TCP stream moves 2-3 GB/s on the 16-core test host whoever drives
 * it (Open MPI's TCP transport lands in the same place, docs/bench.md): the
 * kernel copies each byte twice and does the receive work on one core per
 * stream.  L streams on L cores move up to L times as much, until memory
 * bandwidth or the cores run out; NCCL's socket transport splits its traffic
 * over several sockets and threads for the same reason.
 *
 * A lane is a whole tcp communicator (its own mesh, failure-notice socket,
 * buffers and sequence numbers) bootstrapped under "<prefix>lane<i>/"; lane 0
 * is the communicator itself.  An allreduce of at least lane_bytes is cut into
 * L stripes of whole elements (the first n%L one element longer) and lane i
 * runs the ordinary algorithm (ring or halving-doubling, chosen by the stripe's
 * size) on stripe i: lanes 1..L-1 on their threads, lane 0 on the caller's.
 * Each stripe's sum is computed as it would be alone, so every rank still
 * gets the same bits.  All ranks must stripe alike: rank 0 decides L and
 * lane_bytes and publishes them before its address; the others read them.
 *
 * How many by default: L = CPUs per local rank, at most 4 (16 cores, 2 or 4
 * ranks: 4 lanes; the 2-core VM: 1, no lanes).  A lane's thread and the
 * kernel's work on its stream share the rank's cores well enough: 4 ranks on
 * the 16-core host, 64-256 MiB, measured 2.9-4.3 GB/s busbw with 2 lanes,
 * 4.2-5.3 with 3, 5.0-6.1 with 4 and 5.1-6.4 with 6 (6 lost half of 4's
 * rate at 4-16 MiB); Gloo 2.1-2.3 in the same run (docs/bench.md).
 * DTRAIN_TCP_LANES and DTRAIN_TCP_LANE_BYTES (default 1 MiB) on rank 0 set
 * them.
 *
 * Faults: each lane has the deadline of any tcp communicator; the failure
 * notices (tcp_fault.c) go through lane 0's socket for all lanes, so the
 * survivors name the culprit whichever lane saw it.  Once every lane has
 * returned and one failed, every lane shuts its connections: a peer whose
 * lanes all finished and that is already waiting in the next collective
 * fails at once instead of at its deadline.  The message is lane 0's when it
 * failed, else that of the first lane that did.  The communicator is unusable
 * after a failure, as without lanes.
 *
 * Not for the other collectives (they run on lane 0 alone) or for the
 * connection setup of a lane (tcp.c).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/env.h"
#include "base/error.h"
#include "comm/store.h"
#include "comm/tcp.h"

#define DT_TCP_MAX_LANES 8

struct lane {
    struct dt_tcp *t;
    pthread_t thread;
    bool started, stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;        /* a job posted, a job done, or stop */
    uint64_t posted, done;
    const char *send;
    char *recv;
    size_t n;
    enum dt_dtype dt;
    enum dt_redop op;
    int rc;
    int code;
    char msg[1024];            /* its error message (error.h keeps one per thread) */
};

struct dt_tcp_lanes {
    int n;                    /* lanes, lane 0 (the communicator itself) included */
    pthread_mutex_t notice_mu; /* the notice state all lanes share (lane 0's) */
    struct lane lane[DT_TCP_MAX_LANES];
};

int dt_tcp_lanes_choose(struct dt_tcp *t, const struct dt_comm_options *o)
{
    if (t->rank != 0 || t->world < 2)
        return 0;
    int local = o->local_world > 0 ? o->local_world : 1;
    int per = t->ncpus / local, lanes;
    uint64_t bytes;
    int rc = dt_env_int("DTRAIN_TCP_LANES", per < 1 ? 1 : per > 4 ? 4 : per, 1, DT_TCP_MAX_LANES, &lanes);
    if (rc == 0)
        rc = dt_env_u64("DTRAIN_TCP_LANE_BYTES", 1 << 20, 1024, 1ull << 40, &bytes);
    if (rc < 0)
        return dt_error_prefix("rank 0: tcp lanes");
    char key[256], val[64];
    snprintf(key, sizeof key, "%stcp/lanes", o->key_prefix);
    int len = snprintf(val, sizeof val, "%d %llu", lanes, (unsigned long long)bytes);
    if ((rc = dt_store_set(o->store, key, val, (size_t)len)) < 0)
        return dt_error_prefix("rank 0: tcp bootstrap: publishing the lane count");
    t->nlanes = lanes;
    t->lane_bytes = (size_t)bytes;
    return 0;
}

/* Rank 0's choice: it published it before its address, which we have. */
static int read_choice(struct dt_tcp *t, const struct dt_comm_options *o)
{
    if (t->rank == 0 || t->world < 2)
        return 0;
    char key[256];
    snprintf(key, sizeof key, "%stcp/lanes", o->key_prefix);
    void *v = NULL;
    size_t len = 0;
    int rc = dt_store_get(o->store, key, &v, &len);
    if (rc < 0)
        return dt_error_prefix("rank %d: tcp bootstrap: rank 0's lane count", t->rank);
    char buf[64];
    snprintf(buf, sizeof buf, "%.*s", (int)(len < sizeof buf ? len : sizeof buf - 1), (char *)v);
    free(v);
    int lanes = 0;
    unsigned long long bytes = 0;
    if (sscanf(buf, "%d %llu", &lanes, &bytes) != 2 || lanes < 1 || lanes > DT_TCP_MAX_LANES || bytes < 1024)
        return dt_error_set(DT_EPROTO, "rank %d: tcp bootstrap: rank 0 published a bad lane count \"%s\" under %s",
                            t->rank, buf, key);
    t->nlanes = lanes;
    t->lane_bytes = (size_t)bytes;
    return 0;
}

static void *lane_main(void *arg)
{
    struct lane *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (l->done == l->posted && !l->stop)
            pthread_cond_wait(&l->cv, &l->mu);
        if (l->stop)
            break;
        pthread_mutex_unlock(&l->mu);
        int rc = dt_tcp_allreduce_one(l->t, l->send, l->recv, l->n, l->dt, l->op);
        pthread_mutex_lock(&l->mu);
        l->rc = rc;
        if (rc < 0) { /* the message lives in this thread's error buffer */
            l->code = dt_error_code();
            snprintf(l->msg, sizeof l->msg, "%s", dt_error_last());
        }
        l->done++;
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* A lane reports and hears failures through lane 0's socket (its own one was
 * published but is never written to: peers send to lane 0's). */
static void borrow_notices(struct dt_tcp *lane, struct dt_tcp *t)
{
    close(lane->ufd);
    free(lane->uaddr);
    free(lane->heard);
    free(lane->suspected);
    free(lane->notice_msg);
    lane->ufd = t->ufd;
    lane->uaddr = t->uaddr;
    lane->heard = t->heard;
    lane->suspected = t->suspected;
    lane->notice_msg = t->notice_msg;
    lane->nonce = t->nonce;
    lane->grace_s = t->grace_s;
    lane->notice_mu = t->notice_mu;
    lane->notices_borrowed = true;
}

int dt_tcp_lanes_init(struct dt_tcp *t, const struct dt_comm_options *o)
{
    int rc = read_choice(t, o);
    if (rc < 0 || t->nlanes < 2)
        return rc;
    struct dt_tcp_lanes *L = calloc(1, sizeof *L);
    if (!L)
        return dt_error_set(DT_ENOMEM, "rank %d: tcp: out of memory for %d lanes", t->rank, t->nlanes);
    t->lanes = L;
    L->n = t->nlanes;
    pthread_mutex_init(&L->notice_mu, NULL);
    t->notice_mu = &L->notice_mu;
    for (int i = 1; i < L->n; i++) {
        struct lane *l = &L->lane[i];
        char prefix[256];
        snprintf(prefix, sizeof prefix, "%slane%d/", o->key_prefix, i);
        struct dt_comm_options lo = *o;
        lo.key_prefix = prefix;
        if ((rc = dt_tcp_create(&lo, false, &l->t)) < 0)
            return dt_error_prefix("rank %d: tcp lane %d of %d", t->rank, i, L->n);
        borrow_notices(l->t, t);
        pthread_mutex_init(&l->mu, NULL);
        pthread_cond_init(&l->cv, NULL);
        if (pthread_create(&l->thread, NULL, lane_main, l) != 0)
            return dt_error_set(DT_ENOMEM, "rank %d: tcp: cannot start the thread of lane %d", t->rank, i);
        l->started = true;
    }
    return 0;
}

int dt_tcp_lanes_allreduce(struct dt_tcp *t, const void *send, void *recv, size_t n, enum dt_dtype dt,
                           enum dt_redop op)
{
    struct dt_tcp_lanes *L = t->lanes;
    size_t es = dt_dtype_size(dt), base = n / (size_t)L->n, rem = n % (size_t)L->n, off = base + (rem > 0);
    for (int i = 1; i < L->n; i++) {
        struct lane *l = &L->lane[i];
        size_t len = base + ((size_t)i < rem);
        pthread_mutex_lock(&l->mu);
        l->send = (const char *)send + off * es;
        l->recv = (char *)recv + off * es;
        l->n = len;
        l->dt = dt;
        l->op = op;
        l->posted++;
        pthread_cond_broadcast(&l->cv);
        pthread_mutex_unlock(&l->mu);
        off += len;
    }
    int rc = dt_tcp_allreduce_one(t, send, recv, base + (rem > 0), dt, op);
    int first = -1;
    for (int i = 1; i < L->n; i++) {
        struct lane *l = &L->lane[i];
        pthread_mutex_lock(&l->mu);
        while (l->done != l->posted)
            pthread_cond_wait(&l->cv, &l->mu);
        pthread_mutex_unlock(&l->mu);
        if (l->rc < 0 && first < 0)
            first = i;
    }
    if (rc == 0 && first < 0)
        return 0;
    dt_tcp_fail(t);
    for (int i = 1; i < L->n; i++)
        dt_tcp_fail(L->lane[i].t);
    if (rc < 0)
        return rc;
    struct lane *l = &L->lane[first];
    return dt_error_set(l->code, "%s (lane %d of %d)", l->msg, first, L->n);
}

void dt_tcp_lanes_abort(struct dt_tcp *t)
{
    struct dt_tcp_lanes *L = t->lanes;
    for (int i = 1; L && i < L->n; i++)
        if (L->lane[i].t)
            dt_tcp_abort(L->lane[i].t);
}

void dt_tcp_lanes_destroy(struct dt_tcp *t)
{
    struct dt_tcp_lanes *L = t->lanes;
    if (!L)
        return;
    for (int i = 1; i < L->n; i++) {
        struct lane *l = &L->lane[i];
        if (l->started) {
            pthread_mutex_lock(&l->mu);
            l->stop = true;
            pthread_cond_broadcast(&l->cv);
            pthread_mutex_unlock(&l->mu);
            pthread_join(l->thread, NULL);
            pthread_mutex_destroy(&l->mu);
            pthread_cond_destroy(&l->cv);
        }
        dt_tcp_destroy(l->t);
    }
    t->notice_mu = NULL;
    pthread_mutex_destroy(&L->notice_mu);
    free(L);
    t->lanes = NULL;
}
