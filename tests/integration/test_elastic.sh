# test_elastic.sh - elastic jobs (nodes: MIN:MAX, docs/elastic.md) with `dtrain agent`
# on this machine, over loopback and the tcp backend.
#
#  - nodes 2:3, three agents, the bundled trainer: one agent SIGKILLed mid-run (summary.json
#    names it in lost_node and tells the membership round from the last); the
#    other two finish the job (max_restarts 0: the membership change is not counted)
#    at the spec's last step, with no sample of the epoch lost or read twice (the
#    trainer's sample log, DTRAIN_SAMPLE_LOG) and the global batch kept (keep_global);
#  - the same on token shards (a tiny gpt2, shuffle on): no sequence lost or read twice;
#  - the same with each rank keeping its batch (ddp.elastic_batch's default): the job
#    goes on with a global batch of 2 ranks, the learning rate scaled (elastic_lr:
#    linear); validate refuses keep_global there, naming the node count;
#  - nodes 1:2: a command: job that started alone admits a late agent at the next
#    round, whose ranks see the larger world;
#  - nodes 2:3 with one of two agents killed: below MIN, the job fails within
#    rendezvous.timeout with a sentence saying so and nothing left running;
#  - --nnodes MIN:MAX errors.
. "$(dirname "$0")/lib.sh"

. "$(dirname "$0")/agent_lib.sh"

# agent SPEC TAG PORT [--node-rank 0]: one agent of NN nodes in the background (bg_agent).
agent() {
  local spec=$1 tag=$2 port=$3; shift 3
  bg_agent "$tag" "$T/runs" "$spec" --nnodes "$NN" --coordinator "127.0.0.1:$port" "$@"
}
# no_loss DIR STEPS PER_STEP: each step's samples come from the last round that ran it
# (a round after the checkpoint redoes the steps its predecessor ran past it): over
# steps 1..STEPS the positions 0..STEPS*PER_STEP-1 of epoch 0's order must each be read
# once, every position must hold the same sample in every round, and no sample may repeat.
no_loss() {
  python3 - "$@" <<'EOF'
import glob, os, re, sys
last, where, seen = {}, {}, {}
steps, per = int(sys.argv[2]), int(sys.argv[3])
for f in glob.glob(os.path.join(sys.argv[1], "samples_*_*.txt")):
    rnd = int(re.match(r"samples_(\d+)_\d+\.txt", os.path.basename(f)).group(1))
    for line in open(f):
        step, epoch, pos, idx = map(int, line.split())
        if where.setdefault((epoch, pos), idx) != idx:
            sys.exit("position %d holds %d and %d" % (pos, where[(epoch, pos)], idx))
        last[step] = max(last.get(step, -1), rnd)
        seen.setdefault((step, rnd), []).append((epoch, pos, idx))
final = [s for step in range(1, steps + 1) for s in seen.get((step, last.get(step)), [])]
pos = sorted(p for e, p, i in final)
idx = [i for e, p, i in final]
if pos != list(range(steps * per)):
    sys.exit("positions read: %d, expected 0..%d once each" % (len(pos), steps * per - 1))
if len(set(idx)) != len(idx):
    sys.exit("a sample was read twice")
if max(last.values()) < 1:
    sys.exit("no second round ran")
EOF
}

# --- 2:3, one of three agents killed mid-run --------------------------------------
cat >"$T/tr.yaml" <<'EOF'
name: el
nodes: 2:3
nproc_per_node: 1
backend: tcp
trainer:
  model: {hidden: [32]}
  data: {batch_size: 8, workers: 0}
  ddp: {grad_accum: 2, elastic_batch: keep_global}
  steps: 30
  scheduler: {type: constant}
  checkpoint: {every_steps: 5}
  eval: {every_epochs: 0}
