#!/usr/bin/env bash
# render.sh - writes examples/kubernetes/<name>.k8s.yaml from each <name>.yaml here.
#
#   examples/kubernetes/render.sh [RENDER...]     default RENDER: dtrain render kubernetes
#
# Run from the repository root (the manifests name the spec by that path).  The job
# token in the committed manifests is replaced by a placeholder: a real render makes
# a fresh one, and a token published in a repository protects nothing.  Render your
# own manifests to run a job; tests/integration/test_kubernetes.sh checks these are
# what the renderer writes today.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -gt 0 ] || set -- dtrain render kubernetes
for spec in examples/kubernetes/*.yaml; do
  case "$spec" in *.k8s.yaml) continue ;; esac
  "$@" "$spec" | sed -E 's/^(  token: ).*/\1"REPLACE-ME: render your own (dtrain render kubernetes makes a fresh token)"/' \
    > "${spec%.yaml}.k8s.yaml"
done
