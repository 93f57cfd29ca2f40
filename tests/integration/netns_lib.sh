# netns_lib.sh - the namespace hosts of the multi-host tests (sourced after
# lib.sh): `netns_up LETTER ARGS...` makes them with scripts/netns-cluster.sh
# (`up ARGS...`: the host count, then interfaces per host), under a tag of its
# own (LETTER plus this shell's pid) so two tests never share a name, removes
# them and kills every pid in `pids` at exit, and ends the test with one skip
# line naming the reason when the kernel refuses namespaces (status 77), or a
# failure for any other reason.  It also exports a job token the agents share.
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
    echo "ok - # SKIP network namespaces: $why"
    exit 0
  elif [ "$st" != 0 ]; then
    not_ok "netns-cluster.sh up failed (status $st): $why"
    exit 1
  fi
  DTRAIN_JOB_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
  export DTRAIN_JOB_TOKEN
}
