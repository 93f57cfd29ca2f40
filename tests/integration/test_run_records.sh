#!/usr/bin/env bash
# test_run_records.sh - run files planted in a shared log directory (team scratch) by
# someone who can write there, each crafted, each refused, nothing lost
# (docs/security.md, "Run records"):
#   A. a launch.json naming a `sleep` of ours (its pid and real start time copied
#      in): `dtrain cancel` signals nothing and the sleep lives; the same through a
#      Kubernetes record (kubectl is asked, no pid signalled); a lookup by name
#      prefers our own run over a planted one claiming to be newer;
#   B. "job_id": "--me" in a Slurm record: scancel and scontrol are never run;
#   D. a job given with --set: no spec copy in the log directory while it runs;
#   F. FIFOs named launch.json, summary.json, job.yaml: list, status and
#      launch --resume return (under `timeout`) with the reason;
#   G. escape sequences in a record are shown as \xNN by list and status;
#   O. rank_0.out a link to /dev/zero: `dtrain logs` says so and returns;
#   M. `pgrep -f "dtrain launch SPEC"` finds the launcher only, not its guards.
# The records are planted by this test as the same user (the worst case for
# the process checks: only the checks themselves stand in the way) and, where
# it says "others", made writable by others (what a record in a team directory
# that someone else wrote looks like to the reader).
. "$(dirname "$0")/lib.sh"
cd "$T" || exit 1
HOST=$(hostname)
mkdir -p runs

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT

wait_for() {
  local i
  for ((i = 0; i < $3 * 10; i++)); do grep -Eq -- "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}
start_of() { awk '{ sub(/.*\) /, ""); print $20 }' "/proc/$1/stat"; }

# plant DIR_NAME SCHEDULER MEMBERS...: runs/DIR_NAME/launch.json (0700, like a run).
plant() {
  local id=$1 d=runs/$1 sched=$2; shift 2
  mkdir -p "$d" && chmod 700 "$d"
  { printf '{"scheduler": "%s", "name": "train", "run_id": "%s", "run_dir": "%s", "host": "%s"' \
      "$sched" "$id" "$PWD/$d" "$HOST"
    for m in "$@"; do printf ', %s' "$m"; done
    printf '}\n'; } >"$d/launch.json"
}

# --- A. cancel signals only the run's launcher --------------------------------
sleep 300 &
victim=$!; pids+=("$victim")
vstart=$(start_of "$victim")
plant train-20990101-000000-aaaaaa local "\"pid\": $victim" "\"pid_start\": $vstart" '"started_unix": 4102444800'
expect_status 0 "cancel of a record naming a sleep of ours returns" timeout 20 "$DTRAIN" cancel train \
  --log-dir runs --wait 1
contains "$T/last.out" "is not running \(lost\); nothing to cancel" "it does not take the sleep for the run's launcher"
check "the planted pid ($victim) still runs" kill -0 "$victim"

plant k8s-planted kubernetes "\"pid\": $victim" "\"pid_start\": $vstart" '"job_id": "k8s-planted"' \
  '"namespace": "default"'
mkdir -p fakebin
cat >fakebin/kubectl <<'EOF'
#!/bin/sh
echo "$*" >>"$KUBECTL_LOG"
case "$1" in get) printf '' ;; esac
exit 0
EOF
chmod +x fakebin/kubectl
export KUBECTL_LOG=$T/kubectl.log
expect_status 0 "cancel of a Kubernetes record goes through kubectl" env PATH="$T/fakebin:$PATH" \
  timeout 20 "$DTRAIN" cancel runs/k8s-planted --wait 1
contains "$KUBECTL_LOG" "^delete job,service,configmap,secret -n default -l app.kubernetes.io/instance=k8s-planted" \
  "kubectl was asked to delete the Job"
check "and no pid from the record was signalled: $victim still runs" kill -0 "$victim"

# A lookup by name: a real run of job "train", and the planted one above that
# claims a start in 2100 and is writable by others.
cat >train.yaml <<'EOF'
name: train
nproc_per_node: 1
grace_period: 1s
command: [sh, -c, 'echo up; exec sleep 120']
EOF
timeout "$(limit_s 60)" "$DTRAIN" launch train.yaml --log-dir runs >launch.out 2>launch.err &
lpid=$!; pids+=("$lpid")
wait_for launch.out "up" 20 || not_ok "the real run started"
real=$(grep -l '"scheduler": "local"' runs/train-*/launch.json | grep -v 20990101 | head -n1)
real=${real%/launch.json}
chmod 777 runs/train-20990101-000000-aaaaaa
expect_status 0 "status train finds a run" timeout 20 "$DTRAIN" status train --log-dir runs
contains "$T/last.out" "^run: +$PWD/$real$" "status by name takes our run, not the planted newer one"
contains "$T/last.out" "^state: +running" "and sees it running (its launcher verified)"
expect_status 0 "status of the planted run" timeout 20 "$DTRAIN" status runs/train-20990101-000000-aaaaaa
contains "$T/last.out" "^warning: +launch.json is not only yours" "status warns that the record is not only ours"
contains "$T/last.out" "^state: +(lost|unknown)" "and does not take the sleep for its launcher"
expect_status 1 "cancel of a record others may write is refused" timeout 20 "$DTRAIN" cancel runs/train-20990101-000000-aaaaaa
contains "$T/last.err" "writable by others.*not cancelled" "the refusal names why"
check "the planted pid ($victim) still runs after all of it" kill -0 "$victim"
expect_status 0 "cancel train stops the real run" timeout 30 "$DTRAIN" cancel train --log-dir runs
wait "$lpid"; rc=$?
check "the real launcher ended on SIGTERM (exit $rc)" test "$rc" = 143

