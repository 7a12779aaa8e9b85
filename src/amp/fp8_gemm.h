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
  // The whole GEMM with `op` the bias-free op of (input, weight).
  torch::Tensor run(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                    const std::function<torch::Tensor(const torch::Tensor&,
                                                      const torch::Tensor&)>& op,
                    int64_t channel_dim);

 private:
  Fp8Gemm(std::string key, const Policy& policy, Fp8State& state, bool record);
  torch::Tensor quantise(const torch::Tensor& v, Fp8Role role);
  torch::Tensor base(const torch::Tensor& v) const;

  std::string key_;
  const Policy& policy_;
  Fp8State& state_;
  bool record_;
  bool autocast_paused_ = false;
};

}  // namespace amptune::amp
