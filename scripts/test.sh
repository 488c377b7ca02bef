#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (GoogleTest via ctest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
build="${JOULE_BUILD_DIR:-build}"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" --timeout 900
