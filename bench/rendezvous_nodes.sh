#!/usr/bin/env bash
# rendezvous_nodes.sh - the rendezvous of NODES x PER_NODE PyTorch-style store
# clients (default 2048 nodes of 8: 16,384), simulated on one machine, against
# three stores in the same run:
#
#   pytorch   PyTorch's own libuv TCPStore server (torch.distributed.TCPStore,
#             bench/rendezvous_pytorch_server.py): one connection per client
#   direct    dtrain's coordinator with a job token, every client connecting to
#             it and presenting the token (AUTH) itself: one connection per client
#   endpoint  dtrain's coordinator with a job token behind one store endpoint per
#             node (launcher/agent/agent_endpoint.c, as each node's agent serves
#             its ranks): the clients present no token, each endpoint admits only
#             its own node's processes (the kernel names each client's socket) and
#             carries them over one connection: the coordinator holds NODES
#             connections instead of NODES x PER_NODE
#
#   bench/rendezvous_nodes.sh [NODES [PER_NODE]]
#   REPEAT=3 READ=K SHARDS=S bench/rendezvous_nodes.sh
#
# Every client (tests/helpers/rendezvous_clients.c, the same C program for all
# three) connects, sends VALIDATE (and AUTH on the direct path), SETs its key,
# passes PyTorch's store barrier (ADD on a counter, the last arrival SETs a key,
# everyone WAITs on it) and reads READ keys with MULTI_GET (default 1: rank 0's,
# as NCCL's unique id is read; READ=all reads every client's).  Each node's
# clients are one process of their own (NODES processes, as NODES nodes' ranks
# are apart); the endpoints run in SHARDS processes (default: 1024 nodes each,
# so that each stays under the open-file limit), each node's under a process
# standing in for its agent.  Every client process is started first and waits;
# the clock starts when all are released at once (a shared flock) and stops
# when the last client has read its keys.
#
# A client whose connection the direct path's coordinator closes before its
# token was accepted (its cap on connections in their handshake, reached when
# 16,384 arrive at once) connects again, as PyTorch's client retries; nothing
# of it was applied.  Prints, per store: the wall time (best of REPEAT), the barrier's time, the
# stores' CPU seconds (the endpoints' apart: on a cluster each node pays its
# own share), and the connections the central server holds; then the ratios.
# Needs ulimit -n above NODES x PER_NODE + 64 for the pytorch and direct runs.
set -euo pipefail
case ${DTRAIN:-} in */*) DTRAIN=$(realpath -m "$DTRAIN") ;; esac
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
DTRAIN=${DTRAIN:-bin/dtrain}
PY=${PYTHON:-python3}
CLIENTS=$(realpath -m "$BUILD/tests/helpers/rendezvous_clients")
ENDPOINTS=$(realpath -m "$BUILD/tests/helpers/store_endpoints")
NODES=${1:-2048}
PER=${2:-8}
N=$((NODES * PER))
REPEAT=${REPEAT:-1}
READ=${READ:-1}
[ "$READ" = all ] && READ=$N
SHARDS=${SHARDS:-$(( (NODES + 1023) / 1024 ))}

[ -x "$CLIENTS" ] && [ -x "$ENDPOINTS" ] && [ -x "$DTRAIN" ] ||
  { echo "rendezvous_nodes.sh: build first (make all; the helpers in $BUILD/tests/helpers)" >&2; exit 1; }
"$PY" -c 'import torch.distributed' 2>/dev/null || { echo "rendezvous_nodes.sh: PyTorch is needed (pip install torch)" >&2; exit 1; }
command -v flock >/dev/null || { echo "rendezvous_nodes.sh: flock (util-linux) is needed" >&2; exit 1; }
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if [ "$(ulimit -n)" -lt $((N + 64)) ]; then
  echo "rendezvous_nodes.sh: ulimit -n is $(ulimit -n): the pytorch and direct servers need $((N + 64)) descriptors" >&2
  exit 1
fi

. bench/rendezvous_servers.sh
# Established connections whose server end is 127.0.0.1:PORT.
conns() { awk -v p=":$(printf '%04X' "$1")" 'substr($2, length($2) - 4) == p && $4 == "01"' /proc/net/tcp | wc -l; }

# The endpoints, SHARDS processes of NODES/SHARDS nodes each; their clients
# start and wait for the go.  EPIDS: the shards' pids.
start_endpoints() {
  EPIDS=()
  local per=$(( (NODES + SHARDS - 1) / SHARDS )) base=0
  while [ "$base" -lt "$NODES" ]; do
    local k=$(( NODES - base < per ? NODES - base : per ))
    "$ENDPOINTS" --coordinator "127.0.0.1:$PORT" --nodes "$k" --per-node --node-base "$base" \
      --name "node" --connect-timeout 60 -- \
      "$CLIENTS" --clients "$PER" --world "$N" --read "$READ" --server pytorch --sync "$W" \
      >>"$W/lines" 2>>"$W/clients.err" &
    EPIDS+=($!); pids+=($!)
    base=$((base + k))
  done
}

# run MODE -> "wall_s barrier_s server_cpu_s endpoints_cpu_s server_fds"
run() {
  local mode=$1
  if [ "$mode" = pytorch ]; then start_pytorch; else start_dtrain; fi
  rm -f "$W/ready" "$W/lines"; mkfifo "$W/ready"; : >"$W/go"; : >"$W/clients.err"
  exec 3<>"$W/ready" 9>"$W/go"
  flock -x 9
  local c0; c0=$(cpu_s "$SPID")
  EPIDS=()
  case $mode in
    pytorch) "$CLIENTS" --port "$PORT" --clients "$N" --procs "$NODES" --read "$READ" --server pytorch \
               --sync "$W" >"$W/lines" 2>"$W/clients.err" & ;;
    direct)  "$CLIENTS" --port "$PORT" --clients "$N" --procs "$NODES" --read "$READ" --server pytorch \
               --auth yes --sync "$W" >"$W/lines" 2>"$W/clients.err" & ;;
    endpoint) start_endpoints; sleep 0.1 ;;
  esac
  local cpid=$! rc=0
  # Every client process ready (each wrote a byte), then all released at once.
  if ! timeout 600 head -c "$NODES" <&3 >/dev/null; then
    echo "rendezvous_nodes.sh: $mode: the clients did not all start" >&2; tail -5 "$W/clients.err" >&2; exit 1
  fi
  local e0=0 e fds
  # The endpoints connected at their start: the coordinator's connections now.
  fds=$(conns "$PORT")
  for e in "${EPIDS[@]}"; do e0=$(awk -v a="$e0" -v b="$(cpu_s "$e")" 'BEGIN{print a + b}'); done
  flock -u 9
  if [ "$mode" = endpoint ]; then
    local w; for w in "${EPIDS[@]}"; do wait "$w" || rc=$?; done
  else
    wait "$cpid" || rc=$?
  fi
  exec 3>&- 9>&-
  local c1; c1=$(cpu_s "$SPID")
  local e1; e1=$(awk -F= '/^store_endpoints: cpu_s=/ {t += $2} END {print t + 0}' "$W/clients.err")
  stop_server
  local got; got=$(grep -c '^server=' "$W/lines" || true)
  if [ "$rc" != 0 ] || [ "$got" != "$NODES" ]; then
    echo "rendezvous_nodes.sh: $mode: the clients failed (status $rc, $got of $NODES processes finished)" >&2
    grep -v '^store_endpoints: cpu_s=' "$W/clients.err" | sort | uniq -c | sort -rn | head -5 >&2
    echo fail; return
  fi
  [ "$mode" = endpoint ] || fds=$N
  awk -v c0="$c0" -v c1="$c1" -v e0="$e0" -v e1="$e1" -v fds="$fds" '
    { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
      if (NR == 1 || v["start"] < s) s = v["start"]
      if (v["end"] > e) e = v["end"]; if (v["barrier_at"] > b) b = v["barrier_at"]; r += v["retries"] }
    END { printf "%.3f %.3f %.2f %.2f %s %d\n", e - s, b - s, c1 - c0, e1 - e0, fds, r }' "$W/lines"
}

best() { sort -n | head -n1; }
: >"$W/pytorch.r"; : >"$W/direct.r"; : >"$W/endpoint.r"
for _ in $(seq "$REPEAT"); do
  for m in pytorch direct endpoint; do run "$m" >>"$W/$m.r"; done
done
printf '%-9s %9s %10s %12s %14s %8s %8s\n' store wall_s barrier_s server_cpu_s endpoints_cpu_s conns retries
declare -A wall
for m in pytorch direct endpoint; do
  if grep -q fail "$W/$m.r"; then printf '%-9s %9s\n' "$m" failed; wall[$m]=fail; continue; fi
  read -r w b c e f r < <(best <"$W/$m.r")
  wall[$m]=$w
  [ "$m" = endpoint ] || e=-
  printf '%-9s %9s %10s %12s %14s %8s %8s\n' "$m" "$w" "$b" "$c" "$e" "$f" "$r"
done
ratio() { [ "${wall[$1]}" != fail ] && [ "${wall[$2]}" != fail ] && awk -v a="${wall[$1]}" -v b="${wall[$2]}" 'BEGIN{printf "%.2fx", a / b}' || echo n/a; }
echo "pytorch/endpoint $(ratio pytorch endpoint)   pytorch/direct $(ratio pytorch direct)   direct/endpoint $(ratio direct endpoint)   (> 1: the second is faster)"
echo "($NODES nodes x $PER clients = $N, READ=$READ, best of $REPEAT; loopback, $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg);"
echo " conns: the central server's connections: one per client (pytorch, direct), or those the coordinator"
echo " held once every endpoint had connected (endpoint))"
if grep -q fail "$W/pytorch.r" "$W/direct.r" "$W/endpoint.r"; then
  echo "rendezvous_nodes.sh: a run failed; the figures are of the others" >&2
  exit 1
fi
