# tap.sh - what the GPU shell tests (tests/gpu/test_*.sh) share, sourced: their
# TAP lines and the "N passed, N failed" line tests/gpu/run.sh reads, and the
# skip without a device that the C tests (tests/gpu/gpu_buffers.h) print too, so
# `make test-gpu` on a machine without a GPU says SKIP instead of failing every
# launch.  DEVICE=cpu (the curve test's script check) never skips.
pass=0 fail=0
check() { # name cmd...
  local name=$1; shift
  if "$@"; then echo "ok - $name"; pass=$((pass + 1)); else echo "not ok - $name"; fail=$((fail + 1)); fi
}
finish() { echo "$pass passed, $fail failed"; exit $((fail > 0)); }
# need_gpu NAME: with DEVICE unset or cuda and no device nvidia-smi can list, the SKIP line and exit 0.
need_gpu() {
  [ "${DEVICE:-cuda}" = cuda ] || return 0
  nvidia-smi -L >/dev/null 2>&1 && return 0
  echo "ok - # SKIP $1: no CUDA device here (nvidia-smi lists none)"
  finish
}
