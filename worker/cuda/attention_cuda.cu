/* attention_cuda.cu - GPT-2's causal self-attention on the GPU, forward and
 * backward (transformer_cuda.h, "causal self-attention"), flash-style: the
 * T x T probabilities are never stored; backward recomputes them from the
 * forward's log-sum-exp.
 *
 * Math, per (b, h), rows i (queries) and j (keys), scale c = 1/sqrt(hd):
 *   s_ij = c q_i . k_j  (j <= i),  lse_i = log sum_j exp(s_ij),  P_ij = exp(s_ij - lse_i)
 *   o_i  = sum_j P_ij v_j
 *   D_i  = do_i . o_i                 (= sum_j P_ij dP_ij)
 *   dP_ij = do_i . v_j,  dS_ij = P_ij (dP_ij - D_i)
 *   dq_i = c sum_j dS_ij k_j,  dk_j = c sum_i dS_ij q_i,  dv_j = sum_i P_ij do_i
 * The forward keeps a running max m and sum l per row (online softmax: a new
 * block of scores with max m' rescales l and o by exp(m - m')).  Backward is
 * by default three kernels, each output element written by one thread in a
 * fixed order (no atomics, so the same inputs give the same bits): D into the
 * scratch, then dk and dv per key (looping over queries >= it), then dq per
 * query (looping over keys <= it).  The dq kernel recomputes S and dP, two of
 * the backward's seven tile products.  DTRAIN_CUDA_ATTN=atomic (fast path
 * only) drops that kernel as FlashAttention-2 does: the dk/dv kernel, which
 * already holds dS for its key tile, adds dS K into an fp32 dq in the scratch
 * with atomics, and a last pass scales it into dqkv.  Five products instead
 * of seven, but the order of the fp32 sums varies run to run (PyTorch's
 * flash backward is the same; its deterministic mode refuses it).
 *
 * Three paths:
 *   general  any t (fp32, bf16, fp16) and head size hd <= 128: one warp per
 *            row, hd spread over the lanes (4 per lane at most), shuffle dots
 *            (here).
 *   fast     bf16 with hd = 64 (GPT-2 124M): FlashAttention-2 on the tensor
 *            cores, in attention_mma_cuda.cu.
 *   cudnn    bf16 or fp16 with hd a multiple of 8 and T > 1: cuDNN's fused
 *            attention, in attention_cudnn.cpp, where libcudnn loads.
 * DTRAIN_CUDA_ATTN (read once per process; unset is auto): auto runs cuDNN
 * with its atomic dq where it loads and takes the shape, else fast (said
 * once, on stderr, why).  That is PyTorch's choice on Hopper: its SDPA runs
 * cuDNN's backward without asking for the deterministic algorithm.  On the
 * H100 it was 1.3 ms a step faster than cudnn (GPT-2 124M, B=32) and has no
 * B*H*T*T dS in memory, which the deterministic one keeps (0.38 GiB at B=16,
 * T=1024).  simple forces the general path, the way round a fast-path bug on
 * a GPU machine; fast the own tensor-core kernels without atomics (the same
 * bits every run); atomic picks the fast path's atomic dq (above); wide the
 * same from 128-key tiles of 8 warps, which stage each query tile once for
 * 128 keys and add dq with half the atomics; cudnn runs cuDNN's kernels with
 * its deterministic backward, cudnn-atomic with its atomic dq.  The fast and
 * cudnn paths also need 16-byte aligned buffers; otherwise the general path
 * runs.
 *
 * Everything is enqueued on the context's stream, with no allocation and no
 * host synchronisation (capturable in a CUDA graph; cuDNN builds a shape's
 * plan and workspace at its first call, before the capture).
 *
 * Not for the projections around attention (the GEMMs of transformer_cuda.h) or
 * dropout (GPT-2 trains without it here).
 */
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "base/error.h" /* C headers without C++ guards */
#include "base/log.h"
}
#include "worker/cuda/device_common.cuh"
#include "worker/cuda/transformer_cuda.h"

