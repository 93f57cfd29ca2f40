/* tcp_halving.c - the `tcp` backend's mid-size allreduce: Rabenseifner's
 * algorithm, reduce-scatter by recursive halving then allgather by recursive
 * doubling (Thakur, Rabenseifner, Gropp 2005; Open MPI coll/tuned algorithm 6,
 * MPICH's long-message allreduce).
 *
 * Why next to the ring: both move the bandwidth-optimal 2(p-1)/p * S bytes
 * per rank, but the ring chains 2(p-1) dependent steps around all ranks while
 * halving-doubling has 2 lg p, each between a pair of ranks.  When ranks
 * outnumber cores every dependency the data waits on costs a scheduling round
 * (the peer must be run before the bytes move on), so at p = 4 on 2 cores the
 * chain length, not the wire, sets the time for 256 KiB - a few MiB (measured
 * figures in docs/bench.md).  tcp_coll.c picks this between
 * DTRAIN_TCP_SMALL_BYTES and DTRAIN_TCP_HALVING_BYTES.
 *
 * The protocol, p ranks, pof2 the largest power of two <= p, rem = p - pof2:
 *  1. fold: of ranks 0..2rem-1 each even rank sends its vector to the odd
 *     rank above it and waits for the result; the odd rank adds it (lower
 *     rank's operand first) and takes part as new rank r/2; ranks >= 2rem are
 *     new rank r - rem (MPICH's fold).
 *  2. halving, mask = pof2/2 .. 1: exchange with new rank nr ^ mask; the rank
 *     whose mask bit is 0 keeps the lower half of its current range of pof2
 *     chunks and sends the upper half; after lg pof2 steps new rank nr holds
 *     the full sum of chunk nr.  The last step applies AVG's division.
 *  3. doubling, mask = 1 .. pof2/2: exchange the ranges held, which doubles
 *     them, until every rank holds every chunk.
 *  4. unfold: each odd folding rank sends the result to the even one below.
 * Every chunk's sum is computed by exactly one rank in a fixed order and
 * then copied, so all ranks hold the same bits, run after run.  The first
 * reduction reads the caller's send buffer and writes recv: no extra copy,
 * no allocation.  Every step runs through dt_tcp_run(), so the collective's
 * deadline and the failure notices apply to each exchange.
 *
 * Not for the ring or the small-message algorithms (tcp_coll.c).
 */
#include <string.h>

#include "comm/reduce.h"
#include "comm/tcp.h"

#define HB sizeof(struct dt_tcp_hdr)

/* Byte range of chunks [c0, c1) out of `parts` over n elements of size es
 * (the first n % parts chunks get one more element, as tcp_coll.c's chunk()). */
static void range(size_t n, int parts, int c0, int c1, size_t es, size_t *off, size_t *len)
{
    size_t base = n / (size_t)parts, rem = n % (size_t)parts;
    size_t a = (size_t)c0 * base + ((size_t)c0 < rem ? (size_t)c0 : rem);
    size_t b = (size_t)c1 * base + ((size_t)c1 < rem ? (size_t)c1 : rem);
    *off = a * es;
    *len = (b - a) * es;
}

static struct dt_tcp_blk blk(const void *ptr, size_t len)
{
    return (struct dt_tcp_blk){.ptr = (char *)ptr, .len = len, .dep = -1, .after_out = -1};
}

/* One exchange: [hdr | out] to out_peer, [hdr | in] from in_peer (a side of
 * -1 is absent).  `in` is reduced into place when in->kind is REDUCE. */
static int step(struct dt_tcp *t, const struct dt_tcp_hdr *h, int out_peer, struct dt_tcp_blk out, int in_peer,
                struct dt_tcp_blk in, enum dt_dtype dt, enum dt_redop op)
{
    struct dt_tcp_hdr rh;
    t->out[0] = blk(h, HB);
    t->out[1] = out;
    t->in[0] = blk(&rh, HB);
    t->in[1] = in;
    struct dt_tcp_plan pl = {.out_peer = out_peer, .in_peer = in_peer, .out = t->out, .in = t->in,
                             .nout = out_peer >= 0 ? 2 : 0, .nin = in_peer >= 0 ? 2 : 0,
                             .check_hdr = in_peer >= 0, .hdr = h, .dtype = dt, .op = op};
    return dt_tcp_run(t, &pl);
}

static struct dt_tcp_blk reduce_into(char *dst, const char *mine, size_t len, bool incoming_first, bool finish)
{
    struct dt_tcp_blk b = blk(dst, len);
    b.src = mine;
    b.kind = DT_TCP_IN_REDUCE;
    b.incoming_first = incoming_first;
    b.finish = finish;
    return b;
}

int dt_tcp_halving_allreduce(struct dt_tcp *t, const struct dt_tcp_hdr *h, const char *send, char *recv, size_t n,
                             enum dt_dtype dt, enum dt_redop op)
{
    int r = t->rank, p = t->world, pof2 = 1, rc;
    size_t es = dt_dtype_size(dt), bytes = n * es, off, len, off2, len2;
    while (pof2 * 2 <= p)
        pof2 *= 2;
    int rem = p - pof2, nr;
    const char *cur = send; /* this rank's operand: send until the first reduction wrote recv */
    struct dt_tcp_blk none = blk(NULL, 0);
    if (r < 2 * rem && r % 2 == 0) {
        if ((rc = step(t, h, r + 1, blk(send, bytes), -1, none, dt, op)) < 0)
            return rc;
        return step(t, h, -1, none, r + 1, blk(recv, bytes), dt, op);
    }
    if (r < 2 * rem) {
        if ((rc = step(t, h, -1, none, r - 1, reduce_into(recv, send, bytes, true, false), dt, op)) < 0)
            return rc;
        cur = recv;
        nr = r / 2;
    } else
        nr = r - rem;
    int lo = 0, hi = pof2;
    for (int mask = pof2 / 2; mask >= 1; mask >>= 1) {
        int pn = nr ^ mask, peer = pn < rem ? pn * 2 + 1 : pn + rem, mid = lo + (hi - lo) / 2;
        bool upper = nr & mask;
        range(n, pof2, upper ? lo : mid, upper ? mid : hi, es, &off, &len);   /* what we send */
        range(n, pof2, upper ? mid : lo, upper ? hi : mid, es, &off2, &len2); /* what we keep */
        rc = step(t, h, peer, blk(cur + off, len), peer,
                  reduce_into(recv + off2, cur + off2, len2, peer < r, mask == 1), dt, op);
        if (rc < 0)
            return rc;
        cur = recv;
        if (upper)
            lo = mid;
        else
            hi = mid;
    }
    for (int mask = 1; mask < pof2; mask <<= 1) {
        int pn = nr ^ mask, peer = pn < rem ? pn * 2 + 1 : pn + rem, plo = pn & ~(mask - 1);
        range(n, pof2, lo, hi, es, &off, &len);
        range(n, pof2, plo, plo + mask, es, &off2, &len2);
        if ((rc = step(t, h, peer, blk(recv + off, len), peer, blk(recv + off2, len2), dt, op)) < 0)
            return rc;
        lo = lo < plo ? lo : plo;
        hi = lo + 2 * mask;
    }
    if (r < 2 * rem)
        return step(t, h, r - 1, blk(recv, bytes), -1, none, dt, op);
    return 0;
}
