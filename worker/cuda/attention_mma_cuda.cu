/* attention_mma_cuda.cu - the tensor-core path of attention_cuda.cu: causal
 * self-attention forward and backward for bf16 with 64-wide heads (GPT-2
 * 124M), FlashAttention-2 style on mma.sync m16n8k16 (bf16 in, fp32
 * accumulate).  attention_cuda.cu has the math, the general path and the
 * dispatch that decides when this one runs (bf16, hd 64, 16-byte aligned
 * buffers, DTRAIN_CUDA_ATTN not simple).
 *
 * Blocks of 4 warps own a tile of 64 rows (16 per warp, their A fragments in
 * registers, or for dk/dv in shared memory; the forward: 128 rows, 32 per
 * warp) and loop over 64-row tiles of the other side, double-buffered:
 * cp.async copies tile i+1 into shared memory (row-major, pitch 72:
 * conflict-free ldmatrix) while the warps compute on tile i.  B fragments
 * come from ldmatrix, transposed (.trans) where the tile's rows are the
 * product's k.  Rows past T load as zero and are masked.  Backward: dk/dv per
 * key tile, then dq per query tile (no atomics, the same bits every run), or
 * with an atomic dq, dq added by the dk/dv kernel into an fp32 buffer with
 * atomics and scaled into dqkv by a last pass (attention_cuda.cu says why);
 * the wide form of that kernel takes 128 keys over 8 warps.
 *
 * Everything is enqueued on the given stream, with no allocation and no host
 * synchronisation (capturable in a CUDA graph).  Not for other head sizes or
 * types (the general path) or the choice between paths.
 */
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

extern "C" {
#include "base/error.h" /* a C header without C++ guards */
}
#include "worker/cuda/device_common.cuh"
#include "worker/cuda/transformer_cuda.h"

namespace
{

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

/* ---- fast path: bf16, hd 64, tensor cores ---- */

typedef __nv_bfloat16 bf16;
constexpr int kTile = 64; /* rows of a tile, both sides */
constexpr int kHd = 64;
/* Shared row pitch in bf16: 144 bytes, so the 8 rows (16 bytes each) that one
 * ldmatrix phase reads start 4 banks apart and cover all 32 banks once. */
constexpr int kPitch = 72;
constexpr int kTileElems = kTile * kPitch;
constexpr int kFastThreads = 128; /* 4 warps x 16 rows */
static_assert(kFastThreads == 2 * kTile, "stage_rows: one thread per row of lse and one of D");

/* D += A B, m16n8k16, A row-major 16x16 and B column-major 16x8 in bf16,
 * D fp32.  With g = lane / 4 and t = lane % 4 (PTX ISA, mma.m16n8k16):
 *   a0 (g, 2t..2t+1)  a1 (g+8, 2t..)  a2 (g, 2t+8..)  a3 (g+8, 2t+8..)   [row, k]
 *   b0 (2t..2t+1, g)  b1 (2t+8.., g)                                      [k, col]
 *   d0,d1 (g, 2t..2t+1)  d2,d3 (g+8, 2t..2t+1)                            [row, col]
 * Each register holds two bf16, the lower k (or col) in the low half. */
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi); /* .x (lo) at the lower address: the low half */
    uint32_t u;
    memcpy(&u, &v, 4);
    return u;
}


/* ldmatrix .x4 (PTX ISA, ldmatrix): lane l gives the address of row l % 8 of
 * the 8x8 bf16 matrix l / 8 (16 contiguous bytes); r[i] receives matrix i's
 * elements (g, 2t..2t+1), the lower column in the low half: mma's b0/b1 when
 * the matrix rows are the B operand's columns. */
__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], const bf16 *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p))
                 : "memory");
}

/* The same, transposed (.trans): r[i] receives matrix i's elements
 * (2t..2t+1, g), the lower row in the low half: mma's b0/b1 when the matrix
 * rows are the B operand's k. */
__device__ __forceinline__ void ldsm4_t(uint32_t (&r)[4], const bf16 *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p))
                 : "memory");
}

/* Two bf16 at row r, column c of a global matrix with leading dimension ld; 0 past T. */
__device__ __forceinline__ uint32_t ldg(const bf16 *p, size_t ld, int r, int c, int T)
{
    return r < T ? *(const uint32_t *)(p + (size_t)r * ld + c) : 0u;
}

/* A fragments of a warp's 16 rows r0.. (all 64 columns: 4 k-steps of 16). */
__device__ __forceinline__ void load_a(uint32_t (&a)[4][4], const bf16 *p, size_t ld, int r0, int T)
{
    int g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        int c = kk * 16 + 2 * t;
        a[kk][0] = ldg(p, ld, r0 + g, c, T);
        a[kk][1] = ldg(p, ld, r0 + g + 8, c, T);
        a[kk][2] = ldg(p, ld, r0 + g, c + 8, T);
        a[kk][3] = ldg(p, ld, r0 + g + 8, c + 8, T);
    }
}

/* A fragments of the 16 rows from s (a row-major shared tile): ldmatrix.x4
 * matrices at rows +0, +8 of columns 16kk, then of 16kk + 8 are a0..a3. */
