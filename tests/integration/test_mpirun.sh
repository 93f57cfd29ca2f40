#!/usr/bin/env bash
# test_mpirun.sh - scheduler: mpirun with backend: mpi under real Open MPI
# (mpirun --oversubscribe, loopback only): the bundled trainer on 4 MPI ranks
# learns as the same job does on tcp; `dtrain bench allreduce` runs on the MPI
# backend and checks its results; a failing rank ends the job with the summary
# naming it; a failure is retried as a whole; Ctrl-C stops every rank; a
# missing mpirun is a clear error.
. "$(dirname "$0")/lib.sh"

command -v mpirun >/dev/null || { not_ok "mpirun is not installed (scripts/install-deps.sh installs openmpi-bin)"; exit 1; }
"$DTRAIN" version 2>&1 | grep -q . || true
# Open MPI refuses root unless asked; CI containers run as root.
root=false; [ "$(id -u)" = 0 ] && root=true
MPIRUN="mpirun: {allow_run_as_root: $root, oversubscribe: true, interfaces: [lo],
         extra_args: [--mca, btl_vader_single_copy_mechanism, none]}"

summary_of() { sed -n 's/.*logs and summary.json in \(.*\)$/\1/p' "$T/last.err" | tail -n 1; }

# --- the trainer on 4 MPI ranks, against the same job on tcp ----------------
trainer_job() { # name scheduler backend
  cat <<EOF
name: $1
scheduler: $2
nproc_per_node: 4
backend: $3
$( [ "$2" = mpirun ] && echo "$MPIRUN" )
trainer:
  model: {hidden: [64]}
  data: {batch_size: 32, workers: 1}
  steps: 40
  scheduler: {type: constant}
  eval: {every_epochs: 0}
EOF
}
trainer_job mpitrain mpirun mpi >"$T/mpi.yaml"
trainer_job tcptrain local tcp >"$T/tcp.yaml"
expect_status 0 "the trainer runs on 4 MPI ranks through mpirun" "$DTRAIN" launch "$T/mpi.yaml" --log-dir "$T/runs"
run=$(summary_of)
contains "$run/summary.json" '"status": "succeeded"' "summary.json says succeeded"
contains "$run/summary.json" '"world_size": 4' "summary.json counts 4 ranks"
contains "$run/summary.json" '"mpirun", "-np", "4", "--map-by", "ppr:4:node"' "summary.json records the mpirun line"
check "each rank's output has its own log file" test -s "$run/attempt_0/rank_0.out"
contains "$T/last.out" '^\[rank 0\] done: 40 steps' "rank 0's lines carry the [rank 0] prefix"
check "the token travels by name only (-x DTRAIN_JOB_TOKEN)" grep -q '"-x", "DTRAIN_JOB_TOKEN"' "$run/summary.json"
mpi_loss=$(sed -n 's/.*"final_loss": \([0-9.e-]*\).*/\1/p' "$run/trainer_summary.json")
expect_status 0 "the same job runs on 4 tcp ranks" "$DTRAIN" launch "$T/tcp.yaml" --log-dir "$T/runs"
tcp_loss=$(sed -n 's/.*"final_loss": \([0-9.e-]*\).*/\1/p' "$(summary_of)/trainer_summary.json")
echo "# final loss: mpi $mpi_loss, tcp $tcp_loss"
check "MPI and tcp reach the same loss (within 1e-3: only the summation order differs)" \
  awk -v a="$mpi_loss" -v b="$tcp_loss" 'BEGIN { d = a - b; exit !(a != "" && b != "" && d < 1e-3 && d > -1e-3) }'

# --- agents: mpirun starts 2 dtrain agents, each runs 2 ranks ---------------
# One machine plays both nodes: --map-by slot instead of ppr:1:node.
cat >"$T/agents.yaml" <<EOF
name: mpiagents
scheduler: mpirun
nodes: 2
nproc_per_node: 2
backend: tcp
mpirun: {hosts: ['localhost:2'], allow_run_as_root: $root, oversubscribe: true, interfaces: [lo],
         extra_args: [--map-by, slot, --mca, btl_vader_single_copy_mechanism, none]}
trainer:
  model: {hidden: [64]}
  data: {batch_size: 32, workers: 1}
  steps: 40
  scheduler: {type: constant}
  eval: {every_epochs: 0}
EOF
expect_status 0 "dtrain render mpirun prints the agents' line" "$DTRAIN" render mpirun "$T/agents.yaml"
contains "$T/last.out" '^mpirun -np 2 --host localhost:2 .*-x DTRAIN_JOB_TOKEN .*--map-by slot .* agent ' \
  "one agent per node, the token passed by name, the user's --map-by instead of ppr:1:node"
