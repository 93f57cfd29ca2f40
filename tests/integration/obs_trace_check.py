# obs_trace_check.py - checks one per-rank Chrome trace (worker/trace.h) and
# prints TAP lines for tests/integration/test_obs_*.sh:
#   python3 obs_trace_check.py trace_rank<N>.json FIRST LAST [overlap]
# The file loads with json; every "X" event has ts and dur; the four tracks
# are named; spans nest on every (pid, tid) (a span that starts inside
# another ends inside it); exactly steps FIRST..LAST are kept; the launch
# phases are there whatever the window; each step has its all-reduces (and,
# with "overlap", some all-reduce overlaps backward);
# forward, backward and optimizer lie inside their step.
import json, sys
from decimal import Decimal
path, first, last = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
d = json.load(open(path), parse_float=Decimal)  # exact: a double cannot hold 1.7e15 us to the ns
ev = d["traceEvents"]
xs = [e for e in ev if e["ph"] == "X"]
threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
def say(cond, what):
    print(("ok - " if cond else "not ok - ") + what)
say(all(isinstance(e["ts"], (int, Decimal)) and e["dur"] >= 0 for e in xs), "%s: %d complete events with ts and dur" % (path.split("/")[-1], len(xs)))
say({"launch", "compute", "communication", "data"} <= set(threads.values()), "tracks named launch, compute, communication, data")
bad = []
for key in {(e["pid"], e["tid"]) for e in xs}:
    spans = sorted((e["ts"], -e["dur"], e["name"]) for e in xs if (e["pid"], e["tid"]) == key)
    stack = []
    for ts, mdur, name in spans:
        end = ts - mdur
        while stack and stack[-1][0] <= ts:
            stack.pop()
        if stack and end > stack[-1][0]:
            bad.append((threads.get(key), name, stack[-1][1]))
        stack.append((end, name))
say(not bad, "spans nest on every track" + (" (overlaps: %s)" % bad[:3] if bad else ""))
steps = {e["args"]["step"] for e in xs if threads[(e["pid"], e["tid"])] != "launch"}
say(steps == set(range(first, last + 1)), "steps kept are exactly %d-%d (got %s)" % (first, last, sorted(steps)))
launch = [e["name"] for e in xs if threads[(e["pid"], e["tid"])] == "launch"]
say({"store connect", "communicator init", "first step"} <= set(launch), "launch phases kept outside the window")
by = lambda n: [e for e in xs if e["name"] == n]
overlap = sum(1 for a in by("allreduce") for b in by("backward")
              if a["args"]["step"] == b["args"]["step"] and a["ts"] < b["ts"] + b["dur"] and b["ts"] < a["ts"] + a["dur"])
if sys.argv[4:] == ["overlap"]:
    say(overlap > 0, "all-reduces overlap backward (%d pairs)" % overlap)
ar_steps = {e["args"]["step"] for e in by("allreduce") if e["args"].get("bucket", -1) >= 0}
say(ar_steps == set(range(first, last + 1)), "every traced step has bucket all-reduces on the communication track")
step_spans = {e["args"]["step"]: e for e in by("step")}
inside = all(step_spans[e["args"]["step"]]["ts"] <= e["ts"] and
             e["ts"] + e["dur"] <= step_spans[e["args"]["step"]]["ts"] + step_spans[e["args"]["step"]]["dur"]
             for n in ("forward", "backward", "optimizer") for e in by(n))
say(inside, "forward, backward and optimizer lie inside their step")
