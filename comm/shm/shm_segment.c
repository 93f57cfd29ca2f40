/* shm_segment.c - the `shm` backend (collectives among ranks of one host
 * through one POSIX shared-memory segment): the segment and the protocol of
 * rounds every collective runs on.
 *
 * Segment: a header, one control block per rank (three monotonically growing
 * counters, each on its own 128-byte line: in, red, out), and per rank
 * `nbuf` slots of `slot` bytes.  A collective is a sequence of rounds; round
 * k uses slot set k % nbuf and has up to three phases:
 *   A (in):  each rank copies its part of the segment into its own slot;
 *   B (red): rank q reduces piece q of every rank's slot, in rank order
 *            0..p-1, into its own slot (one rank computes each piece, so all
 *            ranks end with the same bits);
 *   C (out): each rank copies every rank's reduced piece out.
 * A phase ends by publishing the round number (release store) in the rank's
 * counter; a rank waits for the counters it needs (acquire loads).  A rank
 * may start round k only when every rank's `out` has passed round k - nbuf,
 * so with nbuf = 2 one round's copy-in overlaps the previous round's
 * reduction and copy-out on other ranks.  Small allreduces skip B and C:
 * every rank reduces the whole vector from all slots itself.
 *
 * Memory traffic per rank for allreduce of S bytes (a rank's own piece is
 * reduced straight from its send buffer): copy-in 2(p-1)/p*S, reduce S + 2S/p,
 * copy-out 2(p-1)/p*S; busbw factor 2(p-1)/p as for any allreduce.
 *
 * Waiting spins (pause) while the peer runs on another CPU, yields while it
 * shares ours, and after 1 ms sleeps on the peer's futex word (woken by its
 * next publish).  Every wait checks the collective's deadline, the abort flag, a
 * shared "failed" flag (set by the first rank that fails, so everyone fails
 * fast with its reason), and every 10 ms whether the awaited peer's process
 * still exists (a zombie counts as dead).
 *
 * An in-place allreduce of a buffer from dt_comm_alloc_shared skips the
 * slots: every rank maps every rank's buffer and reduces its piece straight
 * from them (shm_shared.c).
 *
 * Not for ranks on different hosts (tcp), not a general allocator, and not
 * for what a collective puts in the slots (shm_coll.c).
 */
#include "comm/shm/shm_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/env.h"
#include "base/error.h"
#include "base/proc.h"
#include "comm/store.h"

/* ---- the segment's layout ---- */

#define SHM_MAGIC 0x314d4853u /* "SHM1" */
#define LINE 128

/* The segment: this header, one control block per rank, then the slots. */
struct dt_shm__hdr {
    uint32_t magic, world, nbuf, pad;
    uint64_t slot;
    atomic_int attached;
    atomic_int failed;          /* 1 + rank of the first rank that failed; 0 if none */
    atomic_int code;            /* its DT_E* code */
    char why[512];              /* its message */
};

/* `in` and both descriptions share one line (struct dt_shm__ctl). */
_Static_assert(sizeof(uint64_t) + 2 * sizeof(struct dt_shm__desc) <= LINE,
               "dt_shm__desc outgrew its cache line");

struct dt_shm__ctl {
    /* `in` and the description share a line: a peer reads both at once. */
    _Alignas(LINE) atomic_uint_fast64_t in;
    struct dt_shm__desc desc[2]; /* per slot set (round % nbuf, nbuf <= 2) */
    _Alignas(LINE) atomic_uint_fast64_t red;
    _Alignas(LINE) atomic_uint_fast64_t out;
    _Alignas(LINE) int32_t pid;
    atomic_uint wake;           /* futex word: bumped on every publish */
    atomic_int sleepers;        /* ranks blocked on `wake` */
    atomic_int cpu;             /* the CPU it last published from (spin or yield?) */
};

static size_t hdr_bytes(void) { return (sizeof(struct dt_shm__hdr) + LINE - 1) / LINE * LINE; }

