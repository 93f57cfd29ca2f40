#!/usr/bin/env bash
# test_slurm_manage.sh - day-two operations on the local Slurm cluster (scripts/slurm-local.sh):
# `dtrain status` by the Slurm job id while it runs (state, nodes, where), `dtrain logs` of a
# rank on the second node, `dtrain cancel` (scancel: the job CANCELLED, no rank left, the
# following launcher ended); one "succeeded" line for a 2-node job, not one per agent; and
# `dtrain launch --resume RUN_DIR`: a new Slurm job continuing a 2-node trainer run in its directory.
# (The local job's operations: test_run_manage.sh.)
# run-tests: uses slurm
. "$(dirname "$0")/lib.sh"
REPO=$(cd "$(dirname "$0")/../.." && pwd)

if ! "$REPO/scripts/slurm-local.sh" status >/dev/null 2>&1; then
  trap 'rm -rf "$T"; "$REPO/scripts/slurm-local.sh" down >/dev/null 2>&1' EXIT
fi
if ! "$REPO/scripts/slurm-local.sh" up >"$T/up.log" 2>&1; then
  not_ok "the local Slurm cluster starts (scripts/slurm-local.sh up)"
  sed 's/^/    /' "$T/up.log"
  exit 1
fi
export SLURM_CONF=${DTRAIN_SLURM_DIR:-/tmp/dtrain-slurm}/etc/slurm.conf
cd "$T" || exit 1
state_of() { scontrol show job -o "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }
wait_for() {
  local i
  for ((i = 0; i < $3 * 10; i++)); do grep -Eq -- "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}

# --- one line for a job that succeeded on 2 nodes ----------------------------
cat >hello.yaml <<'EOF2'
name: hello
scheduler: slurm
nodes: 2
nproc_per_node: 1
command: [sh, -c, 'echo "rank $RANK done"']
EOF2
expect_status 0 "a 2-node job succeeds" timeout 120 "$DTRAIN" launch hello.yaml
n=$(grep -c "succeeded" "$T/last.err")
if [ "$n" = 1 ]; then ok "one \"succeeded\" line for the job"; else not_ok "$n \"succeeded\" lines"; sed 's/^/    /' "$T/last.err"; fi

# --- a running job: status, logs, cancel -------------------------------------
mark="manage-rank-of-${T##*/}"
cat >slow.yaml <<EOF2
name: slow
scheduler: slurm
nodes: 2
nproc_per_node: 1
grace_period: 2s
command: [sh, -c, 'echo "rank \$RANK up"; sleep 120; echo $mark']
EOF2
timeout 120 "$DTRAIN" launch slow.yaml >slow.out 2>slow.err &
pid=$!
wait_for slow.out "\[rank 1\] rank 1 up" 60 || not_ok "the job's ranks started"
id=$(sed -n 's/.*submitted as Slurm job \([0-9]*\).*/\1/p' slow.err | head -n1)
run=$(ls -d "$PWD"/runs/slow-"$id")

expect_status 0 "dtrain status SLURM_JOB_ID" "$DTRAIN" status "$id"
contains "$T/last.out" "^run: +$run$" "status by job id names the run directory"
contains "$T/last.out" "^state: +running \(RUNNING\)" "status: running, in Slurm's word too"
contains "$T/last.out" "^where: +Slurm job $id on n\[1-2\]" "status: the Slurm job and its nodes"
contains "$T/last.out" "^ranks: +2" "status: 2 ranks"
expect_status 0 "dtrain logs --rank 1 (the second node's rank)" "$DTRAIN" logs "$run" --rank 1
contains "$T/last.out" "^rank 1 up$" "logs: rank 1's line"
expect_status 0 "dtrain list lists it" "$DTRAIN" list
contains "$T/last.out" "^slow-$id +slow +slurm +running" "list: the Slurm run, running"

expect_status 0 "dtrain cancel RUN_DIR of the Slurm job" "$DTRAIN" cancel "$run"
for ((i = 0; i < 100; i++)); do [ "$(state_of "$id")" = COMPLETING ] || break; sleep 0.1; done
check "Slurm shows job $id CANCELLED ($(state_of "$id"))" test "$(state_of "$id")" = CANCELLED
for ((i = 0; i < 100; i++)); do pgrep -f "$mark" >/dev/null || break; sleep 0.1; done
check "no rank of the cancelled job is left" test -z "$(pgrep -f "$mark")"
wait "$pid"; rc=$?
check "the launcher following the job ended with it (exit $rc)" test "$rc" -gt 128 -a "$rc" != 137
expect_status 0 "dtrain status after cancel" "$DTRAIN" status "$id"
contains "$T/last.out" "^state: +(cancelled|interrupted)" "status: the run ended"

# --- resume across launches: a new Slurm job continues the run's directory ----
cat >rtrain.yaml <<'EOF2'
name: rtrain
scheduler: slurm
nodes: 2
nproc_per_node: 1
backend: tcp
trainer:
  model: {hidden: [32]}
  data: {batch_size: 32, workers: 1}
  steps: 20
  scheduler: {type: constant}
  checkpoint: {every_steps: 10, dir: checkpoints, keep: 2, resume: auto}
  eval: {every_epochs: 0}
  log_every_steps: 10
EOF2
expect_status 0 "a 2-node trainer job of 20 steps" timeout 120 "$DTRAIN" launch rtrain.yaml
id1=$(sed -n 's/.*submitted as Slurm job \([0-9]*\).*/\1/p' "$T/last.err" | head -n1)
rrun=$PWD/runs/rtrain-$id1
sed 's/steps: 20/steps: 40/' rtrain.yaml >rtrain40.yaml
expect_status 0 "launch --resume RUN_DIR with steps: 40 (a new Slurm job)" \
  timeout 120 "$DTRAIN" launch rtrain40.yaml --resume "$rrun"
id2=$(sed -n 's/.*submitted as Slurm job \([0-9]*\).*/\1/p' "$T/last.err" | head -n1)
check "the resumed launch is a new Slurm job ($id2 after $id1)" test -n "$id2" -a "$id2" != "$id1"
if [ "$(ls -d runs/rtrain-*/ | wc -l)" = 1 ]; then ok "the new job continued in the run's directory (no rtrain-$id2/)"
else not_ok "another run directory was made: $(ls runs)"; fi
contains "$rrun/trainer_summary.json" '"resumed_from_step": 20,' "trainer_summary.json: resumed_from_step 20"
contains "$rrun/trainer_summary.json" '"steps": 40,' "trainer_summary.json: the spec's last step, 40"
contains "$rrun/launch.json" "\"job_id\": \"$id2\"" "launch.json names the new Slurm job"
expect_status 0 "dtrain status of the resumed run" "$DTRAIN" status "$rrun"
contains "$T/last.out" "^where: +Slurm job $id2 " "status asks Slurm about the new job"
contains "$T/last.out" "^step: +40/40" "status: step 40/40"
sed 's/hidden: \[32\]/hidden: [64]/' rtrain40.yaml >rchanged.yaml
expect_status 2 "launch --resume with another model is refused before sbatch" "$DTRAIN" launch rchanged.yaml --resume "$rrun"
contains "$T/last.err" "trainer.model.hidden: \[32\] in the run, \[64\] now" "the refusal names trainer.model.hidden"
