#!/usr/bin/env bash
# test_footprint.sh - the control plane stays small: the launcher, agent and
# coordinator must not load the GPU math libraries (cuBLASLt alone is ~200 MB
# resident once relocated), or a memory-limited job's OOM killer picks the
# launcher instead of the rank that ran away, and every start-up pays for it.
. "$(dirname "$0")/lib.sh"

check "bin/dtrain does not link libcublasLt (it is loaded on first GEMM)" \
  sh -c "! readelf -d '$DTRAIN' | grep -q 'NEEDED.*libcublasLt'"

"$DTRAIN" coordinator --port 0 --host 127.0.0.1 --auth none >"$T/coord.out" 2>&1 &
pid=$!
for _ in $(seq 50); do grep -q . "$T/coord.out" && break; sleep 0.1; done
hwm=$(awk '/^VmHWM:/ {print $2}' /proc/$pid/status 2>/dev/null)
kill $pid; wait $pid 2>/dev/null
check "a running coordinator's peak resident memory is under 32 MB (got ${hwm:-?} kB)" \
  test "${hwm:-999999}" -lt 32768