char *dt_shm__slot(struct dt_shm *s, int q, uint64_t round)
{
    return s->data + ((size_t)q * (size_t)s->nbuf + (size_t)(round % (uint64_t)s->nbuf)) * s->slot;
}

/* ---- failure ---- */

/* Records the first failure in the segment so every rank stops waiting. */
int dt_shm__fail(struct dt_shm *s, int code)
{
    int zero = 0;
    if (atomic_compare_exchange_strong(&s->hdr->failed, &zero, s->rank + 1)) {
        snprintf(s->hdr->why, sizeof s->hdr->why, "%s", dt_error_last());
        atomic_store(&s->hdr->code, code);
    }
    return code;
}

static int peer_fail(struct dt_shm *s, int code, int peer, const char *what)
{
    dt_error_set(code, "rank %d: %s #%llu (shm): peer rank %d (pid %d) %s", s->rank, dt_coll_name(s->cur),
                 (unsigned long long)s->seq, peer, (int)s->ctl[peer].pid, what);
    return dt_shm__fail(s, code);
}

/* A process that is gone or a zombie is dead. */
static bool pid_dead(int pid)
{
    if (pid <= 0)
        return false;
    if (kill(pid, 0) < 0 && errno == ESRCH)
        return true;
    char entry[24];
    snprintf(entry, sizeof entry, "%d", pid);
    struct dt_proc_stat st;
    return dt_proc_stat_read(entry, &st) == 0 && (st.state == 'Z' || st.state == 'X');
}

/* ---- waiting for a peer ---- */

static int check_desc(struct dt_shm *s, int q, uint64_t round);

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Sleeps on rank q's futex word until it publishes again (or 10 ms pass, so
 * deadlines, aborts and dead peers are still noticed).  The sleeper count and
 * the counter re-check make a lost wake-up impossible: either the publisher
 * sees us counted and wakes us, or we see its new counter value. */
static void sleep_on(struct dt_shm *s, int q, atomic_uint_fast64_t *c, uint64_t target)
{
    struct dt_shm__ctl *peer = &s->ctl[q];
    unsigned w = atomic_load(&peer->wake);
    atomic_fetch_add(&peer->sleepers, 1);
    if (atomic_load(c) < target) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        syscall(SYS_futex, &peer->wake, FUTEX_WAIT, w, &ts, NULL, 0);
    }
    atomic_fetch_sub(&peer->sleepers, 1);
}

/* The checks a waiting rank makes now and then: a failed peer, abort, the
 * deadline, and (every 10 ms) whether the awaited process still exists. */
static int wait_checks(struct dt_shm *s, int q, atomic_uint_fast64_t *c, uint64_t target, double now,
                       double *next_pid_check)
{
    int f = atomic_load(&s->hdr->failed);
    if (f && f != s->rank + 1) /* its code: a protocol error stays one, a death stays DT_ECONN */
        return dt_error_set(atomic_load(&s->hdr->code) == DT_EPROTO ? DT_EPROTO : DT_ECONN,
                            "rank %d: %s #%llu (shm): peer rank %d failed: %s", s->rank, dt_coll_name(s->cur),
                            (unsigned long long)s->seq, f - 1, s->hdr->why);
    if (atomic_load(&s->aborted)) {
        dt_error_set(DT_EABORTED, "rank %d: %s #%llu (shm): aborted", s->rank, dt_coll_name(s->cur),
                     (unsigned long long)s->seq);
        return dt_shm__fail(s, DT_EABORTED);
    }
    if (now > s->deadline) {
        char what[96];
        snprintf(what, sizeof what, "made no progress for %.1f s (stalled or dead)", s->timeout_s);
        return peer_fail(s, DT_ETIMEDOUT, q, what);
    }
    if (now >= *next_pid_check) {
        /* A peer that published and then exited normally is not a failure:
         * look at the counter again once we know the process is gone. */
        if (pid_dead(s->ctl[q].pid) && atomic_load(c) < target)
            return peer_fail(s, DT_ECONN, q, "died");
        *next_pid_check = now + 0.01;
    }
    return 0;
}

