#!/usr/bin/env bash
# The GPU check (docs/PERFORMANCE.md "GPU check"): builds amptune against the CUDA PyTorch of a
# machine with an NVIDIA GPU and no network, then measures native CUDA fp16/bf16 against amptune's
# CPU-style emulation on that GPU, FP8 GEMMs emulated against torch._scaled_mm, checkpoints moving
# between CPU and GPU, and ResNet-50 against PyTorch eager AMP. Everything it prints goes to
# OUTDIR too (table.txt, the logs).
#
#   tools/gpu-check.sh --fetch-debs DIR     here, on Debian 12 with its apt archive: download the
#                                           .debs the GPU machine lacks (list: DEBS below)
#   tools/gpu-check.sh [--debs DIR] OUTDIR  there: unpack DIR's .debs into OUTDIR/prefix (dpkg -x),
#                                           build against python3's torch, run the phases
#   tools/gpu-check.sh --cpu-dry-run [--debs DIR] [--build-dir DIR] OUTDIR
#                                           the same pipeline on this CPU with tiny step counts
#                                           (device cpu, fp16 "native" cells emulated): proves the
#                                           script, measures nothing; --build-dir DIR builds
#                                           there (reuse a build) instead of OUTDIR/work/build
#
# The GPU machine needs: an NVIDIA driver, the CUDA toolkit that its PyTorch's CMake files look
# for (nvcc on PATH or in /usr/local/cuda), a C++17 compiler (g++ >= 9), python3 with a CUDA
# PyTorch 2.x built with the C++11 ABI. cmake (>= 3.21), ninja, pkg-config and sqlite3 come from
# the .debs when missing there. Environment: PYTHON (default python3), JOBS (default nproc),
# STEPS (quickstart cells' steps, default 300), TORCH_CUDA_ARCH_LIST (default 9.0, an H200).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)

# Debian 12 packages carried to the GPU machine: the -dev packages amptune builds against
# (tools/install-deps.sh without LibTorch, Python and Gloo: the PyTorch there brings its own),
# the libraries they link, the tools, and the quickstart's Fashion-MNIST. Their library
# dependencies are added by --fetch-debs (apt-cache depends), less the base system (BASE).
DEBS=(
  libyaml-cpp-dev libsqlite3-dev sqlite3 libssl-dev nlohmann-json3-dev
  libturbojpeg0-dev libpng-dev zlib1g-dev libboost-program-options-dev libgtest-dev
  cmake cmake-data ninja-build pkgconf pkg-config
  libtcmalloc-minimal4  # the binary's malloc, as on the CPU (docs/PERFORMANCE.md "Allocator")
  dataset-fashion-mnist
)
BASE='^(libc6|libc6-dev|libgcc-s1|libstdc\+\+6|gcc-12-base|libcrypt1|debconf|dpkg|perl-base|tar|procps|libselinux1|libzstd1|liblzma5|libbz2-1.0|libtinfo6|libncursesw6|libsystemd0|init-system-helpers|libgcc-12-dev|libstdc\+\+-12-dev|g\+\+.*|gcc.*|cpp.*|binutils.*|libmd0|zlib1g|debconf-2.0|libpcre2-8-0|libcap2|libgcrypt20|libgpg-error0|liblz4-1|libudev1|libaudit1|libpam.*|mawk|base-files|sensible-utils|ucf|coreutils|lsb-base|sysvinit-utils|libcap-ng0|libaudit-common|libsemanage.*|libsepol2|libacl1|libattr1|passwd|adduser|login|libdb5.3|libsmartcols1|libmount1|libblkid1|libuuid1|libprocps8|libproc2-0|libc-dev-bin|linux-libc-dev|libcrypt-dev|libnsl-dev|libtirpc.*|rpcsvc-proto|lib(asan|tsan|lsan|ubsan|itm|atomic|quadmath|gomp)[0-9]+|perl|perl-modules-.*|libperl.*|lib.*-perl|libgdbm.*|usrmerge|usr-is-merged|install-info|libelogind0)$'