__device__ __forceinline__ void load_a_s(uint32_t (&a)[4][4], const bf16 *s)
{
    const int lane = threadIdx.x % 32;
    const bf16 *p = s + ((lane / 8) % 2 * 8 + lane % 8) * kPitch + (lane / 16) * 8;
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
        ldsm4(a[kk], p + 16 * kk);
}

/* Starts copying rows [r0, r0+ROWS) of a bf16 matrix (leading dimension ld,
 * 64 columns from p) into the row-major shared tile s, by a block of NT
 * threads; rows past T become zero (their source is row 0, which exists,
 * and is not read).  A warp copies 4 whole rows per step (coalesced). */
template <int ROWS = kTile, int NT = kFastThreads>
__device__ __forceinline__ void stage(bf16 *s, const bf16 *p, size_t ld, int r0, int T)
{
#pragma unroll
    for (int i = 0; i < ROWS * kHd / 8 / NT; i++) {
        int c = (int)threadIdx.x + i * NT, r = c / (kHd / 8), col = (c % (kHd / 8)) * 8;
        bool in = r0 + r < T;
        cp_async16(s + r * kPitch + col, p + (size_t)(in ? r0 + r : 0) * ld + col, in);
    }
}

/* Starts copying lse and D of queries [q0, q0+64) into shared (0 past T):
 * the first 128 threads of a block of NT, one value each. */
template <int NT = kFastThreads>
__device__ __forceinline__ void stage_rows(float *lse_s, float *d_s, const float *lse, const float *D, int q0,
                                           int T)
{
    int i = (int)threadIdx.x % kTile, q = q0 + i;
    bool in = q < T;
    if ((int)threadIdx.x < kTile)
        cp_async4(lse_s + i, lse + (in ? q : 0), in);
    else if (NT == 2 * kTile || (int)threadIdx.x < 2 * kTile)
        cp_async4(d_s + i, D + (in ? q : 0), in);
}

/* acc[mi][n] (16 x 8 blocks n = 0..7 of row block mi's 16 x 64 result) +=
 * A[mi] (16 x 64, in registers) times the shared tile's rows as columns:
 * acc[mi][n][.] at col 8n + c is sum_k A[mi][row][k] s[8n + c][k].  One
 * ldmatrix.x4 gives b0, b1 of two k-steps (matrices at columns 32h, +8, +16,
 * +24 of rows 8n..8n+7), shared by the MB row blocks: with MB = 2 (the
 * forward's 32 rows per warp) half the shared-memory reads per product. */
template <int MB>
__device__ __forceinline__ void mma_rows_n(float (&acc)[MB][8][4], const uint32_t (&a)[MB][4][4], const bf16 *s)
{
    const int lane = threadIdx.x % 32;
    const bf16 *p = s + (lane % 8) * kPitch + (lane / 8) * 8;
#pragma unroll
    for (int n = 0; n < 8; n++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            uint32_t b[4];
            ldsm4(b, p + 8 * n * kPitch + 32 * h);
#pragma unroll
            for (int mi = 0; mi < MB; mi++) {
                mma(acc[mi][n], a[mi][2 * h], b[0], b[1]);
                mma(acc[mi][n], a[mi][2 * h + 1], b[2], b[3]);
            }
        }
}

/* One row block (a warp's 16 rows). */
__device__ __forceinline__ void mma_rows(float (&acc)[8][4], const uint32_t (&a)[4][4], const bf16 *s)
{
    mma_rows_n<1>(reinterpret_cast<float(&)[1][8][4]>(acc), reinterpret_cast<const uint32_t(&)[1][4][4]>(a), s);
}

/* This lane's ldmatrix.trans address in the row-major shared tile s (s[k][col])
 * for the B fragments of one k-step (rows 16kc.. from it): matrices at rows +0,
 * +8 of columns 16m, then of 16m + 8. */
__device__ __forceinline__ const bf16 *kstep_b_lane(const bf16 *s)
{
    const int lane = threadIdx.x % 32;
    return s + ((lane / 8) % 2 * 8 + lane % 8) * kPitch + (lane / 16) * 8;
}

/* acc (16 x 16M) += a (one k-step's A fragment, 16 x 16) times the 16 x 16M
 * rows of the tile at p (kstep_b_lane's address for that k-step): one
 * ldmatrix.x4.trans gives b0, b1 of two 8-column blocks. */
template <int M = 4>
__device__ __forceinline__ void mma_kstep(float (&acc)[2 * M][4], const uint32_t (&a)[4], const bf16 *p)
{
#pragma unroll
    for (int m = 0; m < M; m++) {
        uint32_t b[4];
        ldsm4_t(b, p + 16 * m);
        mma(acc[2 * m], a, b[0], b[1]);
        mma(acc[2 * m + 1], a, b[2], b[3]);
    }
}

/* acc[mi] (16 x 64) += X[mi] (16 x 64 in C-fragment layout, rounded to bf16
 * as the A operand: blocks 2kc and 2kc+1 make k-step kc) times the row-major
 * shared tile s (s[k][col]), for MB row blocks sharing every B fragment.  One
 * ldmatrix.x4.trans gives b0, b1 of two 8-column blocks (matrices at rows
 * 16kc, +8 of columns 16m, then of 16m + 8). */
