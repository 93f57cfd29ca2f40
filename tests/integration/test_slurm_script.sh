#!/usr/bin/env bash
# test_slurm_script.sh - the shell of a rendered sbatch script, run without Slurm.
#
# What each node's task runs around its agent (the NODE script of `dtrain render slurm`,
# run by srun as `bash -c "$NODE" dtrain-node AGENT...`) is taken from a rendered script and
# run here with a stand-in agent and the SLURM_* variables a task sees; a listening socket
# stands in for node 0's coordinator:
#   - the setup: lines run once on the node, before its agent, and their environment
#     reaches the agent; a failing line stops the node without starting it;
#   - an agent lost (killed by SIGKILL) on node 1 while the coordinator answers is started
#     again, up to max_restarts times, and the task ends with the new agent's status;
#   - not started again: node 0's agent, an agent whose coordinator is gone (the job
#     ended), an agent that exited with a status (the job's), an agent stopped with the
#     task (SIGTERM to the step's processes); SIGUSR1 (the requeue warning) does not end
#     the task's shell;
#   - an elastic job's node whose agent is lost ends its task 0 (the job goes on without it,
#     srun's status stays node 0's); node 0's own ends with its status.
. "$(dirname "$0")/lib.sh"

PORT=$(free_port)
cat >"$T/job.yaml" <<YAML
name: nodes
scheduler: slurm
nodes: 2
max_restarts: 2
rendezvous: {port: $PORT}
setup: ['echo setup >>"\$COUNT"', 'export FROM_SETUP=yes']
command: [true]
YAML
"$DTRAIN" render slurm "$T/job.yaml" >"$T/job.sbatch" 2>"$T/render.err" ||
  { not_ok "render: $(cat "$T/render.err")"; exit 1; }
check "the rendered script parses (bash -n)" bash -n "$T/job.sbatch"
# The NODE= assignment, evaluated as the batch shell would.
NODE=$(bash -c "$(sed -n '/^NODE=\$(cat <</,/^)$/p' "$T/job.sbatch"); printf '%s' \"\$NODE\"")
check "the script defines the node script (NODE)" test -n "$NODE"

# The stand-in agent: counts its runs, checks the setup's environment, then does what
# $T/plan.<run> says (kill: SIGKILL itself; exit N; sleep: wait for a signal).
cat >"$T/agent" <<'SH'
#!/bin/bash
n=$(( $(cat "$T/runs" 2>/dev/null || echo 0) + 1 )); echo $n >"$T/runs"
echo "agent run $n FROM_SETUP=${FROM_SETUP:-unset}" >>"$T/agent.log"
what=$(cat "$T/plan.$n" 2>/dev/null || cat "$T/plan.default")
case "$what" in
  kill) kill -9 $$ ;;
  sleep) echo $$ >"$T/agent.pid"; exec sleep 30 ;;
  *) exit "$what" ;;
esac
SH
chmod +x "$T/agent"
export T COUNT="$T/setup.count"

