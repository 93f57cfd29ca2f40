/* tcp_coll.c - the collectives of the `tcp` backend, as plans for the step
 * engine (tcp_engine.c), and the backend's ops table.
 *
 * Large messages (above DTRAIN_TCP_SMALL_BYTES, default 64 KiB):
 *   allreduce = ring reduce-scatter + ring allgather over p chunks, one
 *   engine step: out block k is chunk (r-k) and may leave as fast as in block
 *   k-1 (the same chunk, coming from the left) has been reduced.  Per rank it
 *   sends and receives 2(p-1)/p * S bytes, the bandwidth lower bound
 *   (busbw factor 2(p-1)/p); each chunk's sum is computed by one rank in ring
 *   order and then copied, so all ranks hold the same bits.  The vector is
 *   cut into slices of DTRAIN_TCP_SLICE_BYTES (default 512 KiB) whose rings
 *   run as a wavefront, so that a byte is reduced and forwarded while it is
 *   still in cache (ring_blocks()).
 *   In a power-of-two world of >= 4 ranks, up to DTRAIN_TCP_HALVING_BYTES
 *   (default 64 MiB) allreduce is halving-doubling instead (below):
 *   2 lg p dependent steps instead of the ring's 2(p-1), which is what costs
 *   when ranks outnumber cores.
 *   reduce_scatter = the ring's first half; allgather = its second half;
 *   broadcast = a pipelined chain from the root (busbw factor 1).
 * Small messages:
 *   allreduce = recursive doubling (lg p exchanges of the whole vector; a
 *   non-power-of-two world first folds the extra ranks into their neighbour,
 *   MPICH style); operands are combined lower-rank group first, so every rank
 *   computes the same bits.  reduce_scatter = that allreduce then a copy of our
 *   block; broadcast = binomial tree; barrier = dissemination (ceil(lg p)
 *   rounds of empty headers).
 * Crossover: on the 2-core test VM a loopback round trip costs ~20-40 us and a
 * stream moves ~2-3 GB/s, so the ring's 2(p-1) latencies cost more than lg p
 * full-vector exchanges below roughly p*alpha/beta ~ 64 KiB at p = 2..8
 * (the alpha-beta model of Thakur, Rabenseifner and Gropp 2005); measured
 * figures are in docs/bench.md.
 *
 * Not for connections or byte pumping (tcp_mesh.c, tcp_engine.c).
 */
#include "comm/tcp/tcp_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "comm/reduce.h"

#define HB sizeof(struct dt_tcp__hdr)

/* ---- building blocks of a plan ---- */

static int mod(int a, int p) { return ((a % p) + p) % p; }

/* Byte range of chunks [c0, c1) out of `parts` over n elements of size es:
 * the first n % parts chunks get one more element. */
static void range(size_t n, int parts, int c0, int c1, size_t es, size_t *off, size_t *len)
{
    size_t base = n / (size_t)parts, rem = n % (size_t)parts;
    size_t a = (size_t)c0 * base + ((size_t)c0 < rem ? (size_t)c0 : rem);
    size_t b = (size_t)c1 * base + ((size_t)c1 < rem ? (size_t)c1 : rem);
    *off = a * es;
    *len = (b - a) * es;
}

/* Chunk c of p over `count` elements, in bytes. */
static void chunk(size_t count, int p, int c, size_t es, size_t *off, size_t *len)
{
    range(count, p, c, c + 1, es, off, len);
}

static void begin(struct dt_tcp *t, enum dt_coll_kind k)
{
    t->cur = k;
    t->seq++;
    t->deadline = dt_clock_s() + t->timeout_s - t->grace_s; /* the rest: naming who failed */
}

static struct dt_tcp__blk blk(const void *ptr, size_t len, int dep)
{
    return (struct dt_tcp__blk){.ptr = (char *)ptr, .len = len, .dep = dep, .after_out = -1};
}

/* One message each way with `peer` (or only one way when a side is -1):
 * sends [hdr | out_data] from t->small, receives [hdr | in_len] into t->stage. */
