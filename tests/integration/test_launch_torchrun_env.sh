# test_launch_torchrun_env.sh - a rank under `dtrain launch` gets every variable a
# rank gets under torchrun, with torchrun's value where the value is not the run's
# own (its port, run id, error file path).  Both run `sh -c 'env'` as 2 ranks from
# the same minimal environment; torchrun comes from the venv scripts/install-deps.sh
# makes (make test installs it; without it the test fails).
# run-tests: uses port29500
. "$(dirname "$0")/lib.sh"

torchrun=$(command -v torchrun || echo "$PWD/.venv/bin/torchrun")
if [ ! -x "$torchrun" ]; then
  not_ok "torchrun is installed (scripts/install-deps.sh puts it in .venv)"
  exit 1
fi

base=(env -i PATH=/usr/bin:/bin HOME="$HOME")
dump='env | sort >"$OUT.$RANK"'
(cd "$T" && timeout "$(limit_s 300)" "${base[@]}" OUT="$T/torchrun" \
   "$torchrun" --no-python --nproc-per-node 2 sh -c "$dump") >"$T/torchrun.log" 2>&1
check "torchrun ran both ranks" test -s "$T/torchrun.0" -a -s "$T/torchrun.1"

cat >"$T/envjob.yaml" <<EOF
name: envjob
scheduler: local
nproc_per_node: 2
log_dir: $T/runs
env: {OUT: $T/dtrain}
command: [sh, -c, '$dump']
EOF
expect_status 0 "the same ranks under dtrain launch" "${base[@]}" "$DTRAIN" launch "$T/envjob.yaml"

# Set by the run, not by the launcher's rules: compared by name only.  LC_CTYPE is
# Python's own locale coercion (PEP 538) in torchrun's process, not torchrun's choice.
own='^(MASTER_ADDR|MASTER_PORT|TORCHELASTIC_RUN_ID|TORCHELASTIC_ERROR_FILE|PWD|SHLVL|_|LC_CTYPE|OUT)='
for r in 0 1; do
  missing=$(cut -d= -f1 "$T/torchrun.$r" | grep -vxF -f <(cut -d= -f1 "$T/dtrain.$r") | grep -vE '^(LC_CTYPE|OUT)$' | tr '\n' ' ')
  check "rank $r: every variable torchrun sets is set by dtrain too${missing:+ (missing: $missing)}" test -z "$missing"
  differ=$(grep -vE "$own" "$T/torchrun.$r" | grep -vxF -f "$T/dtrain.$r" | tr '\n' ' ')
  check "rank $r: with torchrun's values${differ:+ (differ: $differ)}" test -z "$differ"
done
contains "$T/dtrain.0" '^TORCH_NCCL_ASYNC_ERROR_HANDLING=1$' "TORCH_NCCL_ASYNC_ERROR_HANDLING=1 when unset, as torchrun"
contains "$T/dtrain.0" '^TORCHELASTIC_SIGNALS_TO_HANDLE=SIGTERM,SIGINT,SIGHUP,SIGQUIT$' "torchrun's TORCHELASTIC_SIGNALS_TO_HANDLE"

# The user's own setting stays, under both.
(cd "$T" && timeout "$(limit_s 300)" "${base[@]}" OUT="$T/torchrun-set" TORCH_NCCL_ASYNC_ERROR_HANDLING=3 \
   "$torchrun" --no-python --nproc-per-node 1 sh -c "$dump") >>"$T/torchrun.log" 2>&1
sed -i "s|OUT: $T/dtrain|OUT: $T/dtrain-set|; s/nproc_per_node: 2/nproc_per_node: 1/" "$T/envjob.yaml"
expect_status 0 "dtrain launch with TORCH_NCCL_ASYNC_ERROR_HANDLING=3 set" \
  "${base[@]}" TORCH_NCCL_ASYNC_ERROR_HANDLING=3 "$DTRAIN" launch "$T/envjob.yaml"
check "a set TORCH_NCCL_ASYNC_ERROR_HANDLING is kept, as under torchrun" test \
  "$(grep '^TORCH_NCCL_ASYNC_ERROR_HANDLING=' "$T/torchrun-set.0")" = "$(grep '^TORCH_NCCL_ASYNC_ERROR_HANDLING=' "$T/dtrain-set.0")"
