# test_torchrun_cli.sh - `dtrain run` with torchrun's exact command lines (docs/torchrun.md),
# running real PyTorch scripts (Gloo over loopback):
#
#  - the defaults: an unmodified DDP script runs under auth: token, its ranks' store their
#    node's endpoint;
#  - --standalone, -n cpu (under taskset), --no-python, -m, --run-path, the underscore
#    spellings and PET_* variables, each rank's argv as torchrun gives it (python3 -u);
#  - two "nodes" on this machine: static (--nnodes 2 --node-rank 0/1 --master-addr
#    --master-port) and elastic (--nnodes 1:2 --rdzv-endpoint --rdzv-id), the DDP example
#    with identical replicas on every rank; c10d of a fixed count, whose nodes are numbered
#    as they come; the job token across nodes (DTRAIN_JOB_TOKEN, --token-file, none: refused
#    with how to share one);
#  - unknown flags and flags dtrain cannot honour refused with a sentence naming the flag;
#    flags without effect said once; --help after PROGRAM is the program's.
# Needs PyTorch 2.x (scripts/install-deps.sh puts it in .venv).
. "$(dirname "$0")/lib.sh"

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DDP=$ROOT/examples/pytorch/ddp_gloo.py
if ! python3 -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>"$T/torch.err"; then
  not_ok "PyTorch with Gloo is importable (scripts/install-deps.sh installs it)"; tail -3 "$T/torch.err" | sed 's/^/    /'
  exit 0
fi
export GLOO_SOCKET_IFNAME=lo STEPS=5 HOME=$T/home # no ~/.config/dtrain/job-token of the user's
unset DTRAIN_JOB_TOKEN DTRAIN_JOB_TOKEN_FILE XDG_CONFIG_HOME
cd "$T" || exit 1
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT

# A rank that tells what torchrun promises it: its argv, the interpreter's flags, __name__,
# and a Gloo all-reduce over every rank.
cat >"$T/probe.py" <<'PY'
#!/usr/bin/env python3
import os, sys
import torch, torch.distributed as dist
cmdline = open("/proc/self/cmdline", "rb").read().split(b"\0")
dist.init_process_group("gloo")
t = torch.ones(1) * (dist.get_rank() + 1)
dist.all_reduce(t)
print("probe rank=%d world=%d sum=%d role=%s main=%s u=%s argv=%s" % (dist.get_rank(), dist.get_world_size(),
      int(t.item()), os.environ["ROLE_NAME"], __name__ == "__main__", b"-u" in cmdline, ",".join(sys.argv)), flush=True)
dist.barrier()
dist.destroy_process_group()
PY
chmod +x "$T/probe.py"
mkdir -p "$T/pkgx"
: >"$T/pkgx/__init__.py"
cp "$T/probe.py" "$T/pkgx/train.py"

# probes N WHAT: the N ranks all printed a probe line of a world of N that summed every rank.
probes() {
  local n=$1 sum=$(( $1 * ($1 + 1) / 2 ))
  local got=$(grep -c "probe rank=[0-9]* world=$n sum=$sum " "$T/last.out")
  check "$2: $n ranks of one world all-reduced ($got lines)" test "$got" = "$n"
}

# --- the defaults: auth: token, the ranks' store their node's endpoint ----------------------
expect_status 0 "dtrain run -n 2 ddp_gloo.py with the defaults (auth: token) runs" timeout 120 "$DTRAIN" run -n 2 "$DDP"
check "both ranks report identical replicas (defaults)" \
  test "$(grep -c 'rank [01]/2: loss .* replicas identical' "$T/last.out")" = 2
contains "$T/last.err" "the ranks' store 127\.0\.0\.1:[0-9]+ \(this job's processes only\)" \
  "the launcher names the ranks' store endpoint"

# --- one node ----------------------------------------------------------------------------
expect_status 0 "torchrun --standalone --nproc-per-node 2 (with --auth none)" \
  "$DTRAIN" run --standalone --nproc-per-node 2 --auth none "$T/probe.py" a --b
probes 2 "--standalone"
contains "$T/last.out" "u=True argv=$T/probe.py,a,--b$" "a .py script runs under python3 -u with its arguments"
contains "$T/last.out" "role=default main" "ROLE_NAME is torchrun's default role"

