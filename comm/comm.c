/* comm.c - the generic communicator: backend choice, argument checks, the
 * request pool and the communication thread behind the async forms.
 *
 * Ordering: every rank must issue collectives in the same order, and the
 * async forms run on one FIFO thread, so a blocking call issued while async
 * requests are pending is queued behind them and waited for; with nothing
 * pending it runs on the caller's thread, which keeps small-message latency
 * free of a thread hand-off.  One thread at a time may call into a
 * communicator (the comm thread is internal).
 *
 * Failure is sticky: the first error is kept, and every later call (queued or
 * new) returns it, so a trainer sees one clear cause.
 *
 * Also the one CPU count the backends' spin policies share
 * (dt_comm_cpus_available, comm_backend.h).
 *
 * Not for moving bytes: that is the backends' job (comm_backend.h).
 */
#include "comm/comm.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm_backend.h"
#include "base/error.h"
#include "base/log.h"
#include "base/clock.h"

#define DT_COMM_MAX_REQS 512   /* requests in flight per communicator */
#define DT_COMM_ERR_MAX 512

struct dt_comm_req {
    struct dt_comm *c;
    enum dt_coll_kind kind;
    const void *send;
    void *recv;
    size_t count;
    enum dt_dtype dtype;
    enum dt_redop op;
    int root;
    atomic_int done;
    int rc;
    int next_free;
};

struct dt_comm {
    const struct dt_comm_backend *be;   /* NULL for world 1 */
    void *st;
    const char *name;
    int rank, world;
    dt_comm_span_fn span_fn;            /* trace hook, called on the comm thread */
    void *span_ctx;
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    pthread_t thread;
    bool thread_started, stopping;
    int queue[DT_COMM_MAX_REQS];        /* FIFO of request indices */
    int qhead, qlen;
    atomic_int inflight;                /* submitted and not yet finished */
    int free_head;
    atomic_int aborted;
    atomic_int failed;                  /* sticky error code, 0 if none; err is written first */
    char err[DT_COMM_ERR_MAX];
    struct dt_comm_req reqs[DT_COMM_MAX_REQS];
};

static const char *const coll_names[DT_COLL_KIND_COUNT] = {"allreduce", "broadcast", "allgather",
                                                           "reduce_scatter", "barrier"};

const char *dt_coll_name(enum dt_coll_kind k) { return k < DT_COLL_KIND_COUNT ? coll_names[k] : "?"; }

void dt_comm_set_span_hook(struct dt_comm *c, dt_comm_span_fn fn, void *ctx)
{
    pthread_mutex_lock(&c->mu);
    c->span_fn = fn;
    c->span_ctx = ctx;
    pthread_mutex_unlock(&c->mu);
}

size_t dt_dtype_size(enum dt_dtype t)
{
    static const size_t sizes[DT_DTYPE_COUNT] = {4, 8, 2, 2, 4, 8};
    return (unsigned)t < DT_DTYPE_COUNT ? sizes[t] : 0;
}

const char *dt_dtype_name(enum dt_dtype t)
{
    static const char *const names[DT_DTYPE_COUNT] = {"float", "double", "half", "bfloat16", "int32", "int64"};
    return (unsigned)t < DT_DTYPE_COUNT ? names[t] : "?";
}

const char *dt_redop_name(enum dt_redop op)
{
    static const char *const names[DT_REDOP_COUNT] = {"sum", "avg", "max", "min"};
    return (unsigned)op < DT_REDOP_COUNT ? names[op] : "?";
}

int dt_comm_cpus_available(void)
{
    cpu_set_t set;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (sched_getaffinity(0, sizeof set, &set) == 0 && (CPU_COUNT(&set) > 1 || online <= 1))
        return CPU_COUNT(&set);
    return online > 0 ? (int)online : 1;
}

static const struct dt_comm_backend *const backends[] = {&dt_comm_backend_tcp, &dt_comm_backend_shm,
#ifdef DT_HAVE_CUDA
                                                          &dt_comm_backend_nccl,
#endif
#ifdef DT_HAVE_MPI
                                                          &dt_comm_backend_mpi,
#endif
};

