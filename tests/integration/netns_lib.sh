# netns_lib.sh - the namespace hosts of the multi-host tests (sourced after
# lib.sh): `netns_up LETTER ARGS...` makes them with scripts/netns-cluster.sh
# (`up ARGS...`: the host count, then interfaces per host), under a tag of its
# own (LETTER plus this shell's pid) so two tests never share a name, removes
# them and kills every pid in `pids` at exit, and ends the test with a failure
# naming the reason when they cannot be made: `make test` runs as root (CI
# too), so namespaces the kernel refuses (status 77) are a failure as well,
# never a skip.  It also exports a job token the agents share,
# and starts a two-node job's agents (netns_agents) and waits for it to train
# (netns_trains).
NC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/scripts/netns-cluster.sh
pids=()

netns_cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  "$NC" down >/dev/null 2>&1
  rm -rf "$T"
}

netns_up() { # LETTER ARGS...
  export DTN_TAG="$1$(($$ % 100000))"
  shift
  trap netns_cleanup EXIT
  local why st
  why=$("$NC" up "$@" 2>&1); st=$?
  if [ "$st" = 77 ]; then
    not_ok "network namespaces can be made here (make test runs as root): $why"
    exit 1
  elif [ "$st" != 0 ]; then
    not_ok "netns-cluster.sh up failed (status $st): $why"
    exit 1
  fi
  DTRAIN_JOB_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
  export DTRAIN_JOB_TOKEN
}

# netns_agents TAG SPEC [NAME=value...]: the job's two agents in the background,
# node 0 on host 1 (hosting the coordinator at $COORD) and node 1 on host 2,
# with the given environment; output in $T/TAG.{0,1}.{out,err}, run
# directories under $T/runs-TAG; sets a0 and a1 (and adds them to pids).
netns_agents() {
  local tag=$1 spec=$2 n
  shift 2
  for n in 0 1; do
    "$NC" exec $((n + 1)) env "$@" "$DTRAIN" agent "$spec" --node-rank "$n" --nnodes 2 --coordinator "$COORD" \
      --log-dir "$T/runs-$tag" >"$T/$tag.$n.out" 2>"$T/$tag.$n.err" &
    pids+=($!)
  done
  a0=${pids[-2]} a1=${pids[-1]}
}

# netns_trains TAG: waits (20 s at most) for the first metrics row of the run
# under $T/runs-TAG, i.e. until rank 0 trains; fails at once when node 0's
# agent ($a0) has ended.
netns_trains() {
  local _
  for _ in $(seq 200); do
    [ -s "$(ls "$T/runs-$1"/*/metrics.jsonl 2>/dev/null | head -n 1)" ] && return 0
    kill -0 "$a0" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# netns_statuses TAG WHAT WANT0 WANT1: ok when the two agents of run TAG ended
# with those statuses ($rc0 $rc1); else not ok with the end of both agents'
# stderr, so a failure that comes once in many runs says why.
netns_statuses() {
  local tag=$1 what=$2 n
  if [ "$rc0 $rc1" = "$3 $4" ]; then
    ok "$what ($rc0 $rc1)"
    return
  fi
  not_ok "$what ($rc0 $rc1, wanted $3 $4)"
  for n in 0 1; do
    echo "    node $n's agent, last lines of its stderr:"
    tail -n 15 "$T/$tag.$n.err" | sed 's/^/      /'
  done
}
