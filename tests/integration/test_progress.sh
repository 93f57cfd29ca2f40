#!/usr/bin/env bash
# test_progress.sh - progress rows of a user's script (docs/progress.md,
# python/dtrain_progress.py, launcher/agent/agent_progress.c): outside dtrain
# the helper does nothing; under `dtrain run` rank 0's rows reach
# metrics.jsonl, `dtrain status`, `dtrain report` and a TensorBoard file
# (read back with TensorBoard's own reader), malformed lines get a warning
# naming the rank, file and line and the job still succeeds; a Python rank
# that stops reporting is declared hung and the failure report shows where
# its threads were (faulthandler on SIGUSR2); then the same with PyTorch DDP
# (examples/pytorch/ddp_progress.py, and a rank that stops before an
# all-reduce while its peer waits inside it).
. "$(dirname "$0")/lib.sh"

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export PYTHONPATH="$ROOT/python"
runs="$T/runs"
newest() { ls -d "$runs"/"$1"-* | tail -n 1; }

# --- outside dtrain: a no-op -------------------------------------------------------
mkdir -p "$T/plain" && cd "$T/plain" || exit 1
env -u DTRAIN_METRICS_FILE -u DTRAIN_TRACEBACK_FILE -u DTRAIN_TRACEBACK_SIGNAL python3 - >"$T/noop.out" 2>&1 <<'PY'
import os, signal
from dtrain_progress import Progress, enabled
def catches_usr2():
    for line in open("/proc/self/status"):
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signal.SIGUSR2 - 1) & 1)
p = Progress(total_steps=5)
for s in range(1, 6):
    p.step(s, loss=1.0 / s)
with p.pause("checkpoint"):
    pass
p.heartbeat(5)
p.close()
print("ok - outside dtrain: enabled() is False" if not enabled() and not p.enabled else "not ok - enabled outside dtrain")
print("ok - outside dtrain: no file written" if os.listdir(".") == [] else "not ok - files: %s" % os.listdir("."))
print("ok - outside dtrain: no SIGUSR2 handler" if not catches_usr2() else "not ok - SIGUSR2 is caught")
for bad in (lambda: p.step(-1), lambda: p.step(1, loss="x"), lambda: p.step(1, **{"bad name": 1.0})):
    try:
        bad()
        print("not ok - a bad argument is refused outside dtrain too")
    except (TypeError, ValueError) as e:
        print("ok - a bad argument is refused outside dtrain too: %s" % e)
PY
cat "$T/noop.out"
grep -q '^ok - outside dtrain: no SIGUSR2' "$T/noop.out" || not_ok "the no-op check ran to the end"
cd "$T" || exit 1

# --- rows: metrics.jsonl, status, report, TensorBoard, malformed lines ----------------
cat >"$T/rows.py" <<'PY'
import os, time
from dtrain_progress import Progress
rank = int(os.environ["RANK"])
p = Progress(total_steps=20)
for s in range(1, 21):
    p.step(s, loss=2.0 / s, lr=1e-3 * s, samples_per_s=1000.0 + rank, epoch=s / 10)
    if s == 10:
        with p.pause("checkpoint"):  # longer than heartbeat_timeout: not a hang
            time.sleep(3)
    if s == 12 and rank == 1:
        with open(os.environ["DTRAIN_METRICS_FILE"], "a") as f:  # what a careless writer might leave
            f.write('step 12 loss 0.5\n{"step": -3}\n{"step": 13, "loss": "low"}\n[1, 2]\n')
    time.sleep(0.02)
if rank == 0:
    p.step(20, test_loss=0.25, test_accuracy=0.875)
p.close()
PY
expect_status 0 "a job whose rank 1 writes malformed lines, and pauses past heartbeat_timeout, succeeds" \
  "$DTRAIN" run -n 2 --log-dir "$runs" --set rendezvous.heartbeat_timeout=2s rows.py
run=$(newest rows)
for n in 15 16 17 18; do  # 12 rows, a pause and its end before them
  contains "$T/last.err" "warning: rank 1: .*attempt_0/rank_1\.metrics\.jsonl:$n: not a progress row" \
    "the warning names rank 1, its file and line $n"
done
contains "$T/last.err" 'rank_1.metrics.jsonl:16: .*"step" must be a whole number' "and says what is wrong"
contains "$T/last.err" "curves of the progress rows: dtrain report $run" "the launcher's last line names dtrain report"
rows=$(grep -c '"loss"' "$run/metrics.jsonl")
check "rank 0's 20 training rows are in metrics.jsonl ($rows)" test "$rows" = 20
check "only rank 0's rows are there" sh -c "! grep -q '1001.0' '$run/metrics.jsonl'"
check "pause lines are not copied to metrics.jsonl" sh -c "! grep -q pause '$run/metrics.jsonl'"
"$DTRAIN" status "$run" >"$T/status.out" 2>&1
contains "$T/status.out" '^step: +20/20$' "dtrain status shows the step of the rows"
expect_status 0 "dtrain report reads the rows" "$DTRAIN" report "$run"
contains "$run/report.html" '<svg' "the report draws curves"
contains "$run/report.html" 'test_accuracy' "the report has the evaluation figure"
if python3 -c 'import tensorboard' 2>/dev/null; then
  python3 - "$run" >"$T/tb.out" 2>&1 <<'PY'
