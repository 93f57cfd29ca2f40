#!/usr/bin/env bash
# test_gpu_scripts.sh - the GPU machine's curve scripts still run, here on the
# CPU with a tiny GPT-2 (each has a DEVICE=cpu mode for this): the curve test
# (tests/gpu/test_gpt2_curve.sh, bf16 windows then its fp32 pass) and the
# curve diagnosis (tests/gpu/curve_diag.sh).  Device time is scarce: a script
# that breaks (a variable unset under set -u, a renamed metrics key) should
# fail here, not in a GPU call.  Their numbers on a CPU mean nothing and are
# not checked; that each one gets to its end, with the lines its readers
# parse, is.  The benchmarks' check is test_gpu_bench_scripts.sh (a suite of
# its own, so the two run side by side).
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
# The timeouts only stop a hang: the curve test is ~50 s of CPU and took 85 s on 2 loaded
# cores (make test runs suites side by side), past the 120 s it had under a heavier load.

env "${tiny[@]}" DEVICE=cpu STEPS=80 DTRAIN="$DTRAIN" timeout "$(limit_s 300)" tests/gpu/test_gpt2_curve.sh \
  >"$T/curve.out" 2>&1
echo "# test_gpt2_curve.sh: $(tail -n 1 "$T/curve.out")"
contains "$T/curve.out" '^2[0-9] passed, 0 failed$' \
  "tests/gpu/test_gpt2_curve.sh runs on the CPU to its end, bf16 windows and fp32 pass, all passing"
contains "$T/curve.out" '^# noise floor: ' "the curve test prints PyTorch's noise floor beside the curves"

env "${tiny[@]}" DEVICE=cpu STEPS=30 DTRAIN="$DTRAIN" timeout "$(limit_s 300)" tests/gpu/curve_diag.sh \
  >"$T/diag.out" 2>&1
contains "$T/diag.out" '^    30 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ ' \
  "tests/gpu/curve_diag.sh trains the four curves and prints their windows"
contains "$T/diag.out" '^largest \|difference\|: dtrain-torch [0-9.]+%' "curve_diag.sh ends with the largest differences"
