# test_netns_faults.sh - two hosts as network namespaces (scripts/netns-cluster.sh),
# one `dtrain agent` on each (the trainer, backend tcp, heartbeat_timeout 3 s),
# and the faults a real cluster has.  For each: every surviving agent ends within
# heartbeat_timeout plus a margin, node 0's summary.json names the lost node and
# how it was lost, the exit status is the job's failure status (1), and nothing
# is left running in either host.
#
#  - a healthy job runs across the two hosts;
#  - host 2 (node 1) partitioned mid-run, its link down (nothing in or out); the
#    newest checkpoint of the job resumes;
#  - host 2 partitioned one way: what it sends is dropped, what it gets arrives;
#  - node 1's agent SIGKILLed;
#  - host 1 gone (node 0 and the coordinator: link down, every process killed):
#    node 1's agent ends;
#  - three hosts, host 3 partitioned: nodes 0 and 1 both end;
#  - host 2 partitioned with a restart left: a new agent for node 1 on host 3 takes
#    its place and the job finishes; the cut-off agent ends itself.
# Before the fix node 0's agent waited in poll() for ever after a partition.
# Needs root and network namespaces; without them it fails with the reason.
. "$(dirname "$0")/lib.sh"

. "$(dirname "$0")/netns_lib.sh"
netns_up f 3
H=3 GRACE=1
# The bound on any agent's end after a fault: the liveness timeout (H), a keepalive
# probe interval (1 s), the ranks' grace period, and 2 s for the poll, the stop and
# summary.json on a loaded 2-core machine.
BOUND=$((H + 1 + GRACE + 2))
COORD="$("$NC" addr 1):29500"

job() { # steps [checkpoint] [nodes] [ranks per node]
  cat <<EOF2
name: nf
nodes: ${3:-2}
nproc_per_node: ${4:-$((3 - ${3:-2}))}
backend: tcp
grace_period: ${GRACE}s
trainer:
  model: {hidden: [32]}
  data: {batch_size: 32, workers: 1}
  steps: $1
  log_every_steps: 10
  scheduler: {type: constant}
  checkpoint: ${2:-{every_steps: 0\}}
  eval: {every_epochs: 0}
rendezvous: {timeout: 10s, heartbeat_timeout: ${H}s}
EOF2
}
job 20 >"$T/short.yaml"
job 100000000 >"$T/long.yaml"
job 100000000 "{every_steps: 1000, dir: $T/ckpt, keep: 2}" >"$T/ckpt.yaml"

# start TAG SPEC [NODES]: node r's agent on host r+1; pids in a0, a1 (a2).
start() {
  local tag=$1 spec=$2 n=${3:-2} r
  for r in $(seq 0 $((n - 1))); do
    "$NC" exec $((r + 1)) "$DTRAIN" agent "$spec" --node-rank "$r" --nnodes "$n" --coordinator "$COORD" \
      --log-dir "$T/runs-$tag" >"$T/$tag.$r.out" 2>"$T/$tag.$r.err" &
    eval "a$r=\$!"; pids+=($!)
  done
}

# running TAG: waits (up to 20 s) until rank 0 has logged training steps.
running() {
  for _ in $(seq 200); do
    [ -s "$(ls "$T/runs-$1"/nf-*/metrics.jsonl 2>/dev/null | head -n 1)" ] && return 0
    sleep 0.1
  done
  return 1
}

# ends PID LIMIT: waits up to LIMIT s for PID; sets took (s since t0) and rc.
ends() {
  local pid=$1 limit=$2
  for _ in $(seq $((limit * 10))); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    rc=hung; kill -9 "$pid" 2>/dev/null
  else
    wait "$pid"; rc=$?
  fi
  took=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
}

left_in_hosts() { # nothing of the job left in either namespace, within 3 s
  for _ in $(seq 30); do [ -z "$("$NC" pids)" ] && return 0; sleep 0.1; done
  ps -o pid,args -p "$("$NC" pids | tr '\n' ',' | sed 's/,$//')" | sed 's/^/    /'
  return 1
}

summary_of() { ls "$T/runs-$1"/nf-*/summary.json 2>/dev/null | head -n 1; }

