#!/usr/bin/env bash
# test_gpt2_cuda.sh - `dtrain launch` of a small byte-level GPT-2 on the GPU
# (trainer.device: cuda, bf16): byte shards made by `dtrain data bytes` from
# the repository's own docs, 30 steps with CUDA graphs on, off, and with
# ddp.grad_accum 2; each must lower the loss and log tokens_per_s, GPU
# memory (NVML's gpu_mem_mib and the engine's gpu_alloc_mib) and mfu exactly
# when the GPU's peak is known (H100 SXM / H200 / A100), evaluate on the
# validation shards and print a sample; a checkpoint resumes; fp32 with
# trainer.tf32 runs; ddp.zero 1 is accepted; a batch that cannot fit stops at start with the
# out-of-memory sentence naming batch_size, exit non-zero.
# TAP lines, then "N passed, N failed" (tests/gpu/run.sh).
#   DTRAIN=path/to/dtrain
set -uo pipefail
cd "$(dirname "$0")/../.."
DTRAIN=${DTRAIN:-$PWD/bin/dtrain}
T=$(mktemp -d /tmp/dtrain-gpt2cuda.XXXXXX)
trap 'rm -rf "$T"' EXIT
. tests/gpu/tap.sh
need_gpu test_gpt2_cuda.sh

# ~2.2 MB of text: the docs ten times over (the out-of-memory case needs a
# shard longer than one batch of 1024 x 512 tokens, or the loader refuses first)
for i in 1 2 3 4 5 6 7 8 9 10; do cat README.md docs/*.md; done >"$T/text.txt"
"$DTRAIN" data bytes "$T/text.txt" -o "$T/data" --val-fraction 0.05 >"$T/data.out" 2>&1
check "dtrain data bytes makes byte shards" test -f "$T/data/train_000000.bin" -a -f "$T/data/val_000000.bin"

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null | head -n 1)
known=no
case $gpu in *H200* | *H100*HBM3* | *H100*SXM* | *A100*) known=yes ;; esac
echo "# GPU: ${gpu:-?} (peak FLOP/s known: $known)"

# spec NAME GRAPH ACCUM STEPS [extra trainer lines...]
spec() {
  local name=$1 graph=$2 accum=$3 steps=$4; shift 4
  {
    echo "name: $name"
    echo "nproc_per_node: 1"
    echo "trainer:"
    echo "  model: {type: gpt2, n_layer: 2, n_head: 2, n_embd: 64, vocab_size: 256, block_size: 64}"
    echo "  data: {dataset: tokens, train: \"$T/data/train_*.bin\", val: \"$T/data/val_*.bin\", batch_size: 8,"
    echo "         seq_len: 64}"
    echo "  steps: $steps"
    echo "  optimizer: {lr: 3e-3, betas: [0.9, 0.95], weight_decay: 0.1, grad_clip: 1.0}"
    echo "  ddp: {grad_accum: $accum}"
    echo "  eval: {every_steps: 15, batches: 4}"
    echo "  sample: {tokens: 40, prompt: \"The \", temperature: 0.8}"
    echo "  log_every_steps: 5"
    echo "  checkpoint: {every_steps: 15, keep: 2, dir: $T/ckpt-$name}"
    echo "  device: cuda"
    echo "  cuda_graph: $graph"
    for l in "$@"; do echo "  $l"; done
  } >"$T/$name.yaml"
}

# metric RUN KEY: the KEY values of RUN's training rows, one per line
metric() { sed -n "s/.*\"$2\": \([-0-9.e+]*\).*/\1/p" "$1/metrics.jsonl"; }

for c in graph:true:1 eager:false:1 accum:true:2; do
  IFS=: read -r name graph accum <<<"$c"
  spec "$name" "$graph" "$accum" 30 "amp: {dtype: bf16}"
  "$DTRAIN" launch "$T/$name.yaml" --log-dir "$T/runs" >"$T/$name.out" 2>"$T/$name.err"
  rc=$?
  check "$name: 30 steps of gpt2 on cuda (bf16, cuda_graph $graph, grad_accum $accum) exit 0" test $rc -eq 0
  [ $rc -eq 0 ] || tail -n 20 "$T/$name.err" | sed 's/^/# /'
  run=$(ls -d "$T"/runs/"$name"-* 2>/dev/null | head -n 1)
  first=$(metric "$run" loss | head -n 1) last=$(metric "$run" loss | tail -n 1)
  echo "# $name: loss ${first:-?} -> ${last:-?}"
  check "$name: the loss decreases (${first:-none} -> ${last:-none})" \
    awk -v a="${first:-0}" -v b="${last:-0}" 'BEGIN { exit !(a > 0 && b > 0 && b < a - 0.3) }'
  check "$name: training rows carry tokens_per_s" grep -q '"tokens_per_s": [0-9]' "$run/metrics.jsonl"
  check "$name: training rows carry gpu_mem_mib and gpu_alloc_mib" \
    grep -q '"gpu_mem_mib": \[[0-9.]*\], "gpu_alloc_mib": \[[0-9.]*\]' "$run/metrics.jsonl"
  if [ $known = yes ]; then
    m=$(metric "$run" mfu | tail -n 1)
    check "$name: mfu is logged on a ${gpu} (last ${m:-none})" awk -v m="${m:-0}" 'BEGIN { exit !(m > 0 && m < 1) }'
  else
    check "$name: no mfu on a GPU whose peak is not known" sh -c "! grep -q '\"mfu\"' '$run/metrics.jsonl'"
  fi
  check "$name: evaluation rows carry val_loss" grep -q '"val_loss": [0-9]' "$run/metrics.jsonl"
  check "$name: a sample is printed" grep -q "sample step" "$T/$name.out"
  check "$name: a checkpoint is written" sh -c "ls '$T/ckpt-$name'/step_*.safetensors >/dev/null 2>&1"
  grep -m1 '"tokens_per_s"' "$run/metrics.jsonl" | cut -c1-400 | sed 's/^/# /'
