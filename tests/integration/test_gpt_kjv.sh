#!/usr/bin/env bash
# test_gpt_kjv.sh - a GPT on token shards through `dtrain launch` (issue 24):
# `dtrain data bytes` writes llm.c shards of the King James Bible (Debian's
# bible-kjv-text, printed by `bible`) and refuses bad input; a short version
# of configs/gpt-kjv.yaml brings the validation loss below 2.5 nats per byte
# (uniform bytes: 5.55; the bytes' own frequencies: about 2.9) and, when the
# build has a sampler, prints printable KJV-like text; a 2-rank shuffled run
# over several shards that crosses an epoch and resumes from a checkpoint
# ends with the same checkpoint, byte for byte, as one that never stopped;
# a bad shard and a model spec of the wrong kind fail with a sentence.
. "$(dirname "$0")/lib.sh"

if ! command -v bible >/dev/null; then
  not_ok "the bible reader is installed (scripts/install-deps.sh: bible-kjv-text bible-kjv)"
  exit 1
fi
bible gen1:1-rev22:21 </dev/null >"$T/kjv.txt"
check "bible prints the whole KJV (over 4 MB)" test "$(stat -c %s "$T/kjv.txt")" -gt 4000000

# --- dtrain data bytes ---------------------------------------------------------
expect_status 0 "dtrain data bytes writes the KJV as shards" "$DTRAIN" data bytes "$T/kjv.txt" -o "$T/kjv"
contains "$T/last.out" "train_000000.bin: [0-9]+ tokens" "it names each shard it wrote"
cat >"$T/shard.py" <<'PY'
import struct, sys
text = open(sys.argv[1], "rb").read()
parts = []
for name in sys.argv[2:]:
    d = open(name, "rb").read()
    magic, version, n = struct.unpack("<3i", d[:12])
    assert (magic, version) == (20240520, 1), (magic, version)
    assert len(d) == 1024 + 2 * n, (len(d), n)
    parts.append(bytes(struct.unpack("<%dH" % n, d[1024:])))
assert b"".join(parts) == text, "shards are not the text"
assert len(parts[-1]) == int(len(text) * 0.1), "val is not the last 10%"
PY
check "the shards are llm.c's format and hold the text (train, then the last 10% as val)" \
  python3 "$T/shard.py" "$T/kjv.txt" "$T/kjv/train_000000.bin" "$T/kjv/val_000000.bin"
expect_status 1 "an unreadable input fails" "$DTRAIN" data bytes "$T/nonexistent.txt" -o "$T/x"
contains "$T/last.err" "nonexistent.txt: cannot open" "the message names the input"
: >"$T/empty.txt"
expect_status 1 "an empty input fails" "$DTRAIN" data bytes "$T/kjv.txt" "$T/empty.txt" -o "$T/x"
contains "$T/last.err" "empty.txt: is empty" "the message names the empty input"
expect_status 2 "a fraction of 1 is a usage error" "$DTRAIN" data bytes "$T/kjv.txt" -o "$T/x" --val-fraction 1
contains "$T/last.err" "--val-fraction needs a number in \[0, 1\), got '1'" "the message gives the range"
# a second run into the same directory would leave the first run's extra shards for the globs
"$DTRAIN" data bytes "$T/kjv.txt" -o "$T/again" --shard-tokens 2000000 >/dev/null
expect_status 1 "writing into a directory that holds shards is refused" \
  "$DTRAIN" data bytes "$T/kjv.txt" -o "$T/again" --shard-tokens 100000000
contains "$T/last.err" "again already holds shards .*--force" "the message names the directory and --force"
expect_status 0 "--force replaces them" "$DTRAIN" data bytes "$T/kjv.txt" -o "$T/again" --force
check "and no shard of the first run is left (one train and one val shard)" \
  test "$(ls "$T/again" | tr '\n' ' ')" = "train_000000.bin val_000000.bin "

# --- a short gpt-kjv ------------------------------------------------------------
cat >"$T/short.yaml" <<EOF
name: kjv-short
nproc_per_node: 1
trainer:
  model: {type: gpt2, n_layer: 2, n_head: 2, n_embd: 64, vocab_size: 256, block_size: 64}
  data: {dataset: tokens, train: "$T/kjv/train_*.bin", val: "$T/kjv/val_*.bin", batch_size: 8, seq_len: 64}
  steps: 400
  optimizer: {lr: 3e-3, betas: [0.9, 0.95], weight_decay: 0.0, grad_clip: 1.0}
  eval: {batches: 8}
  sample: {tokens: 100, prompt: "And God said"}
  log_every_steps: 100
  checkpoint: {every_steps: 0, dir: $T/short-ckpt, resume: never}
EOF
expect_status 0 "a short gpt-kjv trains (2 layers, 64 wide, 400 steps)" \
  timeout "$(limit_s 240)" "$DTRAIN" launch "$T/short.yaml" --log-dir "$T/runs"
