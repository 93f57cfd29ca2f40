# test_store_endpoint.sh - a command's ranks reach the store through their node's
# endpoint (launcher/agent/agent_endpoint.c), with the default auth: token:
#   1. unmodified PyTorch DDP (Gloo, env://) runs under `dtrain run -n 2`; ranks get
#      MASTER_ADDR=127.0.0.1, the endpoint's port, and no token; --master-port is the
#      ranks' port; --auth none still runs the script straight against the coordinator;
#      two agents (`dtrain agent`, two nodes on this host) each serve their rank an endpoint;
#   2. attacks on a running job, each from a process started separately (same uid
#      unless said): PyTorch's client and dtrain's on the endpoint are refused and can
#      neither read nor write a key; another uid is refused; the coordinator's own
#      port refuses a client without the token as before; none of it stops the job;
#   3. the job's own processes are admitted: a rank's DataLoader workers, and a
#      grandchild detached with setsid (re-parented to the rank's guard);
#   4. a restart: the endpoint keeps its port and carries the ranks to the fresh store;
#   5. the coordinator lost: a rank blocked in WAIT through the endpoint fails at once,
#      and a new client is closed instead of waiting.
# Needs PyTorch 2.x from pip (scripts/python-deps.txt); without it the test fails.
. "$(dirname "$0")/lib.sh"

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PYTHON:-python3}
PROBE=${BUILD:-build}/tests/helpers/store_probe
ENDPOINTS=${BUILD:-build}/tests/helpers/store_endpoints
if ! "$PY" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>"$T/torch.err"; then
  not_ok "PyTorch with Gloo is importable (scripts/install-deps.sh installs it)"; tail -3 "$T/torch.err" | sed 's/^/    /'
  exit 0
fi
[ -x "$PROBE" ] && [ -x "$ENDPOINTS" ] || { not_ok "store_probe and store_endpoints helpers are built"; exit 0; }
PROBE=$(realpath "$PROBE"); ENDPOINTS=$(realpath "$ENDPOINTS")
export GLOO_SOCKET_IFNAME=lo
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }

# --- 1. dtrain run ------------------------------------------------------------
cd "$T"
expect_status 0 "an unmodified PyTorch DDP script runs under \`dtrain run -n 2\` with the default auth" \
  "$DTRAIN" run -n 2 --log-dir "$T/runs" "$ROOT/examples/pytorch/ddp_gloo.py"
check "both ranks report identical replicas" test "$(grep -c 'rank [01]/2: loss .* replicas identical' "$T/last.out")" = 2
contains "$T/last.err" "the ranks' store 127\.0\.0\.1:[0-9]+ \(this job's processes only\)" \
  "the launcher names the ranks' store endpoint"

port=$(free_port)
expect_status 0 "a command job prints its store variables" "$DTRAIN" run -n 1 --master-port "$port" --log-dir "$T/runs" \
  -- sh -c 'echo "addr=$MASTER_ADDR port=$MASTER_PORT coord=$DTRAIN_COORD_ADDR token=${DTRAIN_JOB_TOKEN-unset}"'
contains "$T/last.out" "addr=127\.0\.0\.1 port=$port coord=127\.0\.0\.1:$port token=unset" \
  "ranks get MASTER_ADDR 127.0.0.1, --master-port as the endpoint's port, and no job token"
summary=$(ls -t "$T"/runs/sh-*/summary.json | head -n1)
check "summary.json: auth token, the coordinator on another port, the endpoint's port" test \
  "$(json "$summary" '(d["auth"], d["coordinator_port"] != '"$port"', d["store_endpoint_port"])')" = "('token', True, $port)"

expect_status 0 "with --auth none the script runs straight against the coordinator" \
  "$DTRAIN" run -n 2 --auth none --log-dir "$T/runs" "$ROOT/examples/pytorch/ddp_gloo.py"
check "both ranks report identical replicas (auth none)" \
  test "$(grep -c 'rank [01]/2: loss .* replicas identical' "$T/last.out")" = 2
if grep -q "the ranks' store" "$T/last.err"; then not_ok "auth: none uses no endpoint"; else ok "auth: none uses no endpoint"; fi
cd - >/dev/null

