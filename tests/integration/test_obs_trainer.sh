#!/usr/bin/env bash
# test_obs_trainer.sh - what a real trainer job leaves to look at: `dtrain
# launch` of 2 CPU ranks with trace: {steps: "10-19"} writes an event file
# that TensorBoard's reader loads with the same steps and values as
# metrics.jsonl, a Chrome trace per rank whose spans nest (data wait,
# forward, backward, comm wait, optimizer, one all-reduce per bucket from the
# communication thread, start-up phases), a merge with a precise launch row,
# and a report page; the launcher shows a progress line (plain lines off a
# terminal, redrawn in place on one).
source "$(dirname "$0")/lib.sh"

python3 -c 'import tensorboard' 2>/dev/null || { not_ok "python3 can import tensorboard (scripts/install-deps.sh)"; exit 1; }
[ -d /usr/share/datasets/fashion-mnist ] || { not_ok "Fashion-MNIST is installed (dataset-fashion-mnist)"; exit 1; }
cat > "$T/job.yaml" <<'YAML'
name: obs
nproc_per_node: 2
backend: tcp
trainer:
  model: {type: mlp, hidden: [128, 64]}
  data: {dataset: fashion-mnist, batch_size: 64, workers: 1}
  steps: 40
  scheduler: {type: onecycle, max_lr: 3e-3}
  ddp: {bucket_cap_mb: 0.02, first_bucket_mb: 0.01}
  checkpoint: {every_steps: 15}
  log_every_steps: 5
  trace: {steps: "10-19"}
YAML
expect_status 0 "a traced 2-rank trainer job runs" "$DTRAIN" launch "$T/job.yaml" --log-dir "$T/runs"
run=$(echo "$T"/runs/obs-*)
contains "$T/last.out" '^\[dtrain\] epoch [0-9.]+ \| step [0-9]+/40 \| loss [0-9.]+ \| lr' "off a terminal the launcher prints plain progress lines"
contains "$T/last.err" 'curves and the step-time split: dtrain report ' "the job ends with the run's findings and where the report is"
contains "$T/last.err" '(No bottleneck found|limits the run|is exposed|is a straggler)' "the findings name what limits the run (or that nothing does)"
# On a terminal (script(1) gives one) the line is drawn with \r and erase-line, and erased before rank output.
if command -v script >/dev/null; then
  script -qec "'$DTRAIN' launch '$T/job.yaml' --log-dir '$T/runs-tty'" /dev/null > "$T/tty.out" 2>&1
  check "on a terminal the progress line redraws in place" grep -q $'\r\033\\[K\\[dtrain\\] epoch' "$T/tty.out"
  check "rank output is written after erasing the line" grep -q $'\r\033\\[K\\[rank 0\\]' "$T/tty.out"
else
  not_ok "script(1) is installed (bsdutils) to give the launcher a terminal"
fi
check "rank 0 wrote one event file" test "$(ls "$run"/events.out.tfevents.* | wc -l)" = 1
check "trainer_summary.json lists both ranks' work seconds (the straggler rule's input)" \
  grep -Eq '"rank_work_seconds": \[[0-9.e+-]+, [0-9.e+-]+\]' "$run/trainer_summary.json"

python3 - "$run" <<'PY'
import json, math, struct, sys
from tensorboard.backend.event_processing import event_accumulator as ea
run = sys.argv[1]
def say(cond, what):
    print(("ok - " if cond else "not ok - ") + what)
want = {}
for line in open(run + "/metrics.jsonl"):
    row = json.loads(line)
    group = "eval" if "test_accuracy" in row else "train"
    for k, v in row.items():
        # lists hold one number per rank (gpu_* on GPUs: tags gpu/*_rank<N>)
        if k not in ("step", "epoch", "time_s", "total_steps") and v is not None and not isinstance(v, list):
            want.setdefault(group + "/" + k, []).append((row["step"], v))
acc = ea.EventAccumulator(run, size_guidance={ea.SCALARS: 0})
acc.Reload()
tags = set(acc.Tags()["scalars"])
say(tags == set(want), "TensorBoard tags %s" % sorted(tags))
# metrics.jsonl prints the double with 9 digits; the event file holds the
# float32 of the same double: equal to within one float32 rounding.
f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
ulp = lambda x: abs(f32(x) - struct.unpack("<f", struct.pack("<I", struct.unpack("<I", struct.pack("<f", x))[0] ^ 1))[0])
bad = [(t, s, v, e.value) for t in want if t in tags
       for (s, v), e in zip(want[t], acc.Scalars(t)) if e.step != s or abs(e.value - f32(v)) > ulp(v)]
counts = all(len(acc.Scalars(t)) == len(want[t]) for t in want if t in tags)
say(not bad and counts, "every step and value of metrics.jsonl is in the event file%s" % (": %s" % bad[:3] if bad else ""))
PY

