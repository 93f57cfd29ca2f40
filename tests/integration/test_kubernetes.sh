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
. "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/../.."

RENDER=("$DTRAIN" render k8s)  # k8s: the alias of kubernetes
KV=$(command -v kubernetes-validate || true)
PY=$(command -v python3)
if [ -z "$KV" ]; then
  not_ok "kubernetes-validate is not installed (scripts/install-deps.sh installs it into .venv from scripts/python-deps.txt)"
  exit 1
fi
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
  for v in 1.37.0 1.31.0; do
    if "${offline[@]}" "$KV" --strict --quiet -k "$v" "$out" >"$T/kv.out" 2>&1 && ! grep -q . "$T/kv.out"; then
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
  if "$PY" tests/integration/k8s_jobset_check.py "$T/$name.jobset.yaml" "$T/$name.jobset-job.yaml" >"$T/js.out" 2>&1 &&
     "${offline[@]}" "$KV" --strict --quiet -k 1.37.0 "$T/$name.jobset-job.yaml" >"$T/kv.out" 2>&1 &&
     "${offline[@]}" "$KV" --strict --quiet -k 1.31.0 "$T/$name.jobset-job.yaml" >>"$T/kv.out" 2>&1 && ! grep -q . "$T/kv.out"; then
    ok "$name: the JobSet validates (JobSet v1alpha2 schema; its Job on Kubernetes 1.37 and 1.31)"
  else
    not_ok "$name: render jobset"; sed 's/^/    /' "$T/js.out" "$T/kv.out" | head -n 20
  fi
done
sed 's/maxRestarts: 0/maxRestart: 0/' "$T/minimal.jobset.yaml" >"$T/jstypo.yaml"
expect_status 1 "the vendored JobSet schema refuses a misspelled field (the check is live)" \
  "$PY" tests/integration/k8s_jobset_check.py "$T/jstypo.yaml" "$T/jstypo-job.yaml"

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