# Two agents (two nodes on this host), each serving its rank an endpoint of its own.
P2=$(free_port)
cat >"$T/two.yaml" <<EOF
name: two
nodes: 2
nproc_per_node: 1
log_dir: $T/runs
command: [$PY, $ROOT/examples/pytorch/ddp_gloo.py]
rendezvous: {timeout: 60s, port: $P2}
EOF
export DTRAIN_JOB_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
timeout 120 "$DTRAIN" agent "$T/two.yaml" --node-rank 1 --nnodes 2 --coordinator "127.0.0.1:$P2" \
  >"$T/two.1.out" 2>"$T/two.1.err" &
A1=$!; pids+=("$A1")
timeout 120 "$DTRAIN" agent "$T/two.yaml" --node-rank 0 --nnodes 2 --coordinator "127.0.0.1:$P2" \
  >"$T/two.0.out" 2>"$T/two.0.err"
st0=$?; wait "$A1"; st1=$?
unset DTRAIN_JOB_TOKEN
check "DDP on two agents, each rank through its own node's endpoint, succeeds ($st0 $st1)" test "$st0$st1" = 00
check "both ranks report identical replicas (two agents)" \
  test "$(cat "$T/two.0.out" "$T/two.1.out" | grep -c 'rank [01]/2: loss .* replicas identical')" = 2
e0=$(sed -n "s/.*the ranks' store 127\.0\.0\.1:\([0-9]*\) .*/\1/p" "$T/two.0.err")
e1=$(sed -n "s/.*the ranks' store 127\.0\.0\.1:\([0-9]*\) .*/\1/p" "$T/two.1.err")
check "each agent serves an endpoint of its own ($e0, $e1), the coordinator on port $P2" \
  test -n "$e0" -a -n "$e1" -a "$e0" != "$e1" -a "$e0" != "$P2"

# --- 2 and 3. attacks on a running job; the job's own processes -------------
cat >"$T/rank.py" <<'EOF'
import datetime, os, subprocess, sys, time
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset
T, rank, port = sys.argv[1], int(os.environ["RANK"]), int(os.environ["MASTER_PORT"])
def store(t=20):
    return dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=t))
s = store()
if rank == 0:
    s.set("secret", "s3cr3t")
class Reads(Dataset):  # each DataLoader worker (a child of the rank) opens its own client
    def __len__(self): return 2
    def __getitem__(self, i): return store().get("secret").decode() + "@" + str(os.getpid())
if rank == 0:
    got = [v for batch in DataLoader(Reads(), num_workers=2, batch_size=1) for v in batch]
    print("workers read:", " ".join(got), "(rank pid %d)" % os.getpid(), flush=True)
    # A grandchild detached into a session of its own, whose parent exits at once.
    subprocess.run(["setsid", "sh", "-c", "(%s %s/detached.py %d > %s/detached.out 2>&1 &)" % (sys.executable, T, port, T)])
    open(T + "/port", "w").write(str(port))
    for _ in range(1200):
        if os.path.exists(T + "/done"): break
        time.sleep(0.05)
    print("secret after the attacks:", s.get("secret").decode(), flush=True)
EOF
cat >"$T/detached.py" <<'EOF'
import datetime, os, sys
import torch.distributed as dist
s = dist.TCPStore("127.0.0.1", int(sys.argv[1]), is_master=False, timeout=datetime.timedelta(seconds=20))
print("detached read:", s.get("secret").decode(), "parent", os.getppid(), flush=True)
EOF
cat >"$T/outsider.py" <<'EOF'
import datetime, sys
import torch.distributed as dist
try:
    s = dist.TCPStore("127.0.0.1", int(sys.argv[1]), is_master=False, timeout=datetime.timedelta(seconds=3))
    print("outsider read:", s.get("secret"))
    s.set("secret", "evil")
    print("outsider wrote")
except Exception as e:
    print("outsider refused:", str(e).splitlines()[0][:100])