import json, struct, sys
from tensorboard.backend.event_processing import event_accumulator as ea
run = sys.argv[1]
f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
want = {}
for line in open(run + "/metrics.jsonl"):
    row = json.loads(line)
    for k, v in row.items():
        if k not in ("step", "total_steps"):
            want.setdefault(("eval/" if k.startswith("test_") else "train/") + k, []).append((row["step"], f32(v)))
acc = ea.EventAccumulator(run, size_guidance={ea.SCALARS: 0})
acc.Reload()
tags = sorted(acc.Tags()["scalars"])
print("ok - TensorBoard tags %s" % tags if tags == sorted(want) else "not ok - tags %s, want %s" % (tags, sorted(want)))
same = all([(e.step, e.value) for e in acc.Scalars(t)] == want[t] for t in want if t in tags)
print("ok - every TensorBoard value equals metrics.jsonl's" if same else "not ok - TensorBoard values differ")
PY
  cat "$T/tb.out"
else
  not_ok "python3 can import tensorboard (scripts/install-deps.sh installs it into .venv)"
fi

# Any writer: a line too long, more malformed lines than are reported, a last row without its newline.
cat >"$T/raw.py" <<'PY'
import os
with open(os.environ["DTRAIN_METRICS_FILE"], "a") as f:
    f.write('{"step": 1, "loss": 1}\n{"step": 2, "loss": ' + "1" * 70000 + '}\n{"step": 3, "loss": 1}\n')
    f.writelines('{"step": %d, "a b": 1}\n' % s for s in range(4, 16))
    f.write('{"step": 16, "loss": 0.5}')
PY
expect_status 0 "a rank writing its own malformed rows succeeds" "$DTRAIN" run -n 1 --log-dir "$runs" raw.py
contains "$T/last.err" 'rank 0: .*rank_0\.metrics\.jsonl:2: not a progress row, ignored: longer than 65536 bytes' \
  "a line over 64 KiB is named and skipped"
contains "$T/last.err" 'rank_0\.metrics\.jsonl:4: .*the name "a b" is not' "a name that is not plain is refused"
check "10 malformed lines are reported, then one line says the rest are not" \
  test "$(grep -c 'not a progress row' "$T/last.err")" = 10 -a "$(grep -c 'further malformed lines' "$T/last.err")" = 1
check "the rows around them, and a last one without its newline, reach metrics.jsonl" \
  test "$(python3 -c 'import json, sys; print(*(json.loads(l)["step"] for l in open(sys.argv[1])))' \
    "$(newest raw)/metrics.jsonl")" = "1 3 16"

# --- a hung Python rank: its threads in the failure report ------------------------------
cat >"$T/hang.py" <<'PY'
import os, threading, time
from dtrain_progress import Progress
rank = int(os.environ["RANK"])
p = Progress()
def waiting_for_data():
    time.sleep(600)
threading.Thread(target=waiting_for_data, name="loader", daemon=True).start()
def stuck_in_collective():
    threading.Event().wait()
for s in range(1, 4):
    p.step(s, loss=1.0)
    time.sleep(0.1)
if rank == 1:
    stuck_in_collective()
for s in range(4, 3000):
    p.step(s, loss=1.0)
    time.sleep(0.1)
PY
start=$(date +%s)
timeout "$(limit_s 120)" "$DTRAIN" run -n 2 --log-dir "$runs" --set rendezvous.heartbeat_timeout=2s hang.py \
  >"$T/hang.out" 2>"$T/hang.err"
st=$? took=$(( $(date +%s) - start ))
check "the job with a hung rank fails (exit $st) in ${took}s, not the test's timeout" test "$st" != 0 -a "$st" != 124
contains "$T/hang.err" 'rank 1 is hung: silent for [0-9.]+ s: no progress row \(heartbeat_timeout 2 s\); last step 3' \
  "rank 1 is declared hung after its last row, at step 3"