static bool auto_backend(const struct dt_comm_options *o)
{
    return !o->backend || !*o->backend || !strcmp(o->backend, "auto");
}

/* auto: one rank needs no backend; all ranks on one host share memory;
 * otherwise TCP. */
static int pick_backend(const struct dt_comm_options *o, const struct dt_comm_backend **out)
{
    const char *want = auto_backend(o) ? "auto" : o->backend;
    if (!strcmp(want, "auto"))
        want = o->local_world == o->world ? "shm" : "tcp";
    for (size_t i = 0; i < sizeof backends / sizeof *backends; i++)
        if (!strcmp(backends[i]->name, want)) {
            *out = backends[i];
            return 0;
        }
    if (!strcmp(want, "nccl") || !strcmp(want, "mpi"))
        return dt_error_set(DT_EUNSUPPORTED, "communicator backend '%s' is not built into this dtrain", want);
    return dt_error_set(DT_EINVAL, "unknown communicator backend '%s' (expected tcp, shm, nccl, mpi or auto)",
                        want);
}

static void *comm_thread_main(void *arg);

int dt_comm_init(const struct dt_comm_options *opts, struct dt_comm **out)
{
    *out = NULL;
    if (!opts || opts->world < 1 || opts->rank < 0 || opts->rank >= opts->world)
        return dt_error_set(DT_EINVAL, "communicator: rank %d is not within world size %d",
                            opts ? opts->rank : -1, opts ? opts->world : 0);
    struct dt_comm_options o = *opts;
    if (o.timeout_s <= 0)
        o.timeout_s = 60;
    if (!o.key_prefix)
        o.key_prefix = "comm/";
    if (o.local_world < 1) {
        o.local_world = 1;
        o.local_rank = 0;
    }
    const struct dt_comm_backend *be = NULL;
    int rc = pick_backend(&o, &be);
    if (rc < 0)
        return rc;
    struct dt_comm *c = calloc(1, sizeof *c);
    if (!c)
        return dt_error_set(DT_ENOMEM, "communicator: out of memory");
    c->rank = o.rank;
    c->world = o.world;
    c->name = be->name;
    if (o.world > 1 || be->device_buffers) {
        if (!o.store && o.world > 1 && !be->self_bootstrap) {
            free(c);
            return dt_error_set(DT_EINVAL, "communicator: world size %d needs a store to bootstrap", o.world);
        }
        rc = be->init(&o, &c->st);
        /* auto on one host, with no room in /dev/shm for shm's segment (rank 0
         * told every rank so): tcp over loopback works anywhere. */
        if (rc == DT_ENOMEM && be == &dt_comm_backend_shm && auto_backend(&o)) {
            if (o.rank == 0)
                dt_log_warn("%s; the auto communicator uses tcp instead", dt_error_last());
            be = &dt_comm_backend_tcp;
            c->name = be->name;
            rc = be->init(&o, &c->st);
        }
        if (rc < 0) {
            free(c);
            return rc;
        }
        c->be = be;
    }
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->work_cv, NULL);
    pthread_cond_init(&c->done_cv, NULL);
    for (int i = 0; i < DT_COMM_MAX_REQS; i++) {
        c->reqs[i].c = c;
        c->reqs[i].next_free = i + 1 < DT_COMM_MAX_REQS ? i + 1 : -1;
    }
    c->free_head = 0;
    *out = c;
    return 0;
}

int dt_comm_rank(const struct dt_comm *c) { return c->rank; }
int dt_comm_world(const struct dt_comm *c) { return c->world; }
const char *dt_comm_backend_name(const struct dt_comm *c) { return c->name; }

void *dt_comm_backend_state(struct dt_comm *c, const struct dt_comm_backend *be)
{
    return c && be && c->be == be ? c->st : NULL;
}

/* World 1: every collective is a copy (an average over one rank is the value). */
static int run_self(struct dt_comm_req *r)
{
    size_t bytes = r->count * dt_dtype_size(r->dtype);
    if (r->kind != DT_COLL_BROADCAST && r->kind != DT_COLL_BARRIER && r->send != r->recv && bytes)
        memmove(r->recv, r->send, bytes);
    return 0;
}

