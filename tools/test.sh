#!/usr/bin/env bash
# The test command: installs dependencies (idempotent), builds everything with warnings as
# errors, runs the whole ctest suite. Extra arguments go to ctest (e.g. -L unit, -R Store).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
tools/build.sh -DAMPTUNE_WERROR=ON -DAMPTUNE_BUILD_TESTS=ON
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "${JOBS:-$(nproc)}" "$@"