cpus=$(taskset -c 0,1 python3 -c 'import os; print(len(os.sched_getaffinity(0)))')
expect_status 0 "-n cpu under taskset -c 0,1" taskset -c 0,1 "$DTRAIN" run -n cpu --auth none "$T/probe.py"
probes "$cpus" "-n cpu is one rank per CPU the process may use"
contains "$T/last.err" "--nproc-per-node cpu: $cpus ranks?, one per CPU" "and it says how many"

expect_status 0 "--no-python runs the script as a program" "$DTRAIN" run --no-python -n 2 --auth none "$T/probe.py" x
probes 2 "--no-python"
contains "$T/last.out" "u=False argv=$T/probe.py,x$" "through its #! line, without python3 -u"

PYTHONPATH=$T expect_status 0 "-m pkgx.train" "$DTRAIN" run -n 2 --auth none -m pkgx.train --flag 1
probes 2 "-m"
contains "$T/last.out" "main=True u=True argv=$T/pkgx/train.py,--flag,1$" "the module runs as __main__ under python3 -u -m"

expect_status 0 "--run-path --role trainer" "$DTRAIN" run --run-path --role trainer --nproc_per_node=2 --auth none "$T/probe.py" y
probes 2 "--run-path"
check "--role trainer is every rank's ROLE_NAME" test "$(grep -c 'role=trainer main' "$T/last.out")" = 2
contains "$T/last.out" "main=True u=True argv=$T/probe.py,y$" "runpy.run_path gives the script its argv and __main__"

expect_status 0 "underscore spellings: --nproc_per_node=2 --max_restarts=0 --rdzv_backend=c10d --rdzv_endpoint=localhost:0 --rdzv_id=u1 --log_dir" \
  "$DTRAIN" run --nproc_per_node=2 --max_restarts=0 --rdzv_backend=c10d --rdzv_endpoint=localhost:0 \
  --rdzv_id=u1 --log_dir "$T/ulogs" --auth none "$T/probe.py"
probes 2 "underscore spellings"
check "--rdzv_id names the run (TORCHELASTIC_RUN_ID) in --log_dir" test -f "$T/ulogs/probe-u1/summary.json"

PET_NPROC_PER_NODE=3 PET_MAX_RESTARTS=1 expect_status 0 "PET_NPROC_PER_NODE=3 PET_MAX_RESTARTS=1" \
  "$DTRAIN" run --print-spec train.py
contains "$T/last.out" '^nproc_per_node: 3$' "PET_NPROC_PER_NODE stands for --nproc-per-node"
contains "$T/last.out" '^max_restarts: 1$' "PET_MAX_RESTARTS for --max-restarts"
PET_NPROC_PER_NODE=3 expect_status 0 "a flag beats its PET_ variable" "$DTRAIN" run -n 2 --print-spec train.py
contains "$T/last.out" '^nproc_per_node: 2$' "-n 2 over PET_NPROC_PER_NODE=3"

expect_status 0 "--local-ranks-filter 1" "$DTRAIN" run -n 2 --local-ranks-filter 1 --auth none "$T/probe.py"
check "only local rank 1's stdout is shown" bash -c "grep -q '^\[rank 1\] probe' '$T/last.out' && ! grep -q '^\[rank 0\] probe' '$T/last.out'"

expect_status 0 "--help after PROGRAM is the program's" "$DTRAIN" run --no-python printf '%s\n' --help
contains "$T/last.out" '^\[rank 0\] --help$' "the rank got --help"

expect_status 0 "--print-completion bash" "$DTRAIN" run --print-completion bash
words=$(bash -c '. "$1"; COMP_WORDS=(dtrain run --nproc); COMP_CWORD=2; _dtrain; echo "${COMPREPLY[*]}"' _ "$T/last.out")
check "the script completes --nproc to --nproc-per-node ($words)" test "$words" = --nproc-per-node
expect_status 2 "--print-completion fish is refused" "$DTRAIN" run --print-completion fish
contains "$T/last.err" "--print-completion 'fish': expected bash, zsh or tcsh" "naming the shells it has"

CUDA_VISIBLE_DEVICES=3,5 expect_status 0 "--virtual-local-rank with CUDA_VISIBLE_DEVICES=3,5" \
  "$DTRAIN" run --virtual-local-rank -n 2 -- sh -c 'echo "lr=$LOCAL_RANK cvd=$CUDA_VISIBLE_DEVICES"'