namespace
{

/* ---- general path: one warp per row, lane l holds dims l, l+32, l+64, l+96 ---- */

constexpr int kSimpleWarps = 8; /* warps (rows) per block */
constexpr int kPerLane = 4;     /* hd <= 128 */

/* The row of (b, h, i) is bh T + i with bh = b H + h, which is also lse's and
 * D's index ([B,H,T]). */
struct Rows {
    int T, C, H, hd;
    __device__ size_t qkv_at(int bh, int i) const /* q of head h at position i */
    {
        return ((size_t)(bh / H) * T + i) * 3 * (size_t)C + (size_t)(bh % H) * hd;
    }
    __device__ size_t out_at(int bh, int i) const
    {
        return ((size_t)(bh / H) * T + i) * (size_t)C + (size_t)(bh % H) * hd;
    }
};

template <typename T_>
__device__ __forceinline__ void load_row(float (&x)[kPerLane], const T_ *p, int hd, int lane)
{
#pragma unroll
    for (int e = 0; e < kPerLane; e++) {
        int d = lane + 32 * e;
        x[e] = d < hd ? load(p, d) : 0.0f;
    }
}

template <typename T_>
__device__ __forceinline__ void store_row(T_ *p, const float (&x)[kPerLane], float mul, int hd, int lane)
{
#pragma unroll
    for (int e = 0; e < kPerLane; e++) {
        int d = lane + 32 * e;
        if (d < hd)
            store(p, d, x[e] * mul);
    }
}

__device__ __forceinline__ float dot(const float (&a)[kPerLane], const float (&b)[kPerLane])
{
    float s = 0.0f;
#pragma unroll
    for (int e = 0; e < kPerLane; e++)
        s += a[e] * b[e];
    return warp_sum(s);
}

template <typename T_>
__global__ void __launch_bounds__(32 * kSimpleWarps)
    fwd_simple(T_ *out, float *lse, const T_ *qkv, Rows R, size_t nrows, float scale)
{
    size_t row = (size_t)blockIdx.x * kSimpleWarps + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= nrows)
        return; /* the whole warp: no block-wide barrier below */
    int bh = (int)(row / R.T), i = (int)(row % R.T), C = R.C;
    const T_ *base = qkv + R.qkv_at(bh, 0);
    size_t ld = 3 * (size_t)C;
    float q[kPerLane], kv[kPerLane], acc[kPerLane] = {0.0f, 0.0f, 0.0f, 0.0f};
    load_row(q, base + (size_t)i * ld, R.hd, lane);
    float m = -INFINITY, l = 0.0f;
    for (int j = 0; j <= i; j++) {
        load_row(kv, base + (size_t)j * ld + C, R.hd, lane);
        float s = dot(q, kv) * scale;
        float mn = fmaxf(m, s), corr = expf(m - mn), p = expf(s - mn); /* exp(-inf) = 0 at j = 0 */
        load_row(kv, base + (size_t)j * ld + 2 * C, R.hd, lane);
#pragma unroll
        for (int e = 0; e < kPerLane; e++)
            acc[e] = acc[e] * corr + p * kv[e];
        l = l * corr + p;
        m = mn;
    }
    store_row(out + R.out_at(bh, i), acc, 1.0f / l, R.hd, lane);
    if (lse && lane == 0)
        lse[row] = m + logf(l);
}

/* D[row] = do . o (any path; o as the forward stored it). */
template <typename T_>
__global__ void __launch_bounds__(32 * kSimpleWarps)
    bwd_dsum(float *D, const T_ *dout, const T_ *out, Rows R, size_t nrows)
{
    size_t row = (size_t)blockIdx.x * kSimpleWarps + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= nrows)
        return;
    size_t at = R.out_at((int)(row / R.T), (int)(row % R.T));
    float a[kPerLane], b[kPerLane];
    load_row(a, dout + at, R.hd, lane);
    load_row(b, out + at, R.hd, lane);
    float s = dot(a, b);
    if (lane == 0)
        D[row] = s;
}

/* D for the fast path (bf16, 64-wide heads, 16-byte aligned rows): 8 lanes a
 * row, 8 columns a lane, so each thread has two 8-byte loads of dO and two of
 * o in flight.  A warp a row (bwd_dsum) had one 2-byte load of each in flight
 * a lane: 90 us a layer at B=32 for 100 MB, 1.1 TB/s (CUPTI on the H200). */
