# test_pytorch_ddp.sh - examples/pytorch/ under `dtrain launch`: an unmodified
# DDP script (Gloo, env://) on 2 and 4 ranks, every replica identical at the
# end; and with auth: token the coordinator refuses the ranks and says which
# setting lets PyTorch scripts in.
# Needs PyTorch 2.x from pip (scripts/python-deps.txt); without it the test fails.
. "$(dirname "$0")/lib.sh"

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
if ! python3 -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>"$T/torch.err"; then
  not_ok "PyTorch with Gloo is importable (scripts/install-deps.sh installs it)"; tail -3 "$T/torch.err" | sed 's/^/    /'
  exit 0
fi
check "the example job spec validates" "$DTRAIN" validate "$ROOT/examples/pytorch/job.yaml"

# spec NPROC AUTH: the example's spec with this many ranks, the script by absolute path.
spec() {
  sed -e "s/^nproc_per_node: .*/nproc_per_node: $1/" -e "s/^  auth: .*/  auth: $2/" \
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
done

# auth: token: PyTorch's client is refused, and retries for its whole timeout
# (30 minutes), so the test stops the job once the coordinator has said why.
f=$(spec 2 token)
"$DTRAIN" launch "$f" --log-dir "$T/runs" >"$T/token.out" 2>"$T/token.err" &
lpid=$!
for _ in $(seq 600); do
  grep -q "rendezvous: {auth: none}" "$T/token.err" && break
  kill -0 "$lpid" 2>/dev/null || break
  sleep 0.2
done
contains "$T/token.err" "looks like a PyTorch TCPStore client" "with auth: token the coordinator refuses the PyTorch ranks"
contains "$T/token.err" "rendezvous: \{auth: none\}" "and its log names the setting that lets PyTorch in"
kill -TERM "$lpid" 2>/dev/null
wait "$lpid"
check "the job does not succeed" test $? -ne 0
