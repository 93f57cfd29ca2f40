#!/usr/bin/env bash
# test_fault.sh - fault tolerance end to end (issue 9), each case with its own check:
#  - 10 random kill points (rank, step and delay from a printed seed; DTRAIN_FAULT_SEED
#    replays them): a 4-rank trainer job whose rank is SIGKILLed restarts from its newest
#    checkpoint and ends with final parameters and optimizer state bit-identical to a
#    run never interrupted (the final safetensors compared byte for byte);
#  - a trainer rank stopped with SIGSTOP is declared hung within heartbeat_timeout + 5 s,
#    summary.json names the rank and its step, and the job recovers bit-identically;
#  - a trainer rank whose compute thread hangs is named by its peers' all-reduce deadline
#    and the job recovers bit-identically;
#  - a truncated newest checkpoint is rejected with a message and the previous one
#    used (the result still bit-identical); all of them damaged stops the job;
#  - a command: rank (sh, and a PyTorch DDP script) that stops itself is caught from
#    /proc alone and the job recovers; restart_policy.on_exit makes 42 final, 3 retried;
#  - a restart gets an empty store at the same address (stale keys broke PyTorch restarts);
#  - the coordinator's death makes the workers exit with a clear error within
#    rendezvous.timeout, leaving no process behind.
. "$(dirname "$0")/lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)

# trainer_job NAME [CHECKPOINT_DIR]: 4 ranks, hidden [32], 40 steps, a checkpoint every 4.
# heartbeat_timeout 10 s, so a loaded CI machine never fakes a hang; the stop test lowers it.
trainer_job() {
  cat <<EOF
name: $1
nproc_per_node: 4
max_restarts: 2
rendezvous: {heartbeat_timeout: 10s, timeout: 20s}
trainer:
  model: {hidden: [32]}
  data: {batch_size: 32, workers: 1}
  steps: 40
  checkpoint: {every_steps: 4, keep: 3${2:+, dir: $2}}
  eval: {every_epochs: 0}
EOF
}
trainer_job fault >"$T/job.yaml"

# The run directory the launcher named on its last line.
run_dir() { sed -n 's/.*logs and summary.json in \(.*\)$/\1/p' "$1" | tail -n 1; }
# json_num FILE KEY: the first number after "KEY": in FILE.
json_num() { sed -n "s/.*\"$2\": \([-0-9.e]*\).*/\1/p" "$1" | head -n 1; }

# --- the uninterrupted reference --------------------------------------------------
expect_status 0 "the reference run (4 ranks, 40 steps) succeeds" "$DTRAIN" launch "$T/job.yaml" --log-dir "$T/runs"
ref_dir=$(run_dir "$T/last.err")
ref="$T/reference.safetensors"
cp "$ref_dir/checkpoints/step_00000040.safetensors" "$ref" 2>/dev/null
check "the reference run left its final checkpoint" test -s "$ref"

# --- random kill points ---------------------------------------------------------
seed=${DTRAIN_FAULT_SEED:-$(date +%s)}
echo "# kill points from seed $seed (DTRAIN_FAULT_SEED=$seed replays them)"
RANDOM=$seed
same=0
for i in $(seq 10); do
  r=$((RANDOM % 4)) s=$((RANDOM % 32 + 1)) d=$((RANDOM % 15))
  DTRAIN_FAULT=kill:$r:$s:$d "$DTRAIN" launch "$T/job.yaml" --log-dir "$T/runs" >"$T/k.out" 2>"$T/k.err"
  rc=$?
  dir=$(run_dir "$T/k.err")
  got="$dir/checkpoints/step_00000040.safetensors"
  resumed=$(sed -n 's/.*resuming from .*step_0*\([0-9]*\)\.safetensors.*/\1/p' "$T/k.err" | head -n 1)
  echo "# kill $i: rank $r SIGKILLed $d ms after step $s; resumed from step ${resumed:-0 (no checkpoint yet)}; exit $rc"
  if [ "$rc" = 0 ] && grep -q '"n_attempts": 2' "$dir/summary.json" &&
     grep -Eq "\"first_failure\": \{\"attempt\": 0, \"rank\": $r, .*\"signal\": \"SIGKILL\"" "$dir/summary.json" &&
     cmp -s "$ref" "$got"; then
    same=$((same + 1))
  else
    not_ok "kill point $i (rank $r, step $s, +$d ms): exit $rc, final checkpoint differs or the summary does not show the kill"
    tail -n 15 "$T/k.err" | sed 's/^/    /'
  fi
