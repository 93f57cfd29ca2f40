#!/usr/bin/env bash
# test_launch.sh - `dtrain launch` of configs/cuda.yaml on the GPU (fp32, bf16,
# fp16 with the device's loss scale in the metrics): Fashion-MNIST to >= 88% test accuracy like the CPU quickstart, with
# per-rank GPU utilisation and memory (NVML) in metrics.jsonl and TensorBoard
# events written.  TAP lines, then "N passed, N failed" (tests/gpu/run.sh).
#   DTRAIN=path/to/dtrain  DTRAIN_FMNIST=data dir
set -uo pipefail
cd "$(dirname "$0")/../.."
DTRAIN=${DTRAIN:-$PWD/bin/dtrain}
DATA=${DTRAIN_FMNIST:-/usr/share/datasets/fashion-mnist}
T=$(mktemp -d /tmp/dtrain-gpulaunch.XXXXXX)
trap 'rm -rf "$T"' EXIT
. tests/gpu/tap.sh
need_gpu test_launch.sh

# split_check METRICS: "ok|bad <what it saw>": on one GPU the engine's phase
# marks (worker/cuda/engine_internal.h) must give data, forward, backward and
# optimizer > 0, comm wait near 0 (no peers: two marks back to back), and a sum close to the step time the
# host saw between rows (a graph step keeps the GPU busy: the device time is
# most of it, never much more).
split_check() {
  python3 - "$1" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"forward_s"' in l]
if len(rows) < 3:
    print("bad only", len(rows), "rows with a split"); sys.exit()
a, b = rows[1], rows[-1]
step = (b["time_s"] - a["time_s"]) / (b["step"] - a["step"])
names = ["data_s", "forward_s", "backward_s", "comm_wait_s", "optimizer_s"]
last = [b[n] for n in names]
total = sum(last)
ok = all(last[i] > 0 for i in (0, 1, 2, 4)) and last[3] < 0.1 * total and 0.3 * step <= total <= 1.3 * step
print("ok" if ok else "bad", " ".join(f"{n}={v * 1e6:.1f}us" for n, v in zip(names, last)),
      f"sum={total * 1e6:.1f}us host step={step * 1e6:.1f}us")
EOF
}

for dt in fp32 bf16 fp16; do
  amp=off; [ $dt != fp32 ] && amp=$dt
  sed -e "s|path: /usr/share/datasets/fashion-mnist|path: $DATA|" -e "s|^name: cuda|name: cuda-$dt|" \
      -e "s|  cuda_graph: true|  cuda_graph: true\n  amp: {dtype: $amp}|" configs/cuda.yaml >"$T/$dt.yaml"
  start=$(date +%s.%N)
  "$DTRAIN" launch "$T/$dt.yaml" --log-dir "$T/runs" >"$T/$dt.out" 2>"$T/$dt.err"
  rc=$?
  secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  check "$dt: dtrain launch configs/cuda.yaml exits 0 ($secs s)" test $rc -eq 0
  [ $rc -eq 0 ] || tail -n 20 "$T/$dt.err" | sed 's/^/# /'
  run=$(ls -d "$T"/runs/cuda-$dt-* 2>/dev/null | head -n 1)
  acc=$(sed -n 's/.*"test_accuracy": \([0-9.]*\).*/\1/p' "$run/trainer_summary.json" 2>/dev/null)
  sps=$(sed -n 's/.*"samples_per_s": \([0-9.]*\).*/\1/p' "$run/trainer_summary.json" 2>/dev/null)
  echo "# $dt: test accuracy ${acc:-?}, ${sps:-?} samples/s over the whole run (start-up included)"
  check "$dt: test accuracy ${acc:-none} >= 0.88 after 4 epochs" awk -v a="${acc:-0}" 'BEGIN { exit !(a >= 0.88) }'
  check "$dt: metrics.jsonl rows carry gpu_util_pct and gpu_mem_mib" \
    grep -q '"gpu_util_pct": \[[0-9.]*\], "gpu_mem_mib": \[[0-9.]*\]' "$run/metrics.jsonl"
  check "$dt: a TensorBoard events file is written" sh -c "ls '$run'/events.out.tfevents.* >/dev/null 2>&1"
  if [ $dt = fp16 ]; then
    check "fp16: metrics rows carry the device's loss_scale and skipped_steps" \
      grep -q '"loss_scale": [0-9.e+]*, "skipped_steps": [0-9]*' "$run/metrics.jsonl"
    grep '"loss_scale"' "$run/metrics.jsonl" | tail -n 1 | grep -o '"loss_scale": [^}]*' | sed 's/^/# /'
  fi
  grep -m1 '"gpu_util_pct"' "$run/metrics.jsonl" | sed 's/^/# /' | cut -c1-300
  split=$(split_check "$run/metrics.jsonl")
  echo "# $dt: ${split#* }"
  check "$dt: the step-time split is the device's own (each phase > 0, comm wait ~0, sum 0.3-1.3x the step)" \
    test "${split%% *}" = ok
done
finish