template <int MB>
__device__ __forceinline__ void mma_cfrag_n(float (&acc)[MB][8][4], const float (&x)[MB][8][4], const bf16 *s)
{
    const bf16 *p = kstep_b_lane(s);
#pragma unroll
    for (int kc = 0; kc < 4; kc++) {
        uint32_t a[MB][4];
#pragma unroll
        for (int mi = 0; mi < MB; mi++) {
            a[mi][0] = pack(x[mi][2 * kc][0], x[mi][2 * kc][1]);
            a[mi][1] = pack(x[mi][2 * kc][2], x[mi][2 * kc][3]);
            a[mi][2] = pack(x[mi][2 * kc + 1][0], x[mi][2 * kc + 1][1]);
            a[mi][3] = pack(x[mi][2 * kc + 1][2], x[mi][2 * kc + 1][3]);
        }
#pragma unroll
        for (int m = 0; m < 4; m++) {
            uint32_t b[4];
            ldsm4_t(b, p + 16 * kc * kPitch + 16 * m);
#pragma unroll
            for (int mi = 0; mi < MB; mi++) {
                mma(acc[mi][2 * m], a[mi], b[0], b[1]);
                mma(acc[mi][2 * m + 1], a[mi], b[2], b[3]);
            }
        }
    }
}

/* One row block (a warp's 16 rows). */
__device__ __forceinline__ void mma_cfrag(float (&acc)[8][4], const float (&x)[8][4], const bf16 *s)
{
    mma_cfrag_n<1>(reinterpret_cast<float(&)[1][8][4]>(acc), reinterpret_cast<const float(&)[1][8][4]>(x), s);
}

/* acc (16 x 16M) += A (16 x 16KC) times the row-major shared tile s (s[k][col],
 * its first 16M columns), where A is stored transposed: A[row][k] = at[k][row]
 * (at points at the warp's first row, a column of the tile).  ldmatrix.trans
 * of the stored 8 x 8 blocks gives A's fragments directly (thread (g, t) gets
 * stored (2t..2t+1, g) = A (g, 2t..2t+1)); matrices at stored rows +0, +0, +8,
 * +8 and columns +0, +8, +0, +8 are a0..a3.  B as in mma_cfrag. */
template <int KC = 4, int M = 4>
__device__ __forceinline__ void mma_at(float (&acc)[2 * M][4], const bf16 *at, const bf16 *s)
{
    const int lane = threadIdx.x % 32;
    const bf16 *pa = at + ((lane / 16) * 8 + lane % 8) * kPitch + (lane / 8) % 2 * 8, *pb = kstep_b_lane(s);
#pragma unroll
    for (int kc = 0; kc < KC; kc++) {
        uint32_t a[4];
        ldsm4_t(a, pa + 16 * kc * kPitch);
        mma_kstep<M>(acc, a, pb + 16 * kc * kPitch);
    }
}

template <int NB> __device__ __forceinline__ void zero(float (&x)[NB][4])
{
#pragma unroll
    for (int n = 0; n < NB; n++)
        x[n][0] = x[n][1] = x[n][2] = x[n][3] = 0.0f;
}

/* Stores a warp's 16 x 64 C-fragment block times mul at rows r0.. (< T) of p. */
__device__ __forceinline__ void store_c(bf16 *p, size_t ld, int r0, int T, const float (&x)[8][4],
                                        float mul_lo, float mul_hi)
{
    int g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
#pragma unroll
    for (int n = 0; n < 8; n++) {
        int c = 8 * n + 2 * t;
        if (r0 + g < T)
            *(uint32_t *)(p + (size_t)(r0 + g) * ld + c) = pack(x[n][0] * mul_lo, x[n][1] * mul_lo);
        if (r0 + g + 8 < T)
            *(uint32_t *)(p + (size_t)(r0 + g + 8) * ld + c) = pack(x[n][2] * mul_hi, x[n][3] * mul_hi);
    }
}

/* The loops below double-buffer the tiles they walk: at the top of step i,
 * wait for tile i's copies and barrier (after which every warp is also done
 * with step i-1, the last reader of the other buffer), then start tile i+1's
 * copies into that other buffer and compute on tile i while they fly. */

/* The forward's query tile: 128 rows, 32 per warp as two 16-row blocks that
 * share every B fragment (half the shared-memory reads per product of 16
 * rows per warp, which bound the loop). */
constexpr int kFwdRows = 128;

/* Block (bh, 128-row query tile from the last: the longest first), looping
 * over 64-key tiles up to the diagonal; sl2 = scale log2(e), so scores live
 * in the log2 domain and exp2f serves.  Row block mi of the warp holds rows
 * r0 + 16 mi + g (C-fragment e < 2, "lo") and + 8 (e >= 2, "hi"). */
