#!/usr/bin/env bash
# Installs the Debian packages joule's build and tests need (only those missing), then configures and
# builds into build/. Idempotent: a second run installs nothing and rebuilds only what changed.
#   bash scripts/setup.sh            # packages + Release build
#   JOULE_BUILD_DIR=out bash scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake ninja-build pkg-config libgtest-dev libgmock-dev
          libdnnl-dev nlohmann-json3-dev libcli11-dev libyaml-cpp-dev libsqlite3-dev zlib1g-dev
          dataset-fashion-mnist
          ocl-icd-opencl-dev opencl-headers  # Debian's dnnl-config.cmake finds OpenCL even for a CPU build
          chromium fonts-liberation          # the tests render joule report's pages in headless Chromium
          libonnx-dev libprotobuf-dev        # users' own models: ONNX import and export (src/import/)
          python3-torch python3-torchvision  # PyTorch 1.13: the tests check the training loop and ONNX import against it
          openmpi-bin libopenmpi-dev)        # data-parallel training runs on MPI (mpirun -np N joule train)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

build="${JOULE_BUILD_DIR:-build}"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DJOULE_WERROR=ON >/dev/null
cmake --build "$build" -j "$(nproc)"
