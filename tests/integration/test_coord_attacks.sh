# test_coord_attacks.sh - issue 26's attacks on the coordinator, each with the
# coordinator's resident memory checked against a stated bound (64 MiB, plus
# the stored data where there is some) and a client with the token served
# while it runs (docs/security.md):
#   1. nine bytes (VALIDATE, PING) from outside a `dtrain launch` job do not
#      stop it; from a rank of the job, they still stop it at once with the
#      `auth: none` message;
#   2. memory before authentication: idle, slow and large-frame connections
#      without the token;
#   3. slow senders of 131072-key requests: the coordinator's CPU stays low;
#   4. 200 pipelined GETs of an 8 MiB value whose answers are never read;
#   5. MULTI_GET answers of 96 MiB (refused) and of 40 MiB (the cache does
#      not keep them after the clients leave).
# The attacks are tests/integration/coord_attack.py.  Deadlines themselves
# (10 s handshake, 30 s request) are tested with short values in
# tests/unit/test_coord_limits.c.
. "$(dirname "$0")/lib.sh"

PY=${PYTHON:-python3}
ATTACK="$(cd "$(dirname "$0")" && pwd)/coord_attack.py"
PROBE=${BUILD:-build}/tests/helpers/store_probe
[ -x "$PROBE" ] || { not_ok "store_probe helper is built ($PROBE)"; exit 0; }
BOUND_MIB=64
# Under `make asan` freed memory waits in AddressSanitizer's quarantine (256 MiB
# by default) to catch use after free: resident memory would measure the
# sanitizer, not the coordinator.  Without the quarantine the bounds hold as
# they do for the plain build; other builds ignore the variable.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=0:thread_local_quarantine_size_kb=0"

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT

rss_mib() { awk '/^VmRSS:/ {printf "%d", $2 / 1024}' "/proc/$1/status"; }
cpu_s() { awk '{printf "%.2f", ($14 + $15) / '"$(getconf CLK_TCK)"'}' "/proc/$1/stat"; }

# under_bound WHAT PID EXTRA_MIB: the process's VmRSS is under 64 MiB + EXTRA.
under_bound() {
  local rss; rss=$(rss_mib "$2")
  check "$1: coordinator resident memory ${rss} MiB < $((BOUND_MIB + $3)) MiB" test "$rss" -lt $((BOUND_MIB + $3))
}

# --- 1. nine bytes against a launched job -----------------------------------
job() {
  local name=$1; shift
  { echo "name: $name"; echo "scheduler: local"; echo "log_dir: $T/runs"; echo "max_restarts: 5"; printf '%s\n' "$@"; } >"$T/$name.yaml"
}
job outsider 'nproc_per_node: 2' \
  "command: [bash, -c, 'echo \$MASTER_PORT > $T/port.\$RANK; sleep 4']"
"$DTRAIN" launch "$T/outsider.yaml" >"$T/outsider.out" 2>"$T/outsider.err" &
LPID=$!
for _ in $(seq 100); do [ -s "$T/port.0" ] && break; sleep 0.05; done
port=$(cat "$T/port.0" 2>/dev/null)
check "the job's coordinator port is known ($port)" test -n "$port"
"$PY" "$ATTACK" nine "$port" 20 | sed 's/^/# /'
under_bound "nine bytes from outside" "$LPID" 0
wait "$LPID"
check "VALIDATE+PING from outside the job does not stop it (exit $?)" test "$?" = 0
if grep -q "Stopping the job" "$T/outsider.err"; then not_ok "the launcher did not stop the job"
else ok "the launcher did not stop the job"; fi
contains "$T/outsider.err" "PING before the job token" "the coordinator logged the outsider's refusals"

# A rank that speaks like PyTorch's client and then waits, as PyTorch's
# client would retry until its timeout.
job insider 'nproc_per_node: 1' \
  "command: [bash, -c, '$PY $ATTACK nine \$MASTER_PORT 1; sleep 30']"
start=$(date +%s)
timeout 60 "$DTRAIN" launch "$T/insider.yaml" >"$T/insider.out" 2>"$T/insider.err"
st=$?
took=$(( $(date +%s) - start ))
check "the same nine bytes from a rank of the job stop it (exit $st)" test "$st" = 1
check "and promptly (${took}s)" test "$took" -lt 15
contains "$T/insider.err" "without the job token and was refused.*rendezvous: \{auth: none\}" \
  "the launcher's error names the setting to change"

# --- a standalone coordinator for the rest ----------------------------------
export DTRAIN_JOB_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
"$DTRAIN" coordinator --port 0 --host 127.0.0.1 >"$T/coord.out" 2>"$T/coord.err" &
CPID=$!; pids+=("$CPID")
for _ in $(seq 100); do
  PORT=$(sed -n 's/^dtrain coordinator listening on [^ ]*:\([0-9]*\) .*/\1/p' "$T/coord.out")
  [ -n "$PORT" ] && break; sleep 0.05