if [ "${1:-}" = --fetch-debs ]; then
  dir=${2:?usage: tools/gpu-check.sh --fetch-debs DIR}
  mkdir -p "$dir"
  mapfile -t all < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
      --no-breaks --no-replaces --no-enhances --no-pre-depends "${DEBS[@]}" |
    grep -v '^ ' | grep -v '^<' | grep -Ev "$BASE" | sort -u)
  echo "gpu-check: downloading ${#all[@]} packages into $dir"
  (cd "$dir" && apt-get download "${all[@]}")
  du -sh "$dir"
  exit 0
fi

dry=0
debs=""
build=""
while [ $# -gt 1 ]; do
  case "$1" in
    --cpu-dry-run) dry=1; shift ;;
    --debs) debs=$2; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    *) break ;;
  esac
done
[ $# -eq 1 ] || { sed -n '2,20p' "$0"; exit 2; }
out=$(mkdir -p "$1" && cd "$1" && pwd)
work=$out/work
mkdir -p "$work"
table=$out/table.txt
: >"$table"
say() { echo "$*" | tee -a "$table"; }
fail() { echo "gpu-check: $*" | tee -a "$table" >&2; exit 1; }
# phase NAME SECONDS CMD...: runs CMD under a time limit with its output in OUTDIR/NAME.log.
phase() {
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS rc=0
  timeout --kill-after=10 "$limit" "$@" >"$out/$name.log" 2>&1 || rc=$?
  echo "gpu-check: phase $name: exit $rc in $((SECONDS - t0)) s (limit $limit s, log $name.log)" |
    tee -a "$out/phases.txt"
  return $rc
}
PYTHON=${PYTHON:-python3}
JOBS=${JOBS:-$(nproc)}
if ((dry)); then STEPS=${STEPS:-12}; else STEPS=${STEPS:-300}; fi
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}

# ---- 0. the machine ---------------------------------------------------------------------------
{
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  host: $(hostname)  mode: $( ((dry)) && echo cpu-dry-run || echo gpu)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || echo "nvidia-smi: none"
  "$PYTHON" -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__,
    "cuda", torch.version.cuda, "available", torch.cuda.is_available(),
    "cxx11_abi", torch._C._GLIBCXX_USE_CXX11_ABI, "cmake", torch.utils.cmake_prefix_path)' 2>&1
  echo "nvcc: $(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || echo none)"
  echo "c++: $(command -v c++ g++ clang++ | sed -n 1p) $(c++ --version 2>/dev/null | sed -n 1p)"
  echo "cmake: $(command -v cmake || echo none)  ninja: $(command -v ninja || echo none)  sqlite3: $(command -v sqlite3 || echo none)"
  ldd --version 2>&1 | sed -n 1p
} | tee "$out/env.txt"
"$PYTHON" -c 'import torch' 2>/dev/null || fail "$PYTHON cannot import torch (set PYTHON=...)"
if ! ((dry)); then
  "$PYTHON" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null ||
    fail "$PYTHON's torch sees no CUDA device (nvidia-smi, CUDA_VISIBLE_DEVICES?)"
  "$PYTHON" -c 'import torch; assert torch._C._GLIBCXX_USE_CXX11_ABI' 2>/dev/null ||
    fail "this PyTorch uses the pre-C++11 ABI; Debian's yaml-cpp/Boost/GoogleTest cannot link with it"
  if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH=/usr/local/cuda/bin:$PATH
  fi
  command -v nvcc >/dev/null || echo "gpu-check: warning: no nvcc; a CUDA LibTorch's CMake files may not configure"
fi
command -v c++ >/dev/null || command -v g++ >/dev/null || fail "no C++ compiler (install g++ >= 9)"

