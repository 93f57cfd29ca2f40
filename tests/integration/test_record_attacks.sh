# test_record_attacks.sh - files planted in a shared log directory or handed to
# dtrain's file readers, each with the refusal expected, a bound on time (every
# command runs under `timeout`: a hang fails the check, it does not stall the suite)
# and, where it applies, on memory (docs/security.md, "Files dtrain reads"):
#   1. `dtrain sample` of a 33 KB checkpoint, every checksum right, whose model entry
#      declares GPT-2 124M (and 1.5B): refused before the model is built, under 300 MiB;
#   2. FIFOs named launch.json, summary.json, metrics.jsonl in a run directory of the
#      log directory: `list`, `status` and a lookup by name return; a FIFO job.yaml:
#      `launch --resume` returns, naming the file;
#   3. a symbolic link named as a run's newest checkpoint, pointing out of its
#      directory: not followed;
#   4. a FIFO named as a rank's log in a run directory used again (`launch --resume`):
#      the agent refuses it, naming the file, instead of stalling its loop on it.
# The checkpoints are made by tests/integration/ckpt_craft.py.
. "$(dirname "$0")/lib.sh"
PY=${PYTHON:-python3}
CRAFT="$(cd "$(dirname "$0")" && pwd)/ckpt_craft.py"
cd "$T" || exit 1
TIME=/usr/bin/time
[ -x "$TIME" ] || { not_ok "GNU time is installed ($TIME: apt-get install time)"; exit 0; }

# peak_mib FILE: the maximum resident set GNU time -v wrote to FILE, in MiB.
peak_mib() { awk -F: '/Maximum resident set size/ {printf "%d", $2 / 1024}' "$1"; }

# --- 1. a small checkpoint that declares a large model ------------------------
for size in small xl; do
  f="$T/step_00000001.$size.safetensors"
  "$PY" "$CRAFT" declare "$f" "$size" || not_ok "ckpt_craft.py made $f"
  start=$(date +%s)
  "$TIME" -v -o "time.$size" timeout "$(limit_s 60)" "$DTRAIN" sample "$f" -n 1 >"sample.$size.out" 2>"sample.$size.err"
  st=$?
  took=$(( $(date +%s) - start ))
  peak=$(peak_mib "time.$size")
  echo "# sample of a $(stat -c %s "$f")-byte file declaring GPT-2 $size: exit $st, ${took}s, peak ${peak} MiB"
  check "sample of the $size declaration exits 1 (exit $st)" test "$st" = 1
  check "and peaks under 300 MiB (${peak} MiB)" test "${peak:-99999}" -lt 300
  check "within 10 s (${took}s)" test "$took" -lt "$(limit_s 10)"
  contains "sample.$size.err" "$f: its model entry declares gpt2 n_layer [0-9]+.*whose tensor transformer.wte.weight is F32 \[50257, [0-9]+\]; the file has it as F32 \[8192\]: it does not hold the model it declares" \
    "the refusal names the file, the tensor and both shapes"
done
"$TIME" -v -o time.export timeout "$(limit_s 60)" "$DTRAIN" export hf "$T/step_00000001.small.safetensors" -o "$T/hf" >export.out 2>export.err
st=$?
check "export of the same file exits 1 (exit $st)" test "$st" = 1
check "and peaks under 300 MiB ($(peak_mib time.export) MiB)" test "$(peak_mib time.export)" -lt 300
contains export.err "does not hold the model it declares" "export says why"
check "export wrote nothing" test ! -e "$T/hf/model.safetensors"

# --- 2. FIFOs in run directories ----------------------------------------------
cat >quick.yaml <<EOF
name: quick
nproc_per_node: 1
log_dir: $T/runs
command: [sh, -c, 'echo done']
EOF
expect_status 0 "a quick local job runs" timeout "$(limit_s 60)" "$DTRAIN" launch quick.yaml
run=$(ls -d "$T"/runs/quick-*)
check "it left launch.json, summary.json and job.yaml" test -f "$run/launch.json" -a -f "$run/summary.json" -a -f "$run/job.yaml"

