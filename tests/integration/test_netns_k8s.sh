# test_netns_k8s.sh - the pods of the rendered examples/kubernetes/minimal.yaml as on nodes of
# their own: k8s_pods.py --netns runs pod i on namespace host i+1 (scripts/netns-cluster.sh)
# with exactly the manifest's files and environment, status.podIP that host's address, and
# the pod names in every host's /etc/hosts once the pod starts (cluster DNS standing in,
# no DTRAIN_HOSTS_FILE): pod 1's agent reaches the coordinator through the rendered
# headless-service name fmnist-0.fmnist, which only resolves to host 1's address.
#
#  - pod 1 starts first and waits for the name; the 2 pods x 2 ranks train to completion;
#    the coordinator connection and the ranks' mesh run between the hosts' addresses;
#  - with heartbeat_timeout 3 s, pod 1's host cut off mid-run: pod 0's agent ends with 1
#    within heartbeat_timeout + a margin and its summary.json names node 1 (pod 1's
#    address) lost; nothing is left running on either host;
#  - with restarts left (max_restarts: 2), pod 1's host lost mid-run (cut off, its processes
#    killed) and the Job controller's replacement pod of index 1 started 5 s later on a third
#    host: it joins the job, which finishes on both (the agents' side: a round that waits for
#    the lost node's new agent).
# Needs root and network namespaces; without them it fails with the reason.
. "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/../.."

. tests/integration/netns_lib.sh
netns_up k 3
A1=$("$NC" addr 1) A2=$("$NC" addr 2)
PY=$(command -v python3)
RUNS=work/runs/fmnist-3f2a9c1be4d7 # the run id is the Job's UID (k8s_pods.py's fake one)

"$DTRAIN" render kubernetes examples/kubernetes/minimal.yaml >"$T/ok.k8s.yaml" 2>"$T/render.err" ||
  { not_ok "dtrain render kubernetes: $(cat "$T/render.err")"; exit 1; }
mkdir -p "$T/ok"
start=$(date +%s)
# host 2's connections while the pods run: to the coordinator and to pod 0's ranks.
( while :; do "$NC" exec 2 ss -Htn state established >>"$T/ok.ss" 2>/dev/null; sleep 0.2; done ) &
sp=$!; pids+=($sp)
"$PY" tests/integration/k8s_pods.py --netns "$NC" "$T/ok.k8s.yaml" "$T/ok" 1 0 --delay 1.5 --timeout 60 >"$T/ok.out" 2>&1
secs=$(( $(date +%s) - start ))
if grep -q '^pod 1 exit 0' "$T/ok.out" && grep -q '^pod 0 exit 0' "$T/ok.out"; then
  ok "2 pods x 2 ranks on two namespace hosts train to completion (pod 1 started first; ${secs} s)"
else
  not_ok "the pods on the namespace hosts did not both succeed"; sed 's/^/    /' "$T/ok.out"
  for i in 0 1; do echo "    --- pod $i stderr"; tail -n 12 "$T/ok/pod-$i.err" | sed 's/^/    /'; done
fi
contains "$T/ok/pod-1.err" "waiting for 'fmnist-0.fmnist' to resolve" "pod 1's agent waited for pod 0's name"
contains "$T/ok/pod-1.err" "coordinator fmnist-0.fmnist:29500" "pod 1's agent used the rendered name fmnist-0.fmnist:29500"
check "the name resolves on the hosts to host 1's address, and not here" \
  sh -c "'$NC' exec 2 getent hosts fmnist-0.fmnist | grep -q '^$A1 ' && ! getent hosts fmnist-0.fmnist >/dev/null"
kill "$sp" 2>/dev/null
contains "$T/ok.ss" "$A2:[0-9]+ +$A1:29500" "host 2 reached the coordinator at host 1's address ($A2 -> $A1:29500)"
if awk -v a="$A1" '{ split($4, p, ":"); if (p[1] == a && p[2] != 29500) n++ } END { exit !n }' "$T/ok.ss"; then
  ok "the ranks' mesh runs between the pods' addresses (status.podIP as DTRAIN_COMM_HOST)"
else not_ok "the ranks' mesh runs between the pods' addresses"; sed 's/^/    /' "$T/ok.ss"; fi
contains "$(ls "$T/ok/pod-0/$RUNS/summary.json" 2>/dev/null || echo "$T/none")" '"world_size": 4' \
  "pod 0 wrote summary.json, 4 ranks"