# ---- 1. the carried Debian packages -----------------------------------------------------------
prefix=$out/prefix
cmake_args=()
if [ -n "$debs" ]; then
  mkdir -p "$prefix"
  n=0
  for deb in "$debs"/*.deb; do dpkg -x "$deb" "$prefix"; n=$((n + 1)); done
  echo "gpu-check: unpacked $n packages from $debs into $prefix" | tee -a "$out/env.txt"
  lib=$prefix/usr/lib/x86_64-linux-gnu
  export PATH=$PATH:$prefix/usr/bin                       # the machine's own tools first
  export AMPTUNE_PREFIX_LIBS=$lib:$prefix/usr/lib
  export PKG_CONFIG_PATH=$lib/pkgconfig:$prefix/usr/share/pkgconfig
  export PKG_CONFIG_SYSROOT_DIR=$prefix                   # their .pc files say prefix=/usr
  # Find modules (SQLite3, OpenSSL) search <prefix>/include and <prefix>/lib/<arch>; the
  # packages' CMake config files (yaml-cpp, GTest, Boost, nlohmann_json) are relocatable.
  cmake_args+=("-DCMAKE_PREFIX_PATH=$prefix/usr" "-DCMAKE_LIBRARY_PATH=$lib"
               "-DCMAKE_INCLUDE_PATH=$prefix/usr/include" "-DCMAKE_BUILD_RPATH=$lib")
fi
# $with_libs CMD...: CMD with the carried libraries found (a file, so that `timeout` can run it);
# python3 runs without them.
with_libs=$work/with-libs
# shellcheck disable=SC2016  # the wrapper expands LD_LIBRARY_PATH when it runs
printf '#!/bin/sh\nLD_LIBRARY_PATH=%s${LD_LIBRARY_PATH:-} exec "$@"\n' \
  "${AMPTUNE_PREFIX_LIBS:+$AMPTUNE_PREFIX_LIBS:}" >"$with_libs"
chmod +x "$with_libs"
fmnist=/usr/share/datasets/fashion-mnist
[ -d "$fmnist" ] || fmnist=$prefix/usr/share/datasets/fashion-mnist
[ -d "$fmnist" ] || fail "no Fashion-MNIST: carry dataset-fashion-mnist (--fetch-debs) and pass --debs DIR"

# ---- 2. build against the PyTorch found here ---------------------------------------------------
build=${build:-$work/build}
# Ninja for a new build folder; a reused one (--build-dir) keeps the generator it was made with.
gen=(); command -v ninja >/dev/null && [ ! -f "$build/CMakeCache.txt" ] && gen=(-G Ninja)
# The arguments tools/test.sh --torch pip builds with (tools/torch-pip.sh --python): on the GPU
# machine its python3's CUDA PyTorch, in a dry run the pip PyTorch 2.x of .deps/ when PYTHON is
# it (PYTHON=.deps/torch-2.11.0/bin/python), else this machine's LibTorch (Debian's).
torch_arg=()
if ! ((dry)) || "$PYTHON" -c 'import sys, torch; sys.exit(int(torch.__version__.split(".")[0]) < 2)' \
    2>/dev/null; then
  mapfile -t torch_arg < <("$repo/tools/torch-pip.sh" --python "$(command -v "$PYTHON")")
  torch_arg[0]="${torch_arg[0]}${debs:+;$prefix/usr}"
fi
phase configure 120 "$with_libs" cmake -S "$repo" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DAMPTUNE_BUILD_TESTS=ON "-DPython3_EXECUTABLE=$(command -v "$PYTHON")" "${cmake_args[@]}" \
  "${torch_arg[@]}" || fail "configure failed: $out/configure.log"
grep -E "amptune:" "$out/configure.log" | tee -a "$out/env.txt"
phase build 420 "$with_libs" cmake --build "$build" -j "$JOBS" || fail "build failed: $out/build.log"
amptune=("$with_libs" "$build/amptune")

# ---- 3. unit tests ----------------------------------------------------------------------------
# The whole unit tier (the 2.x build's behaviour), then the CUDA-only tests by name; a test
# that finds no CUDA reports itself skipped.
phase unit_tests 150 "$with_libs" ctest --test-dir "$build" -L unit -j "$JOBS" --output-on-failure ||
  say "FAIL unit tests (unit_tests.log)"
phase cuda_tests 60 "$with_libs" "$build/tests/unit/train/train_checkpoint_test" \
  --gtest_filter='*Cuda*' || say "FAIL CUDA tests (cuda_tests.log)"

# ---- 4. quickstart cells: native vs emulated --------------------------------------------------
# The quickstart model and data, one epoch of STEPS steps, dynamic loss scale. "native" cells
# use CUDA autocast / fp16 models; "emulate" cells the fp32 kernels with fp16 rounding that
# the CPU uses, here on the GPU. The dry run has no fp16 kernels: its "native" cells say auto.
# Cells 7 and 8 add emulated FP8 GEMMs (amp.fp8, delayed scaling) on the O1 bf16 base, native
# and emulated: the FP8 rounding's tensor-op path on the GPU, and what it costs there. Cell 9,
# where the build has torch._scaled_mm (LibTorch 2.5+; not a dry run on Debian's 1.13), is cell 7
# with amp.fp8.gemm scaled_mm: the Linear (fc) on FP8 tensor cores.
device=cuda native=native
if ((dry)); then device=cpu native=auto; fi
scaled_mm=1
if ((dry)) && [ ${#torch_arg[@]} -eq 0 ]; then scaled_mm=0; fi
c9_level="" c9_dtype="" c9_backend="" c9_fp8="" c9_gemm=""
if ((scaled_mm)); then
  c9_level=", O1" c9_dtype=", bf16" c9_backend=", $native" c9_fp8=", true" c9_gemm=", scaled_mm"
fi
db=$work/gpu_check.sqlite
cat >"$work/gpu_check.yaml" <<EOF
name: gpu_check
description: tools/gpu-check.sh quickstart cells, native CUDA mixed precision vs emulation
base:
  model: {name: resnet18, num_classes: 10, in_channels: 1, width: 0.25, small_input: true}
  data: {format: idx, root: $fmnist, train_split: train, val_split: t10k, mean: [0.286],
         std: [0.353], batch_size: 128, eval_batch_size: 500, workers: 4}
  optim: {name: sgd, lr: 0.1, momentum: 0.9, nesterov: true, weight_decay: 0.0005}
  schedule: {epochs: 1, lr_policy: cosine, skip_steps: 20, training_step_per_epoch: $STEPS,
             eval_step_per_epoch: 20}
  amp.loss_scale: dynamic
  device: $device
  threads: 0
zip:
  - amp.opt_level: [O0, O1, O2, O1, O1, O2, O1, O1$c9_level]
    amp.dtype: [fp16, fp16, fp16, bf16, fp16, fp16, bf16, bf16$c9_dtype]
    amp.backend: [auto, $native, $native, $native, emulate, emulate, $native, emulate$c9_backend]
    amp.fp8.enabled: [false, false, false, false, false, false, true, true$c9_fp8]
    amp.fp8.gemm: [emulate, emulate, emulate, emulate, emulate, emulate, emulate, emulate$c9_gemm]
EOF
((dry)) && sed -i 's/skip_steps: 20/skip_steps: 2/; s/eval_step_per_epoch: 20/eval_step_per_epoch: 2/' "$work/gpu_check.yaml"
phase cells 300 "${amptune[@]}" run "$work/gpu_check.yaml" --db "$db" --no-progress ||
  say "FAIL quickstart cells (cells.log)"

# ---- 4b. one Linear's FP8 step: emulated against torch._scaled_mm ---------------------------
# tests/bench/fp8_gemm_bench.cpp on an 8192^3 Linear (a dry run: 256^3 on the CPU): ms per
# step of bf16, fp32, FP8 emulated and FP8 by scaled_mm, and scaled_mm's output and gradients
# against the emulation's (the table judges those, and reports the times).
if ((dry)); then gemm_size=(cpu 256 256 256 3); else gemm_size=(cuda 8192 8192 8192 9); fi
phase fp8_gemm_bench 120 "$with_libs" "$build/tests/bench/amp_fp8_gemm_bench" "${gemm_size[@]}" ||
  say "FAIL FP8 GEMM bench (fp8_gemm_bench.log)"

# ---- 5. checkpoints between CPU and GPU ------------------------------------------------------
# device auto: a run picks CUDA when it sees a GPU; CUDA_VISIBLE_DEVICES= hides it. Cell seed 1
# trains epoch 0 on the GPU and resumes on the CPU, seed 2 the other way round; each must finish
# epoch 1 with a finite loss. O2 fp16 dynamic: weights, fp32 masters, momentum and scaler move.
xdb=$work/xdevice.sqlite
cat >"$work/xdevice.yaml" <<EOF
name: xdevice
base:
  model: {name: resnet18, num_classes: 10, in_channels: 1, width: 0.25, small_input: true}
  data: {format: idx, root: $fmnist, train_split: train, val_split: t10k, mean: [0.286],
         std: [0.353], batch_size: 64, eval_batch_size: 500, workers: 2}
  optim: {name: sgd, lr: 0.05, momentum: 0.9}
  schedule: {epochs: 2, training_step_per_epoch: 10, eval_step_per_epoch: 2, skip_steps: 2}
  amp: {opt_level: O2, dtype: fp16, loss_scale: dynamic, backend: auto}
  device: auto
grid:
  seed: [1, 2]
EOF
# xdevice.sh SEED FIRST SECOND: epoch 0 of the cell with that seed where FIRST says (gpu: as the
# machine is; cpu: CUDA_VISIBLE_DEVICES= ), then `amptune resume` of the run where SECOND says.
cat >"$work/xdevice.sh" <<EOF
#!/usr/bin/env bash
set -euxo pipefail
on() { if [ "\$1" = cpu ]; then shift; CUDA_VISIBLE_DEVICES= "\$@"; else shift; "\$@"; fi; }
on "\$2" "$build/amptune" run "$work/xdevice.yaml" --db "$xdb" --only "seed=\$1" \\
  --stop-after-epoch 0 --no-progress
run=\$(sqlite3 "$xdb" "select name from runs where json_extract(config_json, '\$.seed') = \$1")
on "\$3" "$build/amptune" resume "\$run" --db "$xdb"
EOF
phase xdevice_gpu_to_cpu 90 "$with_libs" bash "$work/xdevice.sh" 1 gpu cpu ||
  say "FAIL checkpoint GPU -> CPU (xdevice_gpu_to_cpu.log)"
phase xdevice_cpu_to_gpu 90 "$with_libs" bash "$work/xdevice.sh" 2 cpu gpu ||
  say "FAIL checkpoint CPU -> GPU (xdevice_cpu_to_gpu.log)"

# ---- 5b. amptune tune on native CUDA fp16 ------------------------------------------------------
# The planted search of docs/TUNE.md (experiments/tune_planted.yaml: conv1's input beyond fp16)
# with the search's runs on the GPU (amp.backend auto: CUDA autocast): the diagnosis, its advice
# and the answer (conv1 kept in fp32) as on the CPU's emulation. The path goes into
# tune_native.log, the answer line into the table.
tdb=$work/tune.sqlite
phase tune_native 240 "${amptune[@]}" tune "$repo/experiments/tune_planted.yaml" --db "$tdb" \
  --no-progress --set "data.root=$fmnist" --set "device=$device" ||
  say "FAIL tune on native CUDA (tune_native.log)"
{ grep -E "^(answer|no answer|epochs):" "$out/tune_native.log" || true; } |
  sed 's/^/tune native: /' | tee -a "$table"

# ---- 6. ResNet-50 like for like: tools/gpu-bench.sh ------------------------------------------
# amptune against PyTorch eager with the same recipe (docs/PERFORMANCE.md "GPU benchmark (like
# for like)"); here its mode S for O2 fp16 in both layouts, once (BENCH_MODES, BENCH_REPS and
# BENCH_CELLS widen it; tools/gpu-bench.sh alone runs the whole table, sized for about 6 minutes).
# The dry run runs its own tiny CPU cells. Its table goes into this one's.
printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "$with_libs" "$build/amptune" >"$work/amptune-with-libs"
chmod +x "$work/amptune-with-libs"
bench_args=(--modes "${BENCH_MODES:-S}" --reps "${BENCH_REPS:-1}")
((dry)) && bench_args+=(--cpu-dry-run)
S_CELLS=${BENCH_CELLS:-$( ((dry)) || echo "O2-fp16:cl:on O2-fp16:nchw:on")} \
  PYTHON=$PYTHON IDX=$fmnist phase gpu_bench 420 "$repo/tools/gpu-bench.sh" "${bench_args[@]}" \
  --amptune "$work/amptune-with-libs" "$out/gpu-bench" || say "FAIL gpu-bench (gpu_bench.log)"

# ---- 7. the table --------------------------------------------------------------------------
"$PYTHON" - "$db" "$xdb" "$out/gpu-bench/results.json" "$dry" "$out/fp8_gemm_bench.log" \
  <<'EOF' | tee -a "$table"
import json, math, os, re, sqlite3, sys
db, xdb, bench_json, dry, gemm_log = sys.argv[1:6]
dry = dry == "1"

def runs(path, sweep):
    if not os.path.exists(path):
        return []
    con = sqlite3.connect(path)
    out = []
    q = ("select r.id, r.opt_level, r.dtype, r.backend, r.status, r.config_json from runs r "
         "join sweeps s on s.id = r.sweep_id where s.name = ? order by r.cell_index")
    for rid, level, dtype, backend, status, cfg in con.execute(q, (sweep,)):
        m = {}
        last = con.execute("select max(epoch) from epochs where run_id = ?", (rid,)).fetchone()[0]
        for name, value in con.execute(
                "select name, value from metrics where run_id = ? and epoch = ?", (rid, last)):
            m[name] = value
        row = con.execute("select train_loss, train_fps_mean from epochs "
                          "where run_id = ? and epoch = ?", (rid, last)).fetchone()
        if row:
            m["train_loss"], m["train_fps_mean"] = row
        m["epochs"] = 0 if last is None else last + 1
        amp = json.loads(cfg).get("amp", {})
        asked = amp.get("backend", "")
        fp8 = bool(amp.get("fp8", {}).get("enabled", False))
        gemm = amp.get("fp8", {}).get("gemm", "emulate")
        out.append(dict(level=level, dtype=dtype, backend=backend, asked=asked, status=status,
                        fp8=fp8, gemm=gemm, **m))
    return out

def fmt(v, nd=1):
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{nd}f}"

cells = runs(db, "gpu_check")
print()
print("Quickstart cells (narrow ResNet-18, Fashion-MNIST, batch 128, one epoch)")
print(f"{'cell':<18}{'backend':<9}{'status':<9}{'img/s':>9}{'overflow':>10}{'scale':>10}"
      f"{'train_loss':>12}{'acc1':>8}")
for c in cells:
    label = f"{c['level']} {c['dtype'] if c['level'] != 'O0' else 'fp32'}"
    label += (" + fp8" + (" mm" if c["gemm"] == "scaled_mm" else "")) if c["fp8"] else ""
    print(f"{label:<18}{c['backend'] or '-':<9}{c['status']:<9}{fmt(c.get('train_fps_mean')):>9}"
          f"{fmt(c.get('overflow_steps'), 0):>10}{fmt(c.get('loss_scale'), 0):>10}"
          f"{fmt(c.get('train_loss'), 4):>12}{fmt(c.get('acc1'), 2):>8}")

# Tolerances: emulation rounds where the GPU's kernels round, but sums in another order, so
# overflow steps may differ by a few: |d overflow| <= max(2, 10 % of native); the final scale
# within one halving / doubling; acc1 within 0.5 points.
print()
print("Native vs emulated fp16 (tolerances: overflow steps max(2, 10 %), final scale x/÷2, acc1 0.5)")
verdicts = []
for level in ("O1", "O2"):
    nat = [c for c in cells if c["level"] == level and c["dtype"] == "fp16" and c["asked"] != "emulate"]
    emu = [c for c in cells if c["level"] == level and c["dtype"] == "fp16" and c["asked"] == "emulate"]
    if not nat or not emu:
        print(f"{level} fp16: missing cells"); verdicts.append(False); continue
    n, e = nat[0], emu[0]
    try:
        d_over = abs(n["overflow_steps"] - e["overflow_steps"])
        ok_over = d_over <= max(2.0, 0.1 * n["overflow_steps"])
        ratio = max(n["loss_scale"], e["loss_scale"]) / min(n["loss_scale"], e["loss_scale"])
        ok_scale = ratio <= 2.0
        d_acc = abs(n["acc1"] - e["acc1"])
        ok_acc = d_acc <= 0.5
    except (KeyError, TypeError, ZeroDivisionError):
        print(f"{level} fp16: metrics missing"); verdicts.append(False); continue
    ok = ok_over and ok_scale and ok_acc
    verdicts.append(ok)
    print(f"{level} fp16: overflow {fmt(n['overflow_steps'],0)} vs {fmt(e['overflow_steps'],0)} "
          f"(d {fmt(d_over,0)}), scale {fmt(n['loss_scale'],0)} vs {fmt(e['loss_scale'],0)}, "
          f"acc1 {fmt(n['acc1'],2)} vs {fmt(e['acc1'],2)} (d {fmt(d_acc,2)}), "
          f"img/s {fmt(n.get('train_fps_mean'))} vs {fmt(e.get('train_fps_mean'))}: "
          f"{'PASS' if ok else 'FAIL'}")
# FP8 on the bf16 base, native and emulated: the FP8 GEMMs compute the same values either way
# (amp/fp8_gemm.h), the other ops differ by bf16 kernels' sums: both finish with a finite loss
# and acc1 within 1 point; the cost against the bf16 cell is reported, not judged.
fp8 = {c["asked"]: c for c in cells if c["fp8"] and c["gemm"] == "emulate"}
bf16 = [c for c in cells if not c["fp8"] and c["dtype"] == "bf16" and c["asked"] != "emulate"]


def judged(label, judge):
    """Prints `label`'s line from judge() -> (ok, text) and returns ok; a metric missing from a
    cell fails the line."""
    try:
        ok, text = judge()
    except (KeyError, TypeError):
        print(f"{label}: metrics missing")
        return False
    print(f"{label}: {text}: {'PASS' if ok else 'FAIL'}")
    return ok


def native_vs_emulated(n, e):
    finite = all(c["status"] == "done" and math.isfinite(c["train_loss"]) for c in (n, e))
    d_acc = abs(n["acc1"] - e["acc1"])
    cost = (f", img/s {fmt(n.get('train_fps_mean'))} against O1 bf16's "
            f"{fmt(bf16[0].get('train_fps_mean'))}" if bf16 else "")
    return finite and d_acc <= 1.0, (
        f"acc1 {fmt(n['acc1'],2)} native vs {fmt(e['acc1'],2)} emulated (d {fmt(d_acc,2)}), "
        f"train_loss {fmt(n['train_loss'],4)} vs {fmt(e['train_loss'],4)}{cost}")


# The same cell with its Linear through torch._scaled_mm (m): the FP8 values are the emulation's,
# the sums in another order - finite, acc1 within 1 point of the emulated FP8 GEMMs' cell (n).
def scaled_mm_vs_emulated(m, n):
    ok = (m["status"] == "done" and math.isfinite(m["train_loss"])
          and abs(m["acc1"] - n["acc1"]) <= 1.0)
    return ok, (f"acc1 {fmt(m['acc1'],2)} vs {fmt(n['acc1'],2)} (FP8 GEMMs emulated), img/s "
                f"{fmt(m.get('train_fps_mean'))} vs {fmt(n.get('train_fps_mean'))}")


mm = [c for c in cells if c["fp8"] and c["gemm"] == "scaled_mm"]
if "emulate" in fp8 and len(fp8) == 2:
    n = next(c for a, c in fp8.items() if a != "emulate")
    e = fp8["emulate"]
    verdicts.append(judged("O1 bf16 + fp8 (delayed)", lambda: native_vs_emulated(n, e)))
    if mm:
        verdicts.append(judged("O1 bf16 + fp8 by scaled_mm",
                               lambda: scaled_mm_vs_emulated(mm[0], n)))
else:
    print("O1 bf16 + fp8: missing cells"); verdicts.append(False)
# One Linear's step (fp8_gemm_bench): scaled_mm's output and gradients within 1e-3 of the
# emulation's largest value; the times reported.
gemm_text = open(gemm_log).read() if os.path.exists(gemm_log) else ""
diffs = [float(v) for v in re.findall(r"max \|emulated\| = (\S+)", gemm_text)]
print()
print("One Linear's FP8 step (fp8_gemm_bench; ms per step, ratio to bf16)")
for line in gemm_text.splitlines():
    if re.match(r"(Linear|bf16|fp32|FP8|scaled_mm vs|no scaled_mm)", line):
        print("  " + line)
if diffs:
    ok = len(diffs) == 3 and all(d <= 1e-3 for d in diffs)
    print(f"scaled_mm against emulated FP8: {'PASS' if ok else 'FAIL'}")
    verdicts.append(ok)
elif "no scaled_mm kind" in gemm_text and dry:
    print("scaled_mm against emulated FP8: (dry run on a LibTorch without it: no claim)")
else:
    print("scaled_mm against emulated FP8: missing"); verdicts.append(False)
o0 = [c for c in cells if c["level"] == "O0"]
for level in ("O1", "O2"):
    nat = [c for c in cells if c["level"] == level and c["dtype"] == "fp16" and c["asked"] != "emulate"]
    if o0 and nat and o0[0].get("train_fps_mean") and nat[0].get("train_fps_mean"):
        speed = nat[0]["train_fps_mean"] / o0[0]["train_fps_mean"]
        ok = speed > 1.0
        verdicts.append(ok or dry)
        print(f"{level} fp16 native vs O0: {speed:.2f}x img/s: "
              f"{'PASS' if ok else ('(dry run: no claim)' if dry else 'FAIL')}")

print()
print("Checkpoints between devices (O2 fp16 dynamic, epoch 0 on one, epoch 1 on the other)")
for c, what in zip(runs(xdb, "xdevice"), ("GPU -> CPU", "CPU -> GPU")):
    ok = (c["status"] == "done" and c["epochs"] == 2 and c.get("train_loss") is not None
          and math.isfinite(c["train_loss"]))
    verdicts.append(ok)
    print(f"{what}: status {c['status']}, epoch 1 train_loss {fmt(c.get('train_loss'), 4)}, "
          f"acc1 {fmt(c.get('acc1'), 2)}: {'PASS' if ok else 'FAIL'}")

print()
print("ResNet-50 like for like (tools/gpu-bench.sh; its table: gpu-bench/table.txt)")
bench = json.load(open(bench_json)) if os.path.exists(bench_json) else None
for c in (bench or {}).get("cells", []):
    print(f"{c['mode']} {c['cell']}: amptune {fmt(c['amptune_img_s'])} img/s, eager "
          f"{fmt(c['eager_img_s'])} img/s, ratio {fmt(c['ratio'], 3)}, MFU amptune "
          f"{fmt(c['mfu_amptune'])} %{' (dry run: no claim)' if dry else ''}")
verdicts.append(bool(bench and bench["cells"]) and
                all(not c["failed"] for c in bench["cells"]))
print()
print("verdict:", "PASS" if verdicts and all(verdicts) else "FAIL",
      "(dry run: the pipeline only, no GPU numbers)" if dry else "")
EOF
echo "gpu-check: $SECONDS s in all; table in $table, logs in $out" | tee -a "$out/phases.txt"