# planted: FIFOs under each name a lookup reads, in run directories of their own
for name in launch.json summary.json metrics.jsonl; do
  d="$T/runs/quick-29991231-000000-${name%%.*}"
  mkdir -p "$d"
  [ "$name" = launch.json ] || sed "s|$run|$d|" "$run/launch.json" >"$d/launch.json"
  mkfifo "$d/$name"
done
expect_status 0 "dtrain list returns with FIFOs in run directories" timeout 10 "$DTRAIN" list "$T/runs"
contains "$T/last.out" "quick-[0-9]{8}-[0-9]{6}-[0-9a-f]{6}" "list still lists the real run"
expect_status 0 "dtrain status NAME (a lookup that reads every launch.json) returns" \
  timeout 10 "$DTRAIN" status quick --log-dir "$T/runs"
expect_status 0 "dtrain status of the run with a FIFO summary.json returns" \
  timeout 10 "$DTRAIN" status "$T/runs/quick-29991231-000000-summary"
expect_status 0 "dtrain status of the run with a FIFO metrics.jsonl returns" \
  timeout 10 "$DTRAIN" status "$T/runs/quick-29991231-000000-metrics"
expect_status 1 "dtrain status of the run with a FIFO launch.json returns, refused" \
  timeout 10 "$DTRAIN" status "$T/runs/quick-29991231-000000-launch"
contains "$T/last.err" "launch.json: not a regular file \(a FIFO\)" "it names the file and what it is"

# a FIFO job.yaml: launch --resume reads the run's spec snapshot
cp -r "$run" "$T/runs/quick-29991231-000000-spec"
rm "$T/runs/quick-29991231-000000-spec/job.yaml"
mkfifo "$T/runs/quick-29991231-000000-spec/job.yaml"
expect_status 2 "launch --resume with a FIFO job.yaml returns, refused" \
  timeout 10 "$DTRAIN" launch quick.yaml --resume "$T/runs/quick-29991231-000000-spec"
contains "$T/last.err" "job.yaml: not a regular file \(a FIFO\)" "it names the snapshot and what it is"
expect_status 2 "dtrain validate of a FIFO returns, refused" timeout 10 "$DTRAIN" validate "$T/runs/quick-29991231-000000-spec/job.yaml"

# --- 3. a link out of a run's checkpoint directory -----------------------------
# `dtrain sample RUN_DIR` takes the newest checkpoint it lists there: a name
# planted as a link to a file outside is not followed.
mkdir -p "$T/runs/quick-29991231-000000-link/checkpoints"
"$PY" "$CRAFT" declare "$T/elsewhere.safetensors"
ln -s "$T/elsewhere.safetensors" "$T/runs/quick-29991231-000000-link/checkpoints/step_00000009.safetensors"
expect_status 1 "sample of a run whose newest checkpoint is a link is refused" \
  timeout 10 "$DTRAIN" sample "$T/runs/quick-29991231-000000-link" -n 1
contains "$T/last.err" "step_00000009.safetensors: a symbolic link, which is not followed" \
  "it says the link is not followed"

# --- 4. a FIFO as a rank's log -------------------------------------------------
# A run directory used again (--resume, a Slurm requeue) appends to its attempts' logs.
cp -r "$run" "$T/runs/quick-29991231-000000-log"
rm "$T/runs/quick-29991231-000000-log/attempt_0/rank_0.out"
mkfifo "$T/runs/quick-29991231-000000-log/attempt_0/rank_0.out"
expect_status 1 "launch --resume with a FIFO as rank 0's log returns, refused" \
  timeout 10 "$DTRAIN" launch quick.yaml --resume "$T/runs/quick-29991231-000000-log"
contains "$T/last.err" "attempt_0/rank_0.out: not a regular file \(a FIFO\)" "it names the log file and what it is"
