# test_launch_files.sh - what dtrain writes is private, and what it cannot write
# fails the job: run directories 0700 and the files in them 0600, whatever the
# umask; a job token file others can read is refused (`dtrain coordinator
# --token-file`, DTRAIN_JOB_TOKEN_FILE); log files are never opened through a
# symbolic link.
. "$(dirname "$0")/lib.sh"

mode() { stat -c %a "$1"; }

cat >"$T/files.yaml" <<EOF
name: files
scheduler: local
nproc_per_node: 2
log_dir: $T/runs
command: [sh, -c, 'echo out \$RANK; echo err \$RANK >&2']
EOF
expect_status 0 "a job under umask 000" bash -c "umask 000; exec '$DTRAIN' launch '$T/files.yaml'"
rd=$(ls -d "$T"/runs/files-*)
check "the run directory is 0700 ($(mode "$rd"))" test "$(mode "$rd")" = 700
check "attempt_0/ is 0700 ($(mode "$rd/attempt_0"))" test "$(mode "$rd/attempt_0")" = 700
bad=""
for f in "$rd"/attempt_0/rank_*; do [ "$(mode "$f")" = 600 ] || bad="$bad $(basename "$f"):$(mode "$f")"; done
check "every rank log is 0600${bad:+ (not:$bad)}" test -z "$bad"
check "summary.json is in the private run directory" test -s "$rd/summary.json"

# A log file that is a symbolic link in a run directory used again (--run-id):
# never written through.
echo secret >"$T/victim"
mkdir -p "$T/runs/files-again/attempt_0"
ln -s "$T/victim" "$T/runs/files-again/attempt_0/rank_0.out"
cat >"$T/again.yaml" <<EOF
name: files
scheduler: local
nproc_per_node: 1
log_dir: $T/runs
command: [sh, -c, 'echo overwritten']
EOF
"$DTRAIN" agent "$T/again.yaml" --run-id again >"$T/again.out" 2>"$T/again.err"
check "a log file planted as a symbolic link is not written through" test "$(cat "$T/victim")" = secret
contains "$T/again.err" "rank_0.out" "the launcher names the log file it could not open"

# --- token files -------------------------------------------------------------------
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$T/token"
chmod 644 "$T/token"
expect_status 2 "dtrain coordinator --token-file refuses a file every user can read" \
  "$DTRAIN" coordinator --port 0 --token-file "$T/token"
contains "$T/last.err" "can be read by every user \(mode 0644\).*chmod 600 $T/token" "and says how to fix it"
chmod 600 "$T/token"
"$DTRAIN" coordinator --port 0 --host 127.0.0.1 --token-file "$T/token" >"$T/coord.out" 2>"$T/coord.err" &
cpid=$!
for _ in $(seq 50); do grep -qs listening "$T/coord.out" && break; sleep 0.1; done
contains "$T/coord.out" "listening on 127.0.0.1:[0-9]+ \(auth: token\)" "a 0600 token file is accepted"
kill "$cpid"; wait "$cpid" 2>/dev/null
chmod 600 "$T/token"
env -u DTRAIN_JOB_TOKEN DTRAIN_JOB_TOKEN_FILE="$T/token" "$DTRAIN" coordinator --port 0 --host 127.0.0.1 \
  >"$T/coord2.out" 2>"$T/coord2.err" &
cpid=$!
for _ in $(seq 50); do grep -qs listening "$T/coord2.out" && break; sleep 0.1; done
contains "$T/coord2.out" "\(auth: token\)" "dtrain coordinator reads DTRAIN_JOB_TOKEN_FILE as the agents do"
kill "$cpid"; wait "$cpid" 2>/dev/null
mkfifo "$T/fifo"
expect_status 2 "a FIFO as the token file is refused at once, not waited on" \
  timeout 10 "$DTRAIN" coordinator --port 0 --token-file "$T/fifo"
contains "$T/last.err" "is not a regular file" "it says why"

# --- a log directory that fills up fails the job, naming the file ---------------------
# A 256 KiB tmpfs in a mount namespace of its own (root, as here and in CI); without
# the rights to make one, RLIMIT_FSIZE stands in (the agent gets EFBIG, not SIGXFSZ).
cat >"$T/full.yaml" <<EOF
name: full
scheduler: local
nproc_per_node: 2
log_dir: $T/small
command: [sh, -c, 'yes 0123456789012345678901234567890123456789 | head -n 50000; sleep 30']
EOF
cat >"$T/fill.yaml" <<EOF
name: fill
scheduler: local
nproc_per_node: 1
log_dir: $T/small
command: [sh, -c, 'echo hello; cat /dev/zero >"\$DTRAIN_RUN_DIR/filler" 2>/dev/null; exit 0']
EOF
mkdir -p "$T/small"
in_small() {  # in_small COMMAND...: runs it with $T/small a 256 KiB file system
  if unshare -m true 2>/dev/null; then
    unshare -m sh -c 'mount -t tmpfs -o size=256k tmpfs "$0" && exec "$@"' "$T/small" "$@"
  else
    sh -c 'ulimit -f 256 && exec "$@"' sh "$@"
  fi
}
start=$(date +%s)
in_small "$DTRAIN" launch "$T/full.yaml" >"$T/full.out" 2>"$T/full.err"
st=$?
check "a rank log that cannot be written fails the job (exit $st)" test "$st" = 1
check "and stops it at once, not after the ranks' sleep 30 ($(( $(date +%s) - start )) s)" test $(( $(date +%s) - start )) -lt 20
contains "$T/full.err" "cannot write the log file $T/small/full-[^/]+/attempt_0/rank_[01]\.out: (No space left on device|File too large); stopping the job" \
  "the error names the log file and the reason"
check "it does not say succeeded" bash -c "! grep -q succeeded '$T/full.err'"
contains "$T/full.err" "job full failed with exit status 1 .*cannot write the log file" "the closing line says why the job failed"

in_small "$DTRAIN" launch "$T/fill.yaml" >"$T/fill.out" 2>"$T/fill.err"
st=$?
check "a summary.json that cannot be written fails a job whose ranks succeeded (exit $st)" test "$st" = 1
contains "$T/fill.err" "cannot write $T/small/fill-[^/]+/summary\.json" "the error names summary.json"
check "it does not say succeeded" bash -c "! grep -q succeeded '$T/fill.err'"
