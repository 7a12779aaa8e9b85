#!/usr/bin/env bash
# Configures and builds amptune into build/ (Release). Extra arguments go to cmake's configure
# step, e.g. tools/build.sh -DCMAKE_PREFIX_PATH=/opt/libtorch for another LibTorch.
# BUILD_TARGET=amptune builds the binary alone (no tests).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$build_dir" -j "${JOBS:-$(nproc)}" ${BUILD_TARGET:+--target "$BUILD_TARGET"}