static int exchange_small(struct dt_tcp *t, const struct dt_tcp__hdr *h, int out_peer, const void *out_data,
                          size_t out_len, int in_peer, size_t in_len)
{
    struct dt_tcp__blk out = blk(t->small, HB + out_len, -1), in = blk(t->stage, HB + in_len, -1);
    if (out_peer >= 0) {
        memcpy(t->small, h, HB);
        if (out_len)
            memcpy(t->small + HB, out_data, out_len);
    }
    struct dt_tcp__plan p = {.out_peer = out_peer, .in_peer = in_peer, .out = &out, .in = &in,
                             .nout = out_peer >= 0, .nin = in_peer >= 0, .check_hdr = in_peer >= 0, .hdr = h};
    return dt_tcp__run(t, &p);
}

/* Grows t->scratch to at least `bytes` (touched once; only the first call of
 * a larger size allocates). */
static int scratch(struct dt_tcp *t, size_t bytes)
{
    if (bytes <= t->scratch_bytes)
        return 0;
    char *p = realloc(t->scratch, bytes);
    if (!p)
        return dt_error_set(DT_ENOMEM, "rank %d: tcp: cannot allocate %zu bytes of scratch", t->rank, bytes);
    memset(p, 0, bytes);
    t->scratch = p;
    t->scratch_bytes = bytes;
    return 0;
}

/* ---- allreduce: recursive doubling, ring, halving-doubling ---- */

/* Recursive doubling on buf (bytes <= small_bytes), in place. */
static int rd_allreduce(struct dt_tcp *t, const struct dt_tcp__hdr *h, void *buf, size_t n, enum dt_dtype dt,
                        enum dt_redop op)
{
    int r = t->rank, p = t->world, pof2 = 1, rc;
    size_t bytes = n * dt_dtype_size(dt);
    const char *inc = t->stage + HB;
    while (pof2 * 2 <= p)
        pof2 *= 2;
    int rem = p - pof2, nr;
    if (r < 2 * rem) {
        if (r % 2 == 0) { /* folded away: hand our vector over, get the result back */
            if ((rc = exchange_small(t, h, r + 1, buf, bytes, -1, 0)) < 0 ||
                (rc = exchange_small(t, h, -1, NULL, 0, r + 1, bytes)) < 0)
                return rc;
            memcpy(buf, inc, bytes);
            return 0;
        }
        if ((rc = exchange_small(t, h, -1, NULL, 0, r - 1, bytes)) < 0)
            return rc;
        dt_reduce(dt, op, buf, inc, buf, n);
        nr = r / 2;
    } else
        nr = r - rem;
    for (int mask = 1; mask < pof2; mask <<= 1) {
        int pn = nr ^ mask, peer = pn < rem ? pn * 2 + 1 : pn + rem;
        if ((rc = exchange_small(t, h, peer, buf, bytes, peer, bytes)) < 0)
            return rc;
        if (peer < r)
            dt_reduce(dt, op, buf, inc, buf, n);
        else
            dt_reduce(dt, op, buf, buf, inc, n);
    }
    dt_reduce_finish(dt, op, buf, n, p);
    if (r < 2 * rem)
        return exchange_small(t, h, r - 1, buf, bytes, -1, 0);
    return 0;
}

/* Ring allreduce over slices: the vector is cut into `ns` slices, each a ring
 * reduce-scatter + allgather of its own (K = 2(p-1) steps), and the steps of
 * all slices are streamed as a wavefront: at wave w the stream carries step k
 * of slice w-k for every k (oldest slice first).  Step k of a slice depends on
 * step k-1 of the same slice, which left one wave earlier, so the pipe never
 * waits on a dependency, while each slice's bytes are sent, received, reduced
 * and forwarded within about one wave: the data stays in cache (one 64 MiB
 * ring pass streams everything through memory three times and measured ~2x
 * slower on the 2-core VM than the same bytes as 1 MiB calls).
 * Element chunks: slice j is chunk(n, ns, j); its ring chunk c is
 * chunk(slice, p, c).  Each chunk's sum is computed by one rank in ring order
 * and then copied, so all ranks hold the same bits. */
