# test_elastic.sh - elastic jobs (nodes: MIN:MAX, docs/elastic.md) with `dtrain agent`
# on this machine, over loopback and the tcp backend.
#
#  - nodes 2:3, three agents, the bundled trainer: one agent SIGKILLed mid-run; the
#    other two finish the job (max_restarts 0: the membership change is not counted)
#    at the spec's last step, with no sample of the epoch lost or read twice (the
#    trainer's sample log, DTRAIN_SAMPLE_LOG) and the global batch kept;
#  - nodes 1:2: a command: job that started alone admits a late agent at the next
#    round, whose ranks see the larger world;
#  - --nnodes MIN:MAX errors.
. "$(dirname "$0")/lib.sh"

export DTRAIN_JOB_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
free_port() {
  python3 -c '
import random, socket
for _ in range(200):
    p = random.randint(10000, 19999)
    s = socket.socket()
    try:
        s.bind(("0.0.0.0", p)); print(p); break
    except OSError:
        pass
    finally:
        s.close()'
}
pids=()
wait_for() { # seconds command...
  local end=$((SECONDS + $1)); shift
  until "$@"; do [ $SECONDS -ge $end ] && return 1; sleep 0.2; done
}
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT

# agent SPEC TAG PORT [--node-rank 0]: one agent in the background; its status goes to $T/TAG.rc.
agent() {
  local spec=$1 tag=$2 port=$3; shift 3
  ( "$DTRAIN" agent "$spec" --nnodes "$NN" --coordinator "127.0.0.1:$port" "$@" \
      --log-dir "$T/runs" >"$T/$tag.out" 2>"$T/$tag.err" &
    echo $! >"$T/$tag.pid"; wait $!; echo $? >"$T/$tag.rc" ) &
  pids+=($!)
  wait_for 5 test -s "$T/$tag.pid"
  pids+=($(cat "$T/$tag.pid"))
}
rc_of() { cat "$T/$1.rc" 2>/dev/null || echo none; }

# --- 2:3, one of three agents killed mid-run --------------------------------------
cat >"$T/tr.yaml" <<'EOF'
name: el
nodes: 2:3
nproc_per_node: 1
backend: tcp
trainer:
  model: {hidden: [32]}
  data: {batch_size: 8, workers: 0}
  ddp: {grad_accum: 2}
  steps: 30
  scheduler: {type: constant}
  checkpoint: {every_steps: 5}
  eval: {every_epochs: 0}
rendezvous: {timeout: 20s, last_call_timeout: 1s, heartbeat_timeout: 20s}
max_restarts: 0
EOF
NN=2:3
port=$(free_port)
mkdir -p "$T/samples"
# Round 0's rank 2 stops computing after step 12 (its checkpoint at 10 is written):
# the job waits for it, and its agent is killed there.
export DTRAIN_SAMPLE_LOG="$T/samples" DTRAIN_FAULT=hang:2:12
agent "$T/tr.yaml" a "$port" --node-rank 0
sleep 0.3
agent "$T/tr.yaml" b "$port"
agent "$T/tr.yaml" c "$port"
check "round 0 forms with three nodes" wait_for "$(limit_s 20)" grep -q "round 0: node 2 of 3" "$T/b.err" "$T/c.err"
victim=$(grep -l "round 0: node 2 of 3" "$T/b.err" "$T/c.err" | head -n 1)
victim=$(basename "$victim" .err)
survivor=b; [ "$victim" = b ] && survivor=c
check "rank 2 reaches step 12 (after the checkpoint of step 10)" \
  wait_for "$(limit_s 20)" grep -q "^12 " "$T/samples/samples_0_2.txt"
kill -9 "$(cat "$T/$victim.pid")"
wait_for "$(limit_s 40)" test -f "$T/a.rc" -a -f "$T/$survivor.rc"
unset DTRAIN_SAMPLE_LOG DTRAIN_FAULT
check "node 0 and the surviving agent exit 0 ($(rc_of a) $(rc_of $survivor))" \
  test "$(rc_of a)$(rc_of $survivor)" = 00
contains "$T/a.err" "round 0 ends for a membership change \(1 node lost\)" "node 0 says round 0 lost a node"
contains "$T/a.err" "round 1: node 0 of 2" "round 1 runs on the two survivors"
contains "$T/a.err" "not counted against max_restarts" "the membership change is not counted against max_restarts"
summary=$(ls "$T"/runs/el-*/trainer_summary.json 2>/dev/null | head -n 1)
contains "${summary:-$T/none}" '"steps": 30,' "the job ends at the spec's last step"
contains "${summary:-$T/none}" '"world_size": 2' "it ends with world size 2"
contains "${summary:-$T/none}" '"resumed_from_step": 10' "round 1 resumed from the checkpoint of step 10"
contains "$T/a.err" "grad_accum 2 -> 3 keeps the global batch of 48" \
  "the global batch (3 ranks x 8 x 2) is kept on 2 ranks with grad_accum 3"
