# test_agent_multinode.sh - `dtrain agent` with manual placement: two and three
# agents on this machine run one job as two or three "nodes".
#
#  - a command: job sees torchrun's multi-node variables on every rank;
#  - the bundled trainer on two nodes ends with the same loss as on one;
#  - a rank failing on node 1 restarts both nodes; with no restarts left both
#    agents exit with its status and node 0's summary.json names it;
#  - a node-1 agent that cannot reach the coordinator fails in time, naming host:port;
#  - killing node 0's agent makes node 1's agent exit with a clear error and
#    leave no process; bad placements and a missing token are refused;
#  - `dtrain render` refuses schedulers with nothing to render.
. "$(dirname "$0")/lib.sh"

. "$(dirname "$0")/agent_lib.sh"

# agents SPEC N TAG: runs N agents of SPEC (node 0 in the background), waits for
# all; their exit statuses go to $T/TAG.<node>.rc, output to $T/TAG.<node>.{out,err}.
agents() {
  local spec=$1 n=$2 tag=$3 port; port=$(free_port)
  local ps=()
  for node in $(seq 0 $((n - 1))); do
    ( "$DTRAIN" agent "$spec" --node-rank "$node" --nnodes "$n" --coordinator "127.0.0.1:$port" \
        --log-dir "$T/runs-$tag" >"$T/$tag.$node.out" 2>"$T/$tag.$node.err"; echo $? >"$T/$tag.$node.rc" ) &
    ps+=($!)
  done
  wait "${ps[@]}"
}

# --- a command: job on 2 and on 3 nodes ----------------------------------------
cat >"$T/env.yaml" <<'EOF2'
name: envjob
nproc_per_node: 2
command: [sh, -c, 'echo "env rank=$RANK world=$WORLD_SIZE local=$LOCAL_RANK lws=$LOCAL_WORLD_SIZE group=$GROUP_RANK gws=$GROUP_WORLD_SIZE role=$ROLE_RANK rws=$ROLE_WORLD_SIZE restart=$TORCHELASTIC_RESTART_COUNT node=$DTRAIN_NODE_RANK"']
rendezvous: {timeout: 20s}
EOF2
agents "$T/env.yaml" 2 env2
check "two agents of a command: job both exit 0" test "$(rc_of env2.0)$(rc_of env2.1)" = 00
cat "$T"/env2.*.out >"$T/env2.all"
for r in 0 1 2 3; do
  node=$((r / 2)) local=$((r % 2))
  contains "$T/env2.all" "^\[rank $r\] env rank=$r world=4 local=$local lws=2 group=$node gws=2 role=$r rws=4 restart=0 node=$node$" \
    "rank $r sees RANK, WORLD_SIZE, LOCAL_RANK, GROUP_RANK... of a 2x2 job"
done
check "node 1's agent shows only its own ranks" test "$(grep -c '^\[rank [23]\]' "$T/env2.1.out")" = 2

sed 's/^nproc_per_node: 2/nproc_per_node: 1/' "$T/env.yaml" >"$T/env1.yaml"
agents "$T/env1.yaml" 3 env3
check "three agents of a command: job all exit 0" test "$(rc_of env3.0)$(rc_of env3.1)$(rc_of env3.2)" = 000
cat "$T"/env3.*.out >"$T/env3.all"
check "three nodes run global ranks 0, 1, 2 of world 3" test \
  "$(grep -c 'world=3 local=0 lws=1' "$T/env3.all")" = 3 -a -n "$(grep 'rank=2 .*group=2 gws=3' "$T/env3.all")"

# --- the bundled trainer: two nodes of one rank equal one node of two ----------
# Bit for bit, on any CPU: a node of one rank gives it every core (2 threads on a
# 2-core host), a node of two ranks one each, and the CPU kernels' results do not
# depend on the threads (docs/trainer.md); the tcp and shm all-reduces sum two
# ranks' gradients in the same order.
trainer() { # nodes-line nproc
  cat <<EOF2
name: tr
$1
nproc_per_node: $2
trainer:
  model: {hidden: [32]}
  data: {batch_size: 32, workers: 1}
  steps: 10
  scheduler: {type: constant}
  checkpoint: {every_steps: 0}
  eval: {every_epochs: 0}
rendezvous: {timeout: 30s}
EOF2
}
trainer "nodes: 2" 1 >"$T/tr2.yaml"
trainer "" 2 >"$T/tr1.yaml"
agents "$T/tr2.yaml" 2 tr
check "the trainer on two agents exits 0 on both" test "$(rc_of tr.0)$(rc_of tr.1)" = 00
expect_status 0 "the same trainer on one node of two ranks" "$DTRAIN" launch "$T/tr1.yaml" --log-dir "$T/runs-tr1"
two=$(sed -n 's/.*"final_loss": \([-0-9.e]*\).*/\1/p' "$T"/runs-tr/tr-*/trainer_summary.json)
one=$(sed -n 's/.*"final_loss": \([-0-9.e]*\).*/\1/p' "$T"/runs-tr1/tr-*/trainer_summary.json)
check "two nodes reach the same final loss as one node ($two vs $one)" test -n "$two" -a "$two" = "$one"
contains "$T"/runs-tr/tr-*/trainer_summary.json '"world_size": 2' "the two-node trainer ran with world size 2"