expect_status 0 "the trainer runs as 2 agents x 2 ranks under mpirun" "$DTRAIN" launch "$T/agents.yaml" --log-dir "$T/runs"
contains "$T/last.err" 'job mpiagents: 2 agents through mpirun' "the launcher started two agents through mpirun"
contains "$T/last.err" 'node 1 of 2, 2 ranks .*global ranks 2-3' "the second agent learned it is node 1 from OMPI_COMM_WORLD_RANK"
agents_run=$(ls -d "$T"/runs/mpiagents-* | head -n 1)
contains "$agents_run/summary.json" '"world_size": 4' "node 0 wrote summary.json for 4 ranks"
agents_loss=$(sed -n 's/.*"final_loss": \([0-9.e-]*\).*/\1/p' "$agents_run/trainer_summary.json")
echo "# final loss: agents over tcp $agents_loss"
check "the agents' job learns as the MPI one does (within 1e-3)" \
  awk -v a="$agents_loss" -v b="$mpi_loss" 'BEGIN { d = a - b; exit !(a != "" && b != "" && d < 1e-3 && d > -1e-3) }'

# --- dtrain bench allreduce on the MPI backend ------------------------------
cat >"$T/bench.yaml" <<EOF
name: mpibench
scheduler: mpirun
nproc_per_node: 3
backend: mpi
$MPIRUN
command: ["$DTRAIN", bench, allreduce, -b, "8", -e, 4M, -f, "8", -n, "5", -d, all, -o, all]
EOF
expect_status 0 "dtrain bench allreduce runs on 3 MPI ranks, every dtype and op" "$DTRAIN" launch "$T/bench.yaml" --log-dir "$T/runs"
contains "$T/last.out" 'backend mpi, 3 rank' "the bench says it measured the mpi backend"
contains "$T/last.out" 'bfloat16 +max' "bfloat16 max rows are there (a user-defined MPI_Op)"
contains "$T/last.out" 'Out of bounds values : 0 OK' "every value was right"

# --- a failing rank ends the job with the summary ---------------------------
fail_job() { # name max_restarts script
  cat <<EOF
name: $1
scheduler: mpirun
nproc_per_node: 3
backend: mpi
max_restarts: $2
$MPIRUN
command: [sh, -c, '$3']
EOF
}
fail_job mpifail 0 'echo up $RANK; if [ "$RANK" = 1 ]; then echo "boom: bad batch" >&2; exit 3; fi; sleep 30' >"$T/fail.yaml"
start=$(date +%s)
expect_status 3 "rank 1 exiting with 3 ends the job with status 3" "$DTRAIN" launch "$T/fail.yaml" --log-dir "$T/runs"
check "the others were stopped at once, not after their 30 s" test $(( $(date +%s) - start )) -lt 20
contains "$T/last.err" 'rank 1 failed first \(attempt 0.*exited with code 3' "the launcher names rank 1 and how it failed"
contains "$T/last.err" '  \| boom: bad batch' "and shows the tail of its stderr"
run=$(summary_of)
contains "$run/summary.json" '"first_failure": \{"attempt": 0, "rank": 1, .*"exit_code": 3' "summary.json names the first failure"
contains "$run/attempt_0/rank_1.err" 'boom: bad batch' "rank 1's stderr is in its own log"
contains "$run/summary.json" '"first_failed_rank": 1, "hung_rank": null,' "no rank is called hung (mpirun has no watchdog of ours)"
contains "$run/summary.json" '\{"rank": 0, "local_rank": 0, "pid": [1-9][0-9]*, .*"stopped_by_dtrain": true' \
  "summary.json lists rank 0 with its pid, as stopped because of the failure"
contains "$run/summary.json" '"mpirank", "--", "sh"' "each rank ran under dtrain mpirank"

fail_job mpiretry 1 'if [ "$DTRAIN_RESTART_COUNT" = 0 ] && [ "$RANK" = 2 ]; then exit 5; fi; echo fine' >"$T/retry.yaml"
expect_status 0 "a failure is retried by restarting mpirun as a whole" "$DTRAIN" launch "$T/retry.yaml" --log-dir "$T/runs"
contains "$(summary_of)/summary.json" '"n_attempts": 2' "summary.json counts two attempts"
contains "$T/last.err" 'restarting every rank \(attempt 2 of 2\)' "the launcher says it restarts"