static int run_backend(struct dt_comm_req *r)
{
    struct dt_comm *c = r->c;
    if (!c->be)
        return run_self(r);
    switch (r->kind) {
    case DT_COLL_ALLREDUCE: return c->be->allreduce(c->st, r->send, r->recv, r->count, r->dtype, r->op);
    case DT_COLL_BROADCAST: return c->be->broadcast(c->st, r->recv, r->count, r->dtype, r->root);
    case DT_COLL_ALLGATHER: return c->be->allgather(c->st, r->send, r->recv, r->count, r->dtype);
    case DT_COLL_REDUCE_SCATTER:
        return c->be->reduce_scatter(c->st, r->send, r->recv, r->count, r->dtype, r->op);
    case DT_COLL_BARRIER: return c->be->barrier(c->st);
    default: return dt_error_set(DT_EINTERNAL, "comm.c: unknown collective %d", (int)r->kind);
    }
}

/* Runs one request unless the communicator already failed; records the first
 * failure.  Called with c->mu NOT held. */
static int execute(struct dt_comm_req *r)
{
    struct dt_comm *c = r->c;
    if (atomic_load(&c->aborted))
        return dt_error_set(DT_EABORTED, "rank %d: %s: the communicator was aborted", c->rank,
                            dt_coll_name(r->kind));
    int failed = atomic_load(&c->failed); /* no lock on the hot path: err is set before failed */
    if (failed)
        return dt_error_set(failed, "%s", c->err);
    int rc = run_backend(r);
    if (rc < 0) {
        pthread_mutex_lock(&c->mu);
        if (!atomic_load(&c->failed)) {
            snprintf(c->err, sizeof c->err, "%s", dt_error_last());
            atomic_store(&c->failed, rc);
        }
        pthread_mutex_unlock(&c->mu);
    }
    return rc;
}

