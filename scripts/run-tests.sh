#!/usr/bin/env bash
# run-tests.sh - runs every suite, several side by side, and closes with one
# "N passed, N failed, N skipped" line.
#
#   DTRAIN=path/to/dtrain BUILD=build scripts/run-tests.sh [filter...]
# Filters (substrings of a test file name) run only the suites matching one.
#
# Counting.  Unit suites (named test_NAME) are the cmocka binaries
# $BUILD/tests/test_*: their "[  PASSED  ] N", "[  FAILED  ] N" and
# "[  SKIPPED ] N" summary lines are summed (a binary that dies before its
# summary counts as one failure).  Integration suites (named test_NAME.sh) are
# tests/integration/test_*.sh, printing TAP-style lines: "ok - ..." passed,
# "ok - # SKIP ..." skipped, "not ok - ..." failed; a script that exits non-zero
# without a "not ok" line, or checks nothing, counts as one failure.  Only what
# cannot be here (a GPU) may skip: what `make test` installs or needs (network
# namespaces as root, Slurm, MPI, PyTorch) fails with the reason when missing.
#
# Side by side.  DTRAIN_TEST_JOBS suites (default: nproc + 1) run at once, each in
# a slot 1..JOBS.  A suite's output goes to a file and is printed in one piece
# when it ends.  Each suite has its own scratch directory (lib.sh's $T, and
# TMPDIR), and its slot's slice of the test ports 10000-16999
# (DTRAIN_TEST_PORTS=LO-HI, which lib.sh's free_port draws from), so two suites
# never pick the same port in the moment before one binds it.  A suite that
# cannot share the machine with some other says what it holds in one header
# line of its script (a unit suite: a comment in tests/unit/NAME.c):
#     # run-tests: uses slurm port29500
# Suites naming the same resource never run at the same time; `alone` means
# nothing else runs beside it.  Those of the machine (all but `make` and
# `alone`) are also held with flock on /tmp/dtrain-tests-RESOURCE.lock while
# the suite runs, so two runs of run-tests from different trees (a team on one
# machine) take turns as well.  The resources:
#   slurm      the local Slurm cluster (scripts/slurm-local.sh), and Slurm
#              daemons named n1, n2 on this machine (test_netns_slurm's)
#   port29500  127.0.0.1:29500, torchrun's and Kubernetes' default coordinator port
#   make       a make in this source tree (two would race on the same targets)
#   alone      every core (no suite needs it today; test_fuzz did, and now shares)
# The network-namespace suites need no lock: each cluster's namespaces, bridges
# and veths carry the suite's own tag (netns_lib.sh), and its addresses live
# only inside its namespaces.
#
# Order: longest first, by the seconds each suite took last time
# ($BUILD/run-tests.times, rewritten after every run), else by
# tests/run-tests.times (a 2-core machine's figures, for a fresh clone); a
# suite in neither starts first; `alone` suites start before everything.
#
# The end: "run-tests: N s", the ten slowest suites, the failing suites, and
# last "N passed, N failed, N skipped"; the exit status is non-zero when
# anything failed or nothing passed.  DTRAIN_TEST_TIMEOUT (600 s) bounds each suite.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

: "${BUILD:=$PWD/build}"
: "${DTRAIN:=$PWD/bin/dtrain}"
: "${DTRAIN_TEST_TIMEOUT:=600}"
# One suite more than cores: suites spend much of their time waiting (a heartbeat timeout, a
# restart's backoff, a rendezvous), and on CI's 2 cores a third one used that idle time (508 s
# against 584 s for the whole suite, with CPU idle 16% of the run still).
: "${DTRAIN_TEST_JOBS:=$(($(nproc) + 1))}"
export DTRAIN BUILD
# The Python peers and oracles live in the venv scripts/install-deps.sh made.
[ -x "$PWD/.venv/bin/python3" ] && export PATH="$PWD/.venv/bin:$PATH"
filters=("$@")
JOBS=$DTRAIN_TEST_JOBS
PORT_LO=10000 PORT_HI=16999 # below slurm-local.sh's slurmd ports (17001..) and the Slurm adapter's (20000..)
case $JOBS in '' | *[!0-9]* | 0) echo "run-tests: DTRAIN_TEST_JOBS '$JOBS' must be a positive number" >&2; exit 2 ;; esac
[ $(((PORT_HI - PORT_LO + 1) / JOBS)) -ge 50 ] ||
  { echo "run-tests: DTRAIN_TEST_JOBS $JOBS leaves fewer than 50 ports per suite" >&2; exit 2; }