/* Waits until counter `which` of rank q reaches `target`.  For the first
 * millisecond: spin with pause if the peer last ran on another CPU (it
 * answers within a microsecond, and a spinning rank keeps its time slice on
 * a busy machine, where sched_yield would hand it to another process for
 * milliseconds), or sched_yield if it ran on this CPU (spinning would only
 * delay it: that made 8-byte allreduces cost ~80 us when the scheduler put
 * two ranks on one core).  Then sleep on the peer's futex, so a rank waiting
 * for a slow peer (one still computing its gradients) gives the core back. */
int dt_shm__wait(struct dt_shm *s, int q, int which, uint64_t target)
{
    atomic_uint_fast64_t *c = which == 0 ? &s->ctl[q].in : which == 1 ? &s->ctl[q].red : &s->ctl[q].out;
    double t0 = 0, waited = 0, next_pid_check = 0;
    bool spin = !s->oversubscribed;
    for (uint64_t i = 0;; i++) {
        if (atomic_load_explicit(c, memory_order_acquire) >= target)
            return which == DT_SHM__IN ? check_desc(s, q, target - 1) : 0;
        if (waited >= s->sleep_s)
            sleep_on(s, q, c, target);
        else if (!spin)
            sched_yield();
        else
            cpu_relax();
        if ((i & 15) != 15 && waited < s->sleep_s)
            continue;
        /* Spinning only helps when the peer runs on another CPU; on ours it
         * only delays it, so yield then. */
        spin = !s->oversubscribed && atomic_load_explicit(&s->ctl[q].cpu, memory_order_relaxed) != sched_getcpu();
        double now = dt_clock_s();
        if (t0 == 0) { /* the first look at /proc costs tens of us: not before 10 ms of waiting */
            t0 = now;
            next_pid_check = now + 0.01;
        }
        waited = now - t0;
        int rc = wait_checks(s, q, c, target, now, &next_pid_check);
        if (rc < 0)
            return rc;
    }
}

int dt_shm__wait_all(struct dt_shm *s, int which, uint64_t target)
{
    for (int q = 0; q < s->world; q++) {
        if (q == s->rank)
            continue;
        int rc = dt_shm__wait(s, q, which, target);
        if (rc < 0)
            return rc;
    }
    if (which == DT_SHM__IN && target > s->in_seen)
        s->in_seen = target;
    return 0;
}

/* ---- rounds ---- */

/* After a rank's counters are stored (release), wakes its sleepers.  Every
 * store to a line a peer has read costs a cache miss, and a seq_cst store
 * waits for it; so the counters go out as release stores, which overlap, and
 * one fence orders them all before the look at `sleepers`.  That fence is what
 * makes a lost wake-up impossible (sleep_on): either we see a sleeper
 * counted, or it sees our counter.  `wake` is bumped only when someone
 * sleeps, and `cpu` rewritten only when it changed, so an 8-byte allreduce
 * on 2 ranks moves a handful of lines instead of a dozen. */
static void wake_sleepers(struct dt_shm__ctl *c)
{
    int cpu = sched_getcpu();
    if (atomic_load_explicit(&c->cpu, memory_order_relaxed) != cpu)
        atomic_store_explicit(&c->cpu, cpu, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&c->sleepers, memory_order_relaxed) > 0) {
        atomic_fetch_add(&c->wake, 1);
        syscall(SYS_futex, &c->wake, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
    }
}

void dt_shm__publish(struct dt_shm *s, int which, uint64_t v)
{
    struct dt_shm__ctl *c = &s->ctl[s->rank];
    atomic_store_explicit(which == 0 ? &c->in : which == 1 ? &c->red : &c->out, v, memory_order_release);
    wake_sleepers(c);
}

/* Starts a round: the slot set is free once every rank finished round
 * k - nbuf.  A peer whose `in` reached k has begun round k - 1, so it
 * finished round k - 2 (= k - nbuf): when the last round waited for every
 * rank's `in` (s->in_seen), there is nothing to wait for, and the peers'
 * `out` lines need not even be read. */
