#!/usr/bin/env bash
# test_hf.sh - the Hugging Face round trip (issue 24), against transformers in .venv:
# a dtrain gpt2 checkpoint goes through `dtrain export hf` and
# GPT2LMHeadModel.from_pretrained gives dtrain's logits to 1e-5; the exported
# directory read as trainer.init_from reads it gives the checkpoint's
# parameters bit for bit; a model Hugging Face saved (fp32, fp16, bf16, and
# one of GPT-2's 50257-token vocabulary, which dtrain pads) loads the same way
# and gives transformers' logits; greedy `dtrain sample` is transformers'
# greedy generate.  Bad input gets its sentence and a non-zero exit: wrong
# shapes, a missing tensor, a PyTorch pickle, a non-gpt2 checkpoint, a prompt
# out of the vocabulary, an export over a non-empty directory.
# dtrain's side runs through tests/helpers/hf_gpt2.c (the library calls the
# trainer and the CLI make); transformers' through hf_gpt2.py beside this file.
. "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/../.."

H=${BUILD:-build}/tests/helpers/hf_gpt2
PY="python3 tests/integration/hf_gpt2.py"
if ! python3 -c 'import transformers, safetensors' 2>/dev/null; then
  not_ok "python3 has transformers and safetensors (scripts/install-deps.sh installs them into .venv)"
  exit 1
fi
if [ ! -x "$H" ]; then
  not_ok "the helper $H is built (make test builds tests/helpers/)"
  exit 1
fi
TOK=3,1,4,1,5,9,2,6,5,3,5,8,9,7,9,3
SPEC="2 4 32 256 16" # n_layer n_head n_embd vocab_size block_size

# --- dtrain's checkpoints, exported; Hugging Face's models, saved ------------------
GPT2V="1 2 16 50257 16" # GPT-2's vocabulary, padded to 50304 inside dtrain
check "a small gpt2 checkpoint (2 layers, 4 heads, 32 wide, 256 tokens)" $H init "$T/ck" $SPEC 7
check "one of GPT-2's vocabulary" $H init "$T/ckv" $GPT2V 11
expect_status 0 "dtrain export hf writes the directory" "$DTRAIN" export hf "$T/ck" -o "$T/hf"
contains "$T/last.out" "wrote $T/hf/model.safetensors and $T/hf/config.json from $T/ck/step_00000001.safetensors" \
  "it says what it wrote from which checkpoint"
check "the directory holds model.safetensors and config.json only" \
  test "$(ls "$T/hf" | tr '\n' ' ')" = "config.json model.safetensors "
expect_status 0 "the GPT-2 vocabulary's checkpoint exports" "$DTRAIN" export hf "$T/ckv" -o "$T/hfv"
# transformers' side in one process: load the exports, save models of its own, edit files.
hf=(logits "$T/hf" $TOK "$T/hf.f32" + generate "$T/hfv" 50256,464 12 "$T/greedy")
hf+=(+ sample "$T/hfv" 50256,464 12 0.9 40 7 "$T/sampled")
for dt in f32 f16 bf16; do
  hf+=(+ make "$T/saved-$dt" $SPEC 3 $dt + logits "$T/saved-$dt" $TOK "$T/saved-$dt.hf")
done
hf+=(+ make "$T/saved-v" $GPT2V 5 + logits "$T/saved-v" 50256,464,3290 "$T/saved-v.hf")
hf+=(+ edit "$T/saved-f32/model.safetensors" "$T/grown.safetensors" grow transformer.h.1.attn.c_proj.weight)
hf+=(+ edit "$T/saved-f32/model.safetensors" "$T/missing.safetensors" drop transformer.h.0.mlp.c_fc.bias)
check "transformers loads the exports and saves models of its own" sh -c '"$@" >"$0" 2>&1' "$T/py.log" $PY "${hf[@]}"
grep -v "Writing model shards\|it/s\]" "$T/py.log" | sed 's/^/    /' | head -n 20

$H logits "$T/ck" $TOK "$T/dt.f32"
check "GPT2LMHeadModel.from_pretrained of the export gives dtrain's logits to 1e-5" \
  $PY compare "$T/dt.f32" "$T/hf.f32"
check "the export read as trainer.init_from reads it is the checkpoint, bit for bit" $H same "$T/ck" "$T/hf"
check "(and for GPT-2's vocabulary: the padding never reaches the file)" $H same "$T/ckv" "$T/hfv"
expect_status 1 "an export over a non-empty directory is refused" "$DTRAIN" export hf "$T/ck" -o "$T/hf"
contains "$T/last.err" "$T/hf is not empty \(it holds .*\): give a new or empty directory, or --force" \
  "the refusal names the directory and --force"
