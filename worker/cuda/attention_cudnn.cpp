/* attention_cudnn.cpp - causal self-attention through cuDNN's fused flash
 * attention, the way attention_cuda.cu runs it when DTRAIN_CUDA_ATTN=cudnn
 * (or cudnn-atomic): the cuDNN frontend's sdpa and sdpa_backward graphs,
 * built once per shape and replayed.  Same math, layouts and log-sum-exp as
 * the own kernels (attention_cuda.cu has them): q, k and v are read in place
 * from qkv [B,T,3C] by strides (cuDNN's B,H,T,hd view: strides 3CT, hd, 3C,
 * 1), the output is [B,T,C], and cuDNN's softmax statistics are lse [B,H,T]
 * (max + ln sum exp of the scaled scores, natural log), so either path's
 * backward reads either path's forward.
 *
 * Why: on Hopper cuDNN's attention kernels use the warpgroup MMA and the
 * tensor-memory accelerator, which mma.sync (attention_mma_cuda.cu) cannot.
 * The backward is deterministic (cuDNN's deterministic algorithm, the own
 * kernels' promise) unless cudnn-atomic lets it add dq with atomics.
 *
 * Build and load.  The frontend is header-only C++ (pip: nvidia-cudnn-frontend,
 * scripts/python-deps.txt); without its headers the Makefile leaves
 * DT_HAVE_CUDNN undefined and these functions say so.  libcudnn.so.9 is not
 * linked: the frontend's dynamic loading resolves every cuDNN call through
 * the handle this file dlopens at first use ($DTRAIN_CUDNN_LIB, else
 * libcudnn.so.9 on the loader's path, e.g. PyTorch's nvidia/cudnn/lib), so a
 * binary built with this file still starts where cuDNN is missing.
 *
 * Lifetimes: a context's cuDNN handle, graphs and workspace are made on the
 * first call of each shape, which must not be inside a CUDA graph capture
 * (the engine's warm-up step runs first), and freed with the context
 * (dt_cuda__cudnn_release); the backward runs in the caller's attention
 * scratch instead when it is large enough.  Execution enqueues on the
 * context's stream with no allocation and no host synchronisation, so it
 * captures.
 *
 * Not for the choice of path, other layouts, masks or dropout.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

extern "C" {
#include "base/error.h" /* a C header without C++ guards */
}
#include "worker/cuda/cuda_internal.h"

#ifndef DT_HAVE_CUDNN

extern "C" int dt_cuda__attention_cudnn_forward(struct dt_cuda_ctx *, enum dt_cuda_dtype, void *, float *,
                                                const void *, int, int, int, int, float)
{
    return dt_error_set(DT_EUNSUPPORTED, "attention: DTRAIN_CUDA_ATTN asks for cuDNN, but this dtrain was built "
                                         "without the cuDNN frontend's headers (scripts/install-deps.sh installs "
                                         "them; then rebuild)");
}

extern "C" int dt_cuda__attention_cudnn_backward(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, bool, void *,
                                                 const void *, const void *, const void *, const float *, int, int,
                                                 int, int, float, void *, size_t)
{
    return dt_cuda__attention_cudnn_forward(k, t, nullptr, nullptr, nullptr, 0, 0, 0, 0, 0.0f);
}

extern "C" void dt_cuda__cudnn_release(struct dt_cuda_ctx *) {}

extern "C" int dt_cuda__attention_cudnn_validate(int, enum dt_cuda_dtype t, int, int, int, int)
{
    return dt_cuda__attention_cudnn_forward(nullptr, t, nullptr, nullptr, nullptr, 0, 0, 0, 0, 0.0f);
}

#else

#include <dlfcn.h>

#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <cudnn_frontend.h>

namespace fe = cudnn_frontend;

/* The frontend's dynamic loading resolves cuDNN through this handle (it
 * declares it, the program defines it). */
namespace cudnn_frontend
{
void *cudnn_dlhandle = nullptr;
}