__global__ void __launch_bounds__(kFastThreads)
    fwd_fast(bf16 *out, float *lse, const bf16 *qkv, int T, int C, int H, float sl2)
{
    __shared__ __align__(16) bf16 ks[2][kTileElems], vs[2][kTileElems];
    const int nq = (T + kFwdRows - 1) / kFwdRows, qt = nq - 1 - (int)blockIdx.y, bh = (int)blockIdx.x;
    const int b = bh / H, h = bh % H, warp = threadIdx.x / 32, g = (threadIdx.x % 32) / 4,
              t = threadIdx.x % 4;
    const size_t ld = 3 * (size_t)C;
    const bf16 *base = qkv + (size_t)b * T * ld + (size_t)h * kHd;
    const int r0 = qt * kFwdRows + warp * 32;
    /* The last key tile holding a key <= the tile's last row; tiles from
     * first_diag on hold keys after some of its rows (and all keys >= T). */
    const int last = min((T - 1) / kTile, (qt * kFwdRows + kFwdRows - 1) / kTile),
              first_diag = qt * kFwdRows / kTile;
    stage(ks[0], base + C, ld, 0, T);
    stage(vs[0], base + 2 * C, ld, 0, T);
    cp_async_commit();
    uint32_t qa[2][4][4];
    load_a(qa[0], base, ld, r0, T);
    load_a(qa[1], base, ld, r0 + 16, T);
    float o[2][8][4], s[2][8][4];
    zero(o[0]);
    zero(o[1]);
    float m[2][2], l[2][2]; /* [mi][lo/hi]; l: this thread's columns only */
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
        m[mi][0] = m[mi][1] = -INFINITY, l[mi][0] = l[mi][1] = 0.0f;
    for (int kt = 0; kt <= last; kt++) {
        const int k0 = kt * kTile, cur = kt & 1;
        cp_async_wait_all();
        __syncthreads();
        if (kt < last) {
            stage(ks[cur ^ 1], base + C, ld, k0 + kTile, T);
            stage(vs[cur ^ 1], base + 2 * C, ld, k0 + kTile, T);
            cp_async_commit();
        }
        zero(s[0]);
        zero(s[1]);
        mma_rows_n<2>(s, qa, ks[cur]);
#pragma unroll
        for (int mi = 0; mi < 2; mi++) {
            float mx[2] = {m[mi][0], m[mi][1]};
#pragma unroll
            for (int n = 0; n < 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int key = k0 + 8 * n + 2 * t + (e & 1), row = r0 + 16 * mi + g + (e < 2 ? 0 : 8);
                    s[mi][n][e] = kt >= first_diag && key > row ? -INFINITY : s[mi][n][e] * sl2;
                    mx[e / 2] = fmaxf(mx[e / 2], s[mi][n][e]);
                }
                /* The 4 threads of a quad share rows g and g+8.  mx is finite: key 0
                 * (tile 0) or the running max is always there. */
#pragma unroll
            for (int x = 0; x < 2; x++) {
                mx[x] = fmaxf(mx[x], __shfl_xor_sync(0xffffffffu, mx[x], 1));
                mx[x] = fmaxf(mx[x], __shfl_xor_sync(0xffffffffu, mx[x], 2));
            }
            const float a_lo = exp2f(m[mi][0] - mx[0]), a_hi = exp2f(m[mi][1] - mx[1]);
            m[mi][0] = mx[0], m[mi][1] = mx[1];
            l[mi][0] *= a_lo, l[mi][1] *= a_hi;
#pragma unroll
            for (int n = 0; n < 8; n++) {
                float(&sn)[4] = s[mi][n];
                sn[0] = exp2f(sn[0] - mx[0]), sn[1] = exp2f(sn[1] - mx[0]);
                sn[2] = exp2f(sn[2] - mx[1]), sn[3] = exp2f(sn[3] - mx[1]);
                l[mi][0] += sn[0] + sn[1], l[mi][1] += sn[2] + sn[3];
                o[mi][n][0] *= a_lo, o[mi][n][1] *= a_lo, o[mi][n][2] *= a_hi, o[mi][n][3] *= a_hi;
            }
        }
        mma_cfrag_n<2>(o, s, vs[cur]);
    }
#pragma unroll
    for (int mi = 0; mi < 2; mi++) {
#pragma unroll
        for (int x = 0; x < 2; x++) {
            l[mi][x] += __shfl_xor_sync(0xffffffffu, l[mi][x], 1);
            l[mi][x] += __shfl_xor_sync(0xffffffffu, l[mi][x], 2);
        }
        const int rm = r0 + 16 * mi;
        store_c(out + (size_t)b * T * C + (size_t)h * kHd, (size_t)C, rm, T, o[mi], 1.0f / l[mi][0],
                1.0f / l[mi][1]);
#pragma unroll
        for (int x = 0; x < 2; x++)
            if (lse && t == 0 && rm + g + 8 * x < T)
                lse[(size_t)bh * T + rm + g + 8 * x] = m[mi][x] * kLn2 + logf(l[mi][x]);
    }
}

/* P (exp of the recomputed scores, 0 where masked) into s and dS = P (dP - D)
 * into dp, for a 16 x 64 block in C-fragment layout.  Rows and columns are
 * queries and keys or, transposed (keys_are_rows), keys and queries; lse2
 * (lse log2 e) and D per query, given by the caller's accessor. */
