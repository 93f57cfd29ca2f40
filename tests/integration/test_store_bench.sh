# test_store_bench.sh - bench/rendezvous.sh runs end to end on a small N: both
# servers complete the rendezvous (every client reads every key right, or the
# client program fails) and the table has a figure for each; so does
# bench/rendezvous_nodes.sh on 4 simulated nodes of 2 (its 16,384-client run is
# a benchmark, not a test).
# Needs PyTorch from pip (the peer server); without it the test fails.
. "$(dirname "$0")/lib.sh"

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
out=$(cd "$ROOT" && REPEAT=1 BUILD="${BUILD:-build}" DTRAIN="$DTRAIN" bench/rendezvous.sh 64 2>"$T/err")
rc=$?
printf '%s\n' "$out" | sed 's/^/# /'
check "bench/rendezvous.sh exits 0" test "$rc" = 0
[ "$rc" = 0 ] || sed 's/^/    /' "$T/err" | tail -n 10
row=$(printf '%s\n' "$out" | awk '$1 == 64')
check "the table has a row for 64 clients" test -n "$row"
check "dtrain's coordinator completed the rendezvous" bash -c "[[ '$(awk '{print $2}' <<<"$row")' =~ ^[0-9.]+$ ]]"
check "PyTorch's server completed the rendezvous" bash -c "[[ '$(awk '{print $3}' <<<"$row")' =~ ^[0-9.]+$ ]]"
check "the ratio is printed" bash -c "[[ '$(awk '{print $4}' <<<"$row")' =~ ^[0-9.]+x$ ]]"

# The nodes' benchmark, small: PyTorch's server, the direct path, and one
# endpoint per node, every client reading every key.
out=$(cd "$ROOT" && READ=all BUILD="${BUILD:-build}" DTRAIN="$DTRAIN" bench/rendezvous_nodes.sh 4 2 2>"$T/err2")
rc=$?
printf '%s\n' "$out" | sed 's/^/# /'
check "bench/rendezvous_nodes.sh 4 2 exits 0" test "$rc" = 0
[ "$rc" = 0 ] || sed 's/^/    /' "$T/err2" | tail -n 10
for m in pytorch direct endpoint; do
  check "$m completed the rendezvous of 8 clients" bash -c "[[ '$(printf '%s\n' "$out" | awk -v m=$m '$1 == m {print $2}')' =~ ^[0-9.]+$ ]]"
done
check "the endpoint's coordinator held a connection per node, not per client" \
  test "$(printf '%s\n' "$out" | awk '$1 == "endpoint" {print $6}')" -lt 8
