/* shm.h - internals shared by the shm backend's segment and synchronization
 * code (shm.c) and its collectives (shm_coll.c).  Not a public header; the
 * protocol is described at the top of shm.c.
 */
#ifndef DT_SHM_H
#define DT_SHM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "comm/comm_backend.h"

#define SHM_MAGIC 0x314d4853u /* "SHM1" */
#define LINE 128

struct shm_hdr {
    uint32_t magic, world, nbuf, pad;
    uint64_t slot;
    atomic_int attached;
    atomic_int failed;          /* 1 + rank of the first rank that failed; 0 if none */
    atomic_int code;            /* its DT_E* code */
    char why[512];              /* its message */
};

/* What a rank is running in a round: peers compare it with their own so
 * that ranks calling different collectives fail instead of mixing data. */
struct shm_desc {
    uint64_t seq, count;
    int32_t kind, dtype, op, root;
    uint32_t region, to_region; /* a shared buffer's id (0: none), and a common one the result goes to */
    uint64_t offset, to_offset; /* byte offsets in them */
};
/* `in` and both descriptions share one line (struct shm_ctl). */
_Static_assert(sizeof(uint64_t) + 2 * sizeof(struct shm_desc) <= LINE, "shm_desc outgrew its cache line");

struct shm_ctl {
    /* `in` and the description share a line: a peer reads both at once. */
    _Alignas(LINE) atomic_uint_fast64_t in;
    struct shm_desc desc[2];    /* per slot set (round % nbuf, nbuf <= 2) */
    _Alignas(LINE) atomic_uint_fast64_t red;
    _Alignas(LINE) atomic_uint_fast64_t out;
    _Alignas(LINE) int32_t pid;
    atomic_uint wake;           /* futex word: bumped on every publish */
    atomic_int sleepers;        /* ranks blocked on `wake` */
    atomic_int cpu;             /* the CPU it last published from (spin or yield?) */
};

/* A shared buffer (shm_shared.c): every rank's mapping of every rank's part. */
#define SHM_MAX_REGIONS 8
struct shm_region {
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
    bool oversubscribed;      /* more ranks than CPUs: never spin */
    double sleep_s;           /* waiting: spin or yield until sleep_s, then sleep */
    struct shm_hdr *hdr;
    struct shm_ctl *ctl;
    char *data;
    uint64_t round, seq;
    uint64_t in_seen;           /* every peer's `in` was seen at least this high */
    enum dt_coll_kind cur;
    atomic_int aborted;
    const void **srcs;          /* world pointers, for dt_reduce_many */
    struct shm_desc cur_desc;   /* of the running collective */
    struct shm_region regions[SHM_MAX_REGIONS];
    uint64_t region_seq;        /* ids handed out so far */
};

enum { DT_SHM_IN, DT_SHM_RED, DT_SHM_OUT };

/* Piece c of p over `count` elements: the first count % p pieces get one more. */
static inline void dt_shm_chunk(size_t count, int p, int c, size_t *off, size_t *len)
{
    size_t base = count / (size_t)p, rem = count % (size_t)p, cc = (size_t)c;
    *off = cc * base + (cc < rem ? cc : rem);
    *len = base + (cc < rem);
}

/* Slot of rank q in the slot set of `round`. */
char *dt_shm_slot(struct dt_shm *s, int q, uint64_t round);
/* Waits until counter `which` of rank q reaches target (deadline, abort, peer death). */
int dt_shm_wait(struct dt_shm *s, int q, int which, uint64_t target);
/* The same for every other rank. */
int dt_shm_wait_all(struct dt_shm *s, int which, uint64_t target);
void dt_shm_publish(struct dt_shm *s, int which, uint64_t v);
/* Round k may start once every rank finished round k - nbuf. */
int dt_shm_round_begin(struct dt_shm *s);
/* Publishes all three counters for the round and moves to the next. */
void dt_shm_round_end(struct dt_shm *s);
/* Starts a collective: its deadline, and what peers must be running too. */
void dt_shm_begin(struct dt_shm *s, enum dt_coll_kind k, size_t count, enum dt_dtype t, enum dt_redop op, int root);
/* Records this rank's failure (the current error) in the segment; returns code. */
int dt_shm_fail(struct dt_shm *s, int code);

/* Shared buffers (shm_shared.c). */
int dt_shm_alloc_shared(void *st, size_t bytes, bool common, void **out);
void dt_shm_free_shared(void *st, void *p);
void dt_shm_free_regions(struct dt_shm *s);
/* The region holding [p, p + bytes) of our own part (common: of the common
 * buffer), with p's offset in it; NULL if none. */
struct shm_region *dt_shm_region_of(struct dt_shm *s, const void *p, size_t bytes, bool common, size_t *offset);
/* Allreduce of `n` elements at `offset` of region g on every rank: in place,
 * or into common buffer `to` at `to_offset` when `to` is not NULL. */
int dt_shm_allreduce_shared(struct dt_shm *s, struct shm_region *g, size_t offset, struct shm_region *to,
                            size_t to_offset, size_t n, enum dt_dtype t, enum dt_redop op);
int dt_shm_barrier(void *st);

int dt_shm_init(const struct dt_comm_options *o, void **state);
void dt_shm_abort(void *st);
void dt_shm_destroy(void *st);

#endif