namespace
{

/* ---- loading libcudnn ---- */

std::once_flag load_once;
char load_why[768]; /* why cuDNN could not be loaded; empty when it was */

void load_cudnn()
{
    /* The frontend's own CUDA runtime calls go through a dlopen'd libcudart:
     * name the one this binary links, so it is the same library, not a second
     * major version found on the path. */
    char cudart[32];
    snprintf(cudart, sizeof cudart, "libcudart.so.%d", CUDART_VERSION / 1000);
    setenv("CUDNN_FRONTEND_CUDART_LIB_NAME", cudart, 0);
    const char *path = getenv("DTRAIN_CUDNN_LIB");
    const char *name = path && *path ? path : "libcudnn.so.9";
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(load_why, sizeof load_why,
                 "cannot load %s (%s): install cuDNN 9 (pip: nvidia-cudnn-cu13, which PyTorch brings) and put its "
                 "lib directory on LD_LIBRARY_PATH, or name the library in DTRAIN_CUDNN_LIB",
                 name, dlerror());
        return;
    }
    fe::cudnn_dlhandle = h;
    size_t v = 0;
    try {
        v = fe::detail::get_backend_version();
    } catch (const std::exception &e) {
        snprintf(load_why, sizeof load_why, "%s loaded but answers no version: %s", name, e.what());
        return;
    }
    if (v < 90000)
        snprintf(load_why, sizeof load_why, "%s is cuDNN %zu; fused attention here needs cuDNN 9 or later", name, v);
}

int cudnn_loaded()
{
    std::call_once(load_once, load_cudnn);
    return load_why[0] ? dt_error_set(DT_EUNSUPPORTED, "cuDNN attention: %s", load_why) : 0;
}

/* ---- graphs, one per shape and direction ---- */

/* Tensor ids of the variant pack. */
enum { UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_DO, UID_DQ, UID_DK, UID_DV };

/* (backward, B, T, H, hd, fp16, with lse / atomic dq) */
typedef std::tuple<bool, int, int, int, int, bool, bool> GraphKey;

/* A built graph and the workspace bytes its plan asks for. */
struct Plan {
    std::shared_ptr<fe::graph::Graph> graph;
    size_t workspace = 0;
};

struct CudnnState {
    cudnnHandle_t handle = nullptr;
    std::map<GraphKey, Plan> graphs;
    void *workspace = nullptr;
    size_t workspace_bytes = 0;
    std::vector<void *> retired; /* smaller workspaces, freed with the context */
};

int fe_error(fe::error_object e, const char *what, const GraphKey &key)
{
    return dt_error_set(DT_EUNSUPPORTED, "cuDNN attention %s (B=%d T=%d H=%d head size %d): %s", what,
                        std::get<1>(key), std::get<2>(key), std::get<3>(key), std::get<4>(key),
                        e.get_message().c_str());
}

/* Strides of cuDNN's [B,H,T,hd] view of q, k, v (and dq, dk, dv) in [B,T,3,H,hd]. */
std::vector<int64_t> qkv_stride(int H, int T, int hd)
{
    const int64_t C = (int64_t)H * hd;
    return {3 * C * T, hd, 3 * C, 1};
}

/* lse [B,H,T] as [B,H,T,1]. */
std::vector<int64_t> lse_stride(int H, int T)
{
    return {(int64_t)H * T, T, 1, 1};
}

std::shared_ptr<fe::graph::Tensor_attributes> qkv_view(fe::graph::Graph &g, const char *name, int64_t uid, int B,
                                                       int H, int T, int hd)
{
    return g.tensor(
        fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim({B, H, T, hd}).set_stride(
            qkv_stride(H, T, hd)));
}

/* o and do of [B,T,H,hd] as [B,H,T,hd]. */
std::vector<int64_t> out_stride(int H, int T, int hd)
{
    const int64_t C = (int64_t)H * hd;
    return {C * T, hd, C, 1};
}