done
check "10 of 10 kill points: killed, restarted once, final state bit-identical to the reference" test "$same" = 10

# --- a stopped trainer rank ---------------------------------------------------------
sed 's/heartbeat_timeout: 10s/heartbeat_timeout: 2s/' "$T/job.yaml" >"$T/stop.yaml"
expect_status 0 "a trainer job with rank 1 SIGSTOPped after step 10 recovers" \
  env DTRAIN_FAULT=stop:1:10 "$DTRAIN" launch "$T/stop.yaml" --log-dir "$T/runs"
dir=$(run_dir "$T/last.err")
sum="$dir/summary.json"
contains "$sum" '"hang": \{"rank": 1, "step": [0-9]+, "detected_s": ' "summary.json names the hung rank and its last step"
contains "$sum" '"hung_rank": 1,' "the attempt records the hung rank"
check "the hang report is in the attempt directory" test -s "$dir/attempt_0/hang_rank_1.txt"
contains "$dir/attempt_0/hang_rank_1.txt" "state T" "the report shows the stopped state"
stop_at=$(sed -n 's/.*SIGSTOP after step 10 .* at unix time \([0-9.]*\)$/\1/p' "$dir/attempt_0/rank_1.err")
detected=$(awk -v s="$(json_num "$sum" started_unix)" -v d="$(json_num "$sum" detected_s)" 'BEGIN { printf "%.3f", s + d }')
lag=$(awk -v a="$detected" -v b="$stop_at" 'BEGIN { printf "%.2f", a - b }')
echo "# SIGSTOP at $stop_at, verdict at $detected: $lag s (heartbeat_timeout 2 s)"
check "the stop was detected within heartbeat_timeout + 5 s (took $lag s)" awk -v l="$lag" 'BEGIN { exit !(l > 0 && l <= 7) }'
check "after the hang the result is still bit-identical" cmp -s "$ref" "$dir/checkpoints/step_00000040.safetensors"

# --- a trainer rank whose compute thread hangs (its heartbeat goes on) ------------------
# Its peers wait for it inside the all-reduce at the same step, so no step is behind; the
# communicator's deadline (rendezvous.timeout) fails them naming the stalled rank.
sed 's/timeout: 20s/timeout: 3s/' "$T/job.yaml" >"$T/hang.yaml"
expect_status 0 "a trainer job whose rank 2's compute thread hangs after step 10 recovers" \
  env DTRAIN_FAULT=hang:2:10 "$DTRAIN" launch "$T/hang.yaml" --log-dir "$T/runs"
contains "$T/last.err" "peer rank 2 .*stalled or dead" "the peers' all-reduce names the stalled rank"
check "after the hang the result is still bit-identical" cmp -s "$ref" "$(run_dir "$T/last.err")/checkpoints/step_00000040.safetensors"

# --- a damaged newest checkpoint -----------------------------------------------------
trainer_job damaged "$T/ck" >"$T/damaged.yaml"
sed -i 's/^max_restarts: 2/max_restarts: 0/' "$T/damaged.yaml"
expect_status 137 "a run killed after step 22 fails (no restarts)" \
  env DTRAIN_FAULT=kill:2:22 "$DTRAIN" launch "$T/damaged.yaml" --log-dir "$T/runs"
