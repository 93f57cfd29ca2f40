# test_pytorch_store.sh - PyTorch's own TCPStore and dtrain's store, both directions.
#
#  1. torch.distributed.TCPStore(is_master=False) against `dtrain coordinator --auth none`:
#     every operation, a wait timeout, and world_size-style "init/" counting.
#  2. dtrain's C client and PyTorch's client on one coordinator see the same keys.
#  3. With auth on, a PyTorch client is refused and the coordinator's log says
#     to set `rendezvous: {auth: none}`.
#  4. dtrain's C client against PyTorch's own libuv TCPStore server.
#  5. One PyTorch client script against PyTorch's server and against dtrain's
#     coordinator, outputs compared line by line: ADD on every kind of value
#     (trailing text, white space, signs, empty, past 2^63), LIST_KEYS, and
#     the store barrier (torch 2.15's BARRIER request) with a timeout.
#  6. Sections 1 and 5 again through a node's store endpoint, in front of a
#     coordinator with auth: token (what a command job's ranks use).
# Needs a PyTorch 2.x from pip (scripts/python-deps.txt); without it the test fails.
. "$(dirname "$0")/lib.sh"

PY=${PYTHON:-python3}
PROBE=${BUILD:-build}/tests/helpers/store_probe
ENDPOINTS=${BUILD:-build}/tests/helpers/store_endpoints
if ! "$PY" -c 'import torch.distributed as d; assert d.is_available()' 2>"$T/torch.err"; then
  not_ok "PyTorch is importable ($PY; scripts/install-deps.sh installs it)"; sed 's/^/    /' "$T/torch.err" | tail -3
  exit 0
fi
ok "PyTorch $("$PY" -c 'import torch; print(torch.__version__)') is importable"
[ -x "$PROBE" ] && [ -x "$ENDPOINTS" ] || { not_ok "store_probe and store_endpoints helpers are built"; exit 0; }

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT

# start_coordinator NAME ARGS...: starts it, sets PORT from the line it prints.
start_coordinator() {
  local name=$1; shift
  "$DTRAIN" coordinator --port 0 --host 127.0.0.1 "$@" >"$T/$name.out" 2>"$T/$name.err" &
  pids+=($!)
  for _ in $(seq 100); do
    PORT=$(sed -n 's/^dtrain coordinator listening on [^ ]*:\([0-9]*\) .*/\1/p' "$T/$name.out")
    [ -n "$PORT" ] && return 0
    sleep 0.05
  done
  return 1
}

check "dtrain coordinator --auth none starts" start_coordinator open --auth none

cat >"$T/client.py" <<'EOF'
import sys, datetime
import torch.distributed as dist
port = int(sys.argv[1])
def check(cond, what):
    print(("ok - " if cond else "not ok - ") + "pytorch client: " + what, flush=True)
s = dist.TCPStore("127.0.0.1", port, world_size=None, is_master=False,
                  timeout=datetime.timedelta(seconds=10))
s.set("k", "v1"); check(s.get("k") == b"v1", "set then get")
check(s.add("ctr", 5) == 5 and s.add("ctr", -2) == 3, "add returns the new value")
check(s.get("ctr") == b"3", "add keeps the counter as decimal text")
check(s.check(["k"]) and not s.check(["k", "absent"]), "check")
s.wait(["k"]); check(True, "wait on a present key")
try:
    s.wait(["absent"], datetime.timedelta(milliseconds=300)); check(False, "wait times out")
except Exception as e:
    check("timeout" in str(e).lower(), "wait times out: " + str(e).splitlines()[0][:60])
check(s.get("k") == b"v1", "the connection is in step after a cancelled wait")
check(s.compare_set("k", "v1", "v2") == b"v2", "compare_set swaps on a match")
check(s.compare_set("k", "zz", "v3") == b"v2", "compare_set keeps the value on a mismatch")
check(s.compare_set("fresh", "", "new") == b"new", "compare_set sets an absent key when expected is empty")
s.append("ap", "a"); s.append("ap", "b"); check(s.get("ap") == b"ab", "append")
s.multi_set(["m1", "m2"], ["1", "2"]); check(s.multi_get(["m1", "m2"]) == [b"1", b"2"], "multi_set then multi_get")
n = s.num_keys()
check(s.delete_key("m1") and not s.delete_key("m1"), "delete_key answers whether it deleted")
check(s.num_keys() == n - 1, "num_keys counts the deletion")
# Queues (PyTorch 2.6+): FIFO, a key space of their own, blocking pop woken by a push.
s.queue_push("q", "a"); s.queue_push("q", b"b")
check(s.queue_len("q") == 2, "queue_len counts pushed items")
check(s.queue_pop("q", block=False) == b"a" and s.queue_pop("q") == b"b", "queue_pop is first in, first out")
try:
    s.queue_pop("q", block=False); check(False, "queue_pop on an empty queue raises")