contains "$T/last.out" '^\[rank 1\] lr=0 cvd=5$' "local rank 1 sees only GPU 5, as LOCAL_RANK 0"
contains "$T/last.out" '^\[rank 0\] lr=0 cvd=3$' "local rank 0 sees only GPU 3"
CUDA_VISIBLE_DEVICES=3 expect_status 1 "--virtual-local-rank with more ranks than GPUs fails" \
  "$DTRAIN" run --virtual-local-rank -n 2 -- true
contains "$T/last.err" "local rank 1 has no GPU in CUDA_VISIBLE_DEVICES=3" "naming the rank and the list"

# --- two nodes on this machine --------------------------------------------------------------
# node TAG ARGS...: one `dtrain run` in the background; status in $T/TAG.rc.
node() {
  local tag=$1; shift
  ( "$DTRAIN" run "$@" >"$T/$tag.out" 2>"$T/$tag.err" & echo $! >"$T/$tag.pid"; wait $!; echo $? >"$T/$tag.rc" ) &
  pids+=($!)
}
wait_nodes() { for t in "$@"; do timeout "$(limit_s 180)" bash -c "until test -s '$T/$t.rc'; do sleep 0.2; done"; done; }
replicas() { # N TAGS...: the DDP example's N ranks, across the nodes' outputs, all hold the same parameters
  local n=$1; shift
  local outs=("${@/#/$T/}"); outs=("${outs[@]/%/.out}")
  local lines=$(cat "${outs[@]}" | grep -c "rank [0-9]/$n: loss .* replicas identical")
  local sums=$(cat "${outs[@]}" | sed -n 's/.*checksum \([-0-9.]*\).*/\1/p' | sort -u | wc -l)
  check "all $n ranks report identical replicas ($lines lines, $sums checksum)" \
    test "$lines" -ge "$n" -a $((lines % n)) = 0 -a "$sums" = 1
}

# --max-restarts 1, as torchrun users pass it: these checks are about where the nodes meet, and
# PyTorch's Gloo can still abort at interpreter exit in ways a script cannot rule out (the example
# frees its group first, which removed the abort CI saw: pytorch/pytorch#179291).
port=$(free_port)
node s1 --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 --master-port "$port" -n 2 --auth none --max-restarts 1 \
  --log-dir "$T/s1" "$DDP"
node s0 --nnodes 2 --node_rank 0 --master_addr 127.0.0.1 --master_port "$port" -n 2 --auth none --max_restarts 1 \
  --log-dir "$T/s0" "$DDP"
wait_nodes s0 s1
check "static: node 0 exits 0 ($(cat "$T/s0.rc"))" test "$(cat "$T/s0.rc")" = 0
check "static: node 1 exits 0 ($(cat "$T/s1.rc"))" test "$(cat "$T/s1.rc")" = 0
[ "$(cat "$T/s0.rc")$(cat "$T/s1.rc")" = 00 ] || grep -h "error\|terminate\|warning" "$T/s0.err" "$T/s1.err" | tail -n 8 | sed 's/^/    /'
replicas 4 s0 s1
contains "$T/s0.err" "node 0 of 2, 2 ranks .* \(global ranks 0-1\)" "node 0 ran global ranks 0-1"
contains "$T/s1.err" "node 1 of 2, 2 ranks .* \(global ranks 2-3\)" "node 1 ran global ranks 2-3"
contains "$T/s1.err" "node 1: its 2 ranks succeeded in [0-9.]+ s; node 0 reports the job" \
  "node 1's terminal gets a closing line of its own"
check "node 0 wrote launch.json and summary.json" test -f "$(ls -d "$T"/s0/ddp-gloo-*/summary.json | head -n1)"

port=$(free_port)
node e0 --nnodes 1:2 --rdzv-endpoint "127.0.0.1:$port" --rdzv-id el1 -n 1 --auth none --max-restarts 1 --log-dir "$T/e0" "$DDP"
timeout 20 bash -c "until grep -q 'elastic, 1 to 2 nodes' '$T/e0.err' 2>/dev/null; do sleep 0.2; done"
node e1 --nnodes=1:2 --rdzv_endpoint="127.0.0.1:$port" --rdzv_id=el1 -n 1 --auth none --max-restarts 1 --log-dir "$T/e1" "$DDP"
wait_nodes e0 e1
check "elastic: the first to come (it hosts the coordinator) exits 0 ($(cat "$T/e0.rc"))" test "$(cat "$T/e0.rc")" = 0
check "elastic: the second exits 0 ($(cat "$T/e1.rc"))" test "$(cat "$T/e1.rc")" = 0
replicas 2 e0 e1
contains "$T/e1.err" "joined the elastic job at 127.0.0.1:$port" "the second joined the first's coordinator"
check "--rdzv-id names the run directory on both nodes" test -d "$T/e0/ddp-gloo-el1" -a -d "$T/e1/ddp-gloo-el1"

