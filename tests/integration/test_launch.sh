# test_launch.sh - `dtrain launch` with scheduler: local: the rank environment,
# console prefixes and log files, summary.json, a failing rank, signal names,
# a restart, two jobs at once on port 0, and the errors a user can make.
. "$(dirname "$0")/lib.sh"

# job NAME KEY: VALUE... ; writes $T/NAME.yaml with log_dir $T/runs.
job() {
  local name=$1; shift
  { echo "name: $name"; echo "scheduler: local"; echo "log_dir: $T/runs"; printf '%s\n' "$@"; } >"$T/$name.yaml"
}
run_dir_of() { ls -d "$T"/runs/"$1"-* | tail -n 1; }
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }

# --- environment of a 4-rank job --------------------------------------------
job envjob 'nproc_per_node: 4' 'env: {FOO: bar, OMP_NUM_THREADS_HINT: x}' \
  "command: [bash, -c, 'env | sort; exec 3<>/dev/tcp/127.0.0.1/\$MASTER_PORT && echo port-open']"
expect_status 0 "4-rank job that prints its environment succeeds" "$DTRAIN" launch "$T/envjob.yaml"
cp "$T/last.err" "$T/envjob.console.err"; cp "$T/last.out" "$T/envjob.console.out"
rd=$(run_dir_of envjob)
port=$(sed -n "s/.*the ranks' store 127\.0\.0\.1:\([0-9]*\).*/\1/p" "$T/envjob.console.err" | head -n1)
rid=$(json "$rd/summary.json" 'd["run_id"]')
check "the launcher names the ranks' store port (this node's endpoint)" test -n "$port"
check "the run directory is <log_dir>/<name>-<run id>" test "$rd" = "$T/runs/envjob-$rid"
if grep -q '^DTRAIN_JOB_TOKEN=' "$rd"/attempt_0/rank_*.out; then not_ok "a command's ranks are not given the job token"
else ok "a command's ranks are not given the job token (their node's store endpoint presents it)"; fi
bad=""
for r in 0 1 2 3; do
  f="$rd/attempt_0/rank_$r.out"
  for kv in "RANK=$r" "LOCAL_RANK=$r" "WORLD_SIZE=4" "LOCAL_WORLD_SIZE=4" "GROUP_RANK=0" "GROUP_WORLD_SIZE=1" \
            "ROLE_RANK=$r" "ROLE_NAME=default" "ROLE_WORLD_SIZE=4" "MASTER_ADDR=127.0.0.1" "MASTER_PORT=$port" \
            "TORCHELASTIC_RESTART_COUNT=0" "TORCHELASTIC_MAX_RESTARTS=0" "TORCHELASTIC_RUN_ID=$rid" \
            "TORCHELASTIC_USE_AGENT_STORE=True" "TORCHELASTIC_ERROR_FILE=$rd/attempt_0/rank_$r.error.json" \
            "OMP_NUM_THREADS=1" "PYTHONUNBUFFERED=1" "FOO=bar" \
            "DTRAIN_COORD_ADDR=127.0.0.1:$port" "DTRAIN_RUN_DIR=$rd" \
            "DTRAIN_JOB_NAME=envjob" "DTRAIN_NODE_RANK=0" "DTRAIN_NNODES=1" "DTRAIN_RESTART_COUNT=0" \
            "DTRAIN_ERROR_FILE=$rd/attempt_0/rank_$r.error.json" "port-open"; do
    grep -qxF -- "$kv" "$f" || bad="$bad rank$r:$kv"
  done
done
if [ -z "$bad" ]; then ok "every rank has the right torchrun and DTRAIN_* variables"
else not_ok "rank environment: missing or wrong:$bad"; fi
contains "$T/envjob.console.out" '^\[rank 3\] RANK=3$' "console lines carry the [rank N] prefix"
contains "$T/envjob.console.err" 'OMP_NUM_THREADS=1' "the launcher says it sets OMP_NUM_THREADS=1"
check "summary says succeeded" test "$(json "$rd/summary.json" 'd["status"]')" = succeeded
check "summary has world size, attempts and per-rank exit codes" test \
  "$(json "$rd/summary.json" '(d["world_size"], d["n_attempts"], [r["exit_code"] for r in d["attempts"][0]["ranks"]])')" \
  = "(4, 1, [0, 0, 0, 0])"
