# test_agent_replace.sh - a job of fixed nodes with restarts survives the loss of a
# node: `dtrain agent` on this machine stands for each node, and a new agent with the
# lost node's --node-rank for what a scheduler starts in its place (a new pod, a
# restarted step), as docs/multinode.md describes.
#
#  - a command: job of 2 nodes, max_restarts 2: node 1's agent SIGKILLed mid-run,
#    its replacement started 5 s later: both agents exit 0, the ranks of round 1 see
#    TORCHELASTIC_RESTART_COUNT=1, node 0's summary.json names the lost node and ends
#    round 0 as a restart; an agent without the job's token cannot take node 1's place;
#  - SIGTERM to node 1's agent (an eviction, a drain): node 1 alone leaves (exit 143),
#    node 0 waits for its new agent, the job finishes;
#  - the bundled trainer on 2 nodes: the same; round 1 resumes from the newest
#    checkpoint and ends with the final loss of a run that lost nothing;
#  - without restarts left: max_restarts 0 ends the job at once (status 1, saying
#    so), and the replacement learns the job is over; a restart spent on a rank's
#    failure leaves none for a lost node (status 1, "no restarts are left");
#  - no replacement within rendezvous.timeout: the job fails, naming the node.
. "$(dirname "$0")/lib.sh"

. "$(dirname "$0")/agent_lib.sh"

# agent SPEC TAG PORT NODE: one agent of a 2-node job in the background (bg_agent).
agent() { bg_agent "$2" "$T/runs" "$1" --node-rank "$4" --nnodes 2 --coordinator "127.0.0.1:$3"; }
summary_of() { ls "$T"/runs/"$1"-*/summary.json 2>/dev/null | head -n 1; }

# replace SPEC TAG MARK [IMPOSTOR]: nodes 0 and 1 (TAG0, TAG1) start; once MARK shows in
# node 1's output its agent is SIGKILLed, and 5 s later a new agent for node 1 (TAG1b)
# starts.  With IMPOSTOR, an agent without the job's token tries node 1's place first.
replace() {
  local spec=$1 tag=$2 mark=$3 port
  port=$(free_port)
  agent "$spec" "${tag}0" "$port" 0
  agent "$spec" "${tag}1" "$port" 1
  check "node 1's ranks run ($mark)" wait_for "$(limit_s 30)" grep -qs -- "$mark" "$T/${tag}1.out" "$T/${tag}1.err"
  kill -9 "$(cat "$T/${tag}1.pid")"
  if [ -n "${4:-}" ]; then
    DTRAIN_JOB_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n') expect_status 1 \
      "an agent for node 1 without the job's token is refused" "$DTRAIN" agent "$spec" --node-rank 1 --nnodes 2 \
      --coordinator "127.0.0.1:$port" --log-dir "$T/runs"
    contains "$T/last.err" "refused the job token" "it says the coordinator refused its token"
    contains "$T/last.err" "node 1: the coordinator at 127\.0\.0\.1:$port .* holds another job token than this node; every node" \
      "and that every node needs the same one, not that it cannot reach the coordinator"
  fi
  sleep 5
  agent "$spec" "${tag}1b" "$port" 1
}

# --- a command: job: TORCHELASTIC_RESTART_COUNT advances ----------------------------
cat >"$T/cmd.yaml" <<'EOF'
name: cmdrep
nodes: 2
nproc_per_node: 2
max_restarts: 2
command: [sh, -c, 'echo "env rank=$RANK world=$WORLD_SIZE group=$GROUP_RANK restart=$TORCHELASTIC_RESTART_COUNT round=$DTRAIN_RESTART_COUNT"; sleep 4; echo "done rank=$RANK round=$DTRAIN_RESTART_COUNT"']
rendezvous: {timeout: 30s, heartbeat_timeout: 10s}
EOF
replace "$T/cmd.yaml" c "env rank=3" impostor
wait_for "$(limit_s 60)" test -f "$T/c0.rc" -a -f "$T/c1b.rc"
check "node 0 and node 1's replacement both exit 0 ($(rc_of c0) $(rc_of c1b))" test "$(rc_of c0)$(rc_of c1b)" = 00
for r in 0 1; do
  contains "$T/c0.out" "^\[rank $r\] env rank=$r world=4 group=0 restart=1 round=1$" \
    "round 1: node 0's rank $r sees TORCHELASTIC_RESTART_COUNT=1"
  contains "$T/c1b.out" "^\[rank $((r + 2))\] env rank=$((r + 2)) world=4 group=1 restart=1 round=1$" \
    "round 1: the replacement's rank $((r + 2)) sees TORCHELASTIC_RESTART_COUNT=1"
