#!/usr/bin/env bash
# test_trainer.sh - the bundled trainer under `dtrain launch`: the quickstart job
# (4 ranks on CPU) trains Fashion-MNIST to >= 88% test accuracy and leaves its
# metrics, checkpoints and summary; resume continues from an absolute
# checkpoint dir; bad input stops a worker with a message naming the culprit.
# Issue 26: a run whose loss turns NaN fails naming the step and checkpoints
# nothing diverged; links planted at a checkpoint's temporary and final names
# are not written through; a full checkpoint disk (a small tmpfs) or a
# file-size limit fails the job with the file and the system's reason.
. "$(dirname "$0")/lib.sh"

# --- errors, first (cheap) --------------------------------------------------
cat >"$T/cmd.yaml" <<'EOF'
name: cmd
command: [true]
EOF
expect_status 1 "worker refuses a job without trainer:" "$DTRAIN" worker "$T/cmd.yaml"
contains "$T/last.err" "no trainer: section" "the message says the trainer section is missing"

cat >"$T/nodata.yaml" <<'EOF'
name: nodata
nproc_per_node: 2
trainer:
  model: {hidden: [16]}
  data: {path: /nonexistent/fmnist}
  steps: 5
EOF
expect_status 1 "a launched trainer with a missing data set fails" "$DTRAIN" launch "$T/nodata.yaml" --log-dir "$T/runs"
contains "$T/last.err" "/nonexistent/fmnist/train-images-idx3-ubyte.gz" "the error names the missing file"
contains "$T/last.err" "rank [01]'s error report \(.*rank_[01]\.error\.json\) says:" \
  "the launcher's failure report quotes the worker's TORCHELASTIC_ERROR_FILE"
contains "$T/last.err" "  > DtrainWorkerError: rank [01]: .*/nonexistent/fmnist/train-images-idx3-ubyte.gz" \
  "the quoted report is the trainer's own sentence"

# --- resume from an absolute checkpoint dir ---------------------------------
small() { # steps
  cat <<EOF
name: small
nproc_per_node: 2
trainer:
  model: {hidden: [32]}
  data: {batch_size: 32, workers: 1}
  steps: $1
  scheduler: {type: constant}
  checkpoint: {every_steps: 20, dir: $T/ckpt, keep: 2, resume: auto}
  eval: {every_epochs: 0}
EOF
}
small 40 >"$T/s40.yaml"
small 60 >"$T/s60.yaml"
expect_status 0 "a 2-rank job of 40 steps runs" "$DTRAIN" launch "$T/s40.yaml" --log-dir "$T/runs"
check "its checkpoints are at steps 20 and 40" test -f "$T/ckpt/step_00000040.safetensors" -a -f "$T/ckpt/step_00000020.safetensors"
expect_status 0 "a 60-step job on the same dir resumes" "$DTRAIN" launch "$T/s60.yaml" --log-dir "$T/runs"
contains "$T/last.err" "resuming from $T/ckpt/step_00000040.safetensors" "it says where it resumes from"
# The run directory is the one the launcher names (two runs in one second sort by their random suffix).
s60=$(sed -n 's/.*logs and summary.json in \(.*\)$/\1/p' "$T/last.err" | tail -n 1)
contains "$s60/trainer_summary.json" '"resumed_from_step": 40' "the summary records the resume"
contains "$s60/summary.json" '^  "steps": 60,$' "the launcher's summary.json carries the trainer's step count"
check "keep: 2 leaves two checkpoints" test "$(ls "$T/ckpt" | grep -c '^step_')" = 2

# --- issue 26: divergence, planted links, write errors ------------------------
cat >"$T/div.yaml" <<EOF
name: div
nproc_per_node: 2
trainer:
  model: {hidden: [32]}
  data: {batch_size: 32, workers: 1}
  steps: 40
  optimizer: {lr: 1e30}
  scheduler: {type: constant}
  checkpoint: {every_steps: 1, dir: $T/divckpt, keep: 100, resume: never}
  eval: {every_epochs: 0}
EOF
expect_status 1 "a run whose loss turns NaN (lr 1e30) fails" "$DTRAIN" launch "$T/div.yaml" --log-dir "$T/runs"
contains "$T/last.err" "rank [01]: training diverged at step [0-9]+: loss is nan" "the error names the step and the NaN loss"
contains "$T/last.err" "job div failed with exit status 1" "the launcher says the job failed"
div=$(sed -n 's/.*rank [01]: training diverged at step \([0-9]*\).*/\1/p' "$T/last.err" | head -n 1)
# Every checkpoint left is of a step before the divergence, and holds finite numbers only.
cat >"$T/finite.py" <<'PY'
import array, math, os, struct, sys
d, div = sys.argv[1], int(sys.argv[2])
names = [n for n in os.listdir(d) if n.startswith("step_")]
assert names, "no checkpoint at all"
for n in names:
    assert int(n[5:-12]) < div, n
    b = open(os.path.join(d, n), "rb").read()
    h = struct.unpack("<Q", b[:8])[0]
    assert all(math.isfinite(x) for x in array.array("f", b[8 + h:])), n