std::shared_ptr<fe::graph::Graph> new_graph(bool fp16)
{
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(fp16 ? fe::DataType_t::HALF : fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    return g;
}

void describe_forward(fe::graph::Graph &g, const GraphKey &key, float scale)
{
    const int B = std::get<1>(key), T = std::get<2>(key), H = std::get<3>(key), hd = std::get<4>(key);
    const bool stats = std::get<6>(key);
    auto q = qkv_view(g, "q", UID_Q, B, H, T, hd), k = qkv_view(g, "k", UID_K, B, H, T, hd),
         v = qkv_view(g, "v", UID_V, B, H, T, hd);
    auto opt = fe::graph::SDPA_attributes()
                   .set_name("attention")
                   .set_generate_stats(stats)
                   .set_causal_mask(true)
                   .set_attn_scale(scale);
    auto [o, lse] = g.sdpa(q, k, v, opt);
    o->set_output(true).set_dim({B, H, T, hd}).set_stride(out_stride(H, T, hd)).set_uid(UID_O);
    if (stats)
        lse->set_output(true)
            .set_data_type(fe::DataType_t::FLOAT)
            .set_dim({B, H, T, 1})
            .set_stride(lse_stride(H, T))
            .set_uid(UID_STATS);
}

void describe_backward(fe::graph::Graph &g, const GraphKey &key, float scale)
{
    const int B = std::get<1>(key), T = std::get<2>(key), H = std::get<3>(key), hd = std::get<4>(key);
    const bool atomic = std::get<6>(key);
    auto q = qkv_view(g, "q", UID_Q, B, H, T, hd), k = qkv_view(g, "k", UID_K, B, H, T, hd),
         v = qkv_view(g, "v", UID_V, B, H, T, hd);
    auto o = g.tensor(
        fe::graph::Tensor_attributes().set_name("o").set_uid(UID_O).set_dim({B, H, T, hd}).set_stride(
            out_stride(H, T, hd)));
    auto dout = g.tensor(
        fe::graph::Tensor_attributes().set_name("do").set_uid(UID_DO).set_dim({B, H, T, hd}).set_stride(
            out_stride(H, T, hd)));
    auto lse = g.tensor(fe::graph::Tensor_attributes()
                            .set_name("lse")
                            .set_uid(UID_STATS)
                            .set_dim({B, H, T, 1})
                            .set_stride(lse_stride(H, T))
                            .set_data_type(fe::DataType_t::FLOAT));
    auto opt = fe::graph::SDPA_backward_attributes()
                   .set_name("attention backward")
                   .set_causal_mask(true)
                   .set_attn_scale(scale)
                   .set_deterministic_algorithm(!atomic);
    auto [dq, dk, dv] = g.sdpa_backward(q, k, v, o, dout, lse, opt);
    dq->set_output(true).set_uid(UID_DQ).set_dim({B, H, T, hd}).set_stride(qkv_stride(H, T, hd));
    dk->set_output(true).set_uid(UID_DK).set_dim({B, H, T, hd}).set_stride(qkv_stride(H, T, hd));
    dv->set_output(true).set_uid(UID_DV).set_dim({B, H, T, hd}).set_stride(qkv_stride(H, T, hd));
}

/* The context's cuDNN state, made on first use. */
int state_of(struct dt_cuda_ctx *k, CudnnState **out)
{
    int rc = cudnn_loaded();
    if (rc)
        return rc;
    if (!k->cudnn) {
        auto *s = new CudnnState();
        cudnnStatus_t st = fe::detail::create_handle(&s->handle);
        if (st != CUDNN_STATUS_SUCCESS) {
            delete s;
            return dt_error_set(DT_EUNSUPPORTED, "cuDNN attention: cudnnCreate failed: %s",
                                fe::detail::get_error_string(st));
        }
        k->cudnn = s;
    }
    *out = (CudnnState *)k->cudnn;
    return 0;
}

/* The plan for key, built the first time (heuristics' first plan that
 * builds), with the context's workspace grown to fit it unless the caller's
 * scratch (`have` bytes) does.  Building allocates, so it is refused inside
 * a stream capture. */
int plan_for(struct dt_cuda_ctx *k, CudnnState *s, const GraphKey &key, float scale, size_t have, Plan *out)
{
    auto it = s->graphs.find(key);
    if (it != s->graphs.end()) {
        *out = it->second;
        return 0;
    }
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(k->stream, &cap) == cudaSuccess && cap != cudaStreamCaptureStatusNone)
        return dt_error_set(DT_EINVAL,
                            "cuDNN attention: the shape B=%d T=%d H=%d first appears inside a CUDA graph capture, "
                            "where its plan cannot be built (run one step of it outside the capture first)",
                            std::get<1>(key), std::get<2>(key), std::get<3>(key));
    auto g = new_graph(std::get<5>(key));
    if (std::get<0>(key))
        describe_backward(*g, key, scale);
    else
        describe_forward(*g, key, scale);
    auto build = [&]() -> fe::error_object {
        if (auto e = g->validate(); e.is_bad())
            return e;
        if (auto e = g->build_operation_graph(s->handle); e.is_bad())
            return e;
        if (auto e = g->create_execution_plans({fe::HeurMode_t::A}); e.is_bad())
            return e;
        if (auto e = g->check_support(s->handle); e.is_bad())
            return e;
        return g->build_plans(s->handle, fe::BuildPlanPolicy_t::HEURISTICS_CHOICE);
    };
    if (auto e = build(); e.is_bad())
        return fe_error(e, std::get<0>(key) ? "backward graph" : "forward graph", key);
    int64_t ws = 0;
    if (auto e = g->get_workspace_size(ws); e.is_bad())
        return fe_error(e, "workspace size", key);
    if ((size_t)ws > have && (size_t)ws > s->workspace_bytes) {
        /* A CUDA graph captured with the smaller workspace still replays on
         * it: retire it with the context, not now. */
        void *bigger = nullptr;
        cudaError_t ce = cudaMalloc(&bigger, (size_t)ws);
        if (ce != cudaSuccess)
            return dt_cuda_err(ce, "cudaMalloc (cuDNN attention workspace)");
        if (s->workspace)
            s->retired.push_back(s->workspace);
        s->workspace = bigger;
        s->workspace_bytes = (size_t)ws;
    }
    *out = s->graphs[key] = Plan{g, (size_t)ws};
    return 0;
}

