#!/usr/bin/env bash
# test_obs_tensorboard.sh - the TensorBoard event writer (worker/tbevents.c)
# against TensorBoard's own reader: a helper turns a metrics.jsonl into an
# event file the way the trainer logs scalars; the `tensorboard` Python
# package reads it back and every tag, step and float32 value must match the
# JSON exactly; a flipped byte must make the reader stop (the CRCs are real).
source "$(dirname "$0")/lib.sh"

helper="$BUILD/tests/helpers/obs_tb_write"
[ -x "$helper" ] || { not_ok "helper $helper is built (make builds tests/helpers/)"; exit 1; }
if ! python3 -c 'import tensorboard' 2>"$T/import.err"; then
  not_ok "python3 can import tensorboard (scripts/install-deps.sh installs it): $(tail -n1 "$T/import.err")"
  exit 1
fi

run="$T/run"
mkdir -p "$run"
python3 - "$run/metrics.jsonl" <<'PY'
import json, math, sys
with open(sys.argv[1], "w") as f:
    for s in range(1, 121):
        row = {"step": s, "epoch": s / 40, "loss": 2.3 * math.exp(-s / 30) + 0.1 / 3, "lr": 1e-3 * s / 120,
               "beta1": 0.95 - 0.1 * s / 120, "grad_norm": 1 / math.sqrt(s), "samples_per_s": 1e4 + s / 7,
               "time_s": s * 0.0123}
        f.write(json.dumps(row) + "\n")
        if s % 40 == 0:
            f.write(json.dumps({"step": s, "epoch": s / 40, "test_loss": 0.5 - s / 1000,
                                "test_accuracy": 0.8 + s / 3000}) + "\n")
PY

check "helper writes an event file from metrics.jsonl" "$helper" "$run"
files=("$run"/events.out.tfevents.*)
host=$(hostname)
case "$(basename "${files[0]}")" in
  events.out.tfevents.[0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]."$host") ok "file named events.out.tfevents.<10-digit time>.<host>" ;;
  *) not_ok "file named events.out.tfevents.<time>.<host>, got $(basename "${files[0]}")" ;;
esac

python3 - "$run" > "$T/tb.out" 2>&1 <<'PY'
import json, struct, sys
from tensorboard.backend.event_processing import event_accumulator as ea
run = sys.argv[1]
f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
want = {}
for line in open(run + "/metrics.jsonl"):
    row = json.loads(line)
    group = "eval" if "test_accuracy" in row else "train"
    for k, v in row.items():
        if k not in ("step", "epoch"):
            want.setdefault(group + "/" + k, []).append((row["step"], f32(v)))
acc = ea.EventAccumulator(run, size_guidance={ea.SCALARS: 0})
acc.Reload()
got_tags = sorted(acc.Tags()["scalars"])
print("ok - tags are", " ".join(got_tags)) if got_tags == sorted(want) else print("not ok - tags", got_tags, "want", sorted(want))
bad = []
for tag, points in want.items():
    got = [(e.step, e.value) for e in acc.Scalars(tag)] if tag in got_tags else []
    if got != points:
        bad.append((tag, got[:3], points[:3], len(got), len(points)))
print("ok - every step and float32 value of %d tags equals metrics.jsonl" % len(want)) if not bad else print("not ok - values differ:", bad[:2])
n = sum(len(v) for v in want.values())
print("ok - %d scalars read back" % n if sum(len(acc.Scalars(t)) for t in got_tags) == n else "not ok - count")
PY
cat "$T/tb.out"
grep -q '^not ok' "$T/tb.out" || grep -q '^ok - every step' "$T/tb.out" || not_ok "python check ran to the end"

# Flip one byte in the middle of a record: TensorBoard's reader checks the CRC and stops there.
mkdir -p "$T/bad" && cp "${files[0]}" "$T/bad/"
python3 - "$T/bad" "$run/metrics.jsonl" <<'PY'
import glob, json, sys
from tensorboard.backend.event_processing import event_accumulator as ea
p = glob.glob(sys.argv[1] + "/events.out.tfevents.*")[0]
b = bytearray(open(p, "rb").read()); b[len(b) // 2] ^= 0x20; open(p, "wb").write(b)
acc = ea.EventAccumulator(sys.argv[1], size_guidance={ea.SCALARS: 0}); acc.Reload()
n = sum(len(acc.Scalars(t)) for t in acc.Tags()["scalars"])
total = sum(len(json.loads(l)) - 2 for l in open(sys.argv[2]))
print("ok - a corrupted record stops the reader (%d of %d scalars read)" % (n, total) if 0 < n < total
      else "not ok - corruption unnoticed (%d of %d)" % (n, total))
PY
