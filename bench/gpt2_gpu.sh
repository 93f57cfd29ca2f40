#!/usr/bin/env bash
# gpt2_gpu.sh - GPT-2 on one GPU: dtrain against the fastest PyTorch of several
# (bench/gpt2_torch.py), same GPU, same run.
#
# MODEL=124m (12 layers, 768 wide, 12 heads), 350m (24, 1024, 16), 774m (36,
# 1280, 20) or 1558m (48, 1600, 25); vocabulary 50257 (dtrain pads its head to
# 50304 inside the model, as llm.c; the loss is the same), T=1024, batch 16
# then 32; bf16 (dtrain amp bf16 with fp32 master weights, the whole step in a
# CUDA graph; PyTorch bf16 autocast), AdamW lr 6e-4 constant, betas 0.9/0.95,
# eps 1e-8, decay 0.1 on the 2-D tensors, clipping at 1.0; both read the same
# llm.c shard of random GPT-2 ids (bench/token_shards.py) in llm.c's order.
#
# The peers (PEERS, each MODE/VOCAB): PyTorch as a user tuning for speed runs
# it: TF32 allowed and SDPA's flash kernel (TORCH_FLAGS), fused AdamW,
# torch.compile in its default mode and in max-autotune-no-cudagraphs
# ("autotune"; where it compiles within TORCH_TIMEOUT), with Hugging Face's
# vocabulary 50257 and nanoGPT's 50304 (padded to a multiple of 64 for the
# GEMMs).  The fastest PyTorch at each batch is THE peer the ratio is taken
# against (target >= 1.3x its tokens/s with less device memory).  "eager" is
# a mode too.  Each run is WARMUP steps (the graph capture and cuBLASLt
# tuning; compilation and autotuning) and STEPS timed steps.  dtrain's figures
# are from metrics.jsonl between the row at the end of the warm-up and the
# last row; PyTorch's from its own clock after a synchronize.  The loss after
# the run: dtrain's last row (the mean of its LOG_EVERY steps), PyTorch's last
# step.
#
# MFU: every run's tokens/s times the model's training FLOPs per token (llm.c's
# 6 N + 6 L C T, N with the vocabulary padded to 50304, the same for every row
# so that MFU ratios are tokens/s ratios) over the card's measured bf16 GEMM
# rate (an 8192^3 torch.matmul, the mean of 20 after 5 warm-ups, printed in
# the header); dtrain's metrics.jsonl reports MFU against the data sheet's
# peak instead (989 TFLOP/s on an H100 SXM or H200).
#
# Prints one line per run, then a table for docs/bench.md and the ratios, then
# the GPU kernels of a short dtrain run by time: nsys's when it is there, else
# dtrain's own CUPTI trace (DTRAIN_CUDA_PROFILE, docs/gpu.md: the top 30
# kernels and the time by category, the first PROFILE_SKIP steps left out).
# Memory: dtrain's gpu_alloc_mib (the engine's device allocations) against
# PyTorch's max_memory_allocated / max_memory_reserved (the caching
# allocator's peak), and the device's used memory as NVML counts it (CUDA
# context included) on both sides: dtrain's gpu_mem_mib, PyTorch's
# cudaMemGetInfo at the end.  A key a dtrain build does not write prints n/a.
#
#   DTRAIN=path/to/dtrain bench/gpt2_gpu.sh      (on the GPU machine; python3 with torch and numpy)
#   MODEL=124m  BATCHES="16 32"  SEQ=1024  WARMUP=10  STEPS=30  LOG_EVERY=5
#   PEERS="compile/50257 compile/50304 autotune/50304"  (PEERS= empty: dtrain alone)
#   TORCH_FLAGS="--tf32 --sdpa flash"  MEM_CAP_GIB=0 (PyTorch's allocator capped, e.g. 79 for an 80 GB card)
#   EXTRA="recompute: gelu"   more trainer keys for dtrain's runs (one YAML line)
#   DTRAIN_RUNS=1   dtrain runs per batch (alternating with nothing: the spread of dtrain alone)
#   NSYS=auto|0  NSYS_BIN=path  PROFILE_BATCH=16  PROFILE_STEPS=30
#   CUPTI=auto|0  PROFILE_SKIP=10  DTRAIN_CUPTI=libcupti.so.13 or its folder (else found under
#   /usr/local/cuda*, then PyTorch's nvidia wheels); NSYS=0 CUPTI=0: no profile
#   RESULTS=file  also append the result lines there (bench/gpt2_gpu_sizes.sh reads them)
#   DEVICE=cpu with a tiny model (LAYERS=2 HEADS=2 EMBD=64 VOCAB=256 BLOCK=64 SEQ=64 BATCHES=4) checks
#   this script on a machine without a GPU; its numbers mean nothing.
# Not a test: tests/gpu/test_gpt2_curve.sh checks the loss curve against PyTorch's.
set -uo pipefail
case ${DTRAIN:-} in */*) DTRAIN=$(realpath -m "$DTRAIN") ;; esac # relative to the caller: resolve before the cd
cd "$(dirname "$0")/.." || exit 1
DTRAIN=${DTRAIN:-$PWD/bin/dtrain}
PYTHON=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
BATCHES=${BATCHES:-16 32} SEQ=${SEQ:-1024} WARMUP=${WARMUP:-10} STEPS=${STEPS:-30} LOG_EVERY=${LOG_EVERY:-5}
PEERS=${PEERS-compile/50257 compile/50304 autotune/50304} TORCH_FLAGS=${TORCH_FLAGS---tf32 --sdpa flash}
MEM_CAP_GIB=${MEM_CAP_GIB:-0} EXTRA=${EXTRA:-} DTRAIN_RUNS=${DTRAIN_RUNS:-1} MODEL=${MODEL:-124m}
case $MODEL in
  124m) shape="12 12 768" ;;
  350m) shape="24 16 1024" ;;
  774m) shape="36 20 1280" ;;
  1558m) shape="48 25 1600" ;;
  *) echo "gpt2_gpu: MODEL=$MODEL: one of 124m, 350m, 774m, 1558m (or LAYERS, HEADS, EMBD)" >&2; exit 2 ;;
esac
read -r l h c <<<"$shape"
LAYERS=${LAYERS:-$l} HEADS=${HEADS:-$h} EMBD=${EMBD:-$c} VOCAB=${VOCAB:-50257} BLOCK=${BLOCK:-1024}
for p in $PEERS; do
  case $p in
    eager/[0-9]* | compile/[0-9]* | autotune/[0-9]*) ;;
    *) echo "gpt2_gpu: PEERS entry '$p': MODE/VOCAB with MODE eager, compile or autotune (e.g. compile/50304)" >&2
       exit 2 ;;
  esac
done
NSYS=${NSYS:-auto} PROFILE_BATCH=${PROFILE_BATCH:-16} PROFILE_STEPS=${PROFILE_STEPS:-30}
CUPTI=${CUPTI:-auto} PROFILE_SKIP=${PROFILE_SKIP:-10}
DTRAIN_TIMEOUT=${DTRAIN_TIMEOUT:-180} TORCH_TIMEOUT=${TORCH_TIMEOUT:-300}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
. scripts/cudnn-env.sh # DTRAIN_CUDA_ATTN=cudnn runs find PyTorch's cuDNN
if [ $((WARMUP % LOG_EVERY)) -ne 0 ] || [ $(((WARMUP + STEPS) % LOG_EVERY)) -ne 0 ] || [ "$STEPS" -lt 1 ]; then
  echo "gpt2_gpu: WARMUP ($WARMUP) and WARMUP + STEPS ($((WARMUP + STEPS))) must be multiples of LOG_EVERY" \
    "($LOG_EVERY), and STEPS >= 1: dtrain's window is between two metrics rows" >&2
  exit 2
fi
"$PYTHON" -c 'import torch, numpy' 2>/dev/null || { echo "gpt2_gpu: $PYTHON cannot import torch and numpy; set PYTHON=" >&2; exit 1; }
[ -x "$DTRAIN" ] || echo "gpt2_gpu: $DTRAIN is not built: dtrain's runs will fail, the peers still run" >&2
W=$(mktemp -d /tmp/dtrain-gpt2bench.XXXXXX)
trap 'rm -rf "$W"' EXIT
R=$W/results.txt
: >"$R"
RESULTS=${RESULTS:-}

# One shard long enough for the largest run: every run reads it from the start.
most=$PROFILE_BATCH
for b in $BATCHES; do [ "$b" -gt "$most" ] && most=$b; done
steps_most=$((WARMUP + STEPS)); [ "$PROFILE_STEPS" -gt "$steps_most" ] && steps_most=$PROFILE_STEPS
"$PYTHON" bench/token_shards.py -o "$W/data" --tokens $((most * SEQ * steps_most + 1)) --vocab "$VOCAB" --seed 0 \
  >/dev/null || { echo "gpt2_gpu: cannot write the token shard" >&2; exit 1; }

# The card's bf16 GEMM rate, the MFU's denominator (nan on the CPU).
gemm_tflops=$("$PYTHON" - "$DEVICE" <<'PY'
import sys, time, torch
if sys.argv[1] != "cuda":
    print("nan"); sys.exit()
a, b = (torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16) for _ in range(2))
for _ in range(5):
    a @ b
torch.cuda.synchronize(); t = time.perf_counter()
for _ in range(20):
    a @ b
torch.cuda.synchronize()
print(f"{20 * 2 * 8192 ** 3 / (time.perf_counter() - t) / 1e12:.1f}")
PY
)
# llm.c's training FLOPs per token, the vocabulary padded to 50304 (dtrain's N)
flops_tok=$("$PYTHON" -c "
L, C, T, V, P = $LAYERS, $EMBD, $SEQ, $VOCAB, $BLOCK
V = (V + 63) // 64 * 64 if V > 1000 else V
N = V * C + P * C + L * (12 * C * C + 13 * C) + 2 * C
print(6 * N + 6 * L * C * T)")
echo "# gpt2_gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n1);" \
  "$("$PYTHON" -c 'import torch; print("torch", torch.__version__)' 2>/dev/null); GPT-2 $MODEL L=$LAYERS C=$EMBD" \
  "H=$HEADS V=$VOCAB T=$SEQ bf16; $WARMUP warm-up + $STEPS timed steps per run; bf16 GEMM rate" \
  "$gemm_tflops TFLOP/s (8192^3 torch.matmul), $flops_tok FLOPs per token; PyTorch: $TORCH_FLAGS;" \
  "dtrain's kernel choices: $(env | grep -E '^DTRAIN_CUDA_[A-Z_]+=' | sort | tr '\n' ' ' | grep . ||
    echo 'the defaults (docs/gpu.md)')"

# job NAME BATCH STEPS LOG_EVERY: dtrain's spec, the peer's hyper-parameters
job() {
  local graph=; [ "$DEVICE" = cuda ] && graph="cuda_graph: true"
  cat >"$W/$1.yaml" <<EOF
name: gpt2bench-$1
nproc_per_node: 1
trainer:
  model: {type: gpt2, n_layer: $LAYERS, n_head: $HEADS, n_embd: $EMBD, vocab_size: $VOCAB, block_size: $BLOCK}
  data: {dataset: tokens, train: "$W/data/train_*.bin", batch_size: $2, seq_len: $SEQ, shuffle: false}
  steps: $3
  optimizer: {type: adamw, lr: 6e-4, betas: [0.9, 0.95], eps: 1e-8, weight_decay: 0.1, grad_clip: 1.0}
  scheduler: {type: constant}
  checkpoint: {every_steps: 0, dir: $W/ckpt-$1, resume: never}
  log_every_steps: $4
  seed: 0
  device: $DEVICE
  amp: {dtype: bf16}
  $graph
  $EXTRA
EOF
}

# steady RUN_DIR B: dtrain's result line from metrics.jsonl (the window after the warm-up)
steady() {
  "$PYTHON" - "$1" "$2" "$SEQ" "$WARMUP" "$VOCAB" <<'PY'
import json, sys
run, B, T, warm, V = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
rows = [r for r in map(json.loads, open(run + "/metrics.jsonl")) if "loss" in r]
a = next(r for r in rows if r["step"] >= warm)
b = rows[-1]
n, dt = b["step"] - a["step"], b["time_s"] - a["time_s"]
def gib(key):  # a number or one per rank (the largest); absent or null: n/a
    v = b.get(key)
    if isinstance(v, list):
        v = max((x for x in v if x is not None), default=None)
    return "n/a" if v is None else f"{v / 1024:.2f}"
print(f"dtrain mode=dtrain vocab={V} B={B} T={T} steps={n} tokens_per_s={n * B * T / dt:.1f} ms_per_step={1e3 * dt / n:.2f}"
      f" peak_alloc_gib={gib('gpu_alloc_mib')} peak_reserved_gib=n/a device_used_gib={gib('gpu_mem_mib')}"
      f" loss={b['loss']:.6f}")
split = [(k[:-2], b.get(k)) for k in ("data_s", "forward_s", "backward_s", "comm_wait_s", "optimizer_s")]
print(f"dtrain B={B} step split (ms, the device's clock, one step):",
      " ".join(f"{k} {'n/a' if v is None else f'{1e3 * v:.2f}'}" for k, v in split))
PY
}

# peer B MODE/VOCAB: one PyTorch run, its result line into $R
peer() {
  local b=$1 mode=${2%/*} vocab=${2#*/} out=$W/t$1-${2%/*}-${2#*/} rc line
  [ "$mode" = autotune ] && mode=max-autotune
  # shellcheck disable=SC2086 # TORCH_FLAGS is a list of flags
  timeout "$TORCH_TIMEOUT" "$PYTHON" bench/gpt2_torch.py --device "$DEVICE" --mode "$mode" --batch "$b" --seq "$SEQ" \
    --warmup "$WARMUP" --steps "$STEPS" --shards "$W/data/train_*.bin" --layers "$LAYERS" --heads "$HEADS" \
    --embd "$EMBD" --vocab "$vocab" --data-vocab "$VOCAB" --block "$BLOCK" --mem-cap-gib "$MEM_CAP_GIB" \
    $TORCH_FLAGS >"$out.out" 2>"$out.err"
  rc=$?
  if line=$(grep '^gpt2_torch mode=' "$out.out"); then
    printf '%s\n' "$line" | tee -a "$R"
  else
    echo "torch $mode vocab=$vocab B=$b FAILED (exit status $rc$([ $rc -eq 124 ] && echo ", over ${TORCH_TIMEOUT} s")):"
    grep -m1 -E 'OutOfMemoryError|out of memory' "$out.err" | sed 's/^/  /'
    tail -n 6 "$out.err" | sed 's/^/  /'
  fi
}