run=$(sed -n 's/.*logs and summary.json in \(.*\)$/\1/p' "$T/last.err" | tail -n 1)
val=$(sed -n 's/.*val_loss \([0-9.]*\).*/\1/p' "$T/last.out" | tail -n 1)
check "its validation loss ($val) is below 2.5" python3 -c "import sys; sys.exit(not float('$val') < 2.5)"
contains "$run/metrics.jsonl" '"tokens_per_s": [0-9]' "metrics rows carry tokens_per_s"
contains "$run/metrics.jsonl" '"val_loss": [0-9]' "evaluation rows carry val_loss"
contains "$run/trainer_summary.json" '"val_loss": [0-9]' "the summary has the validation loss"
contains "$T/last.out" "done: 400 steps, final loss [0-9.]+, val loss [0-9.]+, [0-9]+ tokens/s" \
  "the worker's last line gives val loss and tokens/s"
if grep -q "no sampler" "$T/last.err" "$T/last.out"; then
  not_ok "the trainer printed a sample (this build says it has no sampler)"
else
  python3 - "$T/last.out" >"$T/sample.txt" <<'PY'
import sys
# the lines after "sample step 400:" up to the worker's "done:" line, without the launcher's prefix
lines = [l[len("[rank 0] "):] if l.startswith("[rank 0] ") else l for l in open(sys.argv[1]).read().split("\n")]
start = lines.index("sample step 400:") + 1
end = next(i for i in range(start, len(lines)) if lines[i].startswith("done:"))
print("\n".join(lines[start:end]))
PY
  cat >"$T/printable.py" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
bad = [c for c in t if not (c.isprintable() or c == "\n")]
assert not bad and "\\x" not in t, "not printable: %r" % t
assert re.search(r"[A-Za-z]+[,;:]? [a-z]+", t), "no words: %r" % t
PY
  check "the sample starts with its prompt" grep -q "And God said" "$T/sample.txt"
  check "the sample is printable, word-like text" python3 "$T/printable.py" "$T/sample.txt"
fi

# --- resume at the exact token: 2 ranks, shuffled, several shards, past an epoch ---
head -c 40000 "$T/kjv.txt" >"$T/small.txt"
"$DTRAIN" data bytes "$T/small.txt" -o "$T/small" --shard-tokens 8000 >/dev/null
resume() { # name steps ckpt_dir
  cat <<EOF
name: $1
nproc_per_node: 2
trainer:
  model: {type: gpt2, n_layer: 1, n_head: 2, n_embd: 32, vocab_size: 256, block_size: 64}
  data: {dataset: tokens, train: "$T/small/train_*.bin", val: "$T/small/val_*.bin", batch_size: 8, seq_len: 64,
         shuffle: true}
  steps: $2
  optimizer: {lr: 1e-3, weight_decay: 0.0}
  eval: {batches: 0}
  log_every_steps: 10
  seed: 3
  checkpoint: {every_steps: 20, dir: $3, resume: auto}
EOF
}
resume whole 45 "$T/whole" >"$T/whole.yaml"
resume part 20 "$T/part" >"$T/part20.yaml"
resume part 45 "$T/part" >"$T/part45.yaml"
expect_status 0 "a 2-rank shuffled run of 45 steps over 5 shards (31 batches an epoch) runs" \
  "$DTRAIN" launch "$T/whole.yaml" --log-dir "$T/runs"
expect_status 0 "the same run stopped at step 20" "$DTRAIN" launch "$T/part20.yaml" --log-dir "$T/runs"
expect_status 0 "and resumed to step 45" "$DTRAIN" launch "$T/part45.yaml" --log-dir "$T/runs"
contains "$T/last.err" "resuming from $T/part/step_00000020.safetensors" "it resumes from step 20"
check "the resumed run's last checkpoint is the uninterrupted run's, byte for byte" \
  cmp "$T/whole/step_00000045.safetensors" "$T/part/step_00000045.safetensors"
contains "$T/whole/step_00000045.safetensors" '"data_shard":"[0-9]+","data_offset":"[0-9]+"' \
  "a token run's checkpoint records its shard and offset"
rm "$T/small/train_000001.bin"
expect_status 1 "resuming after a shard went away fails" "$DTRAIN" launch "$T/part45.yaml" --log-dir "$T/runs"
contains "$T/last.err" "the shards changed since" "the message says the shards changed"

# --- bad input -------------------------------------------------------------------
head -c 3000 "$T/kjv/val_000000.bin" >"$T/small/train_000001.bin"
expect_status 1 "a truncated shard fails the job" "$DTRAIN" launch "$T/whole.yaml" --log-dir "$T/runs"
contains "$T/last.err" "train_000001.bin: byte 8: the header counts [0-9]+ tokens" "the error names the file and the offset"
sed 's/vocab_size: 256/vocab_size: 100/' "$T/short.yaml" >"$T/vocab.yaml"
expect_status 1 "bytes above the vocabulary fail the job" "$DTRAIN" launch "$T/vocab.yaml" --log-dir "$T/runs"
contains "$T/last.err" "train_000000.bin: byte [0-9]+: token [0-9]+ is not below the model's vocab_size 100" \
  "the error names the file, the byte offset and the token"
sed 's/type: gpt2,/type: mlp,/' "$T/short.yaml" >"$T/mlp.yaml"
expect_status 2 "dtrain validate refuses mlp on tokens" "$DTRAIN" validate "$T/mlp.yaml"
contains "$T/last.err" "tokens are read by a language model: set model.type: gpt2" "with a sentence"
