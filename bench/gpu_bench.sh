#!/usr/bin/env bash
# gpu_bench.sh - the issue-8 step benchmark: dtrain's CUDA kernels and
# PyTorch on the same GPU in the same run, fp32 and bf16, batch 256 and 4096;
# prints every variant and the ratio of PyTorch's whole-step CUDA graph to
# dtrain's graph (> 1: dtrain is faster).
#
#   bench/gpu_bench.sh --build     compile bench/gpu_mlp_step.c here (needs build/libdtrain.a, CUDA=1)
#   bench/gpu_bench.sh --run       run on the GPU machine (python3 with torch for the peer)
# Not a test: tests/gpu/run.sh checks the kernels.
set -uo pipefail
cd "$(dirname "$0")/.."
: "${BUILD:=build}"
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$NVCC")")}
: "${CC:=cc}"
bin=$BUILD/bench/gpu_mlp_step
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
case ${1:---run} in
  --build)
    mkdir -p "$BUILD/bench"
    $CC -std=c11 -D_GNU_SOURCE -I. -Wall -Wextra -Werror -O2 -g -DDT_HAVE_CUDA -I"$CUDA_HOME/include" \
      -o "$bin" bench/gpu_mlp_step.c "$BUILD/libdtrain.a" -L"$CUDA_HOME/lib64" -Wl,-rpath,"$CUDA_HOME/lib64" \
      -lcublasLt -lcudart -lstdc++ -lm -lpthread ;;
  --run)
    for dt in fp32 bf16; do
      for b in 256 4096; do
        d=$("$bin" --batch "$b" --dtype "$dt" --profile 1 2>&1); printf '%s\n' "$d"
        "$bin" --batch "$b" --dtype "$dt" --autotune 0 2>&1 | grep -v 'per step'
        t=$(python3 bench/gpu_mlp_step_torch.py --batch "$b" --dtype "$dt" 2>&1); printf '%s\n' "$t"
        dg=$(printf '%s\n' "$d" | sed -n 's/.* graph: \([0-9.]*\) us.*/\1/p')
        tg=$(printf '%s\n' "$t" | sed -n 's/.* graph: \([0-9.]*\) us.*/\1/p')
        te=$(printf '%s\n' "$t" | sed -n 's/.* eager: \([0-9.]*\) us.*/\1/p')
        [ -n "$dg" ] && [ -n "$tg" ] && [ -n "$te" ] &&
          awk -v d="$dg" -v g="$tg" -v e="$te" -v dt="$dt" -v b="$b" \
            'BEGIN { printf "ratio %s B=%s: torch graph / dtrain graph = %.2fx, torch eager / dtrain graph = %.1fx\n", dt, b, g / d, e / d }'
      done
    done ;;
  *) echo "usage: bench/gpu_bench.sh --build|--run"; exit 2 ;;
esac
