#!/usr/bin/env bash
# test_cuda_nogpu.sh - trainer.device: cuda where it cannot run (CI: nvcc but no
# GPU, or a build without CUDA): configs/cuda.yaml and configs/gpt2-124m.yaml
# validate, and a worker of a cuda job stops with one sentence naming
# trainer.device cuda (no crash, no hang).  On a machine with a GPU the
# second check says so and tests/gpu (make test-gpu) covers the real runs.
. "$(dirname "$0")/lib.sh"

expect_status 0 "configs/cuda.yaml validates" "$DTRAIN" validate configs/cuda.yaml
contains "$T/last.out" "trainer: mlp on cuda" "validate reports the trainer on cuda"
expect_status 0 "configs/gpt2-124m.yaml validates (its FineWeb shards need not exist)" \
  "$DTRAIN" validate configs/gpt2-124m.yaml
contains "$T/last.out" "trainer: gpt2 on cuda, tokens" "validate reports gpt2 on cuda reading tokens"

cat >"$T/cuda.yaml" <<'EOF'
name: cuda-here
trainer:
  model: {hidden: [16]}
  data: {batch_size: 32}
  steps: 2
  device: cuda
EOF
if nvidia-smi -L >/dev/null 2>&1; then
  ok "# SKIP a GPU is present here: tests/gpu/test_launch.sh runs cuda jobs (make test-gpu)"
else
  mkdir -p "$T/run"
  expect_status 1 "a cuda job's worker on a machine without a usable GPU exits 1" \
    sh -c "cd '$T/run' && exec timeout 60 '$DTRAIN' worker '$T/cuda.yaml'"
  contains "$T/last.err" "trainer.device cuda" "the message names trainer.device cuda"
fi