PY
check "no checkpoint of the diverged step or later, none with a NaN" python3 "$T/finite.py" "$T/divckpt" "${div:-0}"

small 40 | sed "s|dir: $T/ckpt,|dir: $T/ckpt-links,|; s|resume: auto|resume: never|" >"$T/links.yaml"
mkdir -p "$T/ckpt-links"
echo precious >"$T/victim"
ln -s "$T/victim" "$T/ckpt-links/.step_00000020.safetensors.tmp"
ln -s "$T/victim" "$T/ckpt-links/step_00000040.safetensors"
expect_status 0 "a job whose checkpoint dir holds planted links runs" "$DTRAIN" launch "$T/links.yaml" --log-dir "$T/runs"
check "the links' target is untouched" test "$(cat "$T/victim")" = precious
check "the checkpoint replaced the link at its name" test -f "$T/ckpt-links/step_00000040.safetensors" -a ! -L "$T/ckpt-links/step_00000040.safetensors"
check "no temporary name is left" test -z "$(ls -A "$T/ckpt-links" | grep '^\.')"

# A checkpoint of this model is about 300 KB; 128 KiB of tmpfs or of file size cannot hold it.
# One rank: the limit of `ulimit -f` holds for the shm communicator's segment too.
small 40 | sed "s|dir: $T/ckpt,|dir: $T/full/ckpt,|; s|nproc_per_node: 2|nproc_per_node: 1|" >"$T/full.yaml"
mkdir -p "$T/full"
if unshare -m true 2>/dev/null; then
  expect_status 1 "a job whose checkpoint disk is full fails" unshare -m sh -c \
    'mount -t tmpfs -o size=128k tmpfs "$1" && exec "$2" launch "$3" --log-dir "$4"' sh "$T/full" "$DTRAIN" "$T/full.yaml" "$T/runs"
  contains "$T/last.err" "rank 0: $T/full/ckpt/step_00000020.safetensors: write: No space left on device" \
    "the error names the checkpoint and ENOSPC"
else
  not_ok "a mount namespace (unshare -m, as root) for the full-disk check: not available here"
fi
expect_status 1 "a job under a file-size limit too small for its checkpoint fails" \
  bash -c 'ulimit -f 128; exec "$@"' sh "$DTRAIN" launch "$T/full.yaml" --log-dir "$T/runs"
contains "$T/last.err" "rank 0: $T/full/ckpt/step_00000020.safetensors: write: File too large" \
  "the error names the checkpoint and EFBIG"

# --- the quickstart: 4 ranks, 4 epochs ---------------------------------------
start=$(date +%s)
expect_status 0 "configs/quickstart.yaml trains on 4 ranks" "$DTRAIN" launch configs/quickstart.yaml --log-dir "$T/runs"
echo "# quickstart took $(( $(date +%s) - start )) s"
run=$(ls -d "$T"/runs/quickstart-*)
sum="$run/trainer_summary.json"
check "trainer_summary.json is written" test -s "$sum"
acc=$(sed -n 's/.*"test_accuracy": \([0-9.]*\).*/\1/p' "$sum")
echo "# quickstart test accuracy $acc"
check "test accuracy >= 0.88 (got $acc)" awk -v a="$acc" 'BEGIN { exit !(a >= 0.88) }'
contains "$sum" '"steps": 940,' "4 epochs of 60000/(4x64) are 940 steps"
contains "$sum" '"world_size": 4,' "the summary counts 4 ranks"
check "four evaluation rows" test "$(grep -c '"test_accuracy"' "$run/metrics.jsonl")" = 4
contains "$run/metrics.jsonl" '^\{"step": 10, "epoch": [0-9.e-]+, "loss": [0-9.e-]+, "lr": [0-9.e-]+, "beta1": [0-9.e-]+, "grad_norm": [0-9.e-]+, "samples_per_s": [0-9.e+.-]+, "time_s": [0-9.]+, "total_steps": 940, "data_s": [0-9.e-]+, "forward_s": [0-9.e-]+, "backward_s": [0-9.e-]+, "comm_wait_s": [0-9.e-]+, "optimizer_s": [0-9.e-]+\}$' \
  "metrics rows carry step, epoch, loss, lr, beta1, grad_norm, samples_per_s, total_steps and the step-time split"
check "checkpoints at 500 and the end" test -f "$run/checkpoints/step_00000500.safetensors" -a -f "$run/checkpoints/step_00000940.safetensors"
contains "$run/summary.json" '"status": "succeeded"' "the launcher's summary says succeeded"
contains "$run/summary.json" "^  \"test_accuracy\": $acc,\$" "summary.json has the trainer's test_accuracy"
contains "$run/summary.json" '^  "final_loss": [0-9.e-]+,$' "summary.json has final_loss"
contains "$run/summary.json" '^  "steps": 940,$' "summary.json has steps"
contains "$run/summary.json" '^  "samples_per_s": [0-9.e+]+,$' "summary.json has samples_per_s"
check "summary.json stays valid JSON with the trainer's object inside" python3 -c \
  "import json,sys; d=json.load(open(sys.argv[1])); assert d['trainer']['world_size'] == 4" "$run/summary.json"
