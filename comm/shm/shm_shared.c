/* shm_shared.c - shared buffers of the `shm` backend (dt_comm_alloc_shared)
 * and the in-place allreduce that reads the peers' buffers directly.
 *
 * A shared buffer is one POSIX shared-memory object per rank
 * ("<segment name>.b<id>.<rank>"), each mapped by every rank; ids count
 * allocations, which are collective, so they agree across ranks.  The names
 * go once every rank has mapped every part, as the segment's does.  A common
 * buffer is rank 0's part alone, mapped by every rank; collectives never take
 * it for a shared buffer (every rank's "part" would be the same memory).
 *
 * Allreduce of elements [o, o + n) of a buffer, in place, one round of the
 * segment's counters (shm_segment.c) and no slot:
 *   in:  the range holds this rank's contribution (publish `in`, wait for all);
 *   red: rank q sums piece q (dt_shm__chunk) of every rank's range in rank
 *        order 0..p-1, as the slot path does, so the bits are the same, and
 *        writes it into its own range (only q reads piece q of q's range in
 *        this phase, so the write races with no reader); publish `red`;
 *   out: for each peer q, once q's `red` is seen, copy piece q from q's
 *        range into ours (q has finished reading our piece q by then);
 *        publish `out`, then wait for every rank's `out`: after that nobody
 *        reads our range, so the caller may write it again.
 * Per rank for S bytes: read S and write S/p to reduce, read and write
 * (p-1)/p S to copy out.  The slot path also copies (p-1)/p S in and back.
 *
 * Into a common buffer (recv in memory every rank maps, dt_comm_alloc_common,
 * send in a shared buffer): rank q writes piece q straight into it and waits
 * for every rank's `red`; nothing is copied out, since every rank reads the
 * one result.  Per rank: read S, write S/p.  After it returns nobody reads
 * the caller's send range any more (each rank read its piece before `red`).
 *
 * Not for buffers of different sizes or offsets on different ranks: the
 * round's description carries (id, offset) and a mismatch fails as a
 * protocol error, like any other collective mismatch.
 */
#include "comm/shm/shm_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/env.h"
#include "base/error.h"
#include "base/log.h"
#include "comm/reduce.h"

static void part_name(const struct dt_shm *s, uint64_t id, int q, char *out, size_t len)
{
    snprintf(out, len, "%s.b%llu.%d", s->name, (unsigned long long)id, q);
}

static void unmap_region(struct dt_shm *s, struct dt_shm__region *g)
{
    for (int q = 0; g->at && q < s->world; q++)
        if (g->at[q])
            munmap(g->at[q], g->bytes);
    free(g->at);
    memset(g, 0, sizeof *g);
}

static int map_fd(struct dt_shm *s, struct dt_shm__region *g, int fd, int q, int slot)
{
    void *p = mmap(NULL, g->bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return dt_error_set_errno(DT_ENOMEM, errno, "rank %d: shm: shared buffer %llu: cannot map %zu bytes of rank %d",
                                  s->rank, (unsigned long long)g->id, g->bytes, q);
    g->at[slot] = p;
    return 0;
}

/* Our part, created at its full size: posix_fallocate makes a /dev/shm too
 * small for it (Docker's default is 64 MiB) say so now, as ENOSPC, instead of
 * a page fault killing the rank with SIGBUS later.  No room (or more than
 * DTRAIN_SHM_MAX_BYTES) is not an error: *no_room, and the caller
 * does without. */
static int create_part(struct dt_shm *s, struct dt_shm__region *g, bool *no_room)
{
    uint64_t limit;
    if (dt_env_u64("DTRAIN_SHM_MAX_BYTES", UINT64_MAX, 0, UINT64_MAX, &limit) < 0)
        return dt_error_prefix("rank %d: shm", s->rank);
    if (g->bytes > limit) {
        *no_room = true;
        return 0;
    }
    char name[128];
    part_name(s, g->id, s->rank, name, sizeof name);
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0)
        return dt_error_set_errno(DT_EIO, errno, "rank %d: shm: shared buffer %llu: cannot create %s", s->rank,
                                  (unsigned long long)g->id, name);
    int e = ftruncate(fd, (off_t)g->bytes) < 0 ? errno : posix_fallocate(fd, 0, (off_t)g->bytes);
    if (e) {
        close(fd);
        shm_unlink(name);
        if (e == ENOSPC || e == ENOMEM || e == EFBIG) {
            *no_room = true;
            return 0;
        }
        return dt_error_set_errno(DT_EIO, e, "rank %d: shm: shared buffer %llu: cannot size %s to %zu bytes",
                                  s->rank, (unsigned long long)g->id, name, g->bytes);
    }
    return map_fd(s, g, fd, s->rank, s->rank);
}