done
check "every rank of round 1 finished" test "$(cat "$T/c0.out" "$T/c1b.out" | grep -c 'done rank=[0-3] round=1')" = 4
check "no rank finished round 0 (node 0's were stopped when node 1 was lost)" \
  test "$(cat "$T/c0.out" "$T/c1b.out" | grep -c 'done rank=[0-3] round=0')" = 0
contains "$T/c0.err" "round 1: waiting up to 30s \(rendezvous.timeout\) for a new agent of node 1" \
  "node 0 says it waits for node 1's replacement"
contains "$T/c1b.err" "replacing its lost agent \(this is agent #2 of node 1\)" "the replacement says whose place it takes"
check "summary.json: lost_node is node 1 (its agent's connection closed); round 0 ended by a restart that names it, round 1 finished; 1 restart counted" \
  python3 - "$(summary_of cmdrep)" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
ln = s["lost_node"]
# a killed agent's connection closes, or is reset when a request of it was still unread
assert ln and ln["node"] == 1 and ("closed its connection" in ln["reason"] or "reset by peer" in ln["reason"]), ln
rounds = [a.get("round") for a in s["attempts"]]
assert len(rounds) == 2, rounds
assert rounds[0]["ended_by"] == "restart" and "node 1 (host" in rounds[0]["reason"], rounds[0]
assert rounds[1]["ended_by"] == "finished" and rounds[1]["nodes"] == 2, rounds[1]
assert s["status"] == "succeeded" and s["failure_restarts"] == 1 and s["membership_changes"] == 0, s
ranks = sorted(r["rank"] for r in s["attempts"][1]["ranks"])
assert ranks == [0, 1, 2, 3], ranks
EOF

# --- SIGTERM to node 1's agent (a pod evicted, a node drained): node 1 alone leaves ---
sed 's/name: cmdrep/name: evict/' "$T/cmd.yaml" >"$T/evict.yaml"
port=$(free_port)
agent "$T/evict.yaml" e0 "$port" 0
agent "$T/evict.yaml" e1 "$port" 1
check "node 1's ranks run" wait_for "$(limit_s 30)" grep -qs "env rank=3" "$T/e1.out"
kill -TERM "$(cat "$T/e1.pid")"
wait_for "$(limit_s 20)" test -f "$T/e1.rc"
check "SIGTERM: node 1's agent exits 143, 128 + SIGTERM ($(rc_of e1))" test "$(rc_of e1)" = 143
contains "$T/e1.err" "node 1: received SIGTERM: this node leaves the job; the others go on without it" \
  "node 1 says it leaves alone"
sleep 2
agent "$T/evict.yaml" e1b "$port" 1
wait_for "$(limit_s 60)" test -f "$T/e0.rc" -a -f "$T/e1b.rc"
check "node 0 and the new agent of node 1 both exit 0 ($(rc_of e0) $(rc_of e1b))" test "$(rc_of e0)$(rc_of e1b)" = 00
contains "$T/e0.out" "^\[rank 0\] env rank=0 world=4 group=0 restart=1 round=1$" "round 1 runs with the new agent"
esum=$(summary_of evict)
contains "${esum:-$T/none}" '"lost_node": \{"node": 1, .*"reason": "node 1 \(host [^,]+, agent pid [0-9]+\) left the job mid-round: its agent was stopped by a signal"' \
  "summary.json: lost_node says node 1 left, stopped by a signal"

