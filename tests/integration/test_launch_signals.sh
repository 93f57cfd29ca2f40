# test_launch_signals.sh - SIGINT (Ctrl-C) and SIGTERM to `dtrain launch` are
# passed on to the ranks and, within 5 s, no process of the job is left:
# ranks, their children in the rank's process group, children that moved to
# a session of their own, and processes the ranks left behind when they exited;
# also when the launcher is killed with SIGKILL (the ranks' guards clean up).
# Each job carries a unique marker in its environment; /proc tells what is left.
# Then grace_period: the default 30 s, the spec's, and --grace-period over it.  Last,
# SIGUSR1 (a Slurm time limit is near) to a real Python script: without a handler no rank
# gets it (CPython would die of it, 138) and the ranks are stopped for a requeue (75); with
# one, the handler runs.
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
  # rank 1 ignores the signals only from its trap on, after it spawned its children: wait for
  # every rank's "ready" (written after the trap), or an early signal kills rank 1 by SIGINT
  for _ in $(seq 200); do
    [ "$(cat "$T"/runs/"$name"-*/attempt_0/rank_*.out 2>/dev/null | grep -c '^ready')" -ge 3 ] && break
    sleep 0.05
  done
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
# takes the ranks down ...
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

# ... and what they started too, which the dead launcher cannot stop: each rank's
# guard (launcher/agent/agent_guard.c) outlives it and kills it all.  A rank starts
# `sleep 9001 &` (its group), a process in a session of its own, a double fork
# whose middle process is gone (an orphan at once), and one that ignores SIGTERM;
# each writes its pid, and /proc says whether any is left, and whether the
# launcher's own children (the guards) are gone too.
m="kill9b-$$-$RANDOM"
cat >"$T/rank9.sh" <<'EOF'
out=$PIDS.$RANK
sleep 9001 & echo $! >>"$out"
setsid bash -c 'echo $$ >>"$1"; exec sleep 9002' _ "$out" &
( bash -c 'echo $$ >>"$1"; exec sleep 9003' _ "$out" & )
bash -c 'trap "" TERM; echo $$ >>"$1"; while :; do sleep 1; done' _ "$out" &
echo $$ >>"$out"
wait
EOF
cat >"$T/kill9b.yaml" <<EOF
name: kill9b
scheduler: local
nproc_per_node: 2
log_dir: $T/runs
env: {DTRAIN_TEST_MARKER: "$m", PIDS: "$T/pids"}
command: [bash, $T/rank9.sh]
EOF
"$DTRAIN" launch "$T/kill9b.yaml" >"$T/kill9b.out" 2>"$T/kill9b.err" &
pid=$!
ready() { [ "$(cat "$T"/pids.0 "$T"/pids.1 2>/dev/null | wc -l)" -ge 10 ]; }
for _ in $(seq 100); do ready && break; sleep 0.05; done
check "SIGKILL to the launcher: the ranks and what they started are running (10 pids)" ready
guards=$(cat /proc/"$pid"/task/*/children 2>/dev/null)
check "the launcher's children are the ranks' guards ($(echo $guards | wc -w))" test "$(echo $guards | wc -w)" = 2
tracked=$(cat "$T"/pids.0 "$T"/pids.1 2>/dev/null)
kill -KILL "$pid"
alive() { for p in $tracked $guards; do [ -d /proc/"$p" ] && [ "$(cut -d' ' -f3 /proc/"$p"/stat 2>/dev/null)" != Z ] && echo "$p"; done; }
gone() {
  local deadline=$(( $(date +%s%N) + $1 * 1000000000 ))
  while [ "$(date +%s%N)" -lt "$deadline" ]; do
    [ -z "$(alive)" ] && [ -z "$(marker_pids "$m")" ] && return 0
    sleep 0.05
  done
  echo "    left behind:"; for p in $(alive) $(marker_pids "$m"); do echo "    $p $(tr '\0' ' ' </proc/$p/cmdline)"; done
  return 1
}
check "SIGKILL to the launcher: nothing of the job is left within 5 s (children, sessions, orphans, guards)" gone 5
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

# --- grace_period: the time a rank has between SIGTERM and SIGKILL --------------------
# Rank 1 fails at once; rank 0's SIGTERM handler takes 4 s to save its state.  With the
# default grace period (30 s, torchrun's) it finishes; with `grace_period: 1s` it is
# killed; --grace-period on the command line overrides the spec.
cat >"$T/save.sh" <<'EOF'
if [ "$RANK" = 1 ]; then sleep 0.5; exit 3; fi
trap 'sleep 4; echo saved >"$SAVED"; exit 0' TERM
while :; do sleep 0.1; done
EOF
grace_job() { # NAME [grace_period line]
  { echo "name: $1"; echo "scheduler: local"; echo "nproc_per_node: 2"; echo "log_dir: $T/runs"
    echo "env: {SAVED: $T/$1.saved}"; echo "command: [bash, $T/save.sh]"; [ -n "${2:-}" ] && echo "$2"; } >"$T/$1.yaml"
}
rank0() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); r=d['attempts'][0]['ranks'][0]; print(r['exit_code'], r['signal'])" "$(ls "$T"/runs/"$1"-*/summary.json)"; }
grace_job gdefault
expect_status 3 "a rank whose SIGTERM handler saves for 4 s, default grace period" "$DTRAIN" launch "$T/gdefault.yaml"
check "with the default grace period (30 s) it saves and exits 0" test -f "$T/gdefault.saved" -a "$(rank0 gdefault)" = "0 None"
contains "$T/last.err" "SIGKILL after 30 s" "the launcher says the grace period is 30 s"
grace_job gshort "grace_period: 1s"
expect_status 3 "the same with grace_period: 1s" "$DTRAIN" launch "$T/gshort.yaml"
check "grace_period: 1s kills it before it has saved" test ! -f "$T/gshort.saved" -a "$(rank0 gshort)" = "None SIGKILL"
contains "$T/last.err" "SIGKILL after 1 s" "the launcher says the spec's grace period"
expect_status 3 "--grace-period 6 over the spec's 1s" "$DTRAIN" launch --grace-period 6 "$T/gshort.yaml"
check "--grace-period overrides grace_period: it saves" test -f "$T/gshort.saved"