# c10d of a fixed count: no --node-rank; the endpoint's host is node 0, the other takes node 1.
export DTRAIN_JOB_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
port=$(free_port)
cmd=(-n 1 -- sh -c 'echo "r=$RANK w=$WORLD_SIZE g=$GROUP_RANK"')
node c0 --nnodes 2 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" --log-dir "$T/c0" "${cmd[@]}"
timeout 20 bash -c "until grep -q 'node 0 of 2' '$T/c0.err' 2>/dev/null; do sleep 0.2; done"
node c1 --nnodes 2 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" --log-dir "$T/c1" "${cmd[@]}"
wait_nodes c0 c1
check "c10d, 2 nodes, DTRAIN_JOB_TOKEN: both exit 0 ($(cat "$T/c0.rc") $(cat "$T/c1.rc"))" \
  test "$(cat "$T/c0.rc")$(cat "$T/c1.rc")" = 00
contains "$T/c1.out" '^\[rank 1\] r=1 w=2 g=1$' "the node that came second is node 1"

# PyTorch ranks under auth: token on two nodes: each node's ranks reach the store through
# their node's endpoint.
port=$(free_port)
node p1 --nnodes 2 --node-rank 1 --master-port "$port" --log-dir "$T/p1" "$DDP"
node p0 --nnodes 2 --node-rank 0 --master-port "$port" --log-dir "$T/p0" "$DDP"
wait_nodes p0 p1
check "PyTorch on two nodes under auth: token: both exit 0 ($(cat "$T/p0.rc") $(cat "$T/p1.rc"))" \
  test "$(cat "$T/p0.rc")$(cat "$T/p1.rc")" = 00
replicas 2 p0 p1
unset DTRAIN_JOB_TOKEN