for b in $BATCHES; do
  for i in $(seq "$DTRAIN_RUNS"); do
    job "b$b-$i" "$b" $((WARMUP + STEPS)) "$LOG_EVERY"
    timeout "$DTRAIN_TIMEOUT" "$DTRAIN" launch "$W/b$b-$i.yaml" --log-dir "$W/runs" >"$W/b$b-$i.out" 2>"$W/b$b-$i.err"
    rc=$?
    run=$(ls -d "$W"/runs/gpt2bench-b"$b-$i"-* 2>/dev/null | head -n 1)
    if [ $rc -eq 0 ] && out=$(steady "$run" "$b" 2>&1); then
      printf '%s\n' "$out"
      printf '%s\n' "$out" | grep '^dtrain mode=' >>"$R"
    else
      echo "dtrain B=$b FAILED (exit status $rc$([ $rc -eq 124 ] && echo ", over ${DTRAIN_TIMEOUT} s")):"
      tail -n 8 "$W/b$b-$i.err" | sed 's/^/  /'
      [ $rc -eq 0 ] && printf '%s\n' "$out" | tail -n 3 | sed 's/^/  /'
    fi
  done
  for p in $PEERS; do peer "$b" "$p"; done
done
[ -n "$RESULTS" ] && sed "s/\$/ model=$MODEL gemm_tflops=$gemm_tflops flops_per_token=$flops_tok/" "$R" >>"$RESULTS"