contains "$T/hang.err" "where rank 1's Python threads were" "the failure report shows rank 1's Python threads"
contains "$T/hang.err" '> +File ".*hang\.py", line [0-9]+ in stuck_in_collective' "with the function its main thread is stuck in"
contains "$T/hang.err" '> +File ".*hang\.py", line [0-9]+ in waiting_for_data' "and its other thread"
report="$(newest hang)/attempt_0/hang_rank_1.txt"
contains "$report" '== rank 1: where its Python threads were \(faulthandler, on SIGUSR2' "the hang report has rank 1's dump"
contains "$report" '== rank 0: where its Python threads were' "and its peer's"

# The same on two nodes, rank 1 on node 1: its node's console shows the threads, and node 0's
# summary.json has them (the record node 1 hands node 0 carries the tracebacks).
port=$(free_port)
( timeout "$(limit_s 120)" "$DTRAIN" run --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 --master-port "$port" -n 1 \
    --auth none --log-dir "$T/hang1" --set rendezvous.heartbeat_timeout=2s hang.py >"$T/hang1.out" 2>"$T/hang1.err" ) &
node1=$!
timeout "$(limit_s 120)" "$DTRAIN" run --nnodes 2 --node-rank 0 --master-addr 127.0.0.1 --master-port "$port" -n 1 \
  --auth none --log-dir "$T/hang0" --set rendezvous.heartbeat_timeout=2s hang.py >"$T/hang0.out" 2>"$T/hang0.err"
st=$?
wait "$node1"
check "two nodes, rank 1 hung on node 1: node 0 fails the job (exit $st)" test "$st" != 0 -a "$st" != 124
contains "$T/hang0.err" "rank 1 on node 1 was hung" "node 0 names the rank and its node"
contains "$T/hang1.err" '> +File ".*hang\.py", line [0-9]+ in stuck_in_collective' \
  "node 1's console shows where its hung rank's threads were"
summary=$(ls "$T"/hang0/*/summary.json 2>/dev/null | head -n 1)
check "node 0's summary.json has it as first_failure.hang.traceback" python3 -c '
import json, sys
h = json.load(open(sys.argv[1]))["first_failure"]["hang"]
assert h["rank"] == 1 and "in stuck_in_collective" in h["traceback"], h' "$summary"
check "rank 0 was not the one declared hung" sh -c "! grep -q 'rank 0 is hung' '$T/hang.err'"

# --- PyTorch ---------------------------------------------------------------------------
if ! python3 -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>"$T/torch.err"; then
  not_ok "PyTorch with Gloo is importable (scripts/install-deps.sh installs it)"; tail -3 "$T/torch.err" | sed 's/^/    /'
  exit 0
fi
STEPS=30 expect_status 0 "examples/pytorch/ddp_progress.py runs under dtrain run" \
  "$DTRAIN" run -n 2 --auth none --log-dir "$runs" "$ROOT/examples/pytorch/ddp_progress.py"
run=$(newest ddp-progress)
rows=$(grep -c '"loss"' "$run/metrics.jsonl")
check "its 30 training rows reach metrics.jsonl ($rows)" test "$rows" = 30
contains "$run/metrics.jsonl" '"test_loss"' "and its evaluation row"
"$DTRAIN" status "$run" >"$T/status.out" 2>&1
contains "$T/status.out" '^step: +30/30$' "dtrain status shows step 30/30"
check "a TensorBoard event file is in the run directory" test -s "$(ls "$run"/events.out.tfevents.* | head -n 1)"

cat >"$T/torch_hang.py" <<'PY'
import os, time
import torch, torch.distributed as dist, torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from dtrain_progress import Progress
dist.init_process_group("gloo")
rank = dist.get_rank()
model = DDP(nn.Linear(8, 1))
p = Progress(total_steps=100)
def sleep_forever():
    time.sleep(600)
for s in range(1, 101):
    if s == 4 and rank == 1:
        sleep_forever()  # rank 0 waits for it inside the all-reduce
    loss = model(torch.randn(4, 8)).sum()
    loss.backward()
    p.step(s, loss=loss.item())
PY
timeout "$(limit_s 180)" "$DTRAIN" run -n 2 --auth none --log-dir "$runs" --set rendezvous.heartbeat_timeout=3s \
  torch_hang.py >"$T/thang.out" 2>"$T/thang.err"
st=$?
check "the PyTorch job with a stalled rank fails (exit $st), not the test's timeout" test "$st" != 0 -a "$st" != 124
contains "$T/thang.err" 'rank [01] is hung: silent for [0-9.]+ s: no progress row' "a PyTorch rank is declared hung"
contains "$T/thang.err" "where rank [01]'s Python threads were" "the failure report shows its Python threads"
report=$(ls "$(newest torch-hang)"/attempt_0/hang_rank_*.txt | head -n 1)
contains "$report" 'line [0-9]+ in sleep_forever' "the hang report shows rank 1 asleep"
contains "$report" 'torch_hang\.py", line [0-9]+ in <module>' "and where rank 0's main thread waited"
