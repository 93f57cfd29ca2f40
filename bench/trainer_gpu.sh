#!/usr/bin/env bash
# trainer_gpu.sh - issue 8's trainer benchmark: `dtrain worker` with
# trainer.device: cuda against bench/trainer_gpu_torch.py (eager, torch.compile,
# whole-step CUDA graph) training the same MLP (784-1024-1024-10 ReLU, AdamW lr
# 1e-3 wd 0.01, constant lr, no clipping) on Fashion-MNIST on the same GPU in the
# same run; fp32, bf16 and tf32 (fp32 with trainer.tf32 / allow_tf32 on both
# sides), batch 256 and 4096.  dtrain's figure is its steady
# state from metrics.jsonl (the first logged window, with the graph capture and
# cuBLASLt tuning, left out); PyTorch's is timed after 50 warm-up steps.  Both
# print their test accuracy after the run, so a fast wrong trainer shows.
# Prints every variant and the ratios dtrain / torch (> 1: dtrain is faster).
#
#   bench/trainer_gpu.sh            (on a GPU machine; DTRAIN=path/to/dtrain, FMNIST=data dir)
#   VARIANTS=eager,graph  CONFIGS="fp32:256 bf16:4096"
set -uo pipefail
case ${DTRAIN:-} in */*) DTRAIN=$(realpath -m "$DTRAIN") ;; esac # relative to the caller: resolve before the cd
cd "$(dirname "$0")/.."
DTRAIN=${DTRAIN:-$PWD/bin/dtrain}
FMNIST=${FMNIST:-/usr/share/datasets/fashion-mnist}
VARIANTS=${VARIANTS:-eager,compile,graph}
CONFIGS=${CONFIGS:-fp32:256 bf16:256 fp32:4096 bf16:4096 tf32:4096}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ -x "$DTRAIN" ] || { echo "trainer_gpu: $DTRAIN is not built" >&2; exit 1; }
W=$(mktemp -d /tmp/dtrain-gpubench.XXXXXX)
trap 'rm -rf "$W"' EXIT

# job NAME DTYPE BATCH STEPS GRAPH
job() {
  local amp=off tf32=false; [ "$2" = bf16 ] && amp=bf16; [ "$2" = tf32 ] && tf32=true
  cat >"$W/$1.yaml" <<EOF
name: gpubench-$1
trainer:
  model: {type: mlp, hidden: [1024, 1024], activation: relu}
  data: {path: $FMNIST, batch_size: $3, drop_last: true}
  steps: $4
  optimizer: {lr: 1e-3, weight_decay: 0.01, grad_clip: 0}
  scheduler: {type: constant}
  checkpoint: {every_steps: 0, resume: never}
  eval: {every_epochs: 0}
  device: cuda
  amp: {dtype: $amp}
  cuda_graph: $5
  tf32: $tf32
  log_every_steps: $(($4 / 6))
EOF
}

# steady DIR -> "<samples/s> <us/step> <test accuracy>", first window left out
steady() {
  python3 - "$1" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl") if '"loss"' in l]
s = json.load(open(sys.argv[1] + "/trainer_summary.json"))
a, b = rows[0], rows[-1]
dt, steps = b["time_s"] - a["time_s"], b["step"] - a["step"]
print(f"{steps * s['batch_size_per_rank'] / dt:.0f} {dt / steps * 1e6:.1f} {s['test_accuracy']:.4f}")
PY
}

echo "# trainer_gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n1); MLP 784-1024-1024-10"
for cfg in $CONFIGS; do
  dt=${cfg%%:*}; b=${cfg##*:}
  steps=3000; [ "$b" -ge 4096 ] && steps=600
  dsps=
  for graph in true false; do
    name="$dt-$b-$graph"
    job "$name" "$dt" "$b" "$steps" "$graph"
    mkdir -p "$W/$name"
    label=graph; [ "$graph" = false ] && label=eager
    if (cd "$W/$name" && env -u WORLD_SIZE -u RANK "$DTRAIN" worker "$W/$name.yaml" >"$W/$name.log" 2>&1); then
      read -r sps us acc < <(steady "$W/$name")
      echo "dtrain $label $dt B=$b: $sps samples/s, $us us/step, test accuracy $acc"
      [ "$graph" = true ] && dsps=$sps
    else
      echo "dtrain $label $dt B=$b FAILED:"; tail -n 5 "$W/$name.log"
    fi
  done
  t=$(python3 bench/trainer_gpu_torch.py --data "$FMNIST" --batch "$b" --dtype "$dt" --steps "$steps" \
        --variants "$VARIANTS" 2>&1)
  printf '%s\n' "$t" | grep -E '^torch|Error' | head -n 8
  for v in ${VARIANTS//,/ }; do
    tsps=$(printf '%s\n' "$t" | sed -n "s/^torch $v $dt B=$b: \([0-9.]*\) samples.*/\1/p")
    [ -n "$dsps" ] && [ -n "$tsps" ] &&
      awk -v d="$dsps" -v t="$tsps" -v v="$v" -v dt="$dt" -v b="$b" \
        'BEGIN { printf "ratio %s B=%s: dtrain graph / torch %s = %.2fx\n", dt, b, v, d / t }'
  done
done
