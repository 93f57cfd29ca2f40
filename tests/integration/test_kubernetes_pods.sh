#!/usr/bin/env bash
# test_kubernetes_pods.sh - the pods of examples/kubernetes/minimal.k8s.yaml, run as local processes.
#
# k8s_pods.py starts each pod's command with exactly the files and environment the
# rendered manifest gives it (the ConfigMap and Secret under a directory standing in for
# /etc/dtrain, JOB_COMPLETION_INDEX, the downward-API values, the pod names resolving to
# 127.0.0.1 through DTRAIN_HOSTS_FILE).  Pod 1 starts first, before pod 0's name exists,
# as pods start in any order: its agent must wait for the name, then the 2 pods x 2 ranks
# train the bundled trainer to completion.  Then a pod whose pod 0 never comes fails with
# a message naming what to look at, within rendezvous.timeout.  A pod runs what a merged
# kubernetes.pod_template gives it.  Last, a job with restarts left loses pod 1's agent
# (kill -9) mid-run and the Job controller's replacement pod of index 1 comes 5 s later: the
# job finishes on both (the agents' side: a round that waits for the lost node's new agent).
# run-tests: uses port29500
. "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/../.."

PY=$(command -v python3)
# The pod names must resolve only through DTRAIN_HOSTS_FILE, or this test proves nothing about it.
if getent hosts fmnist-0.fmnist >/dev/null 2>&1; then
  not_ok "fmnist-0.fmnist resolves on this machine without the hosts override"
else
  ok "fmnist-0.fmnist does not resolve here: only DTRAIN_HOSTS_FILE makes the pods find each other"
fi
"$DTRAIN" render kubernetes examples/kubernetes/minimal.yaml >"$T/minimal.k8s.yaml" 2>"$T/render.err" ||
  { not_ok "dtrain render kubernetes: $(cat "$T/render.err")"; exit 1; }

mkdir -p "$T/pods"
start=$(date +%s)
"$PY" tests/integration/k8s_pods.py "$T/minimal.k8s.yaml" "$T/pods" 1 0 --delay 1.5 --timeout 240 >"$T/pods.out" 2>&1
rc=$?
secs=$(( $(date +%s) - start ))
if [ $rc = 0 ] && grep -q '^pod 1 exit 0' "$T/pods.out" && grep -q '^pod 0 exit 0' "$T/pods.out"; then
  ok "2 pods x 2 ranks of the rendered Job train to completion (pod 1 started first; ${secs} s)"
else
  not_ok "the simulated pods did not both succeed"; sed 's/^/    /' "$T/pods.out"
  for i in 0 1; do echo "    --- pod $i stderr"; tail -n 15 "$T/pods/pod-$i.err" | sed 's/^/    /'; done
fi
contains "$T/pods/pod-1.err" "waiting for 'fmnist-0.fmnist' to resolve" "pod 1's agent waited for pod 0's name"

# Node 0 writes the run's summary; the run id is the Job's UID (k8s_pods.py's fake one).
summary=$(ls "$T"/pods/pod-0/work/runs/fmnist-3f2a9c1be4d7/summary.json 2>/dev/null)
if [ -n "$summary" ] && "$PY" - "$summary" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["status"] == "succeeded", s["status"]
assert s["world_size"] == 4 and s["nnodes"] == 2, (s["world_size"], s["nnodes"])
PY
then ok "pod 0 wrote summary.json: succeeded, 4 ranks on 2 nodes, run id from the Job's UID"
else not_ok "no succeeded summary.json under pod-0/work/runs/fmnist-3f2a9c1be4d7/"; ls -R "$T/pods/pod-0/work" | head -20
fi
contains "$T/pods/pod-1.err" "node 1 of 2, 2 ranks .*global ranks 2-3.*coordinator fmnist-0.fmnist:29500" \
  "pod 1's agent ran global ranks 2-3 against fmnist-0.fmnist:29500"
check "pod 1's ranks left their logs in pod 1's run directory (same run id)" \
  test -f "$T/pods/pod-1/work/runs/fmnist-3f2a9c1be4d7/attempt_0/rank_2.out" -a \
       -f "$T/pods/pod-1/work/runs/fmnist-3f2a9c1be4d7/attempt_0/rank_3.out"
ts="$T/pods/pod-0/work/runs/fmnist-3f2a9c1be4d7/trainer_summary.json"
if [ -f "$ts" ] && "$PY" - "$ts" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["steps"] == 50 and s["world_size"] == 4, s
assert s["final_loss"] < 2.0 and s["test_accuracy"] > 0.5, s  # 50 steps of an MLP: about 0.6 and 0.78
PY
then ok "the trainer ran its 50 steps over 4 ranks and learned (trainer_summary.json)"
else not_ok "trainer_summary.json shows no completed 50-step, 4-rank run"; cat "$ts" 2>/dev/null | head; fi