check "it left checkpoints 12, 16 and 20" test -f "$T/ck/step_00000012.safetensors" -a -f "$T/ck/step_00000016.safetensors" -a -f "$T/ck/step_00000020.safetensors"
truncate -s 3000 "$T/ck/step_00000020.safetensors"
expect_status 0 "the rerun with a truncated newest checkpoint succeeds" "$DTRAIN" launch "$T/damaged.yaml" --log-dir "$T/runs"
contains "$T/last.err" "checkpoint rejected: $T/ck/step_00000020.safetensors" "the damaged checkpoint is named"
contains "$T/last.err" "resuming from $T/ck/step_00000016.safetensors" "the previous checkpoint is used"
check "resumed from the previous checkpoint, the result is bit-identical" cmp -s "$ref" "$T/ck/step_00000040.safetensors"
for f in "$T"/ck/step_*.safetensors; do truncate -s 100 "$f"; done
expect_status 1 "with every checkpoint damaged the job stops" "$DTRAIN" launch "$T/damaged.yaml" --log-dir "$T/runs"
contains "$T/last.err" "no usable checkpoint in $T/ck: all 3 are damaged" "it says why, instead of starting over"

# --- command: ranks: a stopped shell, exit-code policy ----------------------------------
cat >"$T/cmd.yaml" <<'EOF'
name: cmd-stop
nproc_per_node: 3
max_restarts: 1
rendezvous: {heartbeat_timeout: 1s}
command: [sh, -c, 'if [ $RANK = 2 ] && [ $DTRAIN_RESTART_COUNT = 0 ]; then echo stopping >&2; kill -STOP $$; fi; sleep 0.3']
EOF
expect_status 0 "a command: job whose rank 2 stops itself recovers" "$DTRAIN" launch "$T/cmd.yaml" --log-dir "$T/runs"
dir=$(run_dir "$T/last.err")
contains "$dir/summary.json" '"hang": \{"rank": 2, "step": null, ' "summary.json names the stopped command rank (no step: no heartbeat)"
contains "$dir/summary.json" '"n_attempts": 2,' "one restart"

cat >"$T/policy.yaml" <<'EOF'
name: cmd-policy
nproc_per_node: 2
max_restarts: 3
restart_policy: {on_exit: {42: fail}}
command: [sh, -c, '[ $RANK = 1 ] && exit $CODE; sleep 0.2']
EOF
expect_status 42 "exit 42 with on_exit {42: fail} is final" env CODE=42 "$DTRAIN" launch "$T/policy.yaml" --log-dir "$T/runs"
contains "$T/last.err" "exit status 42, which restart_policy.on_exit says is final" "the launcher says why it does not restart"
dir=$(run_dir "$T/last.err")
contains "$dir/summary.json" '"n_attempts": 1,' "no restart after a final exit code"
contains "$dir/summary.json" '"final": true' "summary.json marks the failure final"
expect_status 3 "exit 3 (not listed) is retried up to max_restarts" env CODE=3 "$DTRAIN" launch "$T/policy.yaml" --log-dir "$T/runs"
contains "$(run_dir "$T/last.err")/summary.json" '"n_attempts": 4,' "three restarts, then the job fails"

# A restart gets an empty store at the same address (as torchrun's new store per round):
# PyTorch's env:// rendezvous would otherwise read the last attempt's keys (Gloo's peer
# addresses) and connect to dead ranks.
PROBE=${BUILD:-build}/tests/helpers/store_probe
if [ -x "$PROBE" ]; then
  cat >"$T/fresh.yaml" <<EOF
name: fresh-store
nproc_per_node: 1
max_restarts: 1
command: [sh, -c, 'if [ \$DTRAIN_RESTART_COUNT = 0 ]; then $PROBE 127.0.0.1 \$MASTER_PORT set stale yes; exit 1; fi; $PROBE 127.0.0.1 \$MASTER_PORT set fresh yes || exit 8; if timeout 2 $PROBE 127.0.0.1 \$MASTER_PORT get stale; then exit 7; fi']
EOF
  expect_status 0 "a restarted attempt does not see the keys of the one before (same port, empty store)" \
    "$DTRAIN" launch "$T/fresh.yaml" --log-dir "$T/runs"
else
  not_ok "store_probe helper is built ($PROBE)"
fi