except Exception as e:
    check("empty" in str(e).lower(), "queue_pop on an empty queue raises: " + type(e).__name__)
check(s.queue_len("q") == 0 and not s.check(["q"]), "an emptied queue has length 0 and is not a key")
import threading
pusher = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=10))
t = threading.Timer(0.3, lambda: pusher.queue_push("work", "item"))
t.start()
check(s.queue_pop("work", block=True) == b"item", "a blocking queue_pop waits for the push")
t.join()
s.set("from-pytorch", "hello-c")
# A second client with world_size counts itself on the internal init/ key, as ranks do.
s2 = dist.TCPStore("127.0.0.1", port, world_size=2, is_master=False, wait_for_workers=True,
                   timeout=datetime.timedelta(seconds=10))
check(s2.get("k") == b"v2", "a second client sees the first one's keys")
EOF
"$PY" "$T/client.py" "$PORT" >"$T/py.out" 2>"$T/py.err"
cat "$T/py.out"
check "the PyTorch client script ran to its end" grep -q "second client sees" "$T/py.out"
[ -s "$T/py.err" ] && grep -v "socket.cpp\|waitForInput" "$T/py.err" | head -5 | sed 's/^/    /'

out=$("$PROBE" 127.0.0.1 "$PORT" get from-pytorch 2>&1)
check "dtrain's client reads a key PyTorch's client set" test "$out" = hello-c
"$PROBE" 127.0.0.1 "$PORT" set from-dtrain hello-py
out=$("$PY" -c "
import sys, datetime, torch.distributed as d
s = d.TCPStore('127.0.0.1', $PORT, is_master=False, timeout=datetime.timedelta(seconds=5))
print(s.get('from-dtrain').decode())" 2>/dev/null)
check "PyTorch's client reads a key dtrain's client set" test "$out" = hello-py

# Auth on: a PyTorch client cannot present the token.
export DTRAIN_JOB_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
check "dtrain coordinator with a token starts" start_coordinator auth
"$PY" -c "
import datetime, torch.distributed as d
s = d.TCPStore('127.0.0.1', $PORT, is_master=False, timeout=datetime.timedelta(seconds=3))
s.set('x', 'y'); s.get('x')" >"$T/refused.out" 2>&1
check "a PyTorch client is refused when auth is on" test $? -ne 0
sleep 0.2
contains "$T/auth.err" "looks like a PyTorch TCPStore client" "the coordinator logs why it refused the PyTorch client"
contains "$T/auth.err" "a job.s ranks reach the store through their node.s endpoint \(MASTER_ADDR:MASTER_PORT\)" \
  "the log line says where a job's PyTorch ranks get the store without a token"
check "dtrain's client with the token is served" "$PROBE" 127.0.0.1 "$PORT" set k v
unset DTRAIN_JOB_TOKEN

# The same client script against both servers (section 5): every answer must match.
cat >"$T/parity.py" <<'EOF'
import sys, datetime, threading
import torch.distributed as dist
port = int(sys.argv[1])
# 30 s: a refused request ends at once, so the bound only matters to a server that is slow
# to answer; under load (suites side by side) one ADD on PyTorch's server read as an error with 5 s.
def client(t=30):
    return dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=t))
def show(what, f):
    try:
        r = f()
    except Exception as e:  # the server closed the connection: PyTorch's message is the client's
        r = "error"
        print(what, "->", repr(e)[:300], file=sys.stderr, flush=True)
    print(what, "->", r, flush=True)
main = client()
values = [b"7x", b" 7", b"7 ", b"\t\n\v\f\r7", b"+7", b"-7", b"", b"x", b"-", b"+", b" ", b"- 7", b"+-7",
          b"0x10", b"1e3", b"0" * 40 + b"7", b"5\x009", b"\x005", b"7\xff", "\u0663".encode(),
          b"9223372036854775807", b"9223372036854775808", b"-9223372036854775808",
          b"-9223372036854775809", b"1" * 100000]
for i, v in enumerate(values):
    k = "add%d" % i
    main.set(k, v)
    delta = -1 if v.startswith(b"-9") else 1
    # A fresh client each time: a refused ADD closes its connection.
    show("add %r %+d" % (v[:24], delta), lambda: client().add(k, delta))
    show("  then get", lambda: main.get(k)[:24])