# --- a rank hung on node 1: node 1's watchdog reads its heartbeats too ----------
# Heartbeats reach only the coordinator on node 0; node 0 relays node 1's through the
# store.  Rank 1 (node 1) stops itself at step 10; node 1's hang report must show the
# step its heartbeat last reported, which it can only know through that relay.
trainer "nodes: 2" 1 | sed -e 's/steps: 10/steps: 40/' \
  -e 's/^rendezvous: .*/rendezvous: {timeout: 20s, heartbeat_timeout: 2s}\nmax_restarts: 1/' >"$T/hang.yaml"
DTRAIN_FAULT=stop:1:10 agents "$T/hang.yaml" 2 hang
check "a rank stopped on node 1: both agents recover with a restart and exit 0 ($(rc_of hang.0)$(rc_of hang.1))" \
  test "$(rc_of hang.0)$(rc_of hang.1)" = 00
contains "$T/hang.1.err" "rank 1 .*hung" "node 1's watchdog declares rank 1 hung"
report=$(ls "$T"/runs-hang/tr-*/attempt_0/hang_rank_1.txt 2>/dev/null | head -n 1)
contains "${report:-$T/none}" "heartbeat: step [0-9]+, [0-9.]+ s ago" \
  "node 1's hang report has rank 1's last heartbeat (relayed from node 0's coordinator)"
hsum=$(ls "$T"/runs-hang/tr-*/summary.json 2>/dev/null | head -n 1)
contains "${hsum:-$T/none}" '"first_failure": \{"attempt": 0, "rank": 1, "node": 1, .*"final": false, "hang": \{"rank": 1, "step": [0-9]+, "detected_s": [0-9.]+, "reason": "(in process state T|silent for)' \
  "node 0's summary.json names the hang on node 1: rank, step, reason (the job then succeeded)"
if grep -q "hung" "$T/tr.1.err" "$T/tr.0.err"; then not_ok "the healthy two-node trainer is not declared hung"
else ok "the healthy two-node trainer is not declared hung"; fi

# --- a rank failing on node 1 restarts both nodes ------------------------------
failjob() { # max_restarts
  cat <<EOF2
name: failjob
nproc_per_node: 2
max_restarts: $1
command: [sh, -c, 'if [ \$RANK = 3 ] && [ \$TORCHELASTIC_RESTART_COUNT = 0 ]; then echo "rank 3 breaks" >&2; exit 3; fi; sleep 1; echo "done rank=\$RANK round=\$TORCHELASTIC_RESTART_COUNT"']
rendezvous: {timeout: 20s}
EOF2
}
failjob 1 >"$T/f1.yaml"
agents "$T/f1.yaml" 2 f1
check "after rank 3 failed on node 1, both agents end with 0" test "$(rc_of f1.0)$(rc_of f1.1)" = 00
cat "$T"/f1.*.out >"$T/f1.all"
check "every rank of both nodes ran again in round 1" test "$(grep -c 'round=1' "$T/f1.all")" = 4
check "no rank finished round 0 (node 0's ranks were stopped too)" test "$(grep -c 'round=0' "$T/f1.all")" = 0
contains "$T/f1.0.err" "rank 3 on node 1 exited with code 3 first; every node restarts" "node 0 says which rank on which node caused the restart"