# --- M. guards are not `dtrain launch` ----------------------------------------
cat >guards.yaml <<'EOF'
name: guards
nproc_per_node: 2
grace_period: 1s
command: [sh, -c, 'echo up; exec sleep 120']
EOF
timeout "$(limit_s 60)" "$DTRAIN" launch "$T/guards.yaml" --log-dir runs >guards.out 2>guards.err &
gpid=$!; pids+=("$gpid")
wait_for guards.out "rank 1\] up" 20 || not_ok "the 2-rank job started"
lp=$(pgrep -P "$gpid" -f "dtrain launch" || echo "$gpid")
found=$(pgrep -f "^$DTRAIN launch $T/guards.yaml" | sort | tr '\n' ' ')
check "pgrep -f 'dtrain launch SPEC' finds only the launcher ($found; launcher $lp)" test "$found" = "$lp "
guards=$(pgrep -P "$lp" | tr '\n' ' ')
check "the launcher has guard children ($guards)" test -n "$guards"
for g in $guards; do
  comm=$(cat "/proc/$g/comm" 2>/dev/null); cmd=$(tr '\0' ' ' <"/proc/$g/cmdline" 2>/dev/null)
  cmd=$(echo "$cmd" | sed 's/ *$//')
  check "guard $g is named dtrain-guard (comm '$comm', cmdline '$cmd')" test "$comm" = dtrain-guard -a "$cmd" = dtrain-guard
done
kill "$gpid"; wait "$gpid"

# --- D. the spec ranks read is inside the run directory ------------------------
# A job given with --set: nothing is written into the log directory but the
# run directory, and the trainer's ranks read the spec from the run's job.yaml
# (a copy only this user can change), not from a file beside the runs.
cat >dspec.yaml <<'EOF'
name: dspec
nproc_per_node: 1
backend: tcp
grace_period: 1s
trainer:
  model: {hidden: [32]}
  data: {batch_size: 32, workers: 1}
  steps: 20
  scheduler: {type: constant}
  eval: {every_epochs: 0}
  log_every_steps: 100000
EOF
mkdir -p druns
timeout "$(limit_s 60)" "$DTRAIN" launch dspec.yaml --set trainer.steps=100000000 --log-dir druns \
  >dspec.out 2>dspec.err &
dpid=$!; pids+=("$dpid")
for _ in $(seq 100); do ls druns/dspec-*/launch.json >/dev/null 2>&1 && break; sleep 0.1; done
drun=$(ls -d "$PWD"/druns/dspec-* | head -n1)
dl=$(sed -n 's/.*"pid": \([0-9]*\),.*/\1/p' "$drun/launch.json")
worker=""
for _ in $(seq 100); do
  for g in $(pgrep -P "$dl"); do worker=$(pgrep -P "$g" | head -n1); done
  [ -n "$worker" ] && grep -q worker "/proc/$worker/cmdline" 2>/dev/null && break; sleep 0.1
done
wcmd=$(tr '\0' ' ' <"/proc/$worker/cmdline" 2>/dev/null)
check "the rank reads the run directory's job.yaml ($wcmd)" test "${wcmd% }" = "$DTRAIN worker $drun/job.yaml"
contains "$drun/job.yaml" "^  steps: 100000000$" "job.yaml holds the job as given (--set trainer.steps)"
left=$(ls -A druns | tr '\n' ' ')
check "the log directory holds the run directory only while it runs ($left)" test "$left" = "${drun##*/} "
expect_status 0 "cancel the --set job" timeout 30 "$DTRAIN" cancel "$drun"
wait "$dpid"

# --- B. no option reaches scancel or scontrol ---------------------------------
cat >fakebin/scancel <<'EOF'
#!/bin/sh
echo "scancel $*" >>"$SLURM_LOG"
EOF
sed 's/scancel/scontrol/' fakebin/scancel >fakebin/scontrol
sed 's/scancel/sacct/' fakebin/scancel >fakebin/sacct
chmod +x fakebin/scancel fakebin/scontrol fakebin/sacct
export SLURM_LOG=$T/slurm.log
plant slurm-me slurm '"job_id": "--me"' '"pid": 1'
expect_status 1 "status of a Slurm record with job_id --me fails" env PATH="$T/fakebin:$PATH" \
  timeout 20 "$DTRAIN" status runs/slurm-me