static void ring_blocks(struct dt_tcp *t, const char *send, char *recv, size_t n, size_t es, int ns)
{
    int r = t->rank, p = t->world, K = 2 * (p - 1), pos = 1, *last = t->last_pos;
    for (int w = 0; w < ns + K - 1; w++)
        for (int k = K - 1; k >= 0; k--) {
            int j = w - k;
            if (j < 0 || j >= ns)
                continue;
            size_t s0, sl, off, len;
            chunk(n, ns, j, 1, &s0, &sl);
            bool rs = k < p - 1;
            int s = rs ? k : k - (p - 1);
            chunk(sl, p, rs ? mod(r - s, p) : mod(r + 1 - s, p), es, &off, &len);
            off += s0 * es;
            t->out[pos] = blk((k == 0 ? send : recv) + off, len, k == 0 ? -1 : last[k - 1]);
            chunk(sl, p, rs ? mod(r - s - 1, p) : mod(r - s, p), es, &off, &len);
            off += s0 * es;
            t->in[pos] = blk(recv + off, len, -1);
            if (rs) {
                t->in[pos].src = send + off;
                t->in[pos].kind = DT_TCP__IN_REDUCE;
                t->in[pos].incoming_first = true;
                t->in[pos].finish = s == p - 2;
            }
            last[k] = pos++;
        }
}

/* Slices: DTRAIN_TCP_SLICE_BYTES each, at most DT_TCP__MAX_SLICES, and never
 * so small that a ring chunk falls under one element. */
static int ring_slices(const struct dt_tcp *t, size_t n, size_t es)
{
    size_t ns = (n * es + t->slice_bytes - 1) / t->slice_bytes;
    if (ns > n / (size_t)t->world)
        ns = n / (size_t)t->world;
    if (ns > DT_TCP__MAX_SLICES)
        ns = DT_TCP__MAX_SLICES;
    return ns < 1 ? 1 : (int)ns;
}

static int ring_allreduce(struct dt_tcp *t, const struct dt_tcp__hdr *h, const char *send, char *recv,
                          size_t n, enum dt_dtype dt, enum dt_redop op)
{
    int r = t->rank, p = t->world;
    size_t es = dt_dtype_size(dt);
    int ns = ring_slices(t, n, es), nb = 1 + ns * 2 * (p - 1);
    struct dt_tcp__hdr rh;
    t->out[0] = blk(h, HB, -1);
    t->in[0] = blk(&rh, HB, -1);
    ring_blocks(t, send, recv, n, es, ns);
    struct dt_tcp__plan pl = {.out_peer = mod(r + 1, p), .in_peer = mod(r - 1, p), .out = t->out, .in = t->in,
                              .nout = nb, .nin = nb, .check_hdr = true, .hdr = h, .dtype = dt, .op = op};
    return dt_tcp__run(t, &pl);
}

/* The mid-size allreduce: Rabenseifner's algorithm, reduce-scatter by
 * recursive halving then allgather by recursive doubling (Thakur,
 * Rabenseifner, Gropp 2005; Open MPI coll/tuned algorithm 6, MPICH's
 * long-message allreduce).
 *
 * Why next to the ring: both move the bandwidth-optimal 2(p-1)/p * S bytes
 * per rank, but the ring chains 2(p-1) dependent steps around all ranks while
 * halving-doubling has 2 lg p, each between a pair of ranks.  When ranks
 * outnumber cores every dependency the data waits on costs a scheduling round
 * (the peer must be run before the bytes move on), so at p = 4 on 2 cores the
 * chain length, not the wire, sets the time for 256 KiB - a few MiB (measured
 * figures in docs/bench.md).  dt_tcp__allreduce_one() picks this between
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
 * no allocation.  Every step runs through dt_tcp__run(), so the collective's
 * deadline and the failure notices apply to each exchange.
 */

