// `amptune version`: what this binary is (version, git commit) and what serves it (LibTorch, the
// malloc, the BLAS library). Its arguments are not read.
#include <torch/version.h>

#include <iostream>

#include "cli/commands.h"
#include "core/blas.h"
#include "core/process.h"
#include "core/version.h"

namespace amptune::cli {

int cmd_version(const Invocation&) {
  std::cout << "amptune " << kVersion << " (" << kGitCommit << (kGitDirty ? "-dirty" : "")
            << ")\nLibTorch " << TORCH_VERSION << ", malloc: " << allocator_name()
            << "\nBLAS: " << blas_name() << "\n";
  return 0;
}

}  // namespace amptune::cli