template <bool keys_are_rows, typename LseD>
__device__ __forceinline__ void probs(float (&s)[8][4], float (&dp)[8][4], int row0, int col0, bool mask,
                                      int T, float sl2, LseD lse_d)
{
    int g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
#pragma unroll
    for (int n = 0; n < 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int row = row0 + g + (e < 2 ? 0 : 8), col = col0 + 8 * n + 2 * t + (e & 1);
            int q = keys_are_rows ? col : row, key = keys_are_rows ? row : col;
            float l2, d;
            lse_d(keys_are_rows ? 8 * n + 2 * t + (e & 1) : g + (e < 2 ? 0 : 8), l2, d);
            float p = exp2f(s[n][e] * sl2 - l2);
            if (mask && (key > q || q >= T))
                p = 0.0f;
            s[n][e] = p;
            dp[n][e] = p * (dp[n][e] - d);
        }
}

/* One query tile's share of a warp's 16 keys (rows r0.., at kw and vw in
 * shared): S^T = K Q^T and dP^T = V dO^T, P and dS (probs, masked when
 * mask), then dV += P^T dO and dK += dS^T Q; dp is left holding dS^T. */
__device__ __forceinline__ void dkdv_tile(float (&dk)[8][4], float (&dv)[8][4], float (&s)[8][4],
                                          float (&dp)[8][4], const bf16 *kw, const bf16 *vw, const bf16 *q_c,
                                          const bf16 *do_c, const float *lse_c, const float *d_c, int r0, int q0,
                                          bool mask, int T, float sl2)
{
    uint32_t a[4][4];
    zero(s);
    load_a_s(a, kw);
    mma_rows(s, a, q_c); /* S^T[key][q] */
    zero(dp);
    load_a_s(a, vw);
    mma_rows(dp, a, do_c); /* dP^T[key][q] = v_key . do_q */
    probs<true>(s, dp, r0, q0, mask, T, sl2, [&](int qc, float &l2, float &d) {
        l2 = lse_c[qc] * kLog2e;
        d = d_c[qc];
    });
    mma_cfrag(dv, s, do_c); /* dV += P^T dO */
    mma_cfrag(dk, dp, q_c); /* dK += dS^T Q */
}

/* A warp's dS^T (16 keys x 64 queries in C-fragment layout, rounded to bf16
 * as the dK product rounds it) into rows 16 warp.. of the shared tile. */
__device__ __forceinline__ void put_ds_t(bf16 *dst_s, int warp, const float (&dp)[8][4])
{
    const int g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
    bf16 *row = dst_s + (warp * 16 + g) * kPitch + 2 * t;
#pragma unroll
    for (int n = 0; n < 8; n++) {
        *(uint32_t *)(row + 8 * n) = pack(dp[n][0], dp[n][1]);
        *(uint32_t *)(row + 8 * kPitch + 8 * n) = pack(dp[n][2], dp[n][3]);
    }
}

/* dk, dv of a 64-key tile (block (bh, tile)), looping over query tiles from
 * the diagonal on; the warp works on S^T = K Q^T (its 16 keys as rows).  K
 * and V stay in shared memory (their A fragments reloaded per step: 32
 * registers fewer than holding them, which keeps the kernel free of spills).
 * With kAtomicDq, each step also adds this key tile's share of dq,
 * dS K, into dq32 [B*H, T, 64] fp32: the warps put dS^T (bf16, as the dk
 * product rounds it) into shared memory, and after a barrier each takes 16
 * query rows of it as A (transposed) against K; float2 atomics add the
 * 16 x 64 result.  The S accumulator is dead by then and holds it. */
constexpr size_t kDkdvSmem = 6 * kTileElems * sizeof(bf16) + 4 * kTile * sizeof(float);
constexpr size_t kDkdvAtomicSmem = kDkdvSmem + kTileElems * sizeof(bf16);

/* Adds a warp's 16 x 8NB C-fragment block at rows r0.. (< T) of the fp32
 * [rows, 64] matrix p (p at the block's first column); (g, 2t) and (g, 2t+1)
 * are adjacent: one float2 atomic (global memory, sm_90). */
template <int NB = 8> __device__ __forceinline__ void atomic_add_c(float *p, int r0, int T, const float (&x)[NB][4])
{
    int g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
#pragma unroll
    for (int n = 0; n < NB; n++) {
        int c = 8 * n + 2 * t;
        if (r0 + g < T)
            atomicAdd((float2 *)(p + (size_t)(r0 + g) * kHd + c), make_float2(x[n][0], x[n][1]));
        if (r0 + g + 8 < T)
            atomicAdd((float2 *)(p + (size_t)(r0 + g + 8) * kHd + c), make_float2(x[n][2], x[n][3]));
    }
}