# The table and the ratios, from the result lines.
"$PYTHON" - "$R" "$BATCHES" "$gemm_tflops" "$flops_tok" <<'PY'
import sys
rows = []
for line in open(sys.argv[1]):
    f = dict(kv.split("=", 1) for kv in line.split()[1:])
    f["B"] = int(f["B"])
    rows.append(f)
rate, fpt = float(sys.argv[3]), float(sys.argv[4])
def num(f, k):
    try:
        v = float(f[k])
    except (KeyError, ValueError):
        return None
    return None if v != v else v  # nan: not measured (the peer on CPU)
def fmt(v, spec):
    return "n/a" if v is None else format(v, spec)
names = {"dtrain": "dtrain", "eager": "PyTorch eager", "compile": "torch.compile",
         "max-autotune": "torch.compile max-autotune"}
def name(f):
    return names[f["mode"]] + ("" if f["mode"] == "dtrain" else f", vocab {f['vocab']}")
def mfu(f):
    t = num(f, "tokens_per_s")
    return None if t is None or rate != rate else 100 * t * fpt / (rate * 1e12)
print()
print("| B | run | tokens/s | ms/step | MFU % | peak alloc GiB | peak reserved GiB | device used GiB | loss after the run |")
print("|---|---|---|---|---|---|---|---|---|")
batches = list(map(int, sys.argv[2].split()))
for B in batches:
    for f in (r for r in rows if r["B"] == B):
        print(f"| {B} | {name(f)} | {fmt(num(f, 'tokens_per_s'), ',.0f')} | {fmt(num(f, 'ms_per_step'), '.2f')} | "
              f"{fmt(mfu(f), '.1f')} | {fmt(num(f, 'peak_alloc_gib'), '.2f')} | "
              f"{fmt(num(f, 'peak_reserved_gib'), '.2f')} | {fmt(num(f, 'device_used_gib'), '.2f')} | "
              f"{fmt(num(f, 'loss'), '.4f')} |")
