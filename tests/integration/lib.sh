# lib.sh - helpers for integration tests (sourced).
#
# A test prints "ok - <what>" or "not ok - <what>" per check (scripts/run-tests.sh
# counts them).  Each test gets a scratch directory that is removed at exit.
# $DTRAIN is the binary under test.

: "${DTRAIN:?DTRAIN must point at the dtrain binary}"
T=$(mktemp -d /tmp/dtrain-test.XXXXXX)
trap 'rm -rf "$T"' EXIT

# Seconds a guard against runaway work allows, scaled for slow builds: `make
# asan` sets DTRAIN_TEST_TIME_SCALE (its allocations unwind the whole stack).
limit_s() { echo $(($1 * ${DTRAIN_TEST_TIME_SCALE:-1})); }

ok()     { echo "ok - $*"; }
not_ok() { echo "not ok - $*"; }

# check "<what>" command...: ok if the command succeeds.
check() {
  local what=$1; shift
  if "$@"; then ok "$what"; else not_ok "$what"; fi
}

# expect_status N "<what>" command...: ok if the command exits with status N.
expect_status() {
  local want=$1 what=$2; shift 2
  "$@" >"$T/last.out" 2>"$T/last.err"
  local got=$?
  if [ "$got" = "$want" ]; then ok "$what"
  else not_ok "$what (exit $got, wanted $want)"; sed 's/^/    /' "$T/last.err" | head -n 20
  fi
}

# contains FILE PATTERN "<what>": ok if grep -E finds PATTERN in FILE; returns 1
# when not, so a caller can add what explains the failure.
contains() {
  if grep -Eq -- "$2" "$1"; then ok "$3"; return 0; fi
  not_ok "$3 (no /$2/ in $(basename "$1"))"; sed 's/^/    /' "$1" | head -n 20
  return 1
}

# free_port: a TCP port nothing listens on, from this suite's own range:
# scripts/run-tests.sh gives each of the suites it runs side by side a slice of
# 10000-16999 (DTRAIN_TEST_PORTS=LO-HI), so two suites never pick the same port
# in the moment before one of them binds it; run by hand, a suite draws from all
# of it.  Ports are handed out in turn from a random start (the last one kept
# in $T), so one suite's calls never repeat either while its jobs start.  The
# range is below the kernel's ephemeral range (32768-60999 here), so no process
# binding port 0 elsewhere on this machine is handed the port before the test's
# node 0 binds it, below slurm-local.sh's slurmd ports (17001..) and the Slurm
# adapter's coordinators (20000-29999).
free_port() {
  python3 - "${DTRAIN_TEST_PORTS:-10000-16999}" "$T/.free_port" <<'PY'
import random, socket, sys
lo, hi = (int(x) for x in sys.argv[1].split("-"))
try:
    last = int(open(sys.argv[2]).read())
except (OSError, ValueError):
    last = random.randint(lo, hi)
n = hi - lo + 1
for i in range(1, n + 1):
    p = lo + (last - lo + i) % n
    s = socket.socket()
    try:
        s.bind(("0.0.0.0", p))
    except OSError:
        continue
    finally:
        s.close()
    open(sys.argv[2], "w").write(str(p))
    print(p)
    break
else:
    sys.exit("free_port: every port of %s is taken" % sys.argv[1])
PY
}