rendezvous: {timeout: 20s, last_call_timeout: 1s, heartbeat_timeout: 20s}
max_restarts: 0
EOF
# kill_one_of_three SPEC TAG HANG CKPT: node 0 (agent TAGa) and agents TAGb, TAGc of a
# 2:3 job; round 0's rank 2 stops computing after step HANG (its checkpoint at CKPT
# is written): the job waits for it, and its agent is killed there.  Samples go to
# $T/TAGsamples; $survivor is the tag of the agent left.
kill_one_of_three() {
  local spec=$1 tag=$2 hang=$3 ckpt=$4 victim
  NN=2:3
  port=$(free_port)
  mkdir -p "$T/${tag}samples"
  export DTRAIN_SAMPLE_LOG="$T/${tag}samples" DTRAIN_FAULT=hang:2:$hang
  agent "$spec" "${tag}a" "$port" --node-rank 0
  sleep 0.3
  agent "$spec" "${tag}b" "$port"
  agent "$spec" "${tag}c" "$port"
  check "round 0 forms with three nodes" \
    wait_for "$(limit_s 20)" grep -q "round 0: node 2 of 3" "$T/${tag}b.err" "$T/${tag}c.err"
  victim=$(grep -l "round 0: node 2 of 3" "$T/${tag}b.err" "$T/${tag}c.err" | head -n 1)
  victim=$(basename "$victim" .err)
  survivor=${tag}b; [ "$victim" = "${tag}b" ] && survivor=${tag}c
  check "rank 2 reaches step $hang (after the checkpoint of step $ckpt)" \
    wait_for "$(limit_s 20)" grep -qs "^$hang " "$T/${tag}samples/samples_0_2.txt"
  victim_tag=$victim
  kill -9 "$(cat "$T/$victim.pid")"
  wait_for "$(limit_s 40)" test -f "$T/${tag}a.rc" -a -f "$T/$survivor.rc"
  unset DTRAIN_SAMPLE_LOG DTRAIN_FAULT
  check "node 0 and the surviving agent exit 0 ($(rc_of ${tag}a) $(rc_of $survivor))" \
    test "$(rc_of ${tag}a)$(rc_of $survivor)" = 00
}
kill_one_of_three "$T/tr.yaml" "" 12 10
contains "$T/a.err" "round 0 ends for a membership change \(1 node lost\)" "node 0 says round 0 lost a node"
contains "$T/a.err" "round 1: node 0 of 2" "round 1 runs on the two survivors"
contains "$T/a.err" "not counted against max_restarts" "the membership change is not counted against max_restarts"
summary=$(ls "$T"/runs/el-*/trainer_summary.json 2>/dev/null | head -n 1)
contains "${summary:-$T/none}" '"steps": 30,' "the job ends at the spec's last step"
contains "${summary:-$T/none}" '"world_size": 2' "it ends with world size 2"
contains "${summary:-$T/none}" '"resumed_from_step": 10' "round 1 resumed from the checkpoint of step 10"
contains "$T/a.err" "grad_accum 2 -> 3 keeps the global batch of 48" \
  "the global batch (3 ranks x 8 x 2) is kept on 2 ranks with grad_accum 3"
check "no sample lost or read twice over the rounds (steps 1-30, 48 a step)" no_loss "$T/samples" 30 48
check "summary.json: lost_node names the killed agent's slot and why; round 0 ended by membership on 3 nodes, round 1 finished on 2; 1 membership change, 0 failure restarts" \
  python3 - "$(ls "$T"/runs/el-*/summary.json 2>/dev/null | head -n 1)" "$T/$victim_tag.err" <<'EOF'
import json, re, sys
s = json.load(open(sys.argv[1]))
slot = int(re.search(r"as slot (\d+);", open(sys.argv[2]).read()).group(1))
ln = s["lost_node"]
# a killed agent's connection closes, or is reset when a request of it was still unread
died = ("closed its connection" in ln["reason"] or "connection reset by peer" in ln["reason"]) if ln else False
assert ln and ln["node"] == slot and died and ln["detected_s"] > 0, ln
rounds = [a.get("round") for a in s["attempts"]]
assert len(rounds) == 2 and rounds[0]["ended_by"] == "membership" and rounds[0]["nodes"] == 3, rounds
assert "a node of the round was lost" in rounds[0]["reason"], rounds[0]
assert rounds[1] == {"nodes": 2, "world_size": 2, "ended_by": "finished", "reason": "every rank exited 0"}, rounds[1]
assert s["membership_changes"] == 1 and s["failure_restarts"] == 0, s
EOF

