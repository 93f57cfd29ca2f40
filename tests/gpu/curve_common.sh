# curve_common.sh - sourced by tests/gpu/test_gpt2_curve.sh and
# tests/gpu/curve_diag.sh: the same tokens, weights and job for dtrain and
# PyTorch's GPT-2.  Reads LAYERS HEADS EMBD VOCAB BLOCK (the shape), B SEQ
# STEPS, LR MIN_LR WARMUP WD, DEVICE, AMP; T is the scratch directory.  Not
# a test and not run alone.

# curve_shape: the peer's shape arguments, in the array `shape`
curve_shape() {
  shape=(--layers "$LAYERS" --heads "$HEADS" --embd "$EMBD" --vocab "$VOCAB" --block "$BLOCK")
}

# curve_text: this tree's prose and C in a fixed order (megabytes of learnable bytes), a quarter more
# than STEPS batches need, into $T/text.txt
curve_text() {
  local need=$((STEPS * B * SEQ + 1))
  { cat docs/*.md README.md
    find base spec comm worker launcher scheduler-adapters -name '*.[ch]' -print0 | LC_ALL=C sort -z | xargs -0 cat
  } 2>/dev/null | head -c $((need + need / 4)) >"$T/text.txt"
}

# curve_spec FILE NAME: dtrain's job, from the peer's initial weights ($T/init.safetensors) and the
# byte shard ($T/data), logging every step; the whole step in a CUDA graph on the GPU
curve_spec() {
  local graph=; [ "$DEVICE" = cuda ] && graph="cuda_graph: true"
  cat >"$1" <<EOF
name: $2
nproc_per_node: 1
trainer:
  model: {type: gpt2, n_layer: $LAYERS, n_head: $HEADS, n_embd: $EMBD, vocab_size: $VOCAB, block_size: $BLOCK}
  init_from: $T/init.safetensors
  data: {dataset: tokens, train: "$T/data/train_*.bin", batch_size: $B, seq_len: $SEQ, shuffle: false}
  steps: $STEPS
  optimizer: {type: adamw, lr: $LR, betas: [0.9, 0.95], eps: 1e-8, weight_decay: $WD, grad_clip: 1.0}
  scheduler: {type: cosine, warmup_steps: $WARMUP, min_lr: $MIN_LR}
  checkpoint: {every_steps: 0, dir: $T/ckpt, resume: never}
  log_every_steps: 1
  seed: 1
  device: $DEVICE
  amp: {dtype: $AMP}
  $graph
EOF
}

# curve_peer_args: the peer's arguments for the same run, in the array `peer` (the caller adds --dtype)
curve_peer_args() {
  curve_shape
  peer=(--device "$DEVICE" "${shape[@]}" --init "$T/init.safetensors" --shards "$T/data/train_*.bin" --batch "$B"
    --seq "$SEQ" --warmup 0 --steps "$STEPS" --schedule cosine --lr-warmup "$WARMUP" --lr "$LR" --min-lr "$MIN_LR"
    --weight-decay "$WD" --log-every 1)
}