# --- a healthy job across the two hosts ------------------------------------------
t0=$(date +%s.%N)
start ok "$T/short.yaml"
ends "$a1" 60; rc1=$rc
ends "$a0" 10; rc0=$rc
check "a healthy job on two hosts ($COORD): both agents exit 0 ($rc0 $rc1, ${took}s)" test "$rc0$rc1" = 00
contains "$(summary_of ok)" '"world_size": 2' "summary.json: world size 2 across the hosts"
contains "$(summary_of ok)" '"lost_node": null' "summary.json: no node lost"

# fault TAG WHAT...: runs $long (the long job), does WHAT once it trains (t0 = then).
long=$T/long.yaml
fault() {
  local tag=$1; shift
  start "$tag" "$long" "${nodes:-2}"
  if ! running "$tag"; then
    not_ok "$tag: the job did not start training"; sed 's/^/    /' "$T/$tag.0.err" | tail -n 5
    return 1
  fi
  t0=$(date +%s.%N)
  "$@"
}

# survivor TAG PID NODE WHAT: the agent of NODE ends with status 1 within BOUND.
survivor() {
  ends "$2" $((BOUND + 30))
  check "$1: node $3's agent ends with status 1 within heartbeat_timeout ${H}s + $((BOUND - H))s (status $rc, ${took}s after $4)" \
    test "$rc" = 1 -a "$(awk -v t="$took" -v b="$BOUND" 'BEGIN { print (t <= b) }')" = 1
  echo "# detection: $1, node $3's agent ended ${took}s after $4"
}

# lost TAG REASON: node 0's summary.json names node 1 and how it was lost.
lost() {
  local s; s=$(summary_of "$1")
  contains "${s:-$T/none}" '"exit_status": 1,' "$1: summary.json has the job's failure status 1"
  contains "${s:-$T/none}" "\"lost_node\": \\{\"node\": 1, \"host\": \"[^\"]+\", \"detected_s\": [0-9.]+, \"reason\": \"node 1 \\(host [^,]+, address $("$NC" addr 2):[0-9]+, agent pid [0-9]+\\) $2" \
    "$1: summary.json names node 1, its address and why: $2"
}

# --- host 2 partitioned: its link down --------------------------------------------
# The job checkpoints every 1000 steps; the newest checkpoint must resume.
long=$T/ckpt.yaml
cut_after_ckpt() {
  for _ in $(seq 100); do ls "$T/ckpt"/step_*.safetensors >/dev/null 2>&1 && break; sleep 0.1; done
  t0=$(date +%s.%N)
  "$NC" cut 2 both
}
if fault cut cut_after_ckpt; then
  survivor cut "$a0" 0 "host 2's link went down"
  lost cut "stopped acknowledging: nothing from its host for 3 s"
  survivor cut "$a1" 1 "its link went down"
  contains "$T/cut.1.err" "lost the coordinator at $COORD" "cut: node 1 says it lost the coordinator at host:port"
  check "cut: nothing of the job is left in either host" left_in_hosts
  "$NC" heal 2
  file=$(ls "$T/ckpt" 2>/dev/null | grep -E '^step_[0-9]+\.safetensors$' | sort | tail -n 1)
  newest=$(echo "$file" | sed -n 's/^step_0*\([0-9][0-9]*\)\.safetensors$/\1/p')
  check "cut: the job left checkpoints (newest: ${file:-none})" test -n "$newest"
  # The same world size (2 ranks) on one host, 10 steps past it.
  job $((${newest:-0} + 10)) "{every_steps: 0, dir: $T/ckpt, resume: auto}" 1 >"$T/resume.yaml"
  expect_status 0 "cut: a job resumes from the newest checkpoint" "$DTRAIN" launch "$T/resume.yaml" --log-dir "$T/runs-resume"
  cat "$T/last.out" "$T/last.err" >"$T/resume.all"
  contains "$T/resume.all" "resuming from $T/ckpt/$file \\(step ${newest}," "cut: it resumed from step ${newest}, intact"
fi

# --- host 2 partitioned one way: what it sends is dropped -------------------------
long=$T/long.yaml
if fault oneway "$NC" cut 2 out; then
  survivor oneway "$a0" 0 "host 2's packets started being dropped"
  lost oneway "stopped acknowledging"
  survivor oneway "$a1" 1 "its packets started being dropped"
  check "oneway: nothing of the job is left in either host" left_in_hosts
  "$NC" heal 2
fi

