#!/usr/bin/env bash
# test_obs_report.sh - `dtrain report`: the page renders in headless Chromium
# with a curve per series (polylines with one point per logged row and a
# non-zero drawn length), loads nothing from the network, shows the summaries
# and names what limits the run; bad input gets a message naming the file and
# line and exit status 1, never a crash.
source "$(dirname "$0")/lib.sh"

chrome=$(command -v chromium || command -v chromium-browser || true)
[ -n "$chrome" ] || { not_ok "chromium is installed (Debian package chromium; scripts/install-deps.sh installs it)"; exit 1; }

run="$T/run"
mkdir -p "$run"
python3 - "$run" <<'PY'
import json, math, sys
run = sys.argv[1]
with open(run + "/metrics.jsonl", "w") as f:
    for s in range(10, 501, 10):
        f.write(json.dumps({"step": s, "epoch": s / 100, "loss": 2.3 * math.exp(-s / 90) + 0.3,
                            "lr": 0.01 * math.sin(math.pi * s / 500) + 1e-5, "beta1": 0.9,
                            "grad_norm": 1 / math.sqrt(s), "samples_per_s": 12000 + s,
                            "time_s": s / 100}) + "\n")
        if s % 100 == 0:
            f.write(json.dumps({"step": s, "epoch": s / 100, "test_loss": 1 / s + 0.3,
                                "test_accuracy": 0.7 + s / 5000}) + "\n")
json.dump({"final_loss": 0.31, "test_accuracy": 0.8, "steps": 500, "train_seconds": 10.0,
           "data_wait_seconds": 2.5, "comm_wait_seconds": 0.4}, open(run + "/trainer_summary.json", "w"))
json.dump({"name": "fmnist<demo>", "run_id": "20261202-120000-abcdef", "status": "succeeded",
           "exit_status": 0, "world_size": 2, "command": ["dtrain", "worker", "job.yaml"], "attempts": []},
          open(run + "/summary.json", "w"))
PY

expect_status 0 "dtrain report RUN_DIR" "$DTRAIN" report "$run"
contains "$T/last.out" "report: .*/report.html" "it says where the page is"
contains "$T/last.out" "Data loading limits the run: 25% of the step .*\\(2.5 s of 10.0 s training" \
  "it names the bottleneck with its figure"
contains "$run/report.html" '<p class="finding">Data loading limits the run' "the page shows the findings"

# The straggler rule: rank_work_seconds (each rank's train time less its
# waits) with one rank 30% over the median is named with its figure; 5% over
# is not (noise on a shared machine).
strag="$T/strag"
mkdir -p "$strag"
cp "$run/metrics.jsonl" "$run/summary.json" "$strag/"
python3 - "$strag" 1.30 <<'PY'
import json, sys
json.dump({"final_loss": 0.31, "steps": 500, "train_seconds": 14.0, "data_wait_seconds": 0.1,
           "comm_wait_seconds": 0.2, "rank_work_seconds": [10.0, 10.2, 10.0 * float(sys.argv[2]), 9.9]},
          open(sys.argv[1] + "/trainer_summary.json", "w"))
PY
expect_status 0 "dtrain report of a run with a slow rank" "$DTRAIN" report "$strag"
contains "$T/last.out" "Rank 2 is a straggler: 13.0 s of work, 3.0 s \\(30%\\) more than the median of the other ranks \\(10.0 s" \
  "it names the straggler rank with its excess over the median"
python3 - "$strag" 1.05 <<'PY'
import json, sys
json.dump({"final_loss": 0.31, "steps": 500, "train_seconds": 14.0, "data_wait_seconds": 0.1,
           "comm_wait_seconds": 0.2, "rank_work_seconds": [10.0, 10.2, 10.0 * float(sys.argv[2]), 9.9]},
          open(sys.argv[1] + "/trainer_summary.json", "w"))
PY
expect_status 0 "dtrain report of a run with even ranks" "$DTRAIN" report "$strag"
check "ranks within 10% of the median: no straggler named" sh -c "! grep -q 'is a straggler' '$T/last.out'"
page="$run/report.html"
contains "$page" '<polyline class="curve" data-series="loss"' "the page has the loss polyline"
contains "$page" 'fmnist&lt;demo&gt;' "summary strings are escaped"
contains "$page" '20261202-120000-abcdef' "the run id is shown"
if grep -Eo '(src|href)=|@import|url\(|https?://[^"]*' "$page" | grep -v '^http://www.w3.org/2000/svg$' | grep -q .; then
  not_ok "the page references nothing outside itself"; grep -Eo '(src|href)=|@import|url\(|https?://[^"]*' "$page" | head