expect_status 0 "--force replaces the two files" "$DTRAIN" export hf "$T/ck" -o "$T/hf" --force
mkdir -p "$T/run/checkpoints" && cp "$T/ck/step_00000001.safetensors" "$T/run/checkpoints/"
expect_status 0 "a run directory (its checkpoints/) exports" "$DTRAIN" export hf "$T/run" -o "$T/hf-run"

for dt in f32 f16 bf16; do
  $H logits-hf "$T/saved-$dt" $SPEC $TOK "$T/saved-$dt.dt"
  check "a $dt model that save_pretrained wrote loads by init_from and gives transformers' logits to 1e-5" \
    $PY compare "$T/saved-$dt.dt" "$T/saved-$dt.hf"
done
$H logits-hf "$T/saved-v" $GPT2V 50256,464,3290 "$T/saved-v.dt"
check "GPT-2's vocabulary of 50257 (padded inside dtrain) gives transformers' logits to 1e-5" \
  $PY compare "$T/saved-v.dt" "$T/saved-v.hf"

# --- generation: greedy dtrain sample is transformers' greedy generate ----------------
want=$(cat "$T/greedy")
expect_status 0 "dtrain sample runs on a checkpoint of GPT-2's vocabulary" \
  "$DTRAIN" sample "$T/ckv" --tokens 50256,464 -n 12 --temperature 0
check "greedy dtrain sample is transformers' greedy generate ($want)" \
  test "$(cat "$T/last.out")" = "50256 464 $want"
expect_status 0 "dtrain sample with temperature 0.9, top-k 40, seed 7" \
  "$DTRAIN" sample "$T/ckv" --tokens 50256,464 -n 12 --temperature 0.9 --top-k 40 --seed 7
check "is sample.h's algorithm on transformers' logits ($(cat "$T/sampled"))" cmp -s "$T/last.out" "$T/sampled"
expect_status 0 "without a prompt GPT-2's vocabulary starts at <|endoftext|>" \
  "$DTRAIN" sample "$T/ckv" -n 3 --seed 5
contains "$T/last.out" "^50256( [0-9]+){3}$" "the sample is <|endoftext|> and 3 token ids"
expect_status 0 "a byte-level model samples text" \
  "$DTRAIN" sample "$T/ck" --prompt "In the beginning" -n 40 --seed 1 --top-k 50
contains "$T/last.out" "^In the beginning" "the sample starts with its prompt, as text"
cp "$T/last.out" "$T/sample1"
expect_status 0 "the same seed gives the same sample" \
  "$DTRAIN" sample "$T/ck" --prompt "In the beginning" -n 40 --seed 1 --top-k 50
check "(byte for byte)" cmp -s "$T/last.out" "$T/sample1"
expect_status 0 "a run directory samples from its newest checkpoint" \
  "$DTRAIN" sample "$T/run" --prompt "In the beginning" -n 40 --seed 1 --top-k 50
check "(the same checkpoint, the same sample)" cmp -s "$T/last.out" "$T/sample1"

# --- bad input ----------------------------------------------------------------------
expect_status 1 "init_from weights of another width are refused" $H logits-hf "$T/saved-f32" 2 4 64 256 16 $TOK "$T/x"
contains "$T/last.err" "config.json: n_embd is 32, this model's trainer.model.n_embd is 64: set n_embd: 32" \
  "config.json's n_embd is named with the key to change"
expect_status 1 "a .safetensors file of another width is refused" \
  $H logits-hf "$T/saved-f32/model.safetensors" 2 4 64 256 16 $TOK "$T/x"
contains "$T/last.err" "tensor transformer.wte.weight is \[256, 32\] in the file, \[256, 64\] in this model: set trainer.model.n_embd: 32 to match the file" \
  "the message names the tensor, both shapes and the key"
expect_status 1 "a tensor of the wrong shape is refused" $H logits-hf "$T/grown.safetensors" $SPEC $TOK "$T/x"
contains "$T/last.err" "tensor transformer.h.1.attn.c_proj.weight is \[33, 32\] in the file, \[32, 32\] in this model" \
  "the message names it"
