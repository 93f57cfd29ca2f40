/* shm_coll.c - the collectives of the `shm` backend, as rounds of the
 * in / red / out protocol described in shm_segment.c, and the backend's ops
 * table.
 *
 * Pieces: allreduce splits the vector into p chunks (the first count%p get one
 * more element); round j moves elements [j*m, (j+1)*m) of every chunk, with
 * m = slot/(p*esize), so a slot holds one piece per chunk and rank q reduces
 * piece q.  reduce_scatter does the same with rank q's block as chunk q.
 * allgather and broadcast move m = slot/esize elements per round.
 *
 * Not for the segment's setup or the waiting rules (shm_segment.c), or for
 * shared buffers (shm_shared.c).
 */
#include "comm/shm/shm_internal.h"

#include <string.h>

#include "base/error.h"
#include "comm/reduce.h"

/* Small: everyone copies in, then everyone reduces all slots in rank order. */
static int allreduce_small(struct dt_shm *s, const char *send, char *recv, size_t n, enum dt_dtype t,
                           enum dt_redop op)
{
    size_t bytes = n * dt_dtype_size(t);
    int rc = dt_shm__round_begin(s);
    if (rc < 0)
        return rc;
    uint64_t k = s->round;
    memcpy(dt_shm__slot(s, s->rank, k), send, bytes);
    dt_shm__publish(s, DT_SHM__IN, k + 1);
    if ((rc = dt_shm__wait_all(s, DT_SHM__IN, k + 1)) < 0)
        return rc;
    for (int q = 0; q < s->world; q++)
        s->srcs[q] = dt_shm__slot(s, q, k);
    dt_reduce_many(t, op, recv, s->srcs, s->world, n);
    dt_reduce_finish(t, op, recv, n, s->world);
    dt_shm__round_end(s);
    return 0;
}

/* One round of the large allreduce: elements [j0, j0+m) of every chunk.
 * Our own piece never goes through the segment on the way in: we reduce it
 * straight from `send` into `recv` and only then publish the result, so per
 * rank the round moves (p-1)/p*S in, reads S and writes 2S/p to reduce, and
 * (p-1)/p*S out. */
static int allreduce_round(struct dt_shm *s, const char *send, char *recv, size_t n, size_t j0, size_t m,
                           enum dt_dtype t, enum dt_redop op)
{
    int p = s->world, me = s->rank, rc;
    size_t es = dt_dtype_size(t), off, len;
    if ((rc = dt_shm__round_begin(s)) < 0)
        return rc;
    uint64_t k = s->round;
    char *mine = dt_shm__slot(s, me, k);
    for (int c = 0; c < p; c++) { /* A: my pieces of the other ranks' chunks */
        dt_shm__chunk(n, p, c, &off, &len);
        if (c != me && j0 < len)
            memcpy(mine + (size_t)c * m * es, send + (off + j0) * es, (len - j0 < m ? len - j0 : m) * es);
    }
    dt_shm__publish(s, DT_SHM__IN, k + 1);
    if ((rc = dt_shm__wait_all(s, DT_SHM__IN, k + 1)) < 0)
        return rc;
    dt_shm__chunk(n, p, me, &off, &len); /* B: piece `me` over all ranks, in rank order */
    if (j0 < len) {
        size_t cnt = len - j0 < m ? len - j0 : m;
        for (int q = 0; q < p; q++)
            s->srcs[q] = q == me ? send + (off + j0) * es : dt_shm__slot(s, q, k) + (size_t)me * m * es;
        dt_reduce_many(t, op, recv + (off + j0) * es, s->srcs, p, cnt);
        dt_reduce_finish(t, op, recv + (off + j0) * es, cnt, p);
        memcpy(mine + (size_t)me * m * es, recv + (off + j0) * es, cnt * es);
    }
    dt_shm__publish(s, DT_SHM__RED, k + 1);
    if ((rc = dt_shm__wait_all(s, DT_SHM__RED, k + 1)) < 0)
        return rc;
    for (int c = 0; c < p; c++) { /* C: the other ranks' results out */
        dt_shm__chunk(n, p, c, &off, &len);
        if (c != me && j0 < len)
            memcpy(recv + (off + j0) * es, dt_shm__slot(s, c, k) + (size_t)c * m * es,
                   (len - j0 < m ? len - j0 : m) * es);
    }
    dt_shm__round_end(s);
    return 0;
}