template <bool kAtomicDq>
__global__ void __launch_bounds__(kFastThreads, 2)
    bwd_dkdv_fast(bf16 *dqkv, float *dq32, const bf16 *qkv, const bf16 *dout, const float *lse, const float *D,
                  int T, int C, int H, float scale, float sl2)
{
    extern __shared__ __align__(16) unsigned char dkdv_smem[]; /* kDkdvSmem (+ dS^T) bytes */
    /* K, V, then per buffer i: Q at qs + i kTileElems, dO at dos + i kTileElems,
     * lse at lse_s + i kTile, D at d_s + i kTile; then dS^T (kAtomicDq). */
    bf16 *ks = (bf16 *)dkdv_smem, *vs = ks + kTileElems, *qs = vs + kTileElems, *dos = qs + 2 * kTileElems;
    float *lse_s = (float *)(dos + 2 * kTileElems), *d_s = lse_s + 2 * kTile;
    bf16 *dst_s = (bf16 *)(d_s + 2 * kTile);
    const int nt = (T + kTile - 1) / kTile, kt = (int)blockIdx.y,
              bh = (int)blockIdx.x; /* kt 0 has the most */
    const int b = bh / H, h = bh % H, warp = threadIdx.x / 32;
    const size_t ld = 3 * (size_t)C;
    const bf16 *base = qkv + (size_t)b * T * ld + (size_t)h * kHd;
    const bf16 *dbase = dout + (size_t)b * T * C + (size_t)h * kHd;
    const float *lse_bh = lse + (size_t)bh * T, *D_bh = D + (size_t)bh * T;
    const int r0 = kt * kTile + warp * 16;
    stage(ks, base + C, ld, kt * kTile, T);
    stage(vs, base + 2 * C, ld, kt * kTile, T);
    stage(qs, base, ld, kt * kTile, T);
    stage(dos, dbase, (size_t)C, kt * kTile, T);
    stage_rows(lse_s, d_s, lse_bh, D_bh, kt * kTile, T);
    cp_async_commit();
    float dk[8][4], dv[8][4], s[8][4], dp[8][4];
    zero(dk);
    zero(dv);
    for (int qt = kt; qt < nt; qt++) {
        const int q0 = qt * kTile, cur = (qt - kt) & 1, nxt = cur ^ 1;
        cp_async_wait_all();
        __syncthreads();
        if (qt + 1 < nt) {
            stage(qs + nxt * kTileElems, base, ld, q0 + kTile, T);
            stage(dos + nxt * kTileElems, dbase, (size_t)C, q0 + kTile, T);
            stage_rows(lse_s + nxt * kTile, d_s + nxt * kTile, lse_bh, D_bh, q0 + kTile, T);
            cp_async_commit();
        }
        const bf16 *q_c = qs + cur * kTileElems, *do_c = dos + cur * kTileElems;
        const float *lse_c = lse_s + cur * kTile, *d_c = d_s + cur * kTile;
        dkdv_tile(dk, dv, s, dp, ks + warp * 16 * kPitch, vs + warp * 16 * kPitch, q_c, do_c, lse_c, d_c, r0, q0,
                  qt == kt || qt == nt - 1, T, sl2);
        if (kAtomicDq) {
            /* The barrier at the loop's top keeps the previous step's readers of
             * dst_s ahead of these writes; the one below publishes them. */
            put_ds_t(dst_s, warp, dp);
            __syncthreads();
            zero(s);
            mma_at(s, dst_s + warp * 16, ks); /* dQ[q][.] += dS[q][key] K[key][.] */
            atomic_add_c(dq32 + (size_t)bh * T * kHd, q0 + warp * 16, T, s);
        }
    }
    bf16 *dst = dqkv + (size_t)b * T * ld + (size_t)h * kHd;
    store_c(dst + C, ld, r0, T, dk, scale, scale);
    store_c(dst + 2 * C, ld, r0, T, dv, 1.0f, 1.0f);
}

/* The atomic dq over wide key tiles (DTRAIN_CUDA_ATTN=wide): the dk/dv
 * kernel above, but a block of 8 warps owns 128 keys (16 per warp, as
 * there), so each query tile's Q, dO, lse and D are staged once for 128 keys
 * instead of 64, and its dq share, dS K over the 128 keys, is added with
 * half the atomics: warp w takes query rows 16 (w % 4).. and columns
 * 32 (w / 4).. of the 64 x 64 result (k = 128 keys).  The first two query
 * tiles (the diagonal) and the last (rows past T) are masked; every other
 * one lies wholly after the tile's keys. */
constexpr int kWideKeys = 128, kWideThreads = 256;
constexpr size_t kWideSmem =
    (3 * kWideKeys * kPitch + 4 * kTileElems) * sizeof(bf16) + 4 * kTile * sizeof(float);
static_assert(kWideThreads >= 2 * kTile, "stage_rows: one thread per row of lse and one of D");

