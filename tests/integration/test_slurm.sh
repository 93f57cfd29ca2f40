#!/usr/bin/env bash
# test_slurm.sh - dtrain on a REAL Slurm cluster (scripts/slurm-local.sh: one slurmctld and two
# slurmd on this machine): the trainer through `dtrain launch` with 2 nodes x 2 ranks, the
# rendered examples up to date and one submitted with plain sbatch, a failing rank, a job
# cancelled with Ctrl-C, a requeue on SIGUSR1 that resumes from the checkpoint, a node's agent
# killed mid-run and started again by its task (the job finishes on both nodes), and an
# elastic job (nodes: 1:2, --nodes=1-2) that loses a node and finishes on the other.
# A cluster that cannot start is a failure, not a skip.
# run-tests: uses slurm
. "$(dirname "$0")/lib.sh"
REPO=$(cd "$(dirname "$0")/../.." && pwd)

# A cluster this test starts, it stops again at the end (a developer's running one stays up).
if ! "$REPO/scripts/slurm-local.sh" status >/dev/null 2>&1; then
  trap 'rm -rf "$T"; "$REPO/scripts/slurm-local.sh" down >/dev/null 2>&1' EXIT
fi
if ! "$REPO/scripts/slurm-local.sh" up >"$T/up.log" 2>&1; then
  not_ok "the local Slurm cluster starts (scripts/slurm-local.sh up)"
  sed 's/^/    /' "$T/up.log"
  exit 1
fi
ok "the local Slurm cluster starts"
export SLURM_CONF=${DTRAIN_SLURM_DIR:-/tmp/dtrain-slurm}/etc/slurm.conf
cd "$T" || exit 1