done

# Resume: the graph run's checkpoint at step 30 continues to 40.
spec graph true 1 40 "amp: {dtype: bf16}"
"$DTRAIN" launch "$T/graph.yaml" --log-dir "$T/runs2" >"$T/resume.out" 2>"$T/resume.err"
rc=$?
check "resume: 10 more steps from the step-30 checkpoint exit 0" test $rc -eq 0
check "resume: the run says it resumed from step 30" grep -q "resuming from .*step 30" "$T/resume.out" "$T/resume.err"
run=$(ls -d "$T"/runs2/graph-* 2>/dev/null | head -n 1)
check "resume: its first metrics row is past step 30" \
  awk -v s="$(sed -n 's/^{"step": \([0-9]*\), "epoch".*"loss".*/\1/p' "$run/metrics.jsonl" | head -n 1)" \
  'BEGIN { exit !(s > 30) }'

# fp32 GEMMs on the tensor cores
spec tf32 true 1 10 "tf32: true"
"$DTRAIN" launch "$T/tf32.yaml" --log-dir "$T/runs" >"$T/tf32.out" 2>"$T/tf32.err"
rc=$?
check "tf32: an fp32 run with trainer.tf32: true exits 0" test $rc -eq 0
[ $rc -eq 0 ] || tail -n 10 "$T/tf32.err" | sed 's/^/# /'

# ddp.zero 1 is accepted on cuda (one rank: nothing to shard; the sharded
# path needs several GPUs)
spec zero true 1 10 "amp: {dtype: bf16}"
sed -i 's/ddp: {grad_accum: 1}/ddp: {grad_accum: 1, zero: 1}/' "$T/zero.yaml"
"$DTRAIN" launch "$T/zero.yaml" --log-dir "$T/runs" >"$T/zero.out" 2>"$T/zero.err"
rc=$?
check "zero: ddp.zero 1 on one GPU exits 0" test $rc -eq 0
[ $rc -eq 0 ] || tail -n 10 "$T/zero.err" | sed 's/^/# /'

# A batch that cannot fit: 1024 x 512 tokens of a 24-layer 1024-wide model
# (some 400 GiB of bf16 activations, more than any GPU has; its 0.3 billion
# parameters with AdamW take about 5 GiB, so smaller batches fit).
cat >"$T/oom.yaml" <<EOF
name: oom
nproc_per_node: 1
trainer:
  model: {type: gpt2, n_layer: 24, n_head: 16, n_embd: 1024, vocab_size: 256, block_size: 512}
  data: {dataset: tokens, train: "$T/data/train_*.bin", batch_size: 1024, seq_len: 512}
  steps: 2
  amp: {dtype: bf16}
  device: cuda
  checkpoint: {dir: $T/ckpt-oom}
EOF
"$DTRAIN" launch "$T/oom.yaml" --log-dir "$T/runs" >"$T/oom.out" 2>"$T/oom.err"
rc=$?
check "out of memory: a batch that cannot fit exits non-zero" test $rc -ne 0
grep -h -m1 "out of GPU memory" "$T/oom.out" "$T/oom.err" | cut -c1-600 | sed 's/^/# /'
check "out of memory: one sentence with the memory asked and free" \
  grep -q "out of GPU memory: this run needs [0-9.]* GiB.*GiB free" "$T/oom.out" "$T/oom.err"
check "out of memory: the sentence names a batch_size that fits" \
  grep -q "out of GPU memory.*batch_size [0-9]* fits" "$T/oom.out" "$T/oom.err"
check "out of memory: no CUDA error code" sh -c "! grep -q 'cudaErrorMemoryAllocation\|out of memory (2)' '$T/oom.out' '$T/oom.err'"

finish
