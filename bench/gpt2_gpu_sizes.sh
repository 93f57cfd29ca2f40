#!/usr/bin/env bash
# gpt2_gpu_sizes.sh - the larger GPT-2 models on one GPU: dtrain against
# torch.compile at each size, at the largest batch both fit.
#
# For each SIZES entry MODEL:BATCH (350m 24 layers x 1024, 774m 36 x 1280,
# 1558m 48 x 1600; T=1024) it runs bench/gpt2_gpu.sh with that model, one batch
# and the PEERS given here (default torch.compile with nanoGPT's vocabulary
# 50304, TF32 and flash attention: the fastest PyTorch of the 124M runs).  When
# either side runs out of memory at BATCH, both run again at BATCH/2, down to 1,
# so the row is at the largest power-of-two batch both fit from that start.
# MEM_CAP_GIB=79 caps PyTorch's caching allocator as an 80 GB card would; dtrain
# prints its peak (gpu_mem_mib, the device's used memory with the context), which
# must stay under the card's 80 GB (a run that cannot fit stops at start with
# the memory it needs: worker/cuda/engine_memory.c).  DTRAIN_EXTRA_<model> (e.g.
# DTRAIN_EXTRA_1558m="recompute: gelu") adds trainer keys to dtrain's runs of
# that size.  Ends with one table of every size: tokens/s, MFU (against the
# measured bf16 GEMM rate, bench/gpt2_gpu.sh) and peak memory, and the ratios.
#
#   DTRAIN=path/to/dtrain bench/gpt2_gpu_sizes.sh
#   SIZES="350m:32 774m:16 1558m:8"  PEERS="compile/50304"  WARMUP=10 STEPS=20  MEM_CAP_GIB=79
#   DEVICE=cpu SIZES=350m:2 LAYERS=2 HEADS=2 EMBD=64 VOCAB=256 BLOCK=64 SEQ=64: this script on a CPU
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
SIZES=${SIZES:-350m:32 774m:16 1558m:8}
export PEERS=${PEERS-compile/50304} WARMUP=${WARMUP:-10} STEPS=${STEPS:-20} MEM_CAP_GIB=${MEM_CAP_GIB:-79}
export NSYS=0 CUPTI=0 TORCH_TIMEOUT=${TORCH_TIMEOUT:-420} DTRAIN_TIMEOUT=${DTRAIN_TIMEOUT:-300}
PYTHON=${PYTHON:-python3}
W=$(mktemp -d /tmp/dtrain-gpt2sizes.XXXXXX)
trap 'rm -rf "$W"' EXIT
export RESULTS=$W/results.txt
: >"$RESULTS"

for entry in $SIZES; do
  model=${entry%%:*} b=${entry#*:}
  extra_var=DTRAIN_EXTRA_$model
  while [ "$b" -ge 1 ]; do
    echo "=== $model at batch $b"
    before=$(wc -l <"$RESULTS")
    MODEL=$model BATCHES=$b EXTRA="${!extra_var:-}" bench/gpt2_gpu.sh >"$W/$model-$b.out" 2>&1
    cat "$W/$model-$b.out"
    got=$(tail -n +$((before + 1)) "$RESULTS")
    # both sides measured: this size is done; an out-of-memory failure on either: half the batch
    if printf '%s\n' "$got" | grep -q '^dtrain ' && { [ -z "$PEERS" ] || printf '%s\n' "$got" | grep -q '^gpt2_torch '; }; then
      break
    fi
    if ! grep -qiE 'out of (GPU )?memory|OutOfMemoryError' "$W/$model-$b.out"; then
      echo "gpt2_gpu_sizes: $model at batch $b failed, not for memory: left out"
      break
    fi
    # the side that fitted is measured again at the smaller batch: a row compares one batch
    sed -i "$((before + 1)),\$d" "$RESULTS"
    b=$((b / 2))
  done
done

echo
echo "## every size (T=${SEQ:-1024}, bf16, $WARMUP warm-up + $STEPS timed steps; PyTorch: $PEERS, allocator cap ${MEM_CAP_GIB} GiB)"
"$PYTHON" - "$RESULTS" <<'PY'
import sys
rows = [dict(kv.split("=", 1) for kv in l.split()[1:]) | {"who": l.split()[0]} for l in open(sys.argv[1]) if l.strip()]
def num(f, k):
    try:
        v = float(f[k])
    except (KeyError, ValueError):
        return None
    return None if v != v else v
def fmt(v, spec):
    return "n/a" if v is None else format(v, spec)
def mfu(r):
    t, g, f = num(r, "tokens_per_s"), num(r, "gemm_tflops"), num(r, "flops_per_token")
    return None if None in (t, g, f) else 100 * t * f / (g * 1e12)
print("| model | B | run | tokens/s | ms/step | MFU % | peak alloc GiB | peak reserved GiB | device used GiB |")
print("|---|---|---|---|---|---|---|---|---|")
for r in rows:
    who = "dtrain" if r["who"] == "dtrain" else f"torch.{r['mode']}, vocab {r['vocab']}"
    print(f"| {r['model']} | {r['B']} | {who} | {fmt(num(r, 'tokens_per_s'), ',.0f')} | "
          f"{fmt(num(r, 'ms_per_step'), '.1f')} | {fmt(mfu(r), '.1f')} | {fmt(num(r, 'peak_alloc_gib'), '.2f')} | "
          f"{fmt(num(r, 'peak_reserved_gib'), '.2f')} | {fmt(num(r, 'device_used_gib'), '.2f')} |")
print()
for m in dict.fromkeys(r["model"] for r in rows):
    d = [r for r in rows if r["model"] == m and r["who"] == "dtrain"]
    p = [r for r in rows if r["model"] == m and r["who"] != "dtrain" and num(r, "tokens_per_s")]
    if not d or not p:
        print(f"ratio {m}: {'no dtrain result' if not d else 'no PyTorch result'}")
        continue
    best = max(p, key=lambda r: num(r, "tokens_per_s"))
    used = [num(d[-1], "device_used_gib"), num(best, "device_used_gib")]
    print(f"ratio {m} B={d[-1]['B']}: dtrain / torch.{best['mode']} = "
          f"{num(d[-1], 'tokens_per_s') / num(best, 'tokens_per_s'):.2f}x tokens/s (target > 1.0x); device used "
          f"{fmt(used[0], '.1f')} GiB against {fmt(used[1], '.1f')} GiB"
          f"{'' if None in used else f' ({used[0] / used[1]:.2f}x)'}")
PY
