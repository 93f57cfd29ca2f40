/* test_cudnn_graph.c - cuDNN's fused attention as dtrain describes it
 * (worker/cuda/attention_cudnn.cpp) against the cuDNN installed here, with no
 * GPU: libcudnn.so.9 loads through the frontend's dynamic loading and takes
 * the forward and backward graphs of GPT-2's shapes for Hopper and Ampere
 * (the checks the frontend makes before building a plan: layouts, strides,
 * causal mask, statistics, deterministic backward), and refuses a head size
 * it has no kernel for with a sentence; with --unloadable (DTRAIN_CUDNN_LIB
 * naming no library), that a missing cuDNN is a sentence too.  Runs in CI
 * (test_gpu_build.sh) and on the GPU machine; the numbers come from
 * test_cuda_attention there.
 * Not for plans or execution, which need the device.
 */
#include "base/error.h"
#include "tests/gpu/gpu_test.h"
#include "worker/cuda/cuda_internal.h"

/* With DTRAIN_CUDNN_LIB naming no library: the sentence that says so and how to fix it. */
static int expect_unloadable(void)
{
    int rc = dt_cuda__attention_cudnn_validate(90, DT_CUDA_BF16, 1, 64, 768, 12);
    const char *why = rc ? dt_error_last() : "";
    gt_result(rc == DT_EUNSUPPORTED && strstr(why, "cannot load") && strstr(why, getenv("DTRAIN_CUDNN_LIB")) &&
                  strstr(why, "LD_LIBRARY_PATH"),
              "a cuDNN that does not load is a sentence naming it (%s)", rc ? why : "it loaded");
    return gt_finish();
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--unloadable") == 0)
        return expect_unloadable();
    static const struct {
        int sm, B, T, C, H;
        enum dt_cuda_dtype t;
    } ok[] = {
        {90, 32, 1024, 768, 12, DT_CUDA_BF16},  /* GPT-2 124M at B=32 on the H200 */
        {90, 16, 1024, 768, 12, DT_CUDA_BF16},  /* B=16 */
        {90, 8, 512, 768, 12, DT_CUDA_BF16},    /* the loss-curve test's */
        {90, 4, 1024, 1024, 16, DT_CUDA_F16},   /* 350M's heads, fp16 */
        {90, 2, 100, 256, 2, DT_CUDA_BF16},     /* hd 128, T no tile multiple */
        {80, 32, 1024, 768, 12, DT_CUDA_BF16},  /* A100 */
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        int rc = dt_cuda__attention_cudnn_validate(ok[i].sm, ok[i].t, ok[i].B, ok[i].T, ok[i].C, ok[i].H);
        gt_result(rc == 0, "cuDNN takes attention of sm %d %s B=%d T=%d C=%d H=%d%s%s", ok[i].sm,
                  ok[i].t == DT_CUDA_F16 ? "fp16" : "bf16", ok[i].B, ok[i].T, ok[i].C, ok[i].H, rc ? ": " : "",
                  rc ? dt_error_last() : "");
    }
    /* hd 12: no cuDNN kernel (attention_cuda.cu sends it to the general path). */
    int rc = dt_cuda__attention_cudnn_validate(90, DT_CUDA_BF16, 2, 32, 48, 4);
    const char *why = rc ? dt_error_last() : "";
    gt_result(rc == DT_EUNSUPPORTED && strstr(why, "cuDNN attention") && strstr(why, "head size 12"),
              "cuDNN refuses head size 12 with a sentence (%s)", rc ? why : "it was taken");
    return gt_finish();
}
