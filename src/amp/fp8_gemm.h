// FP8 GEMMs (amp.fp8.*, docs/AMP.md "FP8: the recipe"): Transformer Engine's recipe on fp32
// kernels, at the GEMM boundaries - amp::conv2d / conv_transpose2d / linear (amp/emulate.h) for
// the built-in models, a TorchScript graph's aten::linear and convolutions (amp/op_emulation.h).
//
// One FP8 GEMM, y = op(x, w) + b under the base precision P (the opt level's: O0 fp32, O1-O3
// amp.dtype), is
//   y = P_out( Gq( op( Qx(P(x)), Qw(P(w)) ) ) + P(b) )
// P(v): the operand the base precision gives the GEMM today (emulate: rounded onto the grid with
// its gradient; native: the fp32 value of what autocast or the cast model holds; fp32: v).
// Qx / Qw: forward round_fp8(v * s) * (1 / s) in E4M3 with the slot's scale s (fp8.h), backward
// identity, so the op's own backward computes dgrad = op_bw(Gq(g), Qw(w)) and wgrad =
// op_bw(Qx(x), Gq(g)) - Transformer Engine's three FP8 GEMMs. Gq: forward identity, backward the
// same fake quantisation of the incoming gradient with the grad_output slot (E5M2 under
// format hybrid, E4M3 under e4m3; delayed: the scale in force at the forward pass, current: the
// gradient's own). The bias is added outside the quantised op, so its gradient
// is not quantised (as Transformer Engine's). P_out: the base precision's output (emulate:
// rounded; native: cast to the autocast / model dtype; the op itself runs in fp32 with autocast
// off, so native and emulated FP8 compute the same values).
//
// amp.fp8.gemm scaled_mm (Fp8Gemm::linear; LibTorch 2.5+): a Linear's three GEMMs take the
// same operands as float8 tensors through torch._scaled_mm - y = (qx qw^T) / (s_x s_w),
// dgrad = (qg qw) / (s_g s_w), wgrad = (qg^T qx) / (s_g s_x), q the fp8 values round_fp8(v * s)
// of the same scales, accumulated in fp32 without fast accumulation - so the values are the
// emulation's up to the order of fp32 rounding (the emulation multiplies each operand by 1/s,
// _scaled_mm the accumulator). Convolutions stay emulated.
//
// Which GEMMs: those of a module call that is not in amp.fp8.skip_modules nor amp.fp32_modules
// (by name or an ancestor's) and not inside an fp32 region. Slot keys (Fp8State): the module's
// name, plus "#k" for the k-th FP8 GEMM within one call of that module when k > 0. Every
// quantisation is reported to Fp8State::observer() when one is set (the grad_output one from the
// thread that runs the backward pass). Under dynamic loss scaling the gradient quantised is the
// scaled one (as in Transformer Engine, whose amax histories see scaled gradients).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <torch/types.h>

#include "amp/fp8.h"
#include "amp/policy.h"

namespace amptune::amp {

// amp.fp8's scaling rule, and the format of each tensor role (E4M3 but grad_output under hybrid).
Fp8Scaling fp8_scaling(const Fp8Policy& policy);
Fp8Format fp8_format(const Fp8Policy& policy, Fp8Role role);

// Installs `state` as this thread's FP8 scaling state until destruction (restores the previous
// one). `record` false: quantisations use the scales in force and record no amax (evaluation).
// A policy with amp.fp8.enabled needs one installed around its forward passes.
class ScopedFp8 {
 public:
  explicit ScopedFp8(std::shared_ptr<Fp8State> state, bool record = true);
  ~ScopedFp8();
  ScopedFp8(const ScopedFp8&) = delete;
  ScopedFp8& operator=(const ScopedFp8&) = delete;

 private:
  std::shared_ptr<Fp8State> previous_;
  bool previous_record_;
};

// Whether this build's LibTorch has torch._scaled_mm (2.5 or later).
bool scaled_mm_built();
// amp.fp8.gemm scaled_mm in this build: nothing when scaled_mm_built(), else ConfigError naming
// amp.fp8.gemm, the version and the emulate alternative. A sweep's plan asks it before anything
// trains (train/plan.h validate_config).
void check_scaled_mm_build();
// amp.fp8.gemm scaled_mm on `device`: check_scaled_mm_build, then a 16x16x16 product of E4M3 and
// E5M2 ones tried there (ConfigError with the same way out when it fails). A run's amp::Engine
// asks it once, on the device the run trains on.
void check_scaled_mm(const torch::Device& device);

// One FP8 GEMM about to run on this thread (see the top of this file). While it lives, native
// autocast is off on this thread.
class Fp8Gemm {
 public:
  // The GEMM the code is about to run, or unset when it runs no FP8 (no FP8 policy, or the module
  // call it runs in is kept out). Throws std::logic_error for an FP8 policy without a state
  // (ScopedFp8) or a module map (ScopedModules) installed.
  static std::unique_ptr<Fp8Gemm> begin();
  ~Fp8Gemm();
  Fp8Gemm(const Fp8Gemm&) = delete;
  Fp8Gemm& operator=(const Fp8Gemm&) = delete;

  const std::string& key() const { return key_; }
  // Qx(P(x)), Qw(P(w)), P(b) (undefined stays undefined).
  torch::Tensor input(const torch::Tensor& x);
  torch::Tensor weight(const torch::Tensor& w);
  torch::Tensor bias(const torch::Tensor& b) const;
  // P_out(Gq(y) + b): `b` from bias() or undefined; `channel_dim` the dimension the bias runs
  // along (1 for a convolution, -1 for a linear).
  torch::Tensor output(const torch::Tensor& y, const torch::Tensor& b, int64_t channel_dim) const;
  // Whether a Linear's GEMMs run through torch._scaled_mm (amp.fp8.gemm scaled_mm).
  bool by_scaled_mm() const;
  // y = x w^T + b, the whole FP8 GEMM of a Linear: run() with torch::linear, or under
  // amp.fp8.gemm scaled_mm the same quantisations (scales, amaxes, observer calls in the same
  // order) with the three GEMMs through torch._scaled_mm on float8 operands (x reshaped to 2-D,
  // every dimension padded with zeros to a non-zero multiple of 16) and fp32 accumulation: the
  // emulation's values up to the order of fp32 rounding.
  torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b);
  // The whole GEMM with `op` the bias-free op of (input, weight).
  torch::Tensor run(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                    const std::function<torch::Tensor(const torch::Tensor&,
                                                      const torch::Tensor&)>& op,
                    int64_t channel_dim);

 private:
  Fp8Gemm(std::string key, const Policy& policy, Fp8State& state, bool record);
  // The scale of base value `x` in `role` (its amax recorded, the observer told).
  float scale_of(const torch::Tensor& x, Fp8Role role);
  torch::Tensor quantise(const torch::Tensor& v, Fp8Role role);
  // P_out(y + b), no quantisation of y's gradient.
  torch::Tensor finish(const torch::Tensor& y, const torch::Tensor& b, int64_t channel_dim) const;
  torch::Tensor base(const torch::Tensor& v) const;

  std::string key_;
  const Policy& policy_;
  Fp8State& state_;
  bool record_;
  bool autocast_paused_ = false;
};

}  // namespace amptune::amp
