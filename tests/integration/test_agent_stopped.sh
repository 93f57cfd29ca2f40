# test_agent_stopped.sh - an agent stopped by SIGSTOP mid-job, with `dtrain agent`
# on this machine over loopback.  Its kernel still acknowledges, so TCP liveness
# never sees it; node 0's coordinator takes a member that sends nothing for
# max(heartbeat_timeout, 5 s) for lost.
#
#  - nodes: 2, max_restarts 0: node 1's agent stopped while the ranks run; node 0
#    ends the job with status 1 within the bound, naming node 1 and that it went
#    silent (its log and summary.json's lost_node); node 1's agent, continued,
#    finds itself cut off, stops its rank and exits 1;
#  - nodes: 1:2: node 1's agent stopped; the job goes on without it in the next
#    round on node 0 and ends 0, summary.json's lost_node naming node 1.
. "$(dirname "$0")/lib.sh"

. "$(dirname "$0")/agent_lib.sh"

# agent SPEC TAG PORT NNODES [args]: one agent in the background (bg_agent), runs in runs-TAG.
agent() {
  local spec=$1 tag=$2 port=$3 nn=$4; shift 4
  bg_agent "$tag" "$T/runs-$tag" "$spec" --nnodes "$nn" --coordinator "127.0.0.1:$port" "$@"
}
# rank_pid TAG: the pid the rank of agent TAG printed ("up PID").
rank_pid() { sed -n 's/^\[rank [0-9]*\] up \([0-9]*\).*/\1/p' "$T/$1.out" | tail -n 1; }

# The rank says it is up with its pid; round 0 runs for a minute, a later round ends at once.
cat >"$T/job.yaml" <<'EOF'
name: stopjob
nproc_per_node: 1
command: [sh, -c, 'echo "up $$ $DTRAIN_RESTART_COUNT"; [ "$DTRAIN_RESTART_COUNT" -gt 0 ] && exit 0; exec sleep 60']
rendezvous: {timeout: 20s, heartbeat_timeout: 2s, last_call_timeout: 3s}
grace_period: 1s
max_restarts: 0
EOF

# --- nodes: 2, no restarts: the job ends, naming node 1 -------------------------
port=$(free_port)
agent "$T/job.yaml" a0 "$port" 2 --node-rank 0
agent "$T/job.yaml" a1 "$port" 2 --node-rank 1
check "both ranks run" wait_for "$(limit_s 20)" grep -qs "^\[rank 1\] up" "$T/a1.out"
pids+=($(rank_pid a1))
kill -STOP "$(cat "$T/a1.pid")"
t0=$SECONDS
wait_for "$(limit_s 40)" test -f "$T/a0.rc"
took=$((SECONDS - t0))
check "node 0 ends the job with status 1 (status $(rc_of a0))" test "$(rc_of a0)" = 1
# 5 s of silence, a quarter of it for the sweep, node 0's poll, then its rank's 1 s grace.
check "within 5 s of silence + 5 s (took ${took}s)" test "$took" -le "$(limit_s 10)"
contains "$T/a0.err" "node 1 \(host [^)]*agent pid $(cat "$T/a1.pid")\) went silent: its agent sent nothing for 5 s" \
  "node 0 says node 1 went silent and names its agent"
check "summary.json's lost_node is node 1, gone silent" python3 - "$T"/runs-a0/stopjob-*/summary.json <<'EOF'
import json, sys
ln = json.load(open(sys.argv[1]))["lost_node"]
assert ln["node"] == 1 and "went silent" in ln["reason"], ln
EOF
check "node 1's rank still runs while its agent is stopped" kill -0 "$(rank_pid a1)"
kill -CONT "$(cat "$T/a1.pid")"
wait_for "$(limit_s 20)" test -f "$T/a1.rc"
check "node 1's agent, continued, exits 1 (status $(rc_of a1))" test "$(rc_of a1)" = 1
contains "$T/a1.err" "node 1: lost the coordinator" "node 1's agent says it lost the coordinator"
check "and its rank is gone" wait_for "$(limit_s 10)" sh -c "! kill -0 $(rank_pid a1) 2>/dev/null"

# --- nodes: 1:2: the job goes on without node 1 ----------------------------------
port=$(free_port)
agent "$T/job.yaml" e0 "$port" 1:2 --node-rank 0
agent "$T/job.yaml" e1 "$port" 1:2
check "round 0 forms with both nodes" wait_for "$(limit_s 20)" grep -qs "^\[rank 1\] up [0-9]* 0" "$T/e1.out"
pids+=($(rank_pid e1))
kill -STOP "$(cat "$T/e1.pid")"
t0=$SECONDS
wait_for "$(limit_s 40)" test -f "$T/e0.rc"
took=$((SECONDS - t0))
check "node 0 goes on alone and the job ends 0 (status $(rc_of e0))" test "$(rc_of e0)" = 0
# 5 s of silence, the sweep and poll, the round's end (1 s grace), the next round's forming and run.
check "within 5 s of silence + 10 s (took ${took}s)" test "$took" -le "$(limit_s 15)"
contains "$T/e0.out" "^\[rank 0\] up [0-9]* [1-9]" "a later round ran on node 0"
contains "$T/e0.err" "went silent" "node 0 says why node 1 was lost"
check "summary.json's lost_node is node 1, gone silent" python3 - "$T"/runs-e0/stopjob-*/summary.json <<'EOF'
import json, sys
ln = json.load(open(sys.argv[1]))["lost_node"]
assert ln["node"] == 1 and "went silent" in ln["reason"], ln
EOF
kill -CONT "$(cat "$T/e1.pid")"
wait_for "$(limit_s 20)" test -f "$T/e1.rc"
check "node 1's agent, continued, ends (status $(rc_of e1)) and its rank is gone" \
  wait_for "$(limit_s 10)" sh -c "! kill -0 $(rank_pid e1) 2>/dev/null"