OUT=$(mktemp -d /tmp/dtrain-run-tests.XXXXXX)
declare -A job_name job_slot job_res job_t0 job_kind held est res_of
free_slots=()
for ((s = 1; s <= JOBS; s++)); do free_slots+=("$s"); done
passed=0 failed=0 skipped=0 running=0
failed_names=()
times=() # "seconds name" of each suite that ran

stop_all() {
  local p
  echo "run-tests: stopped by a signal while these ran: ${job_name[*]:-none}"
  for p in "${!job_name[@]}"; do kill -TERM "$p" 2>/dev/null; done
  wait
  rm -rf "$OUT"
  exit 130
}
trap stop_all INT TERM
trap 'rm -rf "$OUT"' EXIT

# ---- what each suite holds, and how long it took last time ----

# resources KIND PATH: the words of the suite's "run-tests: uses" line.
resources() {
  local src=$2
  [ "$1" = unit ] && src=tests/unit/$(basename "$2").c
  [ -f "$src" ] || return 0
  grep -m1 -o 'run-tests: uses [a-z0-9 ]*' "$src" | cut -d' ' -f3-
}

load_times() {
  local n s
  [ -f "$1" ] || return 0
  while read -r n s; do est[$n]=$s; done <"$1"
}
load_times tests/run-tests.times
load_times "$BUILD/run-tests.times"

wanted() { # PATH: whether a filter matches it (any, without filters)
  local f
  [ ${#filters[@]} -eq 0 ] && return 0
  for f in "${filters[@]}"; do [[ $1 == *"$f"* ]] && return 0; done
  return 1
}

# Every suite as "KIND:PATH", and what it holds.
suites=()
for bin in "$BUILD"/tests/test_*; do
  [ -x "$bin" ] && [ -f "$bin" ] && wanted "$bin" && suites+=("unit:$bin")
done
for script in tests/integration/test_*.sh; do
  [ -f "$script" ] && wanted "$script" && suites+=("integration:$script")
done
for entry in "${suites[@]}"; do res_of[$entry]=$(resources "${entry%%:*}" "${entry#*:}"); done
# Alone ones first, then by last time's seconds, longest first (unknown ones first of those).
pending=()
while read -r _ entry; do pending+=("$entry"); done < <(
  for entry in "${suites[@]}"; do
    name=$(basename "${entry#*:}")
    if [[ " ${res_of[$entry]} " == *" alone "* ]]; then key=999999
    else key=${est[$name]:-99999}; fi
    echo "$key $entry"
  done | sort -k1,1nr -s
)

# ---- scheduling ----

can_start() { # resources...
  local r
  [ -z "${held[alone]:-}" ] || return 1
  for r in "$@"; do
    [ "$r" = alone ] && [ "$running" -gt 0 ] && return 1
    [ -z "${held[$r]:-}" ] || return 1
  done
  return 0
}

start() { # KIND:PATH RESOURCES
  local kind=${1%%:*} path=${1#*:} res=$2 name slot size lo pid r
  name=$(basename "$path")
  slot=${free_slots[0]}
  free_slots=("${free_slots[@]:1}")
  size=$(((PORT_HI - PORT_LO + 1) / JOBS))
  lo=$((PORT_LO + (slot - 1) * size))
  mkdir -p "$OUT/tmp.$name"
  local cmd=("$path") locks=()
  [ "$kind" = integration ] && cmd=(bash "$path")
  for r in $res; do
    case $r in make | alone) ;; *) locks+=(flock -o "/tmp/dtrain-tests-$r.lock") ;; esac
  done
  # timeout makes the suite a process group of its own and ends all of it; flock
  # -o: what the suite leaves running (a Slurm daemon) does not keep the lock.
  DTRAIN_TEST_SLOT=$slot DTRAIN_TEST_PORTS=$lo-$((lo + size - 1)) TMPDIR=$OUT/tmp.$name \
    timeout -k 10 "$DTRAIN_TEST_TIMEOUT" "${locks[@]}" "${cmd[@]}" >"$OUT/$name.log" 2>&1 </dev/null &
  pid=$!
  job_name[$pid]=$name job_slot[$pid]=$slot job_res[$pid]=$res job_kind[$pid]=$kind
  job_t0[$pid]=${EPOCHREALTIME/./}
  for r in $res; do held[$r]=$name; done
  running=$((running + 1))
}

# count KIND NAME RC LOG: adds the suite's counts to the totals and puts them
# in $counts; prints why when the suite failed without a failing check.
count() {
  local kind=$1 name=$2 rc=$3 log=$4 p f s n
  if [ "$kind" = unit ]; then
    p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | awk '{n += $1} END {print n + 0}')
    f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | awk '{n += $1} END {print n + 0}')
    s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log" | awk '{n += $1} END {print n + 0}')
  else
    n=$(grep -c '^ok - ' "$log")
    s=$(grep -ci '^ok - # skip' "$log")
    p=$((n - s))
    f=$(grep -c '^not ok - ' "$log")
  fi
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    f=$((f + 1)); echo "run-tests: $name ran past DTRAIN_TEST_TIMEOUT ($DTRAIN_TEST_TIMEOUT s) and was stopped"
  elif [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    f=1; echo "run-tests: $name exited with status $rc before reporting a failure"
  elif [ $((p + f + s)) -eq 0 ]; then
    f=1; echo "run-tests: $name checked nothing"
  fi
  counts="$p passed, $f failed, $s skipped"
  [ "$f" -gt 0 ] && failure_excerpt "$kind" "$name" "$log" >>"$OUT/failures"
  passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
  [ "$f" -gt 0 ] && failed_names+=("$name")
}