contains "$T/last.err" "'--me' is not a Slurm job id" "the message names the job id"
expect_status 1 "cancel of it fails" env PATH="$T/fakebin:$PATH" timeout 20 "$DTRAIN" cancel runs/slurm-me
if [ -s "$SLURM_LOG" ]; then not_ok "scancel/scontrol/sacct were run: $(cat "$SLURM_LOG")"
else ok "scancel, scontrol and sacct were never run"; fi
expect_status 0 "list shows it as unreadable" timeout 20 "$DTRAIN" list runs
contains "$T/last.out" "^slurm-me +- +- +unreadable" "list: the refused record has its line"

# --- F. FIFOs are not waited on -----------------------------------------------
mkdir -p runs/fifo-a runs/fifo-b && chmod 700 runs/fifo-a runs/fifo-b
mkfifo runs/fifo-a/launch.json
plant fifo-b local '"pid": 1'
mkfifo runs/fifo-b/summary.json runs/fifo-b/metrics.jsonl
expect_status 0 "list returns with FIFOs for launch.json and summary.json" timeout 20 "$DTRAIN" list runs
contains "$T/last.out" "^fifo-a .*unreadable" "list: the FIFO launch.json's run is unreadable"
contains "$T/last.out" "^fifo-b +train +local" "list: the run with a FIFO summary.json is listed"
expect_status 1 "status returns for a FIFO launch.json" timeout 20 "$DTRAIN" status runs/fifo-a
contains "$T/last.err" "launch.json: not a regular file \(a FIFO\)" "status names the FIFO"
expect_status 0 "status returns for a FIFO summary.json" timeout 20 "$DTRAIN" status runs/fifo-b
expect_status 1 "a lookup by name returns past FIFOs" timeout 20 "$DTRAIN" status nosuch --log-dir runs
cp -r "$real" runs/train-fifo
rm -f runs/train-fifo/job.yaml && mkfifo runs/train-fifo/job.yaml
expect_status 2 "launch --resume with a FIFO job.yaml returns" timeout 20 "$DTRAIN" launch train.yaml \
  --resume runs/train-fifo
contains "$T/last.err" "job.yaml: not a regular file \(a FIFO\)" "launch --resume names the FIFO"

# --- G. escape sequences are shown, not sent to the terminal -------------------
mkdir -p gruns/esc && chmod 700 gruns/esc
printf '{"scheduler": "local", "name": "x\\u001b]0;pwned\\u0007\\u009b2J", "run_id": "esc", "run_dir": "/x\\u001b[2J", "host": "h"}\n' \
  >gruns/esc/launch.json
printf '{"status": "fail\\u001b[31med"}\n' >gruns/esc/summary.json
expect_status 0 "list with escapes in a record" timeout 20 "$DTRAIN" list gruns
if LC_ALL=C grep -q "$(printf '\033')\|$(printf '\302\233')\|$(printf '\007')" "$T/last.out"; then
  not_ok "list printed a control character"; else ok "list printed no control character"; fi
contains "$T/last.out" 'x\\x1b]0;pwned\\x07\\xc2\\x9b2J' "list shows them as \\xNN"
expect_status 0 "status with escapes in a record" timeout 20 "$DTRAIN" status gruns/esc
if LC_ALL=C grep -q "$(printf '\033')\|$(printf '\302\233')\|$(printf '\007')" "$T/last.out"; then
  not_ok "status printed a control character"; else ok "status printed no control character"; fi
contains "$T/last.out" '^state: +fail\\x1b\[31med' "status shows the state's escape as \\x1b"

# --- O. a rank log that is a link to /dev/zero --------------------------------
mkdir -p runs/zero/attempt_0 && chmod 700 runs/zero runs/zero/attempt_0
ln -s /dev/zero runs/zero/attempt_0/rank_0.out
echo hello >runs/zero/attempt_0/rank_1.out
expect_status 0 "logs returns with rank_0.out a link to /dev/zero" timeout 20 "$DTRAIN" logs runs/zero
contains "$T/last.err" "rank_0.out: a symbolic link, which is not followed" "logs says it skipped the link"
contains "$T/last.out" '^\[rank 1\] hello$' "and prints the other rank's log"
mkfifo runs/zero/attempt_0/rank_2.err
expect_status 0 "logs -f returns past a FIFO rank log once the run is over" timeout 20 "$DTRAIN" logs -f runs/zero
contains "$T/last.err" "rank_2.err: not a regular file \(a FIFO\)" "logs -f says it skipped the FIFO"

check "the planted pid ($victim) still runs at the end" kill -0 "$victim"