print()
for B in batches:
    mine = [r for r in rows if r["B"] == B and r["mode"] == "dtrain"]
    peers = [r for r in rows if r["B"] == B and r["mode"] != "dtrain" and num(r, "tokens_per_s")]
    if not mine:
        print(f"ratio B={B}: no dtrain result")
        continue
    tok = sum(num(r, "tokens_per_s") for r in mine) / len(mine)  # the mean of dtrain's runs
    d = mine[-1]
    if not peers:
        print(f"ratio B={B}: no PyTorch result")
        continue
    best = max(peers, key=lambda r: num(r, "tokens_per_s"))
    mem = [(num(d, "peak_alloc_gib"), num(best, "peak_reserved_gib")),
           (num(d, "device_used_gib"), num(best, "device_used_gib"))]
    alloc = "n/a" if None in mem[0] else f"{mem[0][0] / mem[0][1]:.2f}x"
    used = "n/a" if None in mem[1] else f"{mem[1][0] / mem[1][1]:.2f}x"
    others = ", ".join(f"{name(r)} {tok / num(r, 'tokens_per_s'):.2f}x" for r in peers)
    print(f"ratio B={B}: dtrain / the fastest PyTorch ({name(best)}) = {tok / num(best, 'tokens_per_s'):.2f}x "
          f"tokens/s (target >= 1.3x); memory dtrain / it: allocations {alloc} (dtrain gpu_alloc_mib / torch "
          f"max_memory_reserved), device used {used} (target < 1.0x); against each: {others}")