check "summary keeps spawn and exit times per rank" python3 -c "
import json,sys; d=json.load(open('$rd/summary.json'))
assert all(0 <= r['spawn_s'] <= r['exit_s'] <= d['wall_seconds'] for r in d['attempts'][0]['ranks'])"
check "no temporary summary file is left" test ! -e "$rd/summary.json.tmp"

# --- output: many lines at once, partial and very long lines, --ranks --------
job noisy 'nproc_per_node: 4' \
  "command: [bash, -c, 'for i in \$(seq 2000); do echo \"\$RANK-\$i-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"; done; head -c 40000 /dev/zero | tr \"\\\\0\" y; echo; printf \"tail-without-newline\"; echo \"to stderr \$RANK\" >&2']"
expect_status 0 "4 ranks printing 2000 lines each" "$DTRAIN" launch "$T/noisy.yaml"
rd=$(run_dir_of noisy)
check "no console line is mixed with another rank's" bash -c "
  grep -Ev '^\[rank ([0-3])\] (\1-[0-9]+-x{58}|y+|tail-without-newline)$' '$T/last.out' | head -3 | grep -q . && exit 1
  [ \$(grep -c -- '-x' '$T/last.out') = 8000 ]"
check "a partial last line reaches the console with its prefix" grep -qx '\[rank 2\] tail-without-newline' "$T/last.out"
check "a 40000-byte line is split into prefixed pieces on the console" \
  test "$(grep '^\[rank 1\] y' "$T/last.out" | tr -d '\n' | sed 's/\[rank 1\] //g' | wc -c)" = 40000
check "the log file has the long line whole" test "$(awk '/^y+$/ && length($0) == 40000' "$rd/attempt_0/rank_1.out" | wc -l)" = 1
check "the log file ends as the rank's output did" test "$(tail -c 20 "$rd/attempt_0/rank_3.out")" = tail-without-newline
contains "$rd/attempt_0/rank_2.err" '^to stderr 2$' "stderr goes to rank_<n>.err"
expect_status 0 "--ranks 0 launch" "$DTRAIN" launch --ranks 0 "$T/noisy.yaml"
check "--ranks 0 shows only rank 0's stdout" bash -c "! grep -q '^\[rank [123]\]' '$T/last.out' && grep -q '^\[rank 0\]' '$T/last.out'"
check "--ranks 0 shows no other rank's stderr either" bash -c "! grep -q '^\[rank [123]\]' '$T/last.err'"
expect_status 2 "--ranks naming a rank that does not exist is refused" "$DTRAIN" launch --ranks 0,7 "$T/noisy.yaml"
contains "$T/last.err" 'rank 7 does not exist' "the bad rank is named"

# --- a failing rank -----------------------------------------------------------
job failjob 'nproc_per_node: 4' \
  "command: [bash, -c, 'if [ \$RANK = 2 ]; then sleep 0.3; for i in \$(seq 15); do echo \"err line \$i\" >&2; done; exit 3; fi; exec sleep 30']"
start=$(date +%s)
expect_status 3 "the launcher exits with the failing rank's exit code" "$DTRAIN" launch "$T/failjob.yaml"
check "the other ranks were stopped promptly" test $(( $(date +%s) - start )) -lt 10
contains "$T/last.err" 'rank 2 failed first.*exited with code 3' "the summary names the first failing rank and its code"
contains "$T/last.err" '^  \| err line 15$' "the summary shows the last lines of its stderr"
check "only the last 10 stderr lines are shown" bash -c "! grep -q '  | err line 5\$' '$T/last.err'"
rd=$(run_dir_of failjob)
check "summary.json: failed, first failure rank 2 with code 3" test \
  "$(json "$rd/summary.json" '(d["status"], d["exit_status"], d["first_failure"]["rank"], d["first_failure"]["exit_code"])')" \
  = "('failed', 3, 2, 3)"
check "summary.json: the others were stopped by SIGTERM" test \
  "$(json "$rd/summary.json" '[(r["signal"], r["stopped_by_dtrain"]) for r in d["attempts"][0]["ranks"] if r["rank"] != 2]')" \
  = "[('SIGTERM', True), ('SIGTERM', True), ('SIGTERM', True)]"
check "summary.json keeps the stderr tail" test "$(json "$rd/summary.json" 'd["first_failure"]["stderr_tail"][-1]')" = "err line 15"

