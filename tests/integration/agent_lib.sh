# agent_lib.sh - what the suites that run several `dtrain agent` on loopback share (sourced
# after lib.sh): one job token for all their agents, agents started in the background and
# killed at exit (a SIGSTOPped one is continued first, so the kill lands), their statuses.
export DTRAIN_JOB_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; done
  rm -rf "$T"
}
trap cleanup EXIT

wait_for() { # seconds command...: until the command succeeds, or 1 after that many seconds
  local end=$((SECONDS + $1)); shift
  until "$@"; do [ $SECONDS -ge $end ] && return 1; sleep 0.2; done
}

# bg_agent TAG LOG_DIR SPEC ARGS...: `dtrain agent SPEC ARGS... --log-dir LOG_DIR` in the
# background; its output in $T/TAG.{out,err}, its pid in $T/TAG.pid, its status in $T/TAG.rc.
bg_agent() {
  local tag=$1 log_dir=$2 spec=$3; shift 3
  ( "$DTRAIN" agent "$spec" "$@" --log-dir "$log_dir" >"$T/$tag.out" 2>"$T/$tag.err" &
    echo $! >"$T/$tag.pid"; wait $!; echo $? >"$T/$tag.rc" ) 2>/dev/null &
  pids+=($!)
  wait_for 5 test -s "$T/$tag.pid"
  pids+=($(cat "$T/$tag.pid"))
}
rc_of() { cat "$T/$1.rc" 2>/dev/null || echo none; } # TAG: the agent's exit status, or "none" yet