/* One exchange: [hdr | out] to out_peer, [hdr | in] from in_peer (a side of
 * -1 is absent).  `in` is reduced into place when in->kind is REDUCE. */
static int step(struct dt_tcp *t, const struct dt_tcp__hdr *h, int out_peer, struct dt_tcp__blk out,
                int in_peer, struct dt_tcp__blk in, enum dt_dtype dt, enum dt_redop op)
{
    struct dt_tcp__hdr rh;
    t->out[0] = blk(h, HB, -1);
    t->out[1] = out;
    t->in[0] = blk(&rh, HB, -1);
    t->in[1] = in;
    struct dt_tcp__plan pl = {.out_peer = out_peer, .in_peer = in_peer, .out = t->out, .in = t->in,
                              .nout = out_peer >= 0 ? 2 : 0, .nin = in_peer >= 0 ? 2 : 0,
                             .check_hdr = in_peer >= 0, .hdr = h, .dtype = dt, .op = op};
    return dt_tcp__run(t, &pl);
}

static struct dt_tcp__blk reduce_into(char *dst, const char *mine, size_t len, bool incoming_first,
                                      bool finish)
{
    struct dt_tcp__blk b = blk(dst, len, -1);
    b.src = mine;
    b.kind = DT_TCP__IN_REDUCE;
    b.incoming_first = incoming_first;
    b.finish = finish;
    return b;
}

