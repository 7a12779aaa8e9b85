// Low-precision emulation on fp32 kernels, and the boundary calls model code makes.
//
// Rounding: round_to_grid(x) = x.to(kHalf|kBFloat16).to(x.dtype()) - the value the device would
// store: fp16 overflow (> 65504 after rounding) gives inf, values below half the smallest
// subnormal (2^-25) flush to 0, subnormals keep their reduced precision, ties go to even.
// Contiguous CPU float tensors are rounded in one fused pass (F16C / bit arithmetic), bit-identical
// to the two conversions.
// round_through() is the same with autograd: the forward value and the gradient flowing back are
// both rounded (a low-precision tensor's gradient is low precision too).
//
// The policy in force is thread-local (autocast's state is thread-local as well): the trainer
// installs it with ScopedPolicy around the forward passes of a run. Model code calls the
// boundary functions below; with no policy, O0, or the native backend (where autocast or real
// low-precision weights do the work) they are plain fp32 calls, so O0 results are unchanged.
//
// Boundaries (emulate backend):
//   conv2d / conv_transpose2d / linear: autocast's low-precision list. Inputs, weight, bias and
//     output are rounded (O1, O2, O3); accumulation stays fp32, as on tensor cores.
//   input_dtype_op(y): the output of an op autocast runs in its input's dtype (BatchNorm, relu,
//     pooling, add) whose input is low precision: rounded under O1 (its input came from a conv),
//     O2 and O3. BatchNorm itself computes in fp32; its parameters are fp32 unless O3 (or O2
//     with keep_batchnorm_fp32 false), which the trainer's Engine handles.
//   fp32_op(y): the output of an op on autocast's fp32 list (softmax, log_softmax, losses,
//     norms, exp/log/pow, sum/mean): left fp32 under O1; rounded under O2/O3 (no per-op casts).
//   model_input(x) / model_output(y): O2/O3 cast the input to the model type on entry and the
//     output back to fp32 (emulate: the input is rounded, the output left as it is).
#pragma once

#include <memory>

#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/types.h>

#include "amp/policy.h"

namespace amptune::amp {

// at::kHalf or at::kBFloat16.
torch::ScalarType scalar_type(Dtype dtype);

// x.to(low).to(x.dtype()) without autograd.
torch::Tensor round_to_grid(const torch::Tensor& x, Dtype dtype);
// round_to_grid with a backward that rounds the incoming gradient onto the same grid.
torch::Tensor round_through(const torch::Tensor& x, Dtype dtype);

// Installs `policy` as this thread's policy until destruction (restores the previous one).
class ScopedPolicy {
 public:
  explicit ScopedPolicy(const Policy& policy);
  ~ScopedPolicy();
  ScopedPolicy(const ScopedPolicy&) = delete;
  ScopedPolicy& operator=(const ScopedPolicy&) = delete;

 private:
  std::shared_ptr<const Policy> previous_;
};

// This thread's policy, or nullptr (plain fp32).
const Policy* current_policy();
// True when the current policy emulates (backend emulate, O1-O3).
bool emulating();

torch::Tensor conv2d(torch::nn::Conv2dImpl& conv, const torch::Tensor& x);
torch::Tensor conv_transpose2d(torch::nn::ConvTranspose2dImpl& conv, const torch::Tensor& x);
torch::Tensor linear(torch::nn::LinearImpl& linear, const torch::Tensor& x);
torch::Tensor input_dtype_op(const torch::Tensor& y);
torch::Tensor fp32_op(const torch::Tensor& y);
torch::Tensor model_input(const torch::Tensor& x);
torch::Tensor model_output(const torch::Tensor& y);

// Native autocast for the current thread while alive (CPU bf16 O1; CUDA O1 fp16/bf16); clears
// the autocast weight-cast cache on destruction (as Python's context manager does), so cached
// low-precision copies never outlive an optimizer step. A no-op unless policy is O1 native.
class AutocastGuard {
 public:
  explicit AutocastGuard(const Policy& policy);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool active_ = false;
  bool cuda_ = false;
  bool prev_enabled_ = false;
  torch::ScalarType prev_dtype_ = torch::kFloat;
};

}  // namespace amptune::amp
