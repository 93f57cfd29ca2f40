#!/usr/bin/env bash
# run.sh - builds and runs the GPU tests (tests/gpu/test_*.c); ends with one
# "N passed, N failed, N skipped" line and exits non-zero on any failure.
#
#   tests/gpu/run.sh            build (needs build/libdtrain*.a made with CUDA=1), then run
#   tests/gpu/run.sh --build    build only (CI without a GPU: the tests must compile)
#   tests/gpu/run.sh --run      run what is already built (the GPU machine, no compiler needed)
#
# The Makefile's test-gpu target passes BUILD, CC, CFLAGS and LIBS so the tests
# link exactly like bin/dtrain (STATIC_DEPS=1 included); the defaults below
# serve a hand run.  A test without a CUDA device prints "ok - # SKIP", counted as skipped.
# tests/gpu/test_*.sh (end to end through `dtrain launch`) run after the
# programs; they read DTRAIN (default bin/dtrain) and DTRAIN_FMNIST.
# Not for CPU tests: scripts/run-tests.sh runs those.
set -uo pipefail
cd "$(dirname "$0")/../.."

mode=${1:-all}
: "${BUILD:=build}"
: "${CC:=cc}"
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$NVCC")")}
: "${CFLAGS:=-std=c11 -D_GNU_SOURCE -I. -Wall -Wextra -Werror -O2 -g -pthread -DDT_HAVE_CUDA -I$CUDA_HOME/include}"
: "${LIBS:=-lyaml -luv -ljansson -lopenblas -lz -L$CUDA_HOME/lib64 -Wl,-rpath,$CUDA_HOME/lib64 -lcublasLt -lcublas -lnccl -lcudart -lm -lpthread -ldl -lrt}"
out=$BUILD/tests/gpu
# NVLink multicast stays off on the shared GPU hosts (see docs/gpu.md).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# cuDNN for test_cuda_attention's cudnn path: PyTorch's copy where no other is installed.
. scripts/cudnn-env.sh
# Fashion-MNIST for test_cuda_trainer: make bundle's copy where the machine has none.
if [ -z "${DTRAIN_FMNIST:-}" ] && [ ! -d /usr/share/datasets/fashion-mnist ] && [ -d build/fashion-mnist ]; then
  export DTRAIN_FMNIST=$PWD/build/fashion-mnist
fi

build() {
  [ -f "$BUILD/libdtrain.a" ] || { echo "run.sh: $BUILD/libdtrain.a is missing: run make (with CUDA=1) first"; return 1; }
  mkdir -p "$out"
  local src name
  for src in tests/gpu/test_*.c; do
    name=$(basename "$src" .c)
    # shellcheck disable=SC2086  # CFLAGS and LIBS are word lists
    $CC $CFLAGS -o "$out/$name" "$src" "$BUILD/libdtrain-app.a" "$BUILD/libdtrain.a" $LIBS -lstdc++ || {
      echo "run.sh: building $name failed"; return 1; }
  done
}

run_all() {
  local passed=0 failed=0 skipped=0 bin text p f rc
  for bin in "$out"/test_* tests/gpu/test_*.sh; do
    [ -x "$bin" ] || continue
    echo "# $(basename "$bin")"
    text=$(timeout 600 "$bin" 2>&1); rc=$?
    printf '%s\n' "$text"
    p=$(printf '%s\n' "$text" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\1/p' | tail -n1)
    f=$(printf '%s\n' "$text" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\2/p' | tail -n1)
    p=${p:-0}; f=${f:-0}
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; echo "run.sh: $(basename "$bin") exited with status $rc"; fi
    passed=$((passed + p)); failed=$((failed + f))
    skipped=$((skipped + $(printf '%s\n' "$text" | grep -ci '^ok - # skip')))
  done
  echo "$passed passed, $failed failed, $skipped skipped"
  [ "$failed" -eq 0 ]
}

case $mode in
  --build) build ;;
  --run) run_all ;;
  all) build && run_all ;;
  *) echo "usage: tests/gpu/run.sh [--build|--run]"; exit 2 ;;
esac