show("add to an absent key", lambda: main.add("fresh", -5))
show("add wraps past 2^63", lambda: (main.add("w", 9223372036854775807), main.add("w", 1), main.add("w", -1)))
show("list_keys", lambda: sorted(main.list_keys()))
# The store barrier: the last of world_size arrivals releases everyone.
a, b = client(), client()
first = []
t = threading.Thread(target=lambda: first.append(a.barrier("bar", 2)))
t.start()
show("barrier: second of 2", lambda: b.barrier("bar", 2))
t.join(10)
print("barrier: first of 2 released ->", first, flush=True)
show("barrier: a third arrival passes at once", lambda: main.barrier("bar", 2))
show("barrier: the count is kept under the key", lambda: main.get("bar"))
show("barrier: a lone arrival times out", lambda: a.barrier("lone", 2, datetime.timedelta(milliseconds=300)))
show("barrier: the connection is in step after the timeout", lambda: a.get("bar"))
show("barrier: the timed-out arrival still counted", lambda: main.get("lone"))
show("barrier: world size 1 passes", lambda: b.barrier("one", 1))
main.set("notnum", "x")
show("barrier on a key that is not a counter", lambda: client().barrier("notnum", 2))
show("list_keys after the barriers", lambda: sorted(main.list_keys()))
EOF

# dtrain's client against PyTorch's own libuv server.
cat >"$T/server.py" <<'EOF'
import sys, time, datetime
import torch.distributed as dist
s = dist.TCPStore("127.0.0.1", 0, is_master=True, use_libuv=True, wait_for_workers=False,
                  timeout=datetime.timedelta(seconds=30))
print(s.port, flush=True)
time.sleep(600)  # killed at exit
EOF
"$PY" "$T/server.py" >"$T/server.out" 2>"$T/server.err" &
pids+=($!)
# Importing torch takes seconds, tens of them on a loaded machine.
for _ in $(seq 1200); do [ -s "$T/server.out" ] && break; sleep 0.05; done
PTPORT=$(head -n1 "$T/server.out")
check "PyTorch's libuv TCPStore server started" test -n "$PTPORT"
# Section 5's script first, while PyTorch's server is still empty.
"$PY" "$T/parity.py" "$PTPORT" >"$T/parity.pytorch" 2>"$T/parity.pytorch.err"
"$PROBE" 127.0.0.1 "$PTPORT" ops >"$T/probe.out" 2>&1
cat "$T/probe.out"
check "dtrain's client ran every operation against PyTorch's server" grep -q "delete_key removes" "$T/probe.out"

# Section 5 on dtrain's coordinator, compared with what PyTorch's server answered above.
check "dtrain coordinator --auth none starts for the comparison" start_coordinator parity --auth none
"$PY" "$T/parity.py" "$PORT" >"$T/parity.dtrain" 2>"$T/parity.dtrain.err"
check "the comparison script ran to its end on PyTorch's server" grep -q "list_keys after the barriers" "$T/parity.pytorch"
if diff "$T/parity.pytorch" "$T/parity.dtrain" >"$T/parity.diff"; then
  ok "dtrain's coordinator answers as PyTorch's server: $(grep -c '^add ' "$T/parity.pytorch") ADD cases, LIST_KEYS, BARRIER"
else
  not_ok "dtrain's coordinator answers as PyTorch's server (< PyTorch, > dtrain)"; sed 's/^/    /' "$T/parity.diff"
  for side in pytorch dtrain; do echo "    the errors the client saw from $side's server:"; sed 's/^/      /' "$T/parity.$side.err"; done
fi

# Section 6: the same scripts through a node's store endpoint (tests/helpers/
# store_endpoints runs them as its children, the only processes it admits), in
# front of a coordinator with the token.
export DTRAIN_JOB_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
check "dtrain coordinator with a token starts behind an endpoint" start_coordinator epcoord
"$ENDPOINTS" --coordinator "127.0.0.1:$PORT" -- sh -c "$PY $T/client.py \$MASTER_PORT" >"$T/ep.out" 2>"$T/ep.err"
check "every operation of section 1 passes through the endpoint ($(grep -c '^ok - ' "$T/ep.out") of $(grep -c '^ok - ' "$T/py.out"))" \
  test "$(grep -c '^ok - ' "$T/ep.out")" = "$(grep -c '^ok - ' "$T/py.out")" -a "$(grep -c '^not ok' "$T/ep.out")" = 0
check "dtrain coordinator with a token starts for the comparison behind an endpoint" start_coordinator epparity
"$ENDPOINTS" --coordinator "127.0.0.1:$PORT" -- sh -c "$PY $T/parity.py \$MASTER_PORT" >"$T/parity.endpoint" 2>"$T/parity.endpoint.err"
if diff "$T/parity.pytorch" "$T/parity.endpoint" >"$T/parity.ep.diff"; then
  ok "through the endpoint, dtrain answers as PyTorch's server: $(grep -c '^add ' "$T/parity.pytorch") ADD cases, LIST_KEYS, BARRIER"
else
  not_ok "through the endpoint, dtrain answers as PyTorch's server (< PyTorch, > endpoint)"; sed 's/^/    /' "$T/parity.ep.diff"
fi
unset DTRAIN_JOB_TOKEN
