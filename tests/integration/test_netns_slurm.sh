# test_netns_slurm.sh - a real Slurm cluster over two namespace hosts (scripts/netns-cluster.sh):
# slurmctld and slurmd n1 on host 1, slurmd n2 on host 2, each slurmd in its host's network
# namespace only (nsenter --net: `ip netns exec` remounts /sys, which hides the cgroup
# hierarchy slurmd 22.05 needs: "No filesystem mounted on /sys/fs/cgroup"); auth/none, so
# the test neither needs nor disturbs munged; n1 and n2 resolve to the hosts' addresses
# through DTRAIN_HOSTS_FILE (the tasks keep the machine's /etc/hosts).
#
#  - `dtrain launch` (sbatch, in host 1) runs a 2-node job: node 1's rank runs on host 2's
#    address, the trainer over backend tcp ends with 0;
#  - host 2 cut off mid-run: node 0's agent ends the job within heartbeat_timeout + a margin,
#    summary.json names node 1 lost; Slurm then declares n2 down (SlurmdTimeout 5 s) and
#    requeues the batch job, as it does after any node failure, and `dtrain launch` says so;
#  - an elastic job (nodes: 1:2, --nodes=1-2 and --no-kill) loses host 2 mid-run: node 0's
#    agent goes on alone from the newest checkpoint, Slurm keeps the job (n2 down), and the
#    job ends with 0, `dtrain launch` too.
# Needs root, Slurm's daemons and nsenter (make test installs them; a missing one fails
# with its name); network namespaces the kernel refuses fail with the reason, as in every
# netns test.
# run-tests: uses slurm
. "$(dirname "$0")/lib.sh"

for b in slurmctld slurmd sbatch scontrol nsenter; do
  command -v "$b" >/dev/null 2>&1 || { not_ok "$b is not installed: make test installs it (scripts/install-deps.sh; apt-get install slurmctld slurmd slurm-client util-linux)"; exit 1; }
done
. "$(dirname "$0")/netns_lib.sh"
netns_up s 2
A1=$("$NC" addr 1) A2=$("$NC" addr 2)
D=$T/slurm
mkdir -p "$D/etc" "$D/state" "$D/run" "$D/log" "$D/spool/slurmd-n1" "$D/spool/slurmd-n2"
H=$(hostname -s)
{
  cat <<EOF
ClusterName=dtn
SlurmctldHost=$H($A1)
AuthType=auth/none
CredType=cred/none
EOF
  "$(dirname "$NC")/slurm-local.sh" conf-common "$D"
  cat <<EOF
SlurmdTimeout=5
MessageTimeout=3
KillWait=2
NodeName=n1 NodeHostname=$H NodeAddr=$A1 CPUs=4 RealMemory=10000 State=UNKNOWN
NodeName=n2 NodeHostname=$H NodeAddr=$A2 CPUs=4 RealMemory=10000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
} >"$D/etc/slurm.conf"
export SLURM_CONF=$D/etc/slurm.conf DTRAIN_HOSTS_FILE=/etc/netns/dtn-$DTN_TAG-1/hosts
"$NC" name 1 n1
"$NC" name 2 n2
"$NC" exec 1 slurmctld || not_ok "slurmctld starts in host 1 ($(tail -n 3 "$D/log/slurmctld.log"))"
for i in 1 2; do
  nsenter --net="/run/netns/dtn-$DTN_TAG-$i" slurmd -N "n$i" || not_ok "slurmd n$i starts in host $i"
done
for _ in $(seq 100); do
  s=$("$NC" exec 1 sinfo -h -N -o '%N %t' 2>/dev/null | tr '\n' ' ')
  case $s in *"n1 idle"*"n2 idle"*) break ;; esac
  sleep 0.1
done
check "n1 (host 1) and n2 (host 2) are idle ($s)" test "$s" = "n1 idle n2 idle "
cd "$T" || exit 1

job() { # name steps-or-command
  cat <<EOF2
name: $1
scheduler: slurm
nodes: 2
nproc_per_node: 1
backend: tcp
grace_period: 1s
$2
rendezvous: {timeout: 20s, heartbeat_timeout: 3s}
slurm: {time: "00:05:00"}
EOF2
}
trainer() { # steps
  printf 'trainer:\n  model: {hidden: [16]}\n  data: {batch_size: 32, workers: 1}\n  steps: %s\n  log_every_steps: 10\n' "$1"
  printf '  scheduler: {type: constant}\n  checkpoint: {every_steps: 0}\n  eval: {every_epochs: 0}\n'
}

# --- where the ranks run, and a 2-node trainer job ------------------------------------------
job where "command: [sh, -c, 'ip -o -4 addr show eth0 > \"\$DTRAIN_RUN_DIR/addr.\$RANK\"']" >where.yaml
expect_status 0 "a 2-node command job through sbatch across the hosts ends with 0" \
  "$NC" exec 1 timeout "$(limit_s 60)" "$DTRAIN" launch where.yaml
