#!/usr/bin/env bash
# test_zero.sh - ZeRO stage 1 (trainer.ddp.zero: 1) under `dtrain launch`: the
# MLP trainer on 2 and 3 ranks over tcp and shm (and 3 over mpi under mpirun) writes, with zero 1, the same
# final checkpoint byte for byte as with zero 0 (parameters, whole moments,
# counters); a checkpoint saved by 2 ranks with zero 1 resumes with zero 0 and
# ends where a zero 0 run that never stopped ends; resumed on 1 rank it is
# refused for the data order (the world size), not for the optimizer state.
. "$(dirname "$0")/lib.sh"

job() { # name ranks backend zero steps ckpt_dir [checkpoint every]
  cat <<EOF
name: $1
nproc_per_node: $2
backend: $3
${MPI_LINES:-}
trainer:
  model: {hidden: [96, 32]}
  data: {batch_size: 32, workers: 1}
  steps: $5
  optimizer: {grad_clip: 0.05}
  scheduler: ${SCHED:-{type: cosine, warmup_steps: 2, min_lr: 1e-4\}}
  ddp: {zero: $4, first_bucket_mb: 0.01, bucket_cap_mb: 0.05, desync_check_every: 1}
  checkpoint: {every_steps: ${7:-0}, dir: $6, keep: 10, resume: auto}
  eval: {every_epochs: 0}
  log_every_steps: 2
EOF
}

for backend in tcp shm; do
  for ranks in 2 3; do
    for zero in 0 1; do
      job "z$zero" "$ranks" "$backend" "$zero" 6 "$T/$backend$ranks-z$zero" >"$T/z.yaml"
      expect_status 0 "$ranks ranks over $backend with zero $zero run" "$DTRAIN" launch "$T/z.yaml" --log-dir "$T/runs"
    done
    contains "$T/last.err" "ZeRO-1: AdamW's moments in $ranks shards of [0-9]+ floats" "zero 1 says it shards the moments"

    check "$ranks ranks over $backend: zero 1's final checkpoint is zero 0's, byte for byte" \
      cmp "$T/$backend$ranks-z0/step_00000006.safetensors" "$T/$backend$ranks-z1/step_00000006.safetensors"
  done
done

# Under mpirun with backend: mpi (MPI_Iallgather in place, comm/mpi/).
if command -v mpirun >/dev/null; then
  root=false; [ "$(id -u)" = 0 ] && root=true
  MPI_LINES="scheduler: mpirun
mpirun: {allow_run_as_root: $root, oversubscribe: true, interfaces: [lo],
         extra_args: [--mca, btl_vader_single_copy_mechanism, none]}"
  for zero in 0 1; do
    job "m$zero" 3 mpi "$zero" 6 "$T/mpi3-z$zero" >"$T/m.yaml"
    expect_status 0 "3 ranks over mpi with zero $zero run" "$DTRAIN" launch "$T/m.yaml" --log-dir "$T/runs"
  done
  check "3 ranks over mpi: zero 1's final checkpoint is zero 0's, byte for byte" \
    cmp "$T/mpi3-z0/step_00000006.safetensors" "$T/mpi3-z1/step_00000006.safetensors"
  MPI_LINES=
else
  not_ok "mpirun is not installed (scripts/install-deps.sh installs openmpi-bin)"
fi

# Saved with zero 1 at step 4, resumed with zero 0 to step 8: a zero 0 run of 8 steps' bytes
# (a constant rate: a job of 4 steps and one of 8 would have different cosines).
export SCHED="{type: constant}"
job whole 2 tcp 0 8 "$T/whole" 4 >"$T/whole.yaml"
expect_status 0 "an 8-step zero 0 run on 2 ranks" "$DTRAIN" launch "$T/whole.yaml" --log-dir "$T/runs"
job first 2 tcp 1 4 "$T/res" 4 >"$T/first.yaml"
expect_status 0 "4 steps with zero 1 on 2 ranks, checkpointed" "$DTRAIN" launch "$T/first.yaml" --log-dir "$T/runs"
job second 2 tcp 0 8 "$T/res" 4 >"$T/second.yaml"
expect_status 0 "resumed with zero 0 to step 8" "$DTRAIN" launch "$T/second.yaml" --log-dir "$T/runs"
contains "$T/last.err" "resuming from $T/res/step_00000004.safetensors" "it resumed from zero 1's checkpoint"
check "the resumed run ends with the uninterrupted run's checkpoint, byte for byte" \
  cmp "$T/whole/step_00000008.safetensors" "$T/res/step_00000008.safetensors"

# On one rank the data order would differ: refused for the world size, whatever zero says.
job one 1 tcp 0 8 "$T/res" 4 >"$T/one.yaml"
rm -f "$T/res/step_00000008.safetensors"
expect_status 1 "zero 1's 2-rank checkpoint on 1 rank is refused" "$DTRAIN" launch "$T/one.yaml" --log-dir "$T/runs"
contains "$T/last.err" "saved with seed 0, 2 ranks, batch 32; this run has seed 0, 1 ranks, batch 32 \(the data order would differ" \
  "the refusal is the data order's world-size rule"
