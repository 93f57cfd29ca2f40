#!/usr/bin/env bash
# install-deps.sh - installs what dtrain needs to build and test, and only what is missing.
#
# Idempotent and quick when everything is there (one dpkg-query), so `make demo`
# and `make test` call it every time.  Debian packages come through apt-get; the
# Python packages the tests use as peers and oracles (PyTorch, tensorboard, ...)
# through pip, into the interpreter the tests use (scripts/python-deps.txt).
#
#   scripts/install-deps.sh            install what is missing
#   scripts/install-deps.sh --check    only report; exit 1 if something is missing
#   DTRAIN_SKIP_PIP=1                  leave Python packages alone
set -euo pipefail

cd "$(dirname "$0")/.."

DEB_PACKAGES=(
  build-essential pkg-config
  libyaml-dev libuv1-dev libcmocka-dev libopenblas-dev zlib1g-dev
  openmpi-bin libopenmpi-dev
  dataset-fashion-mnist
  clang python3 python3-pip procps iproute2
  chromium
)

check_only=0
[ "${1:-}" = "--check" ] && check_only=1

missing=()
for p in "${DEB_PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  case "$status" in
    *"install ok installed"*) ;;
    *) missing+=("$p") ;;
  esac
done

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null; then sudo "$@"
  else echo "install-deps: need root (or sudo) to run: $*" >&2; exit 1
  fi
}

if [ ${#missing[@]} -gt 0 ]; then
  if [ $check_only = 1 ]; then
    echo "install-deps: missing Debian packages: ${missing[*]}"; exit 1
  fi
  echo "install-deps: installing ${missing[*]}"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Python packages: peers (PyTorch's TCPStore and Gloo) and oracles (fixtures, TensorBoard reader).
if [ "${DTRAIN_SKIP_PIP:-0}" != 1 ] && [ -s scripts/python-deps.txt ]; then
  py=$(command -v python3)
  need=()
  while read -r req; do
    req=${req%%#*}; req=$(echo "$req" | xargs)
    [ -z "$req" ] && continue
    mod=${req%%[<>=]*}
    case "$mod" in tensorboard) imp=tensorboard ;; kubernetes-validate) imp=kubernetes_validate ;; *) imp=${mod//-/_} ;; esac
    "$py" -c "import $imp" >/dev/null 2>&1 || need+=("$req")
  done < scripts/python-deps.txt
  if [ ${#need[@]} -gt 0 ]; then
    if [ $check_only = 1 ]; then echo "install-deps: missing Python packages: ${need[*]}"; exit 1; fi
    echo "install-deps: pip installing ${need[*]} (PyTorch is large; pip keeps it in its cache)"
    "$py" -m pip install -q --disable-pip-version-check "${need[@]}"
  fi
fi

[ $check_only = 1 ] && echo "install-deps: nothing missing"
exit 0
