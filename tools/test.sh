#!/usr/bin/env bash
# The test command: installs dependencies (idempotent), builds everything with warnings as
# errors, runs the whole ctest suite. Extra arguments go to ctest: -L unit (the fast tier: one
# ctest test per unit executable), -L integration, -L slow, -L slurm (a real one-node Slurm:
# installs slurm-wlm and munge when missing, needs root, skipped saying why where its daemons
# cannot start; docs/SLURM.md), -R Claims (integration tests by name). tools/test.sh --sanitize
# [ctest args] runs them on an ASan + UBSan build (build-asan). tools/test.sh --torch pip [ctest
# args] builds against PyTorch 2.x from pip (tools/torch-pip.sh: the pinned wheel, CUDA and NCCL
# on, into .deps/) into build-torch2 and runs its unit and integration tiers (default ctest args
# -L 'unit|integration'); with build/ (Debian's 1.13) built too, checkpoints cross between them
# (CheckpointsCli.CrossVersion*).
set -euo pipefail
cd "$(dirname "$0")/.."
# --sanitize (first argument): build into build-asan with AddressSanitizer and
# UndefinedBehaviorSanitizer on amptune's own code (glibc malloc: no tcmalloc under ASan) and run
# the tests there; CI keeps the normal build.
tools/install-deps.sh
build_args=(-DAMPTUNE_WERROR=ON -DAMPTUNE_BUILD_TESTS=ON)
if [ "${1:-}" = --sanitize ]; then
  shift
  export BUILD_DIR=${BUILD_DIR:-build-asan}
  build_args+=("-DAMPTUNE_SANITIZE=address;undefined")
  # LibTorch and its libraries are not built with ASan: their own allocations at exit are not
  # leaks of amptune's; UBSan findings fail the test.
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
fi
if [ "${1:-}" = --torch ]; then
  [ "${2:-}" = pip ] || { echo "usage: tools/test.sh --torch pip [ctest args]" >&2; exit 2; }
  shift 2
  export BUILD_DIR=${BUILD_DIR:-build-torch2}
  mapfile -t torch_args < <(tools/torch-pip.sh)
  build_args+=("${torch_args[@]}")
  [ $# -gt 0 ] || set -- -L 'unit|integration'
  # The other build's binary, for the checkpoint tests across LibTorch versions.
  if [ -x build/amptune ]; then export AMPTUNE_OTHER_BINARY=$PWD/build/amptune; fi
fi
tools/build.sh "${build_args[@]}"
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "${JOBS:-$(nproc)}" "$@"