__global__ void __launch_bounds__(kWideThreads, 1)
    bwd_dkdv_wide(bf16 *dqkv, float *dq32, const bf16 *qkv, const bf16 *dout, const float *lse, const float *D,
                  int T, int C, int H, float scale, float sl2)
{
    extern __shared__ __align__(16) unsigned char wide_smem[]; /* kWideSmem bytes */
    /* K, V, dS^T (128 rows each), then per buffer i: Q at qs + i kTileElems, dO
     * at dos + i kTileElems, lse at lse_s + i kTile, D at d_s + i kTile. */
    bf16 *ks = (bf16 *)wide_smem, *vs = ks + kWideKeys * kPitch, *dst_s = vs + kWideKeys * kPitch;
    bf16 *qs = dst_s + kWideKeys * kPitch, *dos = qs + 2 * kTileElems;
    float *lse_s = (float *)(dos + 2 * kTileElems), *d_s = lse_s + 2 * kTile;
    const int nt = (T + kTile - 1) / kTile, kt = (int)blockIdx.y, bh = (int)blockIdx.x; /* kt 0 has the most */
    const int b = bh / H, h = bh % H, warp = threadIdx.x / 32;
    const size_t ld = 3 * (size_t)C;
    const bf16 *base = qkv + (size_t)b * T * ld + (size_t)h * kHd;
    const bf16 *dbase = dout + (size_t)b * T * C + (size_t)h * kHd;
    const float *lse_bh = lse + (size_t)bh * T, *D_bh = D + (size_t)bh * T;
    const int k0 = kt * kWideKeys, r0 = k0 + warp * 16, qt0 = k0 / kTile;
    stage<kWideKeys, kWideThreads>(ks, base + C, ld, k0, T);
    stage<kWideKeys, kWideThreads>(vs, base + 2 * C, ld, k0, T);
    stage<kTile, kWideThreads>(qs, base, ld, k0, T);
    stage<kTile, kWideThreads>(dos, dbase, (size_t)C, k0, T);
    stage_rows<kWideThreads>(lse_s, d_s, lse_bh, D_bh, k0, T);
    cp_async_commit();
    float dk[8][4], dv[8][4], s[8][4], dp[8][4], dq[4][4];
    zero(dk);
    zero(dv);
    for (int qt = qt0; qt < nt; qt++) {
        const int q0 = qt * kTile, cur = (qt - qt0) & 1, nxt = cur ^ 1;
        cp_async_wait_all();
        __syncthreads(); /* also: every warp is done reading dst_s of the step before */
        if (qt + 1 < nt) {
            stage<kTile, kWideThreads>(qs + nxt * kTileElems, base, ld, q0 + kTile, T);
            stage<kTile, kWideThreads>(dos + nxt * kTileElems, dbase, (size_t)C, q0 + kTile, T);
            stage_rows<kWideThreads>(lse_s + nxt * kTile, d_s + nxt * kTile, lse_bh, D_bh, q0 + kTile, T);
            cp_async_commit();
        }
        const bf16 *q_c = qs + cur * kTileElems, *do_c = dos + cur * kTileElems;
        const float *lse_c = lse_s + cur * kTile, *d_c = d_s + cur * kTile;
        dkdv_tile(dk, dv, s, dp, ks + warp * 16 * kPitch, vs + warp * 16 * kPitch, q_c, do_c, lse_c, d_c, r0, q0,
                  qt < qt0 + 2 || qt == nt - 1, T, sl2);
        put_ds_t(dst_s, warp, dp);
        __syncthreads();
        zero(dq);
        mma_at<kWideKeys / 16, 2>(dq, dst_s + (warp % 4) * 16, ks + (warp / 4) * 32); /* dQ += dS K */
        atomic_add_c<4>(dq32 + (size_t)bh * T * kHd + (warp / 4) * 32, q0 + (warp % 4) * 16, T, dq);
    }
    bf16 *dst = dqkv + (size_t)b * T * ld + (size_t)h * kHd;
    store_c(dst + C, ld, r0, T, dk, scale, scale);
    store_c(dst + 2 * C, ld, r0, T, dv, 1.0f, 1.0f);
}

/* dqkv's q part = scale dq32 (the atomic path's last pass): thread i owns two
 * adjacent columns of one row. */
__global__ void dq_from_fp32(bf16 *dqkv, const float *dq32, int T, int C, int H, float scale)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * C / 2)
        return;
    const int b = (int)blockIdx.y, row = (int)(i / (C / 2)), col = (int)(i % (C / 2)) * 2, h = col / kHd;
    const float2 v = *(const float2 *)(dq32 + (((size_t)b * H + h) * T + row) * kHd + col % kHd);
    *(uint32_t *)(dqkv + ((size_t)b * T + row) * 3 * C + col) = pack(v.x * scale, v.y * scale);
}

/* dq of a 64-query tile (block (bh, tile from the last)), looping over key
 * tiles up to the diagonal. */