# --- 2:3 keeping the per-rank batch (the default): the job goes on ----------------
# The spec that failed 40 s in when the global batch was always kept (96 samples on 3
# ranks cannot be 2 ranks x batch_size 32 x a whole grad_accum): with elastic_batch
# auto each rank keeps its batch, and elastic_lr: linear scales the learning rate.
cat >"$T/pr.yaml" <<'EOF'
name: elpr
nodes: 2:3
nproc_per_node: 1
backend: tcp
trainer:
  model: {hidden: [32]}
  data: {batch_size: 32, workers: 0}
  ddp: {elastic_lr: linear}
  steps: 30
  scheduler: {type: constant}
  checkpoint: {every_steps: 5}
  eval: {every_epochs: 0}
rendezvous: {timeout: 20s, last_call_timeout: 1s, heartbeat_timeout: 20s}
max_restarts: 0
EOF
expect_status 0 "validate accepts the 2:3 spec (each rank keeps its batch)" "$DTRAIN" validate "$T/pr.yaml"
contains "$T/last.out" "ok: elpr, local, 2:3 nodes x 1 rank, .*one .dtrain agent. per node" \
  "validate says the elastic spec runs as one agent per node"
sed 's/ddp: {elastic_lr: linear}/ddp: {elastic_batch: keep_global}/' "$T/pr.yaml" >"$T/prg.yaml"
expect_status 2 "validate refuses keeping the global batch of 3 nodes x grad_accum 1" "$DTRAIN" validate "$T/prg.yaml"
contains "$T/last.err" "elastic_batch: keep_global keeps the global batch of 3 nodes x grad_accum 1 .*which a round of 2 nodes cannot keep.*a multiple of 2" \
  "validate names the node count that cannot keep it and the grad_accum that would"
kill_one_of_three "$T/pr.yaml" p 12 10
contains "$T/pa.err" "round 1: node 0 of 2" "round 1 runs on the two survivors"
summary=$(ls "$T"/runs/elpr-*/trainer_summary.json 2>/dev/null | head -n 1)
contains "${summary:-$T/none}" '"steps": 30,' "the job ends at the spec's last step"
contains "${summary:-$T/none}" '"world_size": 2' "it ends with world size 2"
contains "${summary:-$T/none}" '"resumed_from_step": 10' "round 1 resumed from the checkpoint of step 10"
contains "$T/pa.err" "3 ranks before, 2 now: each rank keeps batch_size 32 x grad_accum 1 \(a global batch of 64\)" \
  "each rank keeps batch_size 32: the global batch is 64 on 2 ranks"
contains "$T/pa.err" "2 ranks of at most 3: the learning rate is scaled by 0.666667" \
  "elastic_lr: linear scales the learning rate by 2/3"

# --- 2:3 on token shards: the same, by sequence ----------------------------------
# A tiny gpt2 over two llm.c shards (vocab 67) with shuffle: a step's global batch is
# 3 ranks x 2 sequences of 8 x grad_accum 2 = 12 sequences (96 tokens), one sample of
# the order (worker/data/tokens.h), kept on 2 ranks with grad_accum 3.
python3 - "$T/tok" <<'PY'
import os, random, struct, sys
d = sys.argv[1]
os.makedirs(d)
rng = random.Random(27)
for name, n in (("train_000000.bin", 1000), ("train_000001.bin", 700)):
    toks = [rng.randrange(67) for _ in range(n)]
    head = [20240520, 1, n] + [0] * 253
    open(os.path.join(d, name), "wb").write(struct.pack("<256i", *head) + struct.pack("<%dH" % n, *toks))
PY
cat >"$T/tok.yaml" <<EOF
name: eltok
nodes: 2:3
nproc_per_node: 1
backend: tcp
trainer:
  model: {type: gpt2, n_layer: 1, n_head: 2, n_embd: 16, vocab_size: 67, block_size: 8}
  data: {dataset: tokens, train: "$T/tok/train_*.bin", batch_size: 2, seq_len: 8, shuffle: true}
  ddp: {grad_accum: 2}
  steps: 14
  scheduler: {type: constant}
  checkpoint: {every_steps: 4}
  eval: {batches: 0}