# --- pod 1's host cut off mid-run ---------------------------------------------------------------
sed 's/^name: fmnist$/name: fcut/; s/^  steps: 50$/  steps: 100000000/; s/^nodes: 2$/nodes: 2\ngrace_period: 1s\nrendezvous: {heartbeat_timeout: 3s}/' \
  examples/kubernetes/minimal.yaml >"$T/cut.yaml"
"$DTRAIN" render kubernetes "$T/cut.yaml" >"$T/cut.k8s.yaml" || not_ok "render cut.yaml"
mkdir -p "$T/cut"
"$PY" tests/integration/k8s_pods.py --netns "$NC" "$T/cut.k8s.yaml" "$T/cut" 0 1 --timeout 60 >"$T/cut.out" 2>&1 &
kp=$!; pids+=($kp)
CRUNS=work/runs/fcut-3f2a9c1be4d7
for _ in $(seq 300); do [ -s "$T/cut/pod-0/$CRUNS/metrics.jsonl" ] && break; sleep 0.1; done
"$NC" cut 2 both
t0=$(date +%s.%N)
for _ in $(seq 300); do grep -q '^pod 0 exit' "$T/cut.out" && break; sleep 0.05; done
took=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
wait "$kp"
# 3 s to notice, 1 s grace, 3 s of margin
check "cut: pod 0 exits 1 within 7 s of the cut ($(grep '^pod 0' "$T/cut.out"), ${took}s)" \
  awk -v t="$took" -v l="$(grep -c '^pod 0 exit 1$' "$T/cut.out")" 'BEGIN { exit !(l == 1 && t < 7) }'
echo "# kubernetes pods, pod 1's host cut: pod 0's agent ended ${took}s after the cut"
contains "$(ls "$T/cut/pod-0/$CRUNS/summary.json" 2>/dev/null || echo "$T/none")" \
  "\"lost_node\": \\{\"node\": 1, .*address $A2:[0-9]+.*stopped acknowledging" "cut: summary.json names node 1 at $A2"
check "cut: pod 1 ends too ($(grep '^pod 1' "$T/cut.out"))" grep -q '^pod 1 exit [1-9]' "$T/cut.out"
check "cut: nothing is left running on either host" test -z "$("$NC" pids)"

# --- pod 1's host lost with restarts left: its replacement on host 3 --------------------------------
"$NC" heal 2 # the cut above is over
sed "s/^name: fmnist\$/name: frep/; s|^  steps: 50\$|  steps: 3000\n  log_every_steps: 20\n  checkpoint: {every_steps: 100, dir: $T/rep-ckpt}|; s/^nodes: 2\$/nodes: 2\nmax_restarts: 2\nrendezvous: {timeout: 60s, heartbeat_timeout: 3s}/" \
  examples/kubernetes/minimal.yaml >"$T/rep.yaml"
"$DTRAIN" render kubernetes "$T/rep.yaml" >"$T/rep.k8s.yaml" || not_ok "render rep.yaml"
mkdir -p "$T/rep"
"$PY" tests/integration/k8s_pods.py --netns "$NC" "$T/rep.k8s.yaml" "$T/rep" 0 1 --timeout 240 >"$T/rep.out" 2>&1 &
kp=$!; pids+=($kp)
RRUN="$T/rep/pod-0/work/runs/frep-3f2a9c1be4d7"
for _ in $(seq 600); do grep -q '"step": [1-9][0-9][0-9]' "$RRUN/metrics.jsonl" 2>/dev/null && break; sleep 0.1; done
"$NC" cut 2 both
for p in $("$NC" pids 2); do kill -9 "$p" 2>/dev/null; done
sleep 5
"$PY" tests/integration/k8s_pods.py --netns "$NC" --again --host 1=3 "$T/rep.k8s.yaml" "$T/rep" 1 --timeout 240 \
  >"$T/rep.again.out" 2>&1
wait "$kp"
if grep -q '^pod 0 exit 0$' "$T/rep.out" && grep -q '^pod 1 exit 0$' "$T/rep.again.out"; then
  ok "pod 1's host lost mid-run: its replacement on host 3 joins 5 s later and the job finishes on both"
else
  not_ok "the job with pod 1's host lost and replaced should finish on both"
  sed 's/^/    /' "$T/rep.out" "$T/rep.again.out"; tail -n 8 "$T/rep/pod-0.err" "$T/rep/pod-1.again.err" 2>/dev/null | sed 's/^/    /'
fi
contains "$(ls "$RRUN/trainer_summary.json" 2>/dev/null || echo "$T/none")" '"steps": 3000' \
  "the training reached its last step"
check "nothing is left running on any host" test -z "$("$NC" pids)"