# The token from --token-file (mode 600), static.
(umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$T/token")
port=$(free_port)
node t1 --nnodes 2 --node-rank 1 --master-port "$port" --token-file "$T/token" --log-dir "$T/t1" "${cmd[@]}"
node t0 --nnodes 2 --node-rank 0 --master-port "$port" --token-file "$T/token" --log-dir "$T/t0" "${cmd[@]}"
wait_nodes t0 t1
check "--token-file: both nodes exit 0 ($(cat "$T/t0.rc") $(cat "$T/t1.rc"))" test "$(cat "$T/t0.rc")$(cat "$T/t1.rc")" = 00
# No token anywhere, every node on this machine: the first makes ~/.config/dtrain/job-token.
port=$(free_port)
node d1 --nnodes 2 --node-rank 1 --master-port "$port" --log-dir "$T/d1" "${cmd[@]}"
node d0 --nnodes 2 --node-rank 0 --master-port "$port" --log-dir "$T/d0" "${cmd[@]}"
wait_nodes d0 d1
check "no token, both nodes on loopback: both exit 0 ($(cat "$T/d0.rc") $(cat "$T/d1.rc"))" \
  test "$(cat "$T/d0.rc")$(cat "$T/d1.rc")" = 00
check "one of them made the default token file, mode 600" \
  test "$(stat -c %a "$HOME/.config/dtrain/job-token" 2>&1)" = 600
check "and said so, once" test "$(cat "$T/d0.err" "$T/d1.err" | grep -c 'made the job token every node of this machine reads')" = 1
rm -f "$HOME/.config/dtrain/job-token"
# Nodes of other machines (node0.invalid is never looked up: the token is missing first).
expect_status 2 "several nodes of several machines with auth: token and no token anywhere are refused" \
  "$DTRAIN" run --nnodes 2 --node-rank 1 --master-addr node0.invalid --master-port "$port" -- true
contains "$T/last.err" "every node of the job needs the same job token .*--token-file FILE.*DTRAIN_JOB_TOKEN" \
  "with one sentence saying how to share one"
check "and no token file is made for them" test ! -e "$HOME/.config/dtrain/job-token"

# --- refused, or said once ------------------------------------------------------------------
expect_status 2 "an unknown flag is refused" "$DTRAIN" run --frobnicate -n 2 train.py
contains "$T/last.err" "^dtrain run: unknown option '--frobnicate'$" "naming it"
expect_status 2 "an unknown short flag is refused" "$DTRAIN" run -x train.py
contains "$T/last.err" "^dtrain run: unknown option '-x'$" "naming it"
expect_status 2 "a flag without its value is refused" "$DTRAIN" run --rdzv-endpoint
contains "$T/last.err" "'--rdzv-endpoint' needs a value" "naming it"
expect_status 2 "-n abc is refused" "$DTRAIN" run -n abc train.py
contains "$T/last.err" "^dtrain run: --nproc-per-node: nproc_per_node: expected an integer" "naming the flag, not a spec line"
expect_status 2 "--tee 7 is refused" "$DTRAIN" run --tee 7 train.py
contains "$T/last.err" "^dtrain run: -t/--tee: console.tee: expected 0 \(none\)" "naming the flag"
expect_status 2 "--shutdown-timeout abc is refused" "$DTRAIN" run --shutdown_timeout abc train.py
contains "$T/last.err" "--shutdown-timeout 'abc': expected seconds" "naming the flag"
expect_status 2 "--logs-specs naming a plugin is refused" "$DTRAIN" run --logs-specs mine train.py
contains "$T/last.err" "--logs-specs mine names a Python LogsSpecs plugin" "with the reason"
expect_status 2 "--rdzv-backend etcd is refused" "$DTRAIN" run --rdzv-backend etcd --nnodes 2 --rdzv-endpoint h:1 train.py
expect_status 2 "--standalone with --nnodes 2 is refused" "$DTRAIN" run --standalone --nnodes 2 train.py
expect_status 2 "--nnodes 2 --rdzv-backend c10d without an endpoint is refused" "$DTRAIN" run --nnodes 2 --rdzv-backend c10d train.py
contains "$T/last.err" "needs --rdzv-endpoint HOST:PORT" "saying what is missing"
expect_status 2 "--module with --no-python is refused" "$DTRAIN" run -m --no-python pkg
expect_status 2 "an unknown --rdzv-conf key is refused" "$DTRAIN" run --rdzv-conf joint_timeout=5 train.py
contains "$T/last.err" "unknown key 'joint_timeout'" "naming the key"
expect_status 0 "--monitor-interval, --start-method, --numa-binding, --logs-specs default are taken" \
  "$DTRAIN" run --monitor-interval 5 --start-method fork --numa-binding node --logs_specs default --no-python true
for f in monitor-interval start-method numa-binding logs-specs; do
  n=$(grep -c -- "--$f .*no effect in dtrain" "$T/last.err")
  check "--$f: said once that it has no effect ($n)" test "$n" = 1
done
expect_status 0 "--rdzv-conf join_timeout and last_call_timeout become rendezvous keys" \
  "$DTRAIN" run --rdzv-conf join_timeout=90,last_call_timeout=7,close_timeout=3 --print-spec train.py
contains "$T/last.out" '^  timeout: 90s$' "join_timeout is rendezvous.timeout"
contains "$T/last.out" '^  last_call_timeout: 7s$' "last_call_timeout is rendezvous.last_call_timeout"
expect_status 0 "-r/-t/--role/--signals-to-handle/--log-line-prefix-template are carried into the spec" \
  "$DTRAIN" run -r 3 -t 0:1,1:2 --role trainer --signals-to-handle SIGTERM,SIGUSR1 --virtual_local_rank \
  --log-line-prefix-template '${rank}: ' --shutdown-timeout 5 --print-spec train.py
for k in '^role: "trainer"$' '^virtual_local_rank: true$' '^signals_to_handle: "SIGTERM,SIGUSR1"$' '^  redirects: "3"$' '^  tee: "0:1,1:2"$' \
         '^  line_prefix: "\$\{rank\}: "$' '^grace_period: 5s$'; do
  contains "$T/last.out" "$k" "the spec holds $k"
done
expect_status 0 "-r 3 runs" "$DTRAIN" run -r 3 --no-python sh -c 'echo to-stdout; echo to-stderr >&2'
check "-r 3 keeps both streams off the console (torchrun's redirect: the log file only)" \
  bash -c "! grep -q 'to-std' '$T/last.out' '$T/last.err'"
run=$(sed -n 's/^dtrain: job sh: .*, run //p' "$T/last.err")
check "-r 3: the rank's log files have both lines" \
  bash -c "grep -q to-stdout '$run/attempt_0/rank_0.out' && grep -q to-stderr '$run/attempt_0/rank_0.err'"
