#!/usr/bin/env bash
# multi_gpu.sh - issue 13 in one run on a host with 2-8 GPUs (the lent nvidia-h200-x2/x4/x8
# machines): every figure the issue asks for, dtrain and the peer in the same run.
#
#   1. all-reduce bus bandwidth: `dtrain bench allreduce --backend nccl` on every GPU against
#      NVIDIA's all_reduce_perf (nccl-tests built from source on that machine against the same
#      NCCL; NCCL_TESTS=<its build dir>), 8 B - 8 GiB by 2, float sum; both tables, then the
#      ratio per size >= 64 MiB (target: within 5%) and the >= 1 GiB figure (targets: 300 GB/s
#      on 2 GPUs, 330 GB/s on 8).
#   2. DDP scaling of the GPU trainer (configs/cuda.yaml's MLP, fp32, batch 4096 per GPU: the
#      compute-dominated case) on 1, 2, 4, ... all GPUs: samples/s per GPU against 1 GPU
#      (target >= 90%), and the device's comm-wait per step (metrics.jsonl) against the
#      bucketed all-reduce of the same bytes timed alone by `dtrain bench` (target <= 25%).
#   3. bucket-size sweep 1-100 MB on all GPUs: samples/s per bucket_cap_mb; the default (25)
#      against the best (target within 10%).
#   4. a killed rank: rank 1 SIGKILLed at step 300 (DTRAIN_FAULT) on all GPUs; the survivors
#      abort their NCCL communicators, the job restarts from its checkpoint and finishes.
#
#   NCCL_TESTS=/path/to/nccl-tests/build FMNIST=<data dir> bench/multi_gpu.sh
#   DTRAIN=path/to/dtrain  GPUS=n (default: all visible)  MAXBYTES=8G
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0), as the lent machines require.
# Not a test: CI has no GPU.  Written before any multi-GPU machine was lent; run it first
# with GPUS=2 and read the output before trusting a figure.
set -uo pipefail
case ${DTRAIN:-} in */*) DTRAIN=$(realpath -m "$DTRAIN") ;; esac # relative to the caller: resolve before the cd
cd "$(dirname "$0")/.."
DTRAIN=${DTRAIN:-$PWD/bin/dtrain}
FMNIST=${FMNIST:-/usr/share/datasets/fashion-mnist}
MAXBYTES=${MAXBYTES:-8G}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
GPUS=${GPUS:-$(nvidia-smi -L 2>/dev/null | wc -l)}
[ -x "$DTRAIN" ] || { echo "multi_gpu: $DTRAIN is not built" >&2; exit 1; }
[ "$GPUS" -ge 2 ] || { echo "multi_gpu: needs 2 or more GPUs, this machine shows $GPUS" >&2; exit 1; }
[ -n "${NCCL_TESTS:-}" ] && [ -x "$NCCL_TESTS/all_reduce_perf" ] ||
  { echo "multi_gpu: NCCL_TESTS must name a build of nccl-tests (all_reduce_perf) made against this NCCL" >&2; exit 1; }
W=$(mktemp -d /tmp/dtrain-multigpu.XXXXXX)
trap 'rm -rf "$W"' EXIT
echo "# multi_gpu: $GPUS x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1)," \
     "driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n1)"

# --- 1. all-reduce busbw ----------------------------------------------------------------
cat >"$W/bench.yaml" <<EOF
name: nccl-bench
nproc_per_node: $GPUS
log_dir: $W/runs
command: ["$DTRAIN", bench, allreduce, --backend, nccl, -b, "8", -e, "$MAXBYTES", -f, "2", -n, "20", -w, "5", -c, "1"]
EOF
"$DTRAIN" launch --quiet "$W/bench.yaml" 2>&1 | sed -n 's/^\[rank 0\] //p' >"$W/dtrain.txt"
"$NCCL_TESTS/all_reduce_perf" -b 8 -e "$MAXBYTES" -f 2 -g "$GPUS" -n 20 -w 5 -c 1 >"$W/nccl.txt" 2>&1
echo "## dtrain bench allreduce --backend nccl"; cat "$W/dtrain.txt"
echo "## all_reduce_perf -g $GPUS"; cat "$W/nccl.txt"
# in-place busbw is column 12 in both (size count type redop root | time algbw busbw #wrong | ...)
awk 'FNR == 1 { f++ } !/^#/ && NF >= 12 && $1 ~ /^[0-9]+$/ { b[f, $1] = $12; s[$1] = 1 }
     END { print "## in-place busbw GB/s: size dtrain nccl-tests ratio (target: >= 0.95 at >= 64 MiB)"
           for (x in s) if (x + 0 >= 67108864 && b[2, x] > 0) printf "%12d %8.1f %8.1f %6.3f\n", x, b[1, x], b[2, x], b[1, x] / b[2, x] }' \
  "$W/dtrain.txt" "$W/nccl.txt" | sort -n

# --- 2-4: the trainer ---------------------------------------------------------------------
# job NAME NPROC BUCKET_MB STEPS: configs/cuda.yaml's model at batch 4096 fp32, constant lr
job() {
  cat >"$W/$1.yaml" <<EOF
name: $1
nproc_per_node: $2
log_dir: $W/runs
backend: nccl
max_restarts: 1
trainer:
  model: {type: mlp, hidden: [1024, 1024], activation: relu}
  data: {path: $FMNIST, batch_size: 4096, drop_last: true}
  steps: $4
  optimizer: {lr: 1e-3, weight_decay: 0.01, grad_clip: 0}
  scheduler: {type: constant}
  ddp: {bucket_cap_mb: $3, first_bucket_mb: 1, overlap: true}
  checkpoint: {every_steps: 100, dir: $W/ckpt-$1, keep: 2, resume: auto}
  eval: {every_epochs: 0}
  device: cuda
  cuda_graph: true
  log_every_steps: 50
EOF
}
# steady RUN_DIR -> "<samples/s> <comm wait us per step>", the first row left out
steady() {
  python3 - "$1" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl") if '"loss"' in l]
s = json.load(open(sys.argv[1] + "/trainer_summary.json"))
a, b = rows[1], rows[-1]
sps = (b["step"] - a["step"]) * s["batch_size_per_rank"] * s["world_size"] / (b["time_s"] - a["time_s"])
waits = [r["comm_wait_s"] for r in rows[1:] if r.get("comm_wait_s") is not None]
print(f"{sps:.0f} {1e6 * sum(waits) / max(len(waits), 1):.1f}")
PY
}
run_job() { # NAME -> run dir on stdout (empty on failure)
  "$DTRAIN" launch --quiet "$W/$1.yaml" >"$W/$1.log" 2>&1 || { echo "# $1 FAILED:" >&2; tail -n 8 "$W/$1.log" >&2; return 1; }
  ls -d "$W"/runs/"$1"-* | tail -n 1
}

echo "## DDP scaling, fp32 batch 4096 per GPU (samples/s per GPU against 1 GPU; target >= 90%)"
one=
for ((n = 1; n <= GPUS; n *= 2)); do
  job "scale$n" "$n" 25 600
  dir=$(run_job "scale$n") || continue
  read -r sps wait < <(steady "$dir")
  [ -z "$one" ] && one=$sps
  # the all-reduce of the model's gradients alone, on the same GPUs
  ar=
  if [ "$n" -gt 1 ]; then
    bytes=$(python3 -c "print(4 * (784 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 10 + 10))")
    sed -e "s/name: nccl-bench/name: ar$n/" -e "s/nproc_per_node: $GPUS/nproc_per_node: $n/" \
        -e "s/-b, \"8\", -e, \"$MAXBYTES\"/-b, \"$bytes\", -e, \"$bytes\"/" "$W/bench.yaml" >"$W/ar$n.yaml"
    ar=$("$DTRAIN" launch --quiet "$W/ar$n.yaml" 2>&1 | sed -n 's/^\[rank 0\] //p' |
         awk '!/^#/ && NF >= 12 && $1 ~ /^[0-9]+$/ { print $10 }')
  fi
  awk -v n="$n" -v s="$sps" -v o="$one" -v w="$wait" -v a="${ar:-0}" 'BEGIN {
    printf "%d GPU(s): %.0f samples/s, %.0f per GPU = %.1f%% of 1 GPU; comm wait %.1f us/step", n, s, s / n, 100 * s / n / o, w
    if (a > 0) printf " = %.0f%% of the all-reduce alone (%.1f us)", 100 * w / a, a
    printf "\n" }'
done

echo "## bucket_cap_mb sweep on $GPUS GPUs (samples/s; the default 25 against the best, target within 10%)"
best=0; def=0
for mb in 1 2 5 10 25 50 100; do
  job "bucket$mb" "$GPUS" "$mb" 600
  dir=$(run_job "bucket$mb") || continue
  read -r sps _ < <(steady "$dir")
  echo "bucket_cap_mb $mb: $sps samples/s"
  best=$(awk -v a="$best" -v b="$sps" 'BEGIN { print (b > a ? b : a) }')
  [ "$mb" = 25 ] && def=$sps
done
awk -v d="$def" -v b="$best" 'BEGIN { if (b > 0) printf "default (25 MB) = %.1f%% of the best\n", 100 * d / b }'

echo "## a killed rank on $GPUS GPUs: rank 1 SIGKILLed at step 300, max_restarts 1"
job kill "$GPUS" 25 600
start=$(date +%s.%N)
DTRAIN_FAULT=kill:1:300:0 "$DTRAIN" launch "$W/kill.yaml" >"$W/kill.out" 2>"$W/kill.err"
rc=$?
secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
dir=$(ls -d "$W"/runs/kill-* 2>/dev/null | tail -n 1)
echo "exit $rc after $secs s; attempts: $(python3 -c "import json; print(json.load(open('$dir/summary.json'))['n_attempts'])" 2>/dev/null)"
grep -E 'failed first|restart|abort|resum' "$W/kill.err" | head -n 8
