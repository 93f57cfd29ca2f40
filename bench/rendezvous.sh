#!/usr/bin/env bash
# rendezvous.sh - N clients connect, authenticate, set a key, pass a barrier and
# read all keys, on loopback: dtrain's coordinator and PyTorch's libuv TCPStore
# server, same client program (tests/helpers/rendezvous_clients.c), same run.
#
#   bench/rendezvous.sh [N ...]          default: 256 1024 4096
#   REPEAT=3 bench/rendezvous.sh         best of 3 per server and N
#
# Prints one line per N: wall time for each server (best of REPEAT), their
# ratio, and the server processes' CPU seconds, which a machine shared with
# other work perturbs less than wall time.  Target: 4096 clients under 1 s.
# For PyTorch the barrier is its store barrier: ADD on a counter, the last
# arrival SETs a key, everyone WAITs on it.  PyTorch has no token; dtrain's
# clients present one (AUTH), so dtrain does the extra work.  PyTorch's server
# runs with getnameinfo() made numeric (bench/numeric_getnameinfo.c): it
# reverse-resolves every client on its loop thread, and here a lost DNS
# answer would add 5 s per lost query to its figure.
set -euo pipefail
case ${DTRAIN:-} in */*) DTRAIN=$(realpath -m "$DTRAIN") ;; esac # relative to the caller: resolve before the cd
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
DTRAIN=${DTRAIN:-bin/dtrain}
PY=${PYTHON:-python3}
CLIENTS=$BUILD/tests/helpers/rendezvous_clients
REPEAT=${REPEAT:-3}
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(256 1024 4096)

[ -x "$CLIENTS" ] && [ -x "$DTRAIN" ] || { echo "rendezvous.sh: build first (make all $CLIENTS)" >&2; exit 1; }
"$PY" -c 'import torch.distributed' 2>/dev/null || { echo "rendezvous.sh: PyTorch is needed (pip install torch)" >&2; exit 1; }

max=0; for n in "${sizes[@]}"; do [ "$n" -gt "$max" ] && max=$n; done
need=$((2 * max + 64))
if [ "$(ulimit -n)" -lt "$need" ]; then
  ulimit -n "$need" 2>/dev/null || { echo "rendezvous.sh: ulimit -n is $(ulimit -n), $need needed" >&2; exit 1; }
fi
somax=$(cat /proc/sys/net/core/somaxconn 2>/dev/null || echo 4096)
[ "$somax" -ge "$max" ] || echo "rendezvous.sh: note: net.core.somaxconn=$somax < $max clients; connects may be retried"

# The two servers, started fresh per (server, N, repeat) so no run sees another's keys.
. bench/rendezvous_servers.sh

# run SERVER N -> prints "wall_s cpu_s"
run() {
  local server=$1 n=$2 line
  if [ "$server" = dtrain ]; then start_dtrain; else start_pytorch; fi
  local c0 rc=0; c0=$(cpu_s "$SPID")
  line=$("$CLIENTS" --port "$PORT" --clients "$n" --server "$server" --connect-window "${CONNECT_WINDOW:-0}") || rc=$?
  if [ "$rc" != 0 ]; then
    echo "rendezvous.sh: $server, $n clients: the client program failed (status $rc)" >&2
    echo "$server $n" >>"$W/failures"
    stop_server; return
  fi
  local c1; c1=$(cpu_s "$SPID")
  stop_server
  echo "$(sed -n 's/.*total_s=\([0-9.]*\).*/\1/p' <<<"$line") $(awk -v a="$c0" -v b="$c1" 'BEGIN{printf "%.2f", b - a}')"
}

best() { sort -n | head -n1 | grep . || echo fail; }

printf '%-8s %12s %12s %8s %14s %14s\n' clients dtrain_s pytorch_s ratio dtrain_cpu_s pytorch_cpu_s
for n in "${sizes[@]}"; do
  : >"$W/dt"; : >"$W/pt"
  for _ in $(seq "$REPEAT"); do
    run dtrain "$n" >>"$W/dt"
    run pytorch "$n" >>"$W/pt"
  done
  dw=$(awk '{print $1}' "$W/dt" | best); dc=$(awk '{print $2}' "$W/dt" | best)
  pw=$(awk '{print $1}' "$W/pt" | best); pc=$(awk '{print $2}' "$W/pt" | best)
  ratio=n/a
  [ "$dw" != fail ] && [ "$pw" != fail ] && ratio=$(awk -v d="$dw" -v p="$pw" 'BEGIN{ printf "%.1fx", p / d }')
  printf '%-8s %12s %12s %8s %14s %14s\n' "$n" "$dw" "$pw" "$ratio" "$dc" "$pc"
done
echo "(best of $REPEAT runs; ratio = PyTorch time / dtrain time; loopback, $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg))"
if [ -s "$W/failures" ]; then
  echo "rendezvous.sh: $(wc -l <"$W/failures") run(s) failed; the figures are of the others" >&2
  exit 1
fi