int dt_shm__round_begin(struct dt_shm *s)
{
    uint64_t k = s->round;
    int rc = 0;
    if (k + 1 > (uint64_t)s->nbuf && !(s->nbuf == 2 && s->in_seen >= k))
        rc = dt_shm__wait_all(s, DT_SHM__OUT, k + 1 - (uint64_t)s->nbuf);
    /* The description goes into the slot set only once it is free: a peer
     * still in round k - nbuf may be reading the old one. */
    if (rc == 0)
        s->ctl[s->rank].desc[k % (uint64_t)s->nbuf] = s->cur_desc;
    return rc;
}

/* Counters only grow and a round may have published `in` or `red` already:
 * a store that changes nothing is skipped (it would still take the line
 * away from the peers reading it). */
void dt_shm__round_end(struct dt_shm *s)
{
    struct dt_shm__ctl *c = &s->ctl[s->rank];
    uint64_t v = ++s->round;
    atomic_uint_fast64_t *ctr[3] = {&c->in, &c->red, &c->out};
    for (int i = 0; i < 3; i++)
        if (atomic_load_explicit(ctr[i], memory_order_relaxed) != v)
            atomic_store_explicit(ctr[i], v, memory_order_release);
    wake_sleepers(c);
}

void dt_shm__begin(struct dt_shm *s, enum dt_coll_kind k, size_t count, enum dt_dtype t, enum dt_redop op,
                   int root)
{
    s->cur = k;
    s->seq++;
    s->deadline = dt_clock_s() + s->timeout_s;
    s->cur_desc =
        (struct dt_shm__desc){.seq = s->seq, .count = count, .kind = k, .dtype = t, .op = op, .root = root};
}

static int check_desc(struct dt_shm *s, int q, uint64_t round)
{
    const struct dt_shm__desc *d = &s->ctl[q].desc[round % (uint64_t)s->nbuf], *m = &s->cur_desc;
    if (!memcmp(d, m, sizeof *d))
        return 0;
    dt_error_set(DT_EPROTO,
                 "rank %d: %s #%llu (shm, count %llu, %s, %s, root %d, shared buffer %u+%llu -> %u+%llu): peer rank "
                 "%d is running %s #%llu (count %llu, %s, %s, root %d, shared buffer %u+%llu -> %u+%llu); every rank "
                 "must call the same collectives in the same order, on shared buffers (dt_comm_alloc_shared, "
                 "_common) at the same offsets on all ranks or on none",
                 s->rank, dt_coll_name(s->cur), (unsigned long long)m->seq, (unsigned long long)m->count,
                 dt_dtype_name(m->dtype), dt_redop_name(m->op), m->root, m->region, (unsigned long long)m->offset,
                 m->to_region, (unsigned long long)m->to_offset, q, dt_coll_name(d->kind), (unsigned long long)d->seq,
                 (unsigned long long)d->count, dt_dtype_name(d->dtype), dt_redop_name(d->op), d->root, d->region,
                 (unsigned long long)d->offset, d->to_region, (unsigned long long)d->to_offset);
    return dt_shm__fail(s, DT_EPROTO);
}

/* ---- setup and teardown ---- */

/* The segment at its full size now (posix_fallocate): a /dev/shm without room
 * (or a segment over DTRAIN_SHM_MAX_BYTES) is DT_ENOMEM here, not a SIGBUS at
 * first touch. */