# --- node 1's agent SIGKILLed -------------------------------------------------------
# ($a1 is the agent itself: netns-cluster.sh and `ip netns exec` exec it.)
kill_node1() { kill -9 "$a1"; }
if fault kill9 kill_node1; then
  wait "$a1" 2>/dev/null
  survivor kill9 "$a0" 0 "node 1's agent was killed"
  lost kill9 "closed its connection without leaving: its agent exited or was killed"
  check "kill9: nothing of the job is left in either host (node 1's guards killed its rank)" left_in_hosts
fi

# --- host 1 gone: node 0's agent, the coordinator and rank 0 with it ------------------
# Its link first, so no FIN or RST gets out, then every process in it.
host1_gone() {
  "$NC" cut 1 both
  kill -9 $("$NC" pids 1) 2>/dev/null
}
if fault gone host1_gone; then
  survivor gone "$a1" 1 "host 1 went away"
  contains "$T/gone.1.err" "lost the coordinator at $COORD" "gone: node 1 says it lost the coordinator at host:port"
  check "gone: nothing of the job is left in either host" left_in_hosts
  "$NC" heal 1
fi

# --- three hosts, host 3 (node 2) partitioned: nodes 0 and 1 both end ---------------
# Node 1 sees node 2 lost in the member list (or hears it from node 0's abort).
job 100000000 "" 3 1 >"$T/three.yaml"
long=$T/three.yaml nodes=3
if fault three "$NC" cut 3 both; then
  survivor three "$a0" 0 "host 3's link went down"
  survivor three "$a1" 1 "host 3's link went down"
  survivor three "$a2" 2 "its link went down"
  contains "$T/three.1.err" "node 2 \(.*\) (lost its connection|stopped acknowledging)" "three: node 1 says node 2 was lost"
  s=$(summary_of three)
  contains "${s:-$T/none}" '"lost_node": \{"node": 2,' "three: summary.json names node 2"
  check "three: nothing of the job is left in any host" left_in_hosts
  "$NC" heal 3
fi

# --- host 2 partitioned with a restart left: a new agent on host 3 replaces node 1 --
# The job of fixed nodes goes on (docs/multinode.md): node 0 ends the round when host 2
# stops acknowledging and waits for a new agent of node rank 1, which a scheduler would
# start elsewhere (host 3, 5 s after the cut); the cut-off agent on host 2 ends itself
# and, once the link is back, changes nothing.
job 2000 "{every_steps: 200, dir: $T/rckpt, keep: 2}" >"$T/replace.yaml"
printf 'max_restarts: 1\n' >>"$T/replace.yaml"
start replace "$T/replace.yaml"
for _ in $(seq 200); do ls "$T/rckpt"/step_*.safetensors >/dev/null 2>&1 && break; sleep 0.1; done
t0=$(date +%s.%N)
"$NC" cut 2 both
sleep 5
"$NC" exec 3 "$DTRAIN" agent "$T/replace.yaml" --node-rank 1 --nnodes 2 --coordinator "$COORD" \
  --log-dir "$T/runs-replace" >"$T/replace.1b.out" 2>"$T/replace.1b.err" &
a1b=$!; pids+=($a1b)
ends "$a1" $((BOUND + 30))
check "replace: the cut-off agent of node 1 ends itself with status 1 ($rc, ${took}s after the cut)" test "$rc" = 1
contains "$T/replace.1.err" "lost the coordinator at $COORD" "replace: it says it lost the coordinator"
"$NC" heal 2
ends "$a1b" 120; rc1=$rc
ends "$a0" 10; rc0=$rc
check "replace: node 0 and node 1's replacement on host 3 both exit 0 ($rc0 $rc1)" test "$rc0$rc1" = 00
contains "$T/replace.0.err" "round 0: a node of the round was lost: node 1 .* stopped acknowledging.*restart 1 of 1" \
  "replace: node 0 ends round 0 for the lost node, a restart counted"
contains "$T/replace.1b.err" "round 1: node 1 of 2" "replace: the new agent runs node 1 in round 1"
s=$(summary_of replace)
contains "${s:-$T/none}" "\"lost_node\": \\{\"node\": 1, \"host\": \"[^\"]+\", \"detected_s\": [0-9.]+, \"reason\": \"node 1 \\(host [^,]+, address $("$NC" addr 2):" \
  "replace: summary.json names node 1 at host 2's address"
contains "${s:-$T/none}" '"status": "succeeded"' "replace: summary.json says the job succeeded"
check "replace: nothing of the job is left in any host" left_in_hosts