template <typename T_>
__global__ void __launch_bounds__(256) bwd_dsum64(float *D, const T_ *dout, const T_ *out, Rows R, size_t nrows)
{
    const size_t row = ((size_t)blockIdx.x * 256 + threadIdx.x) / 8;
    const int part = threadIdx.x % 8;
    const bool ok = row < nrows; /* no early return: the whole warp takes part in the shuffles */
    float s = 0.0f;
    if (ok) {
        const size_t at = R.out_at((int)(row / R.T), (int)(row % R.T)) + 8 * (size_t)part;
        const float4 a0 = load4(dout + at, 0), a1 = load4(dout + at, 1), b0 = load4(out + at, 0),
                     b1 = load4(out + at, 1);
        s = ((a0.x * b0.x + a0.y * b0.y) + (a0.z * b0.z + a0.w * b0.w)) +
            ((a1.x * b1.x + a1.y * b1.y) + (a1.z * b1.z + a1.w * b1.w));
    }
    s += __shfl_xor_sync(0xffffffffu, s, 4);
    s += __shfl_xor_sync(0xffffffffu, s, 2);
    s += __shfl_xor_sync(0xffffffffu, s, 1);
    if (ok && part == 0)
        D[row] = s;
}

/* dq_i = c sum_{j <= i} dS_ij k_j: one warp per query row. */
template <typename T_>
__global__ void __launch_bounds__(32 * kSimpleWarps)
    bwd_dq_simple(T_ *dqkv, const T_ *qkv, const T_ *dout, const float *lse, const float *D, Rows R,
                  size_t nrows, float scale)
{
    size_t row = (size_t)blockIdx.x * kSimpleWarps + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= nrows)
        return;
    int bh = (int)(row / R.T), i = (int)(row % R.T), C = R.C;
    const T_ *base = qkv + R.qkv_at(bh, 0);
    size_t ld = 3 * (size_t)C;
    float q[kPerLane], d_o[kPerLane], kv[kPerLane], dq[kPerLane] = {0.0f, 0.0f, 0.0f, 0.0f};
    load_row(q, base + (size_t)i * ld, R.hd, lane);
    load_row(d_o, dout + R.out_at(bh, i), R.hd, lane);
    float lse_i = lse[row], D_i = D[row];
    for (int j = 0; j <= i; j++) {
        load_row(kv, base + (size_t)j * ld + 2 * C, R.hd, lane);
        float dp = dot(d_o, kv);
        load_row(kv, base + (size_t)j * ld + C, R.hd, lane);
        float p = expf(dot(q, kv) * scale - lse_i), ds = p * (dp - D_i);
#pragma unroll
        for (int e = 0; e < kPerLane; e++)
            dq[e] += ds * kv[e];
    }
    store_row(dqkv + R.qkv_at(bh, i), dq, scale, R.hd, lane);
}

/* dk_j = c sum_{i >= j} dS_ij q_i and dv_j = sum_{i >= j} P_ij do_i: one warp per key row. */
template <typename T_>
__global__ void __launch_bounds__(32 * kSimpleWarps)
    bwd_dkdv_simple(T_ *dqkv, const T_ *qkv, const T_ *dout, const float *lse, const float *D, Rows R,
                    size_t nrows, float scale)
{
    size_t row = (size_t)blockIdx.x * kSimpleWarps + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= nrows)
        return;
    int bh = (int)(row / R.T), j = (int)(row % R.T), C = R.C;
    const T_ *base = qkv + R.qkv_at(bh, 0);
    const float *lse_bh = lse + (size_t)bh * R.T, *D_bh = D + (size_t)bh * R.T;
    size_t ld = 3 * (size_t)C;
    float kr[kPerLane], vr[kPerLane], x[kPerLane];
    float dk[kPerLane] = {0.0f, 0.0f, 0.0f, 0.0f}, dv[kPerLane] = {0.0f, 0.0f, 0.0f, 0.0f};
    load_row(kr, base + (size_t)j * ld + C, R.hd, lane);
    load_row(vr, base + (size_t)j * ld + 2 * C, R.hd, lane);
    for (int i = j; i < R.T; i++) {
        load_row(x, base + (size_t)i * ld, R.hd, lane); /* q_i */
        float p = expf(dot(x, kr) * scale - lse_bh[i]);
        float ds_q[kPerLane];
#pragma unroll
        for (int e = 0; e < kPerLane; e++)
            ds_q[e] = x[e];
        load_row(x, dout + R.out_at(bh, i), R.hd, lane); /* do_i */
        float ds = p * (dot(x, vr) - D_bh[i]);
#pragma unroll
        for (int e = 0; e < kPerLane; e++) {
            dv[e] += p * x[e];
            dk[e] += ds * ds_q[e];
        }
    }
    T_ *dst = dqkv + R.qkv_at(bh, j);
    store_row(dst + C, dk, scale, R.hd, lane);
    store_row(dst + 2 * C, dv, 1.0f, R.hd, lane);
}

