#!/usr/bin/env bash
# test_gpu_build.sh - the GPU tests (tests/gpu/test_*.c: the CUDA kernels, the
# models' GPU halves and NCCL against their CPU references) still compile and
# link against this build, so a change that breaks them fails `make test` on a
# machine without a GPU instead of surprising the next run on one.  Running
# them needs a GPU: `make test-gpu` there; test_cudnn_graph, which checks cuDNN
# takes the attention graphs, needs none and runs here.
# run-tests: uses make
. "$(dirname "$0")/lib.sh"

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
: "${BUILD:=$ROOT/build}"
if [ ! -f "$BUILD/libdtrain.a" ]; then
  not_ok "the GPU tests build: $BUILD/libdtrain.a is missing (run make first)"
  exit 0
fi
if ! nm -A "$BUILD/libdtrain.a" 2>/dev/null | grep -q ' T dt_cuda_ctx_create$'; then
  not_ok "the GPU tests build: $BUILD/libdtrain.a has no CUDA code (nvcc was not found when it was built:" \
    "scripts/install-deps.sh installs the CUDA toolkit)"
  exit 0
fi
expect_status 0 "the GPU tests compile and link (make test-gpu-build)" \
  make -s --no-print-directory -C "$ROOT" BUILD="$BUILD" BINDIR="$(dirname "$DTRAIN")" test-gpu-build
n=$(ls "$BUILD"/tests/gpu/test_* 2>/dev/null | wc -l)
check "the GPU test programs are there ($n)" test "$n" -ge "$(ls "$ROOT"/tests/gpu/test_*.c | wc -l)"
# cuDNN's attention graphs need no GPU to be checked: the installed cuDNN takes them (test_cudnn_graph.c).
PYTHON=${PYTHON:-$ROOT/.venv/bin/python3}
. "$ROOT/scripts/cudnn-env.sh"
out=$("$BUILD/tests/gpu/test_cudnn_graph" 2>&1)
n_ok=$(printf '%s\n' "$out" | grep -c '^ok - ')
check "cuDNN takes dtrain's attention graphs without a GPU (test_cudnn_graph: $(printf '%s\n' "$out" | tail -n1))" \
  test "$(printf '%s\n' "$out" | tail -n1)" = "$n_ok passed, 0 failed" -a "$n_ok" -ge 7
printf '%s\n' "$out" | grep '^not ok' | sed 's/^/# /'
out=$(DTRAIN_CUDNN_LIB=/nonexistent/libcudnn.so.9 "$BUILD/tests/gpu/test_cudnn_graph" --unloadable 2>&1)
check "a cuDNN that does not load is a sentence ($(printf '%s\n' "$out" | head -n1 | cut -c1-160))" \
  test "$(printf '%s\n' "$out" | tail -n1)" = "1 passed, 0 failed"
