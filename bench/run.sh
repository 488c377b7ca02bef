#!/usr/bin/env bash
# Whole-model training-step benchmark against PyTorch 1.13 (Debian's python3-torch), in one run.
#   bash bench/run.sh [--threads 2] [--steps 10] [--only ResNet]
# PyTorch's Linear/MatMul go through the system BLAS: libopenblas0-pthread is installed so that the
# peer does not run on Debian's netlib reference BLAS (which makes its GEMMs several times slower).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
missing=()
for p in python3-torch libopenblas0-pthread; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
exec /usr/bin/python3 bench/compare_pytorch.py --joule "${JOULE_BUILD_DIR:-build}/joule" "$@"