/* ---- dispatch ---- */

/* Which backward and forward run: the environment's choice unless a test
 * forced one (dt_cuda__attention_force_path). */
int forced_path = DT_CUDA__ATTN_ENV;

/* DTRAIN_CUDA_ATTN's values; unset or empty is auto. */
const struct {
    const char *name;
    int path;
} kPathNames[] = {{"fast", DT_CUDA__ATTN_FAST},   {"simple", DT_CUDA__ATTN_SIMPLE},
                  {"atomic", DT_CUDA__ATTN_ATOMIC}, {"wide", DT_CUDA__ATTN_WIDE},
                  {"cudnn", DT_CUDA__ATTN_CUDNN},   {"cudnn-atomic", DT_CUDA__ATTN_CUDNN_ATOMIC},
                  {"auto", DT_CUDA__ATTN_AUTO}};

/* The path in force, or -1 (error set) for a DTRAIN_CUDA_ATTN that names none. */
int attn_path()
{
    static int env = -1; /* DTRAIN_CUDA_ATTN, read once */
    static const char *bad;
    if (forced_path != DT_CUDA__ATTN_ENV)
        return forced_path;
    if (env < 0 && !bad) {
        const char *e = getenv("DTRAIN_CUDA_ATTN");
        if (!e || !*e)
            env = DT_CUDA__ATTN_AUTO;
        for (const auto &p : kPathNames)
            if (env < 0 && strcmp(e, p.name) == 0)
                env = p.path;
        if (env < 0)
            bad = e;
    }
    if (bad)
        return dt_error_set(DT_EINVAL,
                            "DTRAIN_CUDA_ATTN=%s names no path of the attention kernels (simple, fast, atomic, "
                            "wide, cudnn, cudnn-atomic or auto)",
                            bad);
    return env;
}

int check_shape(const char *what, enum dt_cuda_dtype t, int B, int T, int C, int H)
{
    if (B < 1 || T < 1 || C < 1 || H < 1 || C % H != 0 || C / H > 128)
        return dt_error_set(
            DT_EINVAL,
            "%s: B=%d T=%d C=%d H=%d is not a shape this kernel runs (it needs positive sizes, "
            "C a multiple of H and a head size C/H of at most 128)",
            what, B, T, C, H);
    if (t != DT_CUDA_F32 && t != DT_CUDA_BF16 && t != DT_CUDA_F16)
        return dt_error_set(DT_EINVAL, "%s: unknown element type %d", what, (int)t);
    return attn_path() < 0 ? DT_EINVAL : 0;
}

bool aligned16(const void *p)
{
    return ((uintptr_t)p & 15u) == 0;
}

bool aligned16(const void *a, const void *b, const void *c, const void *d)
{
    return aligned16(a) && aligned16(b) && (!c || aligned16(c)) && (!d || aligned16(d));
}

/* auto: cuDNN until it fails once (not loadable, or no plan for a shape),
 * then the own kernels for the rest of the process, said once on stderr. */
bool cudnn_failed;

bool cudnn_path(int path)
{
    return path == DT_CUDA__ATTN_CUDNN || path == DT_CUDA__ATTN_CUDNN_ATOMIC ||
           (path == DT_CUDA__ATTN_AUTO && !cudnn_failed);
}

/* rc of a cuDNN call under auto: 0 when it ran, 1 when the own kernels should
 * run instead; any other path keeps the error. */
