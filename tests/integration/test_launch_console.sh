# test_launch_console.sh - what of the ranks' output reaches the console:
# --ranks and `dtrain run --local-ranks-filter` filter stdout and stderr
# alike; console.redirects / -r send a stream to the log file only and
# console.tee / -t to both, per local rank as torchrun's Std maps say; a tqdm
# bar (real tqdm from .venv) and a line that stalls mid-way reach the console
# while the rank is still writing them, under its prefix; a PyTorch DDP
# script's print, logging and warnings obey the filter.  The log files get
# everything in every case.  console.line_prefix (--log-line-prefix-template)
# renders as torchrun's does.
. "$(dirname "$0")/lib.sh"

job() {
  local name=$1; shift
  { echo "name: $name"; echo "scheduler: local"; echo "log_dir: $T/runs"; printf '%s\n' "$@"; } >"$T/$name.yaml"
}
run_dir_of() { ls -d "$T"/runs/"$1"-* | tail -n 1; }
python=$PWD/.venv/bin/python
[ -x "$python" ] || python=python3

# Every rank writes one line to each stream.
job both 'nproc_per_node: 3' "command: [sh, -c, 'echo out \$RANK; echo err \$RANK >&2']"

# --- the rank filter: both streams --------------------------------------------------
expect_status 0 "--ranks 1 launch" "$DTRAIN" launch --ranks 1 "$T/both.yaml"
check "--ranks 1: rank 1's stdout is shown, no other rank's" \
  bash -c "grep -qx '\[rank 1\] out 1' '$T/last.out' && ! grep -q '^\[rank [02]\]' '$T/last.out'"
check "--ranks 1: rank 1's stderr is shown, no other rank's" \
  bash -c "grep -qx '\[rank 1\] err 1' '$T/last.err' && ! grep -q '^\[rank [02]\]' '$T/last.err'"
rd=$(run_dir_of both)
check "--ranks 1: the log files of the ranks left out still have both streams" \
  bash -c "grep -qx 'out 0' '$rd/attempt_0/rank_0.out' && grep -qx 'err 2' '$rd/attempt_0/rank_2.err'"

printf 'echo out $LOCAL_RANK; echo err $LOCAL_RANK >&2\n' >"$T/both.sh"
expect_status 0 "dtrain run --local-ranks-filter 0,2" \
  "$DTRAIN" run --auth none --log-dir "$T/runs" -n 3 --local-ranks-filter 0,2 --no-python sh "$T/both.sh"
check "--local-ranks-filter 0,2: ranks 0 and 2 on both streams, never rank 1" \
  bash -c "grep -qx '\[rank 2\] out 2' '$T/last.out' && grep -qx '\[rank 0\] err 0' '$T/last.err' &&
           ! grep -q '^\[rank 1\]' '$T/last.out' '$T/last.err'"

# --- redirects and tee, as torchrun's Std ------------------------------------------------
# rank 0: stdout redirected and teed (shown), stderr redirected (log only); rank 1: both
# redirected (nothing shown); rank 2: nothing redirected (both shown).
job std 'nproc_per_node: 3' 'console: {redirects: "0:3,1:3,2:0", tee: "0:1"}' \
  "command: [sh, -c, 'echo out \$RANK; echo err \$RANK >&2']"
expect_status 0 "console.redirects and console.tee per local rank" "$DTRAIN" launch "$T/std.yaml"
check "tee 0:1 over redirects 0:3: rank 0's stdout is shown, its stderr is not" \
  bash -c "grep -qx '\[rank 0\] out 0' '$T/last.out' && ! grep -q '^\[rank 0\]' '$T/last.err'"
check "redirects 1:3: nothing of rank 1 on the console" bash -c "! grep -q '^\[rank 1\]' '$T/last.out' '$T/last.err'"
check "redirects 2:0: both of rank 2's streams are shown" \
  bash -c "grep -qx '\[rank 2\] out 2' '$T/last.out' && grep -qx '\[rank 2\] err 2' '$T/last.err'"
rd=$(run_dir_of std)
check "redirected streams are in the log files" \
  bash -c "grep -qx 'err 0' '$rd/attempt_0/rank_0.err' && grep -qx 'out 1' '$rd/attempt_0/rank_1.out'"

expect_status 0 "dtrain run -r 2 (stderr to the log files only)" \
  "$DTRAIN" run --auth none --log-dir "$T/runs" -n 2 -r 2 --no-python sh "$T/both.sh"
check "-r 2: stdout shown, stderr not" \
  bash -c "grep -qx '\[rank 1\] out 1' '$T/last.out' && ! grep -q '^\[rank' '$T/last.err'"
expect_status 0 "dtrain run -r 3 -t 2" \
  "$DTRAIN" run --auth none --log-dir "$T/runs" -n 2 -r 3 -t 2 --no-python sh "$T/both.sh"
check "-r 3 -t 2: stderr shown, stdout not" \
  bash -c "grep -qx '\[rank 0\] err 0' '$T/last.err' && ! grep -q '^\[rank' '$T/last.out'"

