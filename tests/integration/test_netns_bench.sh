# test_netns_bench.sh - `dtrain bench allreduce` between two namespace hosts
# (scripts/netns-cluster.sh), two ways in the same run:
#
#  - dtrain's tcp communicator: one `dtrain agent` per host, the bench as the
#    job's command;
#  - Open MPI's tcp btl: `dtrain launch` of a `scheduler: mpirun`, `backend: mpi`
#    job inside host 1, mpirun reaching host 2 through `netns-cluster.sh rsh`
#    (its --mca plm_rsh_agent, standing in for ssh).
# Each prints the nccl-tests table with every value right; both average bus
# bandwidths are printed ("# busbw ...") for docs/multinode.md.
# Needs root and network namespaces; without them it fails with the reason.
. "$(dirname "$0")/lib.sh"

. "$(dirname "$0")/netns_lib.sh"
netns_up b 2
A1=$("$NC" addr 1) A2=$("$NC" addr 2)
SIZES='-b, 1M, -e, 16M, -f, "4"'

# table FILE WHAT: FILE holds rank 0's nccl-tests table, 3 rows, no wrong value.
table() {
  contains "$1" '#       size         count      type   redop    root     time   algbw   busbw  #wrong' "$2: the nccl-tests header"
  check "$2: three rows (1, 4, 16 MiB), no wrong value" \
    test "$(grep -cE '^(\[rank 0\] )? +(1048576|4194304|16777216) +[0-9]+ +float +sum +-1 .* 0 *$' "$1")" = 3
  contains "$1" "# Out of bounds values : 0 OK" "$2: every value right"
}
busbw() { sed -n 's/.*# Avg bus bandwidth *: *\([0-9.]*\).*/\1/p' "$1" | head -n 1; }

# --- dtrain's tcp communicator, one agent per host ---------------------------------
cat >"$T/tcp.yaml" <<EOF2
name: nb
nodes: 2
nproc_per_node: 1
command: [$DTRAIN, bench, allreduce, $SIZES, --backend, tcp]
rendezvous: {timeout: 20s}
EOF2
"$NC" exec 2 "$DTRAIN" agent "$T/tcp.yaml" --node-rank 1 --nnodes 2 --coordinator "$A1:29500" \
  --log-dir "$T/runs" >"$T/tcp.1.out" 2>"$T/tcp.1.err" &
a1=$!; pids+=($a1)
"$NC" exec 1 timeout "$(limit_s 90)" "$DTRAIN" agent "$T/tcp.yaml" --node-rank 0 --nnodes 2 \
  --coordinator "$A1:29500" --log-dir "$T/runs" >"$T/tcp.0.out" 2>"$T/tcp.0.err"
rc0=$?
wait "$a1"; rc1=$?
check "tcp: both agents exit 0 ($rc0 $rc1)" test "$rc0$rc1" = 00
[ "$rc0$rc1" = 00 ] || tail -n 12 "$T/tcp.0.err" "$T/tcp.1.err" | sed 's/^/    /'
table "$T/tcp.0.out" tcp
contains "$T/tcp.0.out" "Rank  1 Group  0 Pid +[0-9]+ on .*CPU \(tcp\)" "tcp: rank 1 ran on the tcp backend"

# --- Open MPI's tcp btl, mpirun across the hosts ------------------------------------
# The rsh agent notes where mpirun sends its daemons.
printf '#!/bin/sh\necho "$*" >>"%s/rsh.log"\nexec "%s" rsh "$@"\n' "$T" "$NC" >"$T/rsh"
chmod +x "$T/rsh"
cat >"$T/mpi.yaml" <<EOF2
name: nbm
scheduler: mpirun
nodes: 2
nproc_per_node: 1
backend: mpi
command: [$DTRAIN, bench, allreduce, $SIZES, --backend, mpi]
mpirun:
  hosts: [$A1, $A2]
  interfaces: [eth0]
  allow_run_as_root: true
  extra_args: [--mca, plm_rsh_agent, "$T/rsh", --mca, btl, "tcp,self"]
rendezvous: {timeout: 20s}
EOF2
expect_status 0 "mpi: dtrain launch runs mpirun across the two hosts" \
  "$NC" exec 1 timeout "$(limit_s 90)" "$DTRAIN" launch "$T/mpi.yaml" --log-dir "$T/runs"
cp "$T/last.out" "$T/mpi.out"
table "$T/mpi.out" mpi
contains "$T/mpi.out" "Rank  1 Group  0 Pid +[0-9]+ on .*CPU \(mpi\)" "mpi: rank 1 ran on Open MPI"
contains "$T/rsh.log" "^$A2 .*orted" "mpi: mpirun started its daemon on host 2 ($A2) through the rsh agent"
echo "# busbw between two namespace hosts, 1-16 MiB, 2 ranks: dtrain tcp $(busbw "$T/tcp.0.out") GB/s, Open MPI tcp btl $(busbw "$T/mpi.out") GB/s"
check "nothing is left running in either host" test -z "$("$NC" pids)"
