/* shm_internal.h - what the files of the `shm` backend share; not a public
 * header (users see comm/comm.h, comm.c sees dt_comm_backend_shm).
 *
 * The backend in three files:
 *   shm_segment.c  the segment (setup, attach, teardown) and the protocol
 *                  every collective runs on: rounds of three counters per
 *                  rank (in, red, out), and how a rank waits for a peer's;
 *   shm_coll.c     the collectives as rounds of that protocol, and the
 *                  backend's ops table;
 *   shm_shared.c   shared buffers (dt_comm_alloc_shared, _common) and the
 *                  allreduce that reads the peers' buffers directly.
 * The protocol is described at the top of shm_segment.c.
 */
#ifndef DT_SHM_INTERNAL_H
#define DT_SHM_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "comm/comm_backend.h"

/* What a rank is running in a round: peers compare it with their own so
 * that ranks calling different collectives fail instead of mixing data. */
struct dt_shm__desc {
    uint64_t seq, count;
    int32_t kind, dtype, op, root;
    uint32_t region, to_region; /* a shared buffer's id (0: none), and a common one the result goes to */
    uint64_t offset, to_offset; /* byte offsets in them */
};

/* A shared buffer (shm_shared.c): every rank's mapping of every rank's part. */
#define DT_SHM__MAX_REGIONS 8
struct dt_shm__region {
    uint64_t id;                /* 1, 2, ... in allocation order, the same on every rank; 0: slot free */
    size_t bytes;               /* per rank, page-rounded */
    bool common;                /* one buffer (rank 0's part) that every rank maps: at[rank] only */
    char **at;                  /* world mappings; at[rank] is ours */
};

struct dt_shm {
    int rank, world;
    double timeout_s, deadline;
    char name[64];
    bool unlinked;
    char *base;
    size_t map_bytes, slot, small_bytes;
    int nbuf;
    bool oversubscribed;        /* more ranks than CPUs: never spin */
    double sleep_s;             /* waiting: spin or yield until sleep_s, then sleep */
    struct dt_shm__hdr *hdr;    /* the segment's layout (shm_segment.c) */
    struct dt_shm__ctl *ctl;
    char *data;
    uint64_t round, seq;
    uint64_t in_seen;           /* every peer's `in` was seen at least this high */
    enum dt_coll_kind cur;
    atomic_int aborted;
    const void **srcs;          /* world pointers, for dt_reduce_many */
    struct dt_shm__desc cur_desc; /* of the running collective */
    struct dt_shm__region regions[DT_SHM__MAX_REGIONS];
    uint64_t region_seq;        /* ids handed out so far */
};

/* A rank's three counters, in the order a round publishes them. */
enum { DT_SHM__IN, DT_SHM__RED, DT_SHM__OUT };

/* Piece c of p over `count` elements: the first count % p pieces get one more. */
static inline void dt_shm__chunk(size_t count, int p, int c, size_t *off, size_t *len)
{
    size_t base = count / (size_t)p, rem = count % (size_t)p, cc = (size_t)c;
    *off = cc * base + (cc < rem ? cc : rem);
    *len = base + (cc < rem);
}

/* ---- shm_segment.c: the segment and the round protocol ---- */

/* Slot of rank q in the slot set of `round`. */
char *dt_shm__slot(struct dt_shm *s, int q, uint64_t round);
/* Waits until counter `which` of rank q reaches target (deadline, abort, peer death). */
int dt_shm__wait(struct dt_shm *s, int q, int which, uint64_t target);
/* The same for every other rank. */
int dt_shm__wait_all(struct dt_shm *s, int which, uint64_t target);
void dt_shm__publish(struct dt_shm *s, int which, uint64_t v);
/* Round k may start once every rank finished round k - nbuf. */
int dt_shm__round_begin(struct dt_shm *s);
/* Publishes all three counters for the round and moves to the next. */
void dt_shm__round_end(struct dt_shm *s);
/* Starts a collective: its deadline, and what peers must be running too. */
void dt_shm__begin(struct dt_shm *s, enum dt_coll_kind k, size_t count, enum dt_dtype t, enum dt_redop op,
                   int root);
/* Records this rank's failure (the current error) in the segment; returns code. */
int dt_shm__fail(struct dt_shm *s, int code);
/* The backend's init, abort and destroy (its ops table is in shm_coll.c). */
int dt_shm__init(const struct dt_comm_options *o, void **state);
void dt_shm__abort(void *st);
void dt_shm__destroy(void *st);

/* ---- shm_coll.c: the collectives ---- */

int dt_shm__barrier(void *st);

/* ---- shm_shared.c: shared buffers ---- */

int dt_shm__alloc_shared(void *st, size_t bytes, bool common, void **out);
void dt_shm__free_shared(void *st, void *p);
void dt_shm__free_regions(struct dt_shm *s);
/* The region holding [p, p + bytes) of our own part (common: of the common
 * buffer), with p's offset in it; NULL if none. */
struct dt_shm__region *dt_shm__region_of(struct dt_shm *s, const void *p, size_t bytes, bool common,
                                         size_t *offset);
/* Allreduce of `n` elements at `offset` of region g on every rank: in place,
 * or into common buffer `to` at `to_offset` when `to` is not NULL. */
int dt_shm__allreduce_shared(struct dt_shm *s, struct dt_shm__region *g, size_t offset,
                             struct dt_shm__region *to, size_t to_offset, size_t n, enum dt_dtype t,
                             enum dt_redop op);

#endif
