#!/usr/bin/env bash
# Builds the tests once more with AddressSanitizer and UndefinedBehaviorSanitizer (-O1 -g1, into
# build-asan/) and runs them; any sanitizer report fails the test that triggered it. The slow
# convergence tests (whole Fashion-MNIST epochs) are left out: under the sanitizers they would take most
# of CI's budget and exercise no code the other tests do not.
#   bash scripts/check-sanitizers.sh          # after scripts/setup.sh has installed the packages
set -euo pipefail
cd "$(dirname "$0")/.."
build="${JOULE_ASAN_BUILD_DIR:-build-asan}"
flags="-O1 -g1 -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=None -DJOULE_WERROR=ON \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
cmake --build "$build" -j "$(nproc)"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1" UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export LSAN_OPTIONS="suppressions=$PWD/scripts/lsan-mpi.supp:print_suppressions=0"  # Open MPI's own (data-parallel tests)
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" --timeout 1200 \
  -E 'Convergence'
