#!/usr/bin/env python3
# trainer_cpu_trace.py - where a trainer run's step time goes, step by step,
# from its traces (bench/trainer_cpu.sh, part 2).
#
#   python3 bench/trainer_cpu_trace.py RUN_DIR
#   prints "<compute s> <tail s> <optimizer s> <step s> <skew s> <steps>":
#   medians over the traced steps but the first
#
# Per step, on the time line of all the run's ranks (one or more):
#   compute   = the slowest rank's end of backward - the earliest step start
#               (data wait, forward, backward: every gradient exists then)
#   tail      = the latest end of `comm wait` - the slowest end of backward
#               (the all-reduce still running once every gradient exists:
#               what overlap failed to hide)
#   optimizer = the latest step end - the latest end of `comm wait`
#   step      = the latest step end - the earliest step start
#   skew      = latest - earliest end of backward among the ranks (compute
#               noise: the ranks share the host; no communication removes it)
# A synchronous step cannot end before the slowest rank has written its last
# gradient, so against one rank alone the extra compute is the host's (cores,
# caches and memory shared, plus the communication thread beside backward),
# the tail is communication, and the optimizer differs by the ranks sharing it.
# Medians, since a noisy host throws a few steps far out; so the parts need not
# add up to the step exactly.  The spans come from each rank's
# trace_rank<N>.json (worker/trace.h); the ranks share CLOCK_MONOTONIC on one
# host, so their times compare directly.
import glob
import json
import statistics
import sys
from decimal import Decimal

NAMES = ("step", "backward", "comm wait")
run = sys.argv[1]
files = sorted(glob.glob(run + "/trace_rank*.json"))
if not files:
    sys.exit("trainer_cpu_trace: %s has no trace_rank*.json; a run with trace: {steps: ...} writes one per rank" % run)
spans = {}  # step -> name -> [(start, end)], one entry per rank
for f in files:
    for e in json.load(open(f), parse_float=Decimal)["traceEvents"]:  # exact: doubles hold 1.7e15 us to 0.25 us
        if e.get("ph") == "X" and e["name"] in NAMES:
            spans.setdefault(e["args"]["step"], {}).setdefault(e["name"], []).append((e["ts"], e["ts"] + e["dur"]))
steps = [s for s in sorted(spans)[1:] if all(len(spans[s].get(n, [])) == len(files) for n in NAMES)]
if not steps:
    sys.exit("trainer_cpu_trace: no traced step in %s has step, backward and comm wait on every rank" % run)


def parts(s):
    x = spans[s]
    start, end = min(a for a, _ in x["step"]), max(b for _, b in x["step"])
    bwd, cw = max(b for _, b in x["backward"]), max(b for _, b in x["comm wait"])
    return bwd - start, max(cw - bwd, 0), end - max(cw, bwd), end - start, bwd - min(b for _, b in x["backward"])


cols = list(zip(*(parts(s) for s in steps)))
print(" ".join("%.9f" % (float(statistics.median(c)) * 1e-6) for c in cols), len(steps))
