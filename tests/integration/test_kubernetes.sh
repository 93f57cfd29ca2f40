#!/usr/bin/env bash
# test_kubernetes.sh - the Kubernetes adapter's manifests, as Kubernetes and as YAML readers see them.
#
# Every spec in examples/kubernetes/ is rendered afresh and
#   - validated against the Kubernetes API schemas (kubernetes-validate, strict: unknown
#     fields are errors) for 1.37 (current) and 1.31 (podFailurePolicy GA), offline: the
#     package bundles the schemas, and the run has no network when unshare allows;
#   - read back with PyYAML (k8s_check.py) and compared with the spec: object kinds and
#     names, the ConfigMap holding the spec byte for byte, counts, failure policy, env
#     values YAML would retype, volumes, resources;
#   - compared with the committed examples/kubernetes/<name>.k8s.yaml (render.sh).
# Then what `dtrain launch --dry-run` shows it applies: the Job under the launch's name first,
# then the objects it owns (ownerReferences to its uid), validated the same way; the stable
# label (app.kubernetes.io/name) across launches and the run id's label; the TTL, the failure
# policy of a job with restarts, the JobSet's maxRestarts; and render for the scheduler named on
# the command line.
. "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/../.."

RENDER=("$DTRAIN" render k8s)  # k8s: the alias of kubernetes
KV=$(command -v kubernetes-validate || true)
PY=$(command -v python3)
if [ -z "$KV" ]; then
  not_ok "kubernetes-validate is not installed (scripts/install-deps.sh installs it into .venv from scripts/python-deps.txt)"
  exit 1