/* scratch: the caller's buffer of scratch_bytes, the workspace when it is
 * large enough (the backward's: the own kernels' D and dq scratch, unused on
 * this path), so the deterministic dq's fp32 accumulator costs no memory. */
int run(struct dt_cuda_ctx *k, const GraphKey &key, float scale, std::unordered_map<int64_t, void *> &pack,
        void *scratch, size_t scratch_bytes)
{
    CudnnState *s = nullptr;
    int rc = state_of(k, &s);
    if (rc)
        return rc;
    if (scratch) { /* cuDNN's workspace alignment is cudaMalloc's, 256 bytes */
        uintptr_t a = ((uintptr_t)scratch + 255) & ~(uintptr_t)255;
        size_t skip = a - (uintptr_t)scratch;
        scratch_bytes = scratch_bytes > skip ? scratch_bytes - skip : 0;
        scratch = (void *)a;
    }
    Plan p;
    if ((rc = plan_for(k, s, key, scale, scratch ? scratch_bytes : 0, &p)))
        return rc;
    cudnnStatus_t st = fe::detail::set_stream(s->handle, k->stream);
    if (st != CUDNN_STATUS_SUCCESS)
        return dt_error_set(DT_EUNSUPPORTED, "cuDNN attention: cudnnSetStream failed: %s",
                            fe::detail::get_error_string(st));
    auto e = p.graph->execute(s->handle, pack, scratch && p.workspace <= scratch_bytes ? scratch : s->workspace);
    return e.is_good() ? 0 : fe_error(e, "execution", key);
}