failjob 0 >"$T/f0.yaml"
agents "$T/f0.yaml" 2 f0
check "with no restarts left both agents exit with the failed rank's status 3" test "$(rc_of f0.0)$(rc_of f0.1)" = 33
sum=$(ls "$T"/runs-f0/failjob-*/summary.json)
contains "$sum" '"first_failure": \{"attempt": 0, "rank": 3, "node": 1, "host": "[^"]+", "exit_code": 3' "node 0's summary.json names rank 3 on node 1 as the first failure"
contains "$sum" '"stderr_tail": \["rank 3 breaks"\]' "and carries its last stderr line"
t=$(sed -n 's/.*"first_failure": {.*"time_s": \([0-9.]*\),.*/\1/p' "$sum")
x=$(sed -n 's/.*{"rank": 3, "local_rank": 1, .*"exit_s": \([0-9.]*\)}.*/\1/p' "$sum" | head -n 1)
check "the failure's time_s is on node 0's clock: rank 3's exit time, not 0 ($t s vs $x s)" \
  awk -v t="${t:-0}" -v x="${x:--9}" 'BEGIN { d = t - x; exit !(t > 0 && d < 0.5 && d > -0.5) }'
for r in 0 1 2 3; do
  contains "$sum" "\{\"rank\": $r, \"local_rank\": $((r % 2)), \"pid\": [1-9]" "summary.json's attempt lists rank $r (both nodes' ranks)"
done
contains "$sum" '\{"rank": 3, "local_rank": 1, "pid": [0-9]+, "exit_code": 3, .*"spawn_s": [0-9.]+, "exit_s": [0-9.]+\}' \
  "node 1's failed rank carries its exit code and times"
if grep -q "summary.json in" "$T/f0.1.err"; then not_ok "node 1 does not point at a summary.json it does not write"
else ok "node 1 does not point at a summary.json it does not write"; fi
contains "$T/f0.1.err" "node 0 writes summary.json" "node 1 says node 0 writes summary.json"

# --- a node 1 that cannot reach the coordinator ----------------------------------
sed 's/timeout: 20s/timeout: 2s/' "$T/env.yaml" >"$T/short.yaml"
port=$(free_port)
start=$(date +%s)
expect_status 1 "node 1 without a coordinator fails" "$DTRAIN" agent "$T/short.yaml" --node-rank 1 --nnodes 2 --coordinator "127.0.0.1:$port"
took=$(( $(date +%s) - start ))
check "within rendezvous.timeout (2s) and a margin: ${took}s" test "$took" -le 6
contains "$T/last.err" "cannot reach the coordinator at 127.0.0.1:$port .* within rendezvous.timeout \(2s\)" "the error names host:port and the timeout"

# --- node 0's agent killed ------------------------------------------------------
# A sleep of a length no other test runs, so pgrep counts only this job's ranks.
nap="37.$$"
cat >"$T/long.yaml" <<EOF2
name: longjob
nproc_per_node: 2
command: [sleep, "$nap"]
rendezvous: {timeout: 20s}
EOF2
port=$(free_port)
"$DTRAIN" agent "$T/long.yaml" --node-rank 0 --nnodes 2 --coordinator "127.0.0.1:$port" --log-dir "$T/runs-k" >"$T/k0.out" 2>"$T/k0.err" &
a0=$!; pids+=($a0)
"$DTRAIN" agent "$T/long.yaml" --node-rank 1 --nnodes 2 --coordinator "127.0.0.1:$port" --log-dir "$T/runs-k" >"$T/k1.out" 2>"$T/k1.err" &
a1=$!; pids+=($a1)
for _ in $(seq 100); do [ "$(pgrep -fc "sleep $nap")" -ge 4 ] && break; sleep 0.1; done
check "both nodes' ranks are running" test "$(pgrep -fc "sleep $nap")" -ge 4
kill -9 "$a0"; wait "$a0" 2>/dev/null
start=$(date +%s)
wait "$a1"; st=$?
took=$(( $(date +%s) - start ))
check "node 1's agent exits with an error once node 0's agent is killed (exit $st, ${took}s)" test "$st" = 1 -a "$took" -le 8
contains "$T/k1.err" "lost the coordinator at 127.0.0.1:$port" "and says it lost the coordinator at host:port"
sleep 0.5
check "no process of the job is left" test "$(pgrep -fc "sleep $nap")" = 0