for r in 0 1; do
  python3 "$(dirname "$0")/obs_trace_check.py" "$run/trace_rank$r.json" 10 19
done
expect_status 0 "dtrain trace merge of the run" "$DTRAIN" trace merge "$run"
python3 - "$run" <<'PY'
import json, sys
m = json.load(open(sys.argv[1] + "/trace_merged.json"))["traceEvents"]
names = {e["pid"]: e["args"]["name"] for e in m if e["ph"] == "M" and e["name"] == "process_name"}
print(("ok - " if names == {0: "rank 0", 1: "rank 1", 2: "dtrain launch"} else "not ok - ") + "merged processes %s" % names)
spawn = [e for e in m if e["pid"] == 2 and e["name"] == "spawn to exit"]
# each rank's spawn-to-exit span encloses that rank's own spans (not the other
# rank's: rank 0 may trace before rank 1 is forked): the clocks agree
def own(s):
    return [e for e in m if e["pid"] == s["tid"] - 2 and e["ph"] == "X"]
bad = [(s["tid"] - 2, s["ts"], s["ts"] + s["dur"], min(e["ts"] for e in own(s)), max(e["ts"] + e["dur"] for e in own(s)))
       for s in spawn if not own(s) or min(e["ts"] for e in own(s)) < s["ts"] or
       max(e["ts"] + e["dur"] for e in own(s)) > s["ts"] + s["dur"] + 1000]
ok = len(spawn) == 2 and {s["tid"] - 2 for s in spawn} == {0, 1} and not bad
print(("ok - " if ok else "not ok - ") + "each rank's life on the launch row encloses its trace%s" %
      (" (rank, spawn, exit, first, last event: %s)" % bad if bad else ""))
PY

# On one host (shm) the averages go to the host's one copy and each rank steps
# its slice: the buckets are still named, and the optimizer span shows this
# rank's slices apart from the waits for the slowest rank (clipping on: the
# norm every step).
sed -e 's/^backend: tcp/backend: shm/' -e 's/steps: "10-19"/steps: "3-5"/' -e 's/steps: 40/steps: 8\n  optimizer: {grad_clip: 1.0}/' \
  "$T/job.yaml" > "$T/shm.yaml"
expect_status 0 "a traced 2-rank job on shm runs" "$DTRAIN" launch "$T/shm.yaml" --log-dir "$T/runs-shm"
shm_run=$(echo "$T"/runs-shm/obs-*)
for r in 0 1; do
  python3 "$(dirname "$0")/obs_trace_check.py" "$shm_run/trace_rank$r.json" 3 5
done
# Times parse as Decimal: as doubles, 1.7e15 us hold a quarter of a microsecond,
# and the last rank's norm wait can start 0.2 us before its AdamW slice does.
python3 - "$shm_run" <<'PY'
import json, sys
from decimal import Decimal
for r in (0, 1):
    d = json.load(open("%s/trace_rank%d.json" % (sys.argv[1], r)), parse_float=Decimal)
    xs = [e for e in d["traceEvents"] if e["ph"] == "X"]
    opt = {e["args"]["step"]: e for e in xs if e["name"] == "optimizer"}
    parts = ("norm slice", "norm wait", "adamw slice", "adamw wait")
    bad = [] if sorted(opt) == [3, 4, 5] else ["optimizer spans for steps %s" % sorted(opt)]
    for s, o in sorted(opt.items()):
        mine = sorted((e["ts"], e["ts"] + e["dur"], e["name"]) for e in xs if e["args"].get("step") == s and e["name"] in parts)
        if [n for _, _, n in mine] != list(parts) or not all(o["ts"] <= t0 and t1 <= o["ts"] + o["dur"] for t0, t1, _ in mine):
            bad.append("step %d: optimizer %s-%s holds %s" % (s, o["ts"], o["ts"] + o["dur"], mine))
    print(("ok - " if not bad else "not ok - ") + "rank %d: each optimizer span holds its norm and AdamW slices and waits, in order%s"
          % (r, " (%s)" % bad[:2] if bad else ""))
PY
# The bench's reading of those traces (bench/trainer_cpu_trace.py): the step's
# parts over the traced steps but the first, none negative or past the step.
read -r comp tail opt stp skew n < <(python3 "$(dirname "$0")/../../bench/trainer_cpu_trace.py" "$shm_run")
check "bench/trainer_cpu_trace.py takes the 2 later traced steps apart (got: $comp $tail $opt $stp $skew $n)" \
  python3 -c "import sys; c, t, o, s, k, n = map(float, sys.argv[1:]); assert n == 2 and min(c, t, o, k) >= 0 and 0 < c <= s and t + o <= s" \
  "$comp" "$tail" "$opt" "$stp" "$skew" "$n"
expect_status 0 "dtrain report of the run" "$DTRAIN" report "$run"
contains "$run/report.html" 'data-series="test_accuracy"' "the report draws test accuracy"