# --- a PyTorch script ---------------------------------------------------------------
if python3 -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>"$T/torch.err"; then
  torch_job() { # FAULT FAULT_STEP
    cat <<EOF
name: torch-fault
nproc_per_node: 2
max_restarts: 1
restart_policy: {on_exit: {42: fail}}
command: [python3, $ROOT/tests/integration/fault_torch.py]
env: {GLOO_SOCKET_IFNAME: lo, FAULT: "$1", FAULT_RANK: "1", FAULT_STEP: "$2"}
rendezvous: {auth: none, timeout: 60s, heartbeat_timeout: 2s}
EOF
  }
  torch_job stop 5 >"$T/torch-stop.yaml"
  expect_status 0 "a PyTorch DDP job whose rank 1 stops itself recovers" "$DTRAIN" launch "$T/torch-stop.yaml" --log-dir "$T/runs"
  dir=$(run_dir "$T/last.err")
  contains "$dir/summary.json" '"hang": \{"rank": 1, "step": null, ' "summary.json names the stopped PyTorch rank"
  check "both ranks finished on the restart" test "$(grep -c 'done, checksum' "$T/last.out")" = 2
  torch_job exit:42 3 >"$T/torch-exit.yaml"
  expect_status 42 "a PyTorch rank exiting 42 under on_exit {42: fail} is final" "$DTRAIN" launch "$T/torch-exit.yaml" --log-dir "$T/runs"
  if ! contains "$(run_dir "$T/last.err")/summary.json" '"n_attempts": 1,' "no restart"; then
    echo "    what the launcher said:"; grep '^dtrain:' "$T/last.err" | sed 's/^/    /'
  fi
else
  not_ok "PyTorch with Gloo is importable (scripts/install-deps.sh installs it)"; tail -3 "$T/torch.err" | sed 's/^/    /'
fi

# --- the coordinator's death -----------------------------------------------------------
cat >"$T/long.yaml" <<'EOF'
name: long
nproc_per_node: 2
rendezvous: {auth: none, timeout: 3s, heartbeat_timeout: 1s}
trainer:
  model: {hidden: [32]}
  data: {batch_size: 32, workers: 1}
  steps: 1000000
  checkpoint: {every_steps: 0}
  eval: {every_epochs: 0}
  log_every_steps: 1
EOF
"$DTRAIN" coordinator --port 0 --auth none >"$T/coord.out" 2>"$T/coord.err" &
cpid=$!
port=""
for _ in $(seq 100); do
  port=$(sed -n 's/.*listening on 0.0.0.0:\([0-9]*\).*/\1/p' "$T/coord.out")
  [ -n "$port" ] && break; sleep 0.1
done
mkdir -p "$T/w"
wpids=()
for r in 0 1; do
  RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 OMP_NUM_THREADS=1 DTRAIN_COORD_ADDR=127.0.0.1:$port \
    DTRAIN_RUN_DIR="$T/w" "$DTRAIN" worker "$T/long.yaml" >"$T/w$r.out" 2>"$T/w$r.err" &
  wpids+=($!)
done
for _ in $(seq 300); do grep -q '"step": 20,' "$T/w/metrics.jsonl" 2>/dev/null && break; sleep 0.1; done
check "two hand-started workers train against a standalone coordinator" grep -q '"step": 20,' "$T/w/metrics.jsonl"
kill -KILL "$cpid"; wait "$cpid" 2>/dev/null
t0=$(date +%s.%N)
alive=2
for _ in $(seq 100); do
  alive=0; for p in "${wpids[@]}"; do kill -0 "$p" 2>/dev/null && alive=$((alive + 1)); done
  [ "$alive" = 0 ] && break; sleep 0.1
done
took=$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { printf "%.1f", a - b }')
echo "# the workers were gone $took s after the coordinator was killed (rendezvous.timeout 3 s)"
check "both workers exited within rendezvous.timeout + 2 s of the coordinator's death (took $took s)" \
  awk -v t="$took" -v a="$alive" 'BEGIN { exit !(a == 0 && t <= 5) }'
failed=0
for p in "${wpids[@]}"; do kill -KILL "$p" 2>/dev/null; wait "$p"; [ $? -ne 0 ] && failed=$((failed + 1)); done
check "both exited with a non-zero status" test "$failed" = 2
contains "$T/w0.err" "rank 0: lost the coordinator 127.0.0.1:$port" "rank 0 says it lost the coordinator, and which"
contains "$T/w1.err" "rank 1: lost the coordinator 127.0.0.1:$port" "rank 1 too"