fi
# core FILE OUT: the documents of Kubernetes' own kinds (a PodGroup is a CRD the schemas lack;
# k8s_check.py checks its fields against the CRD's spec instead).
core() { "$PY" -c 'import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] != "PodGroup"]
yaml.safe_dump_all(docs, open(sys.argv[2], "w"), sort_keys=False)' "$1" "$2"; }
offline=()
note="network isolated with unshare -n"
if unshare -n true 2>/dev/null; then offline=(unshare -n); else note="unshare unavailable: network not isolated"; fi

for spec in examples/kubernetes/*.yaml; do
  case "$spec" in *.k8s.yaml) continue ;; esac
  name=$(basename "$spec" .yaml)
  out="$T/$name.k8s.yaml"
  if ! "${RENDER[@]}" "$spec" >"$out" 2>"$T/render.err"; then
    not_ok "$name: render failed: $(cat "$T/render.err")"; continue
  fi
  core "$out" "$T/$name.core.yaml"
  for v in 1.37.0 1.31.0; do
    if "${offline[@]}" "$KV" --strict --quiet -k "$v" "$T/$name.core.yaml" >"$T/kv.out" 2>&1 && ! grep -q . "$T/kv.out"; then
      ok "$name: every object validates against the Kubernetes $v API schemas ($note)"
    else
      not_ok "$name: kubernetes-validate $v"; sed 's/^/    /' "$T/kv.out" | head -n 20
    fi
  done
  if "$PY" tests/integration/k8s_check.py "$spec" "$out" >"$T/check.out" 2>&1; then
    ok "$name: read back with a YAML 1.1 reader, the manifest says what the spec says"
  else
    not_ok "$name: manifest differs from the spec"; sed 's/^/    /' "$T/check.out" | head -n 20
  fi
done

# dtrain render jobset: the JobSet against its vendored CRD schema, and its Job and the other
# objects against the Kubernetes schemas, as the JobSet controller would create them.
for spec in examples/kubernetes/*.yaml; do
  case "$spec" in *.k8s.yaml) continue ;; esac
  name=$(basename "$spec" .yaml)
  if ! "$DTRAIN" render jobset "$spec" >"$T/$name.jobset.yaml" 2>"$T/render.err"; then
    not_ok "$name: render jobset failed: $(cat "$T/render.err")"; continue
  fi
  if "$PY" tests/integration/k8s_jobset_check.py "$T/$name.jobset.yaml" "$T/$name.jobset-job.yaml" "$spec" >"$T/js.out" 2>&1 &&
     core "$T/$name.jobset-job.yaml" "$T/$name.jobset-core.yaml" &&
     "${offline[@]}" "$KV" --strict --quiet -k 1.37.0 "$T/$name.jobset-core.yaml" >"$T/kv.out" 2>&1 &&
     "${offline[@]}" "$KV" --strict --quiet -k 1.31.0 "$T/$name.jobset-core.yaml" >>"$T/kv.out" 2>&1 && ! grep -q . "$T/kv.out"; then
    ok "$name: the JobSet validates (JobSet v1alpha2 schema; its Job on Kubernetes 1.37 and 1.31)"
  else
    not_ok "$name: render jobset"; sed 's/^/    /' "$T/js.out" "$T/kv.out" | head -n 20
  fi
done
sed 's/maxRestarts: 0/maxRestart: 0/' "$T/minimal.jobset.yaml" >"$T/jstypo.yaml"
expect_status 1 "the vendored JobSet schema refuses a misspelled field (the check is live)" \
  "$PY" tests/integration/k8s_jobset_check.py "$T/jstypo.yaml" "$T/jstypo-job.yaml" examples/kubernetes/minimal.yaml

# The schema check itself can fail: a misspelled field is refused.
sed 's/completionMode: Indexed/completionMod: Indexed/' "$T/minimal.k8s.yaml" >"$T/typo.yaml"
expect_status 1 "kubernetes-validate refuses a misspelled field (the check is live)" \
  "${offline[@]}" "$KV" --strict --quiet -k 1.37.0 "$T/typo.yaml"

# -o FILE holds the token in its Secret: it is written 0600, also over a file that was 0644.
touch "$T/out.yaml"; chmod 644 "$T/out.yaml"
expect_status 0 "render kubernetes -o FILE" "${RENDER[@]}" examples/kubernetes/minimal.yaml -o "$T/out.yaml"
check "the manifest with the token is readable by its owner only ($(stat -c %a "$T/out.yaml"))" \
  test "$(stat -c %a "$T/out.yaml")" = 600
contains "$T/out.yaml" '^  token: "?[0-9a-f]{64}' "and it holds the token"

# Two renders differ only in the token: each manifest is a new job.
"${RENDER[@]}" examples/kubernetes/minimal.yaml >"$T/again.yaml"
if [ "$(diff "$T/minimal.k8s.yaml" "$T/again.yaml" | grep -c '^[<>]')" = 2 ] &&
   diff "$T/minimal.k8s.yaml" "$T/again.yaml" | grep -q '^<   token: '; then
  ok "a fresh job token in every render, nothing else changes"
else
  not_ok "two renders should differ in the token line only"; diff "$T/minimal.k8s.yaml" "$T/again.yaml" | head
fi

# The committed examples are what the renderer writes today.
mkdir -p "$T/ex/examples/kubernetes" && cp examples/kubernetes/*.yaml examples/kubernetes/render.sh "$T/ex/examples/kubernetes/"
rm -f "$T"/ex/examples/kubernetes/*.k8s.yaml
(cd "$T/ex" && examples/kubernetes/render.sh "${RENDER[@]}")
stale=$(cd examples/kubernetes && for f in *.k8s.yaml; do cmp -s "$f" "$T/ex/examples/kubernetes/$f" || echo "$f"; done)
missing=$(for f in "$T"/ex/examples/kubernetes/*.k8s.yaml; do [ -f "examples/kubernetes/${f##*/}" ] || echo "${f##*/}"; done)
if [ -z "$stale$missing" ]; then
  ok "examples/kubernetes/*.k8s.yaml are up to date with the renderer"
else
  not_ok "examples/kubernetes out of date: $(echo $stale $missing) (run examples/kubernetes/render.sh)"
fi

# --- what launch applies: `dtrain launch --dry-run` ------------------------------------------------
# The manifests after the dry run's marker line, as launch applies them: the Job, then the rest.
dry() { "$DTRAIN" launch --dry-run "$1" 2>"$T/dry.err" | sed -n '/^---- what launch would submit/,$p' | tail -n +2; }
dry examples/kubernetes/gpus.yaml >"$T/dry.yaml"
"$PY" - "$T/dry.yaml" "$T/dry.core.yaml" >"$T/dry.out" 2>&1 <<'PY'
import re, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
kinds = [d["kind"] for d in docs]
assert kinds == ["Job", "ConfigMap", "Service"], kinds  # the Job first; auth: none, so no Secret
job = docs[0]["metadata"]["name"]
assert re.fullmatch(r"llm-pretrain-[0-9a-f]{12}", job), job
for d in docs[1:]:
    assert d["metadata"]["name"].startswith(job), d["metadata"]["name"]
    assert d["metadata"]["ownerReferences"] == [{"apiVersion": "batch/v1", "kind": "Job", "name": job,
                                                 "uid": "<the Job's uid>"}], d["metadata"]
labels = docs[0]["spec"]["template"]["metadata"]["labels"]
assert labels["app.kubernetes.io/name"] == "llm-pretrain" and labels["app.kubernetes.io/instance"] == job, labels
assert labels["dtrain/run-id"] == job[-12:], labels
env = {e["name"]: e.get("value") for e in docs[0]["spec"]["template"]["spec"]["containers"][0]["env"]}
assert env["DTRAIN_K8S_NAME"] == job and env["DTRAIN_K8S_RUN_ID"] == job[-12:], env
assert docs[0]["spec"]["backoffLimitPerIndex"] == 3 and docs[0]["spec"]["suspend"] is True, docs[0]["spec"]
yaml.safe_dump_all(docs, open(sys.argv[2], "w"), sort_keys=False)
print(job)
PY
if [ $? = 0 ]; then ok "launch --dry-run shows the Job under the launch's name first, then the objects it owns"
else not_ok "launch --dry-run shows what launch applies"; sed 's/^/    /' "$T/dry.out" "$T/dry.err" | head -n 20; fi
for v in 1.37.0 1.31.0; do
  if "${offline[@]}" "$KV" --strict --quiet -k "$v" "$T/dry.core.yaml" >"$T/kv.out" 2>&1 && ! grep -q . "$T/kv.out"; then
    ok "what launch applies (owner references included) validates against the Kubernetes $v API schemas"
  else not_ok "launch's manifests, kubernetes-validate $v"; sed 's/^/    /' "$T/kv.out" | head -n 20; fi
done
dry examples/kubernetes/gpus.yaml >"$T/dry2.yaml"
a=$(grep -m1 '^  name: llm-pretrain-' "$T/dry.yaml") b=$(grep -m1 '^  name: llm-pretrain-' "$T/dry2.yaml")
check "two launches: other object names ($a, $b), the same app label" \
  test "$a" != "$b" -a "$(grep -c 'app.kubernetes.io/name: llm-pretrain$' "$T/dry2.yaml")" -gt 3
if grep -q '^  token: "<a fresh job token>"' <(dry examples/kubernetes/minimal.yaml) && ! dry examples/kubernetes/minimal.yaml | grep -Eq '[0-9a-f]{64}'; then
  ok "the dry run shows no job token"; else not_ok "the dry run shows no job token"; fi

# --- render for the scheduler named on the command line; a spec with --set ----------------------
cat >"$T/slurmjob.yaml" <<'YAML'
name: both
scheduler: slurm
nodes: 2
command: [hostname]
slurm: {partition: gpu}
kubernetes: {image: img, ttl_after_finished: 2h}
YAML
expect_status 0 "render k8s of a scheduler: slurm spec renders it for Kubernetes" "${RENDER[@]}" "$T/slurmjob.yaml"
cp "$T/last.out" "$T/both.k8s.yaml"
contains "$T/both.k8s.yaml" "^    scheduler: kubernetes$" "the ConfigMap's spec says scheduler: kubernetes (the pods discover as pods)"
contains "$T/both.k8s.yaml" "^  ttlSecondsAfterFinished: 7200$" "kubernetes.ttl_after_finished: 2h is the Job's TTL"
expect_status 0 "render k8s with --set" "${RENDER[@]}" examples/kubernetes/minimal.yaml --set trainer.steps=7
contains "$T/last.out" "^      steps: 7$" "the ConfigMap holds the spec as given (--set trainer.steps=7)"
check "and no copy of it is left in the log directory" test -z "$(find . runs -maxdepth 1 -name '.dtrain-*' 2>/dev/null | head -n 1)"