# kill -9 of node 1's agent: its ranks' guards kill what the ranks started (a
# background child, one in a session of its own), within 5 s; node 0 then ends too.
m="mn-kill9-$$-$RANDOM"
cat >"$T/bg.yaml" <<EOF2
name: bgjob
nproc_per_node: 2
env: {DTRAIN_TEST_MARKER: "$m"}
command: [sh, -c, 'sleep 300 & setsid sleep 301 & wait']
rendezvous: {timeout: 20s}
EOF2
# The pids of the job's processes (the marker in their environment) on node NODE (RANK 2*NODE, 2*NODE+1).
node_pids() {
  for f in $(grep -lsa "DTRAIN_TEST_MARKER=$m" /proc/[0-9]*/environ 2>/dev/null); do
    tr '\0' '\n' <"$f" 2>/dev/null | grep -qx "GROUP_RANK=$1" && echo "$f" | cut -d/ -f3
  done
}
port=$(free_port)
"$DTRAIN" agent "$T/bg.yaml" --node-rank 0 --nnodes 2 --coordinator "127.0.0.1:$port" --log-dir "$T/runs-b" >"$T/b0.out" 2>"$T/b0.err" &
b0=$!; pids+=($b0)
"$DTRAIN" agent "$T/bg.yaml" --node-rank 1 --nnodes 2 --coordinator "127.0.0.1:$port" --log-dir "$T/runs-b" >"$T/b1.out" 2>"$T/b1.err" &
b1=$!; pids+=($b1)
for _ in $(seq 100); do [ "$(node_pids 1 | wc -l)" -ge 6 ] && break; sleep 0.1; done
check "node 1's ranks and their children are running ($(node_pids 1 | wc -l) processes)" test "$(node_pids 1 | wc -l)" -ge 6
kill -9 "$b1"; wait "$b1" 2>/dev/null
gone=1
for _ in $(seq 50); do [ -z "$(node_pids 1)" ] && { gone=0; break; }; sleep 0.1; done
check "SIGKILL to node 1's agent: nothing of its ranks is left within 5 s" test "$gone" = 0
wait "$b0"; st=$?
check "node 0's agent ends the job (exit $st)" test "$st" != 0
for _ in $(seq 50); do [ -z "$(node_pids 0)" ] && break; sleep 0.1; done
check "and nothing of node 0's ranks is left" test -z "$(node_pids 0)"

# --- bad placements, no token --------------------------------------------------
port=$(free_port)
"$DTRAIN" agent "$T/long.yaml" --node-rank 0 --nnodes 2 --coordinator "127.0.0.1:$port" --log-dir "$T/runs-d" >"$T/d0.out" 2>"$T/d0.err" &
d0=$!; pids+=($d0)
"$DTRAIN" agent "$T/long.yaml" --node-rank 1 --nnodes 2 --coordinator "127.0.0.1:$port" --log-dir "$T/runs-d" >"$T/d1.out" 2>"$T/d1.err" &
d1=$!; pids+=($d1)
for _ in $(seq 100); do [ "$(pgrep -fc "sleep $nap")" -ge 4 ] && break; sleep 0.1; done
expect_status 1 "a second agent with node rank 1 is refused" "$DTRAIN" agent "$T/long.yaml" --node-rank 1 --nnodes 2 --coordinator "127.0.0.1:$port"
contains "$T/last.err" "node rank 1 is already taken by the agent with pid $d1" "the error says which agent holds node rank 1"
# SIGTERM to node 0's agent ends the job on both nodes with one status, 128 + 15.
kill -TERM "$d0"
wait "$d0"; st0=$?
wait "$d1"; st1=$?
check "SIGTERM to node 0's agent ends both agents with status 143 ($st0 $st1)" test "$st0$st1" = 143143
contains "$T/d1.err" "the job is ending: node 0: its agent was interrupted by SIGTERM" "node 1 says why it stopped"
check "no process of the job is left after the SIGTERM" test "$(pgrep -fc "sleep $nap")" = 0
# The same when node 1's ranks fail the moment node 0's die (as trainers losing
# their peers do): node 0 publishes its abort before signalling its ranks, so
# that abort, not node 1's failure, is the job's status.  Three rounds: which
# node's agent looks first varies.
cat >"$T/peer.sh" <<'EOF2'
if [ "$GROUP_RANK" = 0 ]; then
  trap 'touch "$PEER_GONE"; exit 143' TERM
  while :; do sleep 0.01; done
fi
while [ ! -e "$PEER_GONE" ]; do sleep 0.005; done
exit 1
EOF2
for round in 1 2 3; do
  cat >"$T/peer$round.yaml" <<EOF2
