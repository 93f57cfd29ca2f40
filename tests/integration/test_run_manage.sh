#!/usr/bin/env bash
# test_run_manage.sh - day-two operations on a local job from another "terminal":
# `dtrain status`, `dtrain logs` (whole, --rank, -f), `dtrain cancel`, `dtrain list`; resume
# across launches (`dtrain launch --resume RUN_DIR` ending at the spec's last step with
# resumed_from_step set, and refused for a changed model or data, the keys named); the
# --trace warning for a command job; and status/cancel and --resume of a Kubernetes launch
# against a stand-in kubectl that records what it is asked.
# (The same on the local Slurm cluster: test_slurm_manage.sh.)
. "$(dirname "$0")/lib.sh"
cd "$T" || exit 1

# wait_for FILE PATTERN SECONDS
wait_for() {
  local i
  for ((i = 0; i < $3 * 10; i++)); do grep -Eq -- "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}

# --- a running local job: status, logs, cancel --------------------------------
cat >sleepy.yaml <<'EOF'
name: sleepy
nproc_per_node: 2
grace_period: 2s
command: [sh, -c, 'echo "hello from $RANK"; echo "note from $RANK" >&2; exec sleep 123.4']
EOF
timeout "$(limit_s 60)" "$DTRAIN" launch sleepy.yaml >launch.out 2>launch.err &
pid=$!
wait_for launch.out "hello from 1" 20 || not_ok "the job's ranks started"
run=$(ls -d "$PWD"/runs/sleepy-*)

"$DTRAIN" logs "$run" -f >follow.out 2>follow.err &
follow=$!

expect_status 0 "dtrain status RUN_DIR of a running local job" "$DTRAIN" status "$run"
cp "$T/last.out" status.out
contains status.out "^state: +running" "status: running"
contains status.out "^attempt: +0" "status: attempt 0"
contains status.out "^ranks: +2" "status: 2 ranks"
contains status.out "^nodes: +1" "status: 1 node"
lpid=$(sed -n 's/.*"pid": \([0-9]*\),.*/\1/p' "$run/launch.json")
if [ -n "$lpid" ] && [ "$(ps -o ppid= -p "$lpid" | tr -d ' ')" = "$pid" ]; then ok "launch.json names the launcher's pid"
else not_ok "launch.json's pid '$lpid' is not dtrain launch's (a child of $pid)"; fi
contains status.out "^where: +dtrain launch pid $lpid on " "status: where it runs is the launcher's pid"
expect_status 0 "dtrain status NAME finds the job's newest run in ./runs" "$DTRAIN" status sleepy
contains "$T/last.out" "^run: +$run" "status by name names the same run"

expect_status 0 "dtrain logs RUN" "$DTRAIN" logs "$run"
contains "$T/last.out" '^\[rank 0\] hello from 0$' "logs: rank 0's stdout, prefixed"
contains "$T/last.out" '^\[rank 1\] hello from 1$' "logs: rank 1's stdout, prefixed"
contains "$T/last.err" '^\[rank 1\] note from 1$' "logs: stderr lines on stderr"
expect_status 0 "dtrain logs RUN --rank 1" "$DTRAIN" logs "$run" --rank 1
if [ "$(cat "$T/last.out")" = "hello from 1" ]; then ok "logs --rank 1: that rank's lines only, unprefixed"
else not_ok "logs --rank 1 printed: $(cat "$T/last.out")"; fi
expect_status 1 "dtrain logs of a rank the run does not have fails" "$DTRAIN" logs "$run" --rank 7

expect_status 0 "dtrain cancel RUN" "$DTRAIN" cancel "$run"
contains "$T/last.out" "cancelled run $run" "cancel says what it stopped"
wait "$pid"
rc=$?
if [ "$rc" = 143 ]; then ok "the launcher ended as on SIGTERM (143)"; else not_ok "the launcher exited $rc, wanted 143"; fi
if ! pgrep -f "sleep 123.4" >/dev/null; then ok "no rank of the job is left"
else not_ok "ranks left running after cancel"; fi
for ((i = 0; i < 50; i++)); do kill -0 "$follow" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$follow" 2>/dev/null; then not_ok "logs -f still runs after the run ended"; kill "$follow"
else ok "logs -f ends when the run ends"; fi
contains follow.out '^\[rank 0\] hello from 0$' "logs -f printed the lines"
expect_status 0 "dtrain status after cancel" "$DTRAIN" status "$run"
contains "$T/last.out" "^state: +interrupted" "status: interrupted"
contains "$T/last.out" "^exit: +143" "status: exit 143"
expect_status 0 "dtrain cancel of an ended run is no error" "$DTRAIN" cancel "$run"
contains "$T/last.out" "not running" "cancel says the run is not running"
expect_status 1 "dtrain status of no run fails" "$DTRAIN" status nosuchrun
contains "$T/last.err" "nosuchrun" "the message names the handle"

# --- resume across launches ---------------------------------------------------
cat >train.yaml <<'EOF'
name: train
nproc_per_node: 2
backend: tcp
trainer:
  model: {hidden: [32]}
  data: {batch_size: 32, workers: 1}
  steps: 20
  scheduler: {type: constant}
  checkpoint: {every_steps: 10, dir: checkpoints, keep: 2, resume: auto}
  eval: {every_epochs: 0}
  log_every_steps: 10
EOF
expect_status 0 "a trainer job of 20 steps" "$DTRAIN" launch train.yaml
trun=$(ls -d "$PWD"/runs/train-*)
sed 's/steps: 20/steps: 40/' train.yaml >train40.yaml
expect_status 0 "launch --resume RUN_DIR with steps: 40" "$DTRAIN" launch train40.yaml --resume "$trun"
if [ "$(ls -d runs/train-* | wc -l)" = 1 ]; then ok "the resumed launch used the same run directory"
else not_ok "a new run directory was made: $(ls runs)"; fi
contains "$trun/trainer_summary.json" '"resumed_from_step": 20,' "trainer_summary.json: resumed_from_step 20"
contains "$trun/trainer_summary.json" '"steps": 40,' "trainer_summary.json: the spec's last step, 40"
contains "$trun/summary.json" '"status": "succeeded"' "summary.json of the resumed launch: succeeded"
expect_status 0 "dtrain status of the resumed run" "$DTRAIN" status "$trun"
contains "$T/last.out" "^step: +40/40" "status: step 40/40"

sed 's/hidden: \[32\]/hidden: [64]/; s/batch_size: 32/batch_size: 16/' train40.yaml >changed.yaml
expect_status 2 "launch --resume with another model and batch size is refused" \
  "$DTRAIN" launch changed.yaml --resume "$trun"
contains "$T/last.err" "trainer.model.hidden: \[32\] in the run, \[64\] now" "the refusal names trainer.model.hidden"
contains "$T/last.err" "trainer.data.batch_size: 32 in the run, 16 now" "the refusal names trainer.data.batch_size"
sed 's/name: train/name: other/' train40.yaml >renamed.yaml
expect_status 2 "launch --resume of another job's run is refused" "$DTRAIN" launch renamed.yaml --resume "$trun"
expect_status 2 "launch --resume of no directory is refused" "$DTRAIN" launch train40.yaml --resume "$T/none"

# --- dtrain list --------------------------------------------------------------
expect_status 0 "dtrain list" "$DTRAIN" list
contains "$T/last.out" "^sleepy-[0-9-]+[0-9a-f]+ +sleepy +local +interrupted" "list: the cancelled run"
contains "$T/last.out" "^train-[0-9-]+[0-9a-f]+ +train +local +succeeded +40/40" "list: the resumed run at 40/40"
expect_status 1 "dtrain list of no directory fails" "$DTRAIN" list "$T/none"

# --- --trace on a command job -------------------------------------------------
cat >cmd.yaml <<'EOF'
name: cmd
nproc_per_node: 1
command: ["true"]
EOF
expect_status 0 "launch --trace of a command job runs" "$DTRAIN" launch cmd.yaml --trace
contains "$T/last.err" "--trace applies to the bundled trainer" "a warning says --trace cannot apply"

# --- Kubernetes: status and cancel through kubectl ----------------------------
mkdir -p fakebin
cat >fakebin/kubectl <<'EOF'
#!/bin/sh
# A stand-in kubectl: records each call; the Job runs until it is deleted.
echo "$*" >>"$KUBECTL_LOG"
case "$1" in
  apply) cat >>"$KUBECTL_LOG.applied"  # the Job first (its uid asked for), then what it owns
         case "$*" in *jsonpath*) printf 'a1b2c3d4-0000-1111-2222-333344445555' ;; esac ;;
  delete) touch "$KUBECTL_LOG.deleted" ;;
  get) [ -e "$KUBECTL_LOG.deleted" ] && exit 1; case "$2" in job/*) printf '' ;; *) printf 'p-0=Running ' ;; esac ;;
esac
exit 0
EOF
chmod +x fakebin/kubectl
cat >k8s.yaml <<'EOF'
name: kjob
scheduler: kubernetes
nproc_per_node: 1
command: ["true"]
kubernetes: {image: "dtrain:test", namespace: research}
rendezvous: {port: 29500}
EOF
export KUBECTL_LOG=$T/kubectl.log
expect_status 0 "launch --detach of a Kubernetes job (stand-in kubectl)" env PATH="$T/fakebin:$PATH" \
  "$DTRAIN" launch k8s.yaml --detach
krun=$(ls -d "$PWD"/runs/kjob-* 2>/dev/null | head -n1)
job=$(sed -n 's/.*"job_id": "\(.*\)".*/\1/p' "$krun/launch.json" 2>/dev/null)
if [ -n "$job" ]; then ok "the launch recorded the Job's name ($job)"; else not_ok "no launch.json with a job_id in $krun"; fi
expect_status 0 "dtrain status JOB_NAME of the Kubernetes job" env PATH="$T/fakebin:$PATH" "$DTRAIN" status "$job"
contains "$T/last.out" "^state: +running" "status: running (the Job has no condition yet)"
contains "$T/last.out" "^where: +Kubernetes Job $job in namespace research" "status: the Job and its namespace"
expect_status 0 "dtrain cancel of the Kubernetes job" env PATH="$T/fakebin:$PATH" "$DTRAIN" cancel "$krun"
contains "$KUBECTL_LOG" "^delete job,service,configmap,secret -n research -l app.kubernetes.io/instance=$job" \
  "cancel deleted the Job's objects by their instance label"

