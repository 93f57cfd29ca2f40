#!/usr/bin/env python3
# trainer_cpu_trace.py - what the traces of a multi-rank trainer run say about
# its exposed communication, step by step (bench/trainer_cpu.sh, part 2).
#
#   python3 bench/trainer_cpu_trace.py RUN_DIR
#   prints "<tail s> <skew s> <steps>": medians over the traced steps but the first
#
# A synchronous step cannot end before the slowest rank has written its last
# gradient, so the step time above one rank's has two parts:
#   skew = latest - earliest end of backward among the ranks (compute noise:
#          the ranks share the host; no communication can remove it)
#   tail = latest end of `comm wait` - latest end of backward (the all-reduce
#          still running once every gradient exists: what overlap failed to hide)
# The spans come from each rank's trace_rank<N>.json (worker/trace.h); the
# ranks share CLOCK_MONOTONIC on one host, so their times compare directly.
# Medians, since a noisy host throws a few steps far out.
import glob
import json
import statistics
import sys

run = sys.argv[1]
ends = {}  # step -> {"backward": [...], "comm wait": [...]}, one entry per rank
files = sorted(glob.glob(run + "/trace_rank*.json"))
if len(files) < 2:
    sys.exit("trainer_cpu_trace: %s has %d trace files; a multi-rank run with trace: {steps: ...} writes one per rank"
             % (run, len(files)))
for f in files:
    for e in json.load(open(f))["traceEvents"]:
        if e.get("ph") == "X" and e["name"] in ("backward", "comm wait"):
            ends.setdefault(e["args"]["step"], {}).setdefault(e["name"], []).append(e["ts"] + e["dur"])
steps = [s for s in sorted(ends)[1:]
         if len(ends[s].get("backward", [])) == len(files) and len(ends[s].get("comm wait", [])) == len(files)]
if not steps:
    sys.exit("trainer_cpu_trace: no traced step in %s has backward and comm wait on every rank" % run)
tail = statistics.median(max(ends[s]["comm wait"]) - max(ends[s]["backward"]) for s in steps)
skew = statistics.median(max(ends[s]["backward"]) - min(ends[s]["backward"]) for s in steps)
print("%.9f %.9f %d" % (tail * 1e-6, skew * 1e-6, len(steps)))