static void *comm_thread_main(void *arg)
{
    struct dt_comm *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->qlen && !c->stopping)
            pthread_cond_wait(&c->work_cv, &c->mu);
        if (!c->qlen)
            break;
        struct dt_comm_req *r = &c->reqs[c->queue[c->qhead]];
        c->qhead = (c->qhead + 1) % DT_COMM_MAX_REQS;
        c->qlen--;
        pthread_mutex_unlock(&c->mu);
        int64_t t0 = c->span_fn ? dt_clock_ns() : 0;
        int rc = execute(r);
        if (c->span_fn)
            c->span_fn(c->span_ctx, dt_coll_name(r->kind), r->recv, t0, dt_clock_ns());
        pthread_mutex_lock(&c->mu);
        r->rc = rc;
        atomic_store(&r->done, 1);
        c->inflight--;
        pthread_cond_broadcast(&c->done_cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static int check_args(struct dt_comm *c, const struct dt_comm_req *r)
{
    const char *what = dt_coll_name(r->kind);
    if ((unsigned)r->dtype >= DT_DTYPE_COUNT)
        return dt_error_set(DT_EINVAL, "rank %d: %s: unknown dtype %d", c->rank, what, (int)r->dtype);
    if ((unsigned)r->op >= DT_REDOP_COUNT)
        return dt_error_set(DT_EINVAL, "rank %d: %s: unknown reduction %d", c->rank, what, (int)r->op);
    if (r->kind == DT_COLL_BROADCAST && (r->root < 0 || r->root >= c->world))
        return dt_error_set(DT_EINVAL, "rank %d: broadcast: root %d is not a rank of world size %d", c->rank,
                            r->root, c->world);
    if (r->count > (SIZE_MAX / 16) / (size_t)c->world)
        return dt_error_set(DT_EINVAL, "rank %d: %s: count %zu is too large", c->rank, what, r->count);
    if (r->count && r->kind != DT_COLL_BARRIER && (!r->recv || (r->kind != DT_COLL_BROADCAST && !r->send)))
        return dt_error_set(DT_EINVAL, "rank %d: %s: NULL buffer for %zu elements", c->rank, what, r->count);
    return 0;
}

/* Takes a request from the pool and fills it; caller holds c->mu. */
static struct dt_comm_req *req_take(struct dt_comm *c, const struct dt_comm_req *proto)
{
    if (c->free_head < 0)
        return NULL;
    struct dt_comm_req *r = &c->reqs[c->free_head];
    c->free_head = r->next_free;
    int next = r->next_free;
    *r = *proto;
    r->c = c;
    r->next_free = next;
    atomic_store(&r->done, 0);
    r->rc = 0;
    return r;
}

/* A backend with its own async forms (a GPU stream) orders its work itself:
 * its async requests start on its stream, not on the communication thread,
 * and its blocking forms run on the caller's thread even with requests
 * pending (the stream puts them behind those). */
static bool native_async(const struct dt_comm *c)
{
    return c->be && c->be->iallreduce != NULL;
}

/* The async forms are allreduce and barrier (dt_comm_iallreduce, _ibarrier). */
static int start_native(struct dt_comm_req *r)
{
    const struct dt_comm_backend *b = r->c->be;
    void *st = r->c->st;
    switch (r->kind) {
    case DT_COLL_ALLREDUCE: return b->iallreduce(st, r->send, r->recv, r->count, r->dtype, r->op, r);
    case DT_COLL_BARRIER: return b->ibarrier(st, r);
    default: return dt_error_set(DT_EINTERNAL, "comm.c: unknown collective %d", (int)r->kind);
    }
}

static int submit(struct dt_comm *c, const struct dt_comm_req *proto, struct dt_comm_req **out)
{
    int rc = check_args(c, proto);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&c->mu);
    if (!c->thread_started) {
        if (pthread_create(&c->thread, NULL, comm_thread_main, c) != 0) {
            pthread_mutex_unlock(&c->mu);
            return dt_error_set(DT_ENOMEM, "rank %d: could not start the communication thread", c->rank);
        }
        c->thread_started = true;
    }
    struct dt_comm_req *r = req_take(c, proto);
    if (!r) {
        pthread_mutex_unlock(&c->mu);
        return dt_error_set(DT_ENOMEM, "rank %d: %s: more than %d requests in flight (wait for some)", c->rank,
                            dt_coll_name(proto->kind), DT_COMM_MAX_REQS);
    }
    c->inflight++;
    *out = r;
    if (native_async(c)) {
        pthread_mutex_unlock(&c->mu);
        if ((rc = start_native(r)) < 0)
            dt_comm_req_finish(r, rc);
        return 0;
    }
    c->queue[(c->qhead + c->qlen) % DT_COMM_MAX_REQS] = (int)(r - c->reqs);
    c->qlen++;
    pthread_cond_signal(&c->work_cv);
    pthread_mutex_unlock(&c->mu);
    return 0;
}

