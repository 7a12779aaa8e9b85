#!/usr/bin/env bash
# PyTorch 2.x from pip for amptune's second build (README.md "Building against another LibTorch"):
# installs the pinned wheel, which carries LibTorch's headers, CMake package and libraries built
# with CUDA 13 and NCCL (they run on the CPU when no GPU is there), into the project-local
# virtual environment .deps/torch-VERSION (idempotent: nothing is downloaded when it is there),
# then prints the CMake arguments that build against it, one per line.
#
#   tools/torch-pip.sh            # install if needed; print the arguments
#   tools/torch-pip.sh --python P # print the arguments for P's torch (installs nothing): the
#                                 # path tools/gpu-check.sh takes on a GPU machine
#
# AMPTUNE_TORCH_VERSION overrides the pin (2.11.0: the PyTorch of the GPU machine, CUDA 13.0 as
# this machine's toolkit), AMPTUNE_TORCHVISION_VERSION its torchvision (0.X+15 for torch 2.X:
# tools/eager_bench.py, the PyTorch side of tools/gpu-check.sh, needs it and numpy). About 4.7 GB
# in .deps, 2-3 minutes of download.
set -euo pipefail
cd "$(dirname "$0")/.."
# Both name a folder this script replaces (.deps/torch-VERSION) and go to pip: release numbers
# only, checked before any use.
release() {
  [[ $1 =~ ^[0-9]+\.[0-9]+(\.[0-9]+)?$ ]] || {
    echo "torch-pip: $2 '$1' is not a release number such as 2.11.0" >&2
    exit 2
  }
}
version=${AMPTUNE_TORCH_VERSION:-2.11.0}
release "$version" AMPTUNE_TORCH_VERSION
minor=$(echo "$version" | cut -d. -f2)
vision=${AMPTUNE_TORCHVISION_VERSION:-0.$((minor + 15)).0}
release "$vision" AMPTUNE_TORCHVISION_VERSION
if [ "${1:-}" = --python ]; then
  python=${2:?usage: tools/torch-pip.sh --python PYTHON}
else
  venv=.deps/torch-$version
  python=$PWD/$venv/bin/python
  if ! "$python" -c "import sys, torch; sys.exit(torch.__version__.split('+')[0] != '$version')" \
      >/dev/null 2>&1; then
    echo "torch-pip: installing torch==$version into $venv (CUDA and NCCL libraries included)" >&2
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "torch==$version" >&2
  fi
  if ! "$python" -c "import numpy, torchvision" >/dev/null 2>&1; then
    "$venv/bin/pip" install --quiet --disable-pip-version-check "torch==$version" \
      "torchvision==$vision" numpy >&2
  fi
fi
# torch prints a warning without numpy; only the path goes to stdout.
prefix=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null) ||
  { echo "torch-pip: $python cannot import torch" >&2; exit 1; }
echo "-DCMAKE_PREFIX_PATH=$prefix"
echo "-DPython3_EXECUTABLE=$python"
# amptune compiles no CUDA kernels itself; one architecture keeps LibTorch's CMake files quiet.
echo "-DTORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}"