EOF
cat >"$T/guarded.yaml" <<EOF
name: guarded
scheduler: local
nproc_per_node: 2
log_dir: $T/runs
command: [$PY, $T/rank.py, $T]
EOF
"$DTRAIN" launch "$T/guarded.yaml" >"$T/guarded.out" 2>"$T/guarded.err" &
LPID=$!; pids+=("$LPID")
for _ in $(seq 600); do [ -s "$T/port" ] && break; sleep 0.05; done
port=$(cat "$T/port" 2>/dev/null)
check "the running job's store endpoint port is known ($port)" test -n "$port"
coord=$(sed -n "s/.*coordinator 127\.0\.0\.1:\([0-9]*\), the ranks' store.*/\1/p" "$T/guarded.err" | head -n1)
check "and its coordinator's port ($coord)" test -n "$coord"

# The endpoint logs the first five refusals (then one in 100), and PyTorch's client
# retries a refused connection until its timeout: the other clients go first.
setpriv --reuid=65534 --regid=65534 --clear-groups "$PROBE" 127.0.0.1 "$port" get secret >"$T/out3" 2>&1
check "a client of another user is refused" test "$?" != 0
if grep -q s3cr3t "$T/out3"; then not_ok "and reads nothing (another user)"; else ok "and reads nothing (another user)"; fi

"$PROBE" 127.0.0.1 "$port" get secret >"$T/out2" 2>&1
check "dtrain's client outside the job is refused too (exit $?)" test "$?" != 0
if grep -q s3cr3t "$T/out2"; then not_ok "and reads nothing"; else ok "and reads nothing"; fi
"$PROBE" 127.0.0.1 "$port" set secret evil >/dev/null 2>&1
"$PY" "$T/outsider.py" "$port" >"$T/out1" 2>/dev/null
contains "$T/out1" "outsider refused" "PyTorch's client started outside the job is refused by the endpoint"
if grep -q "s3cr3t\|outsider wrote" "$T/out1"; then not_ok "and reads and writes nothing"; else ok "and reads and writes nothing"; fi
"$PY" "$T/outsider.py" "$coord" >"$T/out4" 2>/dev/null
contains "$T/out4" "outsider refused" "the coordinator's own port refuses PyTorch's client without the token, as before"
"$PROBE" 127.0.0.1 "$coord" get secret >"$T/out5" 2>&1
if grep -q s3cr3t "$T/out5"; then not_ok "and dtrain's client without the token reads nothing there"
else ok "and dtrain's client without the token reads nothing there"; fi
touch "$T/done"
wait "$LPID"; st=$?
check "the attacks did not stop the job (exit $st)" test "$st" = 0
rd=$(ls -d "$T"/runs/guarded-* | tail -n1)
contains "$rd/attempt_0/rank_0.out" "secret after the attacks: s3cr3t$" "no outsider could write the key"
contains "$rd/attempt_0/rank_0.out" "workers read: s3cr3t@[0-9]+ s3cr3t@[0-9]+" \
  "a rank's DataLoader workers (its children) are admitted and read the key"
for _ in $(seq 100); do [ -s "$T/detached.out" ] && break; sleep 0.1; done
contains "$T/detached.out" "detached read: s3cr3t" "a grandchild detached with setsid (now the guard's child) is admitted"
contains "$T/guarded.err" "refused pid [0-9]+ \(python3\): it is not a process of this job" \
  "the endpoint's log names the refused process and why"
contains "$T/guarded.err" "refused pid [0-9]+ \(store_probe\): it is not a process of this job" \
  "dtrain's client from outside is named too"
contains "$T/guarded.err" "refused .*its socket belongs to uid 65534, not to the job's user" \
  "another user's client is refused for its uid"
contains "$T/guarded.err" "coordinator: closed the connection from 127\.0\.0\.1:[0-9]+: PING before the job token" \
  "the coordinator logs the client without the token as before"
if grep -q "Stopping the job" "$T/guarded.err"; then not_ok "no outsider made the launcher stop the job"
else ok "no outsider made the launcher stop the job"; fi