# --- Ctrl-C, and the token stays off every command line ---------------------
fail_job mpiint 0 "echo \$DTRAIN_JOB_TOKEN >$T/tok.\$RANK; echo ready; sleep 61" >"$T/int.yaml"
"$DTRAIN" launch "$T/int.yaml" --log-dir "$T/runs" --grace-period 2 >"$T/int.out" 2>"$T/int.err" &
pid=$!
for _ in $(seq 100); do [ "$(grep -c ready "$T/int.out" 2>/dev/null)" = 3 ] && break; sleep 0.1; done
tok=$(cat "$T/tok.2" 2>/dev/null)
check "every rank got the 64-digit job token" test ${#tok} = 64
check "no command line of the machine shows it" sh -c "[ -n '$tok' ] && ! ps -eo args | grep -v grep | grep -qF '$tok'"
start=$(date +%s)
kill -INT $pid
wait $pid; st=$?
check "SIGINT ends the job with status 130 (got $st)" test "$st" = 130
check "within the grace period" test $(( $(date +%s) - start )) -lt 10
check "no rank is left behind (the shells' sleep included)" sh -c "! pgrep -f 'sleep 6[1]' >/dev/null"

# --- SIGKILL to the launcher: mpirun's guard stops it and what its ranks started --
# The guard gives mpirun SIGTERM and the grace period (2 s) to stop its ranks, then
# SIGKILLs whatever is left, what left mpirun's reach (setsid) included; each rank and
# its children write their pids.
cat >"$T/k9rank.sh" <<'EOF'
out=$K9/pids.$RANK
sleep 63 & echo $! >>"$out"
setsid sh -c 'echo $$ >>"$1"; exec sleep 64' _ "$out" &
echo $$ >>"$out"
echo ready
wait
EOF
mkdir -p "$T/k9"
fail_job mpikill9 0 "K9=$T/k9 exec sh $T/k9rank.sh" >"$T/k9.yaml"
"$DTRAIN" launch "$T/k9.yaml" --log-dir "$T/runs" --grace-period 2 >"$T/k9.out" 2>"$T/k9.err" &
pid=$!
for _ in $(seq 100); do [ "$(grep -c ready "$T/k9.out" 2>/dev/null)" = 3 ] && break; sleep 0.1; done
tracked=$(cat "$T"/k9/pids.* 2>/dev/null; cat /proc/$pid/task/*/children 2>/dev/null)
check "the MPI ranks and their children are running ($(echo $tracked | wc -w) pids)" test "$(echo $tracked | wc -w)" -ge 10
kill -KILL $pid; wait $pid 2>/dev/null
left=$tracked
for _ in $(seq 80); do
  left=$(for p in $tracked; do [ -d /proc/$p ] && [ "$(cut -d' ' -f3 /proc/$p/stat 2>/dev/null)" != Z ] && echo $p; done)
  [ -z "$left" ] && break; sleep 0.1
done
check "nothing of the job is left within the grace period + 6 s${left:+ (left: $left)}" test -z "$left"

# --- errors -------------------------------------------------------------------
cat >"$T/noprog.yaml" <<EOF
name: noprog
scheduler: mpirun
backend: mpi
mpirun: {program: /nonexistent/mpirun}
command: [true]
EOF
expect_status 2 "a missing mpirun.program is refused" "$DTRAIN" launch "$T/noprog.yaml" --log-dir "$T/runs"
contains "$T/last.err" "mpirun.program '/nonexistent/mpirun' does not exist" "the message names it"
cat >"$T/local.yaml" <<EOF
name: localmpi
backend: mpi
command: [true]
EOF
expect_status 2 "backend: mpi with scheduler: local is refused" "$DTRAIN" launch "$T/local.yaml"
contains "$T/last.err" "local.yaml:2:.*mpi needs scheduler: mpirun" "the message points at the backend line"

# --- issue 29: setup: lines run on each host before its agent -----------------------
cat >"$T/setup.yaml" <<EOF
name: setup
scheduler: mpirun
nodes: 2
setup: ['export SETUP_MARK=from-setup', 'echo "setup ran on \$(hostname)" >&2']
command: [sh, -c, 'echo "rank \$RANK mark=\${SETUP_MARK:-none}"']
mpirun: {allow_run_as_root: $root, oversubscribe: true, extra_args: [--map-by, slot]}
EOF
expect_status 0 "a job with setup: lines runs under mpirun" "$DTRAIN" launch "$T/setup.yaml" --log-dir "$T/runs"
check "setup ran once before each of the 2 agents" test "$(grep -c '^setup ran on' "$T/last.err")" = 2
check "the environment setup makes reaches every rank through its agent" \
  test "$(grep -cE '^\[rank [01]\] rank [01] mark=from-setup$' "$T/last.out")" = 2
"$DTRAIN" render mpirun "$T/setup.yaml" >"$T/setup.render" 2>&1
contains "$T/setup.render" "/bin/sh -c [\$]'set -e\\\\nexport SETUP_MARK=from-setup\\\\n" \
  "the rendered line runs setup in a shell before the agent (the script one \$'...' word, its newlines \\n)"
contains "$T/setup.render" "exec \"[\$]@\"\\\\n' dtrain-setup dtrain agent .*setup.yaml" "which then execs the agent"
cat >"$T/setupfail.yaml" <<EOF
name: setupfail
scheduler: mpirun
setup: ['false']
command: [sh, -c, 'echo "rank ran"']
mpirun: {allow_run_as_root: $root}
EOF
expect_status 1 "a failing setup: line stops the node before its agent" "$DTRAIN" launch "$T/setupfail.yaml" --log-dir "$T/runs"
if grep -q "rank ran" "$T/last.out"; then not_ok "no rank runs after a failed setup line"; else ok "no rank runs after a failed setup line"; fi