job_id() { sed -n 's/.*submitted as Slurm job \([0-9]*\).*/\1/p' "$1" | head -n1; }
state_of() { scontrol show job -o "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }
# wait_for FILE PATTERN SECONDS: until grep finds it
wait_for() {
  local i
  for ((i = 0; i < $3 * 10; i++)); do grep -Eq -- "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}
# wait_for_cr FILE TEXT SECONDS: until TEXT is in FILE followed by a carriage return
wait_for_cr() {
  local i
  for ((i = 0; i < $3 * 10; i++)); do grep -q -- "$2"$'\r' "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}
# launch_until NAME SECONDS PATTERN WHAT: `dtrain launch NAME.yaml` in the background (output in
# NAME.out/NAME.err, killed after SECONDS) until PATTERN is in NAME.out; sets pid and the Slurm job's id.
launch_until() {
  timeout "$2" "$DTRAIN" launch "$1.yaml" >"$1.out" 2>"$1.err" &
  pid=$!
  if wait_for "$1.out" "$3" 60; then ok "$4"; else not_ok "$4"; sed 's/^/    /' "$1.err" | head -n 20; fi
  id=$(job_id "$1.err")
}

# --- the trainer, 2 nodes x 2 ranks ------------------------------------------
cat >train.yaml <<'EOF'
name: train
scheduler: slurm
nodes: 2
nproc_per_node: 2
backend: tcp
trainer:
  model: {hidden: [64]}
  data: {batch_size: 64, workers: 1}
  steps: 200
  scheduler: {type: constant}
  checkpoint: {every_steps: 100, dir: checkpoints, keep: 2, resume: auto}
  eval: {every_epochs: 0}
  log_every_steps: 50
slurm: {time: "00:05:00"}
EOF
expect_status 0 "the trainer runs through Slurm on 2 nodes x 2 ranks" timeout 180 "$DTRAIN" launch train.yaml
cp "$T/last.out" train.out; cp "$T/last.err" train.err
id=$(job_id train.err)
run="runs/train-$id"
contains train.err "submitted as Slurm job [0-9]+" "launch says which Slurm job it submitted"
contains train.err "Slurm job $id is running on n\[1-2\]" "launch follows the job's state and node list"
contains train.out "^\[rank 0\] done: 200 steps, final loss" "rank 0's output is streamed to the console"
check "every rank of both nodes logged (rank_0..3)" test -f "$run/attempt_0/rank_3.out" -a -f "$run/attempt_0/rank_0.out"
contains "$run/summary.json" '"world_size": 4' "summary.json: a world of 4"
contains "$run/summary.json" '"nnodes": 2' "summary.json: 2 nodes"
contains "$run/trainer_summary.json" '"steps": 200' "the trainer's summary records 200 steps"
check "the batch script and its output are kept by the job id" test -s "runs/train-$id.sbatch" -a -s "runs/train-$id.out"
if grep -q "DTRAIN_JOB_TOKEN=[0-9a-f]\{64\}" "runs/train-$id.sbatch" train.err; then
  not_ok "the job token is not written into the script or the console"
else ok "the job token is not written into the script or the console"; fi

# --- the examples: up to date, and one submitted with plain sbatch ------------
for y in "$REPO"/examples/slurm/*.yaml; do
  s=${y%.yaml}.sbatch
  if (cd "$REPO" && "$DTRAIN" render slurm "examples/slurm/$(basename "$y")") >rendered.sbatch 2>render.err &&
     cmp -s rendered.sbatch "$s"; then ok "examples/slurm/$(basename "$s") is what dtrain render writes"
  else not_ok "examples/slurm/$(basename "$s") is what dtrain render writes (re-render it)"
    diff "$s" rendered.sbatch | head -n 20 | sed 's/^/    /'; sed 's/^/    /' render.err; fi
done
id=$(cd "$REPO" && DTRAIN="$DTRAIN" DTRAIN_LOG_DIR="$T/runs" \
     sbatch --parsable --output="$T/hello-%j.out" --error="$T/hello-%j.err" examples/slurm/hello.sbatch)
for ((i = 0; i < 600; i++)); do
  st=$(state_of "$id"); case "$st" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL) break ;; esac; sleep 0.1
done
check "the rendered hello.sbatch, submitted with plain sbatch, completes (job $id: ${st:-unknown})" test "$st" = COMPLETED
check "its 4 ranks ran on both nodes" test "$(grep -c '^\[rank [0-3]\] rank [0-3] of 4 on node [01]' "hello-$id.out")" = 4
contains "hello-$id.out" "^\[rank 3\] rank 3 of 4 on node 1 .*coordinator 127\.0\.0\.1:[0-9]+" \
  "ranks reach the coordinator at the batch host's address"

# --- a failing rank -------------------------------------------------------------
cat >fail.yaml <<'EOF'
name: fail
scheduler: slurm
nodes: 2
nproc_per_node: 2
command: [sh, -c, 'if [ "$RANK" = 3 ]; then echo "bad batch on rank 3" >&2; exit 3; fi; exec sleep 60']
EOF
expect_status 3 "a rank's exit code 3 is the launcher's exit status" \
  timeout 120 "$DTRAIN" launch --grace-period 2.5 fail.yaml
contains "$T/last.err" "rank 3 exited with code 3" "the console names the failing rank and its code"
contains "$T/last.err" "SIGKILL after 2\.5 s" "launch --grace-period reaches the agents through the batch script"
contains "$T/last.err" "bad batch on rank 3" "the failing rank's stderr is shown"
contains "$T/last.err" "ended FAILED with exit status 3" "launch reports the Slurm job's end"

# --- a cancelled job --------------------------------------------------------------
mark="slow-rank-of-${T##*/}" # in every rank's command line, so pgrep finds this test's ranks only
cat >slow.yaml <<EOF
name: slow
scheduler: slurm
nodes: 2
nproc_per_node: 2
command: [sh, -c, 'echo "rank \$RANK up"; printf "rank \$RANK bar 1/2\r"; sleep 0.3; printf "rank \$RANK bar 2/2"; sleep 120; echo $mark']
EOF
launch_until slow 120 "\[rank 3\] rank 3 up" "the long job runs"
# A progress bar's \r redraw reaches launch's console while the job runs, as a redraw: not
# only at its newline, which this one never writes.  (Its last piece, without a \r, srun
# holds until a newline: docs/slurm.md.)
check "a \\r redraw reaches the console as one (rank 3 bar 1/2, then \\r)" \
  wait_for_cr slow.out "rank 3 bar 1/2" 30
kill -INT "$pid"
wait "$pid"; rc=$?
check "Ctrl-C: launch exits 130 (exit $rc)" test "$rc" = 130
contains slow.err "cancelling Slurm job $id \(scancel\)" "launch says it cancels the job"
# COMPLETING is a flag Slurm shows over the final state while the nodes still
# clean up (scontrol prints it first): a 2-core CI VM can take a moment.
for ((i = 0; i < 100; i++)); do [ "$(state_of "$id")" = COMPLETING ] || break; sleep 0.1; done
check "Slurm shows job $id CANCELLED ($(state_of "$id"))" test "$(state_of "$id")" = CANCELLED
for ((i = 0; i < 100; i++)); do pgrep -f "$mark" >/dev/null || break; sleep 0.1; done
check "no rank of the cancelled job is left" test -z "$(pgrep -f "$mark")"

# --- requeue on SIGUSR1 -----------------------------------------------------------
cat >requeue.yaml <<'EOF'
name: requeue
scheduler: slurm
nodes: 2
nproc_per_node: 2
backend: tcp
trainer:
  model: {hidden: [64]}
  data: {batch_size: 64, workers: 1}
  steps: 1000
  scheduler: {type: constant}
  checkpoint: {every_steps: 5000, dir: checkpoints, keep: 2, resume: auto}
  eval: {every_epochs: 0}
  log_every_steps: 10
slurm: {time: "00:10:00", requeue: true}
EOF
launch_until requeue 170 "\[rank 0\] step [0-9]+0/1000" "the requeue job trains"
# What Slurm does 90 s before the time limit with --signal=B:USR1@90, sent now.
scancel --signal=USR1 --batch "$id"
wait "$pid"; rc=$?
check "the requeued job completes and launch exits 0 (exit $rc)" test "$rc" = 0
contains requeue.out "stopped at step [0-9]+ of 1000 on SIGUSR1 after a checkpoint" "the trainer checkpoints and stops on SIGUSR1"
step=$(sed -n 's/.*stopped at step \([0-9]*\) of 1000.*/\1/p' requeue.out | head -n1)
contains requeue.err "requeueing job $id" "the batch script requeues the job"
contains requeue.err "Slurm job $id was requeued \(restart 1\)" "launch follows the job through its requeue"
contains requeue.err "resuming from .*runs/requeue-$id/checkpoints/step_0*${step:-X}\.safetensors" \
  "the requeued run resumes from that checkpoint"
contains "runs/requeue-$id/trainer_summary.json" "\"resumed_from_step\": ${step:-X}," "the trainer's summary records the resume"
contains "runs/requeue-$id/trainer_summary.json" '"steps": 1000' "and the training reached its last step"
log0="runs/requeue-$id/attempt_0/rank_0.out"
contains "$log0" "stopped at step ${step:-X} of 1000 on SIGUSR1" "rank 0's log keeps the run before the requeue"
contains "$log0" "^---- dtrain: the run directory was used again" "a line marks where the requeued run begins"
contains "$log0" "done: 1000 steps" "and the requeued run follows in the same log"
contains requeue.err "the ranks checkpointed and stopped on SIGUSR1 .* to be requeued" \
  "the agents report the requeue stop as such"
if grep -q "^dtrain: error:" requeue.err; then
  not_ok "the expected stop for a requeue prints no dtrain error line"; grep "^dtrain: error:" requeue.err | sed 's/^/    /'
else ok "the expected stop for a requeue prints no dtrain error line"; fi

# --- issue 29: srun gets the CPU count, setup lines, the spec as submitted ---------
# --begin holds the job a moment, so the spec is edited while the job waits in the queue.
cat >snap.yaml <<'EOF2'
name: snap
scheduler: slurm
nodes: 2
nproc_per_node: 1
setup: ['export SETUP_MARK=from-setup', 'echo "setup ran on $(hostname)" >&2']
command: [sh, -c, 'echo "rank $RANK cpus=${SRUN_CPUS_PER_TASK:-none} mark=${SETUP_MARK:-none} spec=as-submitted"']
slurm: {cpus_per_task: 2, mem: 100M, extra_sbatch: [--begin=now+2]}
EOF2
timeout 120 "$DTRAIN" launch snap.yaml >snap.out 2>snap.err &
pid=$!
wait_for snap.err "submitted as Slurm job" 30
sed -i 's/spec=as-submitted/spec=EDITED/' snap.yaml
wait "$pid"; rc=$?
id=$(job_id snap.err)
check "the setup/cpus/snapshot job completes (exit $rc)" test "$rc" = 0
check "srun gets the CPU count on both nodes (SRUN_CPUS_PER_TASK=2)" \
  test "$(grep -c '^\[rank [01]\] rank [01] cpus=2 ' snap.out)" = 2
check "setup's environment reaches every agent and rank" test "$(grep -c 'mark=from-setup' snap.out)" = 2
check "setup runs once on every node, before its agent ($(grep -c 'setup ran on' snap.err) lines)" \
  test "$(grep -c 'setup ran on' snap.err)" = 2
check "the job runs the spec as submitted, not the file edited while it was queued" \
  test "$(grep -c 'spec=as-submitted' snap.out)" = 2 -a "$(grep -c 'spec=EDITED' snap.out)" = 0
check "the submitted spec is kept in the run directory" cmp -s "runs/snap-$id/job.yaml" <(sed 's/spec=EDITED/spec=as-submitted/' snap.yaml)
contains "runs/snap-$id.sbatch" "^#SBATCH --mem=100M$" "mem: 100M is 100 MiB, as sbatch reads it"

# --- issue 29: slurm.tasks: per_rank, every rank a Slurm task, with binding -----------
cat >perrank.yaml <<'EOF2'
name: perrank
scheduler: slurm
nodes: 2
nproc_per_node: 2
max_restarts: 1
command: [sh, -c, 'echo "rank $RANK local $LOCAL_RANK of $WORLD_SIZE node $DTRAIN_NODE_RANK task ${SLURM_PROCID:-} bind=${SLURM_CPU_BIND_TYPE:-none} coord=$MASTER_ADDR"; if [ "$RANK$DTRAIN_RESTART_COUNT" = 30 ]; then echo "rank 3 fails once" >&2; exit 3; fi']
slurm: {tasks: per_rank, cpu_bind: cores, cpus_per_task: 1}
EOF2
expect_status 0 "per_rank: 2 nodes x 2 tasks, a failed rank restarts the step, launch exits 0" \
  timeout 120 "$DTRAIN" launch perrank.yaml
cp "$T/last.out" perrank.out; cp "$T/last.err" perrank.err
id=$(job_id perrank.err)
contains "runs/perrank-$id.sbatch" "^#SBATCH --ntasks-per-node=2$" "per_rank: one Slurm task per rank"
contains "runs/perrank-$id.sbatch" "srun .*--ntasks-per-node=2 --cpus-per-task=1 --cpu-bind=cores .*mpirank --" \
  "per_rank: the step passes the binding to srun"
check "every task is the rank Slurm numbered it, on its node, with the binding (attempt 1)" test \
  "$(grep -cE '^\[rank ([0-3])\] rank \1 local [01] of 4 node [01] task \1 bind=cores coord=[0-9.]+$' perrank.out)" = 8
check "rank 2 is local rank 0 of node 1" grep -q '^\[rank 2\] rank 2 local 0 of 4 node 1 ' perrank.out
contains perrank.err "rank 3 failed first \(attempt 0" "per_rank: the failing task is named by its rank"
contains "runs/perrank-$id/attempt_0/rank_3.err" "rank 3 fails once" "per_rank: each rank's stderr goes to its own log"
contains "runs/perrank-$id/summary.json" '"world_size": 4' "per_rank: summary.json has the world of 4"

cat >perrank-train.yaml <<'EOF2'
name: perrank-train
scheduler: slurm
nodes: 2
nproc_per_node: 2
backend: tcp
trainer:
  model: {hidden: [32]}
  data: {batch_size: 32, workers: 1}
  steps: 20
  eval: {every_epochs: 0}
  log_every_steps: 10
slurm: {tasks: per_rank, gpu_bind: none}
EOF2
expect_status 0 "per_rank: the trainer's 4 tasks meet at the coordinator and train" \
  timeout 120 "$DTRAIN" launch perrank-train.yaml
contains "$T/last.out" "^\[rank 0\] done: 20 steps" "per_rank: rank 0 finishes its 20 steps"

# --- a lost agent: its node's task starts a new one, which joins the next round ---------
# (kill -9 of node 1's agent, as the OOM killer or a crashed agent would; the agents' side,
# a round that waits for the lost node's new agent, is launcher/agent/agent_elastic.c's)
# agent_of JOB_ID NODEID: the pid of that job's `dtrain agent` on that node.
agent_of() {
  local p
  for p in $(pgrep -x dtrain); do
    [ "$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -d' ' -f2)" = agent ] || continue
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "SLURM_JOB_ID=$1" || continue
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "SLURM_NODEID=$2" && { echo "$p"; return; }
  done
}
train_spec() { # NAME NODES MAX_RESTARTS
  cat <<EOF
name: $1
scheduler: slurm
nodes: $2
nproc_per_node: 1
max_restarts: $3
backend: tcp
rendezvous: {heartbeat_timeout: 5s, last_call_timeout: 2s}
trainer:
  model: {hidden: [32]}
  data: {batch_size: 32, workers: 1}
  steps: 10000
  scheduler: {type: constant}
  checkpoint: {every_steps: 100, dir: checkpoints, keep: 2, resume: auto}
  eval: {every_epochs: 0}
  log_every_steps: 20
slurm: {time: "00:10:00"}
EOF
}
# idle: both nodes free, so Slurm gives a job all it asks (an elastic one takes what is idle)
idle() {
  for ((i = 0; i < 300; i++)); do
    [ -z "$(squeue -h -o %i)" ] && [ "$(sinfo -h -N -o %t | sort -u)" = idle ] && { sleep 1; return; }
    sleep 0.1
  done
}
idle
train_spec lost 2 2 >lost.yaml
launch_until lost 300 "\[rank 0\] step [0-9]*[1-9][0-9]0/10000" "the job of 2 nodes with restarts left trains"
a1=$(agent_of "$id" 1)
check "node 1's agent is found (pid ${a1:-none})" test -n "$a1"
[ -n "$a1" ] && kill -9 "$a1"
wait "$pid"; rc=$?
check "node 1's agent killed mid-run: a new one joins and the job finishes on both nodes (exit $rc)" test "$rc" = 0
contains lost.err "node 1: its agent ended with status 137 while the job runs on: starting a new agent for node 1 \(1 of 2\)" \
  "node 1's task starts a new agent"
contains "runs/lost-$id/trainer_summary.json" '"steps": 10000' "the training reached its last step"
contains "runs/lost-$id/summary.json" '"nnodes": 2' "summary.json: the job ended on 2 nodes"

# --- an elastic job loses a node and finishes on the other --------------------------
idle
# --nodelist holds the job until both nodes are free: Slurm would start an elastic job on fewer
train_spec shrink 1:2 0 | sed 's/^slurm: {time: "00:10:00"}$/slurm: {time: "00:10:00", extra_sbatch: ["--nodelist=n[1-2]"]}/' >shrink.yaml
launch_until shrink 300 "\[rank 0\] step [0-9]*[1-9][0-9]0/10000" "the elastic job (nodes: 1:2) trains"
contains "runs/shrink-$id.sbatch" "^#SBATCH --nodes=1-2$" "it asked Slurm for 1 to 2 nodes"
contains shrink.err "Slurm job $id is running on n\[1-2\]" "and got both"
a1=$(agent_of "$id" 1)
check "the elastic job's second agent is found (pid ${a1:-none})" test -n "$a1"
[ -n "$a1" ] && kill -9 "$a1"
wait "$pid"; rc=$?
check "the elastic job loses a node and finishes on the other (exit $rc)" test "$rc" = 0
contains shrink.err "node 1: its agent was lost \(status 137\); the elastic job goes on without this node" \
  "the lost node's task leaves the job without failing the step"
contains "runs/shrink-$id/trainer_summary.json" '"steps": 10000' "the training reached its last step"
contains "runs/shrink-$id/summary.json" '"membership_changes": [1-9]' "summary.json counts the membership change"