check "rank 1 ran on host 2 ($A2), rank 0 on host 1 ($A1)" \
  sh -c "grep -q ' $A2/' runs/where-*/addr.1 && grep -q ' $A1/' runs/where-*/addr.0"
job train "$(trainer 40)" >train.yaml
expect_status 0 "the trainer, 2 nodes over backend tcp, through Slurm across the hosts" \
  "$NC" exec 1 timeout "$(limit_s 60)" "$DTRAIN" launch train.yaml
contains "$T/last.err" "node 1 of 2, .*coordinator $A1:[0-9]+" "node 1's agent reached the coordinator at n1's address"
contains "$(ls runs/train-*/summary.json | head -n 1)" '"world_size": 2' "summary.json: world size 2"

# --- host 2 cut off mid-run ---------------------------------------------------------------------
job cut "$(trainer 100000000)" >cut.yaml
"$NC" exec 1 "$DTRAIN" launch cut.yaml >cut.out 2>cut.err &
l=$!; pids+=($l)
for _ in $(seq 300); do [ -s "$(ls runs/cut-*/metrics.jsonl 2>/dev/null | head -n 1)" ] && break; sleep 0.1; done
t0=$(date +%s.%N)
"$NC" cut 2 both
for _ in $(seq 100); do grep -q "job cut failed with exit status 1" cut.err && break; sleep 0.1; done
took=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
# 3 s to notice, 1 s grace, 3 s of margin
check "cut: node 0's agent ends the job with 1 within 7 s (${took}s)" \
  awk -v t="$took" -v n="$(grep -c 'job cut failed with exit status 1' cut.err)" 'BEGIN { exit !(n == 1 && t < 7) }'
echo "# slurm, host 2 partitioned: node 0's agent ended the job ${took}s after the cut"
contains "$(ls runs/cut-*/summary.json 2>/dev/null | head -n 1 || echo "$T/none")" \
  "\"lost_node\": \\{\"node\": 1, .*address $A2:[0-9]+.*stopped acknowledging" "cut: summary.json names node 1 at $A2"
for _ in $(seq 300); do grep -q "was requeued" cut.err && break; sleep 0.1; done
contains cut.err "Slurm job [0-9]+ was requeued" "cut: Slurm declares n2 down and requeues the batch job (SlurmdTimeout)"
kill -TERM "$l"; sleep 0.5; kill -TERM "$l" 2>/dev/null # scancel, then stop waiting
wait "$l"
check "cut: no dtrain process is left on host 1" \
  sh -c "! '$NC' pids 1 | xargs -r ps -o comm= -p | grep -q dtrain"

# --- an elastic job loses host 2 ---------------------------------------------------------------
"$NC" heal 2
"$NC" exec 1 scontrol update nodename=n2 state=resume 2>/dev/null
for _ in $(seq 300); do
  s=$("$NC" exec 1 sinfo -h -N -o '%N %t' 2>/dev/null | tr '\n' ' ')
  [ -z "$("$NC" exec 1 squeue -h -o %i 2>/dev/null)" ] && [ "$s" = "n1 idle n2 idle " ] && break
  sleep 0.1
done
check "n2 is back and idle for the elastic job ($s)" test "$s" = "n1 idle n2 idle "
{ job shrink "$(trainer 4000 | sed 's/checkpoint: {every_steps: 0}/checkpoint: {every_steps: 100, dir: checkpoints}/')" |
    sed 's/^nodes: 2$/nodes: 1:2/; s/^slurm: .*/slurm: {time: "00:05:00", extra_sbatch: ["--nodelist=n[1-2]"]}/'
  echo "max_restarts: 0"; } >shrink.yaml
sed -i 's/^rendezvous: {timeout: 20s, heartbeat_timeout: 3s}$/rendezvous: {timeout: 20s, heartbeat_timeout: 3s, last_call_timeout: 2s}/' shrink.yaml
"$NC" exec 1 timeout "$(limit_s 240)" "$DTRAIN" launch shrink.yaml >shrink.out 2>shrink.err &
l=$!; pids+=($l)
for _ in $(seq 600); do grep -q '"step": [1-9][0-9][0-9]' "$(ls runs/shrink-*/metrics.jsonl 2>/dev/null | head -n 1)" 2>/dev/null && break; sleep 0.1; done
contains shrink.err "Slurm job [0-9]+ is running on n\[1-2\]" "elastic: the job runs on both hosts"
"$NC" cut 2 both
wait "$l"; rc=$?
check "elastic: host 2 lost mid-run, the job goes on with node 0 alone and ends with 0 (launch exit $rc)" test "$rc" = 0
contains "$(ls runs/shrink-*/trainer_summary.json 2>/dev/null | head -n 1 || echo "$T/none")" '"steps": 4000' \
  "elastic: the training reached its last step"
contains "$(ls runs/shrink-*/summary.json 2>/dev/null | head -n 1 || echo "$T/none")" '"membership_changes": [1-9]' \
  "elastic: summary.json counts the membership change"
"$NC" heal 2