# --- the bundled trainer: resumes from its checkpoint, same final loss ---------------
trainer() { # max_restarts
  cat <<EOF
name: trrep
nodes: 2
nproc_per_node: 1
backend: tcp
max_restarts: $1
trainer:
  model: {hidden: [32]}
  data: {batch_size: 32, workers: 0}
  steps: 60
  scheduler: {type: constant}
  checkpoint: {every_steps: 10}
  eval: {every_epochs: 0}
rendezvous: {timeout: 30s, heartbeat_timeout: 20s}
EOF
}
trainer 2 >"$T/tr.yaml"
# Rank 1 stops computing after step 25 (the checkpoint of step 20 is written): the
# kill lands mid-run, at a known step.
DTRAIN_FAULT=hang:1:25 replace "$T/tr.yaml" t "DTRAIN_FAULT: rank 1 hang"
wait_for "$(limit_s 60)" test -f "$T/t0.rc" -a -f "$T/t1b.rc"
check "the trainer: node 0 and the replacement both exit 0 ($(rc_of t0) $(rc_of t1b))" test "$(rc_of t0)$(rc_of t1b)" = 00
tsum=$(ls "$T"/runs/trrep-*/trainer_summary.json 2>/dev/null | head -n 1)
contains "${tsum:-$T/none}" '"resumed_from_step": 20,' "round 1 resumed from the checkpoint of step 20"
contains "${tsum:-$T/none}" '"steps": 60,' "and trained to the spec's last step"
port=$(free_port)
agent "$T/tr.yaml" u0 "$port" 0
agent "$T/tr.yaml" u1 "$port" 1
wait_for "$(limit_s 60)" test -f "$T/u0.rc" -a -f "$T/u1.rc"
check "the same job without a loss exits 0 on both ($(rc_of u0) $(rc_of u1))" test "$(rc_of u0)$(rc_of u1)" = 00
lost=$(sed -n 's/.*"final_loss": \([-0-9.e]*\).*/\1/p' "${tsum:-$T/none}")
whole=$(ls -t "$T"/runs/trrep-*/trainer_summary.json | head -n 1 | xargs sed -n 's/.*"final_loss": \([-0-9.e]*\).*/\1/p')
check "the run that lost node 1 reaches the final loss of the one that did not ($lost vs $whole)" \
  test -n "$lost" -a "$lost" = "$whole"

# --- no restarts left ---------------------------------------------------------------
sed -e 's/max_restarts: 2/max_restarts: 0/' -e 's/timeout: 30s/timeout: 5s/' "$T/cmd.yaml" >"$T/none.yaml"
replace "$T/none.yaml" n "env rank=3"
wait_for "$(limit_s 20)" test -f "$T/n0.rc" -a -f "$T/n1b.rc"
check "max_restarts 0: node 0 ends the job with status 1 ($(rc_of n0))" test "$(rc_of n0)" = 1
contains "$T/n0.err" "node 1 .*(closed|lost) its connection.*stopping the job \(max_restarts is 0: a lost node is not replaced\)" \
  "node 0 says node 1 was lost and that no restart replaces it"
check "the replacement exits 1 ($(rc_of n1b))" test "$(rc_of n1b)" = 1
contains "$T/n1b.err" "the job ended before this agent could take part|cannot reach the coordinator" \
  "the replacement says the job is over"

# One restart, spent on a rank's failure in round 0; node 1 lost in round 1.
cat >"$T/spent.yaml" <<'EOF'
name: spent
nodes: 2
max_restarts: 1
command: [sh, -c, 'echo "env rank=$RANK round=$DTRAIN_RESTART_COUNT"; if [ $RANK$DTRAIN_RESTART_COUNT = 10 ]; then exit 3; fi; sleep 30']
rendezvous: {timeout: 5s, heartbeat_timeout: 10s}
EOF
replace "$T/spent.yaml" s "env rank=1 round=1"
wait_for "$(limit_s 20)" test -f "$T/s0.rc" -a -f "$T/s1b.rc"
check "a restart spent on a failure: node 0 ends the job with status 1 when node 1 is lost ($(rc_of s0))" \
  test "$(rc_of s0)" = 1
contains "$T/s0.err" "the job failed in round 1: a node of the round was lost: node 1 .*, and no restarts are left \(max_restarts 1\)" \
  "node 0 says node 1 was lost with no restarts left"
check "the replacement exits with the job's status 1 ($(rc_of s1b))" test "$(rc_of s1b)" = 1
ssum=$(summary_of spent)
contains "${ssum:-$T/none}" '"ended_by": "failed", "reason": "a node of the round was lost' \
  "summary.json: the last round failed for the lost node"

# --- no replacement: the job fails after rendezvous.timeout --------------------------
sed -e 's/timeout: 30s/timeout: 3s/' -e 's/name: cmdrep/name: gone/' "$T/cmd.yaml" >"$T/gone.yaml"
port=$(free_port)
agent "$T/gone.yaml" g0 "$port" 0
agent "$T/gone.yaml" g1 "$port" 1
check "node 1's ranks run" wait_for "$(limit_s 30)" grep -qs "env rank=3" "$T/g1.out"
kill -9 "$(cat "$T/g1.pid")"
t0=$SECONDS
wait_for "$(limit_s 20)" test -f "$T/g0.rc"
echo "    node 0 ended $((SECONDS - t0)) s after the kill"
check "without a replacement node 0 exits 1 ($(rc_of g0))" test "$(rc_of g0)" = 1
contains "$T/g0.err" "round 1: no new agent for node 1 joined within rendezvous.timeout \(3s\) after it was lost" \
  "node 0 says which node did not come back within rendezvous.timeout"
