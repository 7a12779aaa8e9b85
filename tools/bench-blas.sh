#!/usr/bin/env bash
# fp32 matmul GFLOP/s of Debian's LibTorch (python3-torch: the same libtorch_cpu.so amptune links)
# on the BLAS the system selects for libblas.so.3 and, side by side, on the libblas.so.3 of each
# folder given (e.g. an OpenBLAS unpacked with dpkg -x, not installed), alternating, ROUNDS
# rounds, each a fresh process. docs/PERFORMANCE.md "BLAS".
#   tools/bench-blas.sh [DIR...]        ROUNDS=3 N=1024 THREADS=2 REPEAT=5 by default
# e.g. apt-get download libopenblas0-openmp && dpkg -x libopenblas0-openmp_*.deb ob &&
#      tools/bench-blas.sh ob/usr/lib/x86_64-linux-gnu/openblas-openmp
set -euo pipefail
ROUNDS=${ROUNDS:-3} N=${N:-1024} THREADS=${THREADS:-2} REPEAT=${REPEAT:-5}
PYTHON=${PYTHON:-/usr/bin/python3}
read -r -d '' CODE <<'PY' || true
import os, sys, time, torch
n, threads, repeat = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(threads)
a, b = torch.randn(n, n), torch.randn(n, n)
torch.mm(a, b)  # warm-up: thread pools, the BLAS's own start-up
start = time.perf_counter()
for _ in range(repeat):
    torch.mm(a, b)
seconds = (time.perf_counter() - start) / repeat
blas = sorted({line.split()[-1] for line in open("/proc/self/maps")
               if "libblas" in line or "openblas" in line or "mkl" in line})
print(f"{2 * n ** 3 / seconds / 1e9:.1f} {os.path.realpath(blas[0]) if blas else '-'}")
PY
configs=(system "$@")
echo "N=$N threads=$THREADS repeat=$REPEAT rounds=$ROUNDS; load average $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 1; r <= ROUNDS; r++)); do
  for c in "${configs[@]}"; do
    if [ "$c" = system ]; then
      out=$("$PYTHON" -c "$CODE" "$N" "$THREADS" "$REPEAT")
    else
      out=$(LD_LIBRARY_PATH="$(cd "$c" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
            "$PYTHON" -c "$CODE" "$N" "$THREADS" "$REPEAT")
    fi
    echo "round $r: ${out%% *} GFLOP/s on ${out#* }"
  done
done
echo "load average $(cut -d' ' -f1-3 /proc/loadavg)"