static int halving_allreduce(struct dt_tcp *t, const struct dt_tcp__hdr *h, const char *send, char *recv,
                             size_t n, enum dt_dtype dt, enum dt_redop op)
{
    int r = t->rank, p = t->world, pof2 = 1, rc;
    size_t es = dt_dtype_size(dt), bytes = n * es, off, len, off2, len2;
    while (pof2 * 2 <= p)
        pof2 *= 2;
    int rem = p - pof2, nr;
    const char *cur = send; /* this rank's operand: send until the first reduction wrote recv */
    struct dt_tcp__blk none = blk(NULL, 0, -1);
    if (r < 2 * rem && r % 2 == 0) {
        if ((rc = step(t, h, r + 1, blk(send, bytes, -1), -1, none, dt, op)) < 0)
            return rc;
        return step(t, h, -1, none, r + 1, blk(recv, bytes, -1), dt, op);
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
        rc = step(t, h, peer, blk(cur + off, len, -1), peer,
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
        if ((rc = step(t, h, peer, blk(recv + off, len, -1), peer, blk(recv + off2, len2, -1), dt, op)) < 0)
            return rc;
        lo = lo < plo ? lo : plo;
        hi = lo + 2 * mask;
    }
    if (r < 2 * rem)
        return step(t, h, r - 1, blk(recv, bytes, -1), -1, none, dt, op);
    return 0;
}

/* ---- the collectives ---- */

int dt_tcp__allreduce_one(struct dt_tcp *t, const void *send, void *recv, size_t n, enum dt_dtype dt,
                          enum dt_redop op)
{
    struct dt_tcp__hdr h;
    begin(t, DT_COLL_ALLREDUCE);
    if (n == 0)
        return 0;
    dt_tcp__hdr_make(t, &h, n, dt, op, -1);
    size_t bytes = n * dt_dtype_size(dt);
    if (bytes <= t->small_bytes || n < (size_t)t->world) {
        if (send != recv)
            memcpy(recv, send, bytes);
        return rd_allreduce(t, &h, recv, n, dt, op);
    }
    if (bytes <= t->halving_bytes && t->world > 2)
        return halving_allreduce(t, &h, send, recv, n, dt, op);
    return ring_allreduce(t, &h, send, recv, n, dt, op);
}

static int tcp_allreduce(void *st, const void *send, void *recv, size_t n, enum dt_dtype dt, enum dt_redop op)
{
    struct dt_tcp *t = st;
    if (t->lanes && n * dt_dtype_size(dt) >= t->lane_bytes)
        return dt_tcp__lanes_allreduce(t, send, recv, n, dt, op);
    return dt_tcp__allreduce_one(t, send, recv, n, dt, op);
}

/* Ring reduce-scatter: block c of `send` ends, fully reduced, on rank c.  The
 * partial sum travelling through a rank lives in one of two scratch slots; in
 * step s we may overwrite slot s%2 only after out step s-1 (which carried its
 * previous content) has left. */
static int ring_reduce_scatter(struct dt_tcp *t, const struct dt_tcp__hdr *h, const char *send, char *recv,
                               size_t n, enum dt_dtype dt, enum dt_redop op)
{
    int r = t->rank, p = t->world, rc;
    size_t len = n * dt_dtype_size(dt);
    if (p > 2 && (rc = scratch(t, 2 * len)) < 0)
        return rc;
    struct dt_tcp__hdr rh;
    t->out[0] = blk(h, HB, -1);
    t->in[0] = blk(&rh, HB, -1);
    for (int s = 0; s < p - 1; s++) {
        bool last = s == p - 2;
        const char *from = s == 0 ? send + (size_t)mod(r - 1, p) * len : t->scratch + (size_t)((s - 1) % 2) * len;
        t->out[1 + s] = blk(from, len, s == 0 ? -1 : s);
        t->in[1 + s] = blk(last ? recv : t->scratch + (size_t)(s % 2) * len, len, -1);
        t->in[1 + s].src = send + (size_t)mod(r - s - 2, p) * len;
        t->in[1 + s].kind = DT_TCP__IN_REDUCE;
        t->in[1 + s].incoming_first = true;
        t->in[1 + s].finish = last;
        t->in[1 + s].after_out = !last && s >= 2 ? s : -1;
    }
    struct dt_tcp__plan pl = {.out_peer = mod(r + 1, p), .in_peer = mod(r - 1, p), .out = t->out, .in = t->in,
                              .nout = p, .nin = p, .check_hdr = true, .hdr = h, .dtype = dt, .op = op};
    return dt_tcp__run(t, &pl);
}

static int tcp_reduce_scatter(void *st, const void *send, void *recv, size_t n, enum dt_dtype dt,
                              enum dt_redop op)
{
    struct dt_tcp *t = st;
    struct dt_tcp__hdr h;
    begin(t, DT_COLL_REDUCE_SCATTER);
    if (n == 0)
        return 0;
    dt_tcp__hdr_make(t, &h, n, dt, op, -1);
    size_t es = dt_dtype_size(dt), all = n * es * (size_t)t->world;
    if (all <= t->small_bytes) { /* latency-bound: reduce everything, keep our block */
        int rc = scratch(t, all);
        if (rc < 0)
            return rc;
        memcpy(t->scratch, send, all);
        if ((rc = rd_allreduce(t, &h, t->scratch, n * (size_t)t->world, dt, op)) < 0)
            return rc;
        memmove(recv, t->scratch + (size_t)t->rank * n * es, n * es);
        return 0;
    }
    return ring_reduce_scatter(t, &h, send, recv, n, dt, op);
}

static int tcp_allgather(void *st, const void *send, void *recv, size_t n, enum dt_dtype dt)
{
    struct dt_tcp *t = st;
    struct dt_tcp__hdr h, rh;
    int r = t->rank, p = t->world;
    begin(t, DT_COLL_ALLGATHER);
    if (n == 0)
        return 0;
    dt_tcp__hdr_make(t, &h, n, dt, DT_SUM, -1);
    size_t len = n * dt_dtype_size(dt);
    char *rb = recv;
    if (send != rb + (size_t)r * len)
        memmove(rb + (size_t)r * len, send, len);
    t->out[0] = blk(&h, HB, -1);
    t->in[0] = blk(&rh, HB, -1);
    for (int s = 0; s < p - 1; s++) {
        t->out[1 + s] = blk(rb + (size_t)mod(r - s, p) * len, len, s == 0 ? -1 : s);
        t->in[1 + s] = blk(rb + (size_t)mod(r - s - 1, p) * len, len, -1);
    }
    struct dt_tcp__plan pl = {.out_peer = mod(r + 1, p), .in_peer = mod(r - 1, p), .out = t->out, .in = t->in,
                              .nout = p, .nin = p, .check_hdr = true, .hdr = &h, .dtype = dt};
    return dt_tcp__run(t, &pl);
}

/* Binomial tree over ranks relative to the root: receive from the parent,
 * then send to children at decreasing distances. */
static int tree_broadcast(struct dt_tcp *t, const struct dt_tcp__hdr *h, char *buf, size_t len, int root)
{
    int p = t->world, vr = mod(t->rank - root, p), mask = 1, rc;
    while (mask < p) {
        if (vr & mask) {
            if ((rc = exchange_small(t, h, -1, NULL, 0, mod(vr - mask + root, p), len)) < 0)
                return rc;
            memcpy(buf, t->stage + HB, len);
            break;
        }
        mask <<= 1;
    }
    for (mask >>= 1; mask > 0; mask >>= 1)
        if (vr + mask < p && (rc = exchange_small(t, h, mod(vr + mask + root, p), buf, len, -1, 0)) < 0)
            return rc;
    return 0;
}

/* Pipelined chain root -> root+1 -> ...: each rank forwards bytes as they arrive. */
static int chain_broadcast(struct dt_tcp *t, const struct dt_tcp__hdr *h, char *buf, size_t len, int root)
{
    int p = t->world, vr = mod(t->rank - root, p);
    struct dt_tcp__hdr rh;
    t->out[0] = blk(h, HB, -1);
    t->out[1] = blk(buf, len, vr == 0 ? -1 : 1);
    t->in[0] = blk(&rh, HB, -1);
    t->in[1] = blk(buf, len, -1);
    bool has_out = vr < p - 1, has_in = vr > 0;
    struct dt_tcp__plan pl = {.out_peer = has_out ? mod(t->rank + 1, p) : -1,
                              .in_peer = has_in ? mod(t->rank - 1, p) : -1, .out = t->out, .in = t->in,
                             .nout = has_out ? 2 : 0, .nin = has_in ? 2 : 0, .check_hdr = has_in, .hdr = h};
    return dt_tcp__run(t, &pl);
}

static int tcp_broadcast(void *st, void *buf, size_t n, enum dt_dtype dt, int root)
{
    struct dt_tcp *t = st;
    struct dt_tcp__hdr h;
    begin(t, DT_COLL_BROADCAST);
    if (n == 0)
        return 0;
    dt_tcp__hdr_make(t, &h, n, dt, DT_SUM, root);
    size_t len = n * dt_dtype_size(dt);
    if (len <= t->small_bytes)
        return tree_broadcast(t, &h, buf, len, root);
    return chain_broadcast(t, &h, buf, len, root);
}

static int tcp_barrier(void *st)
{
    struct dt_tcp *t = st;
    struct dt_tcp__hdr h;
    begin(t, DT_COLL_BARRIER);
    dt_tcp__hdr_make(t, &h, 0, DT_F32, DT_SUM, -1);
    for (int k = 1; k < t->world; k <<= 1) {
        int rc = exchange_small(t, &h, mod(t->rank + k, t->world), NULL, 0, mod(t->rank - k, t->world), 0);
        if (rc < 0)
            return rc;
    }
    return 0;
}

const struct dt_comm_backend dt_comm_backend_tcp = {
    .name = "tcp",
    .init = dt_tcp__init,
    .allreduce = tcp_allreduce,
    .broadcast = tcp_broadcast,
    .allgather = tcp_allgather,
    .reduce_scatter = tcp_reduce_scatter,
    .barrier = tcp_barrier,
    .abort = dt_tcp__abort,
    .destroy = dt_tcp__destroy,
    .busy = dt_tcp__busy,
};
