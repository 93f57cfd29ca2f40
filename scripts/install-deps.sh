#!/usr/bin/env bash
# install-deps.sh - installs what dtrain needs to build and test, and only what is missing.
#
# Idempotent and quick when everything is there (a dpkg-query per Debian package and
# one Python run over the pip requirements), so `make demo` and `make test` call it
# every time.  Debian packages come through apt-get; the
# Python packages the tests use as peers and oracles (PyTorch, tensorboard, ...)
# through pip into the virtual environment .venv/ (Debian 12's own python3 refuses
# pip installs outside one, PEP 668).  The venv sees the system's site-packages,
# so what is already installed is not fetched again; scripts/run-tests.sh and the
# benchmarks put .venv/bin first on PATH.
#
#   scripts/install-deps.sh            install what is missing
#   scripts/install-deps.sh --check    only report; exit 1 if something is missing
#   scripts/install-deps.sh --demo     only what `make demo` needs: the build's libraries and
#                                      Fashion-MNIST (no test tools, no Python packages)
#   DTRAIN_SKIP_PIP=1                  leave Python packages alone
set -euo pipefail

cd "$(dirname "$0")/.."

DEB_PACKAGES=(
  build-essential pkg-config
  libyaml-dev libuv1-dev libjansson-dev libcmocka-dev libopenblas-dev zlib1g-dev
  openmpi-bin libopenmpi-dev
  dataset-fashion-mnist
  bible-kjv-text bible-kjv
  clang libclang-rt-14-dev python3 python3-pip python3-venv procps iproute2 time
  chromium
  slurmctld slurmd slurm-client munge
)

# `make demo`: build dtrain (no MPI, CUDA or cmocka needed) and train on Fashion-MNIST.
DEMO_PACKAGES=(
  build-essential pkg-config
  libyaml-dev libuv1-dev libjansson-dev libopenblas-dev zlib1g-dev
  dataset-fashion-mnist
)

check_only=0
case "${1:-}" in
  --check) check_only=1 ;;
  --demo) DEB_PACKAGES=("${DEMO_PACKAGES[@]}"); DTRAIN_SKIP_PIP=1 ;;
esac

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
  if [ ! -x .venv/bin/python3 ]; then
    if [ $check_only = 1 ]; then echo "install-deps: no Python environment in .venv"; exit 1; fi
    python3 -m venv --system-site-packages .venv
  fi
  py=$PWD/.venv/bin/python3
  # Which requirements are not installed, by distribution name (no import-name guessing).
  mapfile -t need < <("$py" - scripts/python-deps.txt <<'PY'
import importlib.metadata as md, re, sys
for line in open(sys.argv[1]):
    req = line.split('#', 1)[0].strip()
    if not req:
        continue
    dist = re.split(r'[<>=!~\[; ]', req, maxsplit=1)[0]
    try:
        md.version(dist)
    except md.PackageNotFoundError:
        print(req)
PY
)
  if [ ${#need[@]} -gt 0 ]; then
    if [ $check_only = 1 ]; then echo "install-deps: missing Python packages: ${need[*]}"; exit 1; fi
    echo "install-deps: pip installing ${need[*]} (PyTorch is large; pip keeps it in its cache)"
    "$py" -m pip install -q --disable-pip-version-check "${need[@]}"
  fi
fi

[ $check_only = 1 ] && echo "install-deps: nothing missing"
exit 0