int cudnn_or_own(int rc)
{
    if (rc == 0 || attn_path() != DT_CUDA__ATTN_AUTO)
        return rc;
    cudnn_failed = true;
    dt_log_warn("attention: dtrain's own tensor-core kernels run instead of cuDNN's fused attention (DTRAIN_CUDA_ATTN "
                "unset or auto; fast picks them without this line): %s",
                dt_error_last());
    return 1;
}

/* The tensor-core path: bf16, hd 64, 16-byte rows (C a multiple of 8 and
 * aligned buffers), and a grid that fits. */
bool fast(enum dt_cuda_dtype t, int B, int C, int H, const void *a, const void *b, const void *c = nullptr,
          const void *d = nullptr)
{
    int path = attn_path();
    return path > DT_CUDA__ATTN_SIMPLE && path != DT_CUDA__ATTN_CUDNN && path != DT_CUDA__ATTN_CUDNN_ATOMIC &&
           t == DT_CUDA_BF16 && C / H == 64 && C % 8 == 0 &&
           (size_t)B * H < (1u << 31) && aligned16(a, b, c, d);
}

/* cuDNN's fused attention when asked for: 16-bit types, head sizes a
 * multiple of 8 (its 16-byte vector loads), aligned buffers, and more than
 * one position (cuDNN 9 builds no backward for s_q = s_kv = 1: "not
 * supported", seen on the H100; the forward goes with it, so both halves of
 * a shape run one path).  Other shapes and fp32 take the general path, as
 * under `fast`. */
bool cudnn(enum dt_cuda_dtype t, int T, int C, int H, const void *a, const void *b, const void *c = nullptr,
           const void *d = nullptr)
{
    return cudnn_path(attn_path()) && (t == DT_CUDA_BF16 || t == DT_CUDA_F16) && T > 1 && (C / H) % 8 == 0 &&
           aligned16(a, b, c, d);
}

/* cuDNN's backward with its atomic dq: asked for, or under auto (above). */
bool cudnn_atomic_dq()
{
    const int path = attn_path();
    return path == DT_CUDA__ATTN_CUDNN_ATOMIC || path == DT_CUDA__ATTN_AUTO;
}

unsigned simple_blocks(size_t rows)
{
    return (unsigned)((rows + kSimpleWarps - 1) / kSimpleWarps);
}

template <typename T_>
void launch_fwd_simple(cudaStream_t st, void *out, float *lse, const void *qkv, Rows R, size_t rows,
                       float scale)
{
    fwd_simple<T_>
        <<<simple_blocks(rows), 32 * kSimpleWarps, 0, st>>>((T_ *)out, lse, (const T_ *)qkv, R, rows, scale);
}

template <typename T_>
void launch_bwd_simple(cudaStream_t st, bool dsum_only, void *dqkv, const void *dout, const void *qkv,
                       const void *out, const float *lse, float *D, Rows R, size_t rows, float scale)
{
    unsigned nb = simple_blocks(rows), nth = 32 * kSimpleWarps;
    if (dsum_only) { /* the fast path's D: its shapes are bwd_dsum64's */
        bwd_dsum64<T_><<<(unsigned)((rows * 8 + 255) / 256), 256, 0, st>>>(D, (const T_ *)dout, (const T_ *)out,
                                                                          R, rows);
        return;
    }
    bwd_dsum<T_><<<nb, nth, 0, st>>>(D, (const T_ *)dout, (const T_ *)out, R, rows);
    bwd_dkdv_simple<T_>
        <<<nb, nth, 0, st>>>((T_ *)dqkv, (const T_ *)qkv, (const T_ *)dout, lse, D, R, rows, scale);
    bwd_dq_simple<T_>
        <<<nb, nth, 0, st>>>((T_ *)dqkv, (const T_ *)qkv, (const T_ *)dout, lse, D, R, rows, scale);
}

} // namespace

/* The test's way to compare the paths in one process (tests/gpu/test_cuda_attention.c). */
extern "C" int dt_cuda__attention_force_path(int path)
{
    int was = forced_path;
    forced_path = path;
    return was;
}