# --- SIGUSR1: passed on only to ranks that catch it ------------------------------------
python=$PWD/.venv/bin/python
[ -x "$python" ] || python=python3
cat >"$T/usr1.py" <<'EOF'
import os, signal, sys, time
if sys.argv[1] == "torch":  # a PyTorch DDP rank without a handler
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    dist.barrier()
elif sys.argv[1] != "none":
    def on_usr1(sig, frame):
        print("handler ran on rank", os.environ["RANK"], flush=True)
        if sys.argv[1] in ("exit", "fork"):
            sys.exit(75)          # saved its state: stop to be requeued
    signal.signal(signal.SIGUSR1, on_usr1)
    if sys.argv[1] == "fork" and os.fork() == 0:  # a DataLoader worker: inherits the handler
        time.sleep(60)
        os._exit(0)
print("pid", os.getpid(), flush=True)
print("ready", flush=True)
for _ in range(40 if sys.argv[1] == "goon" else 600):
    time.sleep(0.1)
print("finished", flush=True)
EOF
# usr1 NAME MODE [RANK]: starts 2 ranks of usr1.py MODE, waits for both "ready", sends SIGUSR1
# to the launcher (or straight to rank RANK's process, as Slurm's --signal without B: does);
# the launcher's status in $status, its run directory in $rd.
usr1() {
  { echo "name: $1"; echo "scheduler: local"; echo "nproc_per_node: 2"; echo "log_dir: $T/runs"
    echo "rendezvous: {auth: none}"  # PyTorch's TCPStore clients carry no token
    echo "command: ['$python', '$T/usr1.py', $2]"; } >"$T/$1.yaml"
  "$DTRAIN" launch --grace-period 5 "$T/$1.yaml" >"$T/$1.out" 2>"$T/$1.err" &
  local pid=$!
  for _ in $(seq 600); do [ "$(grep -c 'ready$' "$T/$1.out")" -ge 2 ] && break; sleep 0.05; done
  local to=$pid
  [ -n "${3:-}" ] && to=$(sed -n "s/^\[rank $3\] pid //p" "$T/$1.out")
  kill -USR1 "$to"
  wait "$pid"; status=$?
  rd=$(ls -d "$T"/runs/"$1"-*)
}
summary() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($1)" "$rd/summary.json"; }