name: peerjob
nproc_per_node: 1
command: [sh, "$T/peer.sh"]
env: {PEER_GONE: "$T/peer-gone$round"}
rendezvous: {timeout: 20s}
EOF2
  port=$(free_port)
  "$DTRAIN" agent "$T/peer$round.yaml" --node-rank 0 --nnodes 2 --coordinator "127.0.0.1:$port" --log-dir "$T/runs-p" \
    >"$T/p0.out" 2>"$T/p0.err" &
  p0=$!; pids+=($p0)
  "$DTRAIN" agent "$T/peer$round.yaml" --node-rank 1 --nnodes 2 --coordinator "127.0.0.1:$port" --log-dir "$T/runs-p" \
    >"$T/p1.out" 2>"$T/p1.err" &
  p1=$!; pids+=($p1)
  for _ in $(seq 100); do [ "$(pgrep -fc "sh $T/peer.sh")" -ge 2 ] && break; sleep 0.1; done
  kill -TERM "$p0"
  wait "$p0"; st0=$?
  wait "$p1"; st1=$?
  check "round $round: node 1's ranks fail on losing node 0's, SIGTERM'd: both agents end with 143 ($st0 $st1)" \
    test "$st0$st1" = 143143
done
expect_status 2 "--node-rank out of range is a usage problem" "$DTRAIN" agent "$T/env.yaml" --node-rank 2 --nnodes 2 --coordinator 127.0.0.1:1
contains "$T/last.err" "--node-rank 2 is out of range for 2 nodes" "it says the range"
expect_status 2 "several nodes need --coordinator" "$DTRAIN" agent "$T/env.yaml" --node-rank 1 --nnodes 2
expect_status 2 "the token is not taken on the command line" "$DTRAIN" agent "$T/env.yaml" --token abc
DTRAIN_JOB_TOKEN= expect_status 2 "a multi-node job with auth: token needs DTRAIN_JOB_TOKEN" \
  "$DTRAIN" agent "$T/env.yaml" --node-rank 1 --nnodes 2 --coordinator 127.0.0.1:1
contains "$T/last.err" "DTRAIN_JOB_TOKEN_FILE" "the error names both ways to give it"

# --- the token from a file (Kubernetes Secrets) ----------------------------------
# A token file others can read is refused (issue 26): the file is made 0600 here.
echo "$DTRAIN_JOB_TOKEN" >"$T/token"
chmod 644 "$T/token"
DTRAIN_JOB_TOKEN= DTRAIN_JOB_TOKEN_FILE="$T/token" expect_status 2 "a token file every user can read is refused" \
  "$DTRAIN" agent "$T/env.yaml" --node-rank 1 --nnodes 2 --coordinator 127.0.0.1:1
contains "$T/last.err" "DTRAIN_JOB_TOKEN_FILE: the job token file $T/token can be read by every user \(mode 0644\).*chmod 600 $T/token" \
  "the error names the file, its mode and the chmod that fixes it"
chmod 640 "$T/token"
DTRAIN_JOB_TOKEN= DTRAIN_JOB_TOKEN_FILE="$T/token" expect_status 2 "a token file its group can read is refused" \
  "$DTRAIN" agent "$T/env.yaml" --node-rank 1 --nnodes 2 --coordinator 127.0.0.1:1
contains "$T/last.err" "can be read by its group \(mode 0640\)" "it says who can read it"
chmod 600 "$T/token"
port=$(free_port)
( unset DTRAIN_JOB_TOKEN; export DTRAIN_JOB_TOKEN_FILE="$T/token"
  "$DTRAIN" agent "$T/env.yaml" --node-rank 1 --nnodes 2 --coordinator "127.0.0.1:$port" --log-dir "$T/runs-tf" >"$T/tf1.out" 2>&1 ) &
tf1=$!
( unset DTRAIN_JOB_TOKEN; export DTRAIN_JOB_TOKEN_FILE="$T/token"
  "$DTRAIN" agent "$T/env.yaml" --node-rank 0 --nnodes 2 --coordinator "127.0.0.1:$port" --log-dir "$T/runs-tf" >"$T/tf0.out" 2>&1 )
st0=$?; wait "$tf1"; st1=$?
check "two agents with DTRAIN_JOB_TOKEN_FILE run the job ($st0 $st1)" test "$st0$st1" = 00
[ "$st0$st1" = 00 ] || { sed 's/^/    node 0: /' "$T/tf0.out"; sed 's/^/    node 1: /' "$T/tf1.out"; } | tail -n 20

# --- dtrain render ----------------------------------------------------------------
expect_status 2 "dtrain render local: nothing to render" "$DTRAIN" render local "$T/env.yaml"
contains "$T/last.err" "nothing to render" "it says why"
expect_status 2 "dtrain render of an unknown scheduler" "$DTRAIN" render nosuch "$T/env.yaml"
contains "$T/last.err" "no scheduler adapter named 'nosuch'" "it names the scheduler"