extern "C" size_t dt_cuda_attention_scratch_bytes(int B, int T, int H)
{
    size_t n = (size_t)(B > 0 ? B : 0) * (size_t)(T > 0 ? T : 0) * (size_t)(H > 0 ? H : 0);
    /* D [B,H,T], then the atomic path's dq [B,H,T,64] (its start 16-byte aligned) */
    return (n ? n : 1) * sizeof(float) + 16 + n * 64 * sizeof(float);
}

extern "C" int dt_cuda_attention_forward(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, void *out, float *lse,
                                         const void *qkv, int B, int T, int C, int H)
{
    int rc = check_shape("attention forward", t, B, T, C, H);
    if (rc < 0)
        return rc;
    cudaStream_t st = dt_cuda_stream(k);
    const int hd = C / H;
    const float scale = 1.0f / sqrtf((float)hd);
    if (cudnn(t, T, C, H, out, qkv) &&
        (rc = cudnn_or_own(dt_cuda__attention_cudnn_forward(k, t, out, lse, qkv, B, T, C, H, scale))) <= 0)
        return rc;
    if (fast(t, B, C, H, out, qkv))
        return dt_cuda__attention_mma_forward(st, out, lse, qkv, B, T, C, H, scale);
    Rows R = {T, C, H, hd};
    size_t rows = (size_t)B * H * T;
    if (t == DT_CUDA_BF16)
        launch_fwd_simple<__nv_bfloat16>(st, out, lse, qkv, R, rows, scale);
    else if (t == DT_CUDA_F16)
        launch_fwd_simple<__half>(st, out, lse, qkv, R, rows, scale);
    else
        launch_fwd_simple<float>(st, out, lse, qkv, R, rows, scale);
    return launched("attention forward kernel launch");
}

extern "C" int dt_cuda_attention_backward(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, void *dqkv,
                                          const void *dout, const void *qkv, const void *out,
                                          const float *lse, int B, int T, int C, int H, void *scratch)
{
    int rc = check_shape("attention backward", t, B, T, C, H);
    if (rc < 0)
        return rc;
    if (!scratch || !lse)
        return dt_error_set(DT_EINVAL, "attention backward: the %s is missing (the caller owns it)",
                            !lse ? "forward's log-sum-exp (lse)" : "scratch buffer");
    cudaStream_t st = dt_cuda_stream(k);
    const int hd = C / H;
    const float scale = 1.0f / sqrtf((float)hd);
    if (cudnn(t, T, C, H, dqkv, dout, qkv, out) &&
        (rc = cudnn_or_own(dt_cuda__attention_cudnn_backward(
             k, t, cudnn_atomic_dq(), dqkv, dout, qkv, out, lse, B, T, C, H, scale, scratch,
             dt_cuda_attention_scratch_bytes(B, T, H)))) <= 0)
        return rc;
    float *D = (float *)scratch;
    Rows R = {T, C, H, hd};
    size_t rows = (size_t)B * H * T;
    bool use_fast = fast(t, B, C, H, dqkv, dout, qkv, out);
    if (t == DT_CUDA_BF16)
        launch_bwd_simple<__nv_bfloat16>(st, use_fast, dqkv, dout, qkv, out, lse, D, R, rows, scale);
    else if (t == DT_CUDA_F16)
        launch_bwd_simple<__half>(st, false, dqkv, dout, qkv, out, lse, D, R, rows, scale);
    else
        launch_bwd_simple<float>(st, false, dqkv, dout, qkv, out, lse, D, R, rows, scale);
    if (!use_fast)
        return launched("attention backward kernel launch");
    /* The atomic path's fp32 dq after D, 16-byte aligned (dt_cuda_attention_scratch_bytes). */
    float *dq32 = (float *)(((uintptr_t)(D + rows) + 15) & ~(uintptr_t)15);
    const int path = attn_path();
    const int dq_way = path == DT_CUDA__ATTN_WIDE     ? DT_CUDA__DQ_ATOMIC_WIDE
                       : path == DT_CUDA__ATTN_ATOMIC ? DT_CUDA__DQ_ATOMIC
                                                      : DT_CUDA__DQ_TILES;
    return dt_cuda__attention_mma_backward(st, dq_way, dqkv, dout, qkv, lse, D, dq32, B, T, C, H, scale);
}
