# test_launch_signals.sh - SIGINT (Ctrl-C) and SIGTERM to `dtrain launch` are
# passed on to the ranks and, within 5 s, no process of the job is left:
# ranks, their children in the rank's process group, children that moved to
# a session of their own, and processes the ranks left behind when they exited.
# Each job carries a unique marker in its environment; /proc tells what is left.
. "$(dirname "$0")/lib.sh"

marker_pids() { grep -lsa "DTRAIN_TEST_MARKER=$1" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3; }

# wait_for N MARKER: until N processes carry the marker (5 s at most).
wait_for() {
  for _ in $(seq 100); do
    [ "$(marker_pids "$2" | wc -l)" -ge "$1" ] && return 0
    sleep 0.05
  done
  return 1
}

# gone_within SECONDS MARKER: until no process carries the marker.
gone_within() {
  local deadline=$(( $(date +%s%N) + $1 * 1000000000 ))
  while [ "$(date +%s%N)" -lt "$deadline" ]; do
    [ -z "$(marker_pids "$2")" ] && return 0
    sleep 0.05
  done
  echo "    left behind:"; for p in $(marker_pids "$2"); do echo "    $p $(tr '\0' ' ' </proc/$p/cmdline)"; done
  return 1
}

# A rank that starts a child in its group, one in a new session, and a
# grandchild below that; it ignores nothing, so SIGINT ends it.  Rank 1 also
# traps SIGTERM and SIGINT and keeps running: only SIGKILL ends it.
spec() {
  cat >"$T/$1.yaml" <<EOF
name: $1
scheduler: local
nproc_per_node: 3
log_dir: $T/runs
env: {DTRAIN_TEST_MARKER: "$2"}
command: [bash, -c, 'sleep 300 & setsid bash -c "sleep 301 & wait" & if [ \$RANK = 1 ]; then trap "" TERM INT; fi; echo ready; while :; do sleep 0.1; done']
EOF
}

for sig in INT TERM; do
  m="sig$sig-$$-$RANDOM"
  name=$(echo "job-$sig" | tr A-Z a-z)
  spec "$name" "$m"
  "$DTRAIN" launch --grace-period 2 "$T/$name.yaml" >"$T/$sig.out" 2>"$T/$sig.err" &
  pid=$!
  # 3 ranks x (bash, sleep 300, setsid bash, sleep 301, loop sleep) = at least 12 processes
  check "SIG$sig: the job and its grandchildren are running" wait_for 12 "$m"
  start=$(date +%s%N)
  kill -"$sig" "$pid"
  check "SIG$sig: no process of the job is left within 5 s (grandchildren included)" gone_within 5 "$m"
  wait "$pid"; status=$?
  elapsed=$(( ($(date +%s%N) - start) / 1000000 ))
  want=$(( 128 + $(kill -l "$sig") ))
  check "SIG$sig: the launcher exits with 128+SIG$sig ($want, got $status)" test "$status" = "$want"
  check "SIG$sig: the launcher itself ended within 5 s (${elapsed} ms)" test "$elapsed" -lt 5000
  contains "$T/$sig.err" "received SIG$sig: passing it on" "SIG$sig: the launcher says it passes the signal on"
  rd=$(ls -d "$T"/runs/"$name"-*)
  check "SIG$sig: summary.json says interrupted by SIG$sig" test \
    "$(python3 -c "import json; d=json.load(open('$rd/summary.json')); print(d['status'], d['interrupted_by'], d['n_attempts'])")" \
    = "interrupted SIG$sig 1"
  check "SIG$sig: the rank that ignored the signal was killed with SIGKILL" test \
    "$(python3 -c "import json; d=json.load(open('$rd/summary.json')); print(d['attempts'][0]['ranks'][1]['signal'])")" = SIGKILL
done

# Ctrl-C twice: the second one kills at once, without waiting for the grace period.
m="twice-$$-$RANDOM"
spec twice "$m"
"$DTRAIN" launch --grace-period 30 "$T/twice.yaml" >"$T/twice.out" 2>"$T/twice.err" &
pid=$!
check "Ctrl-C twice: the job is running" wait_for 12 "$m"
kill -INT "$pid"; sleep 0.3; kill -INT "$pid"
check "Ctrl-C twice: everything is gone within 2 s although the grace period is 30 s" gone_within 2 "$m"
wait "$pid"
contains "$T/twice.err" "killing every process of the job now" "Ctrl-C twice: the launcher says it kills now"

# The launcher killed outright (SIGKILL cannot be caught): PR_SET_PDEATHSIG still
# takes the ranks down; what they started outside their own life is out of reach
# of a dead launcher, so only the ranks are checked here.
m="kill9-$$-$RANDOM"
cat >"$T/kill9.yaml" <<EOF
name: kill9
scheduler: local
nproc_per_node: 2
log_dir: $T/runs
env: {DTRAIN_TEST_MARKER: "$m"}
command: [sleep, "300"]
EOF
"$DTRAIN" launch "$T/kill9.yaml" >/dev/null 2>&1 &
pid=$!
check "SIGKILL to the launcher: ranks are running" wait_for 2 "$m"
kill -KILL "$pid"
check "SIGKILL to the launcher: the ranks die with it (PR_SET_PDEATHSIG)" gone_within 5 "$m"
wait "$pid" 2>/dev/null

# A rank that exits 0 and leaves a child running: the launcher stops it and says so.
m="left-$$-$RANDOM"
cat >"$T/left.yaml" <<EOF
name: left
scheduler: local
nproc_per_node: 2
log_dir: $T/runs
env: {DTRAIN_TEST_MARKER: "$m"}
command: [bash, -c, 'setsid sleep 300 & sleep 300 & exit 0']
EOF
expect_status 0 "ranks that exit 0 leaving children behind: success" "$DTRAIN" launch "$T/left.yaml"
check "what they left behind is gone" gone_within 1 "$m"
contains "$T/last.err" "the ranks left 4 processes running; stopping them" "the launcher says it stopped leftovers"
