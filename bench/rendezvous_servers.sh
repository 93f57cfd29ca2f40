# rendezvous_servers.sh - the stores bench/rendezvous.sh and bench/rendezvous_nodes.sh time,
# each started fresh on a port of 127.0.0.1 the kernel picks: dtrain's coordinator (with a job
# token) and PyTorch's libuv TCPStore server (bench/rendezvous_pytorch_server.py).
#
# Sourced by both, after their checks: makes the scratch directory W and the pids array (an exit
# trap stops what is in it and removes W), exports DTRAIN_JOB_TOKEN, and defines
#   start_dtrain, start_pytorch   start one server: SPID its pid, PORT its port
#   stop_server                   end it
#   cpu_s PID                     the CPU seconds a process has used (user + system)
# The caller sets DTRAIN and PY.  PyTorch's server reverse-resolves each client on its loop
# thread: it runs with getnameinfo() made numeric (bench/numeric_getnameinfo.c), so a lost DNS
# answer (5 s each) stays out of its figure and nothing leaves the machine.
bench=${0##*/}
W=$(mktemp -d /tmp/dtrain-bench.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; rm -rf "$W"; }
trap cleanup EXIT
cc -shared -fPIC -O2 -o "$W/numeric_getnameinfo.so" bench/numeric_getnameinfo.c -ldl

cpu_s() { awk '{printf "%.2f", ($14 + $15) / '"$(getconf CLK_TCK)"'}' "/proc/$1/stat"; }

DTRAIN_JOB_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
export DTRAIN_JOB_TOKEN

start_dtrain() {
  "$DTRAIN" coordinator --port 0 --host 127.0.0.1 >"$W/d.out" 2>"$W/d.err" &
  SPID=$!; pids+=("$SPID")
  for _ in $(seq 200); do
    PORT=$(sed -n 's/^dtrain coordinator listening on [^ ]*:\([0-9]*\) .*/\1/p' "$W/d.out")
    [ -n "$PORT" ] && return 0; sleep 0.02
  done
  echo "$bench: dtrain coordinator did not start" >&2; cat "$W/d.err" >&2; exit 1
}

# The server reads its stdin until EOF: a FIFO held open on descriptor 8 until stop_server.
start_pytorch() {
  rm -f "$W/in"; mkfifo "$W/in"
  LD_PRELOAD="$W/numeric_getnameinfo.so" "$PY" bench/rendezvous_pytorch_server.py <"$W/in" >"$W/p.out" 2>"$W/p.err" &
  SPID=$!; pids+=("$SPID")
  exec 8>"$W/in"
  for _ in $(seq 500); do
    PORT=$(head -n1 "$W/p.out" 2>/dev/null || true)
    [ -n "$PORT" ] && return 0; sleep 0.02
  done
  echo "$bench: PyTorch server did not start" >&2; cat "$W/p.err" >&2; exit 1
}

stop_server() { exec 8>&- 2>/dev/null || true; kill "$SPID" 2>/dev/null || true; wait "$SPID" 2>/dev/null || true; }