rendezvous: {timeout: 20s, last_call_timeout: 1s, heartbeat_timeout: 20s}
max_restarts: 0
EOF
kill_one_of_three "$T/tok.yaml" t 9 8
contains "$T/ta.err" "round 1: node 0 of 2" "the token job's round 1 runs on the two survivors"
summary=$(ls "$T"/runs/eltok-*/trainer_summary.json 2>/dev/null | head -n 1)
contains "${summary:-$T/none}" '"steps": 14,' "the token job ends at the spec's last step"
contains "${summary:-$T/none}" '"world_size": 2' "it ends with world size 2"
contains "${summary:-$T/none}" '"resumed_from_step": 8' "round 1 resumed from the checkpoint of step 8"
contains "$T/ta.err" "grad_accum 2 -> 3 keeps the global batch of 12" \
  "the global batch (3 ranks x 2 sequences x 2) is kept on 2 ranks with grad_accum 3"
check "no sequence lost or read twice over the rounds (steps 1-14, 12 a step)" no_loss "$T/tsamples" 14 12

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

# --- 2:3 below MIN: the job fails within rendezvous.timeout -------------------------
# Node 0 and one agent run a command job; the agent is killed: the one node left is
# below MIN 2, so round 1 waits rendezvous.timeout (3 s) for another and the job ends
# with the failure status, a sentence saying why, and no rank left running.
cat >"$T/min.yaml" <<EOF
name: min
nodes: 2:3
command: [sh, -c, 'echo \$\$ >"$T/min.rank.\$DTRAIN_RESTART_COUNT.\$RANK"; exec sleep 60']
rendezvous: {timeout: 3s, last_call_timeout: 0.5s, heartbeat_timeout: 20s}
max_restarts: 0
EOF
NN=2:3
port=$(free_port)
agent "$T/min.yaml" m0 "$port" --node-rank 0
agent "$T/min.yaml" m1 "$port"
check "the 2:3 job runs on two nodes" wait_for "$(limit_s 10)" test -s "$T/min.rank.0.0" -a -s "$T/min.rank.0.1"
kill -9 "$(cat "$T/m1.pid")"
t0=$SECONDS
check "node 0 ends within rendezvous.timeout plus a margin (3 s + 10 s)" \
  wait_for "$(limit_s 13)" test -f "$T/m0.rc"
echo "    node 0 ended $((SECONDS - t0)) s after the kill"
check "node 0 exits with the failure status 1 ($(rc_of m0))" test "$(rc_of m0)" = 1
contains "$T/m0.err" "round 1: only 1 of the 2 nodes the job needs \(nodes 2:3\) joined" \
  "node 0 says too few nodes are left"
contains "$T/m0.err" "within rendezvous.timeout \(3s\)" "and which timeout passed"
check "no rank is left running" sh -c "! kill -0 $(cat "$T/min.rank.0.0") 2>/dev/null && ! kill -0 $(cat "$T/min.rank.0.1") 2>/dev/null"
check "no round 1 rank was started" test ! -e "$T/min.rank.1.0"
summary=$(ls "$T"/runs/min-*/summary.json 2>/dev/null | head -n 1)
contains "${summary:-$T/none}" '"status": "failed"' "summary.json says the job failed"
contains "${summary:-$T/none}" '"ended_by": "membership"' "summary.json: round 0 ended by a membership change"
contains "${summary:-$T/none}" '"lost_node": {"node": [1-9]' "summary.json names the lost node"

# --- --nnodes errors ----------------------------------------------------------------
expect_status 2 "--nnodes 3:2 is refused" "$DTRAIN" agent "$T/cmd.yaml" --nnodes 3:2 --coordinator 127.0.0.1:1
contains "$T/last.err" "MIN 3 above MAX 2" "and says MIN is above MAX"
expect_status 2 "--nnodes 1:x is refused" "$DTRAIN" agent "$T/cmd.yaml" --nnodes 1:x --coordinator 127.0.0.1:1
expect_status 2 "an elastic agent without --coordinator is refused" "$DTRAIN" agent "$T/cmd.yaml" --nnodes 1:2
contains "$T/last.err" "--coordinator HOST:PORT is needed for an elastic job" "and says --coordinator is needed"
