"""nccl_tests_parse.py - reads `dtrain bench` output the way tools read
nccl-tests' (all_reduce_perf ...) and checks that it has nccl-tests' layout,
for tests/integration/test_bench.sh.

The layout is nccl-tests' printf formats (NVIDIA/nccl-tests src/common.cu):
header lines with fixed column widths, rows of
"%12li  %12li  %8s  %6s  %6i" then, per placement (out-of-place, in-place),
"  %7s  %6s  %6s  %6g" (time us, algbw, busbw, #wrong or N/A), and the footer
"# Out of bounds values : N OK|FAILED", "# Avg bus bandwidth    : X [OK|FAILED]",
"#", "# Collective test concluded: <program>".  Fields are cut at nccl-tests'
column positions, not split on blanks, so a misaligned column fails.

    python3 nccl_tests_parse.py FILE [--program all_reduce_perf] [--rows N]
        [--no-check] [--iters N] [--warmup N] [--factor F] [--bw-verdict OK|FAILED]
Prints "rows=N avg=X" and exits 0 when every check passes, else prints why and exits 1.
"""
import argparse
import re
import sys

HEADER1 = "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          " % (
    "", "", "", "", "")
HEADER2 = "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s " % (
    "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong")
HEADER3 = "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s " % (
    "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "")
# (start, width) of each field in a row
PRE = [(0, 12), (14, 12), (28, 8), (38, 6), (46, 6)]
PLACE = [(2, 7), (11, 6), (19, 6), (27, 6)]
ROW_LEN = 52 + 2 * 33


def fail(msg):
    print("nccl_tests_parse: " + msg)
    sys.exit(1)


def num(s, what, line):
    try:
        return float(s)
    except ValueError:
        fail("%s %r is not a number in: %s" % (what, s, line))


def parse_row(line, check):
    if len(line) != ROW_LEN:
        fail("row is %d characters, nccl-tests' is %d: %r" % (len(line), ROW_LEN, line))
    pre = [line[a:a + w] for a, w in PRE]
    if any(f != f.strip().rjust(w) for f, (_, w) in zip(pre, PRE)):
        fail("a column is not right-aligned: %r" % line)
    size, count = int(pre[0]), int(pre[1])
    row = {"size": size, "count": count, "type": pre[2].strip(), "redop": pre[3].strip(), "root": int(pre[4])}
    for name, base in (("oop", 52), ("ip", 85)):
        raw = [line[base + a:base + a + w] for a, w in PLACE]
        f = [v.strip() for v in raw]
        if line[base:base + 2] != "  " or any(v != v.strip().rjust(w) for v, (_, w) in zip(raw, PLACE)):
            fail("placement %s is not in nccl-tests' columns: %r" % (name, line))
        t, alg, bus = (num(v, k, line) for v, k in zip(f[:3], ("time", "algbw", "busbw")))
        if check:
            wrong = num(f[3], "#wrong", line)
        elif f[3] != "N/A":
            fail("-c 0 must print N/A for #wrong: %r" % line)
        else:
            wrong = None
        if t <= 0:
            fail("time must be positive: %r" % line)
        # algbw = size / time (GB = 1e9 B), both printed rounded: compare
        # with the interval the printed time allows.
        dt = 0.5 * 10 ** -(len(f[0].split(".")[1]) if "." in f[0] else 0)
        hi = size / max(t - dt, 1e-9) / 1e3 + 0.006
        lo = size / (t + dt) / 1e3 - 0.006
        if not lo <= alg <= hi:
            fail("algbw %.3f is not size/time (%.3f..%.3f): %r" % (alg, lo, hi, line))
        row[name] = {"time": t, "algbw": alg, "busbw": bus, "wrong": wrong}
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--program", default="all_reduce_perf")
    ap.add_argument("--rows", type=int)
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--iters", type=int)
    ap.add_argument("--warmup", type=int)
    ap.add_argument("--factor", type=float, help="busbw/algbw, 2(n-1)/n for allreduce")
    ap.add_argument("--bw-verdict", choices=["OK", "FAILED", ""], default="")
    args = ap.parse_args()
    lines = []
    for raw in open(args.file):
        raw = raw.rstrip("\n")
        if raw.startswith("[rank 0] "):  # dtrain launch's prefix
            raw = raw[len("[rank 0] "):]
        elif raw.startswith("["):
            continue
        lines.append(raw)
    try:
        start = lines.index("# Collective test starting: " + args.program)
    except ValueError:
        fail("no '# Collective test starting: %s' line" % args.program)
    m = re.match(r"# nThread 1 nGpus 1 minBytes (\d+) maxBytes (\d+) step: \S+ warmup iters: (\d+) iters: (\d+) "
                 r"agg iters: 1 validation: (\d+) graph: 0 unalign: 0$", lines[start + 1])
    if not m:
        fail("parameter line differs from nccl-tests': %r" % lines[start + 1])
    if args.warmup is not None and int(m.group(3)) != args.warmup or args.iters is not None and int(m.group(4)) != args.iters:
        fail("warmup/iters in %r are not %s/%s" % (lines[start + 1], args.warmup, args.iters))
    try:
        h = lines.index(HEADER1)
    except ValueError:
        fail("no nccl-tests table header line 1")
    if lines[h + 1] != HEADER2 or lines[h + 2] != HEADER3:
        fail("table header lines 2-3 differ from nccl-tests':\n%r\n%r" % (lines[h + 1], lines[h + 2]))
    rows, i = [], h + 3
    while i < len(lines) and not lines[i].startswith("#"):
        rows.append(parse_row(lines[i], not args.no_check))
        i += 1
    foot = lines[i:i + 4]
    if len(foot) < 4:
        fail("footer missing")
    m1 = re.match(r"# Out of bounds values : (\d+) (OK|FAILED)$", foot[0])
    m2 = re.match(r"# Avg bus bandwidth    : (\S+) ?(OK|FAILED)?\s*$", foot[1])
    if not m1 or not m2 or foot[2] != "#" or foot[3] != "# Collective test concluded: " + args.program:
        fail("footer differs from nccl-tests':\n" + "\n".join(foot))
    if args.rows is not None and len(rows) != args.rows:
        fail("%d rows, wanted %d" % (len(rows), args.rows))
    bus = [r[p]["busbw"] for r in rows for p in ("oop", "ip")]
    avg = float(m2.group(1))
    if bus and abs(avg - sum(bus) / len(bus)) > 0.006 + 0.01 * avg:
        fail("Avg bus bandwidth %g is not the mean of every row's busbw (%g)" % (avg, sum(bus) / len(bus)))
    if (m2.group(2) or "") != args.bw_verdict:
        fail("Avg bus bandwidth verdict is %r, wanted %r" % (m2.group(2) or "", args.bw_verdict))
    for r in rows:
        for p in ("oop", "ip"):
            x = r[p]
            if args.factor and x["algbw"] > 0.05 and abs(x["busbw"] - x["algbw"] * args.factor) > 0.011 + 0.02 * x["busbw"]:
                fail("busbw %g is not algbw %g x %g" % (x["busbw"], x["algbw"], args.factor))
            if x["wrong"] not in (None, 0):
                fail("%s row of size %d has %g wrong values" % (p, r["size"], x["wrong"]))
    errors = int(m1.group(1))
    if errors:
        fail("Out of bounds values: %d" % errors)
    print("rows=%d avg=%g sizes=%s" % (len(rows), avg, ",".join(str(r["size"]) for r in rows)))


if __name__ == "__main__":
    main()
