// Which BLAS library the process's fp32 matmuls run on. Debian's LibTorch (BLAS_INFO=generic)
// hands every mm / addmm / bmm to the `sgemm_` of whatever libblas.so.3 the system's alternatives
// select: the reference (netlib) one computes a 1024^3 matmul at ~5 GFLOP/s where OpenBLAS takes
// 140 (docs/PERFORMANCE.md "BLAS"), so a run records the one it had (runs.blas, beside
// runs.allocator). No torch here: the library is found by the symbol, at run time.
#pragma once

#include <string>

namespace amptune {

// The library serving `sgemm_` in this process, described: "OpenBLAS 0.3.21 DYNAMIC_ARCH ...
// SkylakeX MAX_THREADS=64, OpenMP (/usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3)",
// "reference BLAS (netlib, unoptimised: /usr/lib/x86_64-linux-gnu/blas/libblas.so.3)", ...;
// "none (no sgemm_ in the process)" when no shared library exports it (a LibTorch with its BLAS
// linked in: pip's links MKL into libtorch_cpu).
std::string blas_name();

// What to do about `blas` (blas_name()'s words) on a CPU whose /proc/cpuinfo flags line is
// `cpu_flags`; "" when nothing. The reference BLAS: install OpenBLAS. An OpenBLAS whose
// DYNAMIC_ARCH did not know the CPU and took generic SSE kernels (Prescott, Core2, Nehalem, ...;
// Debian's 0.3.21 does so on Intel family 6 model 0xcf, Emerald Rapids): OPENBLAS_CORETYPE=
// SkylakeX (avx512f) or Haswell (avx2 + fma): 3x faster there (docs/PERFORMANCE.md "BLAS").
std::string blas_advice(const std::string& blas, const std::string& cpu_flags);
// The flags line of this machine's /proc/cpuinfo ("" when unreadable).
std::string cpu_flags();

// blas_name's words for a library at `path` (symbolic links resolved) whose
// openblas_get_config() says `openblas_config` ("" when it has none: not OpenBLAS) and whose
// openblas_get_parallel() says `openblas_parallel` (0 sequential, 1 pthreads, 2 OpenMP; -1 not
// known).
std::string describe_blas(const std::string& path, const std::string& openblas_config,
                          int openblas_parallel);

}  // namespace amptune