/* Exceptions (the frontend throws when a symbol is missing) stop here. */
template <typename F> int guarded(F f)
{
    try {
        return f();
    } catch (const std::exception &e) {
        return dt_error_set(DT_EUNSUPPORTED, "cuDNN attention: %s", e.what());
    } catch (...) {
        return dt_error_set(DT_EUNSUPPORTED, "cuDNN attention: an unknown C++ exception from the cuDNN frontend");
    }
}

} // namespace

extern "C" int dt_cuda__attention_cudnn_forward(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, void *out, float *lse,
                                                const void *qkv, int B, int T, int C, int H, float scale)
{
    return guarded([&] {
        const size_t third = (size_t)C * (t == DT_CUDA_F32 ? 4 : 2);
        GraphKey key(false, B, T, H, C / H, t == DT_CUDA_F16, lse != nullptr);
        std::unordered_map<int64_t, void *> pack = {{UID_Q, (void *)qkv},
                                                    {UID_K, (char *)qkv + third},
                                                    {UID_V, (char *)qkv + 2 * third},
                                                    {UID_O, out}};
        if (lse)
            pack[UID_STATS] = lse;
        return run(k, key, scale, pack, nullptr, 0);
    });
}

extern "C" int dt_cuda__attention_cudnn_backward(struct dt_cuda_ctx *k, enum dt_cuda_dtype t, bool atomic,
                                                 void *dqkv, const void *dout, const void *qkv, const void *out,
                                                 const float *lse, int B, int T, int C, int H, float scale,
                                                 void *scratch, size_t scratch_bytes)
{
    return guarded([&] {
        const size_t third = (size_t)C * (t == DT_CUDA_F32 ? 4 : 2);
        GraphKey key(true, B, T, H, C / H, t == DT_CUDA_F16, atomic);
        std::unordered_map<int64_t, void *> pack = {
            {UID_Q, (void *)qkv},         {UID_K, (char *)qkv + third}, {UID_V, (char *)qkv + 2 * third},
            {UID_O, (void *)out},         {UID_DO, (void *)dout},       {UID_STATS, (void *)lse},
            {UID_DQ, dqkv},               {UID_DK, (char *)dqkv + third}, {UID_DV, (char *)dqkv + 2 * third}};
        return run(k, key, scale, pack, scratch, scratch_bytes);
    });
}

extern "C" int dt_cuda__attention_cudnn_validate(int sm, enum dt_cuda_dtype t, int B, int T, int C, int H)
{
    return guarded([&] {
        int rc = cudnn_loaded();
        for (int i = 0; i < 4 && rc == 0; i++) {
            GraphKey key(i >= 2, B, T, H, C / H, t == DT_CUDA_F16, i % 2 == 1);
            auto g = new_graph(t == DT_CUDA_F16);
            g->set_sm_version(sm);
            if (std::get<0>(key))
                describe_backward(*g, key, 1.0f);
            else
                describe_forward(*g, key, 1.0f);
            if (auto e = g->validate(); e.is_bad())
                rc = fe_error(e, std::get<0>(key) ? "backward graph" : "forward graph", key);
        }
        return rc;
    });
}

extern "C" void dt_cuda__cudnn_release(struct dt_cuda_ctx *k)
{
    auto *s = (CudnnState *)k->cudnn;
    if (!s)
        return;
    try {
        s->graphs.clear();
        if (s->handle)
            (void)fe::detail::destroy_handle(s->handle);
    } catch (...) {
    }
    if (s->workspace)
        cudaFree(s->workspace);
    for (void *w : s->retired)
        cudaFree(w);
    delete s;
    k->cudnn = nullptr;
}

#endif