else ok "the page references nothing outside itself"; fi

# Render a copy with a probe script that reports what Chromium actually laid out.
sed 's#</body>#<pre id="probe"></pre><script>var out = [];\
document.querySelectorAll("polyline.curve").forEach(function (p) {\
  var b = p.getBBox(); out.push({series: p.dataset.series, points: p.points.numberOfItems,\
  length: p.getTotalLength(), w: b.width, h: b.height}); });\
document.getElementById("probe").textContent = JSON.stringify(out);</script></body>#' "$page" > "$T/probe.html"
timeout 60 "$chrome" --headless --no-sandbox --disable-gpu --user-data-dir="$T/chrome" --dump-dom \
  "file://$T/probe.html" > "$T/dom.html" 2> "$T/chrome.err"
check "headless Chromium renders the page" grep -q 'id="probe">\[' "$T/dom.html"
python3 - "$T/dom.html" "$run/metrics.jsonl" <<'PY'
import json, re, sys
dom = open(sys.argv[1]).read()
m = re.search(r'id="probe">(.*?)</pre>', dom, re.S)
curves = json.loads(m.group(1).replace("&quot;", '"')) if m else []
rows = [json.loads(l) for l in open(sys.argv[2])]
def say(cond, what):
    print(("ok - " if cond else "not ok - ") + what)
for name in ("loss", "test_loss", "test_accuracy", "lr", "grad_norm", "samples_per_s"):
    want = sum(1 for r in rows if r.get(name) is not None)
    got = [c for c in curves if c["series"] == name]
    say(len(got) == 1 and got[0]["points"] == want and got[0]["length"] > 50 and got[0]["w"] > 100,
        "%s drawn by Chromium: %s" % (name, got[0] if got else "missing"))
PY

# Bad input.
expect_status 1 "missing run directory" "$DTRAIN" report "$T/nope"
contains "$T/last.err" "$T/nope" "the message names the directory"
mkdir -p "$T/e1"
expect_status 1 "no metrics.jsonl" "$DTRAIN" report "$T/e1"
contains "$T/last.err" "no metrics.jsonl" "the message says what is missing"
bad() { # bad NAME CONTENT PATTERN
  mkdir -p "$T/$1"; printf "$2" > "$T/$1/metrics.jsonl"
  expect_status 1 "$1 metrics.jsonl" "$DTRAIN" report "$T/$1"
  contains "$T/last.err" "$3" "$1: the message names file and line"
}
bad garbage '{"step": 1, "loss": 2}\n{"step": 2, "loss": 1}\nwhat is this\n' 'metrics.jsonl:3:4: invalid token near .what.'
bad cut '{"step": 1, "loss": 2}\n{"step": 2, "lo' 'metrics.jsonl:2: the last line has no newline'
bad cutnl '{"step": 1, "loss": 2}\n{"step": 2, "lo\n' 'metrics.jsonl:2:15: premature end of input'
bad nostep '{"step": 1, "loss": 2}\n{"loss": 1}\n' 'metrics.jsonl:2: the row has no numeric "step"'
bad nan '{"step": 1, "loss": NaN}\n' 'metrics.jsonl:1:23: invalid token near .NaN.'
bad blank '{"step": 1}\n\n{"step": 2}\n' 'metrics.jsonl:2: empty line'
bad empty '' 'metrics.jsonl: empty'
bad array '[1, 2]\n' 'metrics.jsonl:1: a metrics line must be a JSON object'
bad deep "$(printf '[%.0s' $(seq 200); printf ']%.0s' $(seq 200))\n" 'metrics.jsonl:1: nested deeper than 64'
mkdir -p "$T/rand"; head -c 65536 /dev/urandom > "$T/rand/metrics.jsonl"
expect_status 1 "random bytes as metrics.jsonl" "$DTRAIN" report "$T/rand"
mkdir -p "$T/badsum"; cp "$run/metrics.jsonl" "$T/badsum/"; printf '{"name": "x",\n "status": }\n' > "$T/badsum/summary.json"
expect_status 1 "broken summary.json" "$DTRAIN" report "$T/badsum"
contains "$T/last.err" "summary.json:2:12: unexpected token near .}." "the message names summary.json, line and column"
expect_status 0 "report to stdout with -o -" "$DTRAIN" report "$run" -o -
contains "$T/last.out" '^<!DOCTYPE html>' "the page goes to stdout"
expect_status 2 "report without a directory" "$DTRAIN" report
