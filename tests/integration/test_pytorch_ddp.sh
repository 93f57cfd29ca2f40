# test_pytorch_ddp.sh - examples/pytorch/ under `dtrain launch`: an unmodified
# DDP script (Gloo, env://) on 2 and 4 ranks, every replica identical at the
# end, with auth: none and with auth: token (the default; the ranks' store is
# their node's endpoint), and the example spec as it is.
# Needs PyTorch 2.x from pip (scripts/python-deps.txt); without it the test fails.
. "$(dirname "$0")/lib.sh"

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
if ! python3 -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>"$T/torch.err"; then
  not_ok "PyTorch with Gloo is importable (scripts/install-deps.sh installs it)"; tail -3 "$T/torch.err" | sed 's/^/    /'
  exit 0
fi
check "the example job spec validates" "$DTRAIN" validate "$ROOT/examples/pytorch/job.yaml"

# spec NPROC AUTH: the example's spec with this many ranks and this rendezvous.auth
# (the example leaves it to the default), the script by absolute path.
spec() {
  sed -e "s/^nproc_per_node: .*/nproc_per_node: $1/" -e "s/^rendezvous:\$/rendezvous:\n  auth: $2/" \
      -e "s|examples/pytorch/ddp_gloo.py|$ROOT/examples/pytorch/ddp_gloo.py|" \
      -e "s/^  timeout: .*/  timeout: 30s/" \
      "$ROOT/examples/pytorch/job.yaml" >"$T/job-$1-$2.yaml"
  echo "$T/job-$1-$2.yaml"
}

for n in 2 4; do
  f=$(spec "$n" none)
  expect_status 0 "DDP example on $n ranks succeeds" "$DTRAIN" launch "$f" --log-dir "$T/runs"
  lines=$(grep -c "rank [0-9]/$n: loss .* replicas identical" "$T/last.out")
  check "all $n ranks report identical replicas" test "$lines" = "$n"
  sums=$(sed -n 's/.*checksum \([-0-9.]*\).*/\1/p' "$T/last.out" | sort -u | wc -l)
  check "all $n ranks hold the same parameters" test "$sums" = 1
  [ "$lines" = "$n" ] || sed 's/^/    /' "$T/last.err" | tail -n 15
  if grep -q "the ranks' store" "$T/last.err"; then not_ok "auth: none: the ranks reach the coordinator itself ($n ranks)"
  else ok "auth: none: the ranks reach the coordinator itself ($n ranks)"; fi
done

# auth: token (the default): the ranks reach the store through their node's
# endpoint, which admits only the job's processes and presents the token for
# them, so the unmodified script runs as it does with auth: none.
f=$(spec 2 token)
expect_status 0 "with auth: token the PyTorch job runs through the node's store endpoint" \
  "$DTRAIN" launch "$f" --log-dir "$T/runs"
check "both ranks report identical replicas (auth: token)" \
  test "$(grep -c 'rank [01]/2: loss .* replicas identical' "$T/last.out")" = 2
contains "$T/last.err" "the ranks' store 127\.0\.0\.1:[0-9]+ \(this job's processes only\)" \
  "the launcher names the ranks' store endpoint"
f="$ROOT/examples/pytorch/job.yaml"
( cd "$ROOT" && expect_status 0 "the example job spec as it is (the default auth) runs" \
  "$DTRAIN" launch "$f" --log-dir "$T/runs" )

# A rank that raises under PyTorch's @record after init_process_group: PyTorch's
# excepthook prefixes each traceback line "[rank1]: ", dtrain's console shows it
# once as "[rank 1] " (the log keeps the bytes), and the failure report shows the
# error file's traceback, as torchrun's root-cause box does.
cat >"$T/record.py" <<'PY'
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

def deep(n):
    if n == 0:
        raise ValueError("bad batch 7")
    deep(n - 1)

@record
def main():
    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        deep(3)
    dist.barrier()

main()
PY
cat >"$T/record.yaml" <<YAML
name: record
scheduler: local
nproc_per_node: 2
log_dir: $T/runs
command: [python3, $T/record.py]
env: {GLOO_SOCKET_IFNAME: lo}
rendezvous: {auth: none, timeout: 30s}
YAML
expect_status 1 "a rank raising under @record fails the job" "$DTRAIN" launch "$T/record.yaml"
contains "$T/last.err" '^\[rank 1\] Traceback \(most recent call last\):$' "PyTorch's traceback reaches the console under dtrain's prefix"
check "PyTorch's own [rank1]: prefix is not doubled on the console" bash -c "! grep -q '\[rank 1\] \[rank1\]' '$T/last.err'"
rd=$(ls -d "$T"/runs/record-* | tail -n1)
contains "$rd/attempt_0/rank_1.err" '^\[rank1\]: Traceback' "the log file keeps the rank's bytes as written"
contains "$T/last.err" "rank 1's error report .*rank_1.error.json. says:" "the error report is named"
contains "$T/last.err" "^dtrain: its traceback:$" "the failure report shows the error file's traceback"
contains "$T/last.err" '^  > +deep\(n - 1\)$' "with its frames"
contains "$T/last.err" '^  > ValueError: bad batch 7$' "and the error"
check "summary.json keeps the traceback" python3 -c "
import json,sys; d=json.load(open('$rd/summary.json'))['first_failure']
assert 'ValueError: bad batch 7' in d['error_traceback'] and d['error_traceback'].startswith('Traceback'), d"