# Pod 0 never comes: the agent gives up after rendezvous.timeout, saying where to look.
sed 's/^name: fmnist$/name: lonely/; s/^nodes: 2$/nodes: 2\nrendezvous: {timeout: 2s}/' \
  examples/kubernetes/minimal.yaml >"$T/lonely.yaml"
"$DTRAIN" render kubernetes "$T/lonely.yaml" >"$T/lonely.k8s.yaml" || not_ok "render lonely.yaml"
mkdir -p "$T/lonely"
start=$(date +%s)
"$PY" tests/integration/k8s_pods.py "$T/lonely.k8s.yaml" "$T/lonely" 1 --timeout 60 >"$T/lonely.out" 2>&1
took=$(( $(date +%s) - start ))
if grep -Eq '^pod 1 exit [1-9]' "$T/lonely.out" && [ $took -lt 30 ]; then
  ok "a pod without pod 0 fails after rendezvous.timeout (${took} s)"
else
  not_ok "a pod without pod 0 should fail within the timeout (took ${took} s)"; cat "$T/lonely.out"
fi
contains "$T/lonely/pod-1.err" "'lonely-0.lonely' did not resolve within 2s.*Service 'lonely' exist in namespace 'default'" \
  "its message names the coordinator's name, the Service and the namespace"

# dtrain launch goes through the adapter's submit: without kubectl it says how to go on.
expect_status 2 "dtrain launch of a kubernetes job without kubectl exits 2" \
  env PATH=/nonexistent "$DTRAIN" launch examples/kubernetes/minimal.yaml
contains "$T/last.err" "kubectl is not on PATH" "it says kubectl is missing"
contains "$T/last.err" "dtrain render kubernetes examples/kubernetes/minimal.yaml > job.k8s.yaml" \
  "it prints the render command"

# With a kubectl (a fake one playing a Job whose agents fail with 3): apply, follow, exit with 3.
mkdir -p "$T/kbin"
cat >"$T/kbin/kubectl" <<'SH'
#!/bin/sh
d=$(dirname "$0")
case "$*" in
  'apply -f - -o jsonpath={.metadata.uid}') cat >"$d/applied"; printf 0f0f0f0f-1111-2222-3333-444455556666 ;;
  'apply -f -') cat >>"$d/applied"; echo "configmap/fmnist-spec created" ;;
  *exitCode*) printf '0 3 ' ;;
  'get pods'*) printf 'fmnist-0-a=Running fmnist-1-b=Running ' ;;
  'get job/fmnist'*) printf 'FailureTarget Failed' ;;
  logs*) echo '[pod/fmnist-1-b/agent] dtrain: rank 2 exited with code 3' ;;
esac
SH
chmod +x "$T/kbin/kubectl"
expect_status 3 "dtrain launch applies with kubectl and exits with the failed agents' code" \
  env PATH="$T/kbin:$PATH" "$DTRAIN" launch examples/kubernetes/minimal.yaml
check "what it applied is the rendered manifest (ConfigMap ... Job)" \
  grep -q '^kind: Job' "$T/kbin/applied"
contains "$T/kbin/applied" "^      uid: \"?0f0f0f0f-1111-2222-3333-444455556666\"?$" \
  "the Job went first, and its uid owns the ConfigMap, Secret and Service applied after it"
contains "$T/last.out" "pod/fmnist-1-b/agent. dtrain: rank 2 exited with code 3" "the pods' logs are streamed"

# A pod runs what the merged pod_template says: an env entry the template adds to the agent
# container reaches the rank (through the agent), as the manifest gives it to the pod.
cat >"$T/probe.yaml" <<'YAML'
name: probe
scheduler: kubernetes
nodes: 1
command: [sh, -c, 'echo "probe=$PROBE" > probe.txt; echo "mark=${SETUP_MARK:-none}" > setup.txt']
setup: ['export SETUP_MARK=from-setup']
kubernetes:
  image: img
  pod_template:
    spec:
      containers: [{name: agent, env: [{name: PROBE, value: from-template}]}]
YAML
"$DTRAIN" render kubernetes "$T/probe.yaml" >"$T/probe.k8s.yaml" || not_ok "render probe.yaml"
mkdir -p "$T/probe"
"$PY" tests/integration/k8s_pods.py "$T/probe.k8s.yaml" "$T/probe" 0 --timeout 60 >"$T/probe.out" 2>&1
if grep -q '^pod 0 exit 0' "$T/probe.out" && grep -qx 'probe=from-template' "$T/probe/pod-0/work/probe.txt" 2>/dev/null; then
  ok "the simulated pod ran the merged pod_template (its env reached the rank)"