PY

# cupti_dir: the folder of a libcupti.so.13 for DTRAIN_CUPTI: the CUDA toolkit's, then PyTorch's
# nvidia wheels' (nvidia/cu13/lib); triton's copies are left alone (another CUDA's).
cupti_dir() {
  local f
  for f in /usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13 /usr/local/cuda/lib64/libcupti.so.13 \
    /usr/local/cuda-13*/extras/CUPTI/lib64/libcupti.so.13 /usr/local/cuda-13*/lib64/libcupti.so.13 \
    /usr/local/cuda-13*/lib/libcupti.so.13; do
    [ -e "$f" ] && { dirname "$f"; return; }
  done
  "$PYTHON" - <<'PY' 2>/dev/null
import glob, os
roots = []
try:
    import nvidia
    roots += list(nvidia.__path__)
except Exception:
    pass
try:
    import torch
    roots.append(os.path.join(os.path.dirname(torch.__file__), "lib"))
except Exception:
    pass
for r in roots:
    hits = sorted(glob.glob(os.path.join(r, "**", "libcupti.so.13*"), recursive=True))
    if hits:
        print(os.path.dirname(hits[0]))
        break
PY
}

# cupti_profile: a short dtrain run with DTRAIN_CUDA_PROFILE (CUPTI, graph nodes one by one);
# prints the top 30 kernels and the time by category.
cupti_profile() {
  local dir=${DTRAIN_CUPTI:-$(cupti_dir)} out=$W/prof/kernels.txt rc
  if [ -z "$dir" ]; then
    echo "profile: no nsys and no libcupti.so.13 found (set DTRAIN_CUPTI=path or NSYS_BIN=path);" \
      "dtrain's step split above is the profile"
    return
  fi
  job prof "$PROFILE_BATCH" "$PROFILE_STEPS" "$PROFILE_STEPS"
  mkdir -p "$W/prof"
  (cd "$W/prof" && env -u WORLD_SIZE -u RANK DTRAIN_CUDA_PROFILE="$out" DTRAIN_CUDA_PROFILE_SKIP="$PROFILE_SKIP" \
    DTRAIN_CUPTI="$dir" timeout 300 "$DTRAIN" worker "$W/prof.yaml") >"$W/prof.log" 2>&1
  rc=$?
  if [ $rc -ne 0 ] || [ ! -s "$out" ]; then
    echo "profile: dtrain B=$PROFILE_BATCH with DTRAIN_CUDA_PROFILE (CUPTI from $dir) failed (exit status $rc):"
    grep -i 'profile\|cupti' "$W/prof.log" | tail -n 4 | sed 's/^/  /'
    tail -n 4 "$W/prof.log" | sed 's/^/  /'
    return
  fi
  echo "profile: dtrain B=$PROFILE_BATCH, $PROFILE_STEPS steps, the first $PROFILE_SKIP left out;" \
    "CUPTI from $dir; the top 30 kernels by total time:"
  awk '/^by category:/ { c = 1 } NR <= 33 || c' "$out" | sed 's/^/  /'
}

