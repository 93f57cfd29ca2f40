# test_netns_ifaces.sh - two namespace hosts with two interfaces each
# (scripts/netns-cluster.sh up 2 2: eth0 on 10.201.S.0/24, eth1 on 10.202.S.0/24),
# the coordinator on eth0's network: which address the tcp ranks use.
#
#  - by default, the address of the route to the coordinator (eth0's), not 127.0.0.1;
#  - with GLOO_SOCKET_IFNAME=eth1 (in the spec's env:, as for PyTorch's Gloo) the
#    ranks' mesh runs on eth1's network while the agents stay on eth0's;
#  - a name no interface has fails the ranks with the interfaces there are;
#  - comm.interfaces: [eth1] in the spec does what GLOO_SOCKET_IFNAME=eth1 does (the
#    agent sets it, and NCCL_SOCKET_IFNAME, for the ranks); the same variable in an
#    agent's environment with another value fails the agents, naming both; under
#    scheduler: mpirun node 0 advertises eth1's address, so the agents and the
#    store run on eth1's network too.
# Needs root and network namespaces; without them it fails with the reason.
. "$(dirname "$0")/lib.sh"

. "$(dirname "$0")/netns_lib.sh"
netns_up i 2 2
A1=$("$NC" addr 1 1) A2=$("$NC" addr 2 1) B1=$("$NC" addr 1 2) B2=$("$NC" addr 2 2)
COORD="$A1:29500"
AGENT_ENV=   # NAME=value words both agents run with

job() { # env-line
  cat <<EOF2
name: ni
nodes: 2
nproc_per_node: 1
backend: tcp
grace_period: 1s
$1
trainer:
  model: {hidden: [16]}
  data: {batch_size: 32, workers: 1}
  steps: 100000000
  log_every_steps: 10
  scheduler: {type: constant}
  checkpoint: {every_steps: 0}
  eval: {every_epochs: 0}
rendezvous: {timeout: 10s, heartbeat_timeout: 3s}
EOF2
}

# run TAG SPEC: both agents; once rank 0 trains (or both ended), host 2's
# established TCP connections go to $T/TAG.ss; then SIGTERM ends the job.
run() {
  local tag=$1 spec=$2
  # shellcheck disable=SC2086  # AGENT_ENV is a word list
  netns_agents "$tag" "$spec" $AGENT_ENV
  netns_trains "$tag"
  "$NC" exec 2 ss -Htn state established >"$T/$tag.ss"
  kill -TERM "$a0" 2>/dev/null
  wait "$a0"; rc0=$?
  wait "$a1"; rc1=$?
}

# mesh FILE ADDR: host 2 has a connection to ADDR on a port other than the coordinator's.
mesh() { awk -v a="$2" '{ split($4, p, ":"); if (p[1] == a && p[2] != 29500) n++ } END { exit !n }' "$1"; }

# --- by default: the route to the coordinator ----------------------------------
job "" >"$T/plain.yaml"
run plain "$T/plain.yaml"
netns_statuses plain "default: the job trained until SIGTERM" 143 143
check "default: the ranks' mesh runs on eth0's network ($A2 -> $A1), the coordinator's" mesh "$T/plain.ss" "$A1"
if grep -q "127\.0\.0\.1" "$T/plain.ss"; then not_ok "default: no connection of host 2 is to 127.0.0.1"
else ok "default: no connection of host 2 is to 127.0.0.1"; fi

# --- GLOO_SOCKET_IFNAME=eth1 ------------------------------------------------------
job "env: {GLOO_SOCKET_IFNAME: eth1}" >"$T/eth1.yaml"
run eth1 "$T/eth1.yaml"
netns_statuses eth1 "eth1: the job trained until SIGTERM" 143 143
check "eth1: the ranks' mesh runs on eth1's network ($B2 -> $B1)" mesh "$T/eth1.ss" "$B1"
if mesh "$T/eth1.ss" "$A1"; then not_ok "eth1: no mesh connection on eth0's network"; sed 's/^/    /' "$T/eth1.ss"
else ok "eth1: no mesh connection on eth0's network"; fi
contains "$T/eth1.ss" "$A2:[0-9]+ +$A1:29500" "eth1: the agents and the store stay on eth0's network (the coordinator)"

