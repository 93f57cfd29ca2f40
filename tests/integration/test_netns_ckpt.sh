# test_netns_ckpt.sh - rank 0 writing a slow checkpoint while its peers wait in
# the next step's all-reduce, on two namespace hosts (scripts/netns-cluster.sh),
# the trainer with backend tcp, heartbeat_timeout 2 s: the peers' stall
# deadline (heartbeat_timeout + 2 s) is shorter than the write, which
# DTRAIN_TEST_CKPT_DELAY_MS makes take 7 s (a large model on slow storage).
#
#  - one rank per host: the write is announced (dt_comm_busy, comm.h), so the
#    waiting peer does not name rank 0 stalled: the job ends with 0 and the
#    checkpoint is there;
#  - two ranks per host: rank 1, beside rank 0, reaches the next step while
#    rank 0 writes; node 0's watchdog must not take rank 0 for stuck either;
#  - host 1 (rank 0) cut off in the middle of the write: its pause notices
#    stop, so node 1's agent still ends within heartbeat_timeout + a margin
#    (an announced pause is no cover for a lost host);
#  - rank 0 really hung (SIGSTOP, DTRAIN_FAULT): the watchdog's verdict fails the
#    job on both nodes with SIGKILL's 137 (it was once published before the kill
#    was reaped, as status 0, and the job "succeeded").
# Needs root and network namespaces; without them it fails with the reason.
. "$(dirname "$0")/lib.sh"

. "$(dirname "$0")/netns_lib.sh"
netns_up c 2
COORD="$("$NC" addr 1):29500"

job() { # steps
  cat <<EOF2
name: nc
nodes: 2
nproc_per_node: 1
backend: tcp
grace_period: 1s
env: {DTRAIN_TEST_CKPT_DELAY_MS: "7000"}
trainer:
  model: {hidden: [16]}
  data: {batch_size: 32, workers: 1}
  steps: $1
  log_every_steps: 5
  scheduler: {type: constant}
  checkpoint: {every_steps: 10}
  eval: {every_epochs: 0}
rendezvous: {timeout: 20s, heartbeat_timeout: 2s}
EOF2
}

# run TAG SPEC [WHILE...]: both agents; WHILE runs once rank 0 trains; sets rc0 rc1 took1 (node 1's end
# since WHILE began, or since the start).
run() {
  local tag=$1 spec=$2 t0; shift 2
  netns_agents "$tag" "$spec"
  t0=$(date +%s.%N)
  if [ $# -gt 0 ]; then
    "$@"
    t0=$(date +%s.%N)
  fi
  local guard=$(( $(date +%s) + 40 ))
  while kill -0 "$a1" 2>/dev/null; do
    [ "$(date +%s)" -lt "$guard" ] || { kill -9 "$a0" "$a1" 2>/dev/null; break; }
    sleep 0.1
  done
  took1=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  while kill -0 "$a0" 2>/dev/null; do
    [ "$(date +%s)" -lt "$guard" ] || { kill -9 "$a0" 2>/dev/null; break; }
    sleep 0.1
  done
  wait "$a0"; rc0=$?
  wait "$a1"; rc1=$?
}

survived() { # TAG
  check "$1: both agents exit 0 although the write outlasts the stall deadline ($rc0 $rc1)" test "$rc0 $rc1" = "0 0"
  check "$1: the checkpoint of step 10 is there" test -f "$(ls -d "$T/runs-$1"/nc-* | head -n 1)/checkpoints/step_00000010.safetensors"
  if grep -hE "stalled|hung|stuck|lost" "$T/$1".*.err "$T/runs-$1"/nc-*/attempt_0/rank_*.err >"$T/$1.bad" 2>/dev/null; then
    not_ok "$1: no rank named stalled, hung or lost"; sed 's/^/    /' "$T/$1.bad" | head -n 8
  else ok "$1: no rank named stalled, hung or lost"; fi
}

# --- one rank per host ------------------------------------------------------------------
job 15 >"$T/one.yaml"
run one "$T/one.yaml"
survived one

# --- two ranks per host: node 0's watchdog sees rank 1 a step ahead of rank 0 -----------------
sed 's/^nproc_per_node: .*/nproc_per_node: 2/' "$T/one.yaml" >"$T/two.yaml"
run two "$T/two.yaml"
survived two

# --- host 1 cut off during the write ------------------------------------------------------------
sed 's/steps: 15/steps: 100000/' "$T/one.yaml" >"$T/cut.yaml"
in_write() { # until rank 0 has been writing step 10's checkpoint for 1 s, then cut host 1
  for _ in $(seq 200); do
    grep -q '"step": *10\b' "$(ls "$T"/runs-cut/nc-*/metrics.jsonl 2>/dev/null | head -n 1)" 2>/dev/null && break
    sleep 0.1
  done
  sleep 1
  "$NC" cut 1 both
}
run cut "$T/cut.yaml" in_write
# heartbeat_timeout 2 s to notice (agent or rank), grace 1 s, 3 s of margin
check "cut mid-write: node 1's agent ends with 1 within 6 s of the cut (status $rc1, ${took1}s)" \
  awk -v s="$rc1" -v t="$took1" 'BEGIN { exit !(s == 1 && t < 6) }'
echo "# checkpoint write cut off: node 1's agent ended ${took1}s after the cut"
check "cut mid-write: nothing is left running on host 2" test -z "$("$NC" pids 2)"

# --- rank 0 hung, not busy: the job fails everywhere ----------------------------------------------
"$NC" heal 1
sed 's/DTRAIN_TEST_CKPT_DELAY_MS: "7000"/DTRAIN_FAULT: "stop:0:5"/; s/steps: 15/steps: 100000/' "$T/one.yaml" >"$T/hung.yaml"
run hung "$T/hung.yaml"
check "hung: both agents end with 137, the watchdog's SIGKILL ($rc0 $rc1)" test "$rc0 $rc1" = "137 137"
contains "$(ls "$T"/runs-hung/nc-*/summary.json 2>/dev/null | head -n 1 || echo "$T/none")" '"status": "failed"' \
  "hung: summary.json says failed"
contains "$T/hung.1.err" "rank 0 on node 0 was hung \(killed by dtrain's watchdog\) first" "hung: node 1 says rank 0 was hung"