# Where dtrain's step goes: nsys's kernel table of a short run (graph nodes one by one), else CUPTI's.
echo
nsys_bin=${NSYS_BIN:-$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -n 1)}
if [ "$DEVICE" != cuda ] || { [ "$NSYS" = 0 ] && [ "$CUPTI" = 0 ]; }; then
  echo "profile: skipped (NSYS=0 CUPTI=0, or not on cuda)"
elif [ "$NSYS" = 0 ] || [ -z "$nsys_bin" ] || [ ! -x "$nsys_bin" ]; then
  if [ "$CUPTI" = 0 ]; then
    echo "profile: nsys is not on this machine (NSYS_BIN=path to use one) and CUPTI=0; dtrain's step split above is the profile"
  else
    cupti_profile
  fi
else
  job prof "$PROFILE_BATCH" "$PROFILE_STEPS" "$PROFILE_STEPS"
  mkdir -p "$W/prof"
  (cd "$W/prof" && env -u WORLD_SIZE -u RANK timeout 300 "$nsys_bin" profile -t cuda --cuda-graph-trace=node \
    --force-overwrite true -o "$W/prof/dtrain" "$DTRAIN" worker "$W/prof.yaml") >"$W/prof.log" 2>&1
  rc=$?
  rep=$(ls "$W"/prof/dtrain.*rep 2>/dev/null | head -n 1)
  if [ $rc -ne 0 ] || [ -z "$rep" ]; then
    echo "profile: nsys profile of dtrain B=$PROFILE_BATCH failed (exit status $rc):"; tail -n 8 "$W/prof.log" | sed 's/^/  /'
  else
    "$nsys_bin" stats --report cuda_gpu_kern_sum --format csv "$rep" >"$W/kern.csv" 2>"$W/kern.err"
    "$PYTHON" - "$W/kern.csv" "$PROFILE_STEPS" "$PROFILE_BATCH" <<'PY'
import csv, sys
lines = open(sys.argv[1]).read().splitlines()
start = next((i for i, l in enumerate(lines) if "Time" in l and "Instances" in l and "Name" in l), None)
if start is None:
    print("profile: nsys stats gave no kernel table:", *lines[-5:], sep="\n  ")
    sys.exit()
rows = [r for r in csv.DictReader(lines[start:]) if r.get("Name")]
def col(r, *heads):  # nsys versions name the columns "Time (%)" or "Time(%)", "Avg (ns)" or "Average"
    k = next(k for k in r if k and any(k.replace(" ", "").startswith(h) for h in heads))
    return float(r[k])
steps = int(sys.argv[2])
total = sum(col(r, "TotalTime") for r in rows)
print(f"profile: dtrain B={sys.argv[3]}, {steps} steps (the first includes graph capture and cuBLASLt tuning), "
      f"GPU kernel time {total / steps / 1e3:.0f} us/step; kernels by total time:")
print("   time %   us/step   calls/step   avg us   kernel")
for r in rows[:20]:
    name = r["Name"] if len(r["Name"]) <= 100 else r["Name"][:97] + "..."
    print(f"   {col(r, 'Time(%)'):6.1f}   {col(r, 'TotalTime') / steps / 1e3:7.0f}   "
          f"{col(r, 'Instances') / steps:10.1f}   {col(r, 'Avg', 'Average') / 1e3:6.1f}   {name}")
PY
  fi
fi