/* Rank q's part (common: rank 0's), its size checked, at g->at[slot]. */
static int open_part(struct dt_shm *s, struct dt_shm__region *g, int q, int slot)
{
    char name[128];
    part_name(s, g->id, q, name, sizeof name);
    int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || (size_t)st.st_size != g->bytes) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return dt_error_set_errno(DT_EIO, e, "rank %d: shm: shared buffer %llu: cannot open rank %d's part %s "
                                  "(%zu bytes)", s->rank, (unsigned long long)g->id, q, name, g->bytes);
    }
    return map_fd(s, g, fd, q, slot);
}

/* Every rank learns whether some rank had no room, and the lowest such rank
 * says so: the allreduce's maximum of world - rank over those ranks. */
static int agree_room(struct dt_shm *s, const struct dt_shm__region *g, bool no_room, bool *all_room)
{
    int32_t mine = no_room ? s->world - s->rank : 0, worst = 0;
    int rc = dt_comm_backend_shm.allreduce(s, &mine, &worst, 1, DT_I32, DT_MAX);
    if (rc < 0)
        return rc;
    *all_room = worst == 0;
    if (no_room && worst == mine)
        dt_log_warn("rank %d: shm: no room in /dev/shm for %s of %.1f MiB; %s instead (slower).  Give the job a "
                    "larger /dev/shm (docker run --shm-size, a Kubernetes emptyDir with medium: Memory)", s->rank,
                    g->common ? "a buffer shared by all ranks" : "a shared buffer per rank",
                    (double)g->bytes / 1048576.0,
                    g->common ? "each rank keeps its own copy" : "collectives on it copy through the segment");
    return 0;
}

/* Collective: create our part (common: rank 0 alone), agree that every part
 * exists (else nobody gets one), map the peers' (common: rank 0's), wait
 * until everyone has mapped everything, then remove our name. */
int dt_shm__alloc_shared(void *st, size_t bytes, bool common, void **out)
{
    struct dt_shm *s = st;
    *out = NULL;
    struct dt_shm__region *g = NULL;
    for (int i = 0; i < DT_SHM__MAX_REGIONS && !g; i++)
        if (!s->regions[i].id)
            g = &s->regions[i];
    uint64_t id = ++s->region_seq; /* the same count on every rank, whatever happens below */
    if (!g) {
        dt_log_warn("rank %d: shm: more than %d shared buffers; this one is private memory", s->rank,
                    DT_SHM__MAX_REGIONS);
        return 0;
    }
    long page = sysconf(_SC_PAGESIZE);
    size_t pg = page > 0 ? (size_t)page : 4096;
    *g = (struct dt_shm__region){.id = id, .bytes = (bytes + pg - 1) / pg * pg, .common = common};
    if (!g->bytes)
        g->bytes = pg;
    g->at = calloc((size_t)s->world, sizeof *g->at);
    bool creator = !common || s->rank == 0, no_room = false, all_room = false;
    int rc = !g->at ? dt_error_set(DT_ENOMEM, "shm: out of memory") : creator ? create_part(s, g, &no_room) : 0;
    if (rc < 0)
        dt_shm__fail(s, rc);
    if (rc == 0)
        rc = agree_room(s, g, no_room, &all_room); /* also the barrier after which every part exists */
    for (int q = 0; rc == 0 && all_room && q < s->world; q++)
        if (common ? q == 0 && !creator : q != s->rank)
            if ((rc = open_part(s, g, q, common ? s->rank : q)) < 0)
                dt_shm__fail(s, rc);
    if (rc == 0 && all_room)
        rc = dt_shm__barrier(s);
    char name[128];
    part_name(s, id, s->rank, name, sizeof name);
    if (creator && g->at && g->at[s->rank])
        shm_unlink(name);
    if (rc < 0 || !all_room) {
        unmap_region(s, g);
        return rc;
    }
    *out = g->at[s->rank];
    return 0;
}

