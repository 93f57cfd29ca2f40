# test_netns_links.sh - links that are bad but not dead, on two namespace hosts
# (scripts/netns-cluster.sh), one `dtrain agent` on each (the trainer, backend
# tcp, heartbeat_timeout 3 s): neither must be taken for a lost host.
#
#  - a slow link: host 2's link shaped to 4 Mbit/s both ways (tc tbf) for the
#    whole job; each step's all-reduce then takes ~0.1 s instead of ~1 ms;
#  - a flapping link: host 2's link down for 1.2 s twice during the job (TCP
#    retransmits 0.2, 0.6, 1.4 s after a loss, so it is used again 1.4 s
#    after the cut, within heartbeat_timeout).
# The slow job must end with status 0 on both hosts; the flapping one trains on
# after the flaps until SIGTERM ends it (143 on both); neither has a lost node or
# a rank declared hung.  Needs root and network namespaces; without them it fails
# with the reason.
. "$(dirname "$0")/lib.sh"

. "$(dirname "$0")/netns_lib.sh"
netns_up l 2
COORD="$("$NC" addr 1):29500"

job() { # steps
  cat <<EOF2
name: nl
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
  ddp: {desync_check_every: 0}
rendezvous: {timeout: 10s, heartbeat_timeout: 3s}
EOF2
}

# run TAG SPEC [WHILE...]: both agents; WHILE runs once rank 0 trains; sets rc0 rc1 took.
run() {
  local tag=$1 spec=$2 t0; shift 2
  t0=$(date +%s.%N)
  netns_agents "$tag" "$spec"
  if [ $# -gt 0 ]; then
    netns_trains "$tag"
    "$@"
  fi
  local guard=$(( $(date +%s) + 90 ))
  while kill -0 "$a0" 2>/dev/null || kill -0 "$a1" 2>/dev/null; do
    [ "$(date +%s)" -lt "$guard" ] || { kill -9 "$a0" "$a1" 2>/dev/null; break; }
    sleep 0.1
  done
  wait "$a0"; rc0=$?
  wait "$a1"; rc1=$?
  took=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
}

healthy() { # TAG STATUS SUMMARY-STATUS
  check "$1: both agents exit $2 ($rc0 $rc1, ${took}s)" test "$rc0 $rc1" = "$2 $2"
  local s; s=$(ls "$T/runs-$1"/nl-*/summary.json 2>/dev/null | head -n 1)
  contains "${s:-$T/none}" '"lost_node": null' "$1: no node was taken for lost"
  contains "${s:-$T/none}" "\"status\": \"$3\"" "$1: summary.json says $3"
  if grep -qE "hung|lost|stopped acknowledging" "$T/$1.0.err" "$T/$1.1.err"; then
    not_ok "$1: no rank declared hung, no host lost"; grep -hE "hung|lost|acknowledging" "$T/$1".*.err | sed 's/^/    /'
  else ok "$1: no rank declared hung, no host lost"; fi
  [ "$rc0 $rc1" = "$2 $2" ] || grep -hv '^\[rank' "$T/$1".*.err | tail -n 8 | sed 's/^/    /'
}

# --- a slow link: 4 Mbit/s -----------------------------------------------------------
job 40 >"$T/slow.yaml"
"$NC" slow 2 4mbit
check "host 2's link is shaped (tc tbf 4Mbit)" sh -c "'$NC' exec 2 tc qdisc show dev eth0 | grep -q 'tbf.*rate 4Mbit'"
run slow "$T/slow.yaml"
healthy slow 0 succeeded
echo "# slow link (4 Mbit/s both ways on host 2): 40 steps in ${took}s"
"$NC" fast 2

# --- a flapping link: down 1.2 s, twice ------------------------------------------------
# The job trains until it is stopped: after the flaps, once it has logged more
# steps, SIGTERM to node 0's agent ends it on both hosts with 143.  A stall shows
# in time_s, which counts the steps and the metrics rows' all-reduce; the spec
# turns off the desync check, whose all-reduce between steps time_s leaves out.
rows() { cat "$T"/runs-flap/nl-*/metrics.jsonl 2>/dev/null | wc -l; }
flap() {
  for _ in 1 2; do
    "$NC" cut 2 both; sleep 1.2; "$NC" heal 2; sleep 1.5
  done
  rows_then=$(rows)
  for _ in $(seq 100); do [ "$(rows)" -gt "$rows_then" ] && break; sleep 0.1; done
  rows_after=$(rows)
  kill -TERM "$a0"
}
job 100000000 >"$T/flap.yaml"
run flap "$T/flap.yaml" flap
check "flap: training went on after both flaps ($rows_then metrics rows then, $rows_after 10 s later at most)" \
  test "$rows_after" -gt "$rows_then"
healthy flap 143 interrupted
gap=$(sed -n 's/.*"time_s": \([0-9.]*\).*/\1/p' "$T"/runs-flap/nl-*/metrics.jsonl |
  awk 'NR > 1 && $1 - p > g { g = $1 - p } { p = $1 } END { printf "%.1f", g }')
check "flap: the flaps stalled training (longest gap between metrics rows ${gap}s, at least 1 s)" \
  awk -v g="$gap" 'BEGIN { exit !(g >= 1.0) }'
echo "# flap: link down 1.2 s twice; training stalled ${gap}s at most and went on"