done
check "dtrain coordinator with a token starts" test -n "$PORT"
served() { "$PROBE" 127.0.0.1 "$PORT" set "alive-$1" 1 && [ "$("$PROBE" 127.0.0.1 "$PORT" get "alive-$1")" = 1 ]; }

# --- 2. memory before authentication ----------------------------------------
"$PY" "$ATTACK" preauth "$PORT" 4 >"$T/preauth.out" 2>&1 &
APID=$!
sleep 2
check "preauth: a client with the token is served during the attack" served preauth
under_bound "preauth (240 connections without the token)" "$CPID" 0
wait "$APID"
sed 's/^/# /' "$T/preauth.out"
contains "$T/preauth.out" "idle=0/200 slow=0/20 large-frame=10/10 partial-auth=0/10" \
  "large frames are refused at once; the rest wait for their handshake deadline, holding little"
contains "$T/coord.err" "MULTI_SET before the job token" "the coordinator says why it refused the large frames"

# --- 3. slow senders ---------------------------------------------------------
cpu0=$(cpu_s "$CPID")
"$PY" "$ATTACK" slow "$PORT" 3 >"$T/slow.out" 2>&1 &
APID=$!
sleep 1.5
check "slow senders: a client with the token is served meanwhile" served slow
wait "$APID"
check "slow senders: their requests are answered" grep -q answered "$T/slow.out"
sed 's/^/# /' "$T/slow.out"
cpu=$(awk -v a="$cpu0" -v b="$(cpu_s "$CPID")" 'BEGIN {printf "%.2f", b - a}')
check "slow senders: the coordinator used ${cpu} CPU-seconds (< 1.0) decoding them" \
  awk -v c="$cpu" 'BEGIN {exit !(c < 1.0)}'
under_bound "slow senders" "$CPID" 0

# --- 4. pipelined GETs, answers not read -------------------------------------
HOLD_S=3 "$PY" "$ATTACK" pipeline "$PORT" >"$T/pipe.out" 2>&1 &
APID=$!
for _ in $(seq 100); do grep -q sent "$T/pipe.out" && break; sleep 0.05; done
check "pipelined GETs: a client with the token is served meanwhile" served pipeline
under_bound "200 unread 8 MiB answers (8 MiB stored)" "$CPID" 8
wait "$APID"

# --- 5. MULTI_GET answers and their cache ------------------------------------
"$PY" "$ATTACK" mget "$PORT" >"$T/mget.out" 2>&1
sed 's/^/# /' "$T/mget.out"
contains "$T/mget.out" "96 MiB MULTI_GET refused; five 40 MiB MULTI_GETs answered" \
  "a MULTI_GET answer over the 64 MiB reply limit is refused, smaller ones served"
check "MULTI_GET: a client with the token is served after" served mget
under_bound "after five 40 MiB MULTI_GET answers (32 MiB stored)" "$CPID" 32

# --- 6. a flood of connects without the token --------------------------------
# 800 connects a second that never send a byte, against a coordinator with the
# usual soft limit of 1024 descriptors (so 512 connections, 256 of them in
# their handshake).  Evicting only after 1 s let the flood fill the kernel's
# backlog, and a rank's connect waited behind it (4-10 s, or its 10 s timeout,
# measured on the 2-core development machine); now a silent connection gives
# its slot up after 100 ms, and a client with the token keeps bootstrapping in
# milliseconds.  Loopback only.
( ulimit -Sn 1024; exec "$DTRAIN" coordinator --port 0 --host 127.0.0.1 ) >"$T/coord2.out" 2>"$T/coord2.err" &
C2=$!; pids+=("$C2")
for _ in $(seq 100); do
  PORT=$(sed -n 's/^dtrain coordinator listening on [^ ]*:\([0-9]*\) .*/\1/p' "$T/coord2.out")
  [ -n "$PORT" ] && break; sleep 0.05
done
check "a coordinator with 1024 descriptors starts" test -n "$PORT"
"$PY" "$ATTACK" flood "$PORT" 10 800 >"$T/flood.out" 2>&1 &
APID=$!
sleep 2
worst=0 failed=0
for i in $(seq 8); do
  t0=$(date +%s%N)
  "$PROBE" 127.0.0.1 "$PORT" set "flood-$i" 1 >/dev/null 2>&1 || failed=$((failed + 1))
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  [ "$ms" -gt "$worst" ] && worst=$ms
  sleep 0.5
done
wait "$APID"
sed 's/^/# /' "$T/flood.out"
echo "# flood: the slowest of 8 bootstraps with the token took $worst ms ($failed failed)"
check "flood: every client with the token got in ($failed failed)" test "$failed" = 0
check "flood: the slowest bootstrap took $worst ms (< 2000)" test "$worst" -lt 2000
under_bound "flood of 800 connects/s" "$C2" 0