# --- the prefix: torchrun's --log-line-prefix-template ---------------------------------------
expect_status 0 "dtrain run --role trainer --log-line-prefix-template" \
  "$DTRAIN" run --auth none --log-dir "$T/runs" -n 2 --role trainer \
  --log-line-prefix-template '[${role_name}${local_rank}]:${rank}@${hostname} $$ ' --no-python sh "$T/both.sh"
check "the template's names are replaced on both streams, \$\$ is a dollar" \
  bash -c "grep -qx '\[trainer1\]:1@$(hostname) \\\$ out 1' '$T/last.out' && grep -qx '\[trainer0\]:0@$(hostname) \\\$ err 0' '$T/last.err'"

# --- a line reaches the console as it is written ----------------------------------------
# watch_for FILE PATTERN PID: whether PATTERN shows in FILE while PID still runs (15 s at most).
watch_for() {
  for _ in $(seq 300); do
    grep -Eq -- "$2" "$1" 2>/dev/null && kill -0 "$3" 2>/dev/null && return 0
    kill -0 "$3" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}

# A real tqdm bar on stderr: 4 steps 1.5 s apart, then a pause of 4 s before the newline
# (tqdm's close) and the rank's end; one rank, so no other line ends it early.
cat >"$T/bar.py" <<'EOF'
import sys, time
from tqdm import tqdm
bar = tqdm(total=4, file=sys.stderr, mininterval=0, miniters=1, ascii=True)
for i in range(4):
    time.sleep(1.5)
    bar.update(1)
time.sleep(4)
bar.close()
print("after the bar", flush=True)
EOF
job bar 'nproc_per_node: 1' "command: ['$python', '$T/bar.py']"
"$DTRAIN" launch "$T/bar.yaml" >"$T/bar.out" 2>"$T/bar.err" &
pid=$!
check "tqdm: '2/4' is on the console under the rank's prefix while the bar is being drawn" \
  watch_for "$T/bar.err" '\[rank 0\] +50%\|#+ *\| 2/4' "$pid"
check "tqdm: no newline has ended the bar's line then" test "$(tail -c 1 "$T/bar.err" | od -An -tx1 | tr -d ' ')" != 0a
wait "$pid"; status=$?
check "tqdm job succeeded (exit $status)" test "$status" = 0
check "tqdm: each redraw starts after a \\r under the prefix; the last one ends the line" \
  bash -c "tr '\r' '@' <'$T/bar.err' | grep -Eq '@\[rank 0\] +100%\|#+\| 4/4 [^@]*\$'"
check "tqdm: the log file has the bar's bytes as written" bash -c "tr '\r' '@' <'$(run_dir_of bar)/attempt_0/rank_0.err' | grep -q '@ 50%'"

# A line that stalls mid-way (print(..., end="")) is shown as far as it came, and its rest
# follows on the same console line.
cat >"$T/stall.py" <<'EOF'
import time
print("loss", end="", flush=True)
time.sleep(3)
print(" 1.5", flush=True)
EOF
job stall 'nproc_per_node: 1' "command: ['$python', '$T/stall.py']"
"$DTRAIN" launch "$T/stall.yaml" >"$T/stall.out" 2>"$T/stall.err" &
pid=$!
check "a stalled line is shown before its newline" watch_for "$T/stall.out" '^\[rank 0\] loss$' "$pid"
wait "$pid"
check "its rest follows on the same line" grep -qx '\[rank 0\] loss 1\.5' "$T/stall.out"

# --- a PyTorch DDP script: the filter holds for its logging and warnings too ---------------
cat >"$T/ddp.py" <<'EOF'
import logging, os, warnings
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
print("sum", int(t.item()), "on rank", dist.get_rank(), flush=True)
logging.warning("a logging warning from rank %d", dist.get_rank())
warnings.warn(f"a Python warning from rank {dist.get_rank()}")
dist.destroy_process_group()
EOF
if "$python" -c 'import torch' 2>/dev/null; then
  expect_status 0 "a PyTorch DDP script under dtrain run --local-ranks-filter 1" \
    "$DTRAIN" run --auth none --log-dir "$T/runs" -n 2 --local-ranks-filter 1 "$T/ddp.py"
  check "PyTorch: rank 1's print, logging warning and Python warning are shown" \
    bash -c "grep -qx '\[rank 1\] sum 2 on rank 1' '$T/last.out' && grep -q '^\[rank 1\] WARNING:root:a logging warning from rank 1' '$T/last.err' &&
             grep -q '^\[rank 1\] .*UserWarning: a Python warning from rank 1' '$T/last.err'"
  check "PyTorch: nothing of rank 0 on either stream" bash -c "! grep -q '^\[rank 0\]' '$T/last.out' '$T/last.err'"
  rd=$(run_dir_of ddp)
  check "PyTorch: rank 0's log files have its print and both warnings" \
    bash -c "grep -q 'sum 2 on rank 0' '$rd/attempt_0/rank_0.out' && grep -q 'a logging warning from rank 0' '$rd/attempt_0/rank_0.err' &&
             grep -q 'a Python warning from rank 0' '$rd/attempt_0/rank_0.err'"
else
  not_ok "PyTorch is importable from $python (scripts/install-deps.sh puts it in .venv)"
fi
