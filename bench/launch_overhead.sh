#!/usr/bin/env bash
# launch_overhead.sh - what a launcher costs: dtrain launch against torchrun, same run.
#
#   1. 4 ranks of `true`: `dtrain launch` vs `torchrun --standalone --nproc_per_node 4
#      --no-python true`.  Pure launcher overhead (target: dtrain >= 20x faster).
#   2. A 4-rank no-op PyTorch job (init_process_group("gloo"), barrier, destroy)
#      under both.  Here the ranks' own `import torch` is shared cost; dtrain
#      must not be slower.
#
# Each case runs REPS times per launcher, interleaved (dtrain, torchrun, dtrain, ...)
# so machine load hits both alike; the median wall time of each is printed with
# the ratio.  Wall time is measured around the whole launcher process.
#
#   bench/launch_overhead.sh [REPS_TRUE (default 10)] [REPS_TORCH (default 3)]
#   DTRAIN=path/to/dtrain   the binary (default bin/dtrain)
set -euo pipefail
case ${DTRAIN:-} in */*) DTRAIN=$(realpath -m "$DTRAIN") ;; esac # relative to the caller: resolve before the cd
cd "$(dirname "$0")/.."
DTRAIN=${DTRAIN:-$PWD/bin/dtrain}
reps_true=${1:-10}
reps_torch=${2:-3}

[ -x "$DTRAIN" ] || { echo "launch_overhead: $DTRAIN is not built (run make)" >&2; exit 1; }
command -v torchrun >/dev/null || { echo "launch_overhead: torchrun not found: pip install torch (see scripts/python-deps.txt)" >&2; exit 1; }
python3 -c 'import torch' 2>/dev/null || { echo "launch_overhead: python3 cannot import torch: pip install torch" >&2; exit 1; }

W=$(mktemp -d /tmp/dtrain-bench.XXXXXX)
trap 'rm -rf "$W"' EXIT

cat >"$W/noop.py" <<'EOF'
import torch.distributed as dist
dist.init_process_group("gloo")
dist.barrier()
dist.destroy_process_group()
EOF
cat >"$W/true.yaml" <<EOF
name: bench-true
scheduler: local
nproc_per_node: 4
log_dir: $W/runs
command: ["true"]
EOF
cat >"$W/noop.yaml" <<EOF
name: bench-noop
scheduler: local
nproc_per_node: 4
rendezvous: {auth: none}
log_dir: $W/runs
command: [python3, $W/noop.py]
EOF

python3 - "$DTRAIN" "$W" "$reps_true" "$reps_torch" <<'EOF'
import statistics, subprocess, sys, time
dtrain, w, reps_true, reps_torch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

def timed(cmd):
    t = time.perf_counter()
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=w)
    dt = time.perf_counter() - t
    if r.returncode != 0:
        sys.exit(f"launch_overhead: {' '.join(cmd)} failed with {r.returncode}:\n{r.stderr.decode()[-2000:]}")
    return dt

def case(title, reps, ours, theirs):
    a, b = [], []
    for _ in range(reps):
        a.append(timed(ours))
        b.append(timed(theirs))
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"{title} ({reps} runs each, median wall time)")
    print(f"  dtrain launch : {ma * 1000:10.1f} ms   (min {min(a) * 1000:.1f}, max {max(a) * 1000:.1f})")
    print(f"  torchrun      : {mb * 1000:10.1f} ms   (min {min(b) * 1000:.1f}, max {max(b) * 1000:.1f})")
    print(f"  ratio torchrun/dtrain: {mb / ma:.1f}x")
    return ma, mb

case("4 ranks of `true`", reps_true,
     [dtrain, "launch", "--quiet", f"{w}/true.yaml"],
     ["torchrun", "--standalone", "--nproc_per_node", "4", "--no-python", "true"])
case("4-rank no-op PyTorch job (gloo init, barrier, destroy)", reps_torch,
     [dtrain, "launch", "--quiet", f"{w}/noop.yaml"],
     ["torchrun", "--standalone", "--nproc_per_node", "4", f"{w}/noop.py"])
EOF