void dt_shm__free_shared(void *st, void *p)
{
    struct dt_shm *s = st;
    for (int i = 0; i < DT_SHM__MAX_REGIONS; i++)
        if (s->regions[i].id && s->regions[i].at[s->rank] == p)
            unmap_region(s, &s->regions[i]);
}

void dt_shm__free_regions(struct dt_shm *s)
{
    for (int i = 0; i < DT_SHM__MAX_REGIONS; i++)
        if (s->regions[i].id)
            unmap_region(s, &s->regions[i]);
}

struct dt_shm__region *dt_shm__region_of(struct dt_shm *s, const void *p, size_t bytes, bool common,
                                         size_t *offset)
{
    const char *c = p;
    for (int i = 0; i < DT_SHM__MAX_REGIONS; i++) {
        struct dt_shm__region *g = &s->regions[i];
        const char *mine = g->id && g->common == common ? g->at[s->rank] : NULL;
        if (mine && c >= mine && c < mine + g->bytes && bytes <= g->bytes - (size_t)(c - mine)) {
            *offset = (size_t)(c - mine);
            return g;
        }
    }
    return NULL;
}

int dt_shm__allreduce_shared(struct dt_shm *s, struct dt_shm__region *g, size_t offset,
                             struct dt_shm__region *to, size_t to_offset, size_t n, enum dt_dtype t,
                             enum dt_redop op)
{
    int p = s->world, me = s->rank, rc;
    size_t es = dt_dtype_size(t), off, len;
    s->cur_desc.region = (uint32_t)g->id;
    s->cur_desc.offset = offset;
    s->cur_desc.to_region = to ? (uint32_t)to->id : 0;
    s->cur_desc.to_offset = to_offset;
    if ((rc = dt_shm__round_begin(s)) < 0)
        return rc;
    uint64_t k = s->round;
    dt_shm__publish(s, DT_SHM__IN, k + 1);
    if ((rc = dt_shm__wait_all(s, DT_SHM__IN, k + 1)) < 0)
        return rc;
    dt_shm__chunk(n, p, me, &off, &len);
    char *mine = to ? to->at[me] + to_offset + off * es : g->at[me] + offset + off * es;
    for (int q = 0; q < p; q++)
        s->srcs[q] = g->at[q] + offset + off * es;
    dt_reduce_many(t, op, mine, s->srcs, p, len);
    dt_reduce_finish(t, op, mine, len, p);
    dt_shm__publish(s, DT_SHM__RED, k + 1);
    if (to) { /* every piece is in the common buffer once every rank has reduced its own */
        if ((rc = dt_shm__wait_all(s, DT_SHM__RED, k + 1)) < 0)
            return rc;
        dt_shm__round_end(s);
        return 0;
    }
    for (int c = 1; c < p; c++) { /* start with the next rank: not every rank reads rank 0 first */
        int q = (me + c) % p;
        if ((rc = dt_shm__wait(s, q, DT_SHM__RED, k + 1)) < 0)
            return rc;
        dt_shm__chunk(n, p, q, &off, &len);
        memcpy(g->at[me] + offset + off * es, g->at[q] + offset + off * es, len * es);
    }
    dt_shm__publish(s, DT_SHM__OUT, k + 1);
    if ((rc = dt_shm__wait_all(s, DT_SHM__OUT, k + 1)) < 0)
        return rc;
    dt_shm__round_end(s);
    return 0;
}
