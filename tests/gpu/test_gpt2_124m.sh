#!/usr/bin/env bash
# test_gpt2_124m.sh - configs/gpt2-124m.yaml as a user launches it on one GPU:
# `dtrain launch` in a directory whose data/fineweb10B holds llm.c shards (here
# random GPT-2 ids from bench/token_shards.py, as FineWeb's would be laid out),
# a few steps of the config's own batch (32 x 1024, grad_accum 16): the
# console's live line and metrics.jsonl carry tokens/s, MFU and GPU memory; a
# checkpoint written mid-run resumes bit-identically (the final checkpoint of a
# run resumed from step 10 is the same file as the uninterrupted run's, with
# the kernels that promise the same bits every run: DTRAIN_CUDA_TUNE=0 and
# DTRAIN_CUDA_ATTN=cudnn, docs/gpu.md; the default's atomic dQ and timed GEMM
# choices differ in the last bits from run to run, resumed or not).
# TAP lines, then "N passed, N failed" (tests/gpu/run.sh).
#   DTRAIN=path/to/dtrain  STEPS=20 (the uninterrupted runs; the resume starts at STEPS/2)
set -uo pipefail
cd "$(dirname "$0")/../.."
DTRAIN=${DTRAIN:-$PWD/bin/dtrain}
case $DTRAIN in /*) ;; *) DTRAIN=$PWD/$DTRAIN ;; esac
STEPS=${STEPS:-20}
HALF=$((STEPS / 2))
T=$(mktemp -d /tmp/dtrain-gpt2-124m.XXXXXX)
trap 'rm -rf "$T"' EXIT
. tests/gpu/tap.sh
need_gpu test_gpt2_124m.sh
export NCCL_NVLS_ENABLE=0
PY=${PYTHON:-python3}

# The config's data paths, relative to where launch runs: 32 x 1024 x 16 tokens a step.
mkdir -p "$T/work/data/fineweb10B"
"$PY" bench/token_shards.py -o "$T/work/data/fineweb10B" --name fineweb_train \
  --tokens $((32 * 1024 * 16 * STEPS + 1)) --seed 0 >/dev/null &&
  "$PY" bench/token_shards.py -o "$T/work/data/fineweb10B" --name fineweb_val --tokens $((32 * 1024 * 4 + 1)) \
    --seed 1 >/dev/null
check "bench/token_shards.py writes train and val shards where configs/gpt2-124m.yaml reads them" \
  test -s "$T/work/data/fineweb10B/fineweb_train_000000.bin" -a -s "$T/work/data/fineweb10B/fineweb_val_000000.bin"

# launch NAME STEPS CKPT_DIR [launch args...]: the config as shipped, shortened, with the
# variables in KERNELS; output in $T/NAME.{out,err}
KERNELS=()
launch() {
  local name=$1 steps=$2 ckpt=$3; shift 3
  (cd "$T/work" && env "${KERNELS[@]}" "$DTRAIN" launch "$OLDPWD/configs/gpt2-124m.yaml" --log-dir "$T/runs-$name" \
    --set trainer.steps="$steps" --set trainer.checkpoint.every_steps="$HALF" --set trainer.checkpoint.dir="$ckpt" \
    --set trainer.eval.every_steps="$HALF" --set trainer.eval.batches=2 --set trainer.log_every_steps=2 "$@") \
    >"$T/$name.out" 2>"$T/$name.err"
}

# 1. As a user runs it: the defaults (cuDNN attention with its atomic dQ, timed GEMMs).
launch user "$STEPS" "$T/ckpt-user"
rc=$?
check "configs/gpt2-124m.yaml: $STEPS steps of 32 x 1024 x 16 tokens exit 0 (got $rc)" test $rc -eq 0
[ $rc -eq 0 ] || tail -n 15 "$T/user.err" | sed 's/^/    /'
run=$(ls -d "$T"/runs-user/gpt2-124m-* 2>/dev/null | head -n 1)
m=${run:-$T}/metrics.jsonl
check "metrics.jsonl rows carry tokens_per_s, mfu, gpu_mem_mib and gpu_alloc_mib" \
  "$PY" -c "
import json, sys
rows = [json.loads(l) for l in open('$m') if '\"loss\"' in l]
last = rows[-1]
ok = all(isinstance(last.get(k), (int, float, list)) for k in ('tokens_per_s', 'mfu', 'gpu_mem_mib', 'gpu_alloc_mib'))
print('# last row:', {k: last.get(k) for k in ('step', 'loss', 'tokens_per_s', 'mfu', 'gpu_mem_mib', 'gpu_alloc_mib')})
sys.exit(0 if ok and 0 < last['mfu'] < 1 else 1)"
check "rank 0's line shows tokens/s, MFU and GPU memory" \
  grep -qE 'tok(ens)?/s.*MFU [0-9.]+%.*GPU [0-9.]+ GiB' "$T/user.out" "$T/user.err"
grep -m1 -E 'MFU [0-9.]+%' "$T/user.out" "$T/user.err" | sed 's/^/# /'
check "the launcher's live line shows the rate" grep -qE '^\[dtrain\].*(tok/s|tokens/s)' "$T/user.out" "$T/user.err"
check "a validation loss is logged" grep -q '"val_loss": [0-9]' "$m"

# 2. Resume, bit for bit: uninterrupted to STEPS against a copy of its step-HALF checkpoint resumed to STEPS.
KERNELS=(DTRAIN_CUDA_TUNE=0 DTRAIN_CUDA_ATTN=cudnn)
launch whole "$STEPS" "$T/ckpt-whole"
rc=$?
check "deterministic kernels: $STEPS uninterrupted steps exit 0 (got $rc)" test $rc -eq 0
half=$(printf '%s/step_%08d.safetensors' "$T/ckpt-whole" "$HALF")
full=$(printf 'step_%08d.safetensors' "$STEPS")
mkdir -p "$T/ckpt-resumed" && cp "$half" "$T/ckpt-resumed/" 2>/dev/null
check "the run kept its step-$HALF checkpoint" test -s "$T/ckpt-resumed/$(basename "$half")"
launch resumed "$STEPS" "$T/ckpt-resumed"
rc=$?
check "resumed from step $HALF to $STEPS exit 0 (got $rc)" test $rc -eq 0
check "the resumed run says it resumed from step $HALF" grep -q "resuming from .*step $HALF" "$T/resumed.out" "$T/resumed.err"
check "the resumed run's step-$STEPS checkpoint is byte-identical to the uninterrupted run's" \
  cmp "$T/ckpt-whole/$full" "$T/ckpt-resumed/$full"
losses() { "$PY" -c "
import json
print(' '.join(repr(r['loss']) for r in map(json.loads, open('$1')) if 'loss' in r and r['step'] > $HALF + 2))"; }
w=$(ls -d "$T"/runs-whole/gpt2-124m-* 2>/dev/null | head -n 1) r=$(ls -d "$T"/runs-resumed/gpt2-124m-* 2>/dev/null | head -n 1)
lw=$(losses "${w:-$T}/metrics.jsonl" 2>/dev/null) lr=$(losses "${r:-$T}/metrics.jsonl" 2>/dev/null)
echo "# losses after step $((HALF + 2)): uninterrupted ${lw:-none}; resumed ${lr:-none}"
check "the losses logged after step $((HALF + 2)) are the same numbers in both runs" test -n "$lw" -a "$lw" = "$lr"
finish