# --- a name no interface has --------------------------------------------------------
job "env: {GLOO_SOCKET_IFNAME: nosuch}" >"$T/bad.yaml"
run bad "$T/bad.yaml"
check "nosuch: both agents fail ($rc0 $rc1)" test "$rc0" != 0 -a "$rc1" != 0 -a "$rc0" != 143
cat "$T"/runs-bad/ni-*/attempt_0/rank_*.err >"$T/bad.ranks" 2>/dev/null
contains "$T/bad.ranks" "GLOO_SOCKET_IFNAME=nosuch names no interface with an IPv4 address on this host \(those with one: lo, eth0, eth1\)" \
  "nosuch: the ranks say which variable, and the interfaces there are"

# --- comm.interfaces: [eth1] ------------------------------------------------------
job "comm: {interfaces: [eth1]}" >"$T/ci.yaml"
run ci "$T/ci.yaml"
netns_statuses ci "comm.interfaces: the job trained until SIGTERM" 143 143
check "comm.interfaces: the ranks' mesh runs on eth1's network ($B2 -> $B1)" mesh "$T/ci.ss" "$B1"
if mesh "$T/ci.ss" "$A1"; then not_ok "comm.interfaces: no mesh connection on eth0's network"; sed 's/^/    /' "$T/ci.ss"
else ok "comm.interfaces: no mesh connection on eth0's network"; fi
contains "$T/ci.ss" "$A2:[0-9]+ +$A1:29500" "comm.interfaces: the agents and the store stay on --coordinator's network"

# --- comm.interfaces against a variable that says otherwise -------------------------------
AGENT_ENV="GLOO_SOCKET_IFNAME=eth0"
run cidis "$T/ci.yaml"
AGENT_ENV=
check "disagreeing GLOO_SOCKET_IFNAME: both agents fail ($rc0 $rc1)" test "$rc0" != 0 -a "$rc1" != 0 -a "$rc0" != 143
contains "$T/cidis.1.err" "comm.interfaces is \[eth1\] but this agent's environment has GLOO_SOCKET_IFNAME=eth0" \
  "disagreeing GLOO_SOCKET_IFNAME: the agent names the key and the variable"
AGENT_ENV="NCCL_SOCKET_IFNAME==eth1 GLOO_SOCKET_IFNAME=eth1"
run ciagree "$T/ci.yaml"
AGENT_ENV=
netns_statuses ciagree "agreeing NCCL_SOCKET_IFNAME (=eth1) and GLOO_SOCKET_IFNAME: the job trains" 143 143

# --- scheduler: mpirun: node 0 advertises comm.interfaces' address ----------------------------
cat >"$T/mpi.yaml" <<EOF2
name: ni
scheduler: mpirun
nodes: 2
nproc_per_node: 1
backend: tcp
grace_period: 1s
comm: {interfaces: [eth1]}
command: [sh, -c, 'ss -Htn state established > "\$DTRAIN_RUN_DIR/ss.\$RANK"; echo "\$MASTER_ADDR \$DTRAIN_COORD_HOST \$GLOO_SOCKET_IFNAME \$NCCL_SOCKET_IFNAME" > "\$DTRAIN_RUN_DIR/env.\$RANK"']
mpirun:
  hosts: [$A1, $A2]
  allow_run_as_root: true
  extra_args: [--mca, plm_rsh_agent, "$NC rsh"]
rendezvous: {timeout: 10s, heartbeat_timeout: 3s, port: 29500}
EOF2
expect_status 0 "mpirun with comm.interfaces [eth1]: the job ends with 0" \
  "$NC" exec 1 timeout "$(limit_s 60)" "$DTRAIN" launch "$T/mpi.yaml" --log-dir "$T/runs-mpi"
# Rank 1 runs on host 2, in host 2's run directory (the same path: one file system here).
contains "$(ls "$T"/runs-mpi/ni-*/env.1 2>/dev/null | head -n 1 || echo "$T/none")" "^127\.0\.0\.1 $B1 eth1 =eth1\$" \
  "mpirun: the ranks get their node's store endpoint (MASTER_ADDR 127.0.0.1), DTRAIN_COORD_HOST $B1 (node 0's eth1), GLOO_SOCKET_IFNAME eth1, NCCL_SOCKET_IFNAME =eth1"
contains "$(ls "$T"/runs-mpi/ni-*/ss.1 2>/dev/null | head -n 1 || echo "$T/none")" "$B2:[0-9]+ +$B1:29500" \
  "mpirun: host 2's agent and rank reach the coordinator on eth1's network ($B2 -> $B1:29500)"