static int shm_allreduce(void *st, const void *send, void *recv, size_t n, enum dt_dtype t, enum dt_redop op)
{
    struct dt_shm *s = st;
    dt_shm__begin(s, DT_COLL_ALLREDUCE, n, t, op, -1);
    if (n == 0)
        return 0;
    size_t es = dt_dtype_size(t), at, to_at = 0;
    struct dt_shm__region *g = dt_shm__region_of(s, send, n * es, false, &at);
    struct dt_shm__region *to = g && send != recv ? dt_shm__region_of(s, recv, n * es, true, &to_at) : NULL;
    if (g && (send == recv || to))
        return dt_shm__allreduce_shared(s, g, at, to, to_at, n, t, op);
    if (n * es <= s->small_bytes)
        return allreduce_small(s, send, recv, n, t, op);
    size_t m = s->slot / es / (size_t)s->world, longest = (n + (size_t)s->world - 1) / (size_t)s->world;
    for (size_t j0 = 0; j0 < longest; j0 += m) {
        int rc = allreduce_round(s, send, recv, n, j0, m, t, op);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int reduce_scatter_round(struct dt_shm *s, const char *send, char *recv, size_t n, size_t j0, size_t m,
                                enum dt_dtype t, enum dt_redop op)
{
    int p = s->world, me = s->rank, rc;
    size_t es = dt_dtype_size(t);
    if ((rc = dt_shm__round_begin(s)) < 0)
        return rc;
    uint64_t k = s->round;
    char *mine = dt_shm__slot(s, me, k);
    for (int c = 0; c < p; c++)
        memcpy(mine + (size_t)c * m * es, send + ((size_t)c * n + j0) * es, m * es);
    dt_shm__publish(s, DT_SHM__IN, k + 1);
    if ((rc = dt_shm__wait_all(s, DT_SHM__IN, k + 1)) < 0)
        return rc;
    for (int q = 0; q < p; q++)
        s->srcs[q] = dt_shm__slot(s, q, k) + (size_t)me * m * es;
    dt_reduce_many(t, op, recv + j0 * es, s->srcs, p, m);
    dt_reduce_finish(t, op, recv + j0 * es, m, p);
    dt_shm__round_end(s);
    return 0;
}

static int shm_reduce_scatter(void *st, const void *send, void *recv, size_t n, enum dt_dtype t, enum dt_redop op)
{
    struct dt_shm *s = st;
    dt_shm__begin(s, DT_COLL_REDUCE_SCATTER, n, t, op, -1);
    size_t per = s->slot / dt_dtype_size(t) / (size_t)s->world;
    for (size_t j0 = 0; j0 < n; j0 += per) {
        int rc = reduce_scatter_round(s, send, recv, n, j0, n - j0 < per ? n - j0 : per, t, op);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int shm_allgather(void *st, const void *send, void *recv, size_t n, enum dt_dtype t)
{
    struct dt_shm *s = st;
    dt_shm__begin(s, DT_COLL_ALLGATHER, n, t, DT_SUM, -1);
    size_t es = dt_dtype_size(t), per = s->slot / es;
    const char *in = send;
    char *out = recv;
    for (size_t j0 = 0; j0 < n; j0 += per) {
        size_t m = n - j0 < per ? n - j0 : per;
        int rc = dt_shm__round_begin(s);
        if (rc < 0)
            return rc;
        uint64_t k = s->round;
        memcpy(dt_shm__slot(s, s->rank, k), in + j0 * es, m * es);
        dt_shm__publish(s, DT_SHM__IN, k + 1);
        if ((rc = dt_shm__wait_all(s, DT_SHM__IN, k + 1)) < 0)
            return rc;
        for (int q = 0; q < s->world; q++)
            memcpy(out + ((size_t)q * n + j0) * es, dt_shm__slot(s, q, k), m * es);
        dt_shm__round_end(s);
    }
    return 0;
}

static int shm_broadcast(void *st, void *buf, size_t n, enum dt_dtype t, int root)
{
    struct dt_shm *s = st;
    dt_shm__begin(s, DT_COLL_BROADCAST, n, t, DT_SUM, root);
    size_t es = dt_dtype_size(t), per = s->slot / es;
    char *b = buf;
    for (size_t j0 = 0; j0 < n; j0 += per) {
        size_t m = n - j0 < per ? n - j0 : per;
        int rc = dt_shm__round_begin(s);
        if (rc < 0)
            return rc;
        uint64_t k = s->round;
        if (s->rank == root) {
            memcpy(dt_shm__slot(s, root, k), b + j0 * es, m * es);
            dt_shm__publish(s, DT_SHM__IN, k + 1);
        } else {
            if ((rc = dt_shm__wait(s, root, DT_SHM__IN, k + 1)) < 0)
                return rc;
            memcpy(b + j0 * es, dt_shm__slot(s, root, k), m * es);
        }
        dt_shm__round_end(s);
    }
    return 0;
}

int dt_shm__barrier(void *st)
{
    struct dt_shm *s = st;
    dt_shm__begin(s, DT_COLL_BARRIER, 0, DT_F32, DT_SUM, -1);
    int rc = dt_shm__round_begin(s);
    if (rc < 0)
        return rc;
    dt_shm__publish(s, DT_SHM__IN, s->round + 1);
    if ((rc = dt_shm__wait_all(s, DT_SHM__IN, s->round + 1)) < 0)
        return rc;
    dt_shm__round_end(s);
    return 0;
}

const struct dt_comm_backend dt_comm_backend_shm = {
    .name = "shm",
    .init = dt_shm__init,
    .allreduce = shm_allreduce,
    .broadcast = shm_broadcast,
    .allgather = shm_allgather,
    .reduce_scatter = shm_reduce_scatter,
    .barrier = dt_shm__barrier,
    .abort = dt_shm__abort,
    .destroy = dt_shm__destroy,
    .alloc_shared = dt_shm__alloc_shared,
    .free_shared = dt_shm__free_shared,
};
