#!/usr/bin/env bash
# curve_diag.sh - where dtrain's and PyTorch's bf16 GPT-2 loss curves part:
# not a test (tests/gpu/run.sh runs only test_*), a diagnosis for when
# tests/gpu/test_gpt2_curve.sh misses its 1% windows.  From the same initial
# weights and bytes as that test (GPT-2 124M's shape, B=8, T=512, 300 steps,
# the same AdamW and cosine schedule) it trains four curves:
#   dtrain     amp bf16, the CUDA graph, the default kernels (DTRAIN_CUDA_* pass through)
#   torch      bf16 autocast, PyTorch's defaults (the test's reference)
#   torch_fr   the same with cuBLAS's reduced-precision bf16 reductions forbidden
#              (bench/gpt2_torch.py --bf16-full-reduction)
#   torch_fp32 no autocast: the curve both bf16 runs approximate
# and prints the mean loss of each 10-step window of each, with the relative
# differences (%): dtrain and torch_fr against torch, and each bf16 curve
# against fp32, then the largest of each column.  If dtrain sits nearer
# fp32 than torch does, the windows that miss are autocast's rounding, not a
# dtrain bug; if torch_fr moves torch to dtrain, it is cuBLAS's reductions.
# About 2 minutes on an H100.  Writes the per-step losses to $OUT if set.
#   DTRAIN=path/to/dtrain  PYTHON=python3  STEPS=300  B=8  SEQ=512 (the curve test's knobs)
#   DEVICE=cpu with LAYERS=2 HEADS=2 EMBD=64 VOCAB=256 BLOCK=64 SEQ=64 STEPS=30 checks the script
#   without a GPU (tests/integration/test_gpu_scripts.sh).
set -u
case ${DTRAIN:-} in */*) DTRAIN=$(realpath -m "$DTRAIN") ;; esac
cd "$(dirname "$0")/../.." || exit 1
DTRAIN=${DTRAIN:-$PWD/bin/dtrain} PYTHON=${PYTHON:-python3} DEVICE=${DEVICE:-cuda} AMP=bf16
STEPS=${STEPS:-300} B=${B:-8} SEQ=${SEQ:-512} LR=${LR:-6e-4} MIN_LR=${MIN_LR:-6e-5} WARMUP=${WARMUP:-30} WD=${WD:-0.1}
LAYERS=${LAYERS:-12} HEADS=${HEADS:-12} EMBD=${EMBD:-768} VOCAB=${VOCAB:-50257} BLOCK=${BLOCK:-1024}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
. scripts/cudnn-env.sh
T=$(mktemp -d /tmp/dtrain-curvediag.XXXXXX)
trap 'rm -rf "$T"' EXIT
. tests/gpu/curve_common.sh
curve_text
"$DTRAIN" data bytes "$T/text.txt" -o "$T/data" --val-fraction 0 >/dev/null || { echo "curve_diag: dtrain data bytes failed"; exit 1; }
curve_shape
"$PYTHON" bench/gpt2_torch.py "${shape[@]}" --seed 1 --write-init "$T/init.safetensors" >/dev/null ||
  { echo "curve_diag: the peer cannot write the initial weights"; exit 1; }
curve_spec "$T/diag.yaml" curve-diag
"$DTRAIN" launch "$T/diag.yaml" --log-dir "$T/runs" >"$T/dtrain.out" 2>"$T/dtrain.err" || tail -n 5 "$T/dtrain.err"
"$PYTHON" - "$T" >"$T/dtrain.txt" <<'PY'
import glob, json, sys
for r in map(json.loads, open(glob.glob(sys.argv[1] + "/runs/curve-diag-*/metrics.jsonl")[0])):
    if "loss" in r:
        print("step", r["step"], "loss", r["loss"])
PY
curve_peer_args
"$PYTHON" bench/gpt2_torch.py "${peer[@]}" --dtype bf16 >"$T/torch.txt" 2>"$T/torch.err" || tail -n 3 "$T/torch.err"
"$PYTHON" bench/gpt2_torch.py "${peer[@]}" --dtype bf16 --bf16-full-reduction >"$T/torch_fr.txt" 2>"$T/torch_fr.err" ||
  tail -n 3 "$T/torch_fr.err"
"$PYTHON" bench/gpt2_torch.py "${peer[@]}" --dtype fp32 >"$T/torch_fp32.txt" 2>"$T/torch_fp32.err" || tail -n 3 "$T/torch_fp32.err"
[ -n "${OUT:-}" ] && cp "$T"/dtrain.txt "$T"/torch*.txt "$OUT"/ 2>/dev/null
"$PYTHON" - "$T" <<'PY'
import sys
T = sys.argv[1]
def read(name):
    d = {}
    for line in open(f"{T}/{name}.txt"):
        f = line.split()
        if len(f) >= 4 and f[0] == "step":
            d[int(f[1])] = float(f[3])
    return d
runs = {n: read(n) for n in ("dtrain", "torch", "torch_fr", "torch_fp32")}
def window(c, s):
    v = [c.get(i) for i in range(s - 9, s + 1)]
    return None if None in v else sum(v) / 10
pairs = [("dtrain", "torch"), ("torch_fr", "torch"), ("dtrain", "torch_fp32"), ("torch", "torch_fp32"),
         ("torch_fr", "torch_fp32")]
short = {"dtrain": "dtrain", "torch": "torch", "torch_fr": "fr", "torch_fp32": "fp32"}
print("window " + "".join(f"{n:>12}" for n in runs) + "".join(f"{short[a] + '-' + short[b]:>15}" for a, b in pairs))
worst = [0.0] * len(pairs)
for s in range(10, max(runs["torch"], default=0) + 1, 10):
    x = {n: window(c, s) for n, c in runs.items()}
    if None in x.values():
        continue
    rel = [100 * (x[a] - x[b]) / x[b] for a, b in pairs]
    worst = [max(w, abs(r)) for w, r in zip(worst, rel)]
    print(f"{s:6d} " + "".join(f"{x[n]:12.6f}" for n in runs) + "".join(f"{r:14.3f}%" for r in rel))
print("largest |difference|: " + ", ".join(f"{a}-{b} {w:.3f}%" for (a, b), w in zip(pairs, worst)))
PY
