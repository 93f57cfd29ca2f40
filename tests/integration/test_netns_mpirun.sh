# test_netns_mpirun.sh - `scheduler: mpirun` across two namespace hosts
# (scripts/netns-cluster.sh): `dtrain launch` in host 1 runs mpirun, which starts
# one `dtrain agent` per host, reaching host 2 through `netns-cluster.sh rsh`
# (its --mca plm_rsh_agent, standing in for ssh); the trainer, backend tcp,
# heartbeat_timeout 3 s.
#
#  - a healthy job across the hosts ends with 0;
#  - host 2 partitioned mid-run: node 0's agent names node 1 lost, and `dtrain
#    launch` ends with the job's status 1 in bounded time, although mpirun waits
#    for its daemon on host 2 (it is stopped heartbeat_timeout + grace + 10 s
#    after it said it aborts the job); nothing of the job is left on host 1, and
#    after host 2's agent has ended, its Open MPI daemon is ended too.
# Needs root and network namespaces; without them it fails with the reason.
. "$(dirname "$0")/lib.sh"

. "$(dirname "$0")/netns_lib.sh"
netns_up m 2
A1=$("$NC" addr 1) A2=$("$NC" addr 2)

job() { # steps
  cat <<EOF2
name: nm
scheduler: mpirun
nodes: 2
nproc_per_node: 1
backend: tcp
grace_period: 1s
trainer:
  model: {hidden: [16]}
  data: {batch_size: 32, workers: 1}
  steps: $1
  log_every_steps: 10
  scheduler: {type: constant}
  checkpoint: {every_steps: 0}
  eval: {every_epochs: 0}
mpirun:
  hosts: [$A1, $A2]
  interfaces: [eth0]
  allow_run_as_root: true
  extra_args: [--mca, plm_rsh_agent, "$NC rsh"]
rendezvous: {timeout: 10s, heartbeat_timeout: 3s, port: 29500}
EOF2
}

# --- healthy ---------------------------------------------------------------------
job 50 >"$T/ok.yaml"
expect_status 0 "a healthy job through mpirun across the two hosts" \
  "$NC" exec 1 timeout "$(limit_s 60)" "$DTRAIN" launch "$T/ok.yaml" --log-dir "$T/runs-ok"
contains "$(ls "$T"/runs-ok/nm-*/summary.json | head -n 1)" '"world_size": 2' "healthy: summary.json, world size 2"

# --- host 2 partitioned --------------------------------------------------------------
job 100000000 >"$T/long.yaml"
"$NC" exec 1 "$DTRAIN" launch "$T/long.yaml" --log-dir "$T/runs-cut" >"$T/cut.out" 2>"$T/cut.err" &
l=$!; pids+=($l)
for _ in $(seq 200); do [ -s "$(ls "$T"/runs-cut/nm-*/metrics.jsonl 2>/dev/null | head -n 1)" ] && break; sleep 0.1; done
t0=$(date +%s.%N)
"$NC" cut 2 both
# 3 s to notice, 1 s grace, the 14 s mpirun gets after its abort line, 1 s to SIGKILL, 6 s of margin.
for _ in $(seq 250); do kill -0 "$l" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$l" 2>/dev/null; then rc=hung; kill -9 "$l"; else wait "$l"; rc=$?; fi
took=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
check "cut: dtrain launch ends with the job's status 1 within 25 s (status $rc, ${took}s)" test "$rc" = 1
echo "# mpirun, host 2 partitioned: dtrain launch ended ${took}s after the cut"
s=$(ls "$T"/runs-cut/nm-*/summary.json 2>/dev/null | head -n 1)
contains "${s:-$T/none}" "\"lost_node\": \\{\"node\": 1, .*address $A2:[0-9]+.*stopped acknowledging" \
  "cut: summary.json names node 1 at $A2, stopped acknowledging"
contains "$T/cut.err" "mpirun had not ended 14 s after it aborted the job" "cut: the launcher says it stopped mpirun, and why"
check "cut: nothing of the job is left on host 1" test -z "$("$NC" pids 1)"
# Host 2's agent ends itself (lost coordinator); mpirun's daemon there (orted), which
# waits on a connection to mpirun that is never acknowledged, is ended by the watcher
# the agent left, heartbeat_timeout + grace + 10 s = 14 s after the agent's exit.
agents_gone() { ! pgrep -f "agent $T/[l]ong.yaml" >/dev/null; }
for _ in $(seq 50); do agents_gone && break; sleep 0.1; done
check "cut: no dtrain agent of the job is left on host 2" agents_gone
for _ in $(seq 100); do [ -z "$("$NC" pids 2)" ] && break; sleep 0.1; done
left=$("$NC" pids 2 | xargs -r ps -o comm= -p | tr '\n' ' ')
took=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
check "cut: nothing is left on host 2 either, Open MPI's daemon included (${took}s after the cut; left: ${left:-nothing})" \
  test -z "$left"
