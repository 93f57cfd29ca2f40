# test_netns_torchrun.sh - `dtrain run` with torchrun's multi-node command lines on two namespace
# hosts (scripts/netns-cluster.sh), each `dtrain run` on its own host, the PyTorch DDP example
# (examples/pytorch/ddp_gloo.py, Gloo on eth0) with identical replicas on every rank:
#
#  - c10d, --nnodes 1:2 --rdzv-endpoint HOST1:PORT --rdzv-id ID, started on host 2 first: host 1
#    hosts the coordinator because the endpoint is its address (not because it came first), and
#    host 2, which is not the endpoint's host, joins it;
#  - static, --nnodes 2 --node-rank 0/1 --master-addr HOST1 --master-port PORT;
#  - the job token of both from ~/.config/dtrain/job-token, the default a shared home gives every
#    node (a command job: PyTorch's client has no token).
# Needs root (network namespaces) and PyTorch; without them it fails with the reason.
. "$(dirname "$0")/lib.sh"

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DDP=$ROOT/examples/pytorch/ddp_gloo.py
if ! python3 -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>"$T/torch.err"; then
  not_ok "PyTorch with Gloo is importable (scripts/install-deps.sh installs it)"; tail -3 "$T/torch.err" | sed 's/^/    /'
  exit 0
fi
. "$(dirname "$0")/netns_lib.sh"
netns_up r 2
unset DTRAIN_JOB_TOKEN
H1=$("$NC" addr 1)
export HOME=$T/home STEPS=5 PATH

# on HOST TAG ARGS...: `dtrain run ARGS` on namespace host HOST in the background; status in $T/TAG.rc.
on() {
  local host=$1 tag=$2; shift 2
  ( "$NC" exec "$host" env GLOO_SOCKET_IFNAME=eth0 HOME="$HOME" STEPS=5 PATH="$PATH" \
      "$DTRAIN" run "$@" >"$T/$tag.out" 2>"$T/$tag.err"; echo $? >"$T/$tag.rc" ) &
  pids+=($!)
}
wait_rc() { for t in "$@"; do timeout "$(limit_s 180)" bash -c "until test -s '$T/$t.rc'; do sleep 0.2; done"; done; }
both_ok() { # WHAT TAG0 TAG1
  local st="$(cat "$T/$2.rc") $(cat "$T/$3.rc")"
  if [ "$st" = "0 0" ]; then ok "$1: both hosts exit 0"; return; fi
  not_ok "$1: both hosts exit 0 ($st)"
  tail -n 12 "$T/$2.err" "$T/$3.err" | sed 's/^/    /'
}
replicas() { # WHAT N TAGS...
  local what=$1 n=$2; shift 2
  local outs=("${@/#/$T/}"); outs=("${outs[@]/%/.out}")
  local lines=$(cat "${outs[@]}" | grep -c "rank [0-9]/$n: loss .* replicas identical")
  local sums=$(cat "${outs[@]}" | sed -n 's/.*checksum \([-0-9.]*\).*/\1/p' | sort -u | wc -l)
  check "$what: all $n ranks report identical replicas ($lines lines, $sums checksum)" \
    test "$lines" -ge "$n" -a $((lines % n)) = 0 -a "$sums" = 1
}

# c10d, elastic: host 2 starts first and waits for the endpoint's host.  --max-restarts 1, as
# torchrun users pass it: the check is about where the nodes meet, and PyTorch's Gloo can abort at
# interpreter exit (the example frees its group first: pytorch/pytorch#179291).
on 2 c2 --nnodes 1:2 --rdzv-backend c10d --rdzv-endpoint "$H1:29400" --rdzv-id nt1 -n 1 --auth none \
  --max-restarts 1 --log-dir "$T/c2" "$DDP"
sleep 1
on 1 c1 --nnodes=1:2 --rdzv_endpoint="$H1:29400" --rdzv_id=nt1 --nproc_per_node=1 --auth none --max_restarts=1 \
  --log-dir "$T/c1" "$DDP"
wait_rc c1 c2
both_ok "c10d 1:2" c1 c2
replicas "c10d 1:2" 2 c1 c2
contains "$T/c1.err" "elastic, 1 to 2 nodes .* coordinator $H1:29400" "host 1, the endpoint's host, hosts the coordinator"
contains "$T/c2.err" "joined the elastic job at $H1:29400" "host 2 joined it, though it came first"

# static, with the token from the default file.
mkdir -p "$HOME/.config/dtrain"
(umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$HOME/.config/dtrain/job-token")
on 2 s2 --nnodes 2 --node-rank 1 --master-addr "$H1" --master-port 29500 -n 2 --max-restarts 1 \
  --log-dir "$T/s2" "$DDP"
on 1 s1 --nnodes 2 --node-rank 0 --master-addr "$H1" --master-port 29500 -n 2 --max-restarts 1 \
  --log-dir "$T/s1" "$DDP"
wait_rc s1 s2
both_ok "static 2 nodes" s1 s2
replicas "static 2 nodes" 4 s1 s2
contains "$T/s2.err" "coordinator $H1:29500, the ranks' store 127\.0\.0\.1:[0-9]+ \(this job's processes only\)" \
  "host 2's PyTorch ranks reach the store through their own host's endpoint, the token on"

cmd=(-n 1 -- sh -c 'echo "r=$RANK w=$WORLD_SIZE"')
on 2 t2 --nnodes 2 --node-rank 1 --master-addr "$H1" --master-port 29500 "${cmd[@]}"
on 1 t1 --nnodes 2 --node-rank 0 --master-addr "$H1" --master-port 29500 "${cmd[@]}"
wait_rc t1 t2
both_ok "auth: token, the token from ~/.config/dtrain/job-token on both hosts" t1 t2
contains "$T/t2.out" '^\[rank 1\] r=1 w=2$' "host 2's rank is rank 1 of 2"