# --- an error report written to TORCHELASTIC_ERROR_FILE (PyTorch's @record format) ---
cat >"$T/report.sh" <<'EOF'
if [ "$RANK" = 1 ]; then
  echo '{"message": {"message": "ValueError: bad batch 7", "extraInfo": {"timestamp": "1"}}}' >"$TORCHELASTIC_ERROR_FILE"
  exit 1
fi
exec sleep 30
EOF
job reportjob 'nproc_per_node: 2' "command: [bash, $T/report.sh]"
expect_status 1 "a rank that writes an error report and exits 1" "$DTRAIN" launch "$T/reportjob.yaml"
contains "$T/last.err" "rank 1's error report .*rank_1.error.json. says:" "the launcher points at the error report"
contains "$T/last.err" '^  > ValueError: bad batch 7$' "the launcher shows the report's message"
check "summary.json keeps the report's message" test \
  "$(json "$(run_dir_of reportjob)/summary.json" 'd["first_failure"]["error_message"]')" = "ValueError: bad batch 7"

# --- signal names -------------------------------------------------------------
job segv 'nproc_per_node: 2' "command: [bash, -c, '[ \$RANK = 1 ] && kill -SEGV \$\$; exec sleep 30']"
expect_status 139 "a rank killed by SIGSEGV: exit status 128+11" "$DTRAIN" launch "$T/segv.yaml"
contains "$T/last.err" 'rank 1 failed first.*killed by SIGSEGV' "SIGSEGV is named"
job oom 'nproc_per_node: 2' "command: [bash, -c, '[ \$RANK = 0 ] && kill -KILL \$\$; exec sleep 30']"
expect_status 137 "a rank killed by SIGKILL: exit status 137" "$DTRAIN" launch "$T/oom.yaml"
contains "$T/last.err" 'killed by SIGKILL' "SIGKILL is named"
check "summary.json names the signal" test "$(json "$(run_dir_of oom)/summary.json" 'd["first_failure"]["signal"]')" = SIGKILL

# --- restart ------------------------------------------------------------------
job restart 'nproc_per_node: 2' 'max_restarts: 1' \
  "command: [bash, -c, 'echo attempt \$TORCHELASTIC_RESTART_COUNT; [ \$TORCHELASTIC_RESTART_COUNT = 1 ] || exit 4']"
expect_status 0 "fails on attempt 0, succeeds on the restart" "$DTRAIN" launch "$T/restart.yaml"
contains "$T/last.err" 'restart 1 of 1' "the launcher says it restarts"
rd=$(run_dir_of restart)
check "summary.json: succeeded after 2 attempts" test "$(json "$rd/summary.json" '(d["status"], d["n_attempts"])')" = "('succeeded', 2)"
check "each attempt has its own log directory" grep -qx 'attempt 1' "$rd/attempt_1/rank_0.out"
job norestart 'nproc_per_node: 1' 'max_restarts: 2' "command: [bash, -c, 'exit 6']"
expect_status 6 "restarts run out: the last failure's exit code" "$DTRAIN" launch "$T/norestart.yaml"
check "summary.json: 3 attempts" test "$(json "$(run_dir_of norestart)/summary.json" 'd["n_attempts"]')" = 3

# --- two jobs at once on port 0 ------------------------------------------------
job twin 'nproc_per_node: 2' \
  "command: [bash, -c, 'exec 3<>/dev/tcp/127.0.0.1/\$MASTER_PORT && echo port \$MASTER_PORT; sleep 0.5']"
"$DTRAIN" launch "$T/twin.yaml" >"$T/twin1.out" 2>&1 & p1=$!
"$DTRAIN" launch "$T/twin.yaml" >"$T/twin2.out" 2>&1 & p2=$!
wait $p1; s1=$?; wait $p2; s2=$?
check "two launches at once both succeed" test "$s1$s2" = 00
port1=$(sed -n 's/^\[rank 0\] port //p' "$T/twin1.out"); port2=$(sed -n 's/^\[rank 0\] port //p' "$T/twin2.out")
check "two launches at once got different coordinator ports" test -n "$port1" -a -n "$port2" -a "$port1" != "$port2"