static int create_segment(struct dt_shm *s, size_t total, int *fd)
{
    uint64_t limit;
    if (dt_env_u64("DTRAIN_SHM_MAX_BYTES", UINT64_MAX, 0, UINT64_MAX, &limit) < 0)
        return dt_error_prefix("rank 0: shm");
    if (total > limit)
        return dt_error_set(DT_ENOMEM, "rank 0: shm: the segment (%zu bytes) is over DTRAIN_SHM_MAX_BYTES=%llu",
                            total, (unsigned long long)limit);
    *fd = shm_open(s->name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    int e = *fd < 0 ? errno : ftruncate(*fd, (off_t)total) < 0 ? errno : posix_fallocate(*fd, 0, (off_t)total);
    if (!e)
        return 0;
    if (*fd >= 0) {
        close(*fd);
        shm_unlink(s->name);
    }
    return dt_error_set_errno(e == ENOSPC ? DT_ENOMEM : DT_EIO, e, "rank 0: shm: cannot create %s (%zu bytes)%s",
                              s->name, total, e == ENOSPC ? " in /dev/shm; give the job a larger /dev/shm "
                              "(docker run --shm-size) or use the tcp backend" : "");
}

/* When rank 0 cannot set the segment up it publishes why in place of a name
 * (NO_ROOM: DT_ENOMEM, so `auto` turns to tcp on every rank; FAILED: any
 * other error), so the others fail at once instead of at their deadline. */
#define NO_ROOM "-"
#define FAILED "!"
static int refuse(struct dt_shm *s, const struct dt_comm_options *o, const char *key, int rc)
{
    const char *why = rc == DT_ENOMEM ? NO_ROOM : FAILED;
    dt_store_set(o->store, key, why, strlen(why)); /* rank 0's own message stays the one it returns */
    s->name[0] = 0; /* nothing of ours to remove at destroy */
    return rc;
}

/* Rank 0 creates, sizes and touches the segment (first-touch page faults are
 * paid here, once), then publishes its name; the others map it populated. */
static int map_segment(struct dt_shm *s, const struct dt_comm_options *o)
{
    size_t total = hdr_bytes() + sizeof(struct dt_shm__ctl) * (size_t)s->world +
                   (size_t)s->world * (size_t)s->nbuf * s->slot;
    char key[256];
    snprintf(key, sizeof key, "%sshm/name", o->key_prefix);
    int fd = -1, rc;
    if (s->rank == 0) {
        snprintf(s->name, sizeof s->name, "/dtrain-%d-%08lx", (int)getpid(), (unsigned long)(dt_clock_s() * 1e6));
        if ((rc = create_segment(s, total, &fd)) < 0)
            return refuse(s, o, key, rc); /* create_segment removed what it made */
    } else {
        const char *keys[1] = {key};
        void *v = NULL;
        size_t len = 0;
        if ((rc = dt_store_wait(o->store, keys, 1, o->timeout_s)) < 0 ||
            (rc = dt_store_get(o->store, key, &v, &len)) < 0)
            return dt_error_prefix("rank %d: shm: name of the segment from rank 0", s->rank);
        snprintf(s->name, sizeof s->name, "%.*s", (int)len, (char *)v);
        free(v);
        if (!strcmp(s->name, NO_ROOM) || !strcmp(s->name, FAILED))
            return dt_error_set(!strcmp(s->name, NO_ROOM) ? DT_ENOMEM : DT_EIO, "rank %d: shm: rank 0 %s the "
                                "segment (its message says why)", s->rank,
                                !strcmp(s->name, NO_ROOM) ? "had no room in /dev/shm for" : "could not create");
        fd = shm_open(s->name, O_RDWR | O_CLOEXEC, 0);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0 || (size_t)st.st_size != total) {
            if (fd >= 0)
                close(fd);
            return dt_error_set(DT_EIO, "rank %d: shm: cannot open segment %s of rank 0 (is it on this host?)",
                                s->rank, s->name);
        }
    }
    s->base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    close(fd);
    if (s->base == MAP_FAILED) {
        s->base = NULL;
        rc = dt_error_set_errno(DT_ENOMEM, errno, "rank %d: shm: cannot map %zu bytes", s->rank, total);
        if (s->rank == 0)
            shm_unlink(s->name);
        return s->rank == 0 ? refuse(s, o, key, rc) : rc;
    }
    s->map_bytes = total;
    s->hdr = (struct dt_shm__hdr *)s->base;
    s->ctl = (struct dt_shm__ctl *)(s->base + hdr_bytes());
    s->data = (char *)(s->ctl + s->world);
    if (s->rank == 0) {
        memset(s->base, 0, total);
        s->hdr->magic = SHM_MAGIC;
        s->hdr->world = (uint32_t)s->world;
        s->hdr->nbuf = (uint32_t)s->nbuf;
        s->hdr->slot = s->slot;
        return dt_store_set(o->store, key, s->name, strlen(s->name));
    }
    if (s->hdr->magic != SHM_MAGIC || (int)s->hdr->world != s->world || s->hdr->slot != s->slot)
        return dt_error_set(DT_EPROTO, "rank %d: shm: segment %s does not match this communicator "
                            "(different DTRAIN_SHM_SLOT_BYTES on some rank?)", s->rank, s->name);
    return 0;
}

