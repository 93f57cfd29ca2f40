#!/usr/bin/env bash
# gpt2_cpu.sh - the bundled trainer's GPT-2 against PyTorch CPU, same step, same run.
#
# A whole training step (forward, backward, gradient-norm clipping at 1.0,
# AdamW with nanoGPT's decay groups) of a small GPT-2: 6 layers, 384 wide, 6
# heads, T=256, vocabulary 50257 (dtrain pads it to 50304 inside the model, as
# llm.c; PyTorch gets it unpadded, as Hugging Face's model has it), batch 8,
# one fixed random batch.  dtrain's side is bench/gpt2_cpu_step.c, which drives
# the model and AdamW directly (not `dtrain launch`: the loop around them is
# the MLP bench's business); PyTorch's is bench/gpt2_cpu_torch.py (SDPA flash
# attention, fused AdamW).  Same threads for both.  Each side runs REPS times,
# interleaved, and the best is kept (other load only ever slows a run).
# Prints tokens/s of each and the ratio dtrain / PyTorch (target >= 1.2).
#
#   bench/gpt2_cpu.sh
#   THREADS=nproc  BATCH=8  SEQ=256  STEPS=10 (timed)  WARMUP=2  REPS=2  RECOMPUTE=none
#   BUILD=build (libdtrain.a, made by `make`)  PYTHON=.venv/bin/python3 or python3 (with torch)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
THREADS=${THREADS:-$(nproc)}
BATCH=${BATCH:-8}
SEQ=${SEQ:-256}
STEPS=${STEPS:-10}
WARMUP=${WARMUP:-2}
REPS=${REPS:-2}
RECOMPUTE=${RECOMPUTE:-none}
if [ -z "${PYTHON:-}" ]; then
  PYTHON=python3
  [ -x .venv/bin/python3 ] && PYTHON=.venv/bin/python3
fi
: "${CC:=cc}"
[ -f "$BUILD/libdtrain.a" ] || { echo "gpt2_cpu: $BUILD/libdtrain.a is not built (run make)" >&2; exit 1; }
"$PYTHON" -c 'import torch' 2>/dev/null || { echo "gpt2_cpu: $PYTHON cannot import torch; set PYTHON=" >&2; exit 1; }

# The driver links what libdtrain.a was built with: CUDA and MPI objects need their libraries.
libs="-lyaml -luv -ljansson -lopenblas -lz"
if ar t "$BUILD/libdtrain.a" | grep -q '^engine_cuda\.o$'; then
  nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  cuda=$(dirname "$(dirname "$nvcc")")
  libs="$libs -L$cuda/lib64 -Wl,-rpath,$cuda/lib64 -lnccl -lcudart -lstdc++"
fi
if ar t "$BUILD/libdtrain.a" | grep -q '^mpi_backend\.o$'; then
  libs="$libs $(mpicc --showme:link)"
fi
bin=$BUILD/bench/gpt2_cpu_step
mkdir -p "$BUILD/bench"
# shellcheck disable=SC2086
$CC -std=c11 -D_GNU_SOURCE -I. -Wall -Wextra -Werror -O2 -g -o "$bin" bench/gpt2_cpu_step.c "$BUILD/libdtrain.a" \
  $libs -lm -lpthread -ldl -lrt

args=(--batch "$BATCH" --seq "$SEQ" --threads "$THREADS" --steps "$STEPS" --warmup "$WARMUP")
echo "gpt2_cpu: L=6 C=384 H=6 V=50257 T=$SEQ B=$BATCH, $THREADS threads, $STEPS steps after $WARMUP, best of $REPS"
best_d=0 best_t=0
for _ in $(seq "$REPS"); do
  out=$("$bin" "${args[@]}" --recompute "$RECOMPUTE")
  echo "$out"
  d=$(awk '/tokens\/s/ {print $3}' <<<"$out")
  out=$(OMP_NUM_THREADS=$THREADS "$PYTHON" bench/gpt2_cpu_torch.py "${args[@]}")
  echo "$out"
  t=$(awk '/tokens\/s/ {print $3}' <<<"$out")
  best_d=$(awk -v a="$best_d" -v b="$d" 'BEGIN { print (b > a ? b : a) }')
  best_t=$(awk -v a="$best_t" -v b="$t" 'BEGIN { print (b > a ? b : a) }')
done
awk -v d="$best_d" -v t="$best_t" 'BEGIN {
  printf "dtrain %.0f tokens/s, PyTorch %.0f tokens/s, dtrain/PyTorch %.2fx (target >= 1.2x)\n", d, t, d / t }'