__global__ void __launch_bounds__(kFastThreads, 2)
    bwd_dq_fast(bf16 *dqkv, const bf16 *qkv, const bf16 *dout, const float *lse, const float *D, int T, int C,
                int H, float scale, float sl2)
{
    __shared__ __align__(16) bf16 ks[2][kTileElems], vs[2][kTileElems];
    const int nt = (T + kTile - 1) / kTile, qt = nt - 1 - (int)blockIdx.y, bh = (int)blockIdx.x;
    const int b = bh / H, h = bh % H, warp = threadIdx.x / 32, g = (threadIdx.x % 32) / 4;
    const size_t ld = 3 * (size_t)C;
    const bf16 *base = qkv + (size_t)b * T * ld + (size_t)h * kHd;
    const int r0 = qt * kTile + warp * 16, row_lo = r0 + g, row_hi = r0 + g + 8;
    stage(ks[0], base + C, ld, 0, T);
    stage(vs[0], base + 2 * C, ld, 0, T);
    cp_async_commit();
    uint32_t qa[4][4], doa[4][4];
    load_a(qa, base, ld, r0, T);
    load_a(doa, dout + (size_t)b * T * C + (size_t)h * kHd, (size_t)C, r0, T);
    const float *lse_bh = lse + (size_t)bh * T, *D_bh = D + (size_t)bh * T;
    const float l2_lo = row_lo < T ? lse_bh[row_lo] * kLog2e : 0.0f,
                l2_hi = row_hi < T ? lse_bh[row_hi] * kLog2e : 0.0f;
    const float d_lo = row_lo < T ? D_bh[row_lo] : 0.0f, d_hi = row_hi < T ? D_bh[row_hi] : 0.0f;
    float dq[8][4], s[8][4], dp[8][4];
    zero(dq);
    for (int kt = 0; kt <= qt; kt++) {
        const int k0 = kt * kTile, cur = kt & 1;
        cp_async_wait_all();
        __syncthreads();
        if (kt < qt) {
            stage(ks[cur ^ 1], base + C, ld, k0 + kTile, T);
            stage(vs[cur ^ 1], base + 2 * C, ld, k0 + kTile, T);
            cp_async_commit();
        }
        zero(s);
        zero(dp);
        mma_rows(s, qa, ks[cur]);   /* S[q][key] */
        mma_rows(dp, doa, vs[cur]); /* dP[q][key] */
        probs<false>(s, dp, r0, k0, kt == qt, T, sl2, [&](int rr, float &l2, float &d) {
            l2 = rr < 8 ? l2_lo : l2_hi;
            d = rr < 8 ? d_lo : d_hi;
        });
        mma_cfrag(dq, dp, ks[cur]); /* dQ += dS K */
    }
    store_c(dqkv + (size_t)b * T * ld + (size_t)h * kHd, ld, r0, T, dq, scale, scale);
}

} // namespace

extern "C" int dt_cuda__attention_mma_forward(cudaStream_t st, void *out, float *lse, const void *qkv, int B, int T,
                                              int C, int H, float scale)
{
    dim3 grid((unsigned)(B * H), (unsigned)((T + kFwdRows - 1) / kFwdRows));
    fwd_fast<<<grid, kFastThreads, 0, st>>>((bf16 *)out, lse, (const bf16 *)qkv, T, C, H, scale * kLog2e);
    return launched("attention forward kernel launch (tensor cores)");
}

extern "C" int dt_cuda__attention_mma_backward(cudaStream_t st, int dq_way, void *dqkv, const void *dout,
                                               const void *qkv, const float *lse, const float *D, float *dq32,
                                               int B, int T, int C, int H, float scale)
{
    const size_t rows = (size_t)B * H * T;
    const bool atomic = dq_way != DT_CUDA__DQ_TILES;
    const bf16 *q = (const bf16 *)qkv, *d_o = (const bf16 *)dout;
    if (atomic) {
        cudaError_t e = cudaMemsetAsync(dq32, 0, rows * kHd * sizeof(float), st);
        if (e != cudaSuccess)
            return dt_cuda_err(e, "attention backward: clearing the fp32 dq of the atomic path");
    }
    /* Over 48 KiB of dynamic shared memory is an opt-in per kernel (and device):
     * a host-side attribute, no stream work, so asked every call. */
    const bool wide = dq_way == DT_CUDA__DQ_ATOMIC_WIDE;
    auto dkdv = wide ? bwd_dkdv_wide : atomic ? bwd_dkdv_fast<true> : bwd_dkdv_fast<false>;
    const size_t smem = wide ? kWideSmem : atomic ? kDkdvAtomicSmem : kDkdvSmem;
    cudaError_t e = cudaFuncSetAttribute(dkdv, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess)
        return dt_cuda_err(e, "attention backward: cudaFuncSetAttribute (shared memory of the dk/dv kernel)");
    const int keys = wide ? kWideKeys : kTile;
    dim3 grid((unsigned)(B * H), (unsigned)((T + keys - 1) / keys));
    dkdv<<<grid, wide ? kWideThreads : kFastThreads, smem, st>>>((bf16 *)dqkv, dq32, q, d_o, lse, D, T, C, H, scale,
                                                                 scale * kLog2e);
    if (atomic) {
        const unsigned per_batch = (unsigned)(((size_t)T * C / 2 + 255) / 256);
        dq_from_fp32<<<dim3(per_batch, (unsigned)B), 256, 0, st>>>((bf16 *)dqkv, dq32, T, C, H, scale);
    } else {
        grid.y = (unsigned)((T + kTile - 1) / kTile);
        bwd_dq_fast<<<grid, kFastThreads, 0, st>>>((bf16 *)dqkv, q, d_o, lse, D, T, C, H, scale, scale * kLog2e);
    }
    return launched(atomic ? "attention backward kernel launch (tensor cores, atomic dq)"
                           : "attention backward kernel launch (tensor cores)");
}