else
  not_ok "the merged pod_template's env did not reach the rank"; cat "$T/probe.out"; ls -R "$T/probe" | head
fi
check "the pod's shell ran the setup: lines before the agent (their environment reached the rank)" \
  grep -qx 'mark=from-setup' "$T/probe/pod-0/work/setup.txt"
contains "$T/probe.k8s.yaml" "^            - dtrain-setup$" "the rendered container runs setup in /bin/sh, then execs the agent"


# A container that does not run as root reads the token through the pod's fsGroup: the kubelet
# makes the Secret's file 0440 under that group, and the agent accepts that in a pod.
cat >"$T/fsg.yaml" <<YAML
name: fsg
scheduler: kubernetes
nodes: 1
command: ["true"]
kubernetes:
  image: img
  pod_template: {spec: {securityContext: {fsGroup: $(id -g)}}}
YAML
"$DTRAIN" render kubernetes "$T/fsg.yaml" >"$T/fsg.k8s.yaml" || not_ok "render fsg.yaml"
mkdir -p "$T/fsg"
"$PY" tests/integration/k8s_pods.py "$T/fsg.k8s.yaml" "$T/fsg" 0 --timeout 60 >"$T/fsg.out" 2>&1
check "the token file is 0440 under the pod's fsGroup ($(stat -c %a "$T/fsg/pod-0/etc/dtrain/token" 2>/dev/null))" \
  test "$(stat -c %a "$T/fsg/pod-0/etc/dtrain/token" 2>/dev/null)" = 440
if grep -q '^pod 0 exit 0$' "$T/fsg.out"; then ok "the agent takes a token readable by the pod's fsGroup"
else not_ok "the agent takes a token readable by the pod's fsGroup"; sed 's/^/    /' "$T/fsg.out"; tail -n 5 "$T/fsg/pod-0.err" | sed 's/^/    /'; fi

# --- a lost pod replaced: pod 1's agent killed mid-run, its replacement 5 s later ------------------
# The checkpoints on a volume every pod mounts (an absolute checkpoint.dir), as a real job's are.
sed "s/^name: fmnist\$/name: frep/; s|^  steps: 50\$|  steps: 3000\n  log_every_steps: 20\n  checkpoint: {every_steps: 100, dir: $T/rep-ckpt}|; s/^nodes: 2\$/nodes: 2\nmax_restarts: 2\nrendezvous: {timeout: 60s, heartbeat_timeout: 5s}/" \
  examples/kubernetes/minimal.yaml >"$T/rep.yaml"
"$DTRAIN" render kubernetes "$T/rep.yaml" >"$T/rep.k8s.yaml" || not_ok "render rep.yaml"
contains "$T/rep.k8s.yaml" "^  backoffLimitPerIndex: 2$" "with restarts left the Job controller replaces a lost pod (backoffLimitPerIndex 2)"
mkdir -p "$T/rep"
"$PY" tests/integration/k8s_pods.py "$T/rep.k8s.yaml" "$T/rep" 0 1 --timeout 240 >"$T/rep.out" 2>&1 &
kp=$!
RRUN="$T/rep/pod-0/work/runs/frep-3f2a9c1be4d7"
for _ in $(seq 600); do grep -q '"step": [1-9][0-9][0-9]' "$RRUN/metrics.jsonl" 2>/dev/null && break; sleep 0.1; done
agent=$(pgrep -f "agent $T/rep/pod-1/etc/dtrain/job.yaml" | head -n 1)
check "pod 1's agent runs (pid ${agent:-none}) once the job has trained 100 steps" test -n "$agent"
[ -n "$agent" ] && kill -9 "$agent"
sleep 5
"$PY" tests/integration/k8s_pods.py --again "$T/rep.k8s.yaml" "$T/rep" 1 --timeout 240 >"$T/rep.again.out" 2>&1
wait "$kp"
check "the killed pod 1 ends 137 ($(grep '^pod 1' "$T/rep.out"))" grep -q '^pod 1 exit 137$' "$T/rep.out"
if grep -q '^pod 0 exit 0$' "$T/rep.out" && grep -q '^pod 1 exit 0$' "$T/rep.again.out"; then
  ok "a lost pod's replacement joins 5 s later and the job finishes on both (pod 0 and the new pod 1 exit 0)"
else
  not_ok "the job with a replaced pod should finish on both"; sed 's/^/    /' "$T/rep.out" "$T/rep.again.out"
  tail -n 8 "$T/rep/pod-0.err" "$T/rep/pod-1.again.err" 2>/dev/null | sed 's/^/    /'
fi
contains "$(ls "$RRUN/trainer_summary.json" 2>/dev/null || echo "$T/none")" '"steps": 3000' \
  "the training reached its last step"
