#!/usr/bin/env bash
# test_obs_trace.sh - per-rank Chrome traces and `dtrain trace merge`: the
# files load with Python's json, spans nest properly on every track, the
# communication track overlaps backward, only the window's steps are kept,
# the merge gives one pid per rank and a launch row from summary.json and
# names a straggler rank, and
# bad input gets a message naming the file and line, never a crash.
source "$(dirname "$0")/lib.sh"

helper="$BUILD/tests/helpers/obs_trace_write"
[ -x "$helper" ] || { not_ok "helper $helper is built"; exit 1; }
run="$T/run"
mkdir -p "$run"
for r in 0 1 2; do
  check "rank $r writes trace_rank$r.json" "$helper" "$run" "$r" 10-14 30
done

python3 "$(dirname "$0")/obs_trace_check.py" "$run/trace_rank1.json" 10 14 overlap

# Merge, with the launcher's summary.json beside the traces.
cat > "$run/summary.json" <<JSON
{"name": "obs", "run_id": "x", "status": "succeeded", "started_unix": $(date +%s.%N | cut -c1-17),
 "started_at": "2026-12-02T12:00:00Z", "world_size": 3,
 "attempts": [{"attempt": 0, "start_s": 0.0, "end_s": 0.9, "ranks": [
   {"rank": 0, "spawn_s": 0.001, "exit_s": 0.8}, {"rank": 1, "spawn_s": 0.002, "exit_s": 0.85},
   {"rank": 2, "spawn_s": 0.003, "exit_s": null}]}], "version": 1}
JSON
expect_status 0 "dtrain trace merge RUN_DIR" "$DTRAIN" trace merge "$run"
contains "$T/last.out" "merged 3 rank traces into .*trace_merged.json" "merge says what it wrote"
contains "$T/last.out" "^rank 1: 15.500 ms per step, of which 0.000 ms waiting" "merge prints each rank's time per step"
check "ranks within 10% of each other: no straggler named" bash -c "! grep -q straggler '$T/last.out'"
mkdir -p "$T/slow"
for r in 0 1 2 3; do "$helper" "$T/slow" "$r" 2-6 10 0 "$([ $r = 2 ] && echo 5 || echo 0)" > /dev/null; done
expect_status 0 "merge of a run with a slow rank" "$DTRAIN" trace merge "$T/slow"
contains "$T/last.out" "^rank 2 is a straggler: 18.000 ms of work per step against a median of 15.500 ms \\(\\+16%\\)" \
  "the straggler is named with its figure"
python3 - "$run" > "$T/merge.out" <<'PY'
import json, sys
run = sys.argv[1]
m = json.load(open(run + "/trace_merged.json"))["traceEvents"]
def say(cond, what):
    print(("ok - " if cond else "not ok - ") + what)
names = {e["pid"]: e["args"]["name"] for e in m if e["ph"] == "M" and e["name"] == "process_name"}
say(names.get(0) == "rank 0" and names.get(1) == "rank 1" and names.get(2) == "rank 2", "one pid per rank: %s" % names)
say(names.get(3) == "dtrain launch", "a dtrain launch row from summary.json")
n = lambda p: sum(1 for e in m if e["pid"] == p)
each = [len(json.load(open(run + "/trace_rank%d.json" % r))["traceEvents"]) for r in range(3)]
say([n(0), n(1), n(2)] == each, "every rank's events kept (%s)" % each)
lives = [e for e in m if e["pid"] == 3 and e["ph"] == "X" and e["name"] == "spawn to exit"]
say(len(lives) == 3, "each rank's spawn-to-exit span on the launch row")
PY
cat "$T/merge.out"
expect_status 0 "merge of files with -o" "$DTRAIN" trace merge "$run/trace_rank2.json" "$run/trace_rank0.json" -o "$T/two.json"
check "the two-file merge loads" python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert {e['pid'] for e in d['traceEvents']} == {0, 2}" "$T/two.json"

# Bad input: a message naming the file (and line), exit 1 or 2, never a signal.
expect_status 1 "missing run directory" "$DTRAIN" trace merge "$T/nope"
contains "$T/last.err" "$T/nope" "the message names the missing directory"
mkdir -p "$T/empty"
expect_status 1 "directory without traces" "$DTRAIN" trace merge "$T/empty"
contains "$T/last.err" "no trace_rank<N>.json.*--trace" "the message says how to get traces"
head -c 700 "$run/trace_rank0.json" > "$T/cut.json"
expect_status 1 "truncated trace" "$DTRAIN" trace merge "$T/cut.json" -o "$T/o.json"
contains "$T/last.err" "cut.json:[0-9]+:[0-9]+: " "the message gives file:line:column"
printf '{"traceEvents": [\n{"ph": "X", "ts": 1,}\n]}\n' > "$T/garbage.json"
expect_status 1 "garbage trace" "$DTRAIN" trace merge "$T/garbage.json" -o "$T/o.json"
contains "$T/last.err" "garbage.json:2:21: string or .}. expected near .}." "the message points past the stray comma"
printf '{"traceEvents": 5}\n' > "$T/notrace.json"
expect_status 1 "JSON that is not a trace" "$DTRAIN" trace merge "$T/notrace.json" -o "$T/o.json"
contains "$T/last.err" "not a Chrome trace" "the message says it is not a trace"
head -c 100000 /dev/urandom > "$T/random.json"
expect_status 1 "random bytes" "$DTRAIN" trace merge "$T/random.json" -o "$T/o.json"
cp "$run/trace_rank0.json" "$T/trace_rank0.json"
expect_status 1 "two traces of one rank" "$DTRAIN" trace merge "$run/trace_rank0.json" "$T/trace_rank0.json" -o "$T/o.json"
expect_status 2 "merge without -o for files" "$DTRAIN" trace merge "$run/trace_rank0.json"
expect_status 2 "unknown subcommand" "$DTRAIN" trace split "$run"
check "ring overflow is reported in the file" bash -c "'$helper' '$T' 5 0-1000 40 64 >/dev/null && grep -q '\"dropped_spans\": [1-9]' '$T/trace_rank5.json'"
