// Every API difference between the LibTorch versions amptune builds against (Debian's 1.13 and
// PyTorch 2.x; README.md "Building against another LibTorch"), in one place: the code elsewhere calls
// these and never tests TORCH_VERSION itself. Header-only; included by the torch libraries'
// sources that need it (not by torch-free headers).
#pragma once

#include <ATen/Functions.h>
#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include <stdexcept>
#include <variant>
#include <vector>

// LibTorch 2.x splits a c10d process group into a front and per-device backends; the backends
// (ProcessGroupGloo, ProcessGroupNCCL) keep the collective API of 1.13's ProcessGroup. (Declared
// here; dist/group.cpp includes the c10d headers.)
#if TORCH_VERSION_MAJOR >= 2
namespace c10d {
class Backend;
}
namespace amptune::compat {
using C10dBackend = c10d::Backend;
}
#else
namespace c10d {
class ProcessGroup;
}
namespace amptune::compat {
using C10dBackend = c10d::ProcessGroup;
}
#endif

namespace amptune::compat {

// Native autocast state of the CPU or CUDA: LibTorch 2.4 replaced the per-device setters with
// set_autocast_enabled(DeviceType, bool) and set_autocast_dtype(DeviceType, ScalarType); 1.13
// has set_cpu_enabled / set_enabled (CUDA) and set_autocast_cpu_dtype / set_autocast_gpu_dtype.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
inline bool autocast_enabled(bool cuda) {
  return at::autocast::is_autocast_enabled(cuda ? at::kCUDA : at::kCPU);
}
inline void set_autocast_enabled(bool cuda, bool on) {
  at::autocast::set_autocast_enabled(cuda ? at::kCUDA : at::kCPU, on);
}
inline at::ScalarType autocast_dtype(bool cuda) {
  return at::autocast::get_autocast_dtype(cuda ? at::kCUDA : at::kCPU);
}
inline void set_autocast_dtype(bool cuda, at::ScalarType t) {
  at::autocast::set_autocast_dtype(cuda ? at::kCUDA : at::kCPU, t);
}
#else
inline bool autocast_enabled(bool cuda) {
  return cuda ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
}
inline void set_autocast_enabled(bool cuda, bool on) {
  if (cuda) {
    at::autocast::set_enabled(on);
  } else {
    at::autocast::set_cpu_enabled(on);
  }
}
inline at::ScalarType autocast_dtype(bool cuda) {
  return cuda ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
}
inline void set_autocast_dtype(bool cuda, at::ScalarType t) {
  if (cuda) {
    at::autocast::set_autocast_gpu_dtype(t);
  } else {
    at::autocast::set_autocast_cpu_dtype(t);
  }
}
#endif

// LibTorch's fused unscale-and-check of the loss scaler's gradients,
// at::_amp_foreach_non_finite_check_and_unscale_: CUDA in every version amptune builds against;
// the CPU kernel is in 2.11's dispatch table and not in 1.13's (switched on from 2.4, the versions
// between unchecked). amp/scaler.cpp asks this before calling it on a CPU tensor.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
inline constexpr bool kCpuAmpUnscale = true;
#else
inline constexpr bool kCpuAmpUnscale = false;
#endif

// dst[i].copy_(src[i]) for every i (converting to dst's dtype): one multi-tensor
// at::_foreach_copy_ where LibTorch has it (2.x; its CUDA kernel converts as copy_ does, its CPU
// one is the loop), the loop in 1.13.
inline void foreach_copy(const std::vector<at::Tensor>& dst, const std::vector<at::Tensor>& src) {
#if TORCH_VERSION_MAJOR >= 2
  if (!dst.empty()) at::_foreach_copy_(dst, src);
#else
  for (size_t i = 0; i < dst.size(); ++i) dst[i].copy_(src[i]);
#endif
}

// PyTorch's float8 dtypes (2.1 and later): x (fp32) cast to float8_e4m3fn (`e4m3`) or
// float8_e5m2 and back. amp/fp8.h's rounding is held to it by tests/unit/amp/fp8_test.cpp.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
inline constexpr bool kHasFloat8 = true;
inline at::Tensor through_float8(const at::Tensor& x, bool e4m3) {
  return x.to(e4m3 ? at::kFloat8_e4m3fn : at::kFloat8_e5m2).to(at::kFloat);
}
#else
inline constexpr bool kHasFloat8 = false;
inline at::Tensor through_float8(const at::Tensor&, bool) {
  throw std::logic_error("this LibTorch has no float8 dtype");
}
#endif

// torch._scaled_mm (amp.fp8.gemm scaled_mm, amp/fp8_gemm.h): a (row-major, fp8) times b
// (column-major, fp8), each operand's fp32 accumulation times scale_a * scale_b (0-dim fp32),
// out in fp32, without fast accumulation. 2.5 and later (its signature of 2.4 on: required scale
// tensors, one result). to_float8: PyTorch's cast of fp32 `q` to float8_e4m3fn (`e4m3`) or
// float8_e5m2, round to nearest even (NaN or inf beyond the format's max: clamp first).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
inline constexpr bool kHasScaledMm = true;
inline at::Tensor to_float8(const at::Tensor& q, bool e4m3) {
  return q.to(e4m3 ? at::kFloat8_e4m3fn : at::kFloat8_e5m2);
}
inline at::Tensor scaled_mm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a,
                            const at::Tensor& scale_b) {
  return at::_scaled_mm(a, b, scale_a, scale_b, {}, {}, at::kFloat, /*use_fast_accum=*/false);
}
#else
inline constexpr bool kHasScaledMm = false;
inline at::Tensor to_float8(const at::Tensor&, bool) {
  throw std::logic_error("this LibTorch has no torch._scaled_mm");
}
inline at::Tensor scaled_mm(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                            const at::Tensor&) {
  throw std::logic_error("this LibTorch has no torch._scaled_mm");
}
#endif

// The alternative T of a variant (a module option such as a convolution's padding), or nullptr:
// LibTorch 1.13's options hold c10::variant, 2.x's std::variant; the unqualified get_if finds
// the one that fits.
template <class T, class V>
const T* alternative(const V& v) {
  using namespace std;
  using namespace c10;
  return get_if<T>(&v);
}

}  // namespace amptune::compat
