#!/usr/bin/env bash
# Whole-model training-step benchmark against PyTorch 1.13 (Debian's python3-torch), in one run.
#   bash bench/run.sh [--threads 2] [--steps 10]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-torch
fi
exec /usr/bin/python3 bench/compare_pytorch.py --joule "${JOULE_BUILD_DIR:-build}/joule" "$@"