listen() { python3 -c 'import socket,sys,time
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(64)
while True: c,_=s.accept(); c.close()' "$PORT" & LISTENER=$!; pids+=($LISTENER)
  for _ in $(seq 50); do (: >"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && return; sleep 0.1; done; }
unlisten() { kill "$LISTENER" 2>/dev/null; wait "$LISTENER" 2>/dev/null; }
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$T"' EXIT

# node NODEID PLAN...: runs the node script as srun would, plans per agent run; sets $rc.
node() {
  local id=$1; shift
  rm -f "$T"/plan.* "$T/runs" "$T/agent.log" "$COUNT"
  local i=1; for p in "$@"; do echo "$p" >"$T/plan.$i"; i=$((i + 1)); done
  echo "${@: -1}" >"$T/plan.default"
  env SLURM_NODEID="$id" SLURM_JOB_ID=4242 SLURM_LAUNCH_NODE_IPADDR=127.0.0.1 \
    bash -c "$NODE" dtrain-node "$T/agent" >"$T/node.out" 2>"$T/node.err"
  rc=$?
}
runs() { cat "$T/runs" 2>/dev/null || echo 0; }

listen
node 1 kill 0
check "node 1: its agent killed while the coordinator answers is started again; the task ends 0 (rc $rc, $(runs) runs)" \
  test "$rc" = 0 -a "$(runs)" = 2
contains "$T/node.err" "node 1: its agent ended with status 137 while the job runs on: starting a new agent for node 1 \(1 of 2\)" \
  "it says so on stderr"
check "the setup: lines ran once on the node, not once per agent" test "$(wc -l <"$COUNT")" = 1
check "their environment reached every agent" test "$(grep -c 'FROM_SETUP=yes' "$T/agent.log")" = 2
node 1 kill
check "at most max_restarts (2) new agents: 3 runs, then the task ends 137 (rc $rc, $(runs) runs)" \
  test "$rc" = 137 -a "$(runs)" = 3
node 0 kill 0
check "node 0's agent (the coordinator's) is never started again (rc $rc, $(runs) run)" test "$rc" = 137 -a "$(runs)" = 1
node 1 3 0
check "an agent that exits with a status (the job's) is not started again (rc $rc, $(runs) run)" test "$rc" = 3 -a "$(runs)" = 1

# SIGTERM to every process of the task (scancel, srun's stop): the agent is not started again.
rm -f "$T"/plan.* "$T/runs" "$T/agent.pid"; echo sleep >"$T/plan.default"
setsid env SLURM_NODEID=1 SLURM_JOB_ID=4242 SLURM_LAUNCH_NODE_IPADDR=127.0.0.1 \
  bash -c "$NODE" dtrain-node "$T/agent" >"$T/node.out" 2>"$T/node.err" &
task=$!; pids+=($task)
for _ in $(seq 50); do [ -s "$T/agent.pid" ] && break; sleep 0.1; done
kill -USR1 "$task"   # the requeue warning reaches the task's shell too: it must not end it
sleep 0.3
check "SIGUSR1 does not end the task's shell" kill -0 "$task"
kill -TERM -- -"$task"
wait "$task"; rc=$?
check "SIGTERM to the task's processes: it ends with the agent's 143, no new agent (rc $rc, $(runs) run)" \
  test "$rc" = 143 -a "$(runs)" = 1
unlisten

node 1 kill 0
check "the coordinator gone (the job ended): a killed agent is not started again (rc $rc, $(runs) run)" \
  test "$rc" = 137 -a "$(runs)" = 1

# An elastic job (nodes: 1:2, no restarts): a lost node leaves the job, its task ending 0.
sed 's/^nodes: 2$/nodes: 1:2/; s/^max_restarts: 2$/max_restarts: 0/' "$T/job.yaml" >"$T/el.yaml"
"$DTRAIN" render slurm "$T/el.yaml" >"$T/el.sbatch" || not_ok "render el.yaml"
NODE=$(bash -c "$(sed -n '/^NODE=\$(cat <</,/^)$/p' "$T/el.sbatch"); printf '%s' \"\$NODE\"")
listen
node 1 kill
check "elastic: node 1's lost agent is not started again (max_restarts 0) and its task ends 0 (rc $rc, $(runs) run)" \
  test "$rc" = 0 -a "$(runs)" = 1
contains "$T/node.err" "node 1: its agent was lost \(status 137\); the elastic job goes on without this node" "it says so"
node 0 kill
check "elastic: node 0's task ends with its agent's status (rc $rc)" test "$rc" = 137
node 1 5
check "elastic: an agent that exits with the job's status ends the task with it (rc $rc)" test "$rc" = 5
unlisten
node 1 kill
check "elastic: with the coordinator gone, a killed agent's task ends 137 (rc $rc)" test "$rc" = 137

# A failing setup line stops the node before its agent starts.
sed 's/^setup: .*/setup: [false, "echo never >>\\"$COUNT\\""]/' "$T/job.yaml" >"$T/bad.yaml"
"$DTRAIN" render slurm "$T/bad.yaml" >"$T/bad.sbatch"
NODE=$(bash -c "$(sed -n '/^NODE=\$(cat <</,/^)$/p' "$T/bad.sbatch"); printf '%s' \"\$NODE\"")
node 1 0
check "a failing setup line ends the node's task non-zero, its agent not started (rc $rc, $(runs) runs)" \
  test "$rc" != 0 -a "$(runs)" = 0 -a ! -e "$COUNT"
contains "$T/node.err" "dtrain: node 1: a setup line failed \(exit status 1\); its agent does not start" "it says so"