/* Everyone waits until all ranks mapped the segment; then the name is removed
 * so nothing is left in /dev/shm whatever happens to the processes later. */
static int attach(struct dt_shm *s)
{
    s->ctl[s->rank].pid = (int32_t)getpid();
    atomic_fetch_add(&s->hdr->attached, 1);
    while (atomic_load(&s->hdr->attached) < s->world) {
        if (dt_clock_s() > s->deadline)
            return dt_error_set(DT_ETIMEDOUT, "rank %d: shm: only %d of %d ranks attached to %s within %.1f s",
                                s->rank, atomic_load(&s->hdr->attached), s->world, s->name, s->timeout_s);
        usleep(200);
    }
    if (s->rank == 0) {
        shm_unlink(s->name);
        s->unlinked = true;
    }
    return 0;
}

int dt_shm__init(const struct dt_comm_options *o, void **state)
{
    if (o->local_world != o->world)
        return dt_error_set(DT_EINVAL, "rank %d: shm: needs every rank on one host (world %d, %d on this host); "
                            "use tcp or auto", o->rank, o->world, o->local_world);
    struct dt_shm *s = calloc(1, sizeof *s);
    if (!s)
        return dt_error_set(DT_ENOMEM, "shm: out of memory");
    s->rank = o->rank;
    s->world = o->world;
    s->timeout_s = o->timeout_s;
    s->deadline = dt_clock_s() + o->timeout_s;
    s->nbuf = 2;
    uint64_t slot, small;
    int rc = dt_env_u64("DTRAIN_SHM_SLOT_BYTES", 512 << 10, 4096, 1u << 30, &slot);
    if (rc == 0)
        rc = dt_env_u64("DTRAIN_SHM_SMALL_BYTES", 16 << 10, 0, 1u << 30, &small);
    if (rc < 0) {
        dt_error_prefix("rank %d: shm", o->rank);
        free(s);
        return rc;
    }
    s->slot = (size_t)slot / 64 * 64;
    s->small_bytes = small > s->slot ? s->slot : (size_t)small;
    /* More ranks than cores: a spinning rank holds the core its peer needs, so
     * yield at once. */
    s->oversubscribed = s->world > dt_comm_cpus_available();
    s->sleep_s = 1e-3;
    s->srcs = calloc((size_t)s->world, sizeof *s->srcs);
    rc = s->srcs ? map_segment(s, o) : dt_error_set(DT_ENOMEM, "shm: out of memory");
    if (rc == 0)
        rc = attach(s);
    if (rc < 0) {
        dt_shm__destroy(s);
        return rc;
    }
    *state = s;
    return 0;
}

void dt_shm__abort(void *st)
{
    struct dt_shm *s = st;
    atomic_store(&s->aborted, 1);
}

void dt_shm__destroy(void *st)
{
    struct dt_shm *s = st;
    if (!s)
        return;
    if (s->rank == 0 && !s->unlinked && s->name[0])
        shm_unlink(s->name);
    dt_shm__free_regions(s);
    if (s->base)
        munmap(s->base, s->map_bytes);
    free(s->srcs);
    free(s);
}