# --- Kubernetes: --resume only where the run outlives its pods ----------------
expect_status 2 "launch --resume of a Kubernetes run without log_volume is refused" \
  env PATH="$T/fakebin:$PATH" "$DTRAIN" launch k8s.yaml --detach --resume "$krun"
contains "$T/last.err" "--resume $krun: scheduler: kubernetes keeps a run's directory in its pods.*set kubernetes.log_volume" \
  "the refusal says why and names kubernetes.log_volume"
sed 's/^name: kjob/name: kvol/; s/namespace: research}/namespace: research, log_volume: {pvc: runs}}/' \
  k8s.yaml >kvol.yaml
expect_status 0 "launch --detach of a Kubernetes job with log_volume" env PATH="$T/fakebin:$PATH" \
  "$DTRAIN" launch kvol.yaml --detach
vrun=$(ls -d "$PWD"/runs/kvol-* 2>/dev/null | head -n1)
vid=${vrun##*/kvol-}
expect_status 0 "launch --resume of that run" env PATH="$T/fakebin:$PATH" "$DTRAIN" launch kvol.yaml --detach --resume "$vrun"
if [ "$(ls -d runs/kvol-* | wc -l)" = 1 ]; then ok "the resumed Kubernetes launch kept the one run directory"
else not_ok "another run directory was made: $(ls runs)"; fi
vjob=$(sed -n 's/.*"job_id": "\(.*\)".*/\1/p' "$vrun/launch.json")
check "launch.json names the new Job ($vjob), not the first one (kvol-$vid)" test -n "$vjob" -a "$vjob" != "kvol-$vid"
contains "$KUBECTL_LOG.applied" "^  name: $vjob$" "the new Job's objects are named by the new launch"
grep -A1 'name: DTRAIN_K8S_RUN_ID$' "$KUBECTL_LOG.applied" >"$T/runid.txt"
contains "$T/runid.txt" "value: \"?$vid\"?$" "its pods get the run's id, so they open the run directory on the volume"

# --- mpirun: one host playing 2 nodes without --map-by; status and cancel ----
if ! command -v mpirun >/dev/null; then
  not_ok "mpirun is not installed: make test installs Open MPI (scripts/install-deps.sh)"
  exit 1
fi
root=false; [ "$(id -u)" = 0 ] && root=true
cat >mpi.yaml <<EOM
name: mpi
scheduler: mpirun
nodes: 2
nproc_per_node: 1
backend: tcp
grace_period: 2s
command: [sh, -c, 'echo "rank \$RANK of \$WORLD_SIZE up"; exec sleep 124.5']
mpirun: {hosts: ['localhost:2'], allow_run_as_root: $root, interfaces: [lo],
         extra_args: [--mca, btl_vader_single_copy_mechanism, none]}
EOM
timeout "$(limit_s 60)" "$DTRAIN" launch mpi.yaml >mpi.out 2>mpi.err &
pid=$!
if wait_for mpi.out "rank 1 of 2 up" 30 && wait_for mpi.out "rank 0 of 2 up" 10; then
  ok "hosts: [localhost:2] places both agents on this machine without --map-by slot"
else not_ok "the 2 agents did not both start"; sed 's/^/    /' mpi.err | head -n 20; fi
mrun=$(ls -d "$PWD"/runs/mpi-*)
expect_status 0 "dtrain status of the mpirun job" "$DTRAIN" status "$mrun"
contains "$T/last.out" "^where: +dtrain launch pid [0-9]+ on .*, mpirun pid [0-9]+" "status: the launcher's and mpirun's pids"
expect_status 0 "dtrain cancel of the mpirun job" "$DTRAIN" cancel "$mrun"
wait "$pid"; rc=$?
check "the mpirun launcher ended on SIGTERM (exit $rc)" test "$rc" -gt 128 -a "$rc" != 137
for ((i = 0; i < 50; i++)); do pgrep -f "sleep 124.5" >/dev/null || break; sleep 0.1; done
check "no rank of the mpirun job is left" test -z "$(pgrep -f "sleep 124.5")"