usr1 nohandler none
check "SIGUSR1, no handler: the launcher exits 75 to be requeued, not 138 (got $status)" test "$status" = 75
check "SIGUSR1, no handler: no rank died of SIGUSR1; both were stopped with SIGTERM" test \
  "$(summary "[(r['signal'], r['stopped_by_dtrain']) for r in d['attempts'][0]['ranks']]")" = \
  "[('SIGTERM', True), ('SIGTERM', True)]"
check "SIGUSR1, no handler: summary.json says interrupted by SIGUSR1, requeue: stopped" test \
  "$(summary "d['status'], d['interrupted_by'], d['requeue'], d['n_attempts']")" = "interrupted SIGUSR1 stopped 1"
contains "$T/nohandler.err" "received SIGUSR1 .*ranks 0, 1 do not catch it" "SIGUSR1, no handler: the launcher says which ranks do not catch it"
contains "$T/nohandler.err" "the ranks were stopped on SIGUSR1 .* to be requeued \(exit status 75\)" \
  "SIGUSR1, no handler: the summary line says they were stopped to be requeued"

usr1 handled exit
check "SIGUSR1, a handler that exits 75: the launcher exits 75 (got $status)" test "$status" = 75
check "SIGUSR1, a handler: it ran on both ranks" \
  bash -c "grep -qx '\[rank 0\] handler ran on rank 0' '$T/handled.out' && grep -qx '\[rank 1\] handler ran on rank 1' '$T/handled.out'"
check "SIGUSR1, a handler: summary.json says requeue: checkpointed, nobody stopped by dtrain" test \
  "$(summary "d['requeue'], [r['exit_code'] for r in d['attempts'][0]['ranks']], [r['stopped_by_dtrain'] for r in d['attempts'][0]['ranks']]")" = \
  "checkpointed [75, 75] [False, False]"
contains "$T/handled.err" "every rank catches it, passing it on" "SIGUSR1, a handler: the launcher says it passes it on"

usr1 forked fork
check "SIGUSR1, a handler inherited by a forked child: only each rank's own process runs it" test \
  "$(grep -c 'handler ran' "$T/forked.out")" = 2
check "SIGUSR1, a forked child: the launcher exits 75 (got $status)" test "$status" = 75

usr1 goon goon
check "SIGUSR1, a handler that carries on: the job finishes and succeeds (got $status)" test "$status" = 0
check "SIGUSR1, a handler that carries on: the handler ran, then the script finished" \
  bash -c "grep -q 'handler ran on rank 1' '$T/goon.out' && [ \$(grep -c 'finished\$' '$T/goon.out') = 2 ]"

usr1 direct none 1
check "SIGUSR1 straight to a rank without a handler: it dies of it, the launcher exits 75, not 138 (got $status)" \
  test "$status" = 75
check "SIGUSR1 straight to a rank: summary.json says requeue: stopped, and rank 0 was stopped with SIGTERM" test \
  "$(summary "d['requeue'], d['attempts'][0]['ranks'][0]['signal'], d['first_failure'] is None")" = "stopped SIGTERM True"
contains "$T/direct.err" "rank 1 was killed by SIGUSR1, sent to it directly" "SIGUSR1 straight to a rank: the launcher says so"

if "$python" -c 'import torch' 2>/dev/null; then
  usr1 ddp torch
  check "SIGUSR1 to a PyTorch DDP job without a handler: the launcher exits 75, not 138 (got $status)" test "$status" = 75
  check "SIGUSR1, PyTorch: summary.json says requeue: stopped, both ranks stopped by dtrain" test \
    "$(summary "d['requeue'], [r['stopped_by_dtrain'] for r in d['attempts'][0]['ranks']]")" = "stopped [True, True]"
else
  not_ok "PyTorch is importable from $python (scripts/install-deps.sh puts it in .venv)"
fi
