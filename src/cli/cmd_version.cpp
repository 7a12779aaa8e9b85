// `amptune version`: what this binary is (version, git commit) and what serves it (LibTorch, the
// malloc, the BLAS library, the FP8 GEMM paths its LibTorch runs). Its arguments are not read.
#include <torch/version.h>

#include <iostream>

#include "app/run/runner.h"  // (train/plan.h: fp8_gemm_paths)
#include "cli/commands.h"
#include "core/blas.h"
#include "core/process.h"
#include "core/version.h"

namespace amptune::cli {

int cmd_version(const Invocation&) {
  std::cout << "amptune " << kVersion << " (" << kGitCommit << (kGitDirty ? "-dirty" : "")
            << ")\nLibTorch " << TORCH_VERSION << ", malloc: " << allocator_name()
            << "\nBLAS: " << blas_name()
            << "\nFP8 GEMMs (amp.fp8.gemm): " << train::fp8_gemm_paths() << "\n";
  return 0;
}

}  // namespace amptune::cli
