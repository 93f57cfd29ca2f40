#!/usr/bin/env bash
# test_gpu_build.sh - the GPU tests (tests/gpu/test_*.c: the CUDA kernels, the
# models' GPU halves and NCCL against their CPU references) still compile and
# link against this build, so a change that breaks them fails `make test` on a
# machine without a GPU instead of surprising the next run on one.  Running
# them needs a GPU: `make test-gpu` there.
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