int dt_comm_wait(struct dt_comm_req *r)
{
    if (!r)
        return dt_error_set(DT_EINVAL, "dt_comm_wait: NULL request");
    struct dt_comm *c = r->c;
    pthread_mutex_lock(&c->mu);
    while (!atomic_load(&r->done))
        pthread_cond_wait(&c->done_cv, &c->mu);
    int rc = r->rc;
    if (rc < 0)
        dt_error_set(rc, "%s", c->failed ? c->err : "operation failed");
    r->next_free = c->free_head;
    c->free_head = (int)(r - c->reqs);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int dt_comm_test(struct dt_comm_req *r, bool *done)
{
    if (!r)
        return dt_error_set(DT_EINVAL, "dt_comm_test: NULL request");
    *done = atomic_load(&r->done) != 0;
    return 0;
}

void dt_comm_req_finish(struct dt_comm_req *r, int rc)
{
    struct dt_comm *c = r->c;
    pthread_mutex_lock(&c->mu);
    if (rc < 0 && !atomic_load(&c->failed)) {
        snprintf(c->err, sizeof c->err, "%s", dt_error_last());
        atomic_store(&c->failed, rc);
    }
    r->rc = rc;
    atomic_store(&r->done, 1);
    c->inflight--;
    pthread_cond_broadcast(&c->done_cv);
    pthread_mutex_unlock(&c->mu);
}

/* Blocking form: inline when nothing is queued (the comm thread is then
 * idle and stays so: only this thread submits), else behind the queue. */
static int run_blocking(struct dt_comm *c, const struct dt_comm_req *proto)
{
    int rc = check_args(c, proto);
    if (rc < 0)
        return rc;
    int busy = atomic_load(&c->inflight);
    if (!busy || native_async(c)) {
        struct dt_comm_req r = *proto;
        r.c = c;
        return execute(&r);
    }
    struct dt_comm_req *req;
    if ((rc = submit(c, proto, &req)) < 0)
        return rc;
    return dt_comm_wait(req);
}

#define PROTO(K, S, R, N, T, OP, ROOT) \
    (struct dt_comm_req) { .kind = (K), .send = (S), .recv = (R), .count = (N), .dtype = (T), .op = (OP), .root = (ROOT) }

int dt_comm_allreduce(struct dt_comm *c, const void *send, void *recv, size_t count, enum dt_dtype t,
                      enum dt_redop op)
{
    return run_blocking(c, &PROTO(DT_COLL_ALLREDUCE, send, recv, count, t, op, -1));
}

int dt_comm_broadcast(struct dt_comm *c, void *buf, size_t count, enum dt_dtype t, int root)
{
    return run_blocking(c, &PROTO(DT_COLL_BROADCAST, buf, buf, count, t, DT_SUM, root));
}

int dt_comm_allgather(struct dt_comm *c, const void *send, void *recv, size_t count, enum dt_dtype t)
{
    return run_blocking(c, &PROTO(DT_COLL_ALLGATHER, send, recv, count, t, DT_SUM, -1));
}

int dt_comm_reduce_scatter(struct dt_comm *c, const void *send, void *recv, size_t count, enum dt_dtype t,
                           enum dt_redop op)
{
    return run_blocking(c, &PROTO(DT_COLL_REDUCE_SCATTER, send, recv, count, t, op, -1));
}

int dt_comm_barrier(struct dt_comm *c)
{
    return run_blocking(c, &PROTO(DT_COLL_BARRIER, NULL, NULL, 0, DT_F32, DT_SUM, -1));
}

int dt_comm_iallreduce(struct dt_comm *c, const void *send, void *recv, size_t count, enum dt_dtype t,
                       enum dt_redop op, struct dt_comm_req **req)
{
    return submit(c, &PROTO(DT_COLL_ALLREDUCE, send, recv, count, t, op, -1), req);
}

int dt_comm_ibarrier(struct dt_comm *c, struct dt_comm_req **req)
{
    return submit(c, &PROTO(DT_COLL_BARRIER, NULL, NULL, 0, DT_F32, DT_SUM, -1), req);
}

static int alloc_shared(struct dt_comm *c, size_t bytes, bool common, void **out)
{
    *out = NULL;
    if (!c->be || !c->be->alloc_shared)
        return 0;
    if (atomic_load(&c->inflight))
        return dt_error_set(DT_EINVAL, "rank %d: alloc_shared: %d operations are still in flight", c->rank,
                            atomic_load(&c->inflight));
    int failed = atomic_load(&c->failed);
    if (failed)
        return dt_error_set(failed, "%s", c->err);
    return c->be->alloc_shared(c->st, bytes, common, out);
}

int dt_comm_alloc_shared(struct dt_comm *c, size_t bytes, void **out)
{
    return alloc_shared(c, bytes, false, out);
}

int dt_comm_alloc_common(struct dt_comm *c, size_t bytes, void **out)
{
    return alloc_shared(c, bytes, true, out);
}

void dt_comm_free_shared(struct dt_comm *c, void *p)
{
    if (c && p && c->be && c->be->free_shared)
        c->be->free_shared(c->st, p);
}

void dt_comm_busy(struct dt_comm *c, bool busy)
{
    if (c && c->be && c->be->busy)
        c->be->busy(c->st, busy);
}

void dt_comm_abort(struct dt_comm *c)
{
    if (!c)
        return;
    atomic_store(&c->aborted, 1);
    if (c->be)
        c->be->abort(c->st);
}

void dt_comm_destroy(struct dt_comm *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    c->stopping = true;
    pthread_cond_signal(&c->work_cv);
    bool started = c->thread_started;
    pthread_mutex_unlock(&c->mu);
    if (started)
        pthread_join(c->thread, NULL);
    if (c->be)
        c->be->destroy(c->st);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->work_cv);
    pthread_cond_destroy(&c->done_cv);
    free(c);
}
