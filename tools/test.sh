#!/usr/bin/env bash
# The test command: installs dependencies (idempotent), builds everything with warnings as
# errors, runs the whole ctest suite. Extra arguments go to ctest: -L unit (the fast tier: one
# ctest test per unit executable), -L integration, -L slow, -L slurm (a real one-node Slurm:
# installs slurm-wlm and munge when missing, needs root, skipped saying why where its daemons
# cannot start; docs/SLURM.md), -R Claims (integration tests by name).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
tools/build.sh -DAMPTUNE_WERROR=ON -DAMPTUNE_BUILD_TESTS=ON
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "${JOBS:-$(nproc)}" "$@"