# --- what a user gets wrong ------------------------------------------------------
job nocmd "command: [dtrain-no-such-program-xyz]"
expect_status 2 "a command that is not on PATH is refused before starting" "$DTRAIN" launch "$T/nocmd.yaml"
contains "$T/last.err" "dtrain-no-such-program-xyz' was not found on PATH" "the missing program is named"
# A scheduler whose adapter this build lacks (`dtrain render` says which) is refused.
unbuilt=
for sched in mpirun kubernetes slurm; do
  "$DTRAIN" render "$sched" "$T/nocmd.yaml" >/dev/null 2>"$T/probe.err"
  grep -q "no scheduler adapter named" "$T/probe.err" && { unbuilt=$sched; break; }
done
if [ -n "$unbuilt" ]; then
  job unbuilt "scheduler: $unbuilt" "command: [true]"
  sed -i '0,/^scheduler: local$/{/^scheduler: local$/d}' "$T/unbuilt.yaml"
  expect_status 2 "scheduler: $unbuilt (no adapter in this build) is refused" "$DTRAIN" launch "$T/unbuilt.yaml"
  contains "$T/last.err" "scheduler: $unbuilt is not built into this version" "the message says the adapter is not built in"
else
  ok "every scheduler's adapter is built in (mpirun, kubernetes, slurm): no refusal left to check"
fi
expect_status 2 "a missing job file exits 2" "$DTRAIN" launch "$T/does-not-exist.yaml"
expect_status 2 "an unknown option exits 2" "$DTRAIN" launch --frobnicate "$T/envjob.yaml"
job noauth 'rendezvous: {auth: none}' "command: [bash, -c, 'echo token=\${DTRAIN_JOB_TOKEN-unset}']"
expect_status 0 "auth: none job runs" "$DTRAIN" launch "$T/noauth.yaml"
contains "$T/last.err" "auth is none" "auth: none is announced at start"
contains "$T/last.out" '^\[rank 0\] token=unset$' "auth: none ranks get no token"
job noauth3 'rendezvous: {auth: none}' 'max_restarts: 2' "command: [bash, -c, 'exit 5']"
expect_status 5 "auth: none job that restarts twice" "$DTRAIN" launch "$T/noauth3.yaml"
check "auth: none is said once per job, not at every restart ($(grep -c 'auth.*none' "$T/last.err") lines)" \
  test "$(grep -c 'auth.*none' "$T/last.err")" = 1

# --- PyTorch's own "[rankN]:" prefix is not doubled; the log keeps it ----------
job torchprefix 'nproc_per_node: 2' \
  "command: [bash, -c, 'echo \"[rank\$RANK]: Traceback (most recent call last):\" >&2; echo \"[rank\$RANK]:[W1204 12:00:00] Warning: x\"; echo \"[rank9]: not mine\"']"
expect_status 0 "ranks writing PyTorch's prefixes" "$DTRAIN" launch "$T/torchprefix.yaml"
contains "$T/last.err" '^\[rank 1\] Traceback \(most recent call last\):$' "[rankN]: becomes [rank N] on stderr"
contains "$T/last.out" '^\[rank 0\] \[W1204 12:00:00\] Warning: x$' "[rankN]:[W...] becomes [rank N] [W...] on stdout"
contains "$T/last.out" '^\[rank 0\] \[rank9\]: not mine$' "another rank's prefix is left alone"
contains "$(run_dir_of torchprefix)/attempt_0/rank_1.err" '^\[rank1\]: Traceback' "the log file keeps the line as written"

# --- many ranks under a low soft limit on open files ----------------------------
job wide 'nproc_per_node: 24' "command: [bash, -c, 'echo limit \$(ulimit -Sn)']"
expect_status 0 "24 ranks under ulimit -Sn 64 (the agent raises its own limit)" bash -c "ulimit -Sn 64; exec '$DTRAIN' launch '$T/wide.yaml'"
check "every one of the 24 ranks printed" test "$(grep -c '^\[rank [0-9]*\] limit 64$' "$T/last.out")" = 24

# --- the console goes away (`| head`): the job goes on, the logs stay whole -----
job headjob 'nproc_per_node: 2' "command: [bash, -c, 'for i in \$(seq 50000); do echo line \$i; done']"
"$DTRAIN" launch --quiet "$T/headjob.yaml" 2>/dev/null | head -n 1 >/dev/null
check "dtrain launch | head: the launcher still exits 0" test "${PIPESTATUS[0]}" = 0
check "dtrain launch | head: the log files have every line" test "$(wc -l <"$(run_dir_of headjob)/attempt_0/rank_1.out")" = 50000
