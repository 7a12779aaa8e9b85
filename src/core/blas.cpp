#include "core/blas.h"

#include <dlfcn.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

namespace amptune {

std::string describe_blas(const std::string& path, const std::string& openblas_config,
                          int openblas_parallel) {
  if (!openblas_config.empty()) {
    const char* threads = openblas_parallel == 0   ? ", sequential"
                          : openblas_parallel == 1 ? ", pthreads"
                          : openblas_parallel == 2 ? ", OpenMP"
                                                   : "";
    return openblas_config + threads + " (" + path + ")";
  }
  const auto has = [&](const char* word) { return path.find(word) != std::string::npos; };
  if (has("mkl")) return "Intel MKL (" + path + ")";
  // PyTorch's x86 wheels link their BLAS (MKL) into libtorch_cpu.so, which then serves sgemm_.
  if (has("libtorch_cpu")) return "the BLAS built into LibTorch (" + path + ")";
  if (has("blis")) return "BLIS (" + path + ")";
  if (has("atlas")) return "ATLAS (" + path + ")";
  if (has("openblas")) return "OpenBLAS (" + path + ")";
  // Debian installs the reference implementation as .../blas/libblas.so.3 (package libblas3).
  if (has("/blas/libblas.so")) return "reference BLAS (netlib, unoptimised: " + path + ")";
  return path;
}

std::string blas_advice(const std::string& blas, const std::string& cpu_flags) {
  if (blas.rfind("reference BLAS", 0) == 0) {
    return "fp32 matmuls (linear layers, LSTMs, attention; not convolutions) run on the reference "
           "BLAS, 10-30x slower than OpenBLAS: install libopenblas0-openmp (docs/PERFORMANCE.md "
           "\"BLAS\")";
  }
  if (blas.rfind("OpenBLAS", 0) != 0) return "";
  std::istringstream words(cpu_flags);
  const std::set<std::string> flags{std::istream_iterator<std::string>(words), {}};
  const char* target = flags.count("avx512f")                      ? "SkylakeX"
                       : flags.count("avx2") && flags.count("fma") ? "Haswell"
                                                                   : nullptr;
  if (!target) return "";
  for (const char* generic : {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom",
                              "Katmai", "Northwood", "Banias", "Opteron", "Barcelona"}) {
    if (blas.find(" " + std::string(generic) + " ") == std::string::npos) continue;
    return "OpenBLAS does not know this CPU and runs its generic " + std::string(generic) +
           " kernels (several times slower): set OPENBLAS_CORETYPE=" + target +
           " in the environment (docs/PERFORMANCE.md \"BLAS\")";
  }
  return "";
}

std::string cpu_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) == 0) {
      const auto colon = line.find(':');
      return colon == std::string::npos ? "" : line.substr(colon + 1);
    }
  }
  return "";
}

std::string blas_name() {
  void* sgemm = ::dlsym(RTLD_DEFAULT, "sgemm_");
  Dl_info info{};
  if (sgemm == nullptr) return "none (no sgemm_ in the process)";
  if (::dladdr(sgemm, &info) == 0 || info.dli_fname == nullptr) return "unknown";
  // The alternatives' link (/lib/x86_64-linux-gnu/libblas.so.3) to the file it selects.
  std::string path = info.dli_fname;
  if (char* real = ::realpath(info.dli_fname, nullptr)) {
    path = real;
    std::free(real);
  }
  // OpenBLAS says its version, build and threading; looked up in the library that serves sgemm_
  // (already loaded: RTLD_NOLOAD adds a reference, no second copy).
  std::string config;
  int parallel = -1;
  if (void* lib = ::dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD)) {
    using Config = char* (*)();
    using Parallel = int (*)();
    if (const auto get = reinterpret_cast<Config>(::dlsym(lib, "openblas_get_config"))) {
      if (const char* text = get()) config = text;
    }
    if (const auto get = reinterpret_cast<Parallel>(::dlsym(lib, "openblas_get_parallel"))) {
      parallel = get();
    }
    ::dlclose(lib);
  }
  // Trailing spaces of openblas_get_config.
  while (!config.empty() && config.back() == ' ') config.pop_back();
  return describe_blas(path, config, parallel);
}

}  // namespace amptune