# Each step's samples come from the last round that ran it (a round after the
# checkpoint redoes the steps its predecessor ran past it): over steps 1..30 the
# positions 0..1439 of epoch 0's order must each be read once, every position must
# hold the same sample in every round, and no sample may repeat.
check "no sample lost or read twice over the rounds (steps 1-30, 48 a step)" python3 - "$T/samples" <<'EOF'
import glob, os, re, sys
last, where, seen = {}, {}, {}
for f in glob.glob(os.path.join(sys.argv[1], "samples_*_*.txt")):
    rnd = int(re.match(r"samples_(\d+)_\d+\.txt", os.path.basename(f)).group(1))
    for line in open(f):
        step, epoch, pos, idx = map(int, line.split())
        if where.setdefault((epoch, pos), idx) != idx:
            sys.exit("position %d holds %d and %d" % (pos, where[(epoch, pos)], idx))
        last[step] = max(last.get(step, -1), rnd)
        seen.setdefault((step, rnd), []).append((epoch, pos, idx))
final = [s for step in range(1, 31) for s in seen.get((step, last.get(step)), [])]
pos = sorted(p for e, p, i in final)
idx = [i for e, p, i in final]
if pos != list(range(30 * 48)):
    sys.exit("positions read: %d, expected 0..%d once each" % (len(pos), 30 * 48 - 1))
if len(set(idx)) != len(idx):
    sys.exit("a sample was read twice")
if max(last.values()) < 1:
    sys.exit("no second round ran")
EOF

# --- 1:2: a late agent is admitted at the next round ------------------------------
cat >"$T/cmd.yaml" <<'EOF'
name: late
nodes: 1:2
command: [sh, -c, 'echo "env rank=$RANK world=$WORLD_SIZE group=$GROUP_RANK gws=$GROUP_WORLD_SIZE lws=$LOCAL_WORLD_SIZE restart=$TORCHELASTIC_RESTART_COUNT max=$TORCHELASTIC_MAX_RESTARTS round=$DTRAIN_RESTART_COUNT"; sleep 3']
rendezvous: {timeout: 20s, last_call_timeout: 0.5s}
EOF
NN=1:2
port=$(free_port)
agent "$T/cmd.yaml" l0 "$port" --node-rank 0
check "a 1:2 job starts alone after the last call" wait_for "$(limit_s 10)" grep -q "env rank=0 world=1" "$T/l0.out"
agent "$T/cmd.yaml" l1 "$port"
wait_for "$(limit_s 30)" test -f "$T/l0.rc" -a -f "$T/l1.rc"
check "both agents exit 0 ($(rc_of l0) $(rc_of l1))" test "$(rc_of l0)$(rc_of l1)" = 00
contains "$T/l0.out" "^\[rank 0\] env rank=0 world=1 group=0 gws=1 lws=1 restart=0 max=0 round=0$" \
  "round 0 runs one node"
contains "$T/l0.out" "^\[rank 0\] env rank=0 world=2 group=0 gws=2 lws=1 restart=0 max=0 round=1$" \
  "round 1 grows to two nodes; TORCHELASTIC_RESTART_COUNT stays 0"
contains "$T/l1.out" "^\[rank 1\] env rank=1 world=2 group=1 gws=2 lws=1 restart=0 max=0 round=1$" \
  "the late agent's rank is rank 1 of world 2"
contains "$T/l0.err" "an agent waits to join" "node 0 says why round 0 stopped"

# --- --nnodes errors ----------------------------------------------------------------
expect_status 2 "--nnodes 3:2 is refused" "$DTRAIN" agent "$T/cmd.yaml" --nnodes 3:2 --coordinator 127.0.0.1:1
contains "$T/last.err" "MIN 3 above MAX 2" "and says MIN is above MAX"
expect_status 2 "--nnodes 1:x is refused" "$DTRAIN" agent "$T/cmd.yaml" --nnodes 1:x --coordinator 127.0.0.1:1
expect_status 2 "an elastic agent without --coordinator is refused" "$DTRAIN" agent "$T/cmd.yaml" --nnodes 1:2
contains "$T/last.err" "--coordinator HOST:PORT is needed for an elastic job" "and says --coordinator is needed"
