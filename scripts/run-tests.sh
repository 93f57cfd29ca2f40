#!/usr/bin/env bash
# run-tests.sh - runs every suite and prints one closing "N passed, N failed" line.
#
# Unit tests are the cmocka binaries in $BUILD/tests/; their "[  PASSED  ] N" and
# "[  FAILED  ] N" summary lines are summed (a binary that dies before its
# summary counts as one failure).  Integration tests are tests/integration/test_*.sh;
# each prints TAP-style "ok - ..." / "not ok - ..." lines that are counted, and a
# script that exits non-zero without a "not ok" line counts as one failure.
#
#   DTRAIN=path/to/dtrain BUILD=build scripts/run-tests.sh [filter]
# A filter (substring of a test file name) runs only matching suites.
set -uo pipefail
cd "$(dirname "$0")/.."

: "${BUILD:=$PWD/build}"
: "${DTRAIN:=$PWD/bin/dtrain}"
: "${DTRAIN_TEST_TIMEOUT:=600}"
export DTRAIN BUILD
# The Python peers and oracles live in the venv scripts/install-deps.sh made.
[ -x "$PWD/.venv/bin/python3" ] && export PATH="$PWD/.venv/bin:$PATH"
filter=${1:-}

passed=0
failed=0
failed_names=()
start=$(date +%s)

run_unit() {
  local bin=$1 name out rc p f
  name=$(basename "$bin")
  out=$(timeout "$DTRAIN_TEST_TIMEOUT" "$bin" 2>&1); rc=$?
  printf '%s\n' "$out"
  p=$(printf '%s\n' "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | tail -n1)
  f=$(printf '%s\n' "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' | tail -n1)
  p=${p:-0}; f=${f:-0}
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    f=1; echo "run-tests: $name exited with status $rc before reporting a failure"
  fi
  passed=$((passed + p)); failed=$((failed + f))
  [ "$f" -gt 0 ] && failed_names+=("$name")
}

run_integration() {
  local script=$1 name out rc p f
  name=$(basename "$script" .sh)
  echo "=== $name"
  local t0=$SECONDS
  out=$(timeout "$DTRAIN_TEST_TIMEOUT" bash "$script" 2>&1); rc=$?
  printf '%s\n' "$out"
  echo "# $name: $((SECONDS - t0)) s"
  p=$(printf '%s\n' "$out" | grep -c '^ok - ' || true)
  f=$(printf '%s\n' "$out" | grep -c '^not ok - ' || true)
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    f=1; echo "run-tests: $name exited with status $rc"
  fi
  if [ "$rc" -eq 0 ] && [ "$p" -eq 0 ] && [ "$f" -eq 0 ]; then
    f=1; echo "run-tests: $name checked nothing"
  fi
  passed=$((passed + p)); failed=$((failed + f))
  [ "$f" -gt 0 ] && failed_names+=("$name")
}

for bin in "$BUILD"/tests/test_*; do
  [ -x "$bin" ] || continue
  case "$bin" in *"$filter"*) run_unit "$bin" ;; esac
done
for script in tests/integration/test_*.sh; do
  [ -f "$script" ] || continue
  case "$script" in *"$filter"*) run_integration "$script" ;; esac
done

echo
echo "run-tests: $(( $(date +%s) - start )) s"
[ ${#failed_names[@]} -gt 0 ] && echo "run-tests: failing suites: ${failed_names[*]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
