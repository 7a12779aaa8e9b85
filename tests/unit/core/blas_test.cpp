// core/blas.h: which BLAS serves sgemm_ in the process, as a run records it (runs.blas).
#include "core/blas.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace amptune {
namespace {

TEST(Blas, DescribesOpenBlasByItsConfigAndTheOthersByTheirFile) {
  EXPECT_EQ(describe_blas("/usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3",
                          "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY SkylakeX MAX_THREADS=64", 2),
            "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY SkylakeX MAX_THREADS=64, OpenMP "
            "(/usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3)");
  EXPECT_EQ(describe_blas("/x/libopenblas.so.0", "OpenBLAS 0.3.21", 0),
            "OpenBLAS 0.3.21, sequential (/x/libopenblas.so.0)");
  EXPECT_EQ(
      describe_blas("/usr/lib/x86_64-linux-gnu/blas/libblas.so.3.11.0", "", -1),
      "reference BLAS (netlib, unoptimised: /usr/lib/x86_64-linux-gnu/blas/libblas.so.3.11.0)");
  EXPECT_EQ(describe_blas("/opt/intel/mkl/lib/libmkl_rt.so.2", "", -1),
            "Intel MKL (/opt/intel/mkl/lib/libmkl_rt.so.2)");
  EXPECT_EQ(describe_blas("/usr/lib/x86_64-linux-gnu/blis-openmp/libblas.so.3", "", -1),
            "BLIS (/usr/lib/x86_64-linux-gnu/blis-openmp/libblas.so.3)");
  EXPECT_EQ(describe_blas("/usr/lib/x86_64-linux-gnu/atlas/libblas.so.3.10.3", "", -1),
            "ATLAS (/usr/lib/x86_64-linux-gnu/atlas/libblas.so.3.10.3)");
  EXPECT_EQ(describe_blas("/v/site-packages/torch/lib/libtorch_cpu.so", "", -1),
            "the BLAS built into LibTorch (/v/site-packages/torch/lib/libtorch_cpu.so)");
  EXPECT_EQ(describe_blas("/somewhere/libfoo.so", "", -1), "/somewhere/libfoo.so");
}

// The reference BLAS: install OpenBLAS. An OpenBLAS whose DYNAMIC_ARCH fell back to generic
// kernels on a CPU it does not know (Debian's 0.3.21 says Prescott on an Emerald Rapids VM, where
// OPENBLAS_CORETYPE=SkylakeX ran 3x faster): the core type to set. Nothing otherwise.
TEST(Blas, AdvisesOnTheReferenceBlasAndOnOpenBlasWithGenericKernels) {
  const std::string avx512 = "fpu sse sse2 avx fma avx2 avx512f hypervisor";
  EXPECT_NE(blas_advice("reference BLAS (netlib, unoptimised: /b)", avx512)
                .find("install libopenblas0-openmp"),
            std::string::npos);
  const std::string prescott =
      "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY USE_OPENMP Prescott MAX_THREADS=64, "
      "OpenMP (/o)";
  EXPECT_NE(blas_advice(prescott, avx512).find("runs its generic Prescott kernels"),
            std::string::npos);
  EXPECT_NE(blas_advice(prescott, avx512).find("OPENBLAS_CORETYPE=SkylakeX"), std::string::npos);
  EXPECT_NE(blas_advice(prescott, "fpu sse avx fma avx2").find("OPENBLAS_CORETYPE=Haswell"),
            std::string::npos);
  EXPECT_EQ(blas_advice(prescott, "fpu sse sse2 sse3"), "");  // Prescott is that CPU's best
  const std::string skylakex =
      "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY USE_OPENMP SkylakeX MAX_THREADS=64, "
      "OpenMP (/o)";
  EXPECT_EQ(blas_advice(skylakex, avx512), "");
  EXPECT_EQ(blas_advice("Intel MKL (/m)", avx512), "");
}

// This test links no BLAS: none is named until the system's libblas.so.3 (the one Debian's
// LibTorch takes) is loaded, then the file the alternatives select is.
TEST(Blas, NamesTheLibraryServingSgemm) {
  EXPECT_EQ(blas_name(), "none (no sgemm_ in the process)");
  void* lib = ::dlopen("libblas.so.3", RTLD_NOW | RTLD_GLOBAL);
  if (!lib) GTEST_SKIP() << "no libblas.so.3 on this system";
  Dl_info info{};
  ASSERT_NE(::dladdr(::dlsym(lib, "sgemm_"), &info), 0);
  const std::string file = std::filesystem::canonical(info.dli_fname).string();
  const std::string name = blas_name();
  EXPECT_NE(name.find(file), std::string::npos) << name << " should name " << file;
  if (file.find("/blas/libblas.so") != std::string::npos) {
    EXPECT_EQ(name.rfind("reference BLAS (netlib", 0), 0u) << name;
  } else if (::dlsym(lib, "openblas_get_config")) {
    EXPECT_EQ(name.rfind("OpenBLAS ", 0), 0u) << name;
  }
}

}  // namespace
}  // namespace amptune