expect_status 1 "a missing tensor is refused" $H logits-hf "$T/missing.safetensors" $SPEC $TOK "$T/x"
contains "$T/last.err" "no tensor transformer.h.0.mlp.c_fc.bias \(nor h.0.mlp.c_fc.bias\) in the file" "the message names it"
expect_status 1 "a model of more layers is refused" $H logits-hf "$T/saved-f32" 1 4 32 256 16 $TOK "$T/x"
contains "$T/last.err" "n_layer is 2, this model's trainer.model.n_layer is 1: set n_layer: 2" "the message says n_layer"
mkdir -p "$T/pickle" && echo x >"$T/pickle/pytorch_model.bin"
expect_status 1 "a pytorch_model.bin is refused" $H logits-hf "$T/pickle" $SPEC $TOK "$T/x"
contains "$T/last.err" "pytorch_model.bin is a PyTorch pickle, which dtrain does not read .*save_pretrained" \
  "the message says how to convert it"
check "an MLP checkpoint" $H init-mlp "$T/mlp"
expect_status 1 "dtrain export hf refuses a non-gpt2 checkpoint" "$DTRAIN" export hf "$T/mlp" -o "$T/mlp-hf"
contains "$T/last.err" "holds a model of type mlp; Hugging Face export writes GPT-2 \(trainer.model.type: gpt2\) only" \
  "the message says why"
check "and writes nothing" test ! -e "$T/mlp-hf"
expect_status 1 "dtrain sample refuses a non-gpt2 checkpoint" "$DTRAIN" sample "$T/mlp" --tokens 1
contains "$T/last.err" "holds a model of type mlp; dtrain sample needs a language model" "the message says why"
expect_status 1 "a prompt token out of the vocabulary is refused" "$DTRAIN" sample "$T/ck" --tokens 3,300
contains "$T/last.err" "prompt token 300 \(at 1\) is outside this model's vocabulary of 256 tokens \(0..255\)" \
  "the message names the token and the vocabulary"
expect_status 1 "an empty prompt is refused" "$DTRAIN" sample "$T/ck" --prompt ""
contains "$T/last.err" "--prompt is empty" "the message says so"
expect_status 1 "a prompt longer than block_size is refused" "$DTRAIN" sample "$T/ck" --prompt "0123456789abcdefX"
contains "$T/last.err" "the prompt has 17 bytes, more than this model's block_size 16" "the message says so"
expect_status 1 "text is refused for a vocabulary that is not bytes" "$DTRAIN" sample "$T/ckv" --prompt "hello"
contains "$T/last.err" "vocabulary has 50257 tokens, not bytes: give the prompt as token ids with --tokens" \
  "the message says to give ids"
expect_status 2 "export without -o is a usage error" "$DTRAIN" export hf "$T/ck"
expect_status 2 "a bad --temperature is a usage error" "$DTRAIN" sample "$T/ck" --temperature -1

# --- the spec key ---------------------------------------------------------------------
cat >"$T/init.yaml" <<EOF
name: init
trainer:
  model: {type: mlp}
  init_from: $T/hf
EOF
expect_status 2 "init_from with an MLP is refused" "$DTRAIN" validate "$T/init.yaml"
contains "$T/last.err" "trainer.init_from: loads Hugging Face GPT-2 weights, and model.type is mlp" "the message says why"

# --- through the trainer: init_from in a job, and a checkpoint taking precedence ------------
cat docs/*.md >"$T/text.txt"
"$DTRAIN" data bytes "$T/text.txt" -o "$T/bytes" --val-fraction 0.1 >/dev/null
job() { # steps
  cat <<EOF
name: init
trainer:
  model: {type: gpt2, n_layer: 2, n_head: 4, n_embd: 32, vocab_size: 256, block_size: 16}
  init_from: $T/hf
  data: {dataset: tokens, train: "$T/bytes/train_*.bin", val: "$T/bytes/val_*.bin", batch_size: 4, seq_len: 16}
  steps: $1
  optimizer: {lr: 1e-30, weight_decay: 0}
  checkpoint: {every_steps: 1, dir: $T/ckb}
EOF
}
job 1 >"$T/job1.yaml"
job 2 >"$T/job2.yaml"
expect_status 0 "a gpt2 spec with init_from validates" "$DTRAIN" validate "$T/job1.yaml"
expect_status 0 "a gpt2 job with init_from runs" "$DTRAIN" launch "$T/job1.yaml" --log-dir "$T/runs"
contains "$T/last.err" "read the Hugging Face weights in $T/hf" "it says where its weights came from"
check "after a step of lr 1e-30 its checkpoint holds the exported weights, bit for bit" \
  $H same "$T/ckb/step_00000001.safetensors" "$T/hf"
expect_status 0 "the same job, longer, resumes" "$DTRAIN" launch "$T/job2.yaml" --log-dir "$T/runs"
contains "$T/last.err" "resuming from $T/ckb/step_00000001.safetensors" "a checkpoint takes precedence over init_from"
