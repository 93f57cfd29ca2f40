#!/usr/bin/env bash
# test_gpu_bench_scripts.sh - the GPU benchmarks still run, here on the CPU
# with a tiny GPT-2: bench/gpt2_gpu.sh (dtrain against several PyTorch peers,
# one of them with a padded vocabulary) and bench/gpt2_gpu_sizes.sh (the
# larger models' table); and without a GPU the GPU shell tests skip, as the C
# ones do.  Device time is scarce: a script that breaks should fail here, not
# in a GPU call.  The numbers on a CPU mean nothing and are not checked; the
# lines their readers parse are.
. "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/../.."
# PyTorch on one thread: its intra-op pool spins at every op's barrier, so beside a CPU hog on two
# cores an 80-step run of this tiny model took 146 s instead of seconds; the numbers mean nothing here.
export OMP_NUM_THREADS=1

if ! python3 -c 'import torch, numpy' 2>/dev/null; then
  not_ok "python3 has torch and numpy (scripts/install-deps.sh installs them into .venv)"
  exit 1
fi
tiny=(LAYERS=2 HEADS=2 EMBD=64 VOCAB=256 BLOCK=64 SEQ=64)

env "${tiny[@]}" DEVICE=cpu BATCHES=4 PROFILE_BATCH=4 PEERS="eager/256 eager/320" NSYS=0 CUPTI=0 DTRAIN="$DTRAIN" \
  timeout "$(limit_s 300)" bench/gpt2_gpu.sh >"$T/bench.out" 2>&1
contains "$T/bench.out" '^dtrain mode=dtrain vocab=256 B=4 T=64 steps=30 tokens_per_s=[0-9.]+ ' \
  "bench/gpt2_gpu.sh measures dtrain from its metrics rows"
contains "$T/bench.out" '^gpt2_torch mode=eager vocab=320 B=4 ' "bench/gpt2_gpu.sh runs the peer with a padded vocabulary"
contains "$T/bench.out" '^ratio B=4: dtrain / the fastest PyTorch \(PyTorch eager, vocab (256|320)\) = [0-9.]+x tokens/s' \
  "bench/gpt2_gpu.sh prints the ratio against the fastest peer"

env "${tiny[@]}" DEVICE=cpu SIZES=350m:2 PEERS=eager/256 STEPS=5 DTRAIN="$DTRAIN" \
  timeout "$(limit_s 300)" bench/gpt2_gpu_sizes.sh >"$T/sizes.out" 2>&1
contains "$T/sizes.out" '^\| 350m \| 2 \| dtrain \| [0-9,]+ \|' "bench/gpt2_gpu_sizes.sh tables each size"
contains "$T/sizes.out" '^ratio 350m B=2: dtrain / torch.eager = [0-9.]+x' "bench/gpt2_gpu_sizes.sh prints each size's ratio"

# Without a device, each GPU shell test says SKIP and passes (tests/gpu/tap.sh),
# as the C ones do, so `make test-gpu` here reads as skipped, not as 44 failures.
if nvidia-smi -L >/dev/null 2>&1; then
  ok "# SKIP a GPU is present here: the GPU shell tests would run in full (make test-gpu)"
else
  for t in tests/gpu/test_*.sh; do
    env -u DEVICE DTRAIN="$DTRAIN" timeout "$(limit_s 30)" "$t" >"$T/skip.out" 2>&1
    rc=$?
    check "$(basename "$t") without a GPU: one SKIP line, 0 passed, 0 failed, exit 0 (got $rc)" \
      sh -c "[ $rc -eq 0 ] && grep -q '^ok - # SKIP ' '$T/skip.out' && tail -n 1 '$T/skip.out' | grep -qx '0 passed, 0 failed'"
  done
fi
