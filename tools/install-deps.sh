#!/usr/bin/env bash
# Installs amptune's build and run dependencies from Debian 12's archive. Idempotent: apt is only
# called for packages that are missing.
#   tools/install-deps.sh         the build, the tests and the quickstart
#   tools/install-deps.sh slurm   Slurm and MUNGE alone, for the local Slurm test (label slurm,
#                                 tests/integration/slurm_test.cpp installs them when missing)
set -euo pipefail
if [ "${1:-}" = slurm ]; then
  packages=(slurm-wlm munge)
else
packages=(
  build-essential cmake pkg-config ccache git
  libtorch-dev libyaml-cpp-dev libsqlite3-dev sqlite3 libssl-dev nlohmann-json3-dev
  libturbojpeg0-dev zlib1g-dev libboost-program-options-dev libgtest-dev googletest
  libgloo-dev  # c10d Gloo process groups: data-parallel training on CPU (docs/DISTRIBUTED.md)
  dataset-fashion-mnist
  gnuplot-nox  # amptune report draws its plots with gnuplot
  chromium  # the browser test of amptune serve (tests/integration/serve_test.cpp)
  libtcmalloc-minimal4  # the amptune binary's malloc (docs/PERFORMANCE.md "Allocator")
  # LibTorch's fp32 matmuls (linear, matmul, LSTM, attention): Debian's LibTorch calls the
  # libblas.so.3 the system selects, and the reference one that libtorch-dev pulls in runs a
  # 1024^3 matmul ~30x slower. OpenBLAS with OpenMP threads, like LibTorch's own; it takes the
  # alternative by priority (docs/PERFORMANCE.md "BLAS").
  libopenblas0-openmp
  python3-torch python3-torchvision  # tests: PyTorch reads exported weights; fixture scripts
  python3-pip  # installs Python's safetensors package below
)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: all ${#packages[@]} packages present"
fi
if [ "${1:-}" != slurm ]; then
  # OpenBLAS takes libblas.so.3 by priority (95 against the reference BLAS's 10) unless the
  # alternative was set by hand; say so rather than override a choice (MKL, BLIS).
  multiarch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
  blas=$(readlink -f "/usr/lib/$multiarch/libblas.so.3" || true)
  case "$blas" in
    */openblas*) echo "install-deps: libblas.so.3 is OpenBLAS ($blas)" ;;
    *) echo "install-deps: libblas.so.3 is $blas, not OpenBLAS: LibTorch's matmuls run on it;" \
            "to select OpenBLAS: $SUDO update-alternatives --set libblas.so.3-$multiarch" \
            "/usr/lib/$multiarch/openblas-openmp/libblas.so.3" ;;
  esac
fi
if [ "${1:-}" != slurm ] && ! /usr/bin/python3 -c 'import safetensors.torch' 2>/dev/null; then
  # tests: Python's safetensors package reads amptune's checkpoints. Not in Debian 12: from PyPI,
  # best effort (offline, the test that needs it skips and says why).
  echo "install-deps: installing the Python package safetensors with pip"
  /usr/bin/python3 -m pip install -q --break-system-packages --root-user-action=ignore safetensors ||
    echo "install-deps: could not install safetensors (no network?); its test will be skipped"
fi
if [ "${1:-}" != slurm ] && ! /usr/bin/python3 -c 'import optuna' 2>/dev/null; then
  # tests: Optuna's pruners are the reference for amptune's (prune_reference_test). Debian's
  # python3-optuna (3.1.0: 1.4 MB and a few small Python packages, from the archive this script
  # uses anyway, known to apt; the test also passes with PyPI's 5.1.0) rather than pip. Best
  # effort: without it that test is skipped and says why.
  echo "install-deps: installing python3-optuna"
  optuna=(env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends
          python3-optuna)
  if ! $SUDO "${optuna[@]}" 2>/dev/null && ! { $SUDO apt-get update -qq && $SUDO "${optuna[@]}"; }
  then
    echo "install-deps: could not install python3-optuna; the Optuna reference test will be skipped"
  fi
fi