# --- 4. a restart -------------------------------------------------------------
cat >"$T/restart.py" <<'EOF'
import datetime, os, sys
import torch.distributed as dist
T, attempt = sys.argv[1], int(os.environ["TORCHELASTIC_RESTART_COUNT"])
s = dist.TCPStore("127.0.0.1", int(os.environ["MASTER_PORT"]), is_master=False, timeout=datetime.timedelta(seconds=20))
print("attempt", attempt, "port", os.environ["MASTER_PORT"], "stale key:", s.check(["k"]), flush=True)
s.set("k", "v%d" % attempt)
sys.exit(3 if attempt == 0 else 0)
EOF
cat >"$T/restart.yaml" <<EOF
name: restart
scheduler: local
nproc_per_node: 1
max_restarts: 1
log_dir: $T/runs
command: [$PY, $T/restart.py, $T]
EOF
expect_status 0 "a job whose rank fails once runs again through the endpoint" "$DTRAIN" launch "$T/restart.yaml"
rd=$(ls -d "$T"/runs/restart-* | tail -n1)
p0=$(sed -n 's/^attempt 0 port \([0-9]*\) .*/\1/p' "$rd/attempt_0/rank_0.out")
p1=$(sed -n 's/^attempt 1 port \([0-9]*\) .*/\1/p' "$rd/attempt_1/rank_0.out")
check "the endpoint keeps its port across the restart ($p0, $p1)" test -n "$p0" -a "$p0" = "$p1"
contains "$rd/attempt_1/rank_0.out" "stale key: False" "and the restarted rank sees a fresh store, not the last attempt's keys"

# --- 5. the coordinator lost ----------------------------------------------------
cat >"$T/waiter.py" <<'EOF'
import datetime, sys, time
import torch.distributed as dist
s = dist.TCPStore("127.0.0.1", int(sys.argv[1]), is_master=False, timeout=datetime.timedelta(seconds=60))
s.set("waiting", "1")
t = time.monotonic()
try:
    s.wait(["never"])
    print("woken")
except Exception as e:
    print("wait failed after %.1f s" % (time.monotonic() - t))
try:  # PyTorch's client retries a closed connection until its timeout: 3 s here
    dist.TCPStore("127.0.0.1", int(sys.argv[1]), is_master=False, timeout=datetime.timedelta(seconds=3))
    print("connected")
except Exception as e:
    print("new client failed")
EOF
export DTRAIN_JOB_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
"$DTRAIN" coordinator --port 0 --host 127.0.0.1 >"$T/coord.out" 2>"$T/coord.err" &
CPID=$!; pids+=("$CPID")
for _ in $(seq 100); do
  cport=$(sed -n 's/^dtrain coordinator listening on [^ ]*:\([0-9]*\) .*/\1/p' "$T/coord.out"); [ -n "$cport" ] && break; sleep 0.05
done
"$ENDPOINTS" --coordinator "127.0.0.1:$cport" -- sh -c "$PY $T/waiter.py \$MASTER_PORT" >"$T/waiter.out" 2>"$T/waiter.err" &
EPID=$!; pids+=("$EPID")
for _ in $(seq 600); do [ "$("$PROBE" 127.0.0.1 "$cport" get waiting 2>/dev/null)" = 1 ] && break; sleep 0.05; done
sleep 0.3
{ kill -9 "$CPID"; wait "$CPID"; } 2>/dev/null
start=$(date +%s)
wait "$EPID"
took=$(( $(date +%s) - start ))
unset DTRAIN_JOB_TOKEN
check "the waiter ended by itself, promptly (${took}s)" test "$took" -lt 20
contains "$T/waiter.out" "wait failed after [0-9.]+ s" "a WAIT through the endpoint fails when the coordinator is lost"
w=$(sed -n 's/^wait failed after \([0-9.]*\) s/\1/p' "$T/waiter.out")
check "at once (${w}s after it began, the coordinator killed 0.3 s in)" python3 -c "assert ${w:-99} < 3"
contains "$T/waiter.out" "new client failed" "a new client is not served while the coordinator cannot be reached"
contains "$T/waiter.err" "lost the coordinator 127\.0\.0\.1:$cport .*closed the 1 connection of its ranks" \
  "the endpoint says it lost the coordinator and closed its ranks' connections"