# failure_excerpt KIND NAME LOG: a failing suite's failed checks with the lines that
# explain them, repeated at the end of the run: CI shows a long log's head and tail
# only, and a failure in the middle must still be readable there.
failure_excerpt() {
  echo "--- $2"
  if [ "$1" = unit ]; then
    grep -E -m 30 '^\[ *(FAILED|ERROR) *\]|error:|[Ff]ailure|[Aa]ssert' "$3"
  else
    local lines
    lines=$(awk '/^not ok - / {print; more = 8; next}
                 more > 0 && /^[ \t#]/ {print; more--; next}
                 {more = 0}' "$3" | head -n 60)
    if [ -n "$lines" ]; then echo "$lines"; else tail -n 10 "$3"; fi # it failed without a "not ok"
  fi
}

finish() { # PID RC
  local pid=$1 rc=$2 name=${job_name[$1]} r us
  us=$((${EPOCHREALTIME/./} - job_t0[$pid]))
  for r in ${job_res[$pid]}; do unset "held[$r]"; done
  free_slots+=("${job_slot[$pid]}")
  running=$((running - 1))
  echo "=== $name"
  cat "$OUT/$name.log"
  count "${job_kind[$pid]}" "$name" "$rc" "$OUT/$name.log"
  printf '# %s: %s, %d.%d s\n' "$name" "$counts" $((us / 1000000)) $((us / 100000 % 10))
  times+=("$((us / 1000000)).$((us / 100000 % 10)) $name")
  rm -rf "$OUT/$name.log" "$OUT/tmp.$name"
  unset "job_name[$pid]" "job_slot[$pid]" "job_res[$pid]" "job_kind[$pid]" "job_t0[$pid]"
}

t_start=$SECONDS
while :; do
  while [ ${#free_slots[@]} -gt 0 ]; do
    pick=
    for i in "${!pending[@]}"; do
      # shellcheck disable=SC2086  # a word list
      if can_start ${res_of[${pending[$i]}]}; then pick=$i; break; fi
    done
    [ -n "$pick" ] || break
    start "${pending[$pick]}" "${res_of[${pending[$pick]}]}"
    unset "pending[$pick]"
  done
  [ "$running" -gt 0 ] || break
  done_pid=
  wait -n -p done_pid
  rc=$?
  [ -n "$done_pid" ] && [ -n "${job_name[$done_pid]:-}" ] && finish "$done_pid" "$rc"
done

# Last time's seconds, for the next run's order (a filtered run updates its suites only).
if [ ${#times[@]} -gt 0 ] && [ -d "$BUILD" ]; then
  for t in "${times[@]}"; do est[${t#* }]=${t%%.*}; done
  for n in "${!est[@]}"; do echo "$n ${est[$n]}"; done | sort >"$BUILD/run-tests.times.$$" &&
    mv "$BUILD/run-tests.times.$$" "$BUILD/run-tests.times"
fi

echo
echo "run-tests: $((SECONDS - t_start)) s ($JOBS at a time)"
echo "run-tests: the ten slowest suites:"
printf '%s\n' "${times[@]}" | sort -k1,1nr | head -n 10 | awk '{printf "  %7.1f s  %s\n", $1, $2}'
if [ ${#failed_names[@]} -gt 0 ]; then
  echo "run-tests: what failed (each suite's failed checks; its whole output is above):"
  head -n 200 "$OUT/failures"
  echo "run-tests: failing suites: ${failed_names[*]}"
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
